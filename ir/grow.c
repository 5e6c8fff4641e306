/*
 * grow.c: growable heap arrays and list membership, the two loops every
 * layer used to write by hand.
 */
#include "ir.h"

#include <string.h>

bool ir_grow_(void *slot, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    if (need < 0 || elem == 0)
        return false;
    /* Double from 8, or jump straight to `need` where doubling falls short. */
    int64_t nc = *cap > 0 ? *cap : 8;
    while (nc < need)
        nc = nc > INT64_MAX / 2 ? need : nc * 2;
    if ((uint64_t)nc > SIZE_MAX / elem)
        return false;
    /* The caller's pointer is read and written as bytes, so any T* works
     * through one function without type punning through void **. */
    void *old;
    memcpy(&old, slot, sizeof old);
    void *nv = ts_realloc(old, (size_t)nc * elem);
    if (!nv)
        return false;
    memcpy(slot, &nv, sizeof nv);
    *cap = nc;
    return true;
}

int32_t ir_str_index(const char *s, const char *const *list)
{
    for (int32_t i = 0; s && list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return i;
    return -1;
}

int32_t ir_list_index(const IrI64List *l, int64_t x)
{
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == x)
            return i;
    return -1;
}

bool ir_list_has(const IrI64List *l, int64_t x)
{
    return ir_list_index(l, x) >= 0;
}
