/*
 * infer_control.c: shape rules of values, tuples and control flow
 * (parameter, constant, iota, tuple, get-tuple-element, call and fusion,
 * while, conditional, tokens), of host interaction, randomness and
 * custom-calls, and of the async wrappers, copy-start and the -done ops.
 */
#include "infer_internal.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* values, tuples and control flow                                     */
/* ------------------------------------------------------------------ */

IrStatus infer_declared(Ctx *x, IrShape *out)
{
    return infer_copy_shape(x, out, &x->ins->shape);
}

IrStatus infer_iota(Ctx *x, IrShape *out)
{
    const IrShape *s = &x->ins->shape;
    if (!infer_is_array(s) || s->rank == 0)
        return infer_fail(x, "result must be an array of rank >= 1, got %s", infer_sstr(x, s));
    if (s->type == IR_PRED)
        return infer_fail(x, "result cannot be pred");
    if (x->ins->a.iota_dimension < 0 || x->ins->a.iota_dimension >= s->rank)
        return infer_fail(x, "iota_dimension=%lld is out of range for rank %d",
                    (long long)x->ins->a.iota_dimension, (int)s->rank);
    return infer_copy_shape(x, out, s);
}

IrStatus infer_tuple(Ctx *x, IrShape *out)
{
    int32_t n = x->ins->nopnd;
    memset(out, 0, sizeof *out);
    out->type = IR_TUPLE;
    out->ntuple = n;
    if (n == 0)
        return IR_OK;
    out->tuple = ir_alloc_array(x->a, (size_t)n, sizeof(IrShape));
    if (!out->tuple)
        return infer_oom(x);
    for (int32_t i = 0; i < n; i++)
        if (infer_copy_shape(x, &out->tuple[i], infer_opnd(x, i)) != IR_OK)
            return IR_ENOMEM;
    return IR_OK;
}

IrStatus infer_gte(Ctx *x, IrShape *out)
{
    const IrShape *s = infer_opnd(x, 0);
    int64_t k = x->ins->a.tuple_index;
    if (s->type != IR_TUPLE)
        return infer_fail(x, "operand %s must be a tuple, got %s", infer_opnd_name(x, 0), infer_sstr(x, s));
    if (k < 0 || k >= s->ntuple)
        return infer_fail(x, "index=%lld is out of range for a tuple of %d elements", (long long)k,
                    (int)s->ntuple);
    return infer_copy_shape(x, out, &s->tuple[k]);
}

IrStatus infer_call(Ctx *x, IrShape *out)
{
    const IrComputation *f = infer_callee(x, 0);
    IrStatus st = infer_expect_nparams(x, f, "called", x->ins->nopnd);
    if (st != IR_OK)
        return st;
    for (int32_t i = 0; i < x->ins->nopnd; i++) {
        const IrShape *p = infer_callee_param(x, f, i);
        if (!p)
            return IR_EINPUT;
        if (!ir_shape_equal(p, infer_opnd(x, i)))
            return infer_fail(x, "operand %d is %s but parameter %d of %s is %s", (int)i,
                        infer_sstr(x, infer_opnd(x, i)), (int)i, f->name, infer_sstr(x, p));
    }
    const IrShape *r = infer_callee_root(x, f);
    return r ? infer_copy_shape(x, out, r) : IR_EINPUT;
}

/* A computation taking exactly one parameter of shape `s`. */
static IrStatus check_unary_comp(Ctx *x, const IrComputation *f, const char *role,
                                 const IrShape *s)
{
    IrStatus st = infer_expect_nparams(x, f, role, 1);
    if (st != IR_OK)
        return st;
    const IrShape *p = infer_callee_param(x, f, 0);
    if (!p)
        return IR_EINPUT;
    if (!ir_shape_equal(p, s))
        return infer_fail(x, "%s computation %s takes %s but is given %s", role, f->name, infer_sstr(x, p),
                    infer_sstr(x, s));
    return IR_OK;
}

/* while: condition (T) -> pred[], body (T) -> T, result T. */
IrStatus infer_while(Ctx *x, IrShape *out)
{
    const IrShape *init = infer_opnd(x, 0);
    const IrComputation *cond = infer_callee(x, 0), *body = infer_callee(x, 1);
    IrStatus st;
    if ((st = check_unary_comp(x, cond, "condition", init)) != IR_OK ||
        (st = check_unary_comp(x, body, "body", init)) != IR_OK)
        return st;
    const IrShape *cr = infer_callee_root(x, cond), *br = infer_callee_root(x, body);
    if (!cr || !br)
        return IR_EINPUT;
    if (!infer_is_scalar(cr) || cr->type != IR_PRED)
        return infer_fail(x, "condition computation %s must return pred[], it returns %s", cond->name,
                    infer_sstr(x, cr));
    if (!ir_shape_equal(br, init))
        return infer_fail(x, "body computation %s must return the loop shape %s, it returns %s",
                    body->name, infer_sstr(x, init), infer_sstr(x, br));
    return infer_copy_shape(x, out, init);
}

/* conditional: pred[] selects between two branches (true, false); s32[]
 * selects among N branches (out of range -> the last). Branch k takes
 * operand k+1; all branches return the same shape. */
IrStatus infer_conditional(Ctx *x, IrShape *out)
{
    const IrInstr *ins = x->ins;
    const IrShape *sel = infer_opnd(x, 0);
    if (!infer_is_scalar(sel) || (sel->type != IR_PRED && sel->type != IR_S32))
        return infer_fail(x, "branch selector must be pred[] or s32[], got %s", infer_sstr(x, sel));
    if (sel->type == IR_PRED && ins->ncalled != 2)
        return infer_fail(x, "a pred selector needs 2 branch computations, got %d", (int)ins->ncalled);
    if (ins->ncalled < 1)
        return infer_fail(x, "needs at least one branch computation");
    if (ins->nopnd != ins->ncalled + 1)
        return infer_fail(x, "%d branch computations need %d operands, got %d", (int)ins->ncalled,
                    (int)ins->ncalled + 1, (int)ins->nopnd);
    const IrShape *r0 = NULL;
    for (int32_t k = 0; k < ins->ncalled; k++) {
        const IrComputation *b = infer_callee(x, k);
        IrStatus st = check_unary_comp(x, b, "branch", infer_opnd(x, k + 1));
        if (st != IR_OK)
            return st;
        const IrShape *r = infer_callee_root(x, b);
        if (!r)
            return IR_EINPUT;
        if (r0 && !ir_shape_equal(r, r0))
            return infer_fail(x, "branch %s returns %s but branch %s returns %s", b->name, infer_sstr(x, r),
                        infer_callee(x, 0)->name, infer_sstr(x, r0));
        r0 = r;
    }
    return infer_copy_shape(x, out, r0);
}

IrStatus infer_after_all(Ctx *x, IrShape *out)
{
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if (infer_opnd(x, i)->type != IR_TOKEN)
            return infer_fail(x, "operand %d (%s) must be a token, got %s", (int)i, infer_opnd_name(x, i),
                        infer_sstr(x, infer_opnd(x, i)));
    memset(out, 0, sizeof *out);
    out->type = IR_TOKEN;
    return IR_OK;
}

IrStatus infer_add_dependency(Ctx *x, IrShape *out)
{
    if (infer_opnd(x, 1)->type != IR_TOKEN)
        return infer_fail(x, "operand 1 (%s) must be a token, got %s", infer_opnd_name(x, 1),
                    infer_sstr(x, infer_opnd(x, 1)));
    return infer_copy_shape(x, out, infer_opnd(x, 0));
}

/* Ops whose result is their operand's shape (one operand) or the tuple of
 * their operands' shapes: domain, collective-broadcast, shuffle. */
IrStatus infer_passthrough(Ctx *x, IrShape *out)
{
    if (x->ins->nopnd == 1)
        return infer_copy_shape(x, out, infer_opnd(x, 0));
    return infer_tuple(x, out);
}

/* ------------------------------------------------------------------ */
/* host interaction, randomness, custom calls                          */
/* ------------------------------------------------------------------ */

/* custom-call has no general rule: the declared shape stands. The SPMD
 * markers keep the element type and rank (Sharding keeps the shape). */
IrStatus infer_custom_call(Ctx *x, IrShape *out)
{
    const char *t = x->ins->a.x->custom_call_target ? x->ins->a.x->custom_call_target : "";
    const IrShape *o = &x->ins->shape;
    bool full = strcmp(t, "SPMDFullToShardShape") == 0, shard = strcmp(t, "SPMDShardToFullShape") == 0;
    bool sharding = strcmp(t, "Sharding") == 0;
    if (full || shard || sharding) {
        if (x->ins->nopnd != 1)
            return infer_fail(x, "custom_call_target=\"%s\" takes one operand, got %d", t,
                        (int)x->ins->nopnd);
        const IrShape *s = infer_opnd(x, 0);
        if (sharding && !ir_shape_equal(s, o))
            return infer_fail(x, "Sharding keeps the operand shape %s, declared %s", infer_sstr(x, s),
                        infer_sstr(x, o));
        if (infer_is_array(s) && (!infer_is_array(o) || o->type != s->type || o->rank != s->rank))
            return infer_fail(x, "%s keeps the element type and rank of %s, declared %s", t,
                        infer_sstr(x, s), infer_sstr(x, o));
    }
    return infer_copy_shape(x, out, o);
}

IrStatus infer_infeed(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    if (infer_opnd(x, 0)->type != IR_TOKEN)
        return infer_fail(x, "operand must be a token, got %s", infer_sstr(x, infer_opnd(x, 0)));
    if (o->type != IR_TUPLE || o->ntuple != 2 || o->tuple[1].type != IR_TOKEN)
        return infer_fail(x, "result must be a (data, token[]) tuple, got %s", infer_sstr(x, o));
    return infer_copy_shape(x, out, o);
}

IrStatus infer_outfeed(Ctx *x, IrShape *out)
{
    if (infer_opnd(x, 1)->type != IR_TOKEN)
        return infer_fail(x, "operand 1 must be a token, got %s", infer_sstr(x, infer_opnd(x, 1)));
    if (x->ins->a.x->has_outfeed_shape && !ir_shape_equal(&x->ins->a.x->outfeed_shape, infer_opnd(x, 0)))
        return infer_fail(x, "outfeed_shape=%s differs from the operand %s",
                    infer_sstr(x, &x->ins->a.x->outfeed_shape), infer_sstr(x, infer_opnd(x, 0)));
    memset(out, 0, sizeof *out);
    out->type = IR_TOKEN;
    return IR_OK;
}

IrStatus infer_rng(Ctx *x, IrShape *out)
{
    IrStatus st;
    if ((st = infer_expect_scalar(x, 0, "a")) != IR_OK || (st = infer_expect_scalar(x, 1, "b")) != IR_OK)
        return st;
    const IrShape *a = infer_opnd(x, 0), *b = infer_opnd(x, 1), *o = &x->ins->shape;
    const char *dist = x->ins->a.x->distribution ? x->ins->a.x->distribution : "";
    if (a->type != b->type)
        return infer_fail(x, "parameters must have one type, got %s and %s", ir_type_name(a->type),
                    ir_type_name(b->type));
    if (strcmp(dist, "rng_uniform") == 0) {
        if (!ir_type_is_float(a->type) && !ir_type_is_int(a->type))
            return infer_fail(x, "rng_uniform needs integer or floating-point parameters, got %s",
                        ir_type_name(a->type));
    } else if (strcmp(dist, "rng_normal") == 0) {
        if (!ir_type_is_float(a->type))
            return infer_fail(x, "rng_normal needs floating-point parameters, got %s",
                        ir_type_name(a->type));
    } else {
        return infer_fail(x, "distribution must be rng_uniform or rng_normal, got '%s'", dist);
    }
    if (!infer_is_array(o))
        return infer_fail(x, "result must be an array, got %s", infer_sstr(x, o));
    return infer_make_array(x, out, a->type, o->rank, o->dims);
}

/* rng-bit-generator(state): XLA's verifier takes the result as the output
 * alone, or as (new state, output) with the state's shape. */
IrStatus infer_rng_bit_generator(Ctx *x, IrShape *out)
{
    const IrShape *s = infer_opnd(x, 0), *o = &x->ins->shape;
    if (o->type == IR_TUPLE) {
        if (o->ntuple != 2 || !infer_is_array(&o->tuple[1]))
            return infer_fail(x, "result must be an output array or a (state, output) tuple, got %s", infer_sstr(x, o));
        if (!ir_shape_equal(&o->tuple[0], s))
            return infer_fail(x, "result state %s must equal the operand state %s", infer_sstr(x, &o->tuple[0]),
                        infer_sstr(x, s));
    } else if (!infer_is_array(o)) {
        return infer_fail(x, "result must be an output array or a (state, output) tuple, got %s", infer_sstr(x, o));
    }
    return infer_copy_shape(x, out, o);
}

IrStatus infer_rng_state(Ctx *x, IrShape *out)
{
    int64_t two = 2;
    return infer_make_array(x, out, IR_U64, 1, &two);
}

/* partition-id and replica-id are u32[]; XLA's own tests also declare
 * them s32[] (ManualPartitionId), which names the same small count, so any
 * declared integer scalar is taken as is. */
IrStatus infer_id(Ctx *x, IrShape *out)
{
    const IrShape *o = &x->ins->shape;
    return infer_make_scalar(x, out, infer_is_scalar(o) && ir_type_is_int(o->type) ? o->type : IR_U32);
}

/* ------------------------------------------------------------------ */
/* async wrappers, copy-start and the -done of a -start                */
/* ------------------------------------------------------------------ */

/* The operands match `f`'s parameters and `f` returns `result`. */
static IrStatus check_call_sig(Ctx *x, const IrComputation *f, const IrShape *result)
{
    IrStatus st = infer_expect_nparams(x, f, "called", x->ins->nopnd);
    for (int32_t i = 0; i < x->ins->nopnd && st == IR_OK; i++) {
        const IrShape *p = infer_callee_param(x, f, i);
        if (!p)
            return IR_EINPUT;
        if (!ir_shape_equal(p, infer_opnd(x, i)))
            return infer_fail(x, "operand %d is %s but parameter %d of %s is %s", (int)i,
                        infer_sstr(x, infer_opnd(x, i)), (int)i, f->name, infer_sstr(x, p));
    }
    const IrShape *r = st == IR_OK ? infer_callee_root(x, f) : NULL;
    if (st == IR_OK && !r)
        return IR_EINPUT;
    if (st == IR_OK && !ir_shape_equal(r, result))
        return infer_fail(x, "called computation %s returns %s, the result is %s", f->name, infer_sstr(x, r),
                    infer_sstr(x, result));
    return st;
}

/* async-start: ((operands...), result, context...); its computation takes
 * the operands and returns element 1. */
IrStatus infer_async_start(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_tuple_result(x, 2, "((operands...), result, context...)");
    if (st != IR_OK)
        return st;
    const IrShape *o = &x->ins->shape;
    if (o->tuple[0].type != IR_TUPLE || o->tuple[0].ntuple != x->ins->nopnd)
        return infer_fail(x, "element 0 of the result must be the tuple of its %d operand shapes, got %s",
                    (int)x->ins->nopnd, infer_sstr(x, &o->tuple[0]));
    for (int32_t i = 0; i < x->ins->nopnd; i++)
        if (!ir_shape_equal(&o->tuple[0].tuple[i], infer_opnd(x, i)))
            return infer_fail(x, "element {0,%d} of the result is %s but operand %d is %s", (int)i,
                        infer_sstr(x, &o->tuple[0].tuple[i]), (int)i, infer_sstr(x, infer_opnd(x, i)));
    if ((st = check_call_sig(x, infer_callee(x, 0), &o->tuple[1])) != IR_OK)
        return st;
    return infer_copy_shape(x, out, o);
}

/* async-update and async-done take the async-start (or -update) they
 * continue: update keeps its shape, done gives its element 1. A sugared
 * OP-done continues an OP-start. */
IrStatus infer_async_next(Ctx *x, IrShape *out)
{
    if (x->ins->nopnd != 1)
        return infer_fail(x, "expects 1 operand, got %d", (int)x->ins->nopnd);
    const IrInstr *prev = &x->c->instr[x->ins->opnd[0]];
    const IrShape *s = infer_opnd(x, 0);
    if (prev->op != OP_ASYNC_START && prev->op != OP_ASYNC_UPDATE)
        return infer_fail(x, "operand %s must be an async-start or async-update, got %s", prev->name,
                    ir_op_name(prev->op));
    if (x->ins->a.x->async_sugar && prev->a.x->async_sugar &&
        prev->a.x->async_wrapped_op != x->ins->a.x->async_wrapped_op)
        return infer_fail(x, "operand %s wraps %s, not %s", prev->name,
                    ir_op_name(prev->a.x->async_wrapped_op), ir_op_name(x->ins->a.x->async_wrapped_op));
    if (x->ins->ncalled > 1 || (x->ins->ncalled == 1 && prev->ncalled == 1 &&
                                x->ins->called[0] != prev->called[0]))
        return infer_fail(x, "calls a different computation than its operand %s", prev->name);
    if (s->type != IR_TUPLE || s->ntuple < 2)
        return infer_fail(x, "operand %s must be an async tuple, got %s", prev->name, infer_sstr(x, s));
    return infer_copy_shape(x, out, x->ins->op == OP_ASYNC_UPDATE ? s : &s->tuple[1]);
}

/* The -done of a (operand, result, ...) start tuple: element k of it. */
IrStatus infer_done_element(Ctx *x, IrShape *out, int32_t k)
{
    const IrShape *s = infer_opnd(x, 0);
    if (s->type != IR_TUPLE || s->ntuple <= k)
        return infer_fail(x, "operand %s must be the tuple a -start returns, got %s", infer_opnd_name(x, 0),
                    infer_sstr(x, s));
    return infer_copy_shape(x, out, &s->tuple[k]);
}

/* copy-start: (destination, source, u32[] context), both like the operand. */
IrStatus infer_copy_start(Ctx *x, IrShape *out)
{
    IrStatus st = infer_expect_tuple_result(x, 2, "(destination, source, context)");
    if (st != IR_OK || (st = infer_expect_like_operand(x, 0, 0)) != IR_OK ||
        (st = infer_expect_like_operand(x, 1, 0)) != IR_OK)
        return st;
    return infer_copy_shape(x, out, &x->ins->shape);
}
