/*
 * strbuf.c: the one growable heap string of the project, for printers and
 * dumps. Appending never fails at the call: the first refused allocation
 * sets a sticky `oom` flag, later appends do nothing, and ir_sb_take
 * reports it once at the end (so a printer checks once, not per line).
 * Memory comes from ts_realloc, so failure injection counts it.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

/* Room for k more bytes and the terminating NUL; false (and oom) when the
 * size overflows or memory is refused. Doubles, so n appends cost O(n). */
static bool sb_room(IrStrBuf *b, size_t k)
{
    if (b->oom)
        return false;
    if (k > SIZE_MAX - b->n - 1) {
        b->oom = true;
        return false;
    }
    size_t need = b->n + k + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *ns = ts_realloc(b->s, cap);
    if (!ns) {
        b->oom = true;
        return false;
    }
    b->s = ns;
    b->cap = cap;
    return true;
}

void ir_sb_putn(IrStrBuf *b, const char *s, size_t k)
{
    if (!sb_room(b, k))
        return;
    memcpy(b->s + b->n, s, k);
    b->n += k;
    b->s[b->n] = 0;
}

void ir_sb_puts(IrStrBuf *b, const char *s)
{
    ir_sb_putn(b, s, strlen(s));
}

void ir_sb_vprintf(IrStrBuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (k < 0) {
        b->oom = true;
        return;
    }
    /* Formatted in place: no temporary, whatever the length. */
    if (!sb_room(b, (size_t)k))
        return;
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    b->n += (size_t)k;
}

void ir_sb_printf(IrStrBuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ir_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void ir_sb_put_owned(IrStrBuf *b, char *s)
{
    if (!s) {
        b->oom = true;
        return;
    }
    ir_sb_puts(b, s);
    ts_free(s);
}

char *ir_sb_take(IrStrBuf *b)
{
    char *s = b->s;
    bool oom = b->oom;
    *b = (IrStrBuf){0};
    if (oom) {
        ts_free(s);
        return NULL;
    }
    return s ? s : ts_strdup("");
}

void ir_sb_free(IrStrBuf *b)
{
    ts_free(b->s);
    *b = (IrStrBuf){0};
}
