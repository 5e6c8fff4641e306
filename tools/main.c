/* tools/main.c: placeholder until the command line lands. */
#include <stdio.h>
int main(void)
{
    fputs("tessel: not built yet\n", stderr);
    return 1;
}
