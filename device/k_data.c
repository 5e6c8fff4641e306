/*
 * k_data.c: data-movement kernels: constant, iota, broadcast, reshape and
 * bitcast, transpose, slice, dynamic-slice, dynamic-update-slice, pad,
 * concatenate, reverse.
 *
 * Almost all of them are one "strided copy": walk an index space of dims
 * d[0..r), reading element sum(idx[j] * sstr[j]) of the source and writing
 * element sum(idx[j] * dstr[j]) of the destination. Only the strides and
 * the starting offsets differ:
 *   broadcast   source stride 0 on the new dims
 *   transpose   source strides permuted (2-D is blocked, for the cache)
 *   slice       source strides times the slice stride, offset at the start
 *   reverse     negative source strides, offset at the last element
 *   pad         destination strides times (interior + 1), offset at lo
 *   dynamic-update-slice, concatenate: destination offset
 * Adjacent dims that are contiguous in both arrays are merged first, so a
 * slice of whole rows is one memcpy.
 *
 * Every kernel checks its operands against its attributes and its result
 * shape (the verifier may not have run) before it touches data.
 */
#include "device.h"

#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static IrStatus shape_error(const DevKernelArgs *k, const char *what, const IrShape *s)
{
    char *t = ir_shape_str(s, false);
    IrStatus st = dev_kernel_error(k, IR_EINPUT, "%s: %s", what, t ? t : "?");
    ts_free(t);
    return st;
}

static IrStatus new_result(const DevKernelArgs *k, bool zero, DevValue **out)
{
    *out = zero ? dev_value_new(&k->ins->shape) : dev_value_new_uninit(&k->ins->shape);
    if (!*out)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for a %s result",
                                ir_op_name(k->ins->op));
    return IR_OK;
}

/* Operand count and array-ness of operands and result. */
static IrStatus expect_arrays(const DevKernelArgs *k, int32_t nmin, int32_t nmax)
{
    if (k->nopnd < nmin || k->nopnd > nmax)
        return dev_kernel_error(k, IR_EINPUT, "%s has %d operands", ir_op_name(k->ins->op),
                                (int)k->nopnd);
    if (!ir_shape_is_array(&k->ins->shape))
        return shape_error(k, "needs an array result, not", &k->ins->shape);
    for (int32_t i = 0; i < k->nopnd; i++)
        if (!ir_shape_is_array(&k->opnd[i]->shape))
            return shape_error(k, "needs array operands, not", &k->opnd[i]->shape);
    return IR_OK;
}

static void strides_of(const IrShape *s, int64_t *st)
{
    ir_shape_strides(s, st);
}

/* Copy an n-element run with strides (in elements) of element size w. */
static void copy_run(uint8_t *d, int64_t ds, const uint8_t *s, int64_t ss, int64_t n, size_t w)
{
    if (ds == 1 && ss == 1) {
        memcpy(d, s, (size_t)n * w);
        return;
    }
#define RUN(T)                                                            \
    for (int64_t i = 0; i < n; i++)                                       \
        ((T *)d)[i * ds] = ((const T *)s)[i * ss];                        \
    return
    switch (w) {
    case 1: RUN(uint8_t);
    case 2: RUN(uint16_t);
    case 4: RUN(uint32_t);
    case 8: RUN(uint64_t);
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * ds * (int64_t)w, s + i * ss * (int64_t)w, w);
    }
#undef RUN
}

/* The strided copy described at the top of the file. dims/sstr/dstr have
 * `rank` entries; offsets and strides count elements of size w. */
static void strided_copy(uint8_t *dst, int64_t doff, const int64_t *dstr0, const uint8_t *src,
                         int64_t soff, const int64_t *sstr0, int32_t rank0, const int64_t *dims0,
                         size_t w)
{
    int64_t dims[IR_MAX_RANK + 1], sstr[IR_MAX_RANK + 1], dstr[IR_MAX_RANK + 1];
    int32_t rank = 0;
    for (int32_t j = 0; j < rank0; j++) {
        if (dims0[j] == 0)
            return;
        if (dims0[j] == 1)
            continue; /* contributes nothing to any offset */
        /* Merge with the previous dim when both arrays keep them contiguous. */
        if (rank > 0 && sstr[rank - 1] == sstr0[j] * dims0[j] &&
            dstr[rank - 1] == dstr0[j] * dims0[j]) {
            dims[rank - 1] *= dims0[j];
            sstr[rank - 1] = sstr0[j];
            dstr[rank - 1] = dstr0[j];
            continue;
        }
        dims[rank] = dims0[j];
        sstr[rank] = sstr0[j];
        dstr[rank] = dstr0[j];
        rank++;
    }
    if (rank == 0) {
        memcpy(dst + doff * (int64_t)w, src + soff * (int64_t)w, w);
        return;
    }
    int64_t idx[IR_MAX_RANK + 1] = {0};
    int32_t in = rank - 1;
    for (;;) {
        copy_run(dst + doff * (int64_t)w, dstr[in], src + soff * (int64_t)w, sstr[in], dims[in], w);
        int32_t j = in - 1;
        for (; j >= 0; j--) {
            idx[j]++;
            soff += sstr[j];
            doff += dstr[j];
            if (idx[j] < dims[j])
                break;
            soff -= sstr[j] * dims[j];
            doff -= dstr[j] * dims[j];
            idx[j] = 0;
        }
        if (j < 0)
            return;
    }
}

/* Fill n elements with one element value (doubling memcpy). */
static void fill(uint8_t *dst, const uint8_t *elem, int64_t n, size_t w)
{
    if (n <= 0)
        return;
    memcpy(dst, elem, w);
    int64_t have = 1;
    while (have < n) {
        int64_t c = have < n - have ? have : n - have;
        memcpy(dst + have * (int64_t)w, dst, (size_t)c * w);
        have += c;
    }
}

/* ------------------------------------------------------------------ */
/* constant, iota                                                      */
/* ------------------------------------------------------------------ */

/* Leaves of a (tuple) literal, depth first, consuming bytes in order. */
static IrStatus constant_of(const DevKernelArgs *k, const IrShape *s, const uint8_t *lit,
                            int64_t nlit, int64_t *used, DevValue **out)
{
    if (s->type != IR_TUPLE) {
        int64_t nb = ir_shape_bytes(s);
        if (nb < 0 || *used > nlit - nb)
            return dev_kernel_error(k, IR_EINPUT, "constant literal is shorter than its shape");
        DevValue *v = dev_value_new_uninit(s);
        if (!v)
            return dev_kernel_error(k, IR_ENOMEM, "out of memory for a constant");
        if (nb > 0)
            memcpy(v->data, lit + *used, (size_t)nb);
        *used += nb;
        *out = v;
        return IR_OK;
    }
    DevValue **el = ts_calloc((size_t)(s->ntuple > 0 ? s->ntuple : 1), sizeof *el);
    if (!el)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for a constant");
    IrStatus st = IR_OK;
    int32_t i = 0;
    for (; i < s->ntuple && st == IR_OK; i++)
        st = constant_of(k, &s->tuple[i], lit, nlit, used, &el[i]);
    if (st != IR_OK) {
        for (int32_t j = 0; j < i; j++)
            dev_value_unref(el[j]);
        ts_free(el);
        return st;
    }
    *out = dev_value_tuple(s, s->ntuple, el);
    ts_free(el);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory for a constant");
}

IrStatus dev_k_constant(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    int64_t used = 0;
    if (!k->ins->a.literal && ir_shape_bytes(&k->ins->shape) > 0)
        return dev_kernel_error(k, IR_EINPUT, "constant has no literal");
    return constant_of(k, &k->ins->shape, k->ins->a.literal, k->ins->a.literal_bytes, &used, out);
}

/* iota: element value = its index along iota_dimension. Built as one row
 * [0, 1, ..., n-1] each repeated `inner` times, repeated `outer` times.
 * Example: s32[2,3] iota_dimension=0 -> {{0,0,0},{1,1,1}}. */
IrStatus dev_k_iota(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    const IrShape *s = &k->ins->shape;
    int64_t d = k->ins->a.iota_dimension;
    if (!ir_shape_is_array(s) || ir_type_is_complex(s->type) || k->nopnd != 0)
        return shape_error(k, "iota cannot produce", s);
    if (s->rank > 0 && (d < 0 || d >= s->rank))
        return dev_kernel_error(k, IR_EINPUT, "iota_dimension=%lld out of range", (long long)d);
    DevValue *r;
    IrStatus st = new_result(k, false, &r);
    if (st != IR_OK)
        return st;
    size_t w = ir_type_size(s->type);
    int64_t outer = 1, inner = 1, len = s->rank > 0 ? s->dims[d] : 1;
    for (int32_t j = 0; j < s->rank; j++) {
        if (j < d)
            outer *= s->dims[j];
        else if (j > d)
            inner *= s->dims[j];
    }
    if (outer * len * inner > 0) {
        for (int64_t j = 0; j < len; j++) {
            uint8_t *row = r->data + j * inner * (int64_t)w;
            dev_store_i64(s->type, row, 0, j);
            fill(row, row, inner, w);
        }
        int64_t block = len * inner * (int64_t)w;
        for (int64_t o = 1; o < outer; o++)
            memcpy(r->data + o * block, r->data, (size_t)block);
    }
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* broadcast                                                           */
/* ------------------------------------------------------------------ */

/* Operand dim i becomes result dim dimensions[i]; the other result dims
 * repeat it (source stride 0). Example: f32[3] dimensions={1} to f32[2,3]
 * gives two copies of the row. */
IrStatus dev_k_broadcast_strides(const DevKernelArgs *k, int64_t *sstr)
{
    IrStatus st = expect_arrays(k, 1, 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    const IrI64List *dm = &k->ins->a.dimensions;
    if (os->type != rs->type || dm->n != os->rank)
        return shape_error(k, "broadcast: dimensions= does not match the operand", os);
    int64_t ost[IR_MAX_RANK];
    strides_of(os, ost);
    for (int32_t j = 0; j < rs->rank; j++)
        sstr[j] = 0;
    for (int32_t i = 0; i < os->rank; i++) {
        int64_t j = dm->v[i];
        if (j < 0 || j >= rs->rank || rs->dims[j] != os->dims[i] || (i > 0 && j <= dm->v[i - 1]))
            return dev_kernel_error(k, IR_EINPUT,
                                    "broadcast: operand dim %d does not map to a result dim of "
                                    "the same size", (int)i);
        sstr[j] = ost[i];
    }
    return IR_OK;
}

/* Elements [first, first + n) of the row-major result, a run along the
 * last dimension at a time: a run is a fill (the last dimension is
 * broadcast), a memcpy (it maps to the source's last dimension) or a
 * strided copy. Example: f32[2] {1,2} broadcast to [2,3] with
 * dimensions={0}: elements 2..4 are {1, 2, 2} (a fill of 1 to the end of
 * row 0, then a fill of 2). */
void dev_broadcast_range(const IrShape *rs, const int64_t *sstr, const uint8_t *src, int64_t first,
                         int64_t n, uint8_t *dst)
{
    size_t w = ir_type_size(rs->type);
    int32_t rank = rs->rank;
    if (n <= 0)
        return;
    if (rank == 0) {
        memcpy(dst, src, w);
        return;
    }
    int64_t idx[IR_MAX_RANK], rest = first, soff = 0;
    for (int32_t j = rank - 1; j >= 0; j--) {
        idx[j] = rest % rs->dims[j];
        rest /= rs->dims[j];
        soff += idx[j] * sstr[j];
    }
    int64_t last = rank - 1;
    while (n > 0) {
        int64_t run = rs->dims[last] - idx[last];
        if (run > n)
            run = n;
        if (sstr[last] == 0)
            fill(dst, src + soff * (int64_t)w, run, w);
        else
            copy_run(dst, 1, src + soff * (int64_t)w, sstr[last], run, w);
        dst += run * (int64_t)w;
        n -= run;
        /* Advance the index by `run` (to the start of the next row, or
         * within the row when n ran out). */
        idx[last] += run;
        soff += run * sstr[last];
        for (int32_t j = (int32_t)last; j > 0 && idx[j] == rs->dims[j]; j--) {
            soff += sstr[j - 1] - sstr[j] * rs->dims[j];
            idx[j] = 0;
            idx[j - 1]++;
        }
    }
}

IrStatus dev_k_broadcast(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    int64_t sstr[IR_MAX_RANK], rst[IR_MAX_RANK];
    IrStatus st = dev_k_broadcast_strides(k, sstr);
    if (st != IR_OK)
        return st;
    const IrShape *rs = &k->ins->shape;
    strides_of(rs, rst);
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    size_t w = ir_type_size(rs->type);
    if (k->opnd[0]->shape.rank == 0)
        fill(r->data, k->opnd[0]->data, ir_shape_elements(rs), w);
    else
        strided_copy(r->data, 0, rst, k->opnd[0]->data, 0, sstr, rs->rank, rs->dims, w);
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* transpose                                                           */
/* ------------------------------------------------------------------ */

#define TILE 32

#if defined(__SSE__)
/* 4-byte elements (f32, s32, u32 alike: the shuffles move bits, never
 * read them as numbers) in 4 x 4 blocks, four 16-byte loads and stores:
 * twice the element loop's rate on an 8 MiB f32 matrix (8.3 against 4.1
 * GB/s on the AMD machine; the weight gradients of an MLP's SGD step). */
static void transpose2d_4(uint32_t *r, const uint32_t *a, int64_t rows, int64_t cols)
{
    for (int64_t i0 = 0; i0 < rows; i0 += TILE)
        for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
            int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
            int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
            int64_t i4 = i0 + ((i1 - i0) & ~(int64_t)3), j4 = j0 + ((j1 - j0) & ~(int64_t)3);
            for (int64_t i = i0; i < i4; i += 4)
                for (int64_t j = j0; j < j4; j += 4) {
                    const float *s = (const float *)(a + i * cols + j);
                    __m128 x0 = _mm_loadu_ps(s), x1 = _mm_loadu_ps(s + cols);
                    __m128 x2 = _mm_loadu_ps(s + 2 * cols), x3 = _mm_loadu_ps(s + 3 * cols);
                    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
                    float *d = (float *)(r + j * rows + i);
                    _mm_storeu_ps(d, x0);
                    _mm_storeu_ps(d + rows, x1);
                    _mm_storeu_ps(d + 2 * rows, x2);
                    _mm_storeu_ps(d + 3 * rows, x3);
                }
            /* The tile's ragged edges: rows past i4 of the first j4
             * columns, then every row of the columns past j4. */
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = j < j4 ? i4 : i0; i < i1; i++)
                    r[j * rows + i] = a[i * cols + j];
        }
}
#endif

/* r[j][i] = a[i][j] for a of rows x cols, in TILE x TILE blocks so both
 * sides stay in cache. */
static void transpose2d(uint8_t *r, const uint8_t *a, int64_t rows, int64_t cols, size_t w)
{
#if defined(__SSE__)
    if (w == 4) {
        transpose2d_4((uint32_t *)r, (const uint32_t *)a, rows, cols);
        return;
    }
#endif
#define T2D(T)                                                                     \
    for (int64_t i0 = 0; i0 < rows; i0 += TILE)                                    \
        for (int64_t j0 = 0; j0 < cols; j0 += TILE) {                             \
            int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;                      \
            int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;                      \
            for (int64_t j = j0; j < j1; j++)                                      \
                for (int64_t i = i0; i < i1; i++)                                  \
                    ((T *)r)[j * rows + i] = ((const T *)a)[i * cols + j];         \
        }                                                                          \
    return
    switch (w) {
    case 1: T2D(uint8_t);
    case 2: T2D(uint16_t);
    case 4: T2D(uint32_t);
    case 8: T2D(uint64_t);
    default: {
        int64_t dims[2] = {cols, rows}, sstr[2] = {1, cols}, dstr[2] = {rows, 1};
        strided_copy(r, 0, dstr, a, 0, sstr, 2, dims, w);
    }
    }
#undef T2D
}

/* Result dim j is operand dim perm[j]. Adjacent result dims that are
 * adjacent operand dims in the same order merge; what remains as a plain
 * or batched 2-D swap is blocked, the rest goes through strided_copy. */
static void transpose_data(uint8_t *r, const uint8_t *a, const IrShape *os, const int64_t *perm,
                           size_t w)
{
    int32_t rank = os->rank;
    int64_t ost[IR_MAX_RANK], gd[IR_MAX_RANK], gp[IR_MAX_RANK];
    strides_of(os, ost);
    /* Groups of result dims: operand dim of the group's first dim, size. */
    int32_t ng = 0;
    for (int32_t j = 0; j < rank; j++) {
        if (ng > 0 && perm[j] == perm[j - 1] + 1) {
            gd[ng - 1] *= os->dims[perm[j]];
            continue;
        }
        gp[ng] = perm[j];
        gd[ng++] = os->dims[perm[j]];
    }
    if (ng == 2 && gp[0] > gp[1]) { /* [A,B] -> [B,A] */
        transpose2d(r, a, gd[1], gd[0], w);
        return;
    }
    if (ng == 3 && gp[0] < gp[2] && gp[2] < gp[1]) { /* [N,A,B] -> [N,B,A] */
        int64_t block = gd[1] * gd[2] * (int64_t)w;
        for (int64_t b = 0; b < gd[0]; b++)
            transpose2d(r + b * block, a + b * block, gd[2], gd[1], w);
        return;
    }
    int64_t dims[IR_MAX_RANK], sstr[IR_MAX_RANK], dstr[IR_MAX_RANK];
    int64_t st = 1;
    for (int32_t j = rank - 1; j >= 0; j--) {
        dims[j] = os->dims[perm[j]];
        sstr[j] = ost[perm[j]];
        dstr[j] = st;
        st *= dims[j];
    }
    strided_copy(r, 0, dstr, a, 0, sstr, rank, dims, w);
}

/* A permutation of 0..rank-1? */
static bool is_permutation(const IrI64List *p, int32_t rank)
{
    bool seen[IR_MAX_RANK] = {0};
    if (p->n != rank)
        return false;
    for (int32_t j = 0; j < rank; j++) {
        if (p->v[j] < 0 || p->v[j] >= rank || seen[p->v[j]])
            return false;
        seen[p->v[j]] = true;
    }
    return true;
}

/* The checks of a transpose (operand, permutation, result shape). */
static IrStatus transpose_check(const DevKernelArgs *k)
{
    IrStatus st = expect_arrays(k, 1, 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    const IrI64List *p = &k->ins->a.dimensions;
    if (os->type != rs->type || rs->rank != os->rank || !is_permutation(p, os->rank))
        return dev_kernel_error(k, IR_EINPUT, "transpose: dimensions= is not a permutation of "
                                              "the operand's dims");
    for (int32_t j = 0; j < rs->rank; j++)
        if (rs->dims[j] != os->dims[p->v[j]])
            return shape_error(k, "transpose: result shape does not match", rs);
    return IR_OK;
}

IrStatus dev_k_transpose_strides(const DevKernelArgs *k, int64_t *sstr)
{
    IrStatus st = transpose_check(k);
    if (st != IR_OK)
        return st;
    int64_t ost[IR_MAX_RANK];
    strides_of(&k->opnd[0]->shape, ost);
    for (int32_t j = 0; j < k->ins->shape.rank; j++)
        sstr[j] = ost[k->ins->a.dimensions.v[j]];
    return IR_OK;
}

IrStatus dev_k_transpose(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = transpose_check(k);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape;
    const IrI64List *p = &k->ins->a.dimensions;
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    if (r->nbytes > 0)
        transpose_data(r->data, k->opnd[0]->data, os, p->v, ir_type_size(os->type));
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* reshape, bitcast                                                    */
/* ------------------------------------------------------------------ */

/* A layout other than the default {rank-1, ..., 1, 0}? */
static bool nondefault_layout(const IrShape *s)
{
    if (!s->has_layout || !s->minor_to_major)
        return false;
    for (int32_t j = 0; j < s->rank; j++)
        if (s->minor_to_major[j] != s->rank - 1 - j)
            return true;
    return false;
}

/* Physical (memory) order of logical data: the transpose by the layout's
 * major-to-minor order. Writes dims of the physical array to pdims. */
static void major_to_minor(const IrShape *s, int64_t *perm, int64_t *pdims)
{
    for (int32_t j = 0; j < s->rank; j++) {
        perm[j] = s->has_layout && s->minor_to_major ? s->minor_to_major[s->rank - 1 - j] : j;
        pdims[j] = s->dims[perm[j]];
    }
}

/* The layout a bitcast reads its operand in: the one the operand
 * instruction declares. A value's own shape may carry another (a copy
 * that changes the layout is a reference to its operand's value:
 * `t = f32[4,2]{0,1} transpose(p)`, `c = f32[4,2]{1,0} copy(t)`, then a
 * bitcast of c reads c's {1,0}, not t's {0,1}). */
static const IrShape *bitcast_operand_shape(const DevKernelArgs *k)
{
    const IrShape *os = &k->opnd[0]->shape;
    if (k->c && k->ins->nopnd == 1 && k->ins->opnd[0] >= 0 && k->ins->opnd[0] < k->c->ninstr) {
        const IrShape *decl = &k->c->instr[k->ins->opnd[0]].shape;
        if (ir_shape_equal(decl, os))
            return decl;
    }
    return os;
}

/* bitcast between layouts: operand logical -> its physical bytes, read
 * those as the result's physical array -> result logical. Example:
 * f32[2,3]{1,0} bitcast to f32[3,2]{0,1} is a transpose. */
static IrStatus bitcast_layouts(const DevKernelArgs *k, DevValue *r)
{
    const IrShape *os = bitcast_operand_shape(k), *rs = &k->ins->shape;
    size_t w = ir_type_size(os->type);
    uint8_t *phys = ts_malloc((size_t)r->nbytes);
    if (!phys)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory");
    int64_t perm[IR_MAX_RANK], pdims[IR_MAX_RANK], inv[IR_MAX_RANK];
    major_to_minor(os, perm, pdims);
    transpose_data(phys, k->opnd[0]->data, os, perm, w);
    /* Result physical dims pdims[j] = rs->dims[perm[j]]; logical dim perm[j]
     * is physical dim j: transpose physical by the inverse permutation. */
    major_to_minor(rs, perm, pdims);
    for (int32_t j = 0; j < rs->rank; j++)
        inv[perm[j]] = j;
    IrShape ps = {.type = rs->type, .rank = rs->rank, .dims = pdims};
    transpose_data(r->data, phys, &ps, inv, w);
    ts_free(phys);
    return IR_OK;
}

/* Row-major data: reshape is a copy of the bytes (exec.c reuses the buffer
 * when the operand dies here). bitcast is the same unless layouts say the
 * bytes are in another order. */
IrStatus dev_k_reshape(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 1, 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    bool bitcast = k->ins->op == OP_BITCAST;
    if ((!bitcast && os->type != rs->type) || ir_shape_bytes(os) != ir_shape_bytes(rs) ||
        ir_type_size(os->type) != ir_type_size(rs->type))
        return shape_error(k, "cannot reshape to", rs);
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    if (bitcast && (nondefault_layout(bitcast_operand_shape(k)) || nondefault_layout(rs)) && r->nbytes > 0) {
        if ((st = bitcast_layouts(k, r)) != IR_OK) {
            dev_value_unref(r);
            return st;
        }
    } else if (r->nbytes > 0) {
        memcpy(r->data, k->opnd[0]->data, (size_t)r->nbytes);
    }
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* slice, reverse                                                      */
/* ------------------------------------------------------------------ */

/* Result dim j takes operand elements start, start+stride, ... < limit:
 * ceil((limit - start) / stride) of them. Example: [0:5:2] of 5 -> 0,2,4. */
IrStatus dev_k_slice(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 1, 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    const IrAttrs *a = &k->ins->a;
    if (os->type != rs->type || rs->rank != os->rank || a->x->slice_start.n != os->rank ||
        a->x->slice_limit.n != os->rank || (a->x->slice_stride.n != 0 && a->x->slice_stride.n != os->rank))
        return dev_kernel_error(k, IR_EINPUT, "slice={...} does not match the operand's rank");
    int64_t ost[IR_MAX_RANK], sstr[IR_MAX_RANK], rst[IR_MAX_RANK], off = 0;
    strides_of(os, ost);
    strides_of(rs, rst);
    for (int32_t j = 0; j < os->rank; j++) {
        int64_t s0 = a->x->slice_start.v[j], lim = a->x->slice_limit.v[j];
        int64_t by = a->x->slice_stride.n ? a->x->slice_stride.v[j] : 1;
        if (s0 < 0 || lim < s0 || lim > os->dims[j] || by < 1 ||
            rs->dims[j] != (lim == s0 ? 0 : (lim - s0 - 1) / by + 1))
            return dev_kernel_error(k, IR_EINPUT, "slice dim %d [%lld:%lld:%lld] does not fit "
                                    "the operand or the result", (int)j, (long long)s0,
                                    (long long)lim, (long long)by);
        off += s0 * ost[j];
        sstr[j] = rs->dims[j] > 1 ? by * ost[j] : 0; /* a stride near INT64_MAX takes one element */
    }
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    if (r->nbytes > 0)
        strided_copy(r->data, 0, rst, k->opnd[0]->data, off, sstr, rs->rank, rs->dims,
                     ir_type_size(rs->type));
    *out = r;
    return IR_OK;
}

/* Reversed dims read from the last element backwards (negative stride). */
IrStatus dev_k_reverse(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 1, 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    if (!ir_shape_equal(os, rs))
        return shape_error(k, "reverse changes the shape to", rs);
    int64_t ost[IR_MAX_RANK], sstr[IR_MAX_RANK], off = 0;
    strides_of(os, ost);
    memcpy(sstr, ost, (size_t)os->rank * sizeof *sstr);
    bool seen[IR_MAX_RANK] = {0};
    for (int32_t i = 0; i < k->ins->a.dimensions.n; i++) {
        int64_t j = k->ins->a.dimensions.v[i];
        if (j < 0 || j >= os->rank || seen[j])
            return dev_kernel_error(k, IR_EINPUT, "reverse dimension %lld out of range",
                                    (long long)j);
        seen[j] = true;
        if (os->dims[j] > 0)
            off += (os->dims[j] - 1) * ost[j];
        sstr[j] = -ost[j];
    }
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    if (r->nbytes > 0)
        strided_copy(r->data, 0, ost, k->opnd[0]->data, off, sstr, rs->rank, rs->dims,
                     ir_type_size(rs->type));
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* dynamic-slice, dynamic-update-slice                                 */
/* ------------------------------------------------------------------ */

/* Start indices: one integer scalar per dim (operands from `first`), or
 * the older form, one integer vector. Each is clamped into [0, dim - size]
 * as XLA does, so the window always lies inside the operand. Example: dim
 * 5, size 2, start 7 -> 3; start -1 -> 0. */
static IrStatus start_indices(const DevKernelArgs *k, int32_t first, const IrShape *os,
                              const int64_t *size, int64_t *start)
{
    int32_t rank = os->rank;
    int32_t nidx = k->nopnd - first;
    bool vector_form = nidx == 1 && k->opnd[first]->shape.rank == 1;
    if (!vector_form && nidx != rank)
        return dev_kernel_error(k, IR_EINPUT, "%d start indices for a rank-%d operand",
                                (int)nidx, (int)rank);
    for (int32_t j = 0; j < rank; j++) {
        const DevValue *iv = vector_form ? k->opnd[first] : k->opnd[first + j];
        int64_t at = vector_form ? j : 0;
        IrType t = iv->shape.type;
        bool shape_ok = vector_form ? (iv->shape.rank == 1 && iv->shape.dims[0] == rank)
                                    : iv->shape.rank == 0;
        if (!ir_type_is_int(t) || !shape_ok)
            return shape_error(k, "start indices must be integer scalars, not", &iv->shape);
        int64_t v;
        if (ir_type_is_unsigned_int(t)) {
            uint64_t u = dev_load_u64(t, iv->data, at);
            v = u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
        } else {
            v = dev_load_i64(t, iv->data, at);
        }
        int64_t hi = os->dims[j] - size[j];
        start[j] = v < 0 ? 0 : v > hi ? hi : v;
    }
    return IR_OK;
}

IrStatus dev_k_dynamic_slice(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 1, IR_MAX_RANK + 1);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *rs = &k->ins->shape;
    const IrI64List *sz = &k->ins->a.x->dynamic_slice_sizes;
    if (os->type != rs->type || rs->rank != os->rank || (sz->n != 0 && sz->n != os->rank))
        return shape_error(k, "dynamic-slice result does not match its operand", rs);
    int64_t start[IR_MAX_RANK], ost[IR_MAX_RANK], rst[IR_MAX_RANK], off = 0;
    for (int32_t j = 0; j < os->rank; j++)
        if ((sz->n && sz->v[j] != rs->dims[j]) || rs->dims[j] > os->dims[j])
            return dev_kernel_error(k, IR_EINPUT, "dynamic_slice_sizes dim %d does not fit",
                                    (int)j);
    if ((st = start_indices(k, 1, os, rs->dims, start)) != IR_OK)
        return st;
    strides_of(os, ost);
    strides_of(rs, rst);
    for (int32_t j = 0; j < os->rank; j++)
        off += start[j] * ost[j];
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    if (r->nbytes > 0)
        strided_copy(r->data, 0, rst, k->opnd[0]->data, off, ost, rs->rank, rs->dims,
                     ir_type_size(rs->type));
    *out = r;
    return IR_OK;
}

IrStatus dev_k_dynamic_update_slice(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 2, IR_MAX_RANK + 2);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *us = &k->opnd[1]->shape, *rs = &k->ins->shape;
    if (!ir_shape_equal(os, rs) || us->type != os->type || us->rank != os->rank)
        return shape_error(k, "dynamic-update-slice update does not match", us);
    for (int32_t j = 0; j < os->rank; j++)
        if (us->dims[j] > os->dims[j])
            return shape_error(k, "dynamic-update-slice update is larger than the operand", us);
    int64_t start[IR_MAX_RANK], ost[IR_MAX_RANK], ust[IR_MAX_RANK], off = 0;
    if ((st = start_indices(k, 2, os, us->dims, start)) != IR_OK)
        return st;
    strides_of(os, ost);
    strides_of(us, ust);
    for (int32_t j = 0; j < os->rank; j++)
        off += start[j] * ost[j];
    DevValue *r;
    if (dev_value_sole(k->opnd[0])) {
        /* The executor lets an operand be sole only at the operand's last use
         * (exec.c pins operands used later): update it in place. */
        r = dev_value_ref(k->opnd[0]);
    } else {
        if ((st = new_result(k, false, &r)) != IR_OK)
            return st;
        if (r->nbytes > 0)
            memcpy(r->data, k->opnd[0]->data, (size_t)r->nbytes);
    }
    if (r->nbytes > 0)
        strided_copy(r->data, off, ost, k->opnd[1]->data, 0, ust, us->rank, us->dims,
                     ir_type_size(rs->type));
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* pad                                                                 */
/* ------------------------------------------------------------------ */

/* Result dim = lo + hi + dim + (dim - 1) * interior (lo + hi for dim 0).
 * Operand element i lands at lo + i * (interior + 1); negative lo/hi cut.
 * Example: {1,2,3} padding=-1_1_1 with 0: 5 elements, 1 would land at -1
 * (cut), 2 at 1, 3 at 3: {0,2,0,3,0}. */
IrStatus dev_k_pad(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 2, 2);
    if (st != IR_OK)
        return st;
    const IrShape *os = &k->opnd[0]->shape, *ps = &k->opnd[1]->shape, *rs = &k->ins->shape;
    const IrAttrs *a = &k->ins->a;
    if (os->type != rs->type || ps->type != rs->type || ps->rank != 0 || rs->rank != os->rank ||
        a->x->pad_lo.n != os->rank || a->x->pad_hi.n != os->rank ||
        (a->x->pad_interior.n != 0 && a->x->pad_interior.n != os->rank))
        return dev_kernel_error(k, IR_EINPUT, "padding= does not match the operand");
    int64_t ost[IR_MAX_RANK], rst[IR_MAX_RANK], dims[IR_MAX_RANK], sstr[IR_MAX_RANK];
    int64_t dstr[IR_MAX_RANK], soff = 0, doff = 0;
    strides_of(os, ost);
    strides_of(rs, rst);
    bool empty = false;
    for (int32_t j = 0; j < os->rank; j++) {
        int64_t lo = a->x->pad_lo.v[j], hi = a->x->pad_hi.v[j];
        int64_t in = a->x->pad_interior.n ? a->x->pad_interior.v[j] : 0, d = os->dims[j];
        int64_t want = lo + hi + d + (d > 0 ? (d - 1) * in : 0);
        if (in < 0 || want != rs->dims[j])
            return dev_kernel_error(k, IR_EINPUT, "padding dim %d gives %lld, result has %lld",
                                    (int)j, (long long)want, (long long)rs->dims[j]);
        int64_t step = in + 1, rd = rs->dims[j];
        int64_t i0 = lo < 0 ? (-lo + step - 1) / step : 0;
        int64_t i1 = rd - 1 - lo < 0 ? 0 : (rd - 1 - lo) / step + 1;
        if (i1 > d)
            i1 = d;
        dims[j] = i1 > i0 ? i1 - i0 : 0;
        empty |= dims[j] == 0;
        soff += i0 * ost[j];
        doff += (lo + i0 * step) * rst[j];
        sstr[j] = ost[j];
        dstr[j] = step * rst[j];
    }
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    size_t w = ir_type_size(rs->type);
    fill(r->data, k->opnd[1]->data, ir_shape_elements(rs), w);
    if (!empty && r->nbytes > 0)
        strided_copy(r->data, doff, dstr, k->opnd[0]->data, soff, sstr, os->rank, dims, w);
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* concatenate                                                         */
/* ------------------------------------------------------------------ */

/* Along dim d: for each index of the dims before d, the operands' blocks
 * (their dim d times the dims after it) follow each other. */
IrStatus dev_k_concatenate(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    IrStatus st = expect_arrays(k, 1, INT32_MAX);
    if (st != IR_OK)
        return st;
    const IrShape *rs = &k->ins->shape;
    int64_t d = k->ins->a.dimensions.n == 1 ? k->ins->a.dimensions.v[0] : -1;
    if (d < 0 || d >= rs->rank)
        return dev_kernel_error(k, IR_EINPUT, "concatenate needs one dimension in range");
    int64_t total = 0, outer = 1, inner = 1;
    for (int32_t j = 0; j < rs->rank; j++) {
        if (j < d)
            outer *= rs->dims[j];
        else if (j > d)
            inner *= rs->dims[j];
    }
    for (int32_t i = 0; i < k->nopnd; i++) {
        const IrShape *s = &k->opnd[i]->shape;
        bool ok = s->type == rs->type && s->rank == rs->rank;
        for (int32_t j = 0; ok && j < rs->rank; j++)
            ok = j == d || s->dims[j] == rs->dims[j];
        if (!ok)
            return shape_error(k, "concatenate operand does not match the result", s);
        total += s->dims[d];
    }
    if (total != rs->dims[d])
        return dev_kernel_error(k, IR_EINPUT, "concatenated dims sum to %lld, result has %lld",
                                (long long)total, (long long)rs->dims[d]);
    DevValue *r;
    if ((st = new_result(k, false, &r)) != IR_OK)
        return st;
    size_t w = ir_type_size(rs->type);
    int64_t rrow = rs->dims[d] * inner * (int64_t)w, at = 0;
    for (int32_t i = 0; i < k->nopnd && r->nbytes > 0; i++) {
        int64_t blk = k->opnd[i]->shape.dims[d] * inner * (int64_t)w;
        for (int64_t o = 0; o < outer && blk > 0; o++)
            memcpy(r->data + o * rrow + at, k->opnd[i]->data + o * blk, (size_t)blk);
        at += blk;
    }
    *out = r;
    return IR_OK;
}
