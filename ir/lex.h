/*
 * lex.h: the HLO text lexer, private to ir/ (parse*.c, literal.c, sharding.c).
 *
 * A pull lexer with one current token over a byte buffer that need not be
 * NUL-terminated: every read is bounded by `len`. Whitespace and comments
 * (`// ...`, `/ * ... * /`) separate tokens. Some attribute values are not
 * made of ordinary tokens (`size=3x3`, `padding=0_0x1_1`,
 * `dim_labels=b01f_01io->b01f`, layout tails, raw `{...}` blobs kept for
 * printing): the parser re-reads those as raw text starting at the current
 * token (lx_raw_*), and lexing resumes after them.
 *
 * Errors: the first error is recorded in the lexer (`st`) and in the
 * caller's IrDiag with FILE:LINE:COL; every function returns false once an
 * error is recorded, so callers just propagate `false`.
 */
#ifndef TESSEL_IR_LEX_H
#define TESSEL_IR_LEX_H

#include "ir.h"

typedef enum LxKind {
    LX_EOF,       /* end of input */
    LX_BAD,       /* unterminated string or comment; tok.bad says which */
    LX_NAME,      /* [A-Za-z_][A-Za-z0-9_.-]* or %[A-Za-z0-9_.-]+ (text excludes '%') */
    LX_INT,       /* -?[0-9]+ */
    LX_FLOAT,     /* -?digits with '.' or exponent, hex float 0x1p-3, -inf, -nan */
    LX_STRING,    /* "..." with C escapes (span includes the quotes) */
    LX_LBRACE,    /* { */
    LX_RBRACE,    /* } */
    LX_LPAREN,    /* ( */
    LX_RPAREN,    /* ) */
    LX_LSQUARE,   /* [ */
    LX_RSQUARE,   /* ] */
    LX_COMMA,     /* , */
    LX_COLON,     /* : */
    LX_EQUAL,     /* = */
    LX_ARROW,     /* -> */
    LX_LEQ,       /* <= */
    LX_DOTS,      /* ... */
    LX_OTHER,     /* any other single byte */
} LxKind;

typedef struct LxTok {
    LxKind kind;
    size_t start, end;  /* text[start, end); for a %name, start is after '%' */
    IrPos pos;          /* where the token starts (the '%' of a %name) */
    const char *bad;    /* LX_BAD: what is wrong */
} LxTok;

typedef struct Lexer {
    const char *text;
    size_t len;
    size_t off;          /* scan cursor: the next token starts at or after it */
    int32_t line, col;   /* position of `off` */
    LxTok tok;           /* current token */
    const char *file;    /* for diagnostics, may be NULL */
    const char *src;     /* NUL-terminated copy of text for diagnostics, or NULL */
    IrArena *arena;      /* where parsed values go */
    IrDiag *d;
    IrStatus st;         /* IR_OK until the first error */
    IrLimits lim;
    int32_t depth;       /* current nesting (tuples, literals), checked against lim.max_depth */
    int64_t iota_left;   /* device entries iota forms may still expand to (all of one parse) */
} Lexer;

/* Iota device lists (`<=[8]`) are short text for many entries: one parse
 * may expand at most this many in all, so small hostile inputs cannot ask
 * for gigabytes. */
#define LX_IOTA_BUDGET ((int64_t)1 << 26)

/* A growable heap vector of int64 (ts_realloc), for lists of unknown length. */
typedef struct I64Vec {
    int64_t *v;
    int32_t n;
    int64_t cap;
    /* v is the caller's (stack) buffer of cap entries, not the heap's:
     * I64VEC_ON(buf) starts one so; past it, vec_push moves to the heap.
     * Shapes and layouts are read this way, once per instruction, with no
     * allocation at all. */
    bool borrowed;
} I64Vec;

#define I64VEC_ON(buf) ((I64Vec){.v = (buf), .cap = (int64_t)(sizeof(buf) / sizeof *(buf)), .borrowed = true})

/* Set up over text[0, len) and read the first token. `src` is a
 * NUL-terminated copy of the text used to show the offending line in
 * diagnostics (NULL: a temporary copy is made when an error occurs).
 * `lim` NULL, or any of its fields <= 0, means the default limits. */
void lx_init(Lexer *L, const char *file, const char *text, size_t len, const char *src,
             IrArena *arena, IrDiag *d, const IrLimits *lim);
/* Advance to the next token. */
void lx_next(Lexer *L);
/* The token after the current one, without consuming anything. */
LxTok lx_peek(const Lexer *L);

/* Record an input error at `pos` (only the first is kept); returns false. */
bool lx_fail(Lexer *L, IrPos pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Record out-of-memory; returns false. */
bool lx_nomem(Lexer *L);
/* "expected WHAT, found 'TOKEN'" at the current token; returns false. */
bool lx_expected(Lexer *L, const char *what);
/* The end of the word the current token starts: a name, or a non-ASCII
 * byte, runs on over name bytes, non-ASCII bytes and control bytes other
 * than blanks ('négate' is lexed as the name 'n', then 'é' as a byte of
 * its own; 'neg\0ate' as 'neg'); else the token's end. What messages
 * quote and "did you mean" weighs. */
size_t lx_word_end(const Lexer *L);
/* "Did you mean": the word of `words` (NULL-terminated) that the word at
 * the current token is a slip of (ir_nearest), else NULL. */
const char *lx_near(const Lexer *L, const char *const *words);
/* lx_expected, adding "; did you mean W?" when lx_near finds W. */
bool lx_expected_word(Lexer *L, const char *what, const char *const *words);

bool lx_is(const Lexer *L, LxKind k);
/* The current token is a NAME spelled exactly `w` (not %-prefixed). */
bool lx_is_word(const Lexer *L, const char *w);
/* The current token is NAME followed by '=' (an attribute name). */
bool lx_is_attr(const Lexer *L);
/* Consume the current token if it is of kind k. */
bool lx_eat(Lexer *L, LxKind k);
/* Consume a token of kind k or fail with "expected WHAT". */
bool lx_expect(Lexer *L, LxKind k, const char *what);

/* Text and length of the current token. */
const char *lx_text(const Lexer *L);
size_t lx_tlen(const Lexer *L);
/* Does the current token's text equal s? */
bool lx_text_is(const Lexer *L, const char *s);
/* Arena copy of text[start, end); NULL (and nomem recorded) on OOM. */
char *lx_dup(Lexer *L, size_t start, size_t end);
/* Printable excerpt of the current token for messages ("end of input" at EOF). */
const char *lx_describe(const Lexer *L, char *buf, size_t n);

/* lx_expect with WHAT formatted printf-style, only when it is needed (on
 * the hot path of every list and instruction). */
bool lx_expectf(Lexer *L, LxKind k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Consume an INT token into *v (must fit int64), else fail "expected WHAT". */
bool lx_int(Lexer *L, int64_t *v, const char *what);
/* lx_int with WHAT formatted only when it is needed. */
bool lx_intf(Lexer *L, int64_t *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Parse an integer from text[s, e): "-?digits"; false on syntax or overflow.
 * Negative values come back in *neg with the magnitude in *mag. */
bool lx_parse_uint(const char *s, size_t n, bool *neg, uint64_t *mag);
/* Consume `true` or `false`. */
bool lx_bool(Lexer *L, bool *v, const char *what);
/* Consume a STRING token, unescaped into the arena. */
bool lx_string(Lexer *L, char **out, const char *what);
/* Parse `{i, j, ...}` (open/close/sep given) into an arena list. */
bool lx_int_list(Lexer *L, LxKind open, LxKind close, LxKind sep, IrI64List *out,
                 const char *what);

/* Raw re-reading starting at the current token. Each consumes what it reads
 * and leaves the lexer on the following token. */
/* A balanced group starting at the current '{', '(' or '[' (strings and
 * comments respected); [*start, *end) covers it including the delimiters. */
bool lx_raw_group(Lexer *L, size_t *start, size_t *end);
/* The longest run of bytes accepted by `ok`, at least one byte. */
bool lx_raw_run(Lexer *L, bool (*ok)(char c), size_t *start, size_t *end, const char *what);
/* A name in single quotes ('axis_0', as XLA prints mesh axis names) at the
 * current `'`: [*start, *end) is what is between the quotes (no newline,
 * no quote; may be empty); else "expected WHAT" or an unterminated error. */
bool lx_raw_quoted(Lexer *L, size_t *start, size_t *end, const char *what);
/* An attribute value of any form: up to the next ',' or line end outside
 * brackets, or an unmatched closing bracket. */
bool lx_raw_value(Lexer *L, size_t *start, size_t *end);

/* Where the lexer stands: enough to come back later and read the same
 * text again with the same positions (the parser skips an inline
 * computation or a nested operand instruction where it stands and reads it
 * once the enclosing one is done). The rest of the lexer (errors, limits,
 * budgets) is left alone by lx_reset. */
typedef struct LxMark {
    size_t off;
    int32_t line, col;
    LxTok tok;
} LxMark;

static inline LxMark lx_mark(const Lexer *L)
{
    return (LxMark){L->off, L->line, L->col, L->tok};
}

static inline void lx_reset(Lexer *L, LxMark m)
{
    L->off = m.off;
    L->line = m.line;
    L->col = m.col;
    L->tok = m.tok;
}

/* Nesting guard: enter fails with "nesting too deep" past lim.max_depth. */
bool lx_enter(Lexer *L);
void lx_leave(Lexer *L);

bool vec_push(Lexer *L, I64Vec *v, int64_t x);
void vec_free(I64Vec *v);
/* Copy a vector into an arena list. */
bool vec_to_list(Lexer *L, const I64Vec *v, IrI64List *out);

/* literal.c: parse a literal for `shape` at the current token. */
bool ir_lit_parse_lx(Lexer *L, const IrShape *shape, uint8_t **data, int64_t *nbytes);
/* sharding.c: parse a sharding (starting at '{') at the current token. */
bool ir_shd_parse_lx(Lexer *L, IrSharding *out);
/* sdy.c: XLA's named (V3) sharding after its '{', at '@mesh<' or 'mesh[':
 * the mesh, the dimensions and replicated=/unreduced=/manual= axes,
 * converted to a tiled (or replicated, manual) sharding; stops before a
 * `, metadata=` or the closing '}'. */
bool ir_sdy_v3_parse_lx(Lexer *L, IrSharding *out);
/* sharding.c: expand an iota device list `<=[iota]T(perm)` of n devices
 * (n must equal the product of iota) into arena arrays; errors at pos.
 * shared_ok: *devices may be ir_iota_table (never to be written). */
bool lx_iota_devices(Lexer *L, IrPos pos, const I64Vec *iota, const I64Vec *perm, bool has_perm,
                     int64_t n, bool shared_ok, int64_t **dims_out, int32_t **perm_out, int64_t **devices);

#endif /* TESSEL_IR_LEX_H */
