/*
 * lex.c: the HLO text lexer (see lex.h). Tokens carry byte spans and
 * line:column positions into a buffer that is never read past `len`;
 * values (integers, strings) are decoded on demand by the parser, so
 * lexing itself cannot fail except on an unterminated string or comment.
 */
#include "lex.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- scanning ---- */

/* A scan cursor: byte offset, its line, and where that line starts (the
 * column is off - line_start + 1, in bytes: kept this way, moving over a
 * token is one addition, not a step per byte). */
typedef struct Cursor {
    size_t off;
    int32_t line;
    size_t line_start;
} Cursor;

static IrPos cpos(const Cursor *c)
{
    return (IrPos){c->line, (int32_t)(c->off - c->line_start + 1)};
}

/* The Lexer keeps (line, col); cursors are made from and stored into it. */
static Cursor cursor_at(size_t off, int32_t line, int32_t col)
{
    return (Cursor){off, line, off - (size_t)(col - 1)};
}

/* Byte classes, one table lookup each (names are most of the text). */
enum { C_DIGIT = 1, C_ALPHA = 2, C_NAME = 4, C_SPACE = 8 };
#define R10(c, v) [c] = v, [c + 1] = v, [c + 2] = v, [c + 3] = v, [c + 4] = v, \
                  [c + 5] = v, [c + 6] = v, [c + 7] = v, [c + 8] = v, [c + 9] = v
#define LETTERS(a, v) R10(a, v), R10(a + 10, v), [a + 20] = v, [a + 21] = v, [a + 22] = v, \
                      [a + 23] = v, [a + 24] = v, [a + 25] = v
static const unsigned char cls[256] = {
    R10('0', C_DIGIT | C_NAME),
    LETTERS('a', C_ALPHA | C_NAME),
    LETTERS('A', C_ALPHA | C_NAME),
    ['_'] = C_ALPHA | C_NAME,
    ['.'] = C_NAME,
    ['-'] = C_NAME,
    [' '] = C_SPACE, ['\t'] = C_SPACE, ['\n'] = C_SPACE, ['\r'] = C_SPACE, ['\f'] = C_SPACE, ['\v'] = C_SPACE,
};
#undef LETTERS
#undef R10

static bool is_digit(char c)
{
    return cls[(unsigned char)c] & C_DIGIT;
}

static bool is_alpha(char c)
{
    return cls[(unsigned char)c] & C_ALPHA;
}

/* Characters of a name after its first: XLA allows '.' and '-' inside. */
static bool is_name_char(char c)
{
    return cls[(unsigned char)c] & C_NAME;
}

static bool is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char at(const Lexer *L, size_t off)
{
    return off < L->len ? L->text[off] : '\0';
}

static void bump(const Lexer *L, Cursor *c)
{
    if (c->off >= L->len)
        return;
    if (L->text[c->off] == '\n') {
        c->line++;
        c->line_start = c->off + 1;
    }
    c->off++;
}

/* Move over n bytes (never past the end), counting the newlines in them. */
static void bump_n(const Lexer *L, Cursor *c, size_t n)
{
    size_t end = n < L->len - c->off ? c->off + n : L->len;
    const char *t = L->text;
    for (const char *p = memchr(t + c->off, '\n', end - c->off); p;
         p = memchr(p + 1, '\n', end - (size_t)(p + 1 - t))) {
        c->line++;
        c->line_start = (size_t)(p - t) + 1;
    }
    c->off = end;
}

static bool word_at(const Lexer *L, size_t off, const char *w)
{
    size_t n = strlen(w);
    if (off + n > L->len || memcmp(L->text + off, w, n) != 0)
        return false;
    return !is_name_char(at(L, off + n));
}

/* Skip whitespace and comments. Returns false (with *bad set) on an
 * unterminated block comment, leaving the cursor at its start. */
static bool skip_space(const Lexer *L, Cursor *c, const char **bad)
{
    for (;;) {
        char ch = at(L, c->off);
        if (c->off >= L->len)
            return true;
        if (cls[(unsigned char)ch] & C_SPACE) {
            /* A run of blanks at once (indentation): only '\n' moves the line. */
            const char *t = L->text;
            size_t p = c->off;
            do {
                if (t[p] == '\n') {
                    c->line++;
                    c->line_start = p + 1;
                }
                p++;
            } while (p < L->len && (cls[(unsigned char)t[p]] & C_SPACE));
            c->off = p;
        } else if (ch == '/' && at(L, c->off + 1) == '/') {
            const char *nl = memchr(L->text + c->off, '\n', L->len - c->off);
            c->off = nl ? (size_t)(nl - L->text) : L->len; /* the newline stays */
        } else if (ch == '/' && at(L, c->off + 1) == '*') {
            Cursor start = *c;
            bump_n(L, c, 2);
            while (c->off < L->len && !(L->text[c->off] == '*' && at(L, c->off + 1) == '/'))
                bump(L, c);
            if (c->off >= L->len) {
                *c = start;
                *bad = "unterminated comment";
                return false;
            }
            bump_n(L, c, 2);
        } else {
            return true;
        }
    }
}

/* Length of a number starting at off (after an optional '-'), and whether
 * it is a float; 0 if none. Grammar:
 *   -?(inf|nan) | -?0[xX]hex(.hex)?([pP][+-]?digits)? | -?digits(.digits)?([eE][+-]?digits)?
 * Example: "-1.5e3" -> 6, float; "42" -> 2, int; "3x3" -> 1, int. */
static size_t scan_number(const Lexer *L, size_t off, bool *is_float)
{
    size_t p = off;
    *is_float = false;
    if (at(L, p) == '-')
        p++;
    char c0 = at(L, p);
    if ((c0 == 'i' || c0 == 'n') && (word_at(L, p, "inf") || word_at(L, p, "nan"))) {
        if (p == off)
            return 0; /* bare inf/nan are names; the literal parser reads them */
        *is_float = true;
        return p + 3 - off;
    }
    if (at(L, p) == '0' && (at(L, p + 1) == 'x' || at(L, p + 1) == 'X') && is_hex(at(L, p + 2))) {
        p += 2;
        while (is_hex(at(L, p)))
            p++;
        if (at(L, p) == '.') {
            p++;
            while (is_hex(at(L, p)))
                p++;
        }
        if ((at(L, p) == 'p' || at(L, p) == 'P') &&
            (is_digit(at(L, p + 1)) || ((at(L, p + 1) == '-' || at(L, p + 1) == '+') &&
                                        is_digit(at(L, p + 2))))) {
            p += 2;
            while (is_digit(at(L, p)))
                p++;
        }
        *is_float = true;
        return p - off;
    }
    if (!is_digit(at(L, p)))
        return 0;
    while (is_digit(at(L, p)))
        p++;
    if (at(L, p) == '.' && at(L, p + 1) != '.') {
        *is_float = true;
        p++;
        while (is_digit(at(L, p)))
            p++;
    }
    if ((at(L, p) == 'e' || at(L, p) == 'E') &&
        (is_digit(at(L, p + 1)) ||
         ((at(L, p + 1) == '-' || at(L, p + 1) == '+') && is_digit(at(L, p + 2))))) {
        *is_float = true;
        p += 2;
        while (is_digit(at(L, p)))
            p++;
    }
    return p - off;
}

/* Scan one token at cursor c (advancing it past the token). */
static void scan(const Lexer *L, Cursor *c, LxTok *t)
{
    const char *s = L->text;
    size_t len = L->len;
    /* The blanks before a token, here (one or a few: a space, an
     * indentation); only a comment takes skip_space's general loop. */
    size_t q = c->off;
    while (q < len && (cls[(unsigned char)s[q]] & C_SPACE)) {
        if (s[q] == '\n') {
            c->line++;
            c->line_start = q + 1;
        }
        q++;
    }
    c->off = q;
    t->bad = NULL;
    if (q < len && s[q] == '/') {
        const char *bad = NULL;
        if (!skip_space(L, c, &bad)) {
            t->kind = LX_BAD;
            t->bad = bad;
            t->start = t->end = c->off;
            t->pos = cpos(c);
            c->off = len; /* nothing after a bad token is read: the next token is EOF */
            return;
        }
    }
    t->start = c->off;
    t->pos = cpos(c);
    if (c->off >= len) {
        t->kind = LX_EOF;
        t->end = c->off;
        return;
    }
    char ch = s[c->off];
    size_t n = 1;
    bool is_float = false;
    if (is_alpha(ch)) {
        /* A name, the commonest token: first, without scan_number. */
        size_t p = c->off + 1;
        while (p < len && is_name_char(s[p]))
            p++;
        t->kind = LX_NAME;
        c->off = p;
        t->end = p;
        return;
    }
    /* Only a digit or '-' can start a number (scan_number's grammar). */
    size_t num = is_digit(ch) || ch == '-' ? scan_number(L, c->off, &is_float) : 0;
    if (num > 0) {
        t->kind = is_float ? LX_FLOAT : LX_INT;
        n = num;
    } else if (ch == '%' && is_name_char(at(L, c->off + 1))) {
        size_t p = c->off + 1;
        while (p < len && is_name_char(s[p]))
            p++;
        t->kind = LX_NAME;
        n = p - c->off;
        t->start++;
    } else if (ch == '"') {
        size_t p = c->off + 1;
        while (p < L->len && L->text[p] != '"')
            p += (L->text[p] == '\\') ? 2 : 1;
        if (p >= L->len) {
            t->kind = LX_BAD;
            t->bad = "unterminated string";
            t->end = t->start;
            c->off = L->len;
            return;
        }
        t->kind = LX_STRING;
        n = p + 1 - c->off;
    } else {
        switch (ch) {
        case '{': t->kind = LX_LBRACE; break;
        case '}': t->kind = LX_RBRACE; break;
        case '(': t->kind = LX_LPAREN; break;
        case ')': t->kind = LX_RPAREN; break;
        case '[': t->kind = LX_LSQUARE; break;
        case ']': t->kind = LX_RSQUARE; break;
        case ',': t->kind = LX_COMMA; break;
        case ':': t->kind = LX_COLON; break;
        case '=': t->kind = LX_EQUAL; break;
        case '-':
            t->kind = at(L, c->off + 1) == '>' ? LX_ARROW : LX_OTHER;
            n = t->kind == LX_ARROW ? 2 : 1;
            break;
        case '<':
            t->kind = at(L, c->off + 1) == '=' ? LX_LEQ : LX_OTHER;
            n = t->kind == LX_LEQ ? 2 : 1;
            break;
        case '.':
            t->kind = (at(L, c->off + 1) == '.' && at(L, c->off + 2) == '.') ? LX_DOTS : LX_OTHER;
            n = t->kind == LX_DOTS ? 3 : 1;
            break;
        default: t->kind = LX_OTHER; break;
        }
    }
    /* Only a string may hold a newline (names, numbers and punctuation
     * never do): other tokens move the cursor without a memchr. */
    if (t->kind == LX_STRING)
        bump_n(L, c, n);
    else
        c->off += n;
    t->end = c->off;
}

void lx_init(Lexer *L, const char *file, const char *text, size_t len, const char *src,
             IrArena *arena, IrDiag *d, const IrLimits *lim)
{
    memset(L, 0, sizeof *L);
    L->text = text ? text : "";
    L->len = text ? len : 0;
    L->line = L->col = 1;
    /* A UTF-8 byte order mark, which Windows editors write at the start
     * of a text file, is no token: skipped, as C compilers and Python's
     * utf-8-sig do (it was "expected HloModule..., found '\xef'"). */
    if (L->len >= 3 && memcmp(L->text, "\xef\xbb\xbf", 3) == 0)
        L->off = 3;
    L->file = file;
    L->src = src;
    L->arena = arena;
    L->d = d;
    /* A limit left at zero (a zeroed IrLimits) means the default. */
    IrLimits def = ir_default_limits();
    L->lim = lim ? *lim : def;
    if (L->lim.max_elements <= 0)
        L->lim.max_elements = def.max_elements;
    if (L->lim.max_rank <= 0)
        L->lim.max_rank = def.max_rank;
    if (L->lim.max_tuple <= 0)
        L->lim.max_tuple = def.max_tuple;
    if (L->lim.max_depth <= 0)
        L->lim.max_depth = def.max_depth;
    if (L->lim.max_name <= 0)
        L->lim.max_name = def.max_name;
    if (L->lim.max_call_depth <= 0)
        L->lim.max_call_depth = def.max_call_depth;
    if (L->lim.max_instructions <= 0)
        L->lim.max_instructions = def.max_instructions;
    L->iota_left = LX_IOTA_BUDGET;
    lx_next(L);
}

/* lx_next's fast path: what a byte starts when it is the whole story of
 * the commonest tokens (a name, a plain decimal integer, one punctuation
 * byte). FAST_NONE: anything else, left to scan. */
enum { FAST_NONE, FAST_NAME, FAST_DIGIT, FAST_PUNCT0 };
#define P(ch, k) [ch] = FAST_PUNCT0 + k
#define R10(c, v) [c] = v, [c + 1] = v, [c + 2] = v, [c + 3] = v, [c + 4] = v, \
                  [c + 5] = v, [c + 6] = v, [c + 7] = v, [c + 8] = v, [c + 9] = v
#define LETTERS(a, v) R10(a, v), R10(a + 10, v), [a + 20] = v, [a + 21] = v, [a + 22] = v, \
                      [a + 23] = v, [a + 24] = v, [a + 25] = v
static const unsigned char fast_start[256] = {
    R10('0', FAST_DIGIT), LETTERS('a', FAST_NAME), LETTERS('A', FAST_NAME), ['_'] = FAST_NAME,
    P('{', LX_LBRACE), P('}', LX_RBRACE), P('(', LX_LPAREN), P(')', LX_RPAREN),
    P('[', LX_LSQUARE), P(']', LX_RSQUARE), P(',', LX_COMMA), P(':', LX_COLON), P('=', LX_EQUAL),
};
#undef LETTERS
#undef R10
#undef P

/* The token at *cur (column *curcol of line L->line) when it is on that
 * line, after at most one space, and of a kind fast_start knows: true
 * with *t and the cursor moved past it as scan would. Most tokens of a module are (a name after ", ", a
 * dimension, a bracket); the rest go to scan. */
static inline __attribute__((always_inline)) bool scan_fast(const Lexer *L, size_t *cur, int32_t *curcol, LxTok *t)
{
    const char *s = L->text;
    size_t len = L->len, off = *cur, p = off;
    if (p < len && s[p] == ' ')
        p++;
    if (p >= len)
        return false;
    unsigned k = fast_start[(unsigned char)s[p]];
    size_t q = p + 1;
    LxKind kind;
    if (k == FAST_NAME) {
        while (q < len && is_name_char(s[q]))
            q++;
        kind = LX_NAME;
    } else if (k == FAST_DIGIT) {
        /* Plain decimal digits, as scan_number reads them: not a hex
         * prefix, a fraction or an exponent (those take scan). */
        if (s[p] == '0' && q < len && (s[q] == 'x' || s[q] == 'X'))
            return false;
        while (q < len && is_digit(s[q]))
            q++;
        if (q < len && (s[q] == '.' || s[q] == 'e' || s[q] == 'E'))
            return false;
        kind = LX_INT;
    } else if (k >= FAST_PUNCT0) {
        kind = (LxKind)(k - FAST_PUNCT0);
    } else {
        return false;
    }
    int32_t col = *curcol + (int32_t)(p - off);
    *t = (LxTok){.kind = kind, .start = p, .end = q, .pos = {L->line, col}, .bad = NULL};
    *cur = q;
    *curcol = col + (int32_t)(q - p);
    return true;
}

void lx_next(Lexer *L)
{
    if (scan_fast(L, &L->off, &L->col, &L->tok))
        return;
    Cursor c = cursor_at(L->off, L->line, L->col);
    scan(L, &c, &L->tok);
    L->off = c.off;
    L->line = c.line;
    L->col = cpos(&c).col;
}

LxTok lx_peek(const Lexer *L)
{
    size_t off = L->off;
    int32_t col = L->col;
    LxTok fast;
    if (scan_fast(L, &off, &col, &fast))
        return fast;
    Cursor c = cursor_at(L->off, L->line, L->col);
    LxTok t;
    scan(L, &c, &t);
    return t;
}

/* Restart scanning at the current token's start (for raw re-reading). The
 * position of a %name is that of its '%', where the cursor restarts. */
static Cursor tok_cursor(const Lexer *L)
{
    size_t off = L->tok.start;
    if (L->tok.kind == LX_NAME && L->tok.start > 0 && L->text[L->tok.start - 1] == '%')
        off--;
    return cursor_at(off, L->tok.pos.line, L->tok.pos.col);
}

/* Continue lexing at cursor c. */
static void resume(Lexer *L, Cursor c)
{
    L->off = c.off;
    L->line = c.line;
    L->col = cpos(&c).col;
    lx_next(L);
}

/* ---- errors ---- */

bool lx_fail(Lexer *L, IrPos pos, const char *fmt, ...)
{
    if (L->st != IR_OK)
        return false;
    L->st = IR_EINPUT;
    /* ir_error reads the source line with string functions: it needs a
     * NUL-terminated copy. */
    char *tmp = NULL;
    const char *src = L->src;
    if (!src && L->len > 0) {
        tmp = ts_malloc(L->len + 1);
        if (tmp) {
            memcpy(tmp, L->text, L->len);
            tmp[L->len] = 0;
        }
        src = tmp;
    }
    va_list ap;
    va_start(ap, fmt);
    ir_verror(L->d, IR_EINPUT, L->file, src, pos, fmt, ap);
    va_end(ap);
    ts_free(tmp);
    return false;
}

bool lx_nomem(Lexer *L)
{
    if (L->st != IR_OK)
        return false;
    L->st = IR_ENOMEM;
    ir_error(L->d, IR_ENOMEM, L->file, NULL, L->tok.pos, "out of memory");
    return false;
}

/* A byte that continues a word to the eye: a name's, a non-ASCII one, or
 * a control byte other than a blank (a NUL or an escape inside a name
 * makes it no name: 'neg\0ate' is one word, not the opcode 'neg'). */
static bool word_byte(char c)
{
    unsigned char u = (unsigned char)c;
    return is_name_char(c) || u >= 0x80 || ((u < 0x20 || u == 0x7f) && !(cls[u] & C_SPACE));
}

size_t lx_word_end(const Lexer *L)
{
    size_t e = L->tok.end;
    bool word = L->tok.kind == LX_NAME || (L->tok.kind == LX_OTHER && (unsigned char)L->text[L->tok.start] >= 0x80);
    while (word && e < L->len && word_byte(L->text[e]))
        e++;
    return e;
}

static const char *word_at_list(void *ctx, int32_t i)
{
    return ((const char *const *)ctx)[i];
}

const char *lx_near(const Lexer *L, const char *const *words)
{
    int32_t n = 0;
    while (words[n])
        n++;
    bool word = L->tok.kind == LX_NAME || (L->tok.kind == LX_OTHER && (unsigned char)L->text[L->tok.start] >= 0x80);
    if (!word)
        return NULL;
    return ir_nearest(lx_text(L), lx_word_end(L) - L->tok.start, n, word_at_list, (void *)words);
}

bool lx_expected_word(Lexer *L, const char *what, const char *const *words)
{
    char buf[64];
    if (L->tok.kind == LX_BAD)
        return lx_fail(L, L->tok.pos, "%s", L->tok.bad);
    const char *near = lx_near(L, words);
    return lx_fail(L, L->tok.pos, "expected %s, found %s%s%s%s", what, lx_describe(L, buf, sizeof buf),
                   near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
}

const char *lx_describe(const Lexer *L, char *buf, size_t n)
{
    switch (L->tok.kind) {
    case LX_EOF:
        return "end of input";
    case LX_BAD:
        return L->tok.bad;
    default:
        break;
    }
    /* A word with a non-ASCII letter is shown whole ('négate', not the
     * name 'n' the lexer stops at), and a UTF-8 character never cut: its
     * lead byte alone prints as a replacement mark on a terminal. */
    size_t len = lx_word_end(L) - L->tok.start;
    size_t whole = len;
    bool pct = L->tok.kind == LX_NAME && L->tok.start > 0 && L->text[L->tok.start - 1] == '%';
    size_t max = n > 8 ? n - 8 : 1;
    if (len > max)
        len = max;
    /* Keep the excerpt printable: control bytes become '?'. */
    size_t k = 0;
    buf[k++] = '\'';
    if (pct)
        buf[k++] = '%';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)L->text[L->tok.start + i];
        buf[k++] = (ch < 32 || ch == 127) ? '?' : (char)ch;
    }
    if (len < whole) {
        buf[k++] = '.';
        buf[k++] = '.';
        buf[k++] = '.';
    }
    buf[k++] = '\'';
    buf[k] = 0;
    return buf;
}

bool lx_expected(Lexer *L, const char *what)
{
    char buf[64];
    if (L->tok.kind == LX_BAD)
        return lx_fail(L, L->tok.pos, "%s", L->tok.bad);
    return lx_fail(L, L->tok.pos, "expected %s, found %s", what, lx_describe(L, buf, sizeof buf));
}

/* ---- token tests ---- */

bool lx_is(const Lexer *L, LxKind k)
{
    return L->tok.kind == k;
}

const char *lx_text(const Lexer *L)
{
    return L->text + L->tok.start;
}

size_t lx_tlen(const Lexer *L)
{
    return L->tok.end - L->tok.start;
}

bool lx_text_is(const Lexer *L, const char *s)
{
    size_t n = strlen(s);
    return lx_tlen(L) == n && memcmp(lx_text(L), s, n) == 0;
}

bool lx_is_word(const Lexer *L, const char *w)
{
    if (L->tok.kind != LX_NAME || (L->tok.start > 0 && L->text[L->tok.start - 1] == '%'))
        return false;
    return lx_text_is(L, w);
}

bool lx_is_attr(const Lexer *L)
{
    return L->tok.kind == LX_NAME && lx_peek(L).kind == LX_EQUAL;
}

bool lx_eat(Lexer *L, LxKind k)
{
    if (L->tok.kind != k)
        return false;
    lx_next(L);
    return true;
}

bool lx_expect(Lexer *L, LxKind k, const char *what)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind != k)
        return lx_expected(L, what);
    lx_next(L);
    return true;
}

char *lx_dup(Lexer *L, size_t start, size_t end)
{
    char *s = ir_strndup(L->arena, L->text + start, end - start);
    if (!s)
        lx_nomem(L);
    return s;
}

/* ---- values ---- */

bool lx_parse_uint(const char *s, size_t n, bool *neg, uint64_t *mag)
{
    size_t i = 0;
    *neg = false;
    *mag = 0;
    if (i < n && s[i] == '-') {
        *neg = true;
        i++;
    }
    if (i == n)
        return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *mag = v;
    return true;
}

/* lx_expected with a printf-formatted `what` (formatted only on error). */
static bool expected_vf(Lexer *L, const char *fmt, va_list ap)
{
    char what[128];
    vsnprintf(what, sizeof what, fmt, ap);
    return lx_expected(L, what);
}

bool lx_expectf(Lexer *L, LxKind k, const char *fmt, ...)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind == k) {
        lx_next(L);
        return true;
    }
    va_list ap;
    va_start(ap, fmt);
    bool r = expected_vf(L, fmt, ap);
    va_end(ap);
    return r;
}

bool lx_intf(Lexer *L, int64_t *v, const char *fmt, ...)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind == LX_INT)
        return lx_int(L, v, "integer"); /* `what` names only a missing integer */
    va_list ap;
    va_start(ap, fmt);
    bool r = expected_vf(L, fmt, ap);
    va_end(ap);
    return r;
}

bool lx_int(Lexer *L, int64_t *v, const char *what)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind != LX_INT)
        return lx_expected(L, what);
    bool neg = false;
    uint64_t mag = 0;
    if (!lx_parse_uint(lx_text(L), lx_tlen(L), &neg, &mag) ||
        mag > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX)) {
        char buf[64];
        return lx_fail(L, L->tok.pos, "integer %s does not fit in 64 bits", lx_describe(L, buf, sizeof buf));
    }
    *v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    lx_next(L);
    return true;
}

bool lx_bool(Lexer *L, bool *v, const char *what)
{
    if (lx_is_word(L, "true") || lx_is_word(L, "false")) {
        *v = lx_is_word(L, "true");
        lx_next(L);
        return true;
    }
    return lx_expected(L, what);
}

static int hexval(char c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10;
}

/* Unescape the body of a string token: \n \t \r \\ \" \' \? \a \b \f \v,
 * octal \NNN and hex \xHH, as absl::CUnescape does. */
bool lx_string(Lexer *L, char **out, const char *what)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind != LX_STRING)
        return lx_expected(L, what);
    const char *s = lx_text(L) + 1;
    size_t n = lx_tlen(L) - 2;
    char *r = ir_alloc(L->arena, n + 1);
    if (!r)
        return lx_nomem(L);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            r[k++] = c;
            continue;
        }
        c = s[++i];
        switch (c) {
        case 'n': r[k++] = '\n'; break;
        case 't': r[k++] = '\t'; break;
        case 'r': r[k++] = '\r'; break;
        case 'a': r[k++] = '\a'; break;
        case 'b': r[k++] = '\b'; break;
        case 'f': r[k++] = '\f'; break;
        case 'v': r[k++] = '\v'; break;
        case 'x': {
            int v = 0, m = 0;
            while (m < 2 && i + 1 < n && is_hex(s[i + 1])) {
                v = v * 16 + hexval(s[++i]);
                m++;
            }
            r[k++] = (char)v;
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                int v = c - '0', m = 1;
                while (m < 3 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7') {
                    v = v * 8 + (s[++i] - '0');
                    m++;
                }
                r[k++] = (char)v;
            } else {
                r[k++] = c; /* \\ \" \' \? and unknown escapes */
            }
        }
    }
    r[k] = 0;
    *out = r;
    lx_next(L);
    return true;
}

bool lx_enter(Lexer *L)
{
    if (L->depth >= L->lim.max_depth)
        return lx_fail(L, L->tok.pos, "nesting too deep (limit %d)", (int)L->lim.max_depth);
    L->depth++;
    return true;
}

void lx_leave(Lexer *L)
{
    L->depth--;
}

bool vec_push(Lexer *L, I64Vec *v, int64_t x)
{
    if (v->n == v->cap && v->cap > INT32_MAX / 2)
        return lx_fail(L, L->tok.pos, "list too long");
    if (v->n == v->cap && v->borrowed) {
        int64_t *h = ts_malloc((size_t)v->cap * 2 * sizeof *h);
        if (!h)
            return lx_nomem(L);
        memcpy(h, v->v, (size_t)v->n * sizeof *h);
        v->v = h;
        v->cap *= 2;
        v->borrowed = false;
    }
    if (!IR_GROW(v->v, v->cap, v->n + 1))
        return lx_nomem(L);
    v->v[v->n++] = x;
    return true;
}

void vec_free(I64Vec *v)
{
    if (!v->borrowed)
        ts_free(v->v);
    memset(v, 0, sizeof *v);
}

bool vec_to_list(Lexer *L, const I64Vec *v, IrI64List *out)
{
    out->n = v->n;
    out->v = NULL;
    if (v->n == 0)
        return true;
    out->v = ir_alloc_array(L->arena, (size_t)v->n, sizeof(int64_t));
    if (!out->v)
        return lx_nomem(L);
    memcpy(out->v, v->v, (size_t)v->n * sizeof(int64_t));
    return true;
}

/* list ::= open (int (sep int)*)? close */
bool lx_int_list(Lexer *L, LxKind open, LxKind close, LxKind sep, IrI64List *out,
                 const char *what)
{
    int64_t buf[8];
    I64Vec v = I64VEC_ON(buf);
    if (!lx_expectf(L, open, "'%s' to start %s",
                    open == LX_LBRACE ? "{" : open == LX_LSQUARE ? "[" : "(", what))
        return false;
    if (L->tok.kind != close) {
        do {
            int64_t x = 0;
            if (!lx_intf(L, &x, "integer in %s", what) || !vec_push(L, &v, x)) {
                vec_free(&v);
                return false;
            }
        } while (lx_eat(L, sep));
    }
    bool ok = lx_expectf(L, close, "'%s' to end %s",
                         close == LX_RBRACE ? "}" : close == LX_RSQUARE ? "]" : ")", what) &&
              vec_to_list(L, &v, out);
    vec_free(&v);
    return ok;
}

/* ---- raw re-reading ---- */

/* Skip a string literal starting at c (on the opening quote). */
static bool raw_skip_string(const Lexer *L, Cursor *c)
{
    bump(L, c);
    while (c->off < L->len && L->text[c->off] != '"') {
        if (L->text[c->off] == '\\')
            bump(L, c);
        bump(L, c);
    }
    if (c->off >= L->len)
        return false;
    bump(L, c);
    return true;
}

/* A '\"' outside a string: the text of a quoted value (xla.sdy.meshes="{mesh
 * = #sdy.mesh<[\"x\"=2]>}") pasted into braces, where quotes are plain.
 * Said where it is; it was an unterminated string lines later, or
 * "unbalanced brackets" at the attribute. */
static bool stray_escape(Lexer *L, const Cursor *c)
{
    return lx_fail(L, cpos(c), "'\\\"' outside a string: an escaped quote belongs inside \"...\"; in braces write a "
                               "plain '\"'");
}

/* Walk a balanced group of (), [], {} starting at an opening bracket;
 * quotes and comments inside are skipped whole. Iterative: the depth is
 * a counter checked against max_depth, so hostile input cannot recurse. */
bool lx_raw_group(Lexer *L, size_t *start, size_t *end)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind != LX_LBRACE && L->tok.kind != LX_LPAREN && L->tok.kind != LX_LSQUARE)
        return lx_expected(L, "'{'");
    Cursor c = tok_cursor(L);
    IrPos open = L->tok.pos;
    *start = c.off;
    int32_t depth = 0;
    while (c.off < L->len) {
        char ch = L->text[c.off];
        if (ch == '"') {
            Cursor s = c;
            if (!raw_skip_string(L, &c))
                return lx_fail(L, cpos(&s), "unterminated string");
            continue;
        }
        if (ch == '\\' && at(L, c.off + 1) == '"')
            return stray_escape(L, &c);
        if (ch == '/' && (at(L, c.off + 1) == '/' || at(L, c.off + 1) == '*')) {
            const char *bad = NULL;
            Cursor s = c;
            if (!skip_space(L, &c, &bad))
                return lx_fail(L, cpos(&s), "%s", bad);
            continue;
        }
        if (ch == '{' || ch == '(' || ch == '[') {
            if (++depth > L->lim.max_depth)
                return lx_fail(L, cpos(&c), "nesting too deep (limit %d)",
                               (int)L->lim.max_depth);
        } else if (ch == '}' || ch == ')' || ch == ']') {
            if (--depth == 0) {
                bump(L, &c);
                *end = c.off;
                resume(L, c);
                return true;
            }
        }
        bump(L, &c);
    }
    return lx_fail(L, open, "unbalanced '%c': no matching close before end of input",
                   L->text[*start]);
}

bool lx_raw_run(Lexer *L, bool (*ok)(char c), size_t *start, size_t *end, const char *what)
{
    if (L->st != IR_OK)
        return false;
    Cursor c = tok_cursor(L);
    *start = c.off;
    while (c.off < L->len && ok(L->text[c.off]))
        bump(L, &c);
    if (c.off == *start)
        return lx_expected(L, what);
    *end = c.off;
    resume(L, c);
    return true;
}

bool lx_raw_quoted(Lexer *L, size_t *start, size_t *end, const char *what)
{
    if (L->st != IR_OK)
        return false;
    if (L->tok.kind != LX_OTHER || L->text[L->tok.start] != '\'')
        return lx_expected(L, what);
    Cursor c = tok_cursor(L);
    IrPos open = L->tok.pos;
    bump(L, &c);
    *start = c.off;
    while (c.off < L->len && L->text[c.off] != '\'' && L->text[c.off] != '\n')
        bump(L, &c);
    if (c.off >= L->len || L->text[c.off] != '\'')
        return lx_fail(L, open, "unterminated '...' in %s", what);
    *end = c.off;
    bump(L, &c);
    resume(L, c);
    return true;
}

bool lx_raw_value(Lexer *L, size_t *start, size_t *end)
{
    if (L->st != IR_OK)
        return false;
    Cursor c = tok_cursor(L);
    *start = c.off;
    size_t last = c.off; /* end of the last non-space byte */
    int32_t depth = 0;
    while (c.off < L->len) {
        char ch = L->text[c.off];
        if (ch == '"') {
            Cursor s = c;
            if (!raw_skip_string(L, &c))
                return lx_fail(L, cpos(&s), "unterminated string");
            last = c.off;
            continue;
        }
        if (ch == '\\' && at(L, c.off + 1) == '"')
            return stray_escape(L, &c);
        if (ch == '/' && (at(L, c.off + 1) == '/' || at(L, c.off + 1) == '*')) {
            if (depth == 0)
                break;
            const char *bad = NULL;
            Cursor s = c;
            if (!skip_space(L, &c, &bad))
                return lx_fail(L, cpos(&s), "%s", bad);
            continue;
        }
        if (depth == 0 && (ch == ',' || ch == '\n'))
            break;
        if (ch == '{' || ch == '(' || ch == '[') {
            if (++depth > L->lim.max_depth)
                return lx_fail(L, cpos(&c), "nesting too deep (limit %d)",
                               (int)L->lim.max_depth);
        } else if (ch == '}' || ch == ')' || ch == ']') {
            if (depth == 0)
                break;
            depth--;
        }
        bump(L, &c);
        if (ch != ' ' && ch != '\t' && ch != '\r')
            last = c.off;
    }
    if (depth != 0)
        return lx_fail(L, L->tok.pos, "unbalanced brackets in attribute value");
    if (last == *start)
        return lx_expected(L, "attribute value");
    *end = last;
    /* Resume right after the value (trailing blanks are whitespace anyway). */
    Cursor r = tok_cursor(L);
    while (r.off < last)
        bump(L, &r);
    resume(L, r);
    return true;
}
