/*
 * k_dot.c: dot, as one row-major GEMM per batch element
 *     C[M,N] = op(A)[M,K] * op(B)[K,N]          (op: optional transpose)
 * in the compute type of the result (contract.h).
 *
 * An operand is used in place when its dims are already in GEMM order,
 * [batch, free, contracting] or [batch, contracting, free] (a transpose flag
 * covers the second), and when its element type is the compute type;
 * otherwise it is copied once, converted, into [batch, free, contracting]
 * (lhs) or [batch, contracting, free] (rhs). One GEMM per batch element;
 * the result [batch, lhs free, rhs free] is the GEMM output itself.
 *
 * A dot whose one user is a transpose to [batch, rhs free, lhs free]
 * (fusion.c groups the pair; JAX writes weight gradients so) writes that
 * layout directly: C^T = op(B)^T op(A)^T, the same GEMM with the operands
 * swapped, instead of a full-size result moved again by the transpose.
 */
#include "contract.h"

#include <string.h>

/* The dims of a dot, classified. Result = [batch..., lhs free..., rhs free...]. */
typedef struct DotPlan {
    int32_t nb, nc, nlf, nrf;
    int64_t lfree[IR_MAX_RANK], rfree[IR_MAX_RANK];
    int64_t b, m, n, k;   /* batch, lhs free, rhs free and contracting sizes */
} DotPlan;

/* Collect the dims of s that are in neither list, ascending; false when a
 * list names a dim out of range or twice. */
static bool free_dims(const IrShape *s, const IrI64List *x, const IrI64List *y, int64_t *free,
                      int32_t *nfree)
{
    bool seen[IR_MAX_RANK] = {false};
    const IrI64List *lists[2] = {x, y};
    for (int l = 0; l < 2; l++)
        for (int32_t i = 0; i < lists[l]->n; i++) {
            int64_t d = lists[l]->v[i];
            if (d < 0 || d >= s->rank || seen[d])
                return false;
            seen[d] = true;
        }
    *nfree = 0;
    for (int32_t d = 0; d < s->rank; d++)
        if (!seen[d])
            free[(*nfree)++] = d;
    return true;
}

static int64_t dims_product(const IrShape *s, const int64_t *dims, int32_t n)
{
    int64_t p = 1;
    for (int32_t i = 0; i < n; i++)
        if (!ct_mul_ok(p, s->dims[dims[i]], &p))
            return -1;
    return p;
}

static IrStatus dot_plan(const DevKernelArgs *k, DotPlan *p)
{
    const IrShape *ls = &k->opnd[0]->shape, *rs = &k->opnd[1]->shape, *os = &k->ins->shape;
    const IrDotDnums *dn = &k->ins->a.dot;
    if (dn->lhs_batch.n != dn->rhs_batch.n || dn->lhs_contracting.n != dn->rhs_contracting.n ||
        !free_dims(ls, &dn->lhs_batch, &dn->lhs_contracting, p->lfree, &p->nlf) ||
        !free_dims(rs, &dn->rhs_batch, &dn->rhs_contracting, p->rfree, &p->nrf))
        return dev_kernel_error(k, IR_EINPUT, "dot: bad dimension numbers");
    p->nb = dn->lhs_batch.n;
    p->nc = dn->lhs_contracting.n;
    for (int32_t i = 0; i < p->nb; i++)
        if (ls->dims[dn->lhs_batch.v[i]] != rs->dims[dn->rhs_batch.v[i]])
            return dev_kernel_error(k, IR_EINPUT, "dot: batch dimension %d sizes differ", (int)i);
    for (int32_t i = 0; i < p->nc; i++)
        if (ls->dims[dn->lhs_contracting.v[i]] != rs->dims[dn->rhs_contracting.v[i]])
            return dev_kernel_error(k, IR_EINPUT, "dot: contracting dimension %d sizes differ",
                                    (int)i);
    /* The result's dims, in order, must be batch, lhs free, rhs free. */
    int64_t want[IR_MAX_RANK];
    int32_t r = 0;
    if (p->nb + p->nlf + p->nrf > IR_MAX_RANK)
        return dev_kernel_error(k, IR_EINPUT, "dot: result rank too large");
    for (int32_t i = 0; i < p->nb; i++)
        want[r++] = ls->dims[dn->lhs_batch.v[i]];
    for (int32_t i = 0; i < p->nlf; i++)
        want[r++] = ls->dims[p->lfree[i]];
    for (int32_t i = 0; i < p->nrf; i++)
        want[r++] = rs->dims[p->rfree[i]];
    if (os->type == IR_TUPLE || os->rank != r || !ir_dims_equal(os->dims, want, r))
        return dev_kernel_error(k, IR_EINPUT, "dot: result shape does not match the operands");
    p->b = dims_product(ls, dn->lhs_batch.v, p->nb);
    p->m = dims_product(ls, p->lfree, p->nlf);
    p->n = dims_product(rs, p->rfree, p->nrf);
    p->k = dims_product(ls, dn->lhs_contracting.v, p->nc);
    if (p->b < 0 || p->m < 0 || p->n < 0 || p->k < 0)
        return dev_kernel_error(k, IR_EINPUT, "dot: size overflow");
    return IR_OK;
}

/* Dims of s in the order batch, x, y? */
static bool dims_in_order(const IrShape *s, const int64_t *batch, int32_t nb, const int64_t *x,
                          int32_t nx, const int64_t *y, int32_t ny)
{
    int32_t pos = 0;
    for (int32_t i = 0; i < nb; i++)
        if (batch[i] != pos++)
            return false;
    for (int32_t i = 0; i < nx; i++)
        if (x[i] != pos++)
            return false;
    for (int32_t i = 0; i < ny; i++)
        if (y[i] != pos++)
            return false;
    return pos == s->rank;
}

/* One GEMM operand: in place in the value's buffer or packed to scratch. */
typedef struct DotOperand {
    const uint8_t *data;
    uint8_t *owned;   /* scratch to free, or NULL */
    bool trans;
} DotOperand;

/* Prepare one dot operand. For the lhs, x = free and y = contracting (GEMM
 * A = [M, K]); for the rhs, x = contracting and y = free (B = [K, N]). The
 * swapped order is accepted in place with the transpose flag. */
static IrStatus dot_operand(const DevKernelArgs *k, Ct c, const DevValue *v, const int64_t *batch,
                            int32_t nb, const int64_t *x, int32_t nx, const int64_t *y, int32_t ny,
                            DotOperand *op)
{
    const IrShape *s = &v->shape;
    op->owned = NULL;
    op->trans = false;
    if (ct_native(c, s->type)) {
        if (dims_in_order(s, batch, nb, x, nx, y, ny)) {
            op->data = ct_data_of(v);
            return IR_OK;
        }
        if (dims_in_order(s, batch, nb, y, ny, x, nx)) {
            op->data = ct_data_of(v);
            op->trans = true;
            return IR_OK;
        }
    }
    int64_t order[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < nb; i++)
        order[r++] = batch[i];
    for (int32_t i = 0; i < nx; i++)
        order[r++] = x[i];
    for (int32_t i = 0; i < ny; i++)
        order[r++] = y[i];
    CtView view;
    ct_view_of(&view, s, r, order);
    if (!(op->owned = ct_scratch(ct_view_elements(&view), ct_size(c))))
        return dev_kernel_oom(k, NULL);
    ct_pack(c, s->type, v->data, &view, op->owned);
    op->data = op->owned;
    return IR_OK;
}

/* Run the batched GEMM of a planned dot into c_out ([B, M, N], compute
 * type; transposed: [B, N, M], each C^T computed as op(B)^T op(A)^T). */
static void dot_run(const DevKernelArgs *k, Ct c, const DotPlan *p, const DotOperand *a,
                    const DotOperand *b, bool transposed, uint8_t *c_out)
{
    CtGemm g = {.c = c, .ta = a->trans, .tb = b->trans, .blas = ct_use_blas(k),
              .m = p->m, .n = p->n, .k = p->k};
    g.lda = a->trans ? p->m : p->k;
    g.ldb = b->trans ? p->k : p->n;
    g.ldc = p->n;
    const DotOperand *first = a, *second = b;
    int64_t first_size = p->m * p->k, second_size = p->k * p->n;
    if (transposed) {
        g = (CtGemm){.c = c, .ta = !b->trans, .tb = !a->trans, .blas = g.blas, .m = p->n, .n = p->m,
                     .k = p->k, .lda = g.ldb, .ldb = g.lda, .ldc = p->m};
        first = b;
        second = a;
        first_size = p->k * p->n;
        second_size = p->m * p->k;
    }
    size_t esz = ct_size(c);
    for (int64_t i = 0; i < p->b; i++)
        ct_gemm(&g, first->data + (size_t)(i * first_size) * esz, second->data + (size_t)(i * second_size) * esz,
                c_out + (size_t)(i * p->m * p->n) * esz);
}

/*
 * dot: general dimension numbers. Example: lhs f32[2,3,4] with
 * lhs_batch_dims={0}, lhs_contracting_dims={2} and rhs f32[2,4,5] with
 * rhs_batch_dims={0}, rhs_contracting_dims={1} gives f32[2,3,5]: for each
 * batch b, out[b] = lhs[b] (3x4) x rhs[b] (4x5). Batch and contracting dims
 * may sit anywhere; free dims keep their relative order.
 *
 * Inputs: two array operands. On success *out is a new array. Fails with
 * IR_EINPUT on inconsistent dimension numbers, IR_ENOMEM on OOM.
 */
static IrStatus dot_into(const DevKernelArgs *k, const IrShape *tshape, DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "dot takes two arrays");
    DotPlan p = {0};
    IrStatus st = dot_plan(k, &p);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->ins->shape;
    const IrDotDnums *dn = &k->ins->a.dot;
    Ct c = ct_of(os->type);
    if (tshape && (tshape->type != os->type || tshape->rank != os->rank ||
                   ir_shape_elements(tshape) != ir_shape_elements(os)))
        return dev_kernel_error(k, IR_EINTERNAL, "dot: the transposed result's shape does not fit");
    DevValue *r = dev_value_new_uninit(tshape ? tshape : os);
    if (!r)
        return dev_kernel_oom(k, NULL);
    int64_t total = p.b * p.m * p.n;
    if (total == 0) {
        *out = r;
        return IR_OK;
    }
    DotOperand a = {0}, b = {0};
    uint8_t *cbuf = NULL;
    if ((st = dot_operand(k, c, k->opnd[0], dn->lhs_batch.v, p.nb, p.lfree, p.nlf,
                          dn->lhs_contracting.v, p.nc, &a)) != IR_OK ||
        (st = dot_operand(k, c, k->opnd[1], dn->rhs_batch.v, p.nb, dn->rhs_contracting.v, p.nc,
                          p.rfree, p.nrf, &b)) != IR_OK)
        goto done;
    bool direct = ct_native(c, os->type);
    if (!direct && !(cbuf = ct_scratch(total, ct_size(c)))) {
        st = dev_kernel_oom(k, NULL);
        goto done;
    }
    dot_run(k, c, &p, &a, &b, tshape != NULL, direct ? r->data : cbuf);
    if (!direct) {
        CtView v = {.rank = 1, .dims = {total}, .stride = {1}};
        ct_unpack(c, os->type, cbuf, &v, r->data);
    }
done:
    ts_free(a.owned);
    ts_free(b.owned);
    ts_free(cbuf);
    if (st != IR_OK) {
        dev_value_unref(r);
        return st;
    }
    *out = r;
    return IR_OK;
}

IrStatus dev_k_dot(const DevKernelArgs *k, DevValue **out)
{
    return dot_into(k, NULL, out);
}

IrStatus dev_k_dot_transposed(const DevKernelArgs *k, const IrShape *tshape, DevValue **out)
{
    return dot_into(k, tshape, out);
}
