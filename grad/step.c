/*
 * step.c: grad_module, the entry point of the layer. It clones the input
 * module, picks the parameters (--wrt) and the loss (--loss), runs the
 * reverse pass over the entry computation (reverse.c) and gives the entry a
 * new root:
 *
 *   gradients:  (forward outputs..., dL/dp for each chosen p)
 *   --sgd LR:   (forward outputs..., p - LR dL/dp ...), each updated p
 *               aliased to p (input_output_alias), so `--steps K` trains
 *   --adam LR:  (forward outputs..., p', m', v' for each p, t + 1) with
 *               moment parameters m_P, v_P (P the parameter's name) and a
 *               step counter t appended to the entry (start them at zero:
 *               `tessel run --init-state zeros`), each aliased likewise:
 *               m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2,
 *               p' = p - LR (m' / (1 - b1^(t+1))) / (sqrt(v' / (1 - b2^(t+1))) + eps)
 *               with b1 = 0.9, b2 = 0.999, eps = 1e-8 (Kingma and Ba)
 *   --jvp:      (forward outputs..., tangent of each output) with a
 *               tangent parameter tangent_P per chosen P appended (forward.c)
 *
 * Each gradient (and updated parameter) carries its parameter's sharding,
 * so that propagation partitions the backward pass like the forward one
 * (a replicated weight of a data-parallel model gets its all-reduce).
 */
#include "grad.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static IrStatus bad(IrDiag *d, const char *fmt, const char *a, const char *b)
{
    return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, fmt, a, b);
}

static bool has_float_leaf(const IrShape *s)
{
    for (int32_t l = 0; l < ir_shape_leaf_count(s); l++)
        if (ir_type_is_float(ir_shape_leaf(s, l)->type))
            return true;
    return false;
}

/* One --wrt item: a parameter number or a parameter's name. */
static int32_t find_param(const IrComputation *e, const char *item, size_t n)
{
    bool digits = n > 0;
    for (size_t k = 0; k < n; k++)
        digits &= isdigit((unsigned char)item[k]) != 0;
    if (digits) {
        long v = strtol(item, NULL, 10);
        return v < e->nparam && n < 9 ? (int32_t)v : -1;
    }
    if (n > 0 && item[0] == '%') {
        item++;
        n--;
    }
    for (int32_t p = 0; p < e->nparam; p++) {
        const char *name = e->instr[e->param[p]].name;
        if (strlen(name) == n && strncmp(name, item, n) == 0)
            return p;
    }
    return -1;
}

static const char *param_name(void *ctx, int32_t p)
{
    const IrComputation *e = ctx;
    return e->instr[e->param[p]].name;
}

static IrStatus parse_wrt(const IrComputation *e, const char *wrt, int32_t *out, int32_t *n, IrDiag *d)
{
    *n = 0;
    if (!wrt || !*wrt) {
        for (int32_t p = 0; p < e->nparam; p++)
            if (has_float_leaf(&e->instr[e->param[p]].shape))
                out[(*n)++] = p;
        if (*n == 0)
            return bad(d, "grad: the entry has no floating parameter to differentiate%s%s", "", "");
        return IR_OK;
    }
    for (const char *s = wrt; *s;) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        char item[256];
        snprintf(item, sizeof item, "%.*s", (int)(len < 255 ? len : 255), s);
        int32_t p = find_param(e, s, len);
        if (p < 0) {
            /* "did you mean" the parameter a slip away (w3 for w2 is not) */
            const char *near = ir_nearest(item, strlen(item), e->nparam, param_name, (void *)e);
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "grad: --wrt: '%s' is neither a parameter number nor a parameter name of %s%s%s%s", item,
                            e->name, near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
        }
        if (!has_float_leaf(&e->instr[e->param[p]].shape))
            return bad(d, "grad: --wrt: parameter '%s' of %s has no floating value to differentiate", item, e->name);
        for (int32_t k = 0; k < *n; k++)
            if (out[k] == p)
                return bad(d, "grad: --wrt: parameter '%s' is named twice%s", item, "");
        out[(*n)++] = p;
        s += len;
        if (*s == ',')
            s++;
    }
    return IR_OK;
}

/* The forward outputs: the root's elements (a tuple root) or the root. */
static int32_t forward_outputs(GB *b, int32_t root, int32_t *out)
{
    const IrInstr *r = &b->c->instr[root];
    if (r->op == OP_TUPLE) {
        if (r->nopnd > 0)
            memcpy(out, r->opnd, (size_t)r->nopnd * sizeof(int32_t));
        return r->nopnd;
    }
    if (r->shape.type == IR_TUPLE) {
        int32_t n = r->shape.ntuple;
        for (int32_t k = 0; k < n; k++)
            out[k] = gb_gte(b, root, k);
        return n;
    }
    out[0] = root;
    return 1;
}

/* The leaf of the root that is the loss: the root itself, or element
 * --loss (a number or the name of the root tuple's operand). */
static IrStatus find_loss(const IrModule *m, const IrComputation *e, const char *loss, int32_t *leaf, IrDiag *d)
{
    const IrInstr *r = &e->instr[e->root];
    int64_t k = -1;
    if (!loss || !*loss) {
        if (r->shape.type == IR_TUPLE)
            return ir_error(d, IR_EINPUT, m->file, m->src, r->pos,
                            "grad: the root is a tuple; say which element is the loss with --loss");
        *leaf = 0;
    } else {
        if (r->shape.type != IR_TUPLE)
            return ir_error(d, IR_EINPUT, m->file, m->src, r->pos,
                            "grad: --loss %s: the root is not a tuple (leave --loss out)", loss);
        char *end;
        long v = strtol(loss, &end, 10);
        if (*end == 0 && end != loss)
            k = v;
        else if (r->op == OP_TUPLE)
            for (int32_t j = 0; j < r->nopnd; j++)
                if (strcmp(e->instr[r->opnd[j]].name, loss[0] == '%' ? loss + 1 : loss) == 0)
                    k = j;
        if (k < 0 || k >= r->shape.ntuple)
            return bad(d, "grad: --loss: '%s' is neither an element number nor an element name of %s's root",
                       loss, e->name);
        int32_t off = 0;
        for (int64_t j = 0; j < k; j++)
            off += ir_shape_leaf_count(&r->shape.tuple[j]);
        *leaf = off;
    }
    const IrShape *ls = k < 0 ? &r->shape : &r->shape.tuple[k];
    if (ls->type == IR_TUPLE || ls->rank != 0 || !ir_type_is_float(ls->type)) {
        char *s = ir_shape_str(ls, false);
        IrStatus st = ir_error(d, IR_EINPUT, m->file, m->src, r->pos,
                               "grad: the loss must be a floating scalar, not %s", s ? s : "?");
        ts_free(s);
        return st;
    }
    return IR_OK;
}

/* Give instruction v the sharding `s`: v itself when the transform made it
 * (index n0 on) and it has none, else a copy (a forward value keeps its
 * own). */
static int32_t with_sharding(GB *b, int32_t v, const IrSharding *s, int32_t n0)
{
    if (v < 0 || !s)
        return v;
    int32_t c = v >= n0 && !b->c->instr[v].sharding && b->c->instr[v].op != OP_PARAMETER ? v : gb_un(b, OP_COPY, v);
    if (c < 0)
        return -1;
    IrSharding *cs = ir_alloc(b->g->m->arena, sizeof *cs);
    if (!cs || ir_sharding_copy(b->g->m->arena, cs, s) != IR_OK)
        return gb_oom(b->g), -1;
    b->c->instr[c].sharding = cs;
    return c;
}

static IrStatus add_alias(Grad *g, int32_t out, int32_t param)
{
    IrModule *m = g->m;
    IrAlias *na = ir_alloc_array(m->arena, (size_t)m->nalias + 1, sizeof *na);
    int64_t *oi = gb_list(g, 1, NULL);
    if (!na || !oi)
        return gb_oom(g);
    if (m->nalias)
        memcpy(na, m->alias, (size_t)m->nalias * sizeof *na);
    oi[0] = out;
    na[m->nalias] = (IrAlias){.output_index = {1, oi}, .param_number = param};
    m->alias = na;
    m->nalias++;
    return IR_OK;
}

/* p' = p - lr g */
static int32_t sgd(GB *b, int32_t p, int32_t g, double lr)
{
    return gb_bin(b, OP_SUBTRACT, p, gb_scale(b, g, lr));
}

typedef struct Adam {
    int32_t t, t1;       /* the step counter parameter and t + 1 */
} Adam;

/* The Adam update of p from g with moments m, v: outputs p', m', v'. */
static void adam(GB *b, const Adam *A, int32_t p, int32_t g, int32_t m, int32_t v, double lr, int32_t *out)
{
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    IrType t = gb_shape(b, p)->type;
    int32_t m1 = gb_bin(b, OP_ADD, gb_scale(b, m, b1), gb_scale(b, g, 1 - b1));
    int32_t v1 = gb_bin(b, OP_ADD, gb_scale(b, v, b2), gb_scale(b, gb_bin(b, OP_MULTIPLY, g, g), 1 - b2));
    int32_t tt = gb_convert(b, A->t1, t);
    /* 1 - beta^(t+1), a scalar */
    int32_t c1 = gb_bin(b, OP_SUBTRACT, gb_const(b, t, 1), gb_bin(b, OP_POWER, gb_const(b, t, b1), tt));
    int32_t c2 = gb_bin(b, OP_SUBTRACT, gb_const(b, t, 1), gb_bin(b, OP_POWER, gb_const(b, t, b2), tt));
    int32_t mh = gb_bin(b, OP_DIVIDE, m1, gb_bcast_like(b, c1, m1));
    int32_t vh = gb_bin(b, OP_DIVIDE, v1, gb_bcast_like(b, c2, v1));
    int32_t den = gb_bin(b, OP_ADD, gb_un(b, OP_SQRT, vh), gb_full_like(b, vh, eps));
    out[0] = gb_bin(b, OP_SUBTRACT, p, gb_scale(b, gb_bin(b, OP_DIVIDE, mh, den), lr));
    out[1] = m1;
    out[2] = v1;
}

/* Mark parameter instruction i as optimizer state that starts at zero
 * (frontend_attributes={tessel_state="zeros"}): what `tessel run
 * --init-state zeros` fills, and what a missing input's error names. */
static void mark_state(Grad *g, int32_t i)
{
    if (i < 0)
        return;
    IrInstr *ins = &ir_entry(g->m)->instr[i];
    IrKeyValue *kv = ir_alloc(g->m->arena, sizeof *kv);
    if (!kv) {
        gb_oom(g);
        return;
    }
    *kv = (IrKeyValue){"tessel_state", "zeros"};
    ins->a.frontend = kv;
    ins->a.nfrontend = 1;
}

static IrStatus differentiate(Grad *g, const GradOptions *o, const IrModule *src)
{
    IrModule *m = g->m;
    IrComputation *e = ir_entry(m);
    GB b = {g, e};
    int32_t np = e->nparam;
    int32_t *wrt = ts_malloc((size_t)(np > 0 ? np : 1) * sizeof(int32_t));
    int32_t nw = 0, leaf = 0;
    if (!wrt)
        return gb_oom(g);
    if (parse_wrt(e, o->wrt, wrt, &nw, g->d) != IR_OK || find_loss(src, e, o->loss, &leaf, g->d) != IR_OK) {
        ts_free(wrt);
        return g->d->status;
    }
    if ((o->sgd > 0 || o->adam > 0))
        for (int32_t k = 0; k < nw; k++)
            if (e->instr[e->param[wrt[k]]].shape.type == IR_TUPLE) {
                IrPos pos = e->instr[e->param[wrt[k]]].pos; /* read before wrt is freed */
                ts_free(wrt);
                return ir_error(g->d, IR_EUNSUPPORTED, src->file, src->src, pos,
                                "grad: --sgd/--adam update array parameters only, not a tuple");
            }
    int32_t root = e->root;
    int32_t nl = ir_shape_leaf_count(&e->instr[root].shape);
    int32_t *seed = ts_malloc((size_t)nl * sizeof(int32_t));
    int32_t *src_i = ts_malloc((size_t)(nw > 0 ? nw : 1) * sizeof(int32_t));
    int32_t nout0 = e->instr[root].shape.type == IR_TUPLE ? e->instr[root].shape.ntuple : 1;
    int32_t *outs = ts_malloc((size_t)(nout0 + 3 * nw + 2) * sizeof(int32_t));
    if (!seed || !src_i || !outs) {
        ts_free(wrt), ts_free(seed), ts_free(src_i), ts_free(outs);
        return gb_oom(g);
    }
    for (int32_t l = 0; l < nl; l++)
        seed[l] = -1;
    seed[leaf] = gb_const(&b, ir_shape_leaf(&e->instr[root].shape, leaf)->type, 1);
    for (int32_t k = 0; k < nw; k++)
        src_i[k] = e->param[wrt[k]];
    Rev r = {0};
    int32_t n_fwd = e->ninstr;
    if (seed[leaf] >= 0 && rev_run(&r, g, m->entry, nw, src_i, root, seed) == IR_OK) {
        int32_t n = forward_outputs(&b, root, outs);
        Adam A = {-1, -1};
        if (o->adam > 0) {
            IrShape ts = {.type = IR_F32};
            A.t = gb_parameter_named(&b, np + 2 * nw, &ts, "t", "");
            mark_state(g, A.t);
            A.t1 = gb_bin(&b, OP_ADD, A.t, gb_const(&b, IR_F32, 1));
        }
        for (int32_t k = 0; k < nw; k++) {
            int32_t p = src_i[k];
            const IrSharding *sh = e->instr[p].sharding;
            int32_t gr = rev_full(&r, p);
            if (o->adam > 0) {
                IrShape ps = e->instr[p].shape;
                const char *pn = e->instr[p].name;
                int32_t mm = gb_parameter_named(&b, np + 2 * k, &ps, "m_", pn);
                int32_t vv = gb_parameter_named(&b, np + 2 * k + 1, &ps, "v_", pn);
                mark_state(g, mm);
                mark_state(g, vv);
                if (mm >= 0 && sh) {
                    IrSharding *cs = ir_alloc(m->arena, sizeof *cs);
                    if (cs && ir_sharding_copy(m->arena, cs, sh) == IR_OK)
                        e->instr[mm].sharding = e->instr[vv].sharding = cs;
                }
                int32_t u[3];
                adam(&b, &A, p, gr, mm, vv, o->adam, u);
                for (int32_t j = 0; j < 3; j++) {
                    add_alias(g, n, j == 0 ? wrt[k] : np + 2 * k + j - 1);
                    outs[n++] = with_sharding(&b, u[j], sh, n_fwd);
                }
                continue;
            }
            if (o->sgd > 0) {
                add_alias(g, n, wrt[k]);
                gr = sgd(&b, p, gr, o->sgd);
            }
            outs[n++] = with_sharding(&b, gr, sh, n_fwd);
        }
        if (o->adam > 0) {
            add_alias(g, n, np + 2 * nw);
            outs[n++] = A.t1;
        }
        int32_t t = gb_tuple(&b, n, outs);
        if (t >= 0)
            e->root = t;
        if (t >= 0 && o->remat && *o->remat)
            grad_checkpoint(g, m->entry, n_fwd, o->remat);
    }
    rev_free(&r);
    ts_free(wrt), ts_free(seed), ts_free(src_i), ts_free(outs);
    return g->d->status;
}

/* --jvp: the entry gets one tangent parameter per chosen parameter
 * (numbered after the others, with its parameter's shape and sharding) and
 * returns (forward outputs..., the tangent of each output). */
static IrStatus tangents(Grad *g, const GradOptions *o)
{
    IrModule *m = g->m;
    IrComputation *e = ir_entry(m);
    GB b = {g, e};
    int32_t np = e->nparam, nw = 0;
    int32_t *wrt = ts_malloc((size_t)(np > 0 ? np : 1) * 3 * sizeof(int32_t));
    if (!wrt)
        return gb_oom(g);
    int32_t *src = wrt + np, *tp = src + np;
    if (parse_wrt(e, o->wrt, wrt, &nw, g->d) != IR_OK) {
        ts_free(wrt);
        return g->d->status;
    }
    for (int32_t k = 0; k < nw; k++) {
        src[k] = e->param[wrt[k]];
        IrShape ps = e->instr[src[k]].shape;
        tp[k] = gb_parameter_named(&b, np + k, &ps, "tangent_", e->instr[src[k]].name);
        const IrSharding *sh = e->instr[src[k]].sharding;
        if (tp[k] >= 0 && sh) {
            IrSharding *cs = ir_alloc(m->arena, sizeof *cs);
            if (cs && ir_sharding_copy(m->arena, cs, sh) == IR_OK)
                e->instr[tp[k]].sharding = cs;
        }
    }
    int32_t root = e->root;
    Fwd f = {0};
    if (g->d->status == IR_OK && fwd_run(&f, g, m->entry, nw, src, tp) == IR_OK) {
        int32_t n0 = e->instr[root].shape.type == IR_TUPLE ? e->instr[root].shape.ntuple : 1;
        int32_t *outs = ts_malloc((size_t)(2 * n0 + 1) * sizeof(int32_t));
        if (!outs) {
            fwd_free(&f);
            ts_free(wrt);
            return gb_oom(g);
        }
        int32_t n = forward_outputs(&b, root, outs);
        int32_t t = fwd_full(&f, root);
        for (int32_t k = 0; k < n0; k++)
            outs[n + k] = e->instr[root].shape.type == IR_TUPLE ? gb_gte(&b, t, k) : t;
        int32_t r = gb_tuple(&b, n + n0, outs);
        if (r >= 0)
            e->root = r;
        ts_free(outs);
    }
    fwd_free(&f);
    ts_free(wrt);
    return g->d->status;
}

IrStatus grad_module(const IrModule *m, const GradOptions *o, IrModule **out, IrDiag *d)
{
    *out = NULL;
    if (m->entry < 0)
        return ir_error(d, IR_EINPUT, m->file, NULL, (IrPos){0, 0}, "grad: the module has no entry computation");
    if (o->jvp && (o->sgd > 0 || o->adam > 0 || (o->loss && *o->loss)))
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "grad: --jvp writes tangents of every output; it takes no --loss, --sgd or --adam");
    if (o->sgd > 0 && o->adam > 0)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "grad: --sgd and --adam exclude each other");
    if (o->jvp && o->remat && *o->remat)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "grad: --remat is a policy of reverse mode (what its backward keeps); --jvp has none");
    if (m->nalias > 0 && (o->sgd > 0 || o->adam > 0))
        return ir_error(d, IR_EINPUT, m->file, NULL, (IrPos){0, 0},
                        "grad: the module already has an input_output_alias; a training step writes its own");
    Grad g = {.d = d};
    for (int32_t t = 0; t < IR_NTYPES; t++)
        g.sum[t] = g.ge[t] = -1;
    if (!(g.m = ir_module_clone(m)))
        return ir_oom(d, NULL);
    /* Diagnostics name the input's positions (the clone keeps them). */
    g.m->file = m->file;
    g.m->src = m->src;
    /* The entry's signature changes: its layout text and aliases no longer hold. */
    g.m->entry_computation_layout = NULL;
    g.m->nalias = 0;
    if (o->jvp)
        tangents(&g, o);
    else
        differentiate(&g, o, m);
    g.m->file = NULL;
    g.m->src = NULL;
    if (d->status != IR_OK) {
        ir_module_free(g.m);
        return d->status;
    }
    *out = g.m;
    return IR_OK;
}
