/*
 * arena.c: the bump allocator every module lives in, and the one allocation
 * hook of the project (ts_malloc and friends) through which failure
 * injection makes the Nth allocation fail.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the allocation hook ---- */

/* Atomic: device threads allocate concurrently. */
static _Atomic long fail_after; /* 0: never fail; N: the Nth allocation from now fails */
static _Atomic long alloc_count;

void ts_fail_alloc_after(long n)
{
    fail_after = n;
}

long ts_alloc_count(void)
{
    return alloc_count;
}

/* True when this allocation must fail (failure injection). */
static bool inject_failure(void)
{
    alloc_count++;
    if (fail_after <= 0)
        return false;
    return --fail_after == 0;
}

void *ts_malloc(size_t n)
{
    if (inject_failure())
        return NULL;
    return malloc(n ? n : 1);
}

void *ts_calloc(size_t n, size_t elem)
{
    if (inject_failure())
        return NULL;
    if (n == 0 || elem == 0)
        return calloc(1, 1);
    return calloc(n, elem);
}

void *ts_realloc(void *p, size_t n)
{
    if (inject_failure())
        return NULL;
    return realloc(p, n ? n : 1);
}

void ts_free(void *p)
{
    free(p);
}

char *ts_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = ts_malloc(n);
    if (r)
        memcpy(r, s, n);
    return r;
}

/* ---- the arena ---- */

/* Blocks are chained; a request larger than the default block size gets a
 * block of its own, so huge literals do not waste a whole default block. */
typedef struct Block {
    struct Block *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
} Block;

struct IrArena {
    Block *head;
    size_t reserved;
};

enum { BLOCK_SIZE = 64 * 1024 };

IrArena *ir_arena_new(void)
{
    IrArena *a = ts_calloc(1, sizeof *a);
    return a;
}

void ir_arena_free(IrArena *a)
{
    if (!a)
        return;
    Block *b = a->head;
    while (b) {
        Block *next = b->next;
        ts_free(b);
        b = next;
    }
    ts_free(a);
}

void *ir_alloc(IrArena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    Block *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bs = size > BLOCK_SIZE / 4 ? size : BLOCK_SIZE;
        if (bs > SIZE_MAX - sizeof(Block))
            return NULL;
        Block *nb = ts_malloc(sizeof(Block) + bs);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->size = bs;
        a->reserved += bs;
        if (b && bs != BLOCK_SIZE) {
            /* A big private block goes behind the current one so the
             * current block keeps serving small requests. */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

void *ir_alloc_array(IrArena *a, size_t n, size_t elem)
{
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    return ir_alloc(a, n * elem);
}

char *ir_strndup(IrArena *a, const char *s, size_t n)
{
    char *r = ir_alloc(a, n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    return r;
}

char *ir_strdup(IrArena *a, const char *s)
{
    return ir_strndup(a, s, strlen(s));
}

char *ir_sprintf(IrArena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *r = ir_alloc(a, (size_t)n + 1);
    if (!r)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(r, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return r;
}

size_t ir_arena_bytes(const IrArena *a)
{
    return a->reserved;
}
