/*
 * k_ragged.c: ragged-dot and scaled-dot.
 *
 * ragged-dot(lhs, rhs, group_sizes) is a dot (lhs_batch_dims, ...
 * contracting dims as dot's) in which one lhs dimension, lhs_ragged_dims
 * = {r}, is cut into G consecutive groups of group_sizes[.., 0..G) rows
 * (rows past their sum belong to no group). The mode depends on r:
 *   non-contracting (r a free lhs dim; rhs_group_dims={gd}, rhs's dim gd
 *     of size G): an lhs row in group j is multiplied by rhs[.., j, ..];
 *     out = [batch, lhs free, rhs free (not gd)]; rows in no group give 0.
 *     XLA's common case: [m, k] x [g, k, n] -> [m, n].
 *   contracting (r a contracting dim; no group dim): one dot per group,
 *     summing only over the contracting indices of that group;
 *     out = [G, batch, lhs free, rhs free].
 *   batch (r a batch dim): every batch element belongs to one group and
 *     nothing else changes: the plain dot.
 * group_sizes is [G], or [P..., G] where P are the lhs dims before r that
 * are not contracting dims, in order (XLA's per-row group sizes, e.g.
 * lhs [19, 11, 5] ragged in dim 1 with group_sizes [19, G]).
 *
 * It runs as loops in double (floats of every width; rounded once to the
 * result type): ragged-dot is not on a hot path here, and the per-group
 * GEMMs of k_dot.c would need every operand permuted first.
 *
 * scaled-dot(lhs, rhs, lhs_scale, rhs_scale) is XLA's block-scaled dot
 * (the MX formats): a scale has its operand's rank, each operand dim a
 * multiple of the scale's, and element i of the operand is multiplied by
 * scale[i / block] (block = operand dim / scale dim, per dim). Both
 * operands are dequantised so into f32 and handed to k_dot.c's dot with
 * the instruction's dimension numbers and result type.
 */
#include "device.h"

#include <string.h>

static bool has(const IrI64List *l, int64_t v)
{
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return true;
    return false;
}

static bool is_array(const DevValue *v)
{
    return v && v->shape.type != IR_TUPLE && ir_type_is_array(v->shape.type);
}

/* ------------------------------------------------------------------ */
/* ragged-dot                                                          */
/* ------------------------------------------------------------------ */

typedef enum RMode { R_NONCONTRACTING, R_CONTRACTING, R_BATCH } RMode;

/* Where each result dim comes from, and the loop over contracting dims. */
typedef struct Ragged {
    RMode mode;
    int64_t rd, gd;               /* lhs ragged dim; rhs group dim (-1: none) */
    int32_t nout;
    int32_t lsrc[IR_MAX_RANK], rsrc[IR_MAX_RANK]; /* per result dim: lhs/rhs dim or -1 */
    int64_t lstr[IR_MAX_RANK], rstr[IR_MAX_RANK]; /* row-major strides */
    int32_t nprefix;
    int32_t prefix[IR_MAX_RANK];  /* lhs dims that index group_sizes' leading dims */
    int64_t ngroups;
    const int64_t *start;         /* [P, G+1] group starts per prefix (cumulative sums) */
} Ragged;

static IrStatus ragged_mode(const DevKernelArgs *k, Ragged *g)
{
    const IrAttrs *a = &k->ins->a;
    const IrShape *l = &k->opnd[0]->shape, *r = &k->opnd[1]->shape;
    if (a->x->lhs_ragged_dims.n != 1 || a->x->rhs_group_dims.n > 1 || a->x->lhs_ragged_dims.v[0] < 0 ||
        a->x->lhs_ragged_dims.v[0] >= l->rank)
        return dev_kernel_error(k, IR_EINPUT, "ragged-dot needs one lhs_ragged_dims and at most one rhs_group_dims");
    g->rd = a->x->lhs_ragged_dims.v[0];
    g->gd = a->x->rhs_group_dims.n ? a->x->rhs_group_dims.v[0] : -1;
    g->mode = has(&a->dot.lhs_contracting, g->rd) ? R_CONTRACTING
              : has(&a->dot.lhs_batch, g->rd) ? R_BATCH : R_NONCONTRACTING;
    if ((g->mode == R_NONCONTRACTING) != (g->gd >= 0) || g->gd >= r->rank)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "ragged-dot: rhs_group_dims must be given exactly "
                                "when the ragged dimension is a free lhs dimension");
    if (a->dot.lhs_batch.n != a->dot.rhs_batch.n || a->dot.lhs_contracting.n != a->dot.rhs_contracting.n)
        return dev_kernel_error(k, IR_EINPUT, "ragged-dot: unpaired batch or contracting dims");
    return IR_OK;
}

/* Result dims: [G if contracting] batch, lhs free, rhs free; checked
 * against the instruction's shape. */
static IrStatus ragged_layout(const DevKernelArgs *k, Ragged *g)
{
    const IrAttrs *a = &k->ins->a;
    const IrShape *l = &k->opnd[0]->shape, *r = &k->opnd[1]->shape, *o = &k->ins->shape;
    int64_t want[IR_MAX_RANK];
    int32_t n = 0;
    if (l->rank + r->rank >= IR_MAX_RANK)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "ragged-dot of rank %d x %d is too large",
                                (int)l->rank, (int)r->rank);
    if (g->mode == R_CONTRACTING) {
        g->lsrc[n] = g->rsrc[n] = -1;
        want[n++] = g->ngroups;
    }
    for (int32_t i = 0; i < a->dot.lhs_batch.n; i++) {
        g->lsrc[n] = (int32_t)a->dot.lhs_batch.v[i];
        g->rsrc[n] = (int32_t)a->dot.rhs_batch.v[i];
        want[n] = l->dims[g->lsrc[n]];
        n++;
    }
    for (int32_t i = 0; i < l->rank; i++)
        if (!has(&a->dot.lhs_batch, i) && !has(&a->dot.lhs_contracting, i)) {
            g->lsrc[n] = i, g->rsrc[n] = -1;
            want[n++] = l->dims[i];
        }
    for (int32_t i = 0; i < r->rank; i++)
        if (i != g->gd && !has(&a->dot.rhs_batch, i) && !has(&a->dot.rhs_contracting, i)) {
            g->lsrc[n] = -1, g->rsrc[n] = i;
            want[n++] = r->dims[i];
        }
    g->nout = n;
    if (o->type == IR_TUPLE || o->rank != n || !ir_dims_equal(o->dims, want, n))
        return dev_kernel_error(k, IR_EINPUT, "ragged-dot's result dims do not follow from its operands");
    ir_shape_strides(l, g->lstr);
    ir_shape_strides(r, g->rstr);
    return IR_OK;
}

/* group_sizes [P..., G] -> starts [P, G + 1]. */
static IrStatus ragged_groups(const DevKernelArgs *k, Ragged *g, int64_t **starts)
{
    const IrShape *l = &k->opnd[0]->shape, *gs = &k->opnd[2]->shape;
    const IrI64List *lc = &k->ins->a.dot.lhs_contracting;
    if (!is_array(k->opnd[2]) || !ir_type_is_int(gs->type) || gs->rank < 1)
        return dev_kernel_error(k, IR_EINPUT, "group_sizes must be an integer array");
    g->ngroups = gs->dims[gs->rank - 1];
    g->nprefix = 0;
    int64_t np = 1;
    if (gs->rank > 1) {
        for (int32_t i = 0; i < g->rd; i++)
            if (!has(lc, i))
                g->prefix[g->nprefix++] = i;
        bool ok = g->nprefix == gs->rank - 1;
        for (int32_t i = 0; ok && i < g->nprefix; i++)
            ok = gs->dims[i] == l->dims[g->prefix[i]];
        if (!ok)
            return dev_kernel_error(k, IR_EUNSUPPORTED, "group_sizes must be [G] or the lhs dims "
                                    "before the ragged one followed by [G]");
        np = dev_value_elements(k->opnd[2]) / (g->ngroups ? g->ngroups : 1);
    }
    if (g->mode == R_NONCONTRACTING && k->opnd[1]->shape.dims[g->gd] != g->ngroups)
        return dev_kernel_error(k, IR_EINPUT, "rhs_group_dims has %lld entries but group_sizes %lld",
                                (long long)k->opnd[1]->shape.dims[g->gd], (long long)g->ngroups);
    int64_t *s = ts_malloc((size_t)(np * (g->ngroups + 1)) * sizeof *s);
    if (!s)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in ragged-dot");
    for (int64_t p = 0; p < np; p++) {
        int64_t *row = s + p * (g->ngroups + 1);
        row[0] = 0;
        for (int64_t j = 0; j < g->ngroups; j++) {
            int64_t sz = dev_load_i64(gs->type, k->opnd[2]->data, p * g->ngroups + j);
            row[j + 1] = row[j] + (sz > 0 ? sz : 0);
        }
    }
    *starts = s;
    g->start = s;
    return IR_OK;
}

/* The group of lhs index `lix` (a full lhs multi-index), -1 for none. */
static int64_t group_of(const Ragged *g, const IrShape *l, const int64_t *lix)
{
    int64_t p = 0;
    for (int32_t i = 0; i < g->nprefix; i++)
        p = p * l->dims[g->prefix[i]] + lix[g->prefix[i]];
    const int64_t *row = g->start + p * (g->ngroups + 1);
    int64_t x = lix[g->rd];
    for (int64_t j = 0; j < g->ngroups; j++)
        if (x >= row[j] && x < row[j + 1])
            return j;
    return -1;
}

/* One result element: o is its multi-index. */
static double ragged_elem(const DevKernelArgs *k, const Ragged *g, const int64_t *o)
{
    const IrAttrs *a = &k->ins->a;
    const DevValue *L = k->opnd[0], *R = k->opnd[1];
    int64_t lix[IR_MAX_RANK] = {0}, rix[IR_MAX_RANK] = {0}, want_group = -1;
    for (int32_t d = 0; d < g->nout; d++) {
        if (g->lsrc[d] >= 0)
            lix[g->lsrc[d]] = o[d];
        if (g->rsrc[d] >= 0)
            rix[g->rsrc[d]] = o[d];
        if (g->lsrc[d] < 0 && g->rsrc[d] < 0)
            want_group = o[d];
    }
    int32_t nc = a->dot.lhs_contracting.n;
    int64_t kk[IR_MAX_RANK] = {0}, total = 1;
    for (int32_t c = 0; c < nc; c++)
        total *= L->shape.dims[a->dot.lhs_contracting.v[c]];
    double s = 0;
    for (int64_t t = 0; t < total; t++) {
        for (int32_t c = 0; c < nc; c++) {
            lix[a->dot.lhs_contracting.v[c]] = kk[c];
            rix[a->dot.rhs_contracting.v[c]] = kk[c];
        }
        int64_t grp = g->mode == R_BATCH ? 0 : group_of(g, &L->shape, lix);
        bool use = g->mode == R_CONTRACTING ? grp == want_group : grp >= 0;
        if (g->mode == R_NONCONTRACTING)
            rix[g->gd] = grp;
        if (use) {
            int64_t lo = 0, ro = 0;
            for (int32_t i = 0; i < L->shape.rank; i++)
                lo += lix[i] * g->lstr[i];
            for (int32_t i = 0; i < R->shape.rank; i++)
                ro += rix[i] * g->rstr[i];
            s += dev_load_f64(L->shape.type, L->data, lo) * dev_load_f64(R->shape.type, R->data, ro);
        }
        for (int32_t c = nc - 1; c >= 0; c--) {   /* next contracting index, row-major */
            if (++kk[c] < L->shape.dims[a->dot.lhs_contracting.v[c]])
                break;
            kk[c] = 0;
        }
    }
    return s;
}

IrStatus dev_k_ragged_dot(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 3 || !is_array(k->opnd[0]) || !is_array(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "ragged-dot takes lhs, rhs and group_sizes");
    IrType lt = k->opnd[0]->shape.type, rt = k->opnd[1]->shape.type, ot = k->ins->shape.type;
    if (!ir_type_is_float(lt) || !ir_type_is_float(rt) || !ir_type_is_float(ot))
        return dev_kernel_error(k, IR_EUNSUPPORTED, "ragged-dot of %s x %s -> %s is not supported (floats)",
                                ir_type_name(lt), ir_type_name(rt), ir_type_name(ot));
    Ragged g = {0};
    int64_t *starts = NULL;
    IrStatus st = ragged_mode(k, &g);
    if (st == IR_OK)
        st = ragged_groups(k, &g, &starts);
    if (st == IR_OK)
        st = ragged_layout(k, &g);
    DevValue *r = st == IR_OK ? dev_value_new(&k->ins->shape) : NULL;
    if (st == IR_OK && !r)
        st = dev_kernel_error(k, IR_ENOMEM, "out of memory in ragged-dot");
    int64_t o[IR_MAX_RANK] = {0}, n = r ? dev_value_elements(r) : 0;
    for (int64_t e = 0; e < n; e++) {
        dev_store_f64(ot, r->data, e, ragged_elem(k, &g, o));
        for (int32_t d = g.nout - 1; d >= 0; d--) {
            if (++o[d] < k->ins->shape.dims[d])
                break;
            o[d] = 0;
        }
    }
    ts_free(starts);
    if (st == IR_OK)
        *out = r;
    return st;
}

/* ------------------------------------------------------------------ */
/* scaled-dot                                                          */
/* ------------------------------------------------------------------ */

/* v * broadcast(scale) blockwise, as a new f32 array. */
static IrStatus dequantize(const DevKernelArgs *k, const DevValue *v, const DevValue *sc,
                           DevValue **out)
{
    const IrShape *vs = &v->shape, *ss = &sc->shape;
    bool ok = is_array(sc) && ss->rank == vs->rank && ir_type_is_float(vs->type) &&
              ir_type_is_float(ss->type);
    for (int32_t i = 0; ok && i < vs->rank; i++)
        ok = ss->dims[i] > 0 ? vs->dims[i] % ss->dims[i] == 0 : vs->dims[i] == 0;
    if (!ok)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "scaled-dot: each scale must be a float array of "
                                "its operand's rank whose dims divide the operand's");
    IrShape f = *vs;
    f.type = IR_F32;
    f.has_layout = false;
    DevValue *r = dev_value_new_uninit(&f);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in scaled-dot");
    int64_t idx[IR_MAX_RANK] = {0}, sstr[IR_MAX_RANK], n = dev_value_elements(v);
    ir_shape_strides(ss, sstr);
    for (int64_t e = 0; e < n; e++) {
        int64_t so = 0;
        for (int32_t d = 0; d < vs->rank; d++)
            so += idx[d] / (vs->dims[d] / ss->dims[d]) * sstr[d];
        double x = dev_load_f64(vs->type, v->data, e) * dev_load_f64(ss->type, sc->data, so);
        dev_store_f64(IR_F32, r->data, e, x);
        for (int32_t d = vs->rank - 1; d >= 0; d--) {
            if (++idx[d] < vs->dims[d])
                break;
            idx[d] = 0;
        }
    }
    *out = r;
    return IR_OK;
}

IrStatus dev_k_scaled_dot(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 4 || !is_array(k->opnd[0]) || !is_array(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "scaled-dot takes lhs, rhs, lhs_scale, rhs_scale");
    DevValue *deq[2] = {NULL, NULL};
    IrStatus st = dequantize(k, k->opnd[0], k->opnd[2], &deq[0]);
    if (st == IR_OK)
        st = dequantize(k, k->opnd[1], k->opnd[3], &deq[1]);
    if (st == IR_OK) {
        IrInstr dot = *k->ins;
        dot.op = OP_DOT;
        dot.nopnd = 2;
        DevKernelArgs dk = *k;
        dk.ins = &dot;
        dk.nopnd = 2;
        dk.opnd = deq;
        st = dev_k_dot(&dk, out);
    }
    dev_value_unref(deq[0]);
    dev_value_unref(deq[1]);
    return st;
}
