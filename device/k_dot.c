/*
 * k_dot.c: dot, as one row-major GEMM per batch element
 *     C[M,N] = op(A)[M,K] * op(B)[K,N]          (op: optional transpose)
 * in the compute type of the result (contract.h).
 *
 * An operand is used in place when its element type is the compute type
 * and each batch element's matrix is one strided GEMM operand: its free
 * dims form one run of memory and its contracting dims another (each
 * dim's stride the next one's times its size), one of the two runs of
 * stride 1 (a transpose flag covers the contracting run inside), the
 * other's stride the row stride (lda/ldb); the batch dims may sit anywhere
 * with any strides. Otherwise it is copied once, converted, into [batch,
 * free, contracting] (lhs) or [batch, contracting, free] (rhs). One GEMM
 * per batch element; the result [batch, lhs free, rhs free] is the GEMM
 * output itself.
 *
 * A dot may read an operand as a transpose of a value (fusion.c runs a
 * transpose read only by dots inside them): the dimension numbers then
 * name the transposed dims, mapped through the permutation onto the
 * value's. JAX's attention reads its q/k/v heads so: [H,D,B,S] transposed
 * to [B,H,S,D], each (b, h) matrix [S,D] in place with row stride B*S and
 * the transpose flag, no copy made.
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

static IrStatus dot_plan(const DevKernelArgs *k, const IrShape *ls, const IrShape *rs, DotPlan *p)
{
    const IrShape *os = &k->ins->shape;
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

/* Dims d[0..n) of s (strides st) as one run of len elements, the last
 * dim's stride *stride, each dim's stride the next one's times its size
 * (dims of size 1 skipped; none left: *stride 0). False when they do not
 * form such a run. */
static bool dims_run(const IrShape *s, const int64_t *st, const int64_t *d, int32_t n, int64_t *stride,
                     int64_t *len)
{
    int64_t next = 0, l = 1;
    *stride = 0;
    for (int32_t i = n - 1; i >= 0; i--) {
        int64_t size = s->dims[d[i]];
        l *= size;
        if (size == 1)
            continue;
        if (*stride == 0)
            *stride = st[d[i]];
        else if (st[d[i]] != next)
            return false;
        next = st[d[i]] * size;
    }
    *len = l;
    return true;
}

/* One GEMM operand: the matrix [x, y] of each batch element, in place in
 * the value's buffer (through strides) or packed to scratch. Batch element
 * i (row-major over batch.dims) starts at element offset(i) of data. */
typedef struct DotOperand {
    const uint8_t *data;
    uint8_t *owned;   /* scratch to free, or NULL */
    bool trans;       /* stored [y, x] */
    int64_t ld;       /* the stored matrix's row stride, in elements */
    CtView batch;     /* the batch dims' sizes and strides */
} DotOperand;

/* Can the matrices [x, y] of s be read in place, each a row-major [x, y]
 * (or, trans, [y, x]) with row stride ld? Their batch dims may have any
 * strides (a head dim between the rows, JAX's q/k/v). */
static bool in_place(const IrShape *s, const int64_t *x, int32_t nx, const int64_t *y, int32_t ny,
                     DotOperand *op)
{
    int64_t st[IR_MAX_RANK], sx, sy, lx, ly;
    ir_shape_strides(s, st);
    if (!dims_run(s, st, x, nx, &sx, &lx) || !dims_run(s, st, y, ny, &sy, &ly))
        return false;
    int64_t wx = lx > 1 ? lx : 1, wy = ly > 1 ? ly : 1;
    if (sy <= 1) { /* rows x, columns y */
        op->trans = false;
        op->ld = sx > 0 ? sx : wy;
        return op->ld >= wy;
    }
    if (sx <= 1) { /* rows y, columns x */
        op->trans = true;
        op->ld = sy;
        return op->ld >= wx;
    }
    return false;
}

/* Prepare one dot operand, v read as the transpose of it by perm (NULL:
 * v itself; logical dim i is dim perm[i] of v). For the lhs, x = free and
 * y = contracting (GEMM A = [M, K]); for the rhs, x = contracting and y =
 * free (B = [K, N]); the lists name logical dims. In place when v's
 * elements are compute-type values whose matrices in_place reads; else
 * packed into [batch, x, y]. */
static IrStatus dot_operand(const DevKernelArgs *k, Ct c, const DevValue *v, const int64_t *perm,
                            const int64_t *batch, int32_t nb, const int64_t *x, int32_t nx, const int64_t *y,
                            int32_t ny, DotOperand *op)
{
    const IrShape *s = &v->shape;
    int64_t order[IR_MAX_RANK], st[IR_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < nb; i++)
        order[r++] = perm ? perm[batch[i]] : batch[i];
    for (int32_t i = 0; i < nx; i++)
        order[r++] = perm ? perm[x[i]] : x[i];
    for (int32_t i = 0; i < ny; i++)
        order[r++] = perm ? perm[y[i]] : y[i];
    op->owned = NULL;
    ir_shape_strides(s, st);
    op->batch.rank = nb;
    op->batch.base = 0;
    for (int32_t i = 0; i < nb; i++) {
        op->batch.dims[i] = s->dims[order[i]];
        op->batch.stride[i] = st[order[i]];
    }
    if (ct_native(c, s->type) && in_place(s, order + nb, nx, order + nb + nx, ny, op)) {
        op->data = ct_data_of(v);
        return IR_OK;
    }
    CtView view;
    ct_view_of(&view, s, r, order);
    int64_t total = ct_view_elements(&view), rows = 1, cols = 1;
    for (int32_t i = 0; i < nx; i++)
        rows *= view.dims[nb + i];
    for (int32_t i = 0; i < ny; i++)
        cols *= view.dims[nb + nx + i];
    if (!(op->owned = ct_scratch(total, ct_size(c))))
        return dev_kernel_oom(k, NULL);
    ct_pack(c, s->type, v->data, &view, op->owned);
    op->data = op->owned;
    op->trans = false;
    op->ld = cols;
    /* Packed row-major: each batch dim's stride is the elements after it. */
    for (int32_t i = nb - 1, after = rows * cols; i >= 0; i--) {
        op->batch.stride[i] = after;
        after *= op->batch.dims[i];
    }
    return IR_OK;
}

/* The element offset of batch element i (row-major over v's dims). */
static int64_t batch_offset(const CtView *v, int64_t i)
{
    int64_t off = 0;
    for (int32_t d = v->rank - 1; d >= 0; d--) {
        off += (i % v->dims[d]) * v->stride[d];
        i /= v->dims[d];
    }
    return off;
}

/* Run the batched GEMM of a planned dot into c_out ([B, M, N], compute
 * type; transposed: [B, N, M], each C^T computed as op(B)^T op(A)^T). */
static void dot_run(const DevKernelArgs *k, Ct c, const DotPlan *p, const DotOperand *a,
                    const DotOperand *b, bool transposed, uint8_t *c_out)
{
    CtGemm g = {.c = c, .ta = a->trans, .tb = b->trans, .blas = ct_use_blas(k),
              .m = p->m, .n = p->n, .k = p->k, .lda = a->ld, .ldb = b->ld, .ldc = p->n};
    const DotOperand *first = a, *second = b;
    if (transposed) {
        g = (CtGemm){.c = c, .ta = !b->trans, .tb = !a->trans, .blas = g.blas, .m = p->n, .n = p->m,
                     .k = p->k, .lda = b->ld, .ldb = a->ld, .ldc = p->m};
        first = b;
        second = a;
    }
    size_t esz = ct_size(c);
    for (int64_t i = 0; i < p->b; i++)
        ct_gemm(&g, first->data + (size_t)batch_offset(&first->batch, i) * esz,
                second->data + (size_t)batch_offset(&second->batch, i) * esz,
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
/* The shape operand v is read as: v transposed by perm (dims[i] = v's
 * dims[perm[i]], in dims[]), or v's own (perm NULL). False when perm is
 * not a permutation of v's dims. */
static bool read_shape(const DevValue *v, const int64_t *perm, int32_t nperm, IrShape *s, int64_t *dims)
{
    *s = v->shape;
    if (!perm)
        return true;
    s->dims = dims;
    s->has_layout = false;
    s->minor_to_major = NULL;
    bool seen[IR_MAX_RANK] = {false};
    if (nperm != v->shape.rank)
        return false;
    for (int32_t i = 0; i < nperm; i++) {
        if (perm[i] < 0 || perm[i] >= nperm || seen[perm[i]])
            return false;
        seen[perm[i]] = true;
        s->dims[i] = v->shape.dims[perm[i]];
    }
    return true;
}

static IrStatus dot_into(const DevKernelArgs *k, const IrI64List *const perm[2], const IrShape *tshape,
                         DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]))
        return dev_kernel_error(k, IR_EINPUT, "dot takes two arrays");
    IrShape ls, rs;
    int64_t ldims[IR_MAX_RANK], rdims[IR_MAX_RANK];
    const int64_t *lp = perm[0] ? perm[0]->v : NULL, *rp = perm[1] ? perm[1]->v : NULL;
    if (!read_shape(k->opnd[0], lp, perm[0] ? perm[0]->n : 0, &ls, ldims) ||
        !read_shape(k->opnd[1], rp, perm[1] ? perm[1]->n : 0, &rs, rdims))
        return dev_kernel_error(k, IR_EINPUT, "dot: an operand's transpose is not a permutation of its dims");
    DotPlan p = {0};
    IrStatus st = dot_plan(k, &ls, &rs, &p);
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
    if ((st = dot_operand(k, c, k->opnd[0], lp, dn->lhs_batch.v, p.nb, p.lfree, p.nlf,
                          dn->lhs_contracting.v, p.nc, &a)) != IR_OK ||
        (st = dot_operand(k, c, k->opnd[1], rp, dn->rhs_batch.v, p.nb, dn->rhs_contracting.v, p.nc,
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
    const IrI64List *none[2] = {NULL, NULL};
    return dot_into(k, none, NULL, out);
}

IrStatus dev_k_dot_fused(const DevKernelArgs *k, const IrI64List *const perm[2], const IrShape *tshape,
                         DevValue **out)
{
    return dot_into(k, perm, tshape, out);
}
