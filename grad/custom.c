/*
 * custom.c: custom gradients, the HLO counterpart of TensorFlow's
 * gradient_override_map and of JAX's custom_vjp/custom_jvp. An instruction
 * names, in a frontend attribute, a computation of the module to use
 * instead of its op's rule:
 *
 *   frontend_attributes={tessel_gradient="COMP"}   reverse mode: COMP takes
 *       (operand 0, ..., operand n-1, result, adjoint of the result) and
 *       returns the adjoints of the operands: the adjoint itself when n = 1,
 *       else a tuple of n (integer operands get anything of their shape,
 *       ignored)
 *   frontend_attributes={tessel_tangent="COMP"}    forward mode (--jvp):
 *       COMP takes (operand 0, ..., operand n-1, result, tangent 0, ...,
 *       tangent n-1) and returns the tangent of the result
 *
 * The backward (or tangent) pass calls COMP where the op's rule would have
 * been written, so any op can have one: an op without a rule (a custom-call
 * of a target the gradient has no rule for), or one whose true derivative
 * is useless (round, whose straight-through estimator is the identity).
 * The attribute also makes an op that otherwise stops gradients (round,
 * floor, sign, compare...) carry them. A signature that does not fit is an
 * error naming the instruction and the computation.
 *
 * JAX's custom derivatives, which its HLO cannot carry (grad_jax_call):
 * jax.nn.relu, relu6 and softplus are jitted functions with a custom_jvp,
 * lowered as a call of a computation named after the function (relu.1),
 * whose body is the primal only. Differentiated as written, relu's
 * max(x, 0) would split g in halves at x == 0 (the tie rule, as JAX's
 * jnp.maximum); JAX's rule gives 0 there (relu6: 0 at 0 and at 6), and
 * softplus's is exp(x - softplus(x)) with infinities read as 0 (its
 * logaddexp's rule), not the chain rule through max, abs and log1p. A call
 * of a computation of one of those names whose body is that function's
 * form (one floating parameter, the root's op and shape as JAX lowers it)
 * takes JAX's rule, in both modes; any other call is differentiated as
 * written.
 */
#include "grad.h"

#include <math.h>
#include <string.h>

const char *grad_custom_name(const IrInstr *ins, const char *key)
{
    for (int32_t k = 0; k < ins->a.nfrontend; k++)
        if (ins->a.frontend[k].key && strcmp(ins->a.frontend[k].key, key) == 0)
            return ins->a.frontend[k].value ? ins->a.frontend[k].value : "";
    return NULL;
}

static IrStatus bad_sig(Grad *g, const IrInstr *ins, const char *key, const char *name, const char *what)
{
    IrModule *m = g->m;
    return ir_error(g->d, IR_EINPUT, m->file, m->src, ins->pos, "grad: %s=\"%s\" of instruction %s: %s", key, name,
                    ins->name, what);
}

static bool same_shape(const IrShape *a, const IrShape *b)
{
    return ir_shape_compatible(a, b);
}

/* The computation named by key on ins, its parameters checked against
 * shapes[0..np), or -1 (an error recorded). */
static int32_t custom_comp(Grad *g, const IrComputation *c, const IrInstr *ins, const char *key, int32_t np,
                           const IrShape *shapes, const char *takes)
{
    const char *name = grad_custom_name(ins, key);
    int32_t ci = ir_find_computation(g->m, name);
    if (ci < 0)
        return bad_sig(g, ins, key, name, "there is no computation of that name"), -1;
    const IrComputation *cc = g->m->comp[ci];
    if (cc == c)
        return bad_sig(g, ins, key, name, "it is the computation the instruction is in"), -1;
    if (cc->nparam != np)
        return bad_sig(g, ins, key, name, takes), -1;
    for (int32_t k = 0; k < np; k++)
        if (!same_shape(&cc->instr[cc->param[k]].shape, &shapes[k]))
            return bad_sig(g, ins, key, name, "a parameter's shape differs from the value it is given"), -1;
    return ci;
}

IrStatus rev_custom(Rev *r, int32_t i, const IrInstr *ins)
{
    Grad *g = r->g;
    GB *b = &r->b;
    int32_t n = ins->nopnd;
    if (n > 62)
        return rev_no_rule(r, i, "a custom gradient of more than 62 operands");
    IrShape sh[64];
    int32_t o[64];
    for (int32_t k = 0; k < n; k++) {
        sh[k] = *gb_shape(b, ins->opnd[k]);
        o[k] = ins->opnd[k];
    }
    sh[n] = sh[n + 1] = ins->shape;
    int32_t ci = custom_comp(g, b->c, ins, "tessel_gradient", n + 2, sh,
                             "it must take the operands, the result and its adjoint");
    if (ci < 0)
        return g->d->status;
    const IrComputation *cc = g->m->comp[ci];
    const IrShape *rs = &cc->instr[cc->root].shape;
    bool ok = n == 1 ? same_shape(rs, &sh[0]) : rs->type == IR_TUPLE && rs->ntuple == n;
    for (int32_t k = 0; ok && n > 1 && k < n; k++)
        ok = same_shape(&rs->tuple[k], &sh[k]);
    if (!ok)
        return bad_sig(g, ins, "tessel_gradient", cc->name,
                       n == 1 ? "it must return the operand's adjoint (the operand's shape)"
                              : "it must return a tuple of the operands' adjoints (their shapes)");
    o[n] = i;
    o[n + 1] = rev_full(r, i);
    int32_t call = gb_emit(b, OP_CALL, NULL, n + 2, o, NULL, 1, &ci);
    for (int32_t k = 0; k < n && g->d->status == IR_OK; k++) {
        if (!rev_on(r, ins->opnd[k]))
            continue;
        int32_t v = n == 1 ? call : gb_gte(b, call, k);
        if (sh[k].type == IR_TUPLE)
            return bad_sig(g, ins, "tessel_gradient", cc->name, "a tuple operand (give arrays)");
        rev_acc(r, ins->opnd[k], 0, v);
    }
    return g->d->status;
}

int32_t fwd_custom(Grad *g, GB *b, const IrInstr *ins, int32_t self, const int32_t *tangents)
{
    int32_t n = ins->nopnd;
    if (n > 31) {
        bad_sig(g, ins, "tessel_tangent", grad_custom_name(ins, "tessel_tangent"), "more than 31 operands");
        return -1;
    }
    IrShape sh[64];
    int32_t o[64];
    for (int32_t k = 0; k < n; k++) {
        sh[k] = sh[n + 1 + k] = *gb_shape(b, ins->opnd[k]);
        o[k] = ins->opnd[k];
        o[n + 1 + k] = tangents[k];
    }
    sh[n] = ins->shape;
    o[n] = self;
    int32_t ci = custom_comp(g, b->c, ins, "tessel_tangent", 2 * n + 1, sh,
                             "it must take the operands, the result and the tangents");
    if (ci < 0)
        return -1;
    const IrComputation *cc = g->m->comp[ci];
    if (!same_shape(&cc->instr[cc->root].shape, &ins->shape))
        return bad_sig(g, ins, "tessel_tangent", cc->name, "it must return the result's tangent (its shape)"), -1;
    return gb_emit(b, OP_CALL, NULL, 2 * n + 1, o, NULL, 1, &ci);
}

/* The computation's name without its ".N" suffix equals `base`. */
static bool named(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (!name || strncmp(name, base, n) != 0)
        return false;
    if (name[n] == 0)
        return true;
    if (name[n] != '.' || !name[n + 1])
        return false;
    for (const char *p = name + n + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* x with its infinities read as 0: JAX's _replace_inf. */
static int32_t replace_inf(GB *b, int32_t x)
{
    int32_t inf = gb_cmp(b, gb_un(b, OP_ABS, x), gb_full_like(b, x, INFINITY), CMP_EQ);
    return gb_select(b, inf, gb_full_like(b, x, 0), x);
}

int32_t grad_jax_call_factor(GB *b, const IrInstr *ins, int32_t self)
{
    if (ins->op != OP_CALL || ins->nopnd != 1 || ins->ncalled != 1)
        return -2;
    const IrComputation *cc = b->g->m->comp[ins->called[0]];
    if (cc->nparam != 1 || cc->root < 0 || !ir_type_is_float(ins->shape.type))
        return -2;
    const IrShape *ps = &cc->instr[cc->param[0]].shape;
    if (!ir_shape_compatible(ps, &ins->shape))
        return -2;
    IrOpcode root = cc->instr[cc->root].op;
    int32_t x = ins->opnd[0];
    int32_t zero = gb_full_like(b, x, 0), one = gb_full_like(b, x, 1);
    if (named(cc->name, "relu") && root == OP_MAXIMUM)            /* 1 where x > 0 */
        return gb_select(b, gb_cmp(b, x, zero, CMP_GT), one, zero);
    if (named(cc->name, "relu6") && root == OP_MINIMUM) {         /* 1 where 0 < x < 6 */
        int32_t in = gb_bin(b, OP_AND, gb_cmp(b, x, zero, CMP_GT), gb_cmp(b, x, gb_full_like(b, x, 6), CMP_LT));
        return gb_select(b, in, one, zero);
    }
    if (named(cc->name, "softplus") && root == OP_SELECT)         /* e^(x - softplus(x)) */
        return gb_un(b, OP_EXP, gb_bin(b, OP_SUBTRACT, replace_inf(b, x), replace_inf(b, self)));
    return -2;
}
