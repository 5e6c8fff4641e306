/*
 * parse_inline.c: what the HLO text parser reads out of order (see
 * parse.c): inline computations (`to_apply={ ... }`) and nested operand
 * instructions (`add(x, s32[] constant(1))`). Each is skipped where it
 * stands (its lexer position kept), read once the computation or
 * instruction that holds it is done, and named once every written name
 * around it is known.
 */
#include "parse_internal.h"

#include <string.h>

/* ---- inline computations ---- */

static bool push_body(Parser *P, InlineBody b)
{
    if (!IR_GROW(P->bodies, P->capbodies, (int64_t)P->nbodies + 1))
        return lx_nomem(&P->L);
    P->bodies[P->nbodies++] = b;
    return true;
}

/* An inline computation `{ instruction+ }` at the current '{', the value
 * of attribute id (item k of a list, or -1): skipped now and added with a
 * provisional name, INSTR.ATTR or INSTR.ATTR.K (XLA names them "_" and
 * leaves them to its name uniquifier; a name that says where the
 * computation came from reads better), made unique by name_inline once
 * every written computation name is known. Its body is read by
 * parse_inline_bodies when the computation around it is done. */
bool prs_inline_callee(Parser *P, InstrCtx *x, AttrId id, int32_t k, Span *out)
{
    Lexer *L = &P->L;
    LxMark at = lx_mark(L);
    size_t s, e;
    if (!lx_raw_group(L, &s, &e))
        return false;
    const char *attr = prs_attr_name(id);
    char *name = k >= 0 ? ir_sprintf(P->m->arena, "%s.%s.%d", x->ins.name, attr, (int)k)
                        : ir_sprintf(P->m->arena, "%s.%s", x->ins.name, attr);
    /* Leave room for a ".N" suffix within the name limit, so the printed
     * text parses again. */
    if (name && (int64_t)strlen(name) + 12 > L->lim.max_name)
        name = k >= 0 ? ir_sprintf(P->m->arena, "%s.%d", attr, (int)k) : ir_sprintf(P->m->arena, "%s", attr);
    if (!name)
        return lx_nomem(L);
    int32_t ci = ir_add_computation(P->m, name);
    if (ci < 0)
        return lx_nomem(L);
    P->m->comp[ci]->pos = at.tok.pos;
    if (!prs_push_i32(P, &P->inl, &P->ninl, &P->capinl, ci) || !push_body(P, (InlineBody){ci, at}))
        return false;
    *out = inline_span(ci, at.tok.pos);
    return true;
}

/* Read the inline computations skipped while the last written computation
 * was read (and those inline in them: reading one may queue more), each
 * from its '{', then continue after that computation. Each is read after
 * the computation that holds it, which infer_deferred relies on. */
bool prs_parse_inline_bodies(Parser *P)
{
    Lexer *L = &P->L;
    if (P->nbodies == 0)
        return true;
    LxMark back = lx_mark(L);
    bool ok = true;
    /* In text order (a queue), as they were added and will be named. */
    for (size_t head = 0; ok && head < P->nbodies; head++) {
        InlineBody b = P->bodies[head];
        lx_reset(L, b.at);
        ok = prs_parse_body(P, b.comp, false, b.at.tok.pos);
    }
    P->nbodies = 0;
    lx_reset(L, back);
    return ok;
}

/* Make the provisional names of the inline computations unique among all
 * computations, now that every written name is known: BASE if free, else
 * BASE.1, BASE.2, ... (inl_next remembers where each base stopped, so a
 * base used many times costs no more than it has uses). */
bool prs_name_inline(Parser *P)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->ninl; i++) {
        IrComputation *c = P->m->comp[P->inl[i]];
        const char *base = c->name;
        size_t blen = strlen(base);
        int32_t *next = prs_map_ref(&P->inl_next, base, blen);
        int32_t k = next ? *next : 0;
        const char *name = base;
        while (prs_map_find(&P->comps, name, strlen(name)) >= 0)
            if (!(name = ir_sprintf(P->m->arena, "%s.%d", base, (int)++k)))
                return lx_nomem(L);
        if (next)
            *next = k;
        else if (!prs_map_put(&P->inl_next, base, blen, k))
            return lx_nomem(L);
        if (!prs_map_put(&P->comps, name, strlen(name), P->inl[i]))
            return lx_nomem(L);
        c->name = name;
    }
    return true;
}

/* ---- nested operand instructions ---- */

static bool push_nested(Parser *P, NestedOp n)
{
    if (!IR_GROW(P->nested, P->capnested, (int64_t)P->nnested + 1))
        return lx_nomem(&P->L);
    P->nested[P->nnested++] = n;
    return true;
}

/* A nested operand instruction `shape? opcode(...)` at the current opcode
 * token, operand k of x, whose text started at `at`: skipped now (its
 * operands may nest further) and read by parse_nested_ops once x is
 * added. XLA reads no attributes for a nested instruction (a comma after
 * it would be ambiguous), so its text ends at its ')'. */
bool prs_skip_nested(Parser *P, InstrCtx *x, int32_t k, LxMark at)
{
    Lexer *L = &P->L;
    size_t s, e;
    lx_next(L); /* the opcode */
    return lx_raw_group(L, &s, &e) && push_nested(P, (NestedOp){x->index, k, at}) && prs_push_opv(P, -1);
}

/* Read the nested operand instructions skipped while the last instruction
 * was read (and those nested in them: reading one may queue more), each
 * from where its text starts, then continue after that instruction. */
bool prs_parse_nested_ops(Parser *P, int32_t ci)
{
    Lexer *L = &P->L;
    if (P->nnested == 0)
        return true;
    LxMark back = lx_mark(L);
    bool ok = true;
    /* In text order (a queue), so generated names number left to right. */
    for (size_t head = 0; ok && head < P->nnested; head++) {
        NestedOp n = P->nested[head];
        lx_reset(L, n.at);
        IrComputation *c = P->m->comp[ci];
        int32_t idx = c->ninstr;
        ok = prs_parse_one(P, ci, true, NULL);
        if (ok)
            P->m->comp[ci]->instr[n.user].opnd[n.slot] = idx;
    }
    P->nnested = 0;
    lx_reset(L, back);
    return ok;
}

/* Name the nested instructions of computation c after their opcode, as
 * XLA does ("constant", then "constant.1", ...), skipping every name the
 * computation already has; each candidate is tried once per computation. */
bool prs_name_nested(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    size_t n = P->nunnamed;
    P->nunnamed = 0;
    if (n == 0)
        return true;
    if (!P->opnext && !(P->opnext = ts_malloc((size_t)OP_COUNT * sizeof *P->opnext)))
        return lx_nomem(L);
    for (int32_t i = 0; i < OP_COUNT; i++)
        P->opnext[i] = 0;
    for (size_t i = 0; i < n; i++) {
        IrInstr *ins = &c->instr[P->unnamed[i]];
        char opbuf[64];
        const char *op = op_text(ins, opbuf, sizeof opbuf);
        char *name;
        for (;;) {
            int32_t k = P->opnext[ins->op]++;
            name = k ? ir_sprintf(P->m->arena, "%s.%d", op, (int)k) : ir_sprintf(P->m->arena, "%s", op);
            if (!name)
                return lx_nomem(L);
            if (prs_map_find(&P->instrs, name, strlen(name)) < 0)
                break;
        }
        if (!prs_map_put(&P->instrs, name, strlen(name), P->unnamed[i]))
            return lx_nomem(L);
        ins->name = name;
    }
    return true;
}
