/* ir/parse.c: placeholder until its owner lands it. */
#include "ir.h"

IrParseOptions ir_default_parse_options(void)
{
    IrParseOptions o = {0};
    return o;
}

IrStatus ir_parse(const char *file, const char *text, size_t len, const IrParseOptions *opt, IrModule **out, IrDiag *d)
{
    (void)file;
    (void)text;
    (void)len;
    (void)opt;
    (void)out;
    (void)d;
    return IR_EUNSUPPORTED;
}

IrStatus ir_parse_file(const char *path, const IrParseOptions *opt, IrModule **out, IrDiag *d)
{
    (void)path;
    (void)opt;
    (void)out;
    (void)d;
    return IR_EUNSUPPORTED;
}

