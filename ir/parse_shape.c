/*
 * parse_shape.c: shapes in the HLO text parser (see parse.c): element
 * types, dimensions (static, <=N bounded, ? unbounded), tuples and layouts;
 * computation signatures, checked against their roots at the end; and the
 * shapes XLA lets the text omit, inferred once the whole module is read.
 */
#include "parse_internal.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* ---- shapes ---- */

/* tuple ::= '(' (shape (',' shape)*)? ')' */
static bool parse_tuple_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    if (!lx_enter(L))
        return false;
    lx_next(L);
    IrShape *elems = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = true;
    if (!lx_is(L, LX_RPAREN)) {
        do {
            if (n >= L->lim.max_tuple) {
                ok = lx_fail(L, L->tok.pos, "tuple wider than %d elements", (int)L->lim.max_tuple);
                break;
            }
            if (!IR_GROW(elems, cap, n + 1)) {
                ok = lx_nomem(L);
                break;
            }
            ok = prs_parse_shape(P, &elems[n++]);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RPAREN, "')' to end the tuple shape");
    if (ok) {
        memset(out, 0, sizeof *out);
        out->type = IR_TUPLE;
        out->ntuple = n;
        if (n > 0) {
            out->tuple = ir_alloc_array(P->m->arena, (size_t)n, sizeof(IrShape));
            if (!out->tuple)
                ok = lx_nomem(L);
            else
                memcpy(out->tuple, elems, (size_t)n * sizeof(IrShape));
        }
    }
    ts_free(elems);
    lx_leave(L);
    return ok;
}

/* The part of a layout after ':' as XLA's Layout prints it, a sequence of
 *   D(dim level types)  T(tile)(tile)...  L(n)  E(bits)  S(space)
 *   #(index type)  *(pointer type)  SC(split config)  M(bytes)
 * each a name and parenthesised contents (ints, `*` for a combined tile
 * dimension, type names, commas and colons). Kept raw; checked here so
 * that garbage is an error at its position rather than printed back. */
static bool check_layout_tail(Lexer *L, IrPos pos, const char *t, size_t n)
{
    static const char *const parts[] = {"SC", "D", "T", "L", "E", "S", "#", "*", "M", NULL};
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        for (int p = 0; parts[p] && !k; p++)
            if (strncmp(t + i, parts[p], strlen(parts[p])) == 0 && i + strlen(parts[p]) < n &&
                t[i + strlen(parts[p])] == '(')
                k = strlen(parts[p]);
        /* a part in lower case (t(8,128)) is a slip of that part */
        const char *near = NULL;
        for (int p = 0; parts[p] && !k && !near; p++) {
            size_t pl = strlen(parts[p]);
            if (strncasecmp(t + i, parts[p], pl) == 0 && i + pl < n && t[i + pl] == '(')
                near = parts[p];
        }
        if (!k)
            return lx_fail(L, (IrPos){pos.line, pos.col + (int32_t)i},
                           "unknown layout part '%.*s' (expected T(...), E(...), S(...), ...)%s%s%s",
                           (int)(n - i > 8 ? 8 : n - i), t + i, near ? "; did you mean " : "", near ? near : "",
                           near ? "(...)?" : "");
        i += k;
        /* one group, or several for T(8,128)(2,1) */
        while (i < n && t[i] == '(') {
            size_t j = i + 1;
            while (j < n && t[j] != ')' && (isalnum((unsigned char)t[j]) || strchr(",*:_ -", t[j])))
                j++;
            if (j >= n || t[j] != ')')
                return lx_fail(L, (IrPos){pos.line, pos.col + (int32_t)j},
                               "malformed layout part: expected ')'");
            i = j + 1;
        }
    }
    return true;
}

/* layout ::= '{' (int (',' int)*)? (':' tail)? '}' ; tail kept raw,
 * e.g. {1,0:T(8,128)(2,1)} or {:T(256)} for a scalar. */
static bool parse_layout(Parser *P, IrShape *s)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    lx_next(L);
    int64_t buf[8];
    I64Vec v = I64VEC_ON(buf);
    bool ok = true;
    if (lx_is(L, LX_INT)) {
        do {
            int64_t x = 0;
            ok = lx_int(L, &x, "integer in layout") && vec_push(L, &v, x);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    if (ok && lx_is(L, LX_COLON)) {
        lx_next(L);
        IrPos tpos = L->tok.pos;
        size_t a = L->tok.start, b = L->tok.start;
        if (!lx_is(L, LX_RBRACE))
            ok = lx_raw_value(L, &a, &b);
        while (ok && b > a && (L->text[b - 1] == ' ' || L->text[b - 1] == '\t' || L->text[b - 1] == '\r'))
            b--;
        ok = ok && check_layout_tail(L, tpos, L->text + a, b - a);
        ok = ok && (s->layout_tail = lx_dup(L, a, b)) != NULL;
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end the layout");
    if (ok && v.n != s->rank)
        ok = lx_fail(L, pos, "layout has %d entries but the shape has rank %d", (int)v.n, (int)s->rank);
    if (ok && s->rank > 0) {
        s->minor_to_major = ir_alloc_array(P->m->arena, (size_t)s->rank, sizeof(int32_t));
        if (!s->minor_to_major)
            ok = lx_nomem(L);
        for (int32_t i = 0; ok && i < s->rank; i++) {
            if (v.v[i] < 0 || v.v[i] >= s->rank)
                ok = lx_fail(L, pos, "layout entry %lld is out of range [0, %d)", (long long)v.v[i], (int)s->rank);
            for (int32_t j = 0; ok && j < i; j++)
                if (v.v[j] == v.v[i])
                    ok = lx_fail(L, pos, "layout is not a permutation: %lld repeats", (long long)v.v[i]);
            if (ok)
                s->minor_to_major[i] = (int32_t)v.v[i];
        }
    }
    s->has_layout = ok;
    vec_free(&v);
    return ok;
}

/* Mark dimension `i` of the shape being parsed as dynamic: the flags array
 * is made (all false) at the first dynamic dimension. */
static bool mark_dynamic(Parser *P, IrShape *out, int32_t i)
{
    if (!out->dynamic) {
        out->dynamic = ir_alloc_array(P->m->arena, (size_t)P->L.lim.max_rank, sizeof(bool));
        if (!out->dynamic)
            return lx_nomem(&P->L);
    }
    out->dynamic[i] = true;
    return true;
}

/* dim ::= int | '<=' int | '?'
 * `<=N` is a bounded dynamic dimension (its size is known at run time, at
 * most N: dims[] holds the bound); `?` an unbounded one (IR_DIM_UNBOUNDED),
 * which tessel parses, verifies and prints but cannot run. */
static bool parse_dim(Parser *P, IrShape *out, I64Vec *dims, int32_t *nunbounded)
{
    Lexer *L = &P->L;
    int32_t i = (int32_t)dims->n;
    if (lx_is(L, LX_OTHER) && lx_text(L)[0] == '?') {
        lx_next(L);
        (*nunbounded)++;
        return mark_dynamic(P, out, i) && vec_push(L, dims, IR_DIM_UNBOUNDED);
    }
    if (lx_eat(L, LX_LEQ) && !mark_dynamic(P, out, i))
        return false;
    IrPos dpos = L->tok.pos;
    int64_t d = 0;
    if (!lx_int(L, &d, "dimension size") || !vec_push(L, dims, d))
        return false;
    if (d < 0)
        return lx_fail(L, dpos, "dimension size %lld is negative", (long long)d);
    return true;
}

/* shape ::= tuple | type '[' (dim (',' dim)*)? ']' layout? */
static bool parse_array_shape(Parser *P, IrShape *out);

/* b(f32[2,4]{1,0}): XLA's buffer shape, an array shape inside. */
static bool parse_buffer_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    lx_next(L);
    lx_next(L);
    IrPos pos = L->tok.pos;
    if (lx_is(L, LX_LPAREN) || (lx_is(L, LX_NAME) && lx_tlen(L) == 1 && lx_text(L)[0] == 'b'))
        return lx_fail(L, pos, "a buffer shape b(...) holds an array shape");
    if (!parse_array_shape(P, out))
        return false;
    if (out->type == IR_TOKEN)
        return lx_fail(L, pos, "a buffer shape b(...) holds an array shape");
    out->buffer = true;
    return lx_expect(L, LX_RPAREN, "')' to end the buffer shape");
}

bool prs_parse_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    memset(out, 0, sizeof *out);
    if (lx_is(L, LX_LPAREN))
        return parse_tuple_shape(P, out);
    if (lx_is(L, LX_NAME) && lx_tlen(L) == 1 && lx_text(L)[0] == 'b' && lx_peek(L).kind == LX_LPAREN)
        return parse_buffer_shape(P, out);
    return parse_array_shape(P, out);
}

/* The element types by index, for "did you mean" (IR_INVALID has none). */
static const char *type_name_at(void *ctx, int32_t i)
{
    (void)ctx;
    return i > IR_INVALID && i < IR_TUPLE ? ir_type_name((IrType)i) : NULL;
}

/* type '[' (dim (',' dim)*)? ']' layout? */
static bool parse_array_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    char buf[64];
    IrType t = lx_is(L, LX_NAME) ? ir_type_from_name(lx_text(L), lx_tlen(L)) : IR_INVALID;
    if (t == IR_INVALID) {
        if (lx_is(L, LX_NAME) && ir_op_from_name(lx_text(L), lx_tlen(L)) != OP_COUNT &&
            lx_peek(L).kind == LX_LPAREN)
            return lx_fail(L, L->tok.pos, "expected a shape before opcode %s",
                           lx_describe(L, buf, sizeof buf));
        /* A slip of an element type (fp32, bf61, f3) is named: words
         * followed by '[' only, so that an opcode or a name is not. */
        if (lx_is(L, LX_BAD))
            return lx_expected(L, "shape");
        size_t we = lx_word_end(L);
        const char *near = NULL;
        if ((lx_is(L, LX_NAME) || we > L->tok.end) && we < L->len && L->text[we] == '[')
            near = ir_nearest(lx_text(L), we - L->tok.start, IR_TUPLE, type_name_at, NULL);
        return lx_fail(L, L->tok.pos, "expected shape, found %s%s%s%s", lx_describe(L, buf, sizeof buf),
                       near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    }
    IrPos pos = L->tok.pos;
    lx_next(L);
    if (!lx_expect(L, LX_LSQUARE, "'[' after the element type"))
        return false;
    int64_t dbuf[8];
    I64Vec dims = I64VEC_ON(dbuf);
    int32_t nunbounded = 0;
    bool ok = true;
    if (!lx_is(L, LX_RSQUARE)) {
        do {
            if (dims.n >= L->lim.max_rank) {
                ok = lx_fail(L, L->tok.pos, "rank exceeds the limit of %d", (int)L->lim.max_rank);
                break;
            }
            ok = parse_dim(P, out, &dims, &nunbounded);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RSQUARE, "']' after dimensions");
    if (ok) {
        out->type = t;
        out->rank = dims.n;
        out->dims = dims.v; /* temporarily, for the count */
        int64_t n = nunbounded ? 0 : ir_shape_elements(out);
        if (n < 0)
            ok = lx_fail(L, pos, "the element count of this shape overflows 64 bits");
        else if (n > L->lim.max_elements)
            ok = lx_fail(L, pos, "shape has %lld elements, more than the limit of %lld", (long long)n,
                         (long long)L->lim.max_elements);
        else if (t == IR_TOKEN && dims.n > 0)
            ok = lx_fail(L, pos, "token[] takes no dimensions");
        out->dims = NULL;
    }
    if (ok && dims.n > 0) {
        IrI64List l = {0};
        ok = vec_to_list(L, &dims, &l);
        out->dims = l.v;
    }
    vec_free(&dims);
    if (ok && lx_is(L, LX_LBRACE) && !P->no_layout) {
        LxKind next = lx_peek(L).kind;
        if (next == LX_INT || next == LX_COLON || next == LX_RBRACE)
            ok = parse_layout(P, out);
    }
    return ok;
}

/* ---- signatures ---- */

/* signature ::= '(' (name ':'? shape (',' ...)*)? ')' '->' shape ; shapes
 * go to sig[0..n) (heap, caller frees) and *result. */
bool prs_parse_signature(Parser *P, IrShape **sig, int32_t *nsig, IrShape *result)
{
    Lexer *L = &P->L;
    int64_t cap = 0;
    lx_next(L);
    if (!lx_is(L, LX_RPAREN)) {
        do {
            Span pname = {0};
            if (!prs_take_name(P, &pname, "parameter name"))
                return false;
            lx_eat(L, LX_COLON);
            if (*nsig == cap && cap >= (1 << 24))
                return lx_fail(L, pname.pos, "too many parameters");
            if (!IR_GROW(*sig, cap, *nsig + 1))
                return lx_nomem(L);
            if (!prs_parse_shape(P, &(*sig)[(*nsig)++]))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    return lx_expect(L, LX_RPAREN, "')' to end the parameter list") &&
           lx_expect(L, LX_ARROW, "'->' before the result shape") && prs_parse_shape(P, result);
}

/* The written result shape must agree with the root (XLA checks only
 * this: parameter shapes in the signature are informative). */
bool prs_check_signatures(Parser *P)
{
    for (size_t i = 0; i < P->nsigs; i++) {
        SigCheck *sc = &P->sigs[i];
        IrComputation *c = P->m->comp[sc->comp];
        const IrShape *root = &c->instr[c->root].shape;
        if (!ir_shape_compatible(&sc->result, root)) {
            char *want = ir_shape_str(&sc->result, false), *have = ir_shape_str(root, false);
            lx_fail(&P->L, sc->pos, "computation '%s' is declared to return %s but its root '%s' is %s",
                    c->name, want ? want : "?", c->instr[c->root].name, have ? have : "?");
            ts_free(want);
            ts_free(have);
            return false;
        }
    }
    return true;
}

bool prs_push_sig(Parser *P, SigCheck sc)
{
    if (!IR_GROW(P->sigs, P->capsigs, (int64_t)P->nsigs + 1))
        return lx_nomem(&P->L);
    P->sigs[P->nsigs++] = sc;
    return true;
}

/* ---- shapes the text leaves out ---- */

/* Ops whose shape XLA lets the text omit (hlo_parser.cc CanInferShape). */
bool prs_shape_inferable(IrOpcode op)
{
    switch (op) {
    case OP_PARAMETER: case OP_CONSTANT: case OP_IOTA: case OP_CONVERT: case OP_BITCAST_CONVERT:
    case OP_BITCAST: case OP_RESHAPE: case OP_SLICE: case OP_DYNAMIC_SLICE:
    case OP_DYNAMIC_UPDATE_SLICE: case OP_CUSTOM_CALL: case OP_INFEED: case OP_OUTFEED: case OP_RNG:
    case OP_RNG_BIT_GENERATOR: case OP_REDUCE_PRECISION: case OP_ALL_REDUCE: case OP_ALL_GATHER:
    case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE: case OP_COUNT:
    /* ... and, in tessel, the ops whose result the operands do not fix */
    case OP_FUSION: case OP_ASYNC_START: case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
    case OP_COPY_START: case OP_SEND: case OP_RECV: case OP_RECV_DONE: case OP_ALL_REDUCE_START:
    case OP_ALL_GATHER_START: case OP_COLLECTIVE_PERMUTE_START: case OP_ALL_GATHER_DONE:
    case OP_COLLECTIVE_PERMUTE_DONE: case OP_ALL_REDUCE_DONE: case OP_COPY_DONE:
    case OP_STOCHASTIC_CONVERT: case OP_DYNAMIC_RESHAPE: case OP_SET_DIMENSION_SIZE:
    case OP_RAGGED_DOT: case OP_SCALED_DOT: case OP_RAGGED_ALL_TO_ALL: case OP_COLLECTIVE_BROADCAST:
    case OP_COLLECTIVE_REDUCE: case OP_RNG_GET_AND_UPDATE_STATE: case OP_SCAN: case OP_TOPK:
        return false;
    default:
        return true;
    }
}

bool prs_push_deferred(Parser *P, Deferred df)
{
    if (!IR_GROW(P->defer, P->capdefer, (int64_t)P->ndefer + 1))
        return lx_nomem(&P->L);
    P->defer[P->ndefer++] = df;
    return true;
}

/* The simple rules (elementwise, tuples); everything else goes to
 * ir_infer_shape. Example: compare(f32[4] a, f32[4] b) -> pred[4]. */
static IrStatus infer_one(IrModule *m, IrComputation *c, IrInstr *ins, IrShape *out, IrDiag *d)
{
    IrArena *A = m->arena;
    const IrShape *o0 = ins->nopnd > 0 ? &c->instr[ins->opnd[0]].shape : NULL;
    IrOpKind kind = ir_op_kind(ins->op);
    IrStatus st;
    switch (ins->op) {
    case OP_TUPLE: {
        IrShape *el = ts_malloc((size_t)(ins->nopnd > 0 ? ins->nopnd : 1) * sizeof *el);
        if (!el)
            return IR_ENOMEM;
        for (int32_t i = 0; i < ins->nopnd; i++)
            el[i] = c->instr[ins->opnd[i]].shape;
        st = ir_shape_make_tuple(A, out, ins->nopnd, el);
        ts_free(el);
        return st;
    }
    case OP_GET_TUPLE_ELEMENT:
        if (o0 && o0->type == IR_TUPLE && ins->a.tuple_index >= 0 && ins->a.tuple_index < o0->ntuple)
            return ir_shape_copy(A, out, &o0->tuple[ins->a.tuple_index]);
        break;
    case OP_AFTER_ALL:
        return ir_shape_make(A, out, IR_TOKEN, 0, NULL);
    case OP_PARTITION_ID:
    case OP_REPLICA_ID:
        return ir_shape_make(A, out, IR_U32, 0, NULL);
    case OP_OPTIMIZATION_BARRIER:
    case OP_ADD_DEPENDENCY:
        if (o0)
            return ir_shape_copy(A, out, o0);
        break;
    default:
        if (kind == IR_K_OTHER || !o0 || o0->type == IR_TUPLE)
            break;
        /* select and clamp take their shape from the middle operand */
        if (kind == IR_K_TERNARY && ins->nopnd == 3)
            o0 = &c->instr[ins->opnd[1]].shape;
        if ((st = ir_shape_copy(A, out, o0)) != IR_OK)
            return st;
        if (ins->op == OP_COMPARE || ins->op == OP_IS_FINITE)
            out->type = IR_PRED;
        else if ((ins->op == OP_REAL || ins->op == OP_IMAG) && ir_type_is_complex(o0->type))
            out->type = o0->type == IR_C64 ? IR_F32 : IR_F64;
        else if (ins->op == OP_COMPLEX)
            out->type = o0->type == IR_F64 ? IR_C128 : IR_C64;
        return IR_OK;
    }
    return ir_infer_shape(m, c, ins, out, A, d);
}

/* Infer the omitted shapes of one computation in dependency order (Kahn's
 * algorithm over the deferred instructions only, so it stays linear). */
static bool infer_group(Parser *P, const Deferred *df, size_t n)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[df[0].comp];
    size_t ni = (size_t)c->ninstr;
    int32_t *slot = ts_malloc(ni * sizeof(int32_t));
    int32_t *pending = ts_calloc(n, sizeof(int32_t));
    int32_t *start = ts_calloc(n + 1, sizeof(int32_t));
    int32_t *queue = ts_malloc(n * sizeof(int32_t));
    int32_t *users = NULL;
    bool ok = slot && pending && start && queue;
    size_t nedges = 0;
    if (ok) {
        for (size_t i = 0; i < ni; i++)
            slot[i] = -1;
        for (size_t k = 0; k < n; k++)
            slot[df[k].instr] = (int32_t)k;
        /* edges o -> u for each deferred operand o of deferred u */
        for (size_t k = 0; k < n; k++) {
            IrInstr *u = &c->instr[df[k].instr];
            for (int32_t j = 0; j < u->nopnd; j++) {
                int32_t o = slot[u->opnd[j]];
                if (o >= 0) {
                    pending[k]++;
                    start[o + 1]++;
                    nedges++;
                }
            }
        }
        for (size_t k = 0; k < n; k++)
            start[k + 1] += start[k];
        users = ts_malloc((nedges > 0 ? nedges : 1) * sizeof(int32_t));
        ok = users != NULL;
    }
    if (!ok) {
        ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users);
        return lx_nomem(L);
    }
    int32_t *fill = ts_calloc(n > 0 ? n : 1, sizeof(int32_t));
    if (!fill) {
        ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users);
        return lx_nomem(L);
    }
    for (size_t k = 0; k < n; k++) {
        IrInstr *u = &c->instr[df[k].instr];
        for (int32_t j = 0; j < u->nopnd; j++) {
            int32_t o = slot[u->opnd[j]];
            if (o >= 0)
                users[start[o] + fill[o]++] = (int32_t)k;
        }
    }
    size_t head = 0, tail = 0, done = 0;
    for (size_t k = 0; k < n; k++)
        if (pending[k] == 0)
            queue[tail++] = (int32_t)k;
    while (ok && head < tail) {
        int32_t k = queue[head++];
        IrInstr *ins = &c->instr[df[k].instr];
        IrDiag tmp = {0};
        IrShape shape = {0};
        IrStatus st = infer_one(P->m, c, ins, &shape, &tmp);
        if (st == IR_ENOMEM) {
            ok = lx_nomem(L);
        } else if (st != IR_OK) {
            ok = lx_fail(L, ins->pos, "cannot infer the shape of '%s' (%s): %s; write it explicitly", ins->name,
                         ir_op_name(ins->op), tmp.msg ? tmp.msg : "unsupported");
        } else {
            ins->shape = shape;
            done++;
            if (ins->sharding && df[k].sharding_pos.line > 0) {
                st = ir_sharding_validate(ins->sharding, &ins->shape, P->num_devices, L->d, L->file, L->src,
                                          df[k].sharding_pos);
                if (st != IR_OK) {
                    L->st = st;
                    ok = false;
                }
            }
            for (int32_t e = start[k]; ok && e < start[k + 1]; e++)
                if (--pending[users[e]] == 0)
                    queue[tail++] = users[e];
        }
        ir_diag_clear(&tmp);
    }
    if (ok && done < n) {
        for (size_t k = 0; k < n; k++) {
            if (pending[k] > 0) {
                IrInstr *ins = &c->instr[df[k].instr];
                ok = lx_fail(L, ins->pos, "cannot infer the shape of '%s': its operands form a cycle", ins->name);
                break;
            }
        }
    }
    ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users), ts_free(fill);
    return ok;
}

/* Deferred entries come grouped by computation, in the order the
 * computations were read: a written computation, then the inline ones in
 * it, each read after the one that holds it. A call's shape is its
 * callee's root shape, so within one written computation's block the
 * groups go last to first: every inline computation before its holder. */
bool prs_infer_deferred(Parser *P)
{
    size_t i = 0;
    while (i < P->ndefer) {
        size_t j = i;
        while (j < P->ndefer && P->defer[j].top == P->defer[i].top)
            j++;
        for (size_t e = j; e > i;) {
            size_t s = e - 1;
            while (s > i && P->defer[s - 1].comp == P->defer[e - 1].comp)
                s--;
            if (!infer_group(P, P->defer + s, e - s))
                return false;
            e = s;
        }
        i = j;
    }
    return true;
}
