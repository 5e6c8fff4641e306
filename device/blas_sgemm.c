/*
 * blas_sgemm.c: the f32 GEMM from another library than OpenBLAS, behind
 * cblas_sgemm's signature (issue 34).
 *
 * tessel's f32 dots call DevBlas.sgemm (contract.c). blas_choice.c decides
 * which library fills it (fixed by the caller's tuning, or measured) and
 * asks here for BLIS's or oneDNN's. BLIS is called through its typed API bli_sgemm, which takes
 * a row and a column stride per matrix, so an order and a transpose are
 * strides; no other library exports that name, so the call cannot land in
 * OpenBLAS (BLIS's own cblas_sgemm would call sgemm_, which OpenBLAS, loaded
 * first, also defines). oneDNN's dnnl_sgemm is row-major; a column-major
 * product is the row-major product of the transposes, operands swapped.
 * Both run as many threads as a device's BLAS runs (dev_blas_sgemm_threads
 * records the devices' count): the calling thread alone wherever devices
 * share the cores, an OpenMP team of that many (the caller and the
 * runtime's threads) where one device spans several cores. BLIS is told
 * the count when it differs from the one it was last told (its setting is
 * global; every device of a set runs the same count), oneDNN's OpenMP
 * runtime before every call (omp_set_num_threads sets the calling
 * thread's count only), except that a product of fewer than
 * DNNL_TEAM_MIN multiply-adds a thread runs on the calling thread alone:
 * causal attention's blocks (64 x 512 x 64 and smaller, 200 calls a step
 * for GPT-2's 12 heads over 2 sequences) each paid the team's fork and
 * join, and under load each join waited for a descheduled thread (one
 * device on 2 cores at load 20: 1170 ms a step against OpenBLAS's 74; on
 * one core alone 52 ms). Whether a team beats OpenBLAS's pool is the
 * probe's business (blas_choice.c): under load OpenMP's threads spin at
 * their barriers (a 2-thread BLIS once ran 3x slower than OpenBLAS at load
 * 16), idle oneDNN's team was the fastest here (BENCHMARKS.md, "The GEMM").
 *
 * Some products go to oneDNN's matmul primitive instead of dnnl_sgemm
 * (mm_takes): at most MM_MAX_M rows of C, alpha 1, beta 0, one thread,
 * and B transposed (row-major NT, as dh = g W^T of a backward pass) or
 * thin (n or k of MM_THIN or less). For B transposed its brgemm
 * kernel ran 1-11 % faster than dnnl_sgemm's on every such shape timed
 * here (512 x 1024 x 2048: 107.4 against 102.4 GFLOP/s, medians of 5, one
 * core; BENCHMARKS.md, "The MLP lines across processes"); with more rows
 * the two were even or dnnl_sgemm ahead, and without a transposed B
 * dnnl_sgemm was ahead. The primitive is made once per shape and thread
 * (mm_cache_of: a cache per thread, in a list that keeps it reachable,
 * reused by a later thread once its thread has ended); where oneDNN is not
 * a 2.x library (its C API of memory descriptors by value), or any call
 * fails, the product goes to dnnl_sgemm. The primitives run in user
 * scratchpad mode on a buffer their thread's cache keeps (grown to the
 * largest a primitive asks), so no call allocates. dnnl_sgemm allocates
 * and frees its packing workspace at every call (2.97 MB for 1024 x 768
 * x 1536); the primitive in its place ran those products 8-18 % slower,
 * so they stay in dnnl_sgemm (BENCHMARKS.md, "oneDNN's scratchpad kept").
 *
 * The libraries are loaded once (pthread_once per library) and never
 * unloaded; the pointers are read without a lock afterwards.
 */
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*BliSgemm)(int transa, int transb, int64_t m, int64_t n, int64_t k, const float *alpha,
                         const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb,
                         const float *beta, float *c, int64_t rsc, int64_t csc);
typedef int (*DnnlSgemm)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* oneDNN 2.x's C API for the matmul primitive (dnnl.h, not needed to
 * build): handles are pointers, a memory descriptor (696 bytes in 2.6)
 * and a matmul descriptor (2800) are structs the library fills, kept here
 * in storage of MM_MD_BYTES and MM_OP_BYTES. */
typedef struct {
    int major, minor, patch;
    const char *hash;
} DnnlVersion;
typedef struct {
    int arg;
    void *memory;
} DnnlArg;
enum {
    MM_MAX_M = 512,     /* rows of C up to which products take the matmul */
    MM_THIN = 64,       /* n or k up to which products of B as stored take it */
    DNNL_TEAM_MIN = 1 << 22, /* multiply-adds a thread below which oneDNN runs one */
    MM_SLOTS = 32,      /* shapes a thread keeps */
    MM_MD_BYTES = 2048, /* room for a dnnl_memory_desc_t */
    MM_OP_BYTES = 8192, /* room for a dnnl_matmul_desc_t */
    DNNL_CPU = 1, DNNL_F32 = 3, DNNL_STREAM_DEFAULT = 1,
    DNNL_ARG_SRC = 1, DNNL_ARG_DST = 17, DNNL_ARG_WEIGHTS = 33, DNNL_ARG_SCRATCHPAD = 80,
    DNNL_SCRATCHPAD_USER = 1, DNNL_QUERY_SCRATCHPAD_MD = 136,
};
typedef struct DnnlApi {
    const DnnlVersion *(*version)(void);
    int (*engine_create)(void **engine, int kind, size_t index);
    int (*stream_create)(void **stream, void *engine, unsigned flags);
    int (*md_init_by_strides)(void *md, int ndims, const int64_t *dims, int type, const int64_t *strides);
    int (*matmul_desc_init)(void *op, const void *src, const void *weights, const void *bias, const void *dst);
    int (*pd_create)(void **pd, const void *op, const void *attr, void *engine, const void *hint);
    int (*pd_destroy)(void *pd);
    int (*primitive_create)(void **prim, const void *pd);
    int (*primitive_destroy)(void *prim);
    int (*memory_create)(void **mem, const void *md, void *engine, void *handle);
    int (*memory_destroy)(void *mem);
    int (*memory_set_handle)(void *mem, void *handle);
    int (*execute)(const void *prim, void *stream, int nargs, const DnnlArg *args);
    int (*stream_wait)(void *stream);
    int (*attr_create)(void **attr);
    int (*attr_destroy)(void *attr);
    int (*attr_set_scratchpad_mode)(void *attr, int mode);
    const void *(*query_md)(const void *pd, int what, int index);
    size_t (*md_size)(const void *md);
} DnnlApi;

/* One shape's primitive, its memory objects (their data pointed at the
 * call's matrices each time) and the stream it runs on. */
typedef struct MmSlot {
    int64_t m, n, k, lda, ldb, ldc; /* m == 0: empty */
    uint64_t used;                  /* the cache's clock at its last call */
    bool tb;                        /* B transposed (B[n,k]), else B[k,n] */
    bool failed;                    /* oneDNN refused it: dnnl_sgemm */
    size_t pad_bytes;               /* the scratchpad it asks (0: none) */
    void *prim, *a, *b, *c, *pad;   /* pad: its scratchpad memory, NULL where none */
} MmSlot;

/* A thread's shapes, on the list `mm_all` from its making on. */
typedef struct MmCache {
    struct MmCache *next;
    atomic_bool owned;  /* a live thread uses it */
    void *stream;
    uint64_t clock;     /* calls so far (MmSlot.used) */
    void *scratch;      /* the largest scratchpad its slots asked, kept */
    size_t scratch_bytes;
    MmSlot slot[MM_SLOTS];
} MmCache;

static DnnlApi mm;            /* all set, or mm.execute NULL */
static void *mm_engine;
static _Atomic(MmCache *) mm_all;
static pthread_key_t mm_key;  /* the thread's MmCache, released at its end */
static _Thread_local MmCache *mm_mine;

static BliSgemm bli_sgemm_fn;
static void (*bli_set_threads_fn)(int64_t);
static DnnlSgemm dnnl_sgemm_fn;
static void (*omp_set_threads_fn)(int);
static char blis_why[200], dnnl_why[200];

/* oneDNN's calls for weights packed once (dev_sgemm_pack), beyond DnnlApi:
 * all set, or pk.reorder_pd NULL. */
static struct {
    int (*md_init_by_tag)(void *md, int ndims, const int64_t *dims, int type, int tag);
    int (*reorder_pd)(void **pd, const void *src, void *src_engine, const void *dst, void *dst_engine,
                      const void *attr);
} pk;
enum { DNNL_FORMAT_ANY = 1, DNNL_QUERY_WEIGHTS_MD = 131, DNNL_ARG_FROM = 1, DNNL_ARG_TO = 17 };
static atomic_int threads;         /* the devices' BLAS thread count; 0: not told */
static atomic_int blis_threads;    /* the count BLIS was last told */

static pthread_once_t blis_once = PTHREAD_ONCE_INIT, dnnl_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer (POSIX allows the conversion; C does not,
 * so the bits are copied). */
static void *sym_of(void *lib, const char *name)
{
    return lib ? dlsym(lib, name) : NULL;
}

static void blis_load(void)
{
    /* BLIS 0.9's 64-bit integer build (Debian's libblis4-*). */
    void *lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
    void *g = sym_of(lib, "bli_sgemm"), *t = sym_of(lib, "bli_thread_set_num_threads");
    if (!g || !t) {
        const char *e = lib ? "it has no bli_sgemm or bli_thread_set_num_threads" : dlerror();
        snprintf(blis_why, sizeof blis_why, "BLIS (libblis.so.4) for f32 GEMMs: %s", e ? e : "dlopen failed");
        return;
    }
    memcpy(&bli_set_threads_fn, &t, sizeof t);
    bli_set_threads_fn(1);
    atomic_store(&blis_threads, 1);
    memcpy(&bli_sgemm_fn, &g, sizeof g);
}

/* A thread's end: its cache goes to the next thread that asks. */
static void mm_release(void *p)
{
    atomic_store(&((MmCache *)p)->owned, false);
}

/* The matmul API of a oneDNN 2.x library, its CPU engine, the thread key;
 * anything missing leaves mm.execute NULL (every product in dnnl_sgemm). */
static void mm_load(void *lib)
{
    DnnlApi f;
    void *p[19] = {sym_of(lib, "dnnl_version"), sym_of(lib, "dnnl_engine_create"),
                   sym_of(lib, "dnnl_stream_create"), sym_of(lib, "dnnl_memory_desc_init_by_strides"),
                   sym_of(lib, "dnnl_matmul_desc_init"), sym_of(lib, "dnnl_primitive_desc_create"),
                   sym_of(lib, "dnnl_primitive_desc_destroy"), sym_of(lib, "dnnl_primitive_create"),
                   sym_of(lib, "dnnl_primitive_destroy"), sym_of(lib, "dnnl_memory_create"),
                   sym_of(lib, "dnnl_memory_destroy"), sym_of(lib, "dnnl_memory_set_data_handle"),
                   sym_of(lib, "dnnl_primitive_execute"), sym_of(lib, "dnnl_stream_wait"),
                   sym_of(lib, "dnnl_primitive_attr_create"), sym_of(lib, "dnnl_primitive_attr_destroy"),
                   sym_of(lib, "dnnl_primitive_attr_set_scratchpad_mode"),
                   sym_of(lib, "dnnl_primitive_desc_query_md"), sym_of(lib, "dnnl_memory_desc_get_size")};
    _Static_assert(sizeof f == sizeof p, "one symbol per DnnlApi member");
    for (int i = 0; i < 19; i++)
        if (!p[i])
            return;
    memcpy(&f, p, sizeof f);
    const DnnlVersion *v = f.version();
    if (!v || v->major != 2 || f.engine_create(&mm_engine, DNNL_CPU, 0) != 0 ||
        pthread_key_create(&mm_key, mm_release) != 0)
        return;
    mm = f;
    void *q[2] = {sym_of(lib, "dnnl_memory_desc_init_by_tag"), sym_of(lib, "dnnl_reorder_primitive_desc_create")};
    _Static_assert(sizeof pk == sizeof q, "one symbol per pk member");
    if (q[0] && q[1])
        memcpy(&pk, q, sizeof pk);
}

/* The calling thread's cache: its own, else one a finished thread left,
 * else a new one (NULL: out of memory, or no stream). */
static MmCache *mm_cache_of(void)
{
    if (mm_mine)
        return mm_mine;
    MmCache *c = atomic_load(&mm_all);
    for (; c; c = c->next) {
        bool idle = false;
        if (atomic_compare_exchange_strong(&c->owned, &idle, true))
            break;
    }
    if (!c) {
        c = ts_calloc(1, sizeof *c);
        if (!c)
            return NULL;
        atomic_init(&c->owned, true);
        if (mm.stream_create(&c->stream, mm_engine, DNNL_STREAM_DEFAULT) != 0) {
            ts_free(c);
            return NULL;
        }
        c->next = atomic_load(&mm_all);
        while (!atomic_compare_exchange_weak(&mm_all, &c->next, c))
            ;
    }
    if (pthread_setspecific(mm_key, c) != 0) {
        atomic_store(&c->owned, false);
        return NULL;
    }
    return mm_mine = c;
}

/* A matmul and its three memories destroyed (NULLs skipped). */
static void mm_destroy(void *prim, void *a, void *b, void *c)
{
    void *mem[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (mem[i])
            mm.memory_destroy(mem[i]);
    if (prim)
        mm.primitive_destroy(prim);
}

/* A slot's oneDNN objects destroyed; the slot empty. */
static void mm_clear(MmSlot *s)
{
    if (s->pad)
        mm.memory_destroy(s->pad);
    mm_destroy(s->prim, s->a, s->b, s->c);
    *s = (MmSlot){0};
}

/* The primitive descriptor of C[m,n] = A[m,k] op(B) in user scratchpad
 * mode: the primitive never allocates its scratchpad itself (dnnl_sgemm's
 * driver allocates and frees its packing workspace at every call, 2.97 MB
 * for a product of 1024 rows, which glibc placed on fresh pages each call
 * for the first 8 steps: BENCHMARKS.md, "oneDNN's scratchpad kept"). */
static int mm_pd(void **pd, const void *op)
{
    void *attr = NULL;
    int st = mm.attr_create(&attr);
    if (st == 0)
        st = mm.attr_set_scratchpad_mode(attr, DNNL_SCRATCHPAD_USER);
    if (st == 0)
        st = mm.pd_create(pd, op, attr, mm_engine, NULL);
    if (attr)
        mm.attr_destroy(attr);
    return st;
}

/* A slot's scratchpad memory object for the descriptor pd (none where it
 * asks no bytes); its data is the cache's buffer, set at each call. */
static bool mm_pad_of(MmSlot *s, const void *pd)
{
    const void *md = mm.query_md(pd, DNNL_QUERY_SCRATCHPAD_MD, 0);
    s->pad_bytes = md ? mm.md_size(md) : 0;
    return s->pad_bytes == 0 || mm.memory_create(&s->pad, md, mm_engine, NULL) == 0;
}

/* The primitive for C[m,n] = A[m,k] op(B), row-major with leading
 * dimensions lda, ldb, ldc, op(B) = B[n,k]^T where tb, else B[k,n]: made
 * at its shape's first call into an empty slot, else the one used longest
 * ago (destroyed: a shape that falls out and comes back costs its making
 * again). A block's step calls 8 to 12 such shapes a device (the causal
 * scores' 8 row tiles among them): with fewer slots than a step's shapes,
 * every shape would be made again every step. */
static MmSlot *mm_slot(MmCache *c, int64_t m, int64_t n, int64_t k, bool tb, int64_t lda, int64_t ldb,
                       int64_t ldc, const float *a, const float *b, float *cm)
{
    MmSlot *s = &c->slot[0];
    c->clock++;
    for (int i = 0; i < MM_SLOTS; i++) {
        MmSlot *e = &c->slot[i];
        if (e->m == m && e->n == n && e->k == k && e->tb == tb && e->lda == lda && e->ldb == ldb &&
            e->ldc == ldc) {
            e->used = c->clock;
            return e->failed ? NULL : e;
        }
        if (e->used < s->used)
            s = e;
    }
    mm_clear(s);
    *s = (MmSlot){.m = m, .n = n, .k = k, .tb = tb, .lda = lda, .ldb = ldb, .ldc = ldc, .used = c->clock,
                  .failed = true};
    alignas(16) unsigned char md[3][MM_MD_BYTES], op[MM_OP_BYTES];
    const int64_t da[2] = {m, k}, sa[2] = {lda, 1}, db[2] = {k, n}, sb[2] = {tb ? 1 : ldb, tb ? ldb : 1},
                  dc[2] = {m, n}, sc[2] = {ldc, 1};
    void *pd = NULL;
    bool ok = mm.md_init_by_strides(md[0], 2, da, DNNL_F32, sa) == 0 &&
              mm.md_init_by_strides(md[1], 2, db, DNNL_F32, sb) == 0 &&
              mm.md_init_by_strides(md[2], 2, dc, DNNL_F32, sc) == 0 &&
              mm.matmul_desc_init(op, md[0], md[1], NULL, md[2]) == 0 && mm_pd(&pd, op) == 0 &&
              mm.primitive_create(&s->prim, pd) == 0 && mm_pad_of(s, pd) &&
              mm.memory_create(&s->a, md[0], mm_engine, (void *)a) == 0 &&
              mm.memory_create(&s->b, md[1], mm_engine, (void *)b) == 0 &&
              mm.memory_create(&s->c, md[2], mm_engine, cm) == 0;
    if (pd)
        mm.pd_destroy(pd);
    s->failed = !ok;
    return ok ? s : NULL;
}

/* The cache's scratchpad buffer, grown to `bytes` at least (its contents
 * are not kept: a primitive's scratchpad holds nothing between calls).
 * Kept with the cache, which lives as long as the process. */
static void *mm_scratch(MmCache *c, size_t bytes)
{
    if (bytes <= c->scratch_bytes)
        return c->scratch;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    free(c->scratch);
    c->scratch = p;
    c->scratch_bytes = bytes;
    return p;
}

/* C = A op(B) through the matmul primitive (row-major; the caller checked
 * the case: mm_takes, alpha 1, beta 0, one thread). False where it did
 * not run: the caller calls dnnl_sgemm. */
static bool mm_run(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, bool tb, const float *b,
                   int64_t ldb, float *cm, int64_t ldc)
{
    MmCache *c = mm.execute ? mm_cache_of() : NULL;
    MmSlot *s = c ? mm_slot(c, m, n, k, tb, lda, ldb, ldc, a, b, cm) : NULL;
    void *pad = s && s->pad ? mm_scratch(c, s->pad_bytes) : NULL;
    if (!s || (s->pad && (!pad || mm.memory_set_handle(s->pad, pad) != 0)) ||
        mm.memory_set_handle(s->a, (void *)a) != 0 || mm.memory_set_handle(s->b, (void *)b) != 0 ||
        mm.memory_set_handle(s->c, cm) != 0)
        return false;
    const DnnlArg args[4] = {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c},
                             {DNNL_ARG_SCRATCHPAD, s->pad}};
    return mm.execute(s->prim, c->stream, s->pad ? 4 : 3, args) == 0 && mm.stream_wait(c->stream) == 0;
}

/* Whether the matmul primitive runs op(A) op(B) of m x n x k (row-major)
 * rather than dnnl_sgemm: B transposed up to MM_MAX_M rows; B as stored
 * up to MM_MAX_M rows where n or k is MM_THIN or less (causal attention's
 * P V blocks, 64 x k x 64, 96 calls a device's step in block-infer). On
 * those the primitive ran 4-11 % faster than dnnl_sgemm, and 6-18 %
 * slower on B-as-stored products of wider n and k (its brgemm copies B
 * into its scratchpad at every call; BENCHMARKS.md, "oneDNN's scratchpad
 * kept"). */
static bool mm_takes(char ca, char cb, int m, int n, int k)
{
    if (ca != 'N' || m <= 0 || m > MM_MAX_M || n <= 0 || k <= 0)
        return false;
    return cb == 'T' || n <= MM_THIN || k <= MM_THIN;
}

static void dnnl_load(void)
{
    void *lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    void *g = sym_of(lib, "dnnl_sgemm"), *o = sym_of(lib, "omp_set_num_threads");
    if (!g) {
        const char *e = lib ? "it has no dnnl_sgemm" : dlerror();
        snprintf(dnnl_why, sizeof dnnl_why, "oneDNN (libdnnl.so.2) for f32 GEMMs: %s", e ? e : "dlopen failed");
        return;
    }
    if (o) /* an OpenMP build; a sequential or TBB one has no such symbol */
        memcpy(&omp_set_threads_fn, &o, sizeof o);
    memcpy(&dnnl_sgemm_fn, &g, sizeof g);
    mm_load(lib);
}

/* The (row, column) strides of op(X) for X stored with leading dimension
 * ld in `order`, transposed or not. */
static void strides(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE t, int ld, int64_t *rs, int64_t *cs)
{
    bool row = order == CblasRowMajor;
    *rs = row ? ld : 1;
    *cs = row ? 1 : ld;
    if (t != CblasNoTrans) {
        int64_t s = *rs;
        *rs = *cs;
        *cs = s;
    }
}

static void sgemm_blis(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    int64_t rsa, csa, rsb, csb, rsc, csc;
    strides(order, ta, lda, &rsa, &csa);
    strides(order, tb, ldb, &rsb, &csb);
    strides(order, CblasNoTrans, ldc, &rsc, &csc);
    int nt = dev_blas_sgemm_thread_count();
    if (atomic_exchange(&blis_threads, nt) != nt)
        bli_set_threads_fn(nt);
    /* 0: BLIS_NO_TRANSPOSE; the transposes are in the strides. */
    bli_sgemm_fn(0, 0, m, n, k, &alpha, a, rsa, csa, b, rsb, csb, &beta, c, rsc, csc);
}

static void sgemm_dnnl(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    char ca = ta == CblasNoTrans ? 'N' : 'T', cb = tb == CblasNoTrans ? 'N' : 'T';
    int nt = dev_blas_sgemm_thread_count();
    if ((int64_t)m * n * k < DNNL_TEAM_MIN * (int64_t)nt)
        nt = 1;
    if (omp_set_threads_fn)
        omp_set_threads_fn(nt);
    if (order != CblasRowMajor) { /* C^T = op(B)^T op(A)^T, all row-major */
        char t = ca;
        ca = cb;
        cb = t;
        int ti = m;
        m = n;
        n = ti;
        ti = lda;
        lda = ldb;
        ldb = ti;
        const float *tp = a;
        a = b;
        b = tp;
    }
    if (alpha == 1.0f && beta == 0.0f && nt == 1 && mm_takes(ca, cb, m, n, k) &&
        mm_run(m, n, k, a, lda, cb == 'T', b, ldb, c, ldc))
        return;
    dnnl_sgemm_fn(ca, cb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

SgemmFn *dev_blas_sgemm_from(const char *lib, const char **why)
{
    if (!strcmp(lib, "blis")) {
        pthread_once(&blis_once, blis_load);
        *why = blis_why;
        return bli_sgemm_fn ? sgemm_blis : NULL;
    }
    if (!strcmp(lib, "onednn")) {
        pthread_once(&dnnl_once, dnnl_load);
        *why = dnnl_why;
        return dnnl_sgemm_fn ? sgemm_dnnl : NULL;
    }
    *why = "unknown f32 GEMM library (openblas, blis or onednn)";
    return NULL;
}

void dev_blas_sgemm_threads(int n, bool unless_told)
{
    int none = 0;
    if (unless_told)
        atomic_compare_exchange_strong(&threads, &none, n < 1 ? 1 : n);
    else
        atomic_store(&threads, n < 1 ? 1 : n);
}

int dev_blas_sgemm_thread_count(void)
{
    int n = atomic_load(&threads);
    return n < 1 ? 1 : n;
}

/* ---- weights packed once (issue 34, mlp45) ----
 *
 * C[m,n] = A[m,k] op(B) (row-major, alpha 1, beta 0, one thread) through
 * oneDNN's matmul primitive with B in the blocked layout the primitive
 * asks for (format_tag_any), reordered once into a buffer of its own: the
 * caller keeps the DevSgemmPacked while B's buffer holds the same values
 * (device/packed.c: a parameter fed again, step after step). Measured on
 * the MLP's forward shapes (BENCHMARKS.md, "The MLP lines across
 * processes"): 110.0 and 111.5 GFLOP/s against dnnl_sgemm's 107.3 and
 * 106.4; the reorder costs about 1.1 ms for 8 MiB, so only a B used again
 * pays for it. The buffer is an ir_big_alloc block, in huge pages from 2
 * MiB up, as tessel's own kernel's kept panels (sgemm_avx512.c). */
struct DevSgemmPacked {
    void *prim, *a, *w, *c; /* the matmul, its source, packed weights and destination memories */
    void *packed;           /* the packed weights' buffer */
    size_t bytes;
};

void dev_sgemm_packed_free(DevSgemmPacked *p)
{
    if (!p)
        return;
    mm_destroy(p->prim, p->a, p->w, p->c);
    ir_big_free(p->packed);
    ts_free(p);
}

/* B (k x n, row stride ldb) into p's packed buffer through a reorder. */
static bool pack_weights(DevSgemmPacked *p, MmCache *cache, const void *bmd, const void *wmd, const float *b)
{
    void *rpd = NULL, *rprim = NULL, *src = NULL;
    bool ok = pk.reorder_pd(&rpd, bmd, mm_engine, wmd, mm_engine, NULL) == 0 &&
              mm.primitive_create(&rprim, rpd) == 0 && mm.memory_create(&src, bmd, mm_engine, (void *)b) == 0;
    if (ok) {
        const DnnlArg args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, p->w}};
        ok = mm.execute(rprim, cache->stream, 2, args) == 0 && mm.stream_wait(cache->stream) == 0;
    }
    if (src)
        mm.memory_destroy(src);
    if (rprim)
        mm.primitive_destroy(rprim);
    if (rpd)
        mm.pd_destroy(rpd);
    return ok;
}

DevSgemmPacked *dev_sgemm_pack(int64_t m, int64_t n, int64_t k, int64_t lda, const float *b, bool tb,
                               int64_t ldb, int64_t ldc)
{
    pthread_once(&dnnl_once, dnnl_load);
    if (omp_set_threads_fn) /* the calling thread alone, as the product's */
        omp_set_threads_fn(1);
    MmCache *cache = mm.execute && pk.reorder_pd && m > 0 && n > 0 && k > 0 ? mm_cache_of() : NULL;
    DevSgemmPacked *p = cache ? ts_calloc(1, sizeof *p) : NULL;
    if (!p)
        return NULL;
    alignas(16) unsigned char md[4][MM_MD_BYTES], op[MM_OP_BYTES];
    const int64_t da[2] = {m, k}, sa[2] = {lda, 1}, db[2] = {k, n}, dc[2] = {m, n}, sc[2] = {ldc, 1};
    const int64_t sb[2] = {tb ? 1 : ldb, tb ? ldb : 1};
    void *pd = NULL;
    const void *wmd = NULL;
    bool ok = mm.md_init_by_strides(md[0], 2, da, DNNL_F32, sa) == 0 &&
              pk.md_init_by_tag(md[1], 2, db, DNNL_F32, DNNL_FORMAT_ANY) == 0 &&
              mm.md_init_by_strides(md[2], 2, dc, DNNL_F32, sc) == 0 &&
              mm.md_init_by_strides(md[3], 2, db, DNNL_F32, sb) == 0 &&
              mm.matmul_desc_init(op, md[0], md[1], NULL, md[2]) == 0 &&
              mm.pd_create(&pd, op, NULL, mm_engine, NULL) == 0 &&
              (wmd = mm.query_md(pd, DNNL_QUERY_WEIGHTS_MD, 0)) != NULL && (p->bytes = mm.md_size(wmd)) > 0 &&
              (p->packed = ir_big_alloc(p->bytes)) != NULL && mm.primitive_create(&p->prim, pd) == 0 &&
              mm.memory_create(&p->a, md[0], mm_engine, NULL) == 0 &&
              mm.memory_create(&p->w, wmd, mm_engine, p->packed) == 0 &&
              mm.memory_create(&p->c, md[2], mm_engine, NULL) == 0 && pack_weights(p, cache, md[3], wmd, b);
    if (pd)
        mm.pd_destroy(pd);
    if (!ok) {
        dev_sgemm_packed_free(p);
        return NULL;
    }
    return p;
}

size_t dev_sgemm_packed_bytes(const DevSgemmPacked *p)
{
    return p->bytes;
}

bool dev_sgemm_packed_run(const DevSgemmPacked *p, const float *a, float *c)
{
    if (omp_set_threads_fn) /* omp_set_num_threads sets the calling thread's count */
        omp_set_threads_fn(1);
    MmCache *cache = mm_cache_of();
    if (!cache || mm.memory_set_handle(p->a, (void *)a) != 0 || mm.memory_set_handle(p->c, c) != 0)
        return false;
    const DnnlArg args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_DST, p->c}};
    return mm.execute(p->prim, cache->stream, 3, args) == 0 && mm.stream_wait(cache->stream) == 0;
}
