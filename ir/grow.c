/*
 * grow.c: growable heap arrays and list membership, the two loops every
 * layer used to write by hand.
 */
#include "ir.h"

#include <string.h>

/* The capacity for need elements (need > cap): cap doubled (from 8) until
 * it holds them; 0 when the bytes would overflow size_t. */
static int64_t next_cap(int64_t cap, int64_t need, size_t elem)
{
    if (need < 0 || elem == 0)
        return 0;
    int64_t nc = cap > 0 ? cap : 8;
    while (nc < need)
        nc = nc > INT64_MAX / 2 ? need : nc * 2;
    return (uint64_t)nc > SIZE_MAX / elem ? 0 : nc;
}

bool ir_grow_(void *slot, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    int64_t nc = next_cap(*cap, need, elem);
    if (!nc)
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

bool ir_arena_grow_(IrArena *a, void *slot, int64_t *cap, int64_t n, int64_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    int64_t nc = next_cap(*cap, need, elem);
    void *nv = nc ? ir_alloc_array(a, (size_t)nc, elem) : NULL;
    if (!nv)
        return false;
    void *old;
    memcpy(&old, slot, sizeof old);
    if (n > 0)
        memcpy(nv, old, (size_t)n * elem);
    memcpy(slot, &nv, sizeof nv);
    *cap = nc;
    return true;
}

uint32_t ir_name_slot(const char *s, size_t n)
{
    /* FNV-1a over the whole name: op and attribute names are short, and
     * names that share their ends (all-gather, all-reduce) must not share
     * a slot. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return (h ^ (h >> 16)) % IR_NAME_SLOTS;
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
