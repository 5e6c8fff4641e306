/*
 * diag.c: error records. Library code records the first error of an
 * operation with its file, line and column; tools/ formats it the way
 * compilers do: `tessel: FILE:LINE:COL: error: MSG`, the line, a caret.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

static char *vformat(const char *fmt, va_list ap)
{
    IrStrBuf b = {0};
    ir_sb_vprintf(&b, fmt, ap);
    return ir_sb_take(&b);
}

/* The text of line `line` (1-based) of `src`, without its newline. */
static char *extract_line(const char *src, int32_t line)
{
    const char *p = src;
    for (int32_t l = 1; l < line; l++) {
        p = strchr(p, '\n');
        if (!p)
            return NULL;
        p++;
    }
    size_t n = strcspn(p, "\n");
    if (n > 0 && p[n - 1] == '\r')
        n--;
    char *r = ts_malloc(n + 1);
    if (r) {
        memcpy(r, p, n);
        r[n] = 0;
    }
    return r;
}

IrStatus ir_verror(IrDiag *d, IrStatus st, const char *file, const char *src, IrPos pos,
                   const char *fmt, va_list ap)
{
    if (!d)
        return st;
    if (d->status != IR_OK)
        return st; /* keep the first error */
    d->status = st;
    d->pos = pos;
    d->file = file ? ts_strdup(file) : NULL;
    d->line_text = (src && pos.line > 0) ? extract_line(src, pos.line) : NULL;
    d->msg = vformat(fmt, ap);
    return st;
}

IrStatus ir_error(IrDiag *d, IrStatus st, const char *file, const char *src, IrPos pos,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ir_verror(d, st, file, src, pos, fmt, ap);
    va_end(ap);
    return st;
}

IrStatus ir_oom(IrDiag *d, const char *during)
{
    if (during)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory %s", during);
    return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

/* s into b with its control bytes (but tab, and newline where `lines`) as
 * \xNN: a name, a key or a line from a user's file is echoed as text,
 * never as a terminal's escape sequence. */
static void put_shown(IrStrBuf *b, const char *s, bool lines)
{
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t' && !(lines && c == '\n')) || c == 0x7f)
            ir_sb_printf(b, "\\x%02x", c);
        else
            ir_sb_putn(b, p, 1);
    }
}

char *ir_diag_format(const IrDiag *d, const char *prog)
{
    const char *msg = d->msg ? d->msg : "out of memory";
    char loc[64] = "";
    if (d->pos.line > 0)
        snprintf(loc, sizeof loc, ":%d:%d", (int)d->pos.line, (int)d->pos.col);
    IrStrBuf b = {0};
    ir_sb_printf(&b, "%s: ", prog);
    if (d->file)
        put_shown(&b, d->file, false);
    ir_sb_printf(&b, "%s%serror: ", loc, (d->file || d->pos.line > 0) ? ": " : "");
    put_shown(&b, msg, true);
    ir_sb_putn(&b, "\n", 1);
    if (d->line_text) {
        ir_sb_puts(&b, "  ");
        put_shown(&b, d->line_text, false);
        ir_sb_puts(&b, "\n  ");
        /* The caret sits under column col: tabs in the line are kept so
         * it lines up in a terminal, and a byte shown as \xNN takes 4. */
        int32_t col = d->pos.col > 0 ? d->pos.col : 1;
        size_t len = strlen(d->line_text); /* once: the caret is linear in its column */
        for (int32_t i = 1; i < col; i++) {
            unsigned char c = (size_t)(i - 1) < len ? (unsigned char)d->line_text[i - 1] : ' ';
            if (c == '\t')
                ir_sb_putn(&b, "\t", 1);
            else
                ir_sb_putn(&b, "    ", (c < 0x20 || c == 0x7f) ? 4 : 1);
        }
        ir_sb_puts(&b, "^\n");
    }
    return ir_sb_take(&b);
}

void ir_diag_clear(IrDiag *d)
{
    ts_free(d->file);
    ts_free(d->line_text);
    ts_free(d->msg);
    memset(d, 0, sizeof *d);
}
