/*
 * k_lu.c: the custom-call JAX's CPU lowering of lax.linalg.lu emits (and so
 * jnp.linalg.solve, inv, det, slogdet, jax.scipy.linalg.lu), run with
 * LAPACK's getrf from OpenBLAS; batched over every dimension but the
 * minor two; f32, f64, c64, c128.
 *
 *   (T[..., m, n], s32[..., min(m, n)], s32[...]) custom-call(T[..., m, n] a),
 *       custom_call_target="lapack_?getrf_ffi"
 *
 * gives, per matrix, getrf's results as LAPACK leaves them: L (unit
 * diagonal, not stored) below the diagonal and U in and above it, with
 * P A = L U; the pivots, 1-based (row i was swapped with row ipiv[i]; JAX
 * subtracts 1); and info: 0, or k > 0 when U[k-1, k-1] is exactly zero
 * (the factors are still complete; JAX keeps them, as it keeps every
 * info >= 0). ir/lapack_calls.c checks the call's form when the module is
 * parsed.
 *
 *   s32[..., m] custom-call(s32[..., p] ipiv), custom_call_target="tessel_lu_permutation"
 *
 * (tessel's own, which `tessel grad` writes for the LU's gradient:
 * grad/rules_linalg.c) gives the permutation the 1-based pivots make of
 * 0 .. m-1, swapping entries i and ipiv[i] - 1 for i = 0, 1, ...: row i
 * of P A is row perm[i] of A (JAX's lu_pivots_to_permutation). A pivot
 * outside [1, m] is an error.
 *
 * Row-major data is the transpose of what column-major LAPACK reads, so
 * each matrix is transposed into a column-major scratch buffer, factored
 * there and transposed back (dev_lapack_transpose, k_qr.c).
 */
#include "blas.h"

#include <complex.h>
#include <string.h>

static int getrf(const DevBlas *bl, IrType t, int m, int n, void *a, int *ipiv)
{
    int lda = m > 0 ? m : 1, info = 0;
    switch (t) {
    case IR_F32: bl->sgetrf(&m, &n, a, &lda, ipiv, &info); break;
    case IR_F64: bl->dgetrf(&m, &n, a, &lda, ipiv, &info); break;
    case IR_C64: bl->cgetrf(&m, &n, a, &lda, ipiv, &info); break;
    default: bl->zgetrf(&m, &n, a, &lda, ipiv, &info); break;
    }
    return info;
}

IrStatus dev_k_getrf(const DevKernelArgs *k, DevValue **out)
{
    const char *t = k->ins->a.x->custom_call_target;
    DevLapackDims q;
    IrStatus st = dev_lapack_one(k, &q);
    if (st != IR_OK)
        return st;
    const DevValue *a = k->opnd[0];
    int32_t r = a->shape.rank;
    const IrShape *rs = &k->ins->shape;
    bool ok = rs->type == IR_TUPLE && rs->ntuple == 3 && ir_shape_equal(&rs->tuple[0], &a->shape) &&
              rs->tuple[1].type == IR_S32 && rs->tuple[1].rank == r - 1 &&
              ir_dims_equal(rs->tuple[1].dims, a->shape.dims, r - 2) && rs->tuple[1].dims[r - 2] == q.p &&
              rs->tuple[2].type == IR_S32 && rs->tuple[2].rank == r - 2 &&
              ir_dims_equal(rs->tuple[2].dims, a->shape.dims, r - 2);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "%s's result must be (T[..., m, n], s32[..., min(m, n)], s32[...]) "
                                              "for its operand T[..., m, n]", t);
    DevValue *el[3] = {dev_value_new_uninit(&rs->tuple[0]), dev_value_new(&rs->tuple[1]),
                       dev_value_new(&rs->tuple[2])};
    /* One matrix's scratch: no larger than the operand, which is in memory,
     * unless the batch is empty (then none is needed). */
    size_t cells = q.batch > 0 ? (size_t)q.m * (size_t)q.n : 0;
    uint8_t *col = cells > 0 ? ts_malloc(cells * q.esz) : NULL;
    if (!el[0] || !el[1] || !el[2] || (cells > 0 && !col)) {
        for (int e = 0; e < 3; e++)
            dev_value_unref(el[e]);
        ts_free(col);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
    }
    if (a->nbytes > 0)
        memcpy(el[0]->data, a->data, (size_t)a->nbytes);
    int32_t *ipiv = (int32_t *)(void *)el[1]->data, *info = (int32_t *)(void *)el[2]->data;
    size_t mat = cells * q.esz;
    /* A matrix with no rows or columns has nothing to factor: info 0. */
    for (int64_t b = 0; cells > 0 && b < q.batch; b++) {
        uint8_t *ab = el[0]->data + (size_t)b * mat;
        dev_lapack_transpose(col, ab, q.m, q.n, q.esz);
        info[b] = getrf(q.bl, q.type, q.m, q.n, col, ipiv + (size_t)b * (size_t)q.p);
        if (info[b] < 0) { /* an argument LAPACK refused: ours, not the user's */
            ts_free(col);
            for (int e = 0; e < 3; e++)
                dev_value_unref(el[e]);
            return dev_kernel_error(k, IR_EINTERNAL, "getrf refused argument %d", -info[b]);
        }
        dev_lapack_transpose(ab, col, q.n, q.m, q.esz);
    }
    ts_free(col);
    *out = dev_value_tuple(rs, 3, el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory in %s", t);
}

IrStatus dev_k_lu_permutation(const DevKernelArgs *k, DevValue **out)
{
    const IrShape *rs = &k->ins->shape;
    if (k->nopnd != 1)
        return dev_kernel_error(k, IR_EINPUT, "tessel_lu_permutation takes one operand");
    const IrShape *ps = &k->opnd[0]->shape;
    int32_t r = ps->rank;
    bool ok = ps->type == IR_S32 && r >= 1 && ir_shape_is_array(rs) && rs->type == IR_S32 && rs->rank == r &&
              ir_dims_equal(rs->dims, ps->dims, r - 1) && rs->dims[r - 1] >= ps->dims[r - 1];
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "tessel_lu_permutation takes s32[..., p] pivots and gives "
                                              "s32[..., m], m >= p");
    int64_t p = ps->dims[r - 1], m = rs->dims[r - 1], batch = 1;
    for (int32_t d = 0; d < r - 1; d++)
        batch *= ps->dims[d];
    DevValue *v = dev_value_new(rs);
    if (!v)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in tessel_lu_permutation");
    const int32_t *ipiv = (const int32_t *)(const void *)k->opnd[0]->data;
    int32_t *perm = (int32_t *)(void *)v->data;
    for (int64_t b = 0; b < batch; b++) {
        int32_t *pb = perm + b * m;
        for (int64_t i = 0; i < m; i++)
            pb[i] = (int32_t)i;
        for (int64_t i = 0; i < p; i++) {
            int64_t j = (int64_t)ipiv[b * p + i] - 1;
            if (j < 0 || j >= m) {
                dev_value_unref(v);
                return dev_kernel_error(k, IR_EINPUT, "pivot %lld of matrix %lld is %lld, outside [1, %lld]",
                                        (long long)i, (long long)b, (long long)j + 1, (long long)m);
            }
            int32_t t = pb[i];
            pb[i] = pb[j];
            pb[j] = t;
        }
    }
    *out = v;
    return IR_OK;
}
