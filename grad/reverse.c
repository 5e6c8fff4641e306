/*
 * reverse.c: the reverse-mode driver. For a computation whose forward part
 * is instructions [0, n0), it appends the backward part:
 *
 *   1. activity: dep[i] when i is a source or reads a dep operand through a
 *      floating result of an op with a derivative; need[i] when the seed
 *      reads i; active = dep && need. Integer, pred, iota, rng results are
 *      never dep, so gradients stop there (compare-based masks included).
 *   2. adjoints: one per leaf of every instruction (tuples depth first),
 *      -1 meaning zero, so a tuple whose elements are used apart keeps one
 *      adjoint per element and nothing is materialised until needed.
 *   3. the forward instructions in reverse topological order: an active
 *      instruction with some adjoint hands it to its family's rule, which
 *      adds contributions to its active operands (rev_acc sums them).
 *
 * Example: y = multiply(x, x), seed 1 at y: the rule adds g*x twice to x's
 * adjoint, which becomes add(multiply(g, x), multiply(g, x)) = 2x.
 */
#include "grad.h"

#include <ctype.h>

#include <stdio.h>
#include <string.h>

bool rev_is_constant_op(IrOpcode op)
{
    switch (op) {
    case OP_SIGN: case OP_FLOOR: case OP_CEIL: case OP_ROUND_AFZ: case OP_ROUND_EVEN:
    case OP_IOTA: case OP_CONSTANT: case OP_RNG: case OP_RNG_BIT_GENERATOR: case OP_PARTITION_ID:
    case OP_REPLICA_ID: case OP_IS_FINITE: case OP_COMPARE: case OP_STOCHASTIC_CONVERT:
    case OP_RNG_GET_AND_UPDATE_STATE: case OP_GET_DIMENSION_SIZE: case OP_AFTER_ALL:
    case OP_INFEED: case OP_RECV: case OP_RECV_DONE:
        return true;
    default:
        return false;
    }
}

/* Does shape s have a floating leaf (a value a gradient can flow
 * through)? Complex leaves count (so that a complex op the loss depends on
 * is reached and refused by name, never a silent zero). */
static bool has_float(const IrShape *s)
{
    if (s->type == IR_TUPLE) {
        for (int32_t k = 0; k < s->ntuple; k++)
            if (has_float(&s->tuple[k]))
                return true;
        return false;
    }
    return ir_type_is_float(s->type) || ir_type_is_complex(s->type);
}

static bool has_complex(const IrShape *s)
{
    for (int32_t l = 0; l < ir_shape_leaf_count(s); l++)
        if (ir_type_is_complex(ir_shape_leaf(s, l)->type))
            return true;
    return false;
}

bool rev_on(const Rev *r, int32_t x)
{
    return x >= 0 && x < r->n0 && r->active[x];
}

int32_t rev_leaf(const Rev *r, int32_t x, int32_t leaf)
{
    return r->adj[r->base[x] + leaf];
}

/* The instruction name written at pos in the module's source (into buf,
 * at most n - 1 characters), or NULL: an instruction copied from a called
 * computation has a new name but keeps the original's position, and the
 * user reads the name on the line the error shows. */
static const char *name_at(const IrModule *m, IrPos pos, char *buf, size_t n)
{
    const char *p = m->src;
    if (!p || pos.line < 1 || pos.col < 1)
        return NULL;
    for (int32_t line = 1; line < pos.line && *p; p++)
        if (*p == '\n')
            line++;
    for (int32_t col = 1; col < pos.col; col++, p++)
        if (!*p || *p == '\n')
            return NULL;
    size_t k = 0;
    while (k + 1 < n && (isalnum((unsigned char)p[k]) || p[k] == '_' || p[k] == '.' || p[k] == '-' || p[k] == '%'))
        k++;
    if (k == 0 || k + 1 >= n)
        return NULL;
    memcpy(buf, p, k);
    buf[k] = 0;
    return buf;
}

/* Why an op the loss depends on has no rule, where the op alone does
 * not say: a shard_map or manual region's boundary, and the collectives
 * inside one. JAX differentiates shard_map with its own transposes of the
 * boundaries and of psum / all_gather under its replication checks; that
 * is a feature of its own, refused here rather than half built (docs/cli.md). */
const char *grad_why_none(const IrInstr *ins)
{
    static const char *manual = "tessel grad does not differentiate through shard_map or a manual region "
                                "(its boundaries and the collectives inside); lower jax.value_and_grad of the "
                                "function and run that instead";
    if (ir_op_family(ins->op) == FAM_COLLECTIVE)
        return manual;
    if (ins->op == OP_CUSTOM_CALL && ins->a.x->custom_call_target) {
        const char *t = ins->a.x->custom_call_target;
        if (!strcmp(t, "xla.sdy.GlobalToLocalShape") || !strcmp(t, "xla.sdy.LocalToGlobalShape") ||
            !strcmp(t, "SPMDFullToShardShape") || !strcmp(t, "SPMDShardToFullShape"))
            return manual;
    }
    return NULL;
}

IrStatus rev_no_rule(Rev *r, int32_t i, const char *why)
{
    const IrInstr *ins = &r->b.c->instr[i];
    IrModule *m = r->g->m;
    char buf[256];
    const char *name = name_at(m, ins->pos, buf, sizeof buf);
    if (!why)
        why = grad_why_none(ins);
    return ir_error(r->g->d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                    "grad: no gradient rule for %s (instruction %s)%s%s", ir_op_name(ins->op),
                    name ? name : ins->name, why ? ": " : "", why ? why : "");
}

IrStatus rev_acc(Rev *r, int32_t x, int32_t leaf, int32_t v)
{
    if (r->g->d->status != IR_OK)
        return r->g->d->status;
    if (v < 0)
        return gb_bug(r->g, "a contribution was not built");
    if (!rev_on(r, x))
        return IR_OK;
    const IrShape *ls = ir_shape_leaf(&r->b.c->instr[x].shape, leaf);
    if (!ir_type_is_float(ls->type))
        return IR_OK; /* integer leaves of a tuple carry no gradient */
    v = gb_convert(&r->b, v, ls->type);
    /* the convert may have grown (moved) the instruction array */
    ls = ir_shape_leaf(&r->b.c->instr[x].shape, leaf);
    if (v >= 0 && !ir_shape_same_dims(gb_shape(&r->b, v), ls))
        return gb_bug(r->g, "a contribution to %s has the wrong shape", r->b.c->instr[x].name);
    int32_t *slot = &r->adj[r->base[x] + leaf];
    *slot = *slot < 0 ? v : gb_bin(&r->b, OP_ADD, *slot, v);
    return r->g->d->status;
}

/* The full adjoint of leaves [first, first + leaf count of s) of x. */
static int32_t full_of(Rev *r, int32_t x, const IrShape *s, int32_t *leaf)
{
    if (s->type != IR_TUPLE) {
        int32_t v = r->adj[r->base[x] + (*leaf)++];
        return v >= 0 ? v : gb_zeros(&r->b, s);
    }
    int32_t e[s->ntuple > 0 ? s->ntuple : 1];
    for (int32_t k = 0; k < s->ntuple; k++)
        e[k] = full_of(r, x, &s->tuple[k], leaf);
    return gb_tuple(&r->b, s->ntuple, e);
}

int32_t rev_full(Rev *r, int32_t x)
{
    IrShape s = r->b.c->instr[x].shape;
    int32_t leaf = 0;
    return full_of(r, x, &s, &leaf);
}

void rev_free(Rev *r)
{
    ts_free(r->base);
    ts_free(r->adj);
    ts_free(r->active);
    memset(r, 0, sizeof *r);
}

/* The rule of instruction i's op family. */
static IrStatus dispatch(Rev *r, int32_t i)
{
    IrInstr ins = r->b.c->instr[i];
    if (grad_custom_name(&ins, "tessel_gradient"))
        return rev_custom(r, i, &ins);
    bool cx = has_complex(&ins.shape);
    for (int32_t k = 0; k < ins.nopnd && !cx; k++)
        cx = has_complex(&r->b.c->instr[ins.opnd[k]].shape);
    if (cx)
        return rev_no_rule(r, i, "complex values are not differentiated");
    switch (ir_op_family(ins.op)) {
    case FAM_ELEMENTWISE: return rev_elementwise(r, i, &ins);
    case FAM_BROADCAST: case FAM_RESHAPE: case FAM_TRANSPOSE: case FAM_SLICE: case FAM_DYNAMIC_SLICE:
    case FAM_PAD: case FAM_CONCATENATE: case FAM_REVERSE: case FAM_GATHER: case FAM_SCATTER:
        return rev_data(r, i, &ins);
    case FAM_REDUCE: case FAM_REDUCE_WINDOW: case FAM_SORT: case FAM_DOT: case FAM_CONVOLUTION:
    case FAM_BATCH_NORM: case FAM_TOPK:
        return rev_reduce(r, i, &ins);
    case FAM_TUPLE: case FAM_CONTROL:
        return rev_control(r, i, &ins);
    default:
        break;
    }
    switch (ins.op) {
    case OP_OPTIMIZATION_BARRIER: case OP_ADD_DEPENDENCY: case OP_DOMAIN:
        return rev_control(r, i, &ins);
    case OP_CHOLESKY: case OP_TRIANGULAR_SOLVE:
        return rev_linalg(r, i, &ins);
    case OP_CUSTOM_CALL:
        if (ins.nopnd == 1 && ir_annotation_target(ins.a.x->custom_call_target))
            return rev_elementwise(r, i, &ins);
        if (grad_is_getrf(&ins))
            return rev_linalg(r, i, &ins);
        if (ir_is_topk(&ins))
            return rev_reduce(r, i, &ins);
        return rev_no_rule(r, i, NULL);
    default:
        return rev_no_rule(r, i, NULL);
    }
}

/* dep: reached from a source through floating values of differentiable ops. */
static void mark_dep(Rev *r, const int32_t *order, bool *dep, int32_t nsrc, const int32_t *sources)
{
    const IrComputation *c = r->b.c;
    for (int32_t k = 0; k < nsrc; k++)
        dep[sources[k]] = true;
    for (int32_t k = 0; k < r->n0; k++) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        bool custom = grad_custom_name(ins, "tessel_gradient") != NULL;
        if (dep[i] || (rev_is_constant_op(ins->op) && !custom) || !has_float(&ins->shape))
            continue;
        for (int32_t o = 0; o < ins->nopnd; o++)
            dep[i] |= dep[ins->opnd[o]];
    }
}

IrStatus rev_run(Rev *r, Grad *g, int32_t ci, int32_t nsrc, const int32_t *sources, int32_t seed,
                 const int32_t *seed_adj)
{
    memset(r, 0, sizeof *r);
    r->g = g;
    r->b = (GB){g, g->m->comp[ci]};
    IrComputation *c = r->b.c;
    int32_t n = r->n0 = c->ninstr;
    r->base = ts_malloc((size_t)(n + 1) * sizeof(int32_t));
    r->active = ts_calloc((size_t)n + 1, 1);
    bool *dep = ts_calloc((size_t)n + 1, 1);
    int32_t *order = NULL;
    if (!r->base || !r->active || !dep) {
        ts_free(dep);
        return gb_oom(g);
    }
    int32_t nleaf = 0;
    for (int32_t i = 0; i < n; i++) {
        r->base[i] = nleaf;
        nleaf += ir_shape_leaf_count(&c->instr[i].shape);
    }
    r->base[n] = nleaf;
    r->adj = ts_malloc((size_t)(nleaf > 0 ? nleaf : 1) * sizeof(int32_t));
    IrDiag td = {0};
    if (!r->adj || ir_topo_order(g->m, c, &order, &td) != IR_OK) {
        ir_diag_clear(&td);
        ts_free(dep);
        return r->adj ? gb_bug(g, "a cycle in %s", c->name) : gb_oom(g);
    }
    for (int32_t k = 0; k < nleaf; k++)
        r->adj[k] = -1;
    mark_dep(r, order, dep, nsrc, sources);
    /* need: the seed reads it (backward over the order). */
    r->active[seed] = true;
    for (int32_t k = n - 1; k >= 0; k--) {
        int32_t i = order[k];
        if (!r->active[i])
            continue;
        for (int32_t o = 0; o < c->instr[i].nopnd; o++)
            r->active[c->instr[i].opnd[o]] = true;
    }
    for (int32_t i = 0; i < n; i++)
        r->active[i] = r->active[i] && dep[i];
    ts_free(dep);
    for (int32_t l = 0; l < r->base[seed + 1] - r->base[seed]; l++)
        r->adj[r->base[seed] + l] = seed_adj[l];
    for (int32_t k = n - 1; k >= 0 && g->d->status == IR_OK; k--) {
        int32_t i = order[k];
        if (!r->active[i] || c->instr[i].op == OP_PARAMETER)
            continue;
        bool any = false;
        for (int32_t l = r->base[i]; l < r->base[i + 1]; l++)
            any |= r->adj[l] >= 0;
        if (any)
            dispatch(r, i);
    }
    ts_free(order);
    return g->d->status;
}
