/*
 * packed.c: f32 weights packed once for the GEMM, kept across a run's
 * steps (issue 34, mlp45).
 *
 * oneDNN's GEMMs pack their B operand into a blocked layout at every call
 * (dnnl_sgemm) or can be given it packed (the matmul primitive with
 * format_tag_any weights, blas_sgemm.c's dev_sgemm_pack). Where a dot's B
 * is a parameter of the entry computation that is not donated, the same
 * buffer comes back unchanged every step of `tessel run --steps N` (the
 * runtime keeps an unaliased argument: runtime/inputs.c), so its packed
 * form made at the first step serves every later one. The runtime makes
 * a DevPacked for a device's steps (DevExecOptions.packed) and frees it
 * after them.
 *
 * Why a kept form stays true: an entry holds a reference to the value
 * whose buffer it packed, so the buffer is neither freed (and its address
 * handed to another value) nor ever the sole reference a kernel may write
 * into (device.h, "Kernels"); a donated argument, which the executor may
 * hand to an output, is never packed (k_dot.c asks). A value whose buffer
 * moved is a new key.
 *
 * Only where the products run in oneDNN at one thread (the probe's choice,
 * held against the program's calls, or --sgemm onednn), for products of
 * PACK_MIN_MACS multiply-adds or more with at most PACK_MAX_M rows and a
 * sum over PACK_MIN_K or more: there the packed matmul ran 2-5 % faster
 * than dnnl_sgemm (thread CPU time, medians of 15 alternated calls, one
 * core: 512 x 1024 x 2048 110.1 / 109.5 / 109.7 against 105.9 / 106.7 /
 * 107.2 GFLOP/s, 512 x 2048 x 1024 110.9 / 110.9 / 111.4 against 104.5 /
 * 105.4 / 106.8, B transposed 110.5 / 109.4 / 109.8 against the plain
 * matmul's 107.6 / 106.1 / 106.8, 256 x 1024 x 2048 109.0 against 104.3),
 * and elsewhere even or slower (1024 x 768 x 384 111.7 against 113.8,
 * 512 x 768 x 2304 110.2 against 112.2, 1024 x 1536 x 768 110.7 against
 * 111.7; BENCHMARKS.md, "Weights packed once"), and up to PACK_MAX_BYTES of packed
 * buffers a device (beyond the device's counted memory: `--stats` says how
 * much). Under `--sgemm amx-bf16x3` the kept form is B's two bf16 copies
 * in the tiles' layout (sgemm_amx.c), for products of PACK_MIN_MACS or
 * more that the tiles take (16 rows or more, sums of 128 or more): splitting B was 2.3 of the 10 ms of a 512 x 1024 x
 * 2048 product (BENCHMARKS.md, "AMX"). Where the products run in tessel's
 * own kernel (the probe's choice, for the product's shape at one thread,
 * or `--sgemm avx512`), the kept form is
 * op(B) in its panels (sgemm_avx512.c), for products of PACK_MIN_MACS or
 * more whatever their rows and sums: packing B was 7 % of the kernel's
 * time on 512 x 1024 x 2048 (BENCHMARKS.md, "tessel's own f32 GEMM").
 * Anything that fails leaves the product to DevBlas.sgemm.
 */
#include "blas.h"

#include <stdlib.h>

enum { PACK_MAX_ENTRIES = 64 };
#define PACK_MIN_MACS ((int64_t)256 * 256 * 256)
#define PACK_MAX_M 512
#define PACK_MIN_K 1024
#define PACK_MAX_BYTES ((size_t)256 << 20)

typedef struct PackEntry {
    DevValue *v;          /* a reference: the buffer stays this value's, read-only */
    const float *b;       /* where in it B starts */
    bool tb;
    int64_t m, n, k, lda, ldb, ldc;
    int lib;              /* kept for DEV_SGEMM_ONEDNN, _AMX_BF16X3 or _AVX512 */
    DevSgemmPacked *p;    /* oneDNN's; NULL: packing failed, not tried again */
    DevSgemmAmxB *a;      /* AMX's; NULL: likewise */
    DevSgemmAvx512B *x;   /* tessel's kernel's; NULL: likewise */
} PackEntry;

struct DevPacked {
    int32_t n;
    size_t bytes;
    int64_t runs;         /* products run packed */
    PackEntry e[PACK_MAX_ENTRIES];
};

DevPacked *dev_packed_new(void)
{
    return ts_calloc(1, sizeof(DevPacked));
}

void dev_packed_free(DevPacked *pc)
{
    for (int32_t i = 0; pc && i < pc->n; i++) {
        dev_sgemm_packed_free(pc->e[i].p);
        dev_sgemm_amx_b_free(pc->e[i].a);
        dev_sgemm_avx512_b_free(pc->e[i].x);
        dev_value_unref(pc->e[i].v);
    }
    ts_free(pc);
}

void dev_packed_stats(const DevPacked *pc, int32_t *weights, size_t *bytes, int64_t *runs)
{
    *weights = 0;
    for (int32_t i = 0; pc && i < pc->n; i++)
        *weights += pc->e[i].p != NULL || pc->e[i].a != NULL || pc->e[i].x != NULL;
    *bytes = pc ? pc->bytes : 0;
    *runs = pc ? pc->runs : 0;
}

bool dev_packed_keeps(int lib, int64_t m, int64_t n, int64_t k)
{
    if (m * n * k < PACK_MIN_MACS)
        return false;
    if (lib == DEV_SGEMM_ONEDNN)
        return m <= PACK_MAX_M && k >= PACK_MIN_K && dev_blas_sgemm_thread_count() == 1;
    return lib == DEV_SGEMM_AMX_BF16X3 || lib == DEV_SGEMM_AVX512;
}

bool dev_packed_sgemm(DevPacked *pc, DevValue *v, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, bool tb, int64_t ldb, float *c, int64_t ldc)
{
    return dev_packed_sgemm_then(pc, v, m, n, k, a, lda, b, tb, ldb, c, ldc, NULL);
}

bool dev_packed_sgemm_then(DevPacked *pc, DevValue *v, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b, bool tb, int64_t ldb, float *c, int64_t ldc, const DevGemmThen *then)
{
    if (!pc || !v || m * n * k < PACK_MIN_MACS)
        return false;
    /* the library DevBlas.sgemm would give this product (under the probe
     * at one thread, its shape's): a shape has one library's bits */
    int lib = dev_blas_sgemm_shape_lib(false, tb, m, n, k, a, lda, b, ldb, true);
    if (!dev_packed_keeps(lib, m, n, k))
        return false;
    PackEntry *e = NULL;
    for (int32_t i = 0; i < pc->n && !e; i++) {
        PackEntry *x = &pc->e[i];
        if (x->v == v && x->b == b && x->tb == tb && x->m == m && x->n == n && x->k == k && x->lda == lda &&
            x->ldb == ldb && x->ldc == ldc && x->lib == lib)
            e = x;
    }
    if (!e) {
        if (pc->n == PACK_MAX_ENTRIES || pc->bytes + (size_t)(k * n) * sizeof(float) > PACK_MAX_BYTES)
            return false;
        e = &pc->e[pc->n++];
        *e = (PackEntry){.v = dev_value_ref(v), .b = b, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                         .ldb = ldb, .ldc = ldc, .lib = lib,
                         .p = lib == DEV_SGEMM_ONEDNN ? dev_sgemm_pack(m, n, k, lda, b, tb, ldb, ldc) : NULL,
                         .a = lib == DEV_SGEMM_AMX_BF16X3 ? dev_sgemm_amx_pack_b(n, k, b, tb, ldb) : NULL,
                         .x = lib == DEV_SGEMM_AVX512 ? dev_sgemm_avx512_pack_b(n, k, b, tb, ldb) : NULL};
        pc->bytes += (e->p ? dev_sgemm_packed_bytes(e->p) : 0) + dev_sgemm_amx_b_bytes(e->a) + dev_sgemm_avx512_b_bytes(e->x);
    }
    bool ran = lib == DEV_SGEMM_ONEDNN       ? e->p && dev_sgemm_packed_run(e->p, a, c)
               : lib == DEV_SGEMM_AMX_BF16X3 ? e->a && dev_sgemm_amx_run_b(e->a, m, a, lda, c, ldc)
                                             : e->x && dev_sgemm_avx512_run_b_then(e->x, m, a, lda, c, ldc, then);
    if (!ran)
        return false;
    if (then && lib != DEV_SGEMM_AVX512) /* the other libraries' C whole, after */
        then->fn(then->ctx, c, 0, m, 0, n, ldc);
    pc->runs++;
    return true;
}
