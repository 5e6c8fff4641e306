/*
 * parse.c: the HLO text parser. Reads modules as XLA prints them
 * (--xla_dump_hlo_as_text) and as XLA's hlo_parser.cc reads them:
 *
 *   module      ::= ('HloModule' name (',' header_attr)*)? stack_frames? computation+
 *   computation ::= 'ENTRY'? name signature? '{' instruction+ '}' (',' 'execution_thread=' string)?
 *   signature   ::= '(' (name ':'? shape (',' ...)*)? ')' '->' shape
 *   instruction ::= 'ROOT'? name '=' shape opcode '(' operands ')' (',' attribute)*
 *   operand     ::= shape? name | shape? opcode operands   (a nested instruction)
 *   attribute   ::= name '=' value          (value syntax depends on the name)
 *   callee      ::= name | '{' instruction+ '}'         (an inline computation)
 *
 * Names may be written with or without '%'. Computations may appear in
 * any order and instructions may refer to later ones: names are recorded
 * as references and resolved through hash tables once their scope (the
 * computation for operands, the module for callees) has been read, so
 * parsing is linear in the input. Without ROOT the last instruction is the
 * root; without ENTRY the last computation is the entry (XLA's rules).
 *
 * Inline computations and nested operand instructions are skipped where
 * they stand (the lexer position is kept) and read once the computation or
 * instruction that holds them is done, because the parser keeps the state
 * of one computation and one instruction at a time; see parse_inline_bodies
 * and parse_nested_ops. Neither can be named by the text, so both get
 * generated names once every written name around them is known.
 *
 * Every error goes through the lexer (lx_fail) with the FILE:LINE:COL of
 * the offending token; attribute-level errors point at the attribute
 * name. On any error the half-built module is freed and *out stays NULL.
 *
 * The parser is in parts that share parse_internal.h:
 *   parse.c         the Parser's tables and vectors, instructions and their
 *                   operands, computations, the module, the entry points
 *   parse_shape.c   shapes, layouts, signatures; shapes the text leaves out
 *   parse_attrs.c   the attribute table: names, which ops take which,
 *                   required ones, and parse_attr_value
 *   parse_values.c  the syntax of attribute values (windows, dim labels,
 *                   slices, replica groups, pairs, frontend attributes, ...)
 *   parse_inline.c  inline computations and nested operand instructions
 *   parse_async.c   the sugared OP-start forms and their wrapped computations
 *   parse_header.c  the module header
 */
#include "parse_internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Inputs larger than this are refused (positions are 32-bit). */
#define MAX_INPUT ((size_t)INT32_MAX)

IrParseOptions ir_default_parse_options(void)
{
    IrParseOptions o;
    o.limits = ir_default_limits();
    o.verify = true;
    o.split_lines = 0;
    return o;
}

/* ---- name tables: open addressing over (text, length) keys ---- */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Slot key equals text[0, n) (the text has no NUL in it). */
static bool key_is(const MapSlot *sl, uint32_t h, const char *k, size_t n)
{
    return sl->hash == h && strncmp(sl->key, k, n) == 0 && sl->key[n] == 0;
}

int32_t prs_map_find(const NameMap *m, const char *k, size_t n)
{
    if (m->cap == 0)
        return -1;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    for (size_t i = h & mask; m->slot[i].key; i = (i + 1) & mask)
        if (key_is(&m->slot[i], h, k, n))
            return m->slot[i].val;
    return -1;
}

/* Room for `want` keys at load at most 1/2. */
bool prs_map_reserve(NameMap *m, size_t want)
{
    if (2 * want <= m->cap)
        return true;
    size_t cap = m->cap ? m->cap : 32;
    while (cap < 2 * want) {
        if (cap > SIZE_MAX / (4 * sizeof(MapSlot)))
            return false;
        cap *= 2;
    }
    /* A big table is probed at random, once per name: on huge pages (one
     * TLB entry per 2 MiB) and cleared here, so that its lines are in the
     * cache rather than first read from fresh pages of memory. */
    MapSlot *slot = ir_big_alloc(cap * sizeof *slot);
    if (!slot)
        return false;
    memset(slot, 0, cap * sizeof *slot);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i].key)
            continue;
        size_t j = m->slot[i].hash & (cap - 1);
        while (slot[j].key)
            j = (j + 1) & (cap - 1);
        slot[j] = m->slot[i];
    }
    ir_big_free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return true;
}

/* Insert a key not yet present; `k` (NUL-terminated, n bytes) must outlive
 * the map. */
bool prs_map_put(NameMap *m, const char *k, size_t n, int32_t val)
{
    if (!prs_map_reserve(m, m->n + 1))
        return false;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    size_t i = h & mask;
    while (m->slot[i].key)
        i = (i + 1) & mask;
    m->slot[i] = (MapSlot){k, h, val};
    m->n++;
    return true;
}

/* The value slot of key text[0, n), or NULL when absent. */
int32_t *prs_map_ref(NameMap *m, const char *k, size_t n)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    for (size_t i = h & mask; m->slot[i].key; i = (i + 1) & mask)
        if (key_is(&m->slot[i], h, k, n))
            return &m->slot[i].val;
    return NULL;
}

int32_t prs_map_find_hint(const NameMap *m, const char *k, size_t n, MapHint *hint)
{
    hint->slots = NULL; /* no hint: an empty map has no slot to give */
    if (m->cap == 0)
        return -1;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    size_t i = h & mask;
    for (; m->slot[i].key; i = (i + 1) & mask)
        if (key_is(&m->slot[i], h, k, n))
            return m->slot[i].val;
    *hint = (MapHint){m->slot, m->cap, m->n, i, h};
    return -1;
}

bool prs_map_put_at(NameMap *m, const MapHint *hint, const char *k, size_t n, int32_t val)
{
    /* Same table, capacity and count: no put and no growth since the
     * probe, so hint->slot is still the empty slot that ends k's probe
     * sequence. */
    if (!hint->slots || hint->slots != m->slot || hint->cap != m->cap || hint->n != m->n ||
        2 * (m->n + 1) > m->cap || m->slot[hint->slot].key)
        return prs_map_put(m, k, n, val);
    m->slot[hint->slot] = (MapSlot){k, hint->hash, val};
    m->n++;
    return true;
}

void prs_map_prefetch(const NameMap *m, const char *k, size_t n)
{
    if (m->cap > 0)
        __builtin_prefetch(&m->slot[hash_bytes(k, n) & (m->cap - 1)]);
}

void prs_map_free(NameMap *m)
{
    ir_big_free(m->slot);
    memset(m, 0, sizeof *m);
}

void prs_release(Parser *P)
{
    prs_map_free(&P->comps);
    prs_map_free(&P->instrs);
    ts_free(P->local.v);
    ts_free(P->callees.v);
    ts_free(P->spans.v);
    ts_free(P->kvs.v);
    ts_free(P->defer);
    ts_free(P->sigs);
    ts_free(P->params);
    ts_free(P->ictx);
    ts_free(P->opv);
    ts_free(P->closes);
    ts_free(P->bodies);
    ts_free(P->inl);
    prs_map_free(&P->inl_next);
    ts_free(P->nested);
    ts_free(P->unnamed);
    ts_free(P->opnext);
}

/* ---- the parser: scratch vectors and names (its types: parse_internal.h) ---- */

bool prs_push_ref(Parser *P, RefVec *rv, Ref r)
{
    if (!IR_GROW(rv->v, rv->cap, (int64_t)rv->n + 1))
        return lx_nomem(&P->L);
    rv->v[rv->n++] = r;
    return true;
}

bool prs_push_opv(Parser *P, int32_t idx)
{
    if (!IR_GROW(P->opv, P->capopv, (int64_t)P->nopv + 1))
        return lx_nomem(&P->L);
    P->opv[P->nopv++] = idx;
    return true;
}

bool prs_push_i32(Parser *P, int32_t **v, size_t *n, int64_t *cap, int32_t x)
{
    if (!IR_GROW(*v, *cap, (int64_t)*n + 1))
        return lx_nomem(&P->L);
    (*v)[(*n)++] = x;
    return true;
}

bool prs_push_kv(Parser *P, IrKeyValue kv)
{
    KvVec *v = &P->kvs;
    if (v->n == v->cap && v->cap > INT32_MAX / 4)
        return lx_fail(&P->L, P->L.tok.pos, "list too long");
    if (!IR_GROW(v->v, v->cap, v->n + 1))
        return lx_nomem(&P->L);
    v->v[v->n++] = kv;
    return true;
}

/* Copy the scratch key/value list into the arena and clear it. */
bool prs_take_kvs(Parser *P, IrKeyValue **out, int32_t *n)
{
    *n = P->kvs.n;
    *out = NULL;
    if (P->kvs.n > 0) {
        *out = ir_alloc_array(P->m->arena, (size_t)P->kvs.n, sizeof(IrKeyValue));
        if (!*out)
            return lx_nomem(&P->L);
        memcpy(*out, P->kvs.v, (size_t)P->kvs.n * sizeof(IrKeyValue));
    }
    P->kvs.n = 0;
    return true;
}

/* The current NAME as a span (for later lookup), consuming it. */
bool prs_take_name(Parser *P, Span *s, const char *what)
{
    Lexer *L = &P->L;
    char buf[64];
    if (!lx_is(L, LX_NAME) && lx_word_end(L) == L->tok.end)
        return lx_expected(L, what);
    /* XLA's names are ASCII: a name with another letter (dé, ñ) is one
     * word to the eye, not a name cut short before a stray byte */
    if (lx_word_end(L) > L->tok.end)
        return lx_fail(L, L->tok.pos, "expected %s, found %s: a name holds ASCII letters, digits, '_', '.' and '-'",
                       what, lx_describe(L, buf, sizeof buf));
    if ((int64_t)lx_tlen(L) > L->lim.max_name)
        return lx_fail(L, L->tok.pos, "name longer than %lld bytes", (long long)L->lim.max_name);
    *s = (Span){L->tok.start, lx_tlen(L), L->tok.pos};
    lx_next(L);
    return true;
}

char *prs_span_dup(Parser *P, Span s)
{
    return lx_dup(&P->L, s.start, s.start + s.len);
}

/* ---- instructions ---- */

/* Lay out called[] in the per-op role order of ir.h and queue the names. */
static bool assign_callees(Parser *P, InstrCtx *x)
{
    AttrId order[2];
    int32_t n = 0;
    IrInstr *ins = &x->ins;
    switch (ins->a.x->async_sugar ? ins->a.x->async_wrapped_op : ins->op) {
    case OP_WHILE:
        order[n++] = A_CONDITION;
        order[n++] = A_BODY;
        break;
    case OP_SELECT_AND_SCATTER:
        order[n++] = A_SELECT;
        order[n++] = A_SCATTER;
        break;
    case OP_CONDITIONAL:
        if (x->seen[A_TRUE]) {
            order[n++] = A_TRUE;
            order[n++] = A_FALSE;
            ins->cond_pred_form = true;
        }
        break;
    default:
        if (x->seen[A_TO_APPLY])
            order[n++] = A_TO_APPLY;
        else if (x->seen[A_CALLS])
            order[n++] = A_CALLS;
        ins->custom_to_apply = n > 0 && (ins->op == OP_CUSTOM_CALL ||
                                         (ins->a.x->async_sugar && ins->a.x->async_wrapped_op == OP_CUSTOM_CALL));
        break;
    }
    int32_t total = n + (n == 0 ? x->nlist : 0);
    if (total == 0)
        return true;
    ins->ncalled = total;
    ins->called = ir_alloc_array(P->m->arena, (size_t)total, sizeof(int32_t));
    if (!ins->called)
        return lx_nomem(&P->L);
    for (int32_t i = 0; i < total; i++) {
        Span s = n > 0 ? x->callee[order[i]] : x->list[i];
        ins->called[i] = s.len == 0 ? (int32_t)s.start : -1; /* inline: known already */
        if (s.len > 0 && !prs_push_ref(P, &P->callees, (Ref){x->comp, x->index, i, REF_CALLEE, s, NULL}))
            return false;
    }
    return true;
}

/* Is the current token followed by '('? Looked up on every operand name,
 * so the byte right after the name (',' or ')' nearly always) decides
 * without lexing the next token unless blanks or a comment intervene. */
static bool paren_follows(const Lexer *L)
{
    size_t e = L->tok.end;
    char ch = e < L->len ? L->text[e] : 0;
    if (ch == '(')
        return true;
    if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n' && ch != '/')
        return false;
    return lx_peek(L).kind == LX_LPAREN;
}

/* operands ::= '(' (operand (',' operand)*)? ')' ; operand ::= shape? name | shape? opcode operands */
static bool parse_operands(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (L->st != IR_OK)
        return false;
    if (!lx_is(L, LX_LPAREN)) { /* the message is formatted only when needed */
        char msg[96];
        snprintf(msg, sizeof msg, "'(' to start the operands of %s", ir_op_name(x->ins.op));
        return lx_expected(L, msg);
    }
    lx_next(L);
    const IrComputation *c = P->m->comp[x->comp];
    int32_t k = 0;
    P->nopv = 0;
    if (!lx_is(L, LX_RPAREN)) {
        do {
            LxMark at = lx_mark(L);
            IrShape *shape = NULL;
            if (at_shape(P)) {
                shape = ir_alloc(P->m->arena, sizeof *shape);
                if (!shape)
                    return lx_nomem(L);
                if (!prs_parse_shape(P, shape))
                    return false;
            }
            /* A name followed by '(' is no operand name but an opcode: a
             * nested instruction (an unknown opcode is reported when it
             * is read). A %name is never an opcode. */
            if (lx_is(L, LX_NAME) && L->text[L->tok.start - 1] != '%' && paren_follows(L)) {
                if (k == INT32_MAX)
                    return lx_fail(L, L->tok.pos, "too many operands");
                if (!prs_skip_nested(P, x, k, at))
                    return false;
                k++;
                continue;
            }
            Span s = {0};
            if (!prs_take_name(P, &s, "operand name"))
                return false;
            if (k == INT32_MAX)
                return lx_fail(L, s.pos, "too many operands");
            /* An operand defined above (XLA prints in that order) is
             * resolved now, while its name's slot is in the cache; any
             * other (defined below, undefined, or written with a shape
             * that does not match) is resolved, or reported, with the
             * rest of the computation by resolve_local, as before. */
            int32_t idx = prs_map_find(&P->instrs, L->text + s.start, s.len);
            if (idx >= 0 && shape && c->instr[idx].shape.type != IR_INVALID &&
                !ir_shape_compatible(shape, &c->instr[idx].shape))
                idx = -1;
            if (!prs_push_opv(P, idx))
                return false;
            if (idx < 0 && !prs_push_ref(P, &P->local, (Ref){x->comp, x->index, k, REF_OPERAND, s, shape}))
                return false;
            k++;
        } while (lx_eat(L, LX_COMMA));
    }
    if (!lx_expect(L, LX_RPAREN, "',' or ')' after an operand"))
        return false;
    x->ins.nopnd = k;
    if (k > 0) {
        x->ins.opnd = ir_alloc_array(P->m->arena, (size_t)k, sizeof(int32_t));
        if (!x->ins.opnd)
            return lx_nomem(L);
        memcpy(x->ins.opnd, P->opv, (size_t)k * sizeof(int32_t));
    }
    return true;
}

/* parameter(N): recorded in P->params; the instruction is added with
 * parameter_number -1 (so ir_add_instr builds no table) and numbered when
 * the computation ends (finish_params). */
static bool parse_parameter(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (!lx_expect(L, LX_LPAREN, "'(' before the parameter number"))
        return false;
    IrPos pos = L->tok.pos;
    int64_t n = 0;
    if (!lx_int(L, &n, "parameter number") || !lx_expect(L, LX_RPAREN, "')' after the parameter number"))
        return false;
    if (n < 0)
        return lx_fail(L, pos, "parameter number %lld is negative", (long long)n);
    if (!IR_GROW(P->params, P->capparams, (int64_t)P->nparams + 1))
        return lx_nomem(L);
    P->params[P->nparams++] = (ParamUse){x->index, n, pos};
    x->ins.a.parameter_number = -1;
    return true;
}

/* Number the parameters of c: each of 0..n-1 exactly once. */
static bool finish_params(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    size_t n = P->nparams;
    P->nparams = 0;
    if (n == 0)
        return true;
    int32_t *param = ir_alloc_array(P->m->arena, n, sizeof(int32_t));
    if (!param)
        return lx_nomem(L);
    for (size_t i = 0; i < n; i++)
        param[i] = -1;
    for (size_t i = 0; i < n; i++) {
        ParamUse *u = &P->params[i];
        if (u->number >= (int64_t)n)
            return lx_fail(L, u->pos, "parameter number %lld is out of range: computation '%s' has %zu parameters",
                           (long long)u->number, c->name, n);
        if (param[u->number] >= 0)
            return lx_fail(L, u->pos, "parameter number %lld is already used by '%s'", (long long)u->number,
                           c->instr[param[u->number]].name);
        param[u->number] = u->instr;
        c->instr[u->instr].a.parameter_number = u->number;
    }
    c->param = param;
    c->nparam = (int32_t)n;
    return true;
}

/* constant(literal); an old-style shape prefix `constant(f32[2] {1, 2})` is
 * accepted when it matches the instruction's shape (the prefix takes no
 * layout: a brace after it starts the literal). */
static bool parse_constant(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (!lx_expect(L, LX_LPAREN, "'(' before the constant literal"))
        return false;
    if (lx_is(L, LX_NAME) && ir_type_from_name(lx_text(L), lx_tlen(L)) != IR_INVALID &&
        lx_peek(L).kind == LX_LSQUARE) {
        IrPos pos = L->tok.pos;
        IrShape s = {0};
        P->no_layout = true; /* `f32[2] {1, 2}`: the brace starts the literal */
        bool ok = prs_parse_shape(P, &s);
        P->no_layout = false;
        if (!ok)
            return false;
        if (!ir_shape_equal(&s, &x->ins.shape))
            return lx_fail(L, pos, "the literal's shape differs from the instruction's shape");
    }
    if (lx_is(L, LX_LBRACE) && lx_peek(L).kind == LX_DOTS && ir_shape_is_array(&x->ins.shape) &&
        x->ins.shape.rank > 0) {
        /* `constant({...})`: XLA elides large literals when it prints
         * without print_large_constants; its parser takes them. The values
         * are unknown: nothing is stored, and the printer writes {...}. */
        lx_next(L);
        lx_next(L);
        x->ins.a.literal_elided = true;
        return lx_expect(L, LX_RBRACE, "'}' after '{...'") &&
               lx_expect(L, LX_RPAREN, "')' after the constant literal");
    }
    return ir_lit_parse_lx(L, &x->ins.shape, &x->ins.a.literal, &x->ins.a.literal_bytes) &&
           lx_expect(L, LX_RPAREN, "')' after the constant literal");
}

/* instruction ::= 'ROOT'? name '=' rhs ; rhs ::= shape? opcode operands (',' attribute)*
 * A nested operand instruction (`nested`) is a bare rhs without attributes:
 * it is added with an empty name, given one by name_nested when its
 * computation is done, and is never the root. */
IrAttrsX *prs_x(InstrCtx *x)
{
    if (!x->x_used) {
        memset(&x->xs, 0, sizeof x->xs);
        x->x_used = true;
        x->ins.a.x = &x->xs;
    }
    return &x->xs;
}

/* The module's copy of an instruction's IrAttrsX, made once it is parsed. */
static const IrAttrsX *copy_attrs_x(Parser *P, const IrAttrsX *xs)
{
    IrAttrsX *c = ir_alloc(P->m->arena, sizeof *c);
    if (c)
        *c = *xs;
    return c;
}

/* The slot of the name that starts the line after the current token's, if
 * one does (the instruction after the next, in XLA's one per line): asked
 * for a whole instruction ahead, the probe finds it in the cache, where
 * one asked for at the next name alone would still be on its way from
 * memory. A guess: a line that is not an instruction costs a wasted
 * prefetch. */
static void prefetch_line_after(const Parser *P)
{
    const Lexer *L = &P->L;
    const char *t = L->text, *end = t + L->len, *p = t + L->tok.end;
    size_t room = (size_t)(end - p) < 1024 ? (size_t)(end - p) : 1024;
    const char *nl = memchr(p, '\n', room);
    if (!nl)
        return;
    p = nl + 1;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p > 5 && memcmp(p, "ROOT ", 5) == 0)
        p += 5;
    if (p < end && *p == '%')
        p++;
    const char *q = p;
    while (q < end && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                       *q == '_' || *q == '.' || *q == '-'))
        q++;
    if (q > p)
        prs_map_prefetch(&P->instrs, p, (size_t)(q - p));
}

/* The opcodes by number: for ir_nearest. */
static const char *opcode_name(void *ctx, int32_t i)
{
    (void)ctx;
    return ir_op_name((IrOpcode)i);
}

bool prs_parse_one(Parser *P, int32_t ci, bool nested, bool *saw_root)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[ci];
    char buf[80];
    bool is_root = false;
    IrPos root_pos = L->tok.pos;
    if (!nested && lx_is_word(L, "ROOT") && lx_peek(L).kind == LX_NAME) {
        is_root = true;
        lx_next(L);
    }
    if (!P->ictx && !(P->ictx = ts_malloc(sizeof *P->ictx)))
        return lx_nomem(L);
    InstrCtx *x = P->ictx;
    memset(x, 0, offsetof(InstrCtx, callee));
    x->comp = ci;
    x->index = c->ninstr;
    IrInstr *ins = &x->ins;
    ins->a.x = &ir_no_attrs_x;
    Span name = {0};
    bool ok = true;
    if (nested) {
        ins->pos = L->tok.pos;
        ins->name = "";
    } else {
        /* Two words where an instruction starts: the first a slip of ROOT. */
        static const char *const root[] = {"ROOT", NULL};
        if (lx_is(L, LX_NAME) && lx_peek(L).kind == LX_NAME && lx_near(L, root))
            return lx_expected_word(L, "ROOT or an instruction name", root);
        ok = prs_take_name(P, &name, "instruction name or '}'");
        if (ok) {
            ins->pos = name.pos;
            if (prs_map_find_hint(&P->instrs, L->text + name.start, name.len, &x->name_hint) >= 0)
                ok = lx_fail(L, name.pos, "duplicate instruction name '%.*s'", (int)name.len,
                             L->text + name.start);
        }
        ok = ok && (ins->name = prs_span_dup(P, name)) != NULL;
        ok = ok && lx_expect(L, LX_EQUAL, "'=' after the instruction name");
    }
    if (ok && lx_is(L, LX_NAME) && ir_type_from_name(lx_text(L), lx_tlen(L)) == IR_INVALID &&
        ir_op_from_name(lx_text(L), lx_tlen(L)) != OP_COUNT && lx_peek(L).kind == LX_LPAREN) {
        x->no_shape = true;
        ins->shape.type = IR_INVALID;
        if (!prs_shape_inferable(ir_op_from_name(lx_text(L), lx_tlen(L))))
            ok = lx_fail(L, L->tok.pos, "%s needs an explicit shape", lx_describe(L, buf, sizeof buf));
    } else {
        ok = ok && prs_parse_shape(P, &ins->shape);
    }
    /* An opcode with a non-ASCII letter (négate) is one word, unknown: the
     * lexer stops a name at such a byte. */
    bool foreign = ok && lx_word_end(L) > L->tok.end;
    if (ok && !foreign && (!lx_is(L, LX_NAME) || L->text[L->tok.start - 1] == '%'))
        ok = lx_expected(L, "opcode");
    if (ok) {
        ins->op = foreign ? OP_COUNT : ir_op_from_name(lx_text(L), lx_tlen(L));
        if (ins->op == OP_COUNT && (foreign || !prs_async_sugar(lx_text(L), lx_tlen(L), x))) {
            const char *near = ir_nearest(lx_text(L), lx_word_end(L) - L->tok.start, OP_COUNT, opcode_name, NULL);
            ok = lx_fail(L, L->tok.pos, "unknown opcode %s%s%s%s", lx_describe(L, buf, sizeof buf),
                         near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
        } else {
            lx_next(L);
        }
        P->nasync_sugar += ins->a.x->async_sugar && ins->op == OP_ASYNC_START;
        if (ins->op == OP_CONVOLUTION) {
            IrAttrsX *xs = prs_x(x);
            xs->feature_group_count = xs->batch_group_count = 1;
        }
    }
    if (ok) {
        if (ins->op == OP_PARAMETER)
            ok = parse_parameter(P, x);
        else if (ins->op == OP_CONSTANT)
            ok = parse_constant(P, x);
        else
            ok = parse_operands(P, x);
    }
    while (ok && !nested && lx_eat(L, LX_COMMA))
        ok = prs_parse_attribute(P, x);
    /* an attribute's name=value on the instruction's line after its
     * attributes: the ',' before it is missing (it was "missing attribute
     * 'to_apply'"). Another name= there is the next instruction (an
     * inline computation may hold several on one line). */
    if (ok && !nested && lx_is_attr(L) && L->tok.pos.line == ins->pos.line &&
        ir_attr_from_name(lx_text(L), lx_tlen(L)) != A_COUNT)
        ok = lx_fail(L, L->tok.pos, "expected ',' before attribute %s", lx_describe(L, buf, sizeof buf));
    ok = ok && prs_check_required(P, x) && assign_callees(P, x);
    if (ok && is_root) {
        if (*saw_root)
            ok = lx_fail(L, root_pos, "computation '%s' has more than one ROOT", c->name);
        *saw_root = true;
        c->root = x->index;
    }
    /* Counted as they are read, so a module of millions of instructions
     * is refused at the first one past the limit, before the rest is
     * parsed (and before the passes, whose memory grows with it). */
    if (ok && ++P->ninstr > L->lim.max_instructions)
        ok = lx_fail(L, ins->pos, "the module has more than %lld instructions (--limit instructions)",
                     (long long)L->lim.max_instructions);
    if (ok && x->x_used && !(ins->a.x = copy_attrs_x(P, &x->xs)))
        ok = lx_nomem(L);
    if (ok && ir_add_instr(P->m, c, ins) != x->index)
        ok = lx_nomem(L);
    if (ok && !nested && !prs_map_put_at(&P->instrs, &x->name_hint, ins->name, name.len, x->index))
        ok = lx_nomem(L);
    /* The next instruction's name is the current token: its duplicate
     * check probes a random slot of a table of megabytes, so ask for that
     * slot now, while the rest of this instruction (nested operands) and
     * the loop run. */
    if (ok && !nested && lx_is(L, LX_NAME)) {
        prs_map_prefetch(&P->instrs, lx_text(L), lx_tlen(L));
        prefetch_line_after(P);
    }
    if (ok && nested)
        ok = prs_push_i32(P, &P->unnamed, &P->nunnamed, &P->capunnamed, x->index);
    if (ok && x->no_shape)
        ok = prs_push_deferred(P, (Deferred){ci, x->index, x->sharding_pos, P->top});
    return ok;
}

static bool parse_instruction(Parser *P, int32_t ci, bool *saw_root)
{
    return prs_parse_one(P, ci, false, saw_root) && prs_parse_nested_ops(P, ci);
}

/* ---- computations ---- */

static const char *instr_name_at(void *ctx, int32_t i)
{
    const char *n = ((const IrComputation *)ctx)->instr[i].name;
    return n && *n ? n : NULL;
}

static const char *comp_name_at(void *ctx, int32_t i)
{
    return ((const IrModule *)ctx)->comp[i]->name;
}

/* Resolve operand and control-predecessor names of computation ci. */
static bool resolve_local(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->local.n; i++) {
        Ref *r = &P->local.v[i];
        int32_t idx = prs_map_find(&P->instrs, L->text + r->name.start, r->name.len);
        if (idx < 0) {
            /* did you mean: the computation's instruction a slip away */
            const char *near = ir_nearest(L->text + r->name.start, r->name.len, c->ninstr, instr_name_at, c);
            return lx_fail(L, r->name.pos, "undefined %s '%.*s'%s%s%s",
                           r->kind == REF_OPERAND ? "operand" : "control predecessor", (int)r->name.len,
                           L->text + r->name.start, near ? "; did you mean " : "", near ? near : "",
                           near ? "?" : "");
        }
        IrInstr *ins = &c->instr[r->instr];
        if (r->kind == REF_CONTROL) {
            ins->a.x->control_predecessors.v[r->slot] = idx;
            continue;
        }
        ins->opnd[r->slot] = idx;
        if (r->shape && c->instr[idx].shape.type != IR_INVALID &&
            !ir_shape_compatible(r->shape, &c->instr[idx].shape)) {
            char *want = ir_shape_str(r->shape, false), *have = ir_shape_str(&c->instr[idx].shape, false);
            lx_fail(L, r->name.pos, "operand '%.*s' is written as %s but is %s", (int)r->name.len,
                    L->text + r->name.start, want ? want : "?", have ? have : "?");
            ts_free(want);
            ts_free(have);
            return false;
        }
    }
    P->local.n = 0;
    return true;
}

/* Record every line that starts (after blanks) with '}', in one pass over
 * the text, so each computation can size its tables before it is read.
 * False on OOM. */
static bool find_closes(Parser *P)
{
    const char *t = P->L.text, *end = t + P->L.len;
    size_t n = 0;
    int64_t cap = 0;
    Close *v = NULL;
    int32_t line = 1;
    for (const char *p = t; p < end; line++) {
        const char *q = p;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < end && *q == '}') {
            if (!IR_GROW(v, cap, (int64_t)n + 1)) {
                ts_free(v);
                return lx_nomem(&P->L);
            }
            v[n++] = (Close){(size_t)(q - t), line};
        }
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        if (!nl || line == INT32_MAX)
            break;
        p = nl + 1;
    }
    P->closes = v;
    P->ncloses = n;
    return true;
}

/* Lines from the current token to the next line starting with '}': the
 * instruction count of a computation laid out one instruction per line
 * (0 when unknown). Computations are read in order, so the search
 * resumes where the last one stopped. At most EST_MAX: a text of blank
 * lines must not reserve gigabytes (a larger computation grows past it). */
enum { EST_MAX = 1 << 18 };
static int32_t estimate_instrs(Parser *P)
{
    const Lexer *L = &P->L;
    while (P->nextclose < P->ncloses && P->closes[P->nextclose].off <= L->tok.start)
        P->nextclose++;
    if (P->nextclose == P->ncloses)
        return 0;
    int64_t k = (int64_t)P->closes[P->nextclose].line - L->tok.pos.line;
    return k <= 0 ? 0 : k < EST_MAX ? (int32_t)k : EST_MAX;
}

/* '{' instruction+ '}' of computation ci, written or inline (`top`: a
 * written computation, read in text order, whose size can be estimated).
 * Errors about the computation as a whole point at `pos`. */
bool prs_parse_body(Parser *P, int32_t ci, bool top, IrPos pos)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[ci];
    char msg[64];
    snprintf(msg, sizeof msg, "'{' to start computation '%.20s'", c->name);
    bool ok = lx_expect(L, LX_LBRACE, msg);
    prs_map_free(&P->instrs);
    P->local.n = 0;
    P->nparams = 0;
    P->nunnamed = 0;
    int32_t est = 0;
    if (ok && top) {
        /* Size the instruction array and the name table once. */
        est = estimate_instrs(P);
        if (est > 0 && (ir_reserve_instrs(c, est) != IR_OK || !prs_map_reserve(&P->instrs, (size_t)est)))
            ok = lx_nomem(L);
        if (ok && est > 0) {
            ir_prefault(P->prefault, c->instr + c->ninstr, (size_t)(c->cap - c->ninstr) * sizeof(IrInstr));
        }
    }
    bool saw_root = false;
    int32_t last = -1; /* the last written instruction: the root without ROOT */
    Split *split = ok && top && est > 0 ? prs_split_start(P, est) : NULL;
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (split && L->tok.start >= prs_split_at(split)) {
            ok = prs_split_meet(P, split, ci, &saw_root, &last);
            prs_split_end(split);
            split = NULL;
            continue;
        }
        if (lx_is(L, LX_EOF)) {
            ok = lx_fail(L, L->tok.pos, "expected '}' to end computation '%s', found end of input", c->name);
            break;
        }
        last = c->ninstr;
        ok = parse_instruction(P, ci, &saw_root);
    }
    prs_split_end(split);
    ok = ok && lx_expect(L, LX_RBRACE, "'}'");
    if (ok && c->ninstr == 0)
        ok = lx_fail(L, pos, "computation '%s' has no instructions", c->name);
    ok = ok && prs_name_nested(P, c) && finish_params(P, c) && resolve_local(P, c);
    if (ok && c->root < 0)
        c->root = last;
    return ok;
}

/* computation ::= 'ENTRY'? name signature? '{' instruction+ '}' ( ',' execution_thread="..." )? */
static bool parse_computation(Parser *P)
{
    Lexer *L = &P->L;
    bool is_entry = lx_is_word(L, "ENTRY");
    IrPos entry_pos = L->tok.pos;
    /* Two words where a computation starts: the first is a slip of ENTRY. */
    static const char *const entry[] = {"ENTRY", NULL};
    if (!is_entry && lx_is(L, LX_NAME) && lx_peek(L).kind == LX_NAME && lx_near(L, entry))
        return lx_expected_word(L, "ENTRY or a computation", entry);
    if (is_entry)
        lx_next(L);
    Span name = {0};
    if (!prs_take_name(P, &name, is_entry ? "computation name after ENTRY" : "computation name or ENTRY"))
        return false;
    if (prs_map_find(&P->comps, L->text + name.start, name.len) >= 0)
        return lx_fail(L, name.pos, "duplicate computation name '%.*s'", (int)name.len, L->text + name.start);
    char *cname = prs_span_dup(P, name);
    if (!cname)
        return false;
    int32_t ci = ir_add_computation(P->m, cname);
    if (ci < 0 || !prs_map_put(&P->comps, P->m->comp[ci]->name, name.len, ci))
        return lx_nomem(L);
    IrComputation *c = P->m->comp[ci];
    c->pos = name.pos;
    P->top = ci;
    IrShape *sig = NULL, result = {0};
    int32_t nsig = 0;
    IrPos sig_pos = L->tok.pos;
    bool ok = true;
    if (lx_is(L, LX_LPAREN)) {
        c->has_signature = true;
        ok = prs_parse_signature(P, &sig, &nsig, &result);
    }
    ok = ok && prs_parse_body(P, ci, true, name.pos);
    if (ok && c->has_signature)
        ok = prs_push_sig(P, (SigCheck){ci, sig_pos, result});
    ts_free(sig);
    if (ok && lx_is(L, LX_COMMA)) {
        lx_next(L);
        char *thread;
        if (!lx_is_attr(L) || !lx_is_word(L, "execution_thread"))
            return lx_expected(L, "execution_thread= after the computation");
        lx_next(L);
        lx_next(L);
        ok = lx_string(L, &thread, "string after execution_thread=");
        c->execution_thread = ok ? thread : NULL;
    }
    if (ok && is_entry) {
        if (P->m->entry >= 0)
            return lx_fail(L, entry_pos, "more than one ENTRY computation ('%s' and '%s')",
                           P->m->comp[P->m->entry]->name, c->name);
        P->m->entry = ci;
    }
    P->last_top = ci;
    return ok && prs_parse_inline_bodies(P);
}

/* Resolve callee names against all computations, now that all are read. */
static bool resolve_callees(Parser *P)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->callees.n; i++) {
        Ref *r = &P->callees.v[i];
        int32_t ci = prs_map_find(&P->comps, L->text + r->name.start, r->name.len);
        if (ci < 0) {
            const char *near = ir_nearest(L->text + r->name.start, r->name.len, P->m->ncomp, comp_name_at, P->m);
            return lx_fail(L, r->name.pos, "undefined computation '%.*s'%s%s%s", (int)r->name.len,
                           L->text + r->name.start, near ? "; did you mean " : "", near ? near : "",
                           near ? "?" : "");
        }
        P->m->comp[r->comp]->instr[r->instr].called[r->slot] = ci;
    }
    return true;
}

static bool parse_module(Parser *P)
{
    Lexer *L = &P->L;
    bool header = lx_is_word(L, "HloModule");
    /* Two words first: the first a slip of HloModule (HloModul m). */
    static const char *const hlo_module[] = {"HloModule", NULL};
    if (!header && lx_is(L, LX_NAME) && lx_peek(L).kind == LX_NAME && lx_near(L, hlo_module))
        return lx_expected_word(L, "HloModule or a computation", hlo_module);
    if (header && !prs_parse_header(P))
        return false;
    if (lx_is_word(L, "FileNames") && !prs_skip_stack_frames(P))
        return false;
    if (lx_is(L, LX_EOF))
        return lx_expected(L, header ? "a computation after the module header" : "HloModule or a computation");
    while (!lx_is(L, LX_EOF))
        if (!parse_computation(P))
            return false;
    IrModule *m = P->m;
    /* The last written computation, not an inline one read after it. */
    if (m->entry < 0)
        m->entry = P->last_top;
    m->comp[m->entry]->is_entry = true;
    if (!header) {
        /* XLA names a headerless module after its entry computation. */
        char *n = ir_sprintf(m->arena, "module_%s", m->comp[m->entry]->name);
        if (!n)
            return lx_nomem(L);
        m->name = n;
    }
    return prs_name_inline(P) && resolve_callees(P) && prs_wrap_async_ops(P) && prs_infer_deferred(P) && prs_check_signatures(P) &&
           prs_check_donors(P);
}

/* ---- entry points ---- */

/* From about 16k instructions of text up: below, the thread costs more
 * than the faults it takes over. */
enum { PREFAULT_MIN = 1 << 20 };

static IrModule *module_named(const char *file);
static IrStatus parse_text(IrModule *m, char *src, size_t len, const IrParseOptions *opt, IrModule **out,
                           IrDiag *d);

IrStatus ir_parse(const char *file, const char *text, size_t len, const IrParseOptions *opt,
                  IrModule **out, IrDiag *d)
{
    if (!out)
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse: out is NULL");
    *out = NULL;
    if (!text && len > 0)
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse: text is NULL");
    if (len > MAX_INPUT)
        return ir_error(d, IR_EINPUT, file, NULL, (IrPos){0, 0}, "input too large (%zu bytes; the limit is %zu)",
                        len, MAX_INPUT);
    IrModule *m = module_named(file);
    char *src = m ? ir_alloc(m->arena, len + 1) : NULL;
    if (!src) {
        ir_module_free(m);
        return ir_error(d, IR_ENOMEM, file, NULL, (IrPos){0, 0}, "out of memory");
    }
    /* Parse a private NUL-terminated copy: the caller's text need not be
     * terminated, and diagnostics quote lines from it. */
    if (len > 0)
        memcpy(src, text, len);
    return parse_text(m, src, len, opt, out, d);
}

/* A new module that knows its file's name (for diagnostics); NULL on OOM. */
static IrModule *module_named(const char *file)
{
    IrModule *m = ir_module_new("module");
    if (m && file && !(m->file = ir_strdup(m->arena, file))) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}

/* Parse src[0, len), which lives in m's arena, into m: *out = m, or m is
 * freed. */
static IrStatus parse_text(IrModule *m, char *src, size_t len, const IrParseOptions *opt, IrModule **out,
                           IrDiag *d)
{
    Parser *P = ts_calloc(1, sizeof *P);
    if (!P) {
        IrStatus st = ir_error(d, IR_ENOMEM, m->file, NULL, (IrPos){0, 0}, "out of memory");
        ir_module_free(m);
        return st;
    }
    P->opt = opt ? *opt : ir_default_parse_options();
    P->top = P->last_top = -1;
    P->m = m;
    src[len] = 0;
    m->src = src;
    lx_init(&P->L, m->file, src, len, src, m->arena, d, &P->opt.limits);
    /* A large text fills tens of MiB of fresh pages: populated on another
     * core while this one parses (ir/prefault.c). */
    if (len >= PREFAULT_MIN) {
        P->prefault = ir_prefault_start();
        ir_arena_set_prefault(m->arena, P->prefault);
    }
    bool ok = find_closes(P) && parse_module(P);
    ir_arena_set_prefault(m->arena, NULL);
    ir_prefault_stop(P->prefault);
    IrStatus st = ok ? IR_OK : (P->L.st != IR_OK ? P->L.st : IR_EINTERNAL);
    bool verify = P->opt.verify;
    IrLimits lim = P->opt.limits;
    prs_release(P);
    ts_free(P);
    /* JAX's LAPACK custom-calls become tessel's linalg ops, and Shardy's
     * attributes shardings, before anything reads them. */
    if (st == IR_OK)
        st = ir_lapack_import(m, d);
    if (st == IR_OK)
        st = ir_sdy_import(m, d);
    if (st == IR_OK && verify)
        st = ir_verify_names_unique(m, &lim, d, true); /* duplicates were refused above */
    if (st != IR_OK) {
        ir_module_free(m);
        return st;
    }
    *out = m;
    return IR_OK;
}

IrStatus ir_parse_take(const char *file, char *text, size_t len, const IrParseOptions *opt, IrModule **out,
                       IrDiag *d)
{
    if (!out) {
        ir_big_free(text);
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse_take: out is NULL");
    }
    *out = NULL;
    if (!text)
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse_take: text is NULL");
    if (len > MAX_INPUT) {
        ir_big_free(text);
        return ir_error(d, IR_EINPUT, file, NULL, (IrPos){0, 0}, "input too large (%zu bytes; the limit is %zu)",
                        len, MAX_INPUT);
    }
    IrModule *m = module_named(file);
    if (!m) {
        ir_big_free(text);
        return ir_error(d, IR_ENOMEM, file, NULL, (IrPos){0, 0}, "out of memory");
    }
    m->src_owned = text;
    return parse_text(m, text, len, opt, out, d);
}

/* A regular file of `size` bytes, read into a block the module takes
 * (ir_parse_take: no copy to parse from). Closes f. */
static IrStatus parse_regular_file(FILE *f, const char *path, size_t size, const IrParseOptions *opt,
                                   IrModule **out, IrDiag *d)
{
    char *src = ir_big_alloc(size + 1);
    if (!src) {
        fclose(f);
        return ir_error(d, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory");
    }
    size_t n = 0, k;
    while (n < size && (k = fread(src + n, 1, size - n, f)) > 0)
        n += k;
    /* A file that grew since fstat would be parsed cut short. */
    bool grew = n == size && fgetc(f) != EOF;
    bool err = ferror(f);
    fclose(f);
    if (err || grew) {
        ir_big_free(src);
        return err ? ir_error(d, IR_ERUNTIME, path, NULL, (IrPos){0, 0}, "read error")
                   : ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                              "the file grew while it was read (%zu bytes at first)", size);
    }
    return ir_parse_take(path, src, n, opt, out, d);
}

IrStatus ir_parse_file(const char *path, const IrParseOptions *opt, IrModule **out, IrDiag *d)
{
    if (!out)
        return ir_error(d, IR_EINTERNAL, path, NULL, (IrPos){0, 0}, "ir_parse_file: out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > MAX_INPUT) {
        fclose(f);
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "file too large (%lld bytes; the limit is %zu)",
                        (long long)sb.st_size, MAX_INPUT);
    }
    if (S_ISREG(sb.st_mode) && sb.st_size > 0)
        return parse_regular_file(f, path, (size_t)sb.st_size, opt, out, d);
    /* Anything else (a pipe, a device, a file whose size stat does not
     * know): read in chunks, never past the limit. */
    size_t cap = S_ISREG(sb.st_mode) && sb.st_size > 0 ? (size_t)sb.st_size + 1 : 65536, n = 0;
    char *buf = ts_malloc(cap);
    if (!buf) {
        fclose(f);
        return ir_error(d, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory");
    }
    for (;;) {
        if (n == cap) {
            if (cap > MAX_INPUT) {
                ts_free(buf);
                fclose(f);
                return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "file too large (the limit is %zu bytes)",
                                MAX_INPUT);
            }
            char *nb = ts_realloc(buf, cap * 2);
            if (!nb) {
                ts_free(buf);
                fclose(f);
                return ir_error(d, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        ts_free(buf);
        return ir_error(d, IR_ERUNTIME, path, NULL, (IrPos){0, 0}, "read error");
    }
    IrStatus st = ir_parse(path, buf, n, opt, out, d);
    ts_free(buf);
    return st;
}
