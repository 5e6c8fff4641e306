/*
 * blas.h: OpenBLAS's entry points as device/ calls them (blas.c loads the
 * library on first use; blas_sgemm.c, the f32 GEMM of BLIS or oneDNN;
 * blas_choice.c, which of them DevBlas.sgemm calls; blas_watch.c, the
 * check of that choice on the program's calls; blas_shapes.c, the choice
 * per product shape; blas_small.c, the small products' library), for the files that call BLAS or LAPACK: contract.c,
 * k_linalg.c, k_qr.c, k_lu.c, k_eigh_svd.c, devices.c (the thread count). Private to device/
 * (and its tests): it includes cblas.h, whose macros other files need not see.
 */
#ifndef TESSEL_DEVICE_BLAS_H
#define TESSEL_DEVICE_BLAS_H

#include "device.h"

#include <cblas.h>

/* blas.c: OpenBLAS's entry points, from the library loaded on first use
 * (not linked: its constructor starts a thread pool that spins, which
 * processes that never execute must not pay). dev_blas: the table, or NULL
 * when the library cannot be loaded (dev_blas_error says why). Thread safe;
 * loads once per process. LAPACK's Fortran routines: 32-bit integers
 * (OpenBLAS is built without INTERFACE64); potrf takes the hidden length
 * of the character argument that gfortran passes. */
typedef struct DevBlas {
    __typeof__(cblas_sgemm) *sgemm;
    __typeof__(cblas_dgemm) *dgemm;
    __typeof__(cblas_strsm) *strsm;
    __typeof__(cblas_dtrsm) *dtrsm;
    __typeof__(cblas_ctrsm) *ctrsm;
    __typeof__(cblas_ztrsm) *ztrsm;
    void (*spotrf)(const char *uplo, const int *n, float *a, const int *lda, int *info, size_t len);
    void (*dpotrf)(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t len);
    void (*cpotrf)(const char *uplo, const int *n, float _Complex *a, const int *lda, int *info, size_t len);
    void (*zpotrf)(const char *uplo, const int *n, double _Complex *a, const int *lda, int *info, size_t len);
    /* geqrf and orgqr/ungqr (k_qr.c) */
    void (*sgeqrf)(const int *m, const int *n, float *a, const int *lda, float *tau, float *work,
                   const int *lwork, int *info);
    void (*dgeqrf)(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
                   const int *lwork, int *info);
    void (*cgeqrf)(const int *m, const int *n, float _Complex *a, const int *lda, float _Complex *tau,
                   float _Complex *work, const int *lwork, int *info);
    void (*zgeqrf)(const int *m, const int *n, double _Complex *a, const int *lda, double _Complex *tau,
                   double _Complex *work, const int *lwork, int *info);
    void (*sorgqr)(const int *m, const int *n, const int *k, float *a, const int *lda, const float *tau,
                   float *work, const int *lwork, int *info);
    void (*dorgqr)(const int *m, const int *n, const int *k, double *a, const int *lda,
                   const double *tau, double *work, const int *lwork, int *info);
    void (*cungqr)(const int *m, const int *n, const int *k, float _Complex *a, const int *lda,
                   const float _Complex *tau, float _Complex *work, const int *lwork, int *info);
    void (*zungqr)(const int *m, const int *n, const int *k, double _Complex *a, const int *lda,
                   const double _Complex *tau, double _Complex *work, const int *lwork, int *info);
    /* getrf (k_lu.c) */
    void (*sgetrf)(const int *m, const int *n, float *a, const int *lda, int *ipiv, int *info);
    void (*dgetrf)(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
    void (*cgetrf)(const int *m, const int *n, float _Complex *a, const int *lda, int *ipiv, int *info);
    void (*zgetrf)(const int *m, const int *n, double _Complex *a, const int *lda, int *ipiv, int *info);
    /* syevd/heevd, gesdd and gesvd (k_eigh_svd.c); the trailing size_t are
     * gfortran's hidden lengths of the character arguments (1 each). */
    void (*ssyevd)(const char *jobz, const char *uplo, const int *n, float *a, const int *lda, float *w,
                   float *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t, size_t);
    void (*dsyevd)(const char *jobz, const char *uplo, const int *n, double *a, const int *lda, double *w,
                   double *work, const int *lwork, int *iwork, const int *liwork, int *info, size_t, size_t);
    void (*cheevd)(const char *jobz, const char *uplo, const int *n, float _Complex *a, const int *lda, float *w,
                   float _Complex *work, const int *lwork, float *rwork, const int *lrwork, int *iwork,
                   const int *liwork, int *info, size_t, size_t);
    void (*zheevd)(const char *jobz, const char *uplo, const int *n, double _Complex *a, const int *lda,
                   double *w, double _Complex *work, const int *lwork, double *rwork, const int *lrwork,
                   int *iwork, const int *liwork, int *info, size_t, size_t);
    void (*sgesdd)(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s, float *u,
                   const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork, int *iwork,
                   int *info, size_t);
    void (*dgesdd)(const char *jobz, const int *m, const int *n, double *a, const int *lda, double *s, double *u,
                   const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork, int *iwork,
                   int *info, size_t);
    void (*cgesdd)(const char *jobz, const int *m, const int *n, float _Complex *a, const int *lda, float *s,
                   float _Complex *u, const int *ldu, float _Complex *vt, const int *ldvt, float _Complex *work,
                   const int *lwork, float *rwork, int *iwork, int *info, size_t);
    void (*zgesdd)(const char *jobz, const int *m, const int *n, double _Complex *a, const int *lda, double *s,
                   double _Complex *u, const int *ldu, double _Complex *vt, const int *ldvt,
                   double _Complex *work, const int *lwork, double *rwork, int *iwork, int *info, size_t);
    void (*sgesvd)(const char *jobu, const char *jobvt, const int *m, const int *n, float *a, const int *lda,
                   float *s, float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
                   int *info, size_t, size_t);
    void (*dgesvd)(const char *jobu, const char *jobvt, const int *m, const int *n, double *a, const int *lda,
                   double *s, double *u, const int *ldu, double *vt, const int *ldvt, double *work,
                   const int *lwork, int *info, size_t, size_t);
    void (*cgesvd)(const char *jobu, const char *jobvt, const int *m, const int *n, float _Complex *a,
                   const int *lda, float *s, float _Complex *u, const int *ldu, float _Complex *vt,
                   const int *ldvt, float _Complex *work, const int *lwork, float *rwork, int *info, size_t,
                   size_t);
    void (*zgesvd)(const char *jobu, const char *jobvt, const int *m, const int *n, double _Complex *a,
                   const int *lda, double *s, double _Complex *u, const int *ldu, double _Complex *vt,
                   const int *ldvt, double _Complex *work, const int *lwork, double *rwork, int *info, size_t,
                   size_t);
    /* geev (k_geev.c) */
    void (*sgeev)(const char *jobvl, const char *jobvr, const int *n, float *a, const int *lda, float *wr, float *wi,
                  float *vl, const int *ldvl, float *vr, const int *ldvr, float *work, const int *lwork, int *info,
                  size_t, size_t);
    void (*dgeev)(const char *jobvl, const char *jobvr, const int *n, double *a, const int *lda, double *wr,
                  double *wi, double *vl, const int *ldvl, double *vr, const int *ldvr, double *work,
                  const int *lwork, int *info, size_t, size_t);
    void (*cgeev)(const char *jobvl, const char *jobvr, const int *n, float _Complex *a, const int *lda,
                  float _Complex *w, float _Complex *vl, const int *ldvl, float _Complex *vr, const int *ldvr,
                  float _Complex *work, const int *lwork, float *rwork, int *info, size_t, size_t);
    void (*zgeev)(const char *jobvl, const char *jobvr, const int *n, double _Complex *a, const int *lda,
                  double _Complex *w, double _Complex *vl, const int *ldvl, double _Complex *vr, const int *ldvr,
                  double _Complex *work, const int *lwork, double *rwork, int *info, size_t, size_t);
    __typeof__(openblas_get_num_threads) *get_num_threads;
    __typeof__(openblas_set_num_threads) *set_num_threads;
} DevBlas;
const DevBlas *dev_blas(void);
/* k_qr.c, for the LAPACK kernels (k_qr.c, k_lu.c, k_eigh_svd.c, k_geev.c): the matrices of an
 * operand [..., m, n] (`what` names it in errors): a type LAPACK takes
 * (f32, f64, c64, c128), sizes that fit its int, the batch count, and
 * LAPACK itself; and dst (cols x rows) = src (rows x cols) transposed,
 * both row-major: the column-major view LAPACK reads, and back. */
typedef struct DevLapackDims {
    const DevBlas *bl;
    IrType type;
    size_t esz;
    int m, n;
    int p;          /* min(m, n) */
    int64_t batch;
} DevLapackDims;
IrStatus dev_lapack_dims(const DevKernelArgs *k, const IrShape *s, const char *what, DevLapackDims *q);
/* The same for a kernel of one operand (Qr, getrf), refusing any other
 * count by the target's name. */
IrStatus dev_lapack_one(const DevKernelArgs *k, DevLapackDims *q);
void dev_lapack_transpose(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t cols, size_t esz);
/* t's real type (f32 for c64, f64 for c128, else t); a buffer of elements
 * cells of esz bytes (at least one; NULL on overflow or OOM, ts_free it);
 * n elements of type t at p set to NaN (both parts of a complex one). */
IrType dev_lapack_real(IrType t);
void *dev_lapack_cells(int64_t elements, size_t esz);
void dev_lapack_nan(uint8_t *p, int64_t n, IrType t);
/* blas_sgemm.c: the f32 GEMM of `lib` ("blis" or "onednn") behind
 * cblas_sgemm's signature, the library loaded on the first call (once);
 * NULL, with *why saying why, when it cannot be loaded or lib is unknown.
 * It runs as many threads as dev_blas_sgemm_thread_count says (the
 * calling thread alone at 1, else an OpenMP team). Thread safe.
 * dev_blas_sgemm_threads: record the BLAS thread count a device uses
 * (max(1, n)): the devices' (dev_blas_set_threads), or with unless_told
 * OpenBLAS's at its load, which a process that makes no devices keeps;
 * dev_blas_sgemm_thread_count: the count recorded (the probe measures at
 * it). */
typedef __typeof__(cblas_sgemm) SgemmFn;
SgemmFn *dev_blas_sgemm_from(const char *lib, const char **why);
void dev_blas_sgemm_threads(int n, bool unless_told);
int dev_blas_sgemm_thread_count(void);
/* blas_sgemm.c: C[m,n] = A[m,k] op(B) (row-major, alpha 1, beta 0, the
 * calling thread alone) in oneDNN's matmul with B packed once into the
 * layout its kernel reads (device/packed.c keeps it while B's buffer is
 * unchanged). dev_sgemm_pack: B (k x n, or n x k when tb; row stride
 * ldb) packed for products of
 * that shape with A's row stride lda and C's ldc; NULL where oneDNN 2.x
 * or its matmul cannot be had, or any call fails. dev_sgemm_packed_run:
 * the product (of the shape packed for),
 * false where oneDNN failed (the caller computes it otherwise). _bytes:
 * the packed buffer's size. Free with dev_sgemm_packed_free (NULL: no-op).
 * One thread uses a DevSgemmPacked at a time. */
typedef struct DevSgemmPacked DevSgemmPacked;
DevSgemmPacked *dev_sgemm_pack(int64_t m, int64_t n, int64_t k, int64_t lda, const float *b, bool tb,
                               int64_t ldb, int64_t ldc);
bool dev_sgemm_packed_run(const DevSgemmPacked *p, const float *a, float *c);
size_t dev_sgemm_packed_bytes(const DevSgemmPacked *p);
void dev_sgemm_packed_free(DevSgemmPacked *p);
/* sgemm_amx.c: the f32 GEMM as three bf16 products on AMX tiles
 * (bf16x3: within a few f32 roundings of the f32 product, not its bits),
 * on the calling thread, behind cblas_sgemm's signature; products thinner
 * than a tile, summing fewer than 128 terms or under 2^18 multiply-adds
 * go to `fallback`. dev_sgemm_amx:
 * the function, or NULL with *why where the CPU has no AMX bf16 tiles (or
 * no AVX-512 bf16 conversions) or the kernel refuses their state.
 * dev_sgemm_amx_rowmajor: row-major C = alpha op(A) op(B) + beta C on the
 * tiles whatever the size; false where AMX cannot be had, its buffers
 * cannot be allocated, or an element of A or B is infinite, NaN or beyond
 * bf16's range (the caller computes it otherwise). Thread safe. */
SgemmFn *dev_sgemm_amx(SgemmFn *fallback, const char **why);
bool dev_sgemm_amx_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                            int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* sgemm_amx.c: B's two bf16 copies made once, for row-major products
 * C[m,n] = A[m,k] op(B) (alpha 1, beta 0) of any m while B's buffer is
 * unchanged (packed.c keeps them). dev_sgemm_amx_pack_b: NULL where AMX
 * cannot be had, n < 16 or k < 128, memory is short, or an element is not
 * finite in bf16. dev_sgemm_amx_run_b: false where m < 16, A has such an
 * element or its buffer cannot be had (the caller computes the product
 * otherwise, as the unkept call would: the same bits either way).
 * One thread uses a DevSgemmAmxB at a time. */
typedef struct DevSgemmAmxB DevSgemmAmxB;
DevSgemmAmxB *dev_sgemm_amx_pack_b(int64_t n, int64_t k, const float *b, bool tb, int64_t ldb);
bool dev_sgemm_amx_run_b(const DevSgemmAmxB *p, int64_t m, const float *a, int64_t lda, float *c, int64_t ldc);
size_t dev_sgemm_amx_b_bytes(const DevSgemmAmxB *p);
void dev_sgemm_amx_b_free(DevSgemmAmxB *p);
/* sgemm_avx512.c: tessel's own f32 GEMM, an AVX-512 micro-kernel on
 * packed panels (only f32 FMAs; the summation order its own), on the
 * calling thread, behind cblas_sgemm's signature. dev_sgemm_avx512: the
 * function, or NULL with *why where the CPU has no AVX-512F or the OS does
 * not save the zmm state; `fallback` computes a product whose buffers
 * cannot be allocated. dev_sgemm_avx512_rowmajor: row-major C = alpha
 * op(A) op(B) + beta C, any size (beta 0: C not read); false where AVX-512
 * cannot be had or its buffers cannot be allocated.
 * dev_sgemm_avx512_tile_flops: the micro-kernel alone run `reps` times on
 * panels that stay in L1 (gemm_bench's ceiling of a GEMM's inner loop):
 * the FLOPs it ran (the caller times the call), 0 where AVX-512 cannot be
 * had. Thread safe. */
SgemmFn *dev_sgemm_avx512(SgemmFn *fallback, const char **why);
bool dev_sgemm_avx512_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
double dev_sgemm_avx512_tile_flops(int64_t reps);
/* dev_sgemm_avx512_rowmajor with alpha 1 and beta 0 (the same bits),
 * then `then` on each strip of C's tile rows as its last k block is
 * stored (DevGemmThen). */
bool dev_sgemm_avx512_rowmajor_then(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                    const float *b, int64_t ldb, float *c, int64_t ldc, const DevGemmThen *then);
/* sgemm_avx512.c: op(B) packed once, for row-major products C[m,n] =
 * A[m,k] op(B) (alpha 1, beta 0) of any m while B's buffer is unchanged
 * (packed.c keeps it): the same blocks the unkept call packs, so the same
 * bits. dev_sgemm_avx512_pack_b: NULL where AVX-512 cannot be had, n or k
 * is 0, or memory is short. dev_sgemm_avx512_run_b: false where the
 * thread's buffer cannot be had (the caller computes the product
 * otherwise). One thread uses a DevSgemmAvx512B at a time. */
typedef struct DevSgemmAvx512B DevSgemmAvx512B;
DevSgemmAvx512B *dev_sgemm_avx512_pack_b(int64_t n, int64_t k, const float *b, bool tb, int64_t ldb);
bool dev_sgemm_avx512_run_b(const DevSgemmAvx512B *p, int64_t m, const float *a, int64_t lda, float *c,
                            int64_t ldc);
/* dev_sgemm_avx512_run_b, then `then` as dev_sgemm_avx512_rowmajor_then. */
bool dev_sgemm_avx512_run_b_then(const DevSgemmAvx512B *p, int64_t m, const float *a, int64_t lda, float *c,
                                 int64_t ldc, const DevGemmThen *then);
size_t dev_sgemm_avx512_b_bytes(const DevSgemmAvx512B *p);
/* sgemm_avx512.c: op(B) (k x n) packed as above into a caller's buffer
 * (64-byte aligned, dev_sgemm_avx512_b_floats(n, k) floats), for products
 * that read part of it: dev_sgemm_avx512_run_part computes C[m,n] =
 * op(A)[m,k] times the first k rows and n columns of a B packed for kk
 * rows and kn columns (n <= kn, k <= kk; alpha 1, beta 0), with the bits
 * the unkept product of that part of B has (attention's blocks read K and
 * V packed once a head, k_dot.c). false: no AVX-512 here, a buffer not
 * aligned, an empty product, or no memory for A's packing (the caller
 * computes it otherwise). dev_sgemm_avx512_is: whether f is this
 * kernel's function (dev_sgemm_avx512's). */
size_t dev_sgemm_avx512_b_floats(int64_t n, int64_t k);
bool dev_sgemm_avx512_pack_b_into(float *buf, int64_t n, int64_t k, const float *b, bool tb, int64_t ldb);
bool dev_sgemm_avx512_run_part(const float *packed, int64_t kn, int64_t kk, bool ta, int64_t m, int64_t n, int64_t k,
                               const float *a, int64_t lda, float *c, int64_t ldc);
bool dev_sgemm_avx512_is(SgemmFn *f);
void dev_sgemm_avx512_b_free(DevSgemmAvx512B *p);
/* blas_small.c: the function for the probe's f32 products of `macs`
 * multiply-adds under its PROBE_MIN_MACS at one BLAS thread: OpenBLAS's
 * (`openblas`) below 32^3, else the faster of it and tessel's own kernel,
 * timed at the first such product and kept for the process (so the
 * first caller's `openblas` is the one kept: blas_choice.c passes
 * OpenBLAS's cblas_sgemm always). Thread safe.
 * dev_blas_sgemm_small_note: what the timing found, for the verdict ("" until
 * it ran). */
SgemmFn *dev_blas_sgemm_small(SgemmFn *openblas, int64_t macs);
void dev_blas_sgemm_small_note(char *buf, size_t len);
/* blas_choice.c: the f32 GEMM that computes f32's own product: OpenBLAS's
 * where DevBlas.sgemm runs bf16 passes (amx-bf16x3), else DevBlas.sgemm
 * itself. For dots that ask for full precision (ct_exact). Call after
 * dev_blas() succeeded. */
SgemmFn *dev_blas_sgemm_exact(void);
/* blas_choice.c: the function f (DevBlas.sgemm or dev_blas_sgemm_exact's)
 * computes a product of `macs` multiply-adds with: f itself, or under the
 * probe the small products' function (sgemm_probed's rule); NULL where
 * that depends on more than the size (a large product under the probe:
 * its shape's, dev_blas_sgemm_shape_lib). */
SgemmFn *dev_blas_sgemm_for(SgemmFn *f, int64_t macs);
/* blas_choice.c: the function for DevBlas.sgemm, given OpenBLAS's, by the
 * choice dev_blas_choose_sgemm recorded: OpenBLAS's itself, BLIS's or
 * oneDNN's (NULL, with *why, when it cannot be loaded), or under the probe
 * a function that measures them at its first call and then forwards to
 * the fastest. Called once, by blas.c's load. */
SgemmFn *dev_blas_sgemm_pick(SgemmFn *openblas, const char **why);
/* blas_watch.c: the probe's choice held against the program's first
 * large calls (the libraries indexed openblas, blis, onednn, avx512).
 * sgemm_watch_start: the probe's rates (FLOP/s; 0: the library is absent)
 * and its choice; then `use` names the library for the next call, and
 * sgemm_watch_record takes each call's FLOPs and seconds (a call made in
 * another library than `use`, or after the watch is done, is ignored)
 * and returns true once the watch is done: `use`
 * keeps the calls from then on and `note` (empty when the choice held)
 * says why it changed, for the verdict. sgemm_watch_median: the median
 * rate of a library's recorded calls (0: none). Not thread safe: the
 * caller holds a lock. */
enum { SGEMM_LIBS = 4, WATCH_CALLS = 3 };
enum { WATCH_CHECK, WATCH_TRY, WATCH_DONE };
typedef struct SgemmWatch {
    double probed[SGEMM_LIBS];             /* the probe's FLOP/s per library; 0: absent */
    int chosen;                            /* the probe's choice */
    int use;                               /* the library for the next call */
    int stage;                             /* WATCH_CHECK, WATCH_TRY or WATCH_DONE */
    int calls[SGEMM_LIBS];                 /* the program's calls timed per library */
    bool ended[SGEMM_LIBS];                /* its turn is over (WATCH_CALLS, or cut short) */
    double rates[SGEMM_LIBS][WATCH_CALLS]; /* their FLOP/s */
    char note[200];                        /* why the choice changed; "" when it held */
} SgemmWatch;
void sgemm_watch_start(SgemmWatch *w, const double probed[SGEMM_LIBS], int chosen);
bool sgemm_watch_record(SgemmWatch *w, int lib, double flops, double seconds);
double sgemm_watch_median(const SgemmWatch *w, int lib);
/* blas_shapes.c: the library per product shape at one BLAS thread a
 * device, chosen on the program's own products (the two fastest of the
 * probe timed in turns on a shape's first call, by every device that
 * reaches it before it is decided). A shape: the row-major
 * product's m, n, k and transposes. sgemm_shapes_find: the library (index
 * as above) a shape was given, -1 when none yet. sgemm_shapes_candidates:
 * the (up to) two libraries with the best probed rates (0: absent), the
 * fastest first, -1 for none; returns how many. sgemm_shapes_add: the
 * library whose best time (seconds; 0: not timed) is smallest, or
 * tessel's own kernel (avx512) where its time is within 12 % of that
 * and the shape was timed with B not kept (`kept` false: what the bare
 * timing cannot see there, blas_shapes.c), recorded
 * for the shape unless the table is full (SHAPE_MAX shapes: blas_choice.c
 * gives later ones the probe's choice, untimed); -1 where nothing was
 * timed. sgemm_shapes_note: the verdict's clause
 * naming each shape's library and rates ("" for none). Not thread safe:
 * the caller holds a lock. */
enum { SHAPE_MAX = 32, SHAPE_ROUNDS = 3 };
typedef struct SgemmShape {
    bool ta, tb;
    int64_t m, n, k;
} SgemmShape;
typedef struct SgemmShapes {
    int n;
    struct {
        SgemmShape shape;
        int lib;
        double seconds[SGEMM_LIBS]; /* each library's best time on it; 0: not timed */
        bool kept;                  /* timed with B kept packed */
        bool timed_beside;          /* timed beside a second thread's product */
        double beside;              /* the share of the timed calls' wall time that thread
                                     * computed (0 where it was given no core meanwhile) */
    } e[SHAPE_MAX];
} SgemmShapes;
int sgemm_shapes_find(const SgemmShapes *t, SgemmShape s);
int sgemm_shapes_candidates(const double probed[SGEMM_LIBS], int cand[2]);
int sgemm_shapes_add(SgemmShapes *t, SgemmShape s, const double seconds[SGEMM_LIBS], bool kept);
void sgemm_shapes_note(const SgemmShapes *t, char *buf, size_t len);
/* blas_choice.c: the library (DEV_SGEMM_*) that computes the row-major
 * product C = op(A) op(B) of that shape and operands: the fixed one, or
 * under the probe at one BLAS thread the shape's (measured now on these
 * operands if it is new, as its first product through DevBlas.sgemm
 * would), else the probe's choice (dev_blas_sgemm_current). For callers
 * that compute the product otherwise (packed.c's kept B), so that a shape
 * has one library whichever path computes it; `kept`: B is a buffer
 * packed.c keeps packed, so a new shape is timed in each candidate's kept
 * form (B packed once, then its run_b / packed_run). Thread safe. */
int dev_blas_sgemm_shape_lib(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                             const float *b, int64_t ldb, bool kept);
/* packed.c: whether it keeps B packed for a row-major product C[m,n] =
 * A[m,k] op(B) that library `lib` (DEV_SGEMM_*) computes at the devices'
 * BLAS thread count now (its rule above dev_packed_sgemm; blas_choice.c
 * times a new shape's kept products in that form). */
bool dev_packed_keeps(int lib, int64_t m, int64_t n, int64_t k);
/* dev_blas, loading the library (if not yet loaded) with a pool of n
 * threads rather than one a core (dev_blas_set_threads). */
const DevBlas *dev_blas_for_threads(int n);

#endif /* TESSEL_DEVICE_BLAS_H */
