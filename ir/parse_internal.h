/*
 * parse_internal.h: what the parts of the HLO text parser share, private to
 * them (parse.c, parse_shape.c, parse_attrs.c, parse_values.c, parse_mesh_groups.c,
 * parse_inline.c, parse_async.c, parse_header.c); nothing else includes it
 * but the unit test of the name tables (tests/unit/test_namemap.c).
 *
 * The Parser (the state of one parse), the instruction being read
 * (InstrCtx), the attribute ids, the name tables and the references
 * resolved once their scope is read, and the functions one part calls in
 * another, listed by the file that defines them. See parse.c for the
 * grammar and how the parts fit together.
 */
#ifndef TESSEL_IR_PARSE_INTERNAL_H
#define TESSEL_IR_PARSE_INTERNAL_H

#include "lex.h"

#include <stdio.h>

/* ---- name tables: open addressing over (text, length) keys (parse.c) ---- */

/* 16-byte slots with the key's hash: a probe compares hashes and touches
 * the key text only on a hash match, and growing does not rehash strings.
 * Keys are NUL-terminated strings that outlive the map. */
typedef struct MapSlot {
    const char *key; /* NULL: empty */
    uint32_t hash;
    int32_t val;
} MapSlot;

typedef struct NameMap {
    MapSlot *slot;
    size_t cap, n;
} NameMap;

/* The value of key text[0, n), or -1 when absent. */
int32_t prs_map_find(const NameMap *m, const char *k, size_t n);
/* Room for `want` keys at load at most 1/2; false on OOM. */
bool prs_map_reserve(NameMap *m, size_t want);
/* Insert a key not yet present (`k` outlives the map); false on OOM. */
bool prs_map_put(NameMap *m, const char *k, size_t n, int32_t val);
/* The value slot of key text[0, n), or NULL when absent. */
int32_t *prs_map_ref(NameMap *m, const char *k, size_t n);

/* Where an absent key's probe ended: prs_map_put_at puts the key there
 * without hashing and probing again, if the map has not changed since. */
typedef struct MapHint {
    const MapSlot *slots;  /* the table probed, NULL: no hint */
    size_t cap, n, slot;
    uint32_t hash;
} MapHint;
/* prs_map_find that also fills *hint when the key is absent. */
int32_t prs_map_find_hint(const NameMap *m, const char *k, size_t n, MapHint *hint);
/* prs_map_put, through the hint of a prs_map_find_hint of the same key
 * where nothing was put or reserved in between (else as prs_map_put). */
bool prs_map_put_at(NameMap *m, const MapHint *hint, const char *k, size_t n, int32_t val);
/* Start loading the first slot key text[0, n) probes: a name read now and
 * looked up a little later finds it in the cache. Changes nothing. */
void prs_map_prefetch(const NameMap *m, const char *k, size_t n);
/* Free the slots and empty the map. */
void prs_map_free(NameMap *m);

/* ---- references resolved after their scope is read ---- */

typedef struct Span {
    size_t start, len;
    IrPos pos;
} Span;

/* A callee Span of length 0 is no name (names are never empty) but an
 * inline computation already added: `start` is its index. */
static inline Span inline_span(int32_t ci, IrPos pos)
{
    return (Span){(size_t)ci, 0, pos};
}

enum { REF_OPERAND, REF_CONTROL, REF_CALLEE };

typedef struct Ref {
    int32_t comp, instr, slot;
    int32_t kind;
    Span name;
    const IrShape *shape; /* operand shape written before the name, or NULL */
} Ref;

typedef struct RefVec {
    Ref *v;
    size_t n;
    int64_t cap;
} RefVec;

/* ---- attributes ---- */

/* The attribute ids are generated from hlo_attrs.def (ir.h); the parser's
 * parts keep calling them AttrId. */
typedef IrAttrId AttrId;

/* ---- the parser ---- */

typedef struct KvVec {
    IrKeyValue *v;
    int32_t n;
    int64_t cap;
} KvVec;

typedef struct SpanVec {
    Span *v;
    int32_t n;
    int64_t cap;
} SpanVec;

typedef struct Parser {
    Lexer L;
    IrModule *m;
    IrParseOptions opt;
    IrPrefault *prefault; /* populates what a large text's computations will fill */
    NameMap comps;       /* computation name -> index */
    NameMap instrs;      /* instruction name -> index, current computation */
    RefVec local;        /* operand and control refs of the current computation */
    RefVec callees;      /* callee refs of the whole module */
    SpanVec spans;       /* scratch: computation lists of one attribute */
    KvVec kvs;           /* scratch: key/value lists */
    int64_t num_devices; /* num_partitions from the header; 0 unknown */
    bool no_layout;      /* shapes here take no layout (a literal follows) */
    struct ParamUse *params; /* parameter(N) of the current computation */
    size_t nparams;
    int64_t capparams;
    struct Deferred *defer;   /* instructions written without a shape */
    size_t ndefer;
    int64_t capdefer;
    struct SigCheck *sigs;    /* computation signatures, checked at the end */
    size_t nsigs;
    int64_t capsigs;
    struct InstrCtx *ictx;    /* the instruction being parsed (reused) */
    int32_t *opv;             /* its operand indices (-1: resolved later) */
    size_t nopv;
    int64_t capopv;
    struct Close *closes;     /* lines that start with '}' (see find_closes) */
    size_t ncloses, nextclose;
    int32_t nasync_sugar;     /* sugared OP-start instructions: wrapped at the end */
    struct InlineBody *bodies; /* inline computations skipped, not read yet */
    size_t nbodies;
    int64_t capbodies;
    int32_t *inl;             /* every inline computation, named at the end */
    size_t ninl;
    int64_t capinl;
    NameMap inl_next;         /* inline base name -> next suffix to try */
    struct NestedOp *nested;  /* nested operand instructions skipped, not read yet */
    size_t nnested;
    int64_t capnested;
    int32_t *unnamed;         /* nested instructions of the current computation */
    size_t nunnamed;
    int64_t capunnamed;
    int32_t *opnext;          /* per opcode: next suffix for a nested instruction's name */
    int32_t top;              /* the top-level computation being read (or one of its inline ones) */
    int32_t last_top;         /* the last top-level computation read: the entry without ENTRY */
    int64_t ninstr;           /* instructions read so far, all computations (max_instructions) */
} Parser;

/* An inline computation (`to_apply={...}`), added when its '{' was met
 * and read from `at` once the computation around it is done. */
typedef struct InlineBody {
    int32_t comp;
    LxMark at;
} InlineBody;

/* A nested operand instruction (`add(x, s32[] constant(1))`): operand
 * `slot` of instruction `user` in the current computation, read from `at`
 * once the user is added. */
typedef struct NestedOp {
    int32_t user, slot;
    LxMark at;
} NestedOp;

/* A line whose first non-blank byte is '}': where a computation ends in
 * XLA's layout, one instruction per line. */
typedef struct Close {
    size_t off;
    int32_t line;
} Close;

/* An instruction whose shape XLA lets the text omit (`t = tuple(a, b)`):
 * inferred once the whole module is read. */
typedef struct Deferred {
    int32_t comp, instr;
    IrPos sharding_pos;  /* where its sharding= was, line 0 if none */
    int32_t top;         /* the top-level computation comp is (or is inline in) */
} Deferred;

/* A parameter(N) seen in the current computation: the table c->param is
 * built once the computation is read (numbers must be 0..n-1, as XLA's
 * HloComputation requires), so a large N cannot make a large table. */
typedef struct ParamUse {
    int32_t instr;
    int64_t number;
    IrPos pos;
} ParamUse;

/* A computation's written result shape, checked against its root. */
typedef struct SigCheck {
    int32_t comp;
    IrPos pos;
    IrShape result;
} SigCheck;

/* What one instruction has seen while its line is parsed. One lives in the
 * Parser and is cleared per instruction up to `callee`: callee[id] is read
 * only when seen[id] is set, so it need not be cleared. */
typedef struct InstrCtx {
    IrInstr ins;
    int32_t comp, index;   /* where it will be added */
    bool seen[A_COUNT];
    Span *list;            /* branch_computations / called_computations (arena) */
    int32_t nlist;
    bool no_shape;         /* the text omits the shape: infer it later */
    IrPos sharding_pos;
    MapHint name_hint;     /* where the duplicate check of its name ended */
    bool x_used;           /* ins.a.x is xs: cleared and written by prs_x */
    Span callee[A_COUNT];  /* single-computation attributes by id (not cleared) */
    IrAttrsX xs;           /* the instruction's rarer attributes, once it has one (not cleared) */
} InstrCtx;

/* The writable IrAttrsX of the instruction being parsed: x->xs, cleared on
 * first use (most instructions never ask, and keep ir_no_attrs_x). */
IrAttrsX *prs_x(InstrCtx *x);

/* ---- parse.c: scratch vectors, names, instructions, computations ---- */

/* Append to a growing vector; false (the lexer's ENOMEM) on OOM. */
bool prs_push_ref(Parser *P, RefVec *rv, Ref r);      /* a name to resolve later */
bool prs_push_opv(Parser *P, int32_t idx);            /* an operand of P->ictx */
bool prs_push_i32(Parser *P, int32_t **v, size_t *n, int64_t *cap, int32_t x); /* any int32 vector */
bool prs_push_kv(Parser *P, IrKeyValue kv);           /* the scratch key/value list */
/* Copy the scratch key/value list into the arena and clear it. */
bool prs_take_kvs(Parser *P, IrKeyValue **out, int32_t *n);
/* The current NAME as a span (for later lookup), consuming it. */
bool prs_take_name(Parser *P, Span *s, const char *what);
/* An arena copy of the text of a span. */
char *prs_span_dup(Parser *P, Span s);
/* One instruction of computation ci (`nested`: a nested operand one). */
bool prs_parse_one(Parser *P, int32_t ci, bool nested, bool *saw_root);
/* '{' instruction+ '}' of computation ci (`top`: a written one). */
bool prs_parse_body(Parser *P, int32_t ci, bool top, IrPos pos);

/* Free what a parser holds (its tables and vectors; not P, nor its module). */
void prs_release(Parser *P);

/* ---- parse_split.c: a large computation read by two threads ---- */

typedef struct Split Split;
/* At the first instruction of a written computation of `est` lines: start
 * a helper thread reading its second half, or NULL (too small, a split
 * option of -1, no thread). */
Split *prs_split_start(Parser *P, int32_t est);
/* Where the helper's first instruction starts: the body loop meets it
 * there (at the first instruction starting at or after it). */
size_t prs_split_at(const Split *s);
/* At the top of the body loop once the token is at or past the helper's
 * start: take what the helper read that the sequential reading gives the
 * same (all of it, when this thread's instructions end where the helper
 * started), update *saw_root and *last, and move the lexer past it.
 * False on OOM. prs_split_end must follow. */
bool prs_split_meet(Parser *P, Split *s, int32_t ci, bool *saw_root, int32_t *last);
/* Stop the helper if it runs and free it (NULL is fine). */
void prs_split_end(Split *s);

/* ---- shapes (parse_shape.c) ---- */

/* Is the current token the start of a shape: '(', a type name then '[',
 * or a buffer shape's `b(` (no opcode is named b)? Inline: asked for every
 * operand. */
static inline bool at_shape(const Parser *P)
{
    const Lexer *L = &P->L;
    if (lx_is(L, LX_LPAREN))
        return true;
    if (!lx_is(L, LX_NAME))
        return false;
    LxKind next = lx_peek(L).kind;
    if (next == LX_LPAREN && lx_tlen(L) == 1 && lx_text(L)[0] == 'b')
        return true;
    return ir_type_from_name(lx_text(L), lx_tlen(L)) != IR_INVALID && next == LX_LSQUARE;
}

/* shape ::= tuple | type '[' (dim (',' dim)*)? ']' layout? | 'b' '(' array shape ')' */
bool prs_parse_shape(Parser *P, IrShape *out);
/* A computation's signature: parameter shapes (heap) and result shape. */
bool prs_parse_signature(Parser *P, IrShape **sig, int32_t *nsig, IrShape *result);
/* Queue a written result shape for check_signatures. */
bool prs_push_sig(Parser *P, SigCheck sc);
/* Every written result shape agrees with its root. */
bool prs_check_signatures(Parser *P);
/* May the text omit the shape of op (inferred at the end)? */
bool prs_shape_inferable(IrOpcode op);
/* Queue an instruction written without a shape. */
bool prs_push_deferred(Parser *P, Deferred df);
/* Infer every omitted shape, once the whole module is read. */
bool prs_infer_deferred(Parser *P);

/* ---- attributes (parse_attrs.c) ---- */

/* The name of an attribute, as written. */
const char *prs_attr_name(AttrId id);
/* attribute ::= name '=' value, checked against the op. */
bool prs_parse_attribute(Parser *P, InstrCtx *x);
/* Attributes an op cannot do without (XLA's required=true). */
bool prs_check_required(Parser *P, InstrCtx *x);

/* ---- attribute values (parse_values.c), for parse_attr_value ---- */

/* Keep the raw text of a `{...}` group: inside the braces, or all of it. */
bool prs_raw_braces(Parser *P, const char **out, bool inside, const char *what);
/* Match the current NAME against a NULL-ended set of words. */
bool prs_parse_word(Parser *P, const char *const *words, const char **out, const char *what);
/* lo_hi[_interior]x... padding into lists (interior may be NULL). */
bool prs_parse_pads(Parser *P, bool allow_interior, IrI64List *lo, IrI64List *hi,
                IrI64List *interior, const char *what);
bool prs_parse_window(Parser *P, IrWindow *w);               /* window={...} */
bool prs_parse_dim_labels(Parser *P, IrConvDnums *c);        /* dim_labels=b01f_01io->b01f */
bool prs_parse_slice(Parser *P, IrAttrsX *ax);                 /* slice={[0:2:1], ...} */
bool prs_parse_replica_groups(Parser *P, IrReplicaGroups *g); /* lists, iota or mesh-axes form */
/* open int (',' int)* close, open and close '[' ']' or '(' ')', into v. */
bool prs_ints_between(Lexer *L, LxKind open, LxKind close, I64Vec *v, const char *what);

/* ---- mesh-axes replica groups (parse_mesh_groups.c) ---- */

/* mesh['a'=2,'b'=4][, device_ids=(...)] {'b', 'a':(1)2} at the word `mesh`:
 * expanded into g's groups, the form kept in g->mesh as XLA prints it. */
bool prs_parse_mesh_groups(Parser *P, IrReplicaGroups *g);
bool prs_parse_pairs(Parser *P, IrI64List *out);             /* source_target_pairs */
bool prs_parse_frontend(Parser *P, IrKeyValue **out, int32_t *n); /* frontend_attributes */
/* A computation name or an inline computation, into x->callee[id]. */
bool prs_parse_callee(Parser *P, InstrCtx *x, AttrId id);
/* '{' callee (',' callee)* '}' into x->list. */
bool prs_parse_callee_list(Parser *P, InstrCtx *x, AttrId id);
bool prs_parse_control(Parser *P, InstrCtx *x);              /* control-predecessors */
bool prs_parse_shape_list(Parser *P, IrAttrsX *ax);            /* operand_layout_constraints */
bool prs_parse_string_attr(Parser *P, const char **out);     /* a quoted string */
bool prs_parse_epsilon(Parser *P, float *out);               /* epsilon=1e-05 */
/* Append name=TEXT[s,e) to the instruction's kept attributes. */
bool prs_keep_attr(Parser *P, IrAttrsX *ax, const char *name, size_t s, size_t e);

/* ---- inline computations and nested operand instructions (parse_inline.c) ---- */

/* An inline computation at the current '{': added now, read later. */
bool prs_inline_callee(Parser *P, InstrCtx *x, AttrId id, int32_t k, Span *out);
/* Read the inline computations queued by the last written computation. */
bool prs_parse_inline_bodies(Parser *P);
/* Make the provisional names of the inline computations unique. */
bool prs_name_inline(Parser *P);
/* Skip a nested operand instruction (operand k of x) that starts at `at`. */
bool prs_skip_nested(Parser *P, InstrCtx *x, int32_t k, LxMark at);
/* Read the nested operand instructions queued by the last instruction. */
bool prs_parse_nested_ops(Parser *P, int32_t ci);
/* Name the nested instructions of c after their opcode. */
bool prs_name_nested(Parser *P, IrComputation *c);

/* ---- sugared async ops (parse_async.c) ---- */

/* The opcode as written: "abs-start" for a sugared async-start. Inline:
 * asked for every attribute. */
static inline const char *op_text(const IrInstr *ins, char *buf, size_t n)
{
    if (!ins->a.x->async_sugar)
        return ir_op_name(ins->op);
    const char *suffix = ins->op == OP_ASYNC_START ? "start" : ins->op == OP_ASYNC_UPDATE ? "update" : "done";
    snprintf(buf, n, "%s-%s", ir_op_name(ins->a.x->async_wrapped_op), suffix);
    return buf;
}

/* `OP-start` / `-update` / `-done` read as async ops wrapping OP. */
bool prs_async_sugar(const char *s, size_t n, struct InstrCtx *x);
/* Build the wrapped computation of every sugared async-start. */
bool prs_wrap_async_ops(Parser *P);

/* ---- the module header (parse_header.c) ---- */

/* 'HloModule' name (',' header_attr)* */
bool prs_parse_header(Parser *P);
/* The FileNames ... StackFrames tables, kept raw. */
bool prs_skip_stack_frames(Parser *P);
/* buffer_donor against the parsed entry (each a parameter and a leaf of
 * it, once, not also aliased): false with the error at the donor. */
bool prs_check_donors(Parser *P);

#endif
