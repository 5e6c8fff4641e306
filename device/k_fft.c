/*
 * k_fft.c: fft (FFT, IFFT, RFFT, IRFFT) with FFTW.
 *
 * XLA's fft transforms the last len(fft_length) dimensions (1 to 3) and
 * batches over the leading ones:
 *   FFT    c64/c128 -> same type, forward:  X[k] = sum_n x[n] e^{-2 pi i k n / N}
 *   IFFT   c64/c128 -> same type, inverse, scaled by 1/N (N = prod(fft_length))
 *   RFFT   f32/f64 -> c64/c128; the last transformed dim L becomes L/2 + 1
 *          (the other half is the conjugate mirror image)
 *   IRFFT  c64/c128 -> f32/f64; the operand's last dim is L/2 + 1, the result's
 *          L = fft_length[-1]; scaled by 1/N. Like numpy.fft.irfft, only the
 *          non-redundant half is read, so the imaginary parts of the DC and
 *          (even L) Nyquist terms do not matter.
 * c64/f32 go to fftw3f, c128/f64 to fftw3 (double precision throughout).
 *
 * Plans are made with FFTW_ESTIMATE (reads no data; FFTW_MEASURE would
 * time transforms on every new shape) through the guru64 interface (64-bit
 * sizes and strides, batch = the leading dims as one "howmany" loop), and
 * cached (below): planning on every call made c64[64,4096] 2.1x slower
 * than FFTW with a plan made once (bench/kernels_bench.c fft); with the
 * cache the ratio is near 1. FFTW's planner is not thread-safe and devices
 * are threads, so making and destroying plans is serialised by one mutex;
 * executing a plan on new arrays is thread-safe and runs outside it. FFTW
 * allocates plans with its own malloc, outside ts_malloc's failure
 * injection; a plan it cannot make is IR_ERUNTIME.
 */
#include "device.h"

#include <complex.h>
#include <fftw3.h>
#include <pthread.h>
#include <string.h>

static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

typedef enum FftKind { FFT_C2C_FWD, FFT_C2C_INV, FFT_R2C, FFT_C2R } FftKind;

/* What one call transforms, in FFTW's guru terms. Strides in elements of
 * the array they index (reals or complexes). */
typedef struct FftPlan {
    FftKind kind;
    bool dbl;                  /* fftw3 (c128/f64) rather than fftw3f */
    int rank;                  /* transformed dims, 1..3 */
    fftw_iodim64 dims[3];
    fftw_iodim64 batch;        /* howmany loop over the leading dims */
    int64_t n;                 /* prod(fft_length): the 1/N of the inverses */
    int64_t in_elems, out_elems;
} FftPlan;

static IrStatus fft_kind(const DevKernelArgs *k, FftKind *kind)
{
    const char *t = k->ins->a.x->fft_type ? k->ins->a.x->fft_type : "FFT";
    static const char *const names[] = {"FFT", "IFFT", "RFFT", "IRFFT", NULL};
    int32_t i = ir_str_index(t, names);
    if (i >= 0) {
        *kind = (FftKind)i;
        return IR_OK;
    }
    return dev_kernel_error(k, IR_EINPUT, "fft_type must be FFT, IFFT, RFFT or IRFFT, got '%s'", t);
}

/* The element types each kind takes and gives. */
static IrStatus check_types(const DevKernelArgs *k, FftKind kind, IrType in, IrType out,
                            bool *dbl)
{
    bool ok;
    switch (kind) {
    case FFT_R2C: ok = (in == IR_F32 && out == IR_C64) || (in == IR_F64 && out == IR_C128); break;
    case FFT_C2R: ok = (in == IR_C64 && out == IR_F32) || (in == IR_C128 && out == IR_F64); break;
    default: ok = (in == IR_C64 || in == IR_C128) && out == in; break;
    }
    if (!ok)
        return dev_kernel_error(k, IR_EUNSUPPORTED, "fft %s of %s to %s is not supported",
                                k->ins->a.x->fft_type ? k->ins->a.x->fft_type : "FFT",
                                ir_type_name(in), ir_type_name(out));
    *dbl = in == IR_F64 || in == IR_C128;
    return IR_OK;
}

/* Dims and strides: the transformed dims of the logical (real, for R2C and
 * C2R) size fft_length, the complex side's last dim L/2 + 1. */
static IrStatus fft_plan(const DevKernelArgs *k, const IrShape *in, const IrShape *out,
                         FftPlan *p)
{
    const IrI64List *fl = &k->ins->a.x->fft_length;
    if (fl->n < 1 || fl->n > 3 || fl->n > in->rank || in->rank != out->rank)
        return dev_kernel_error(k, IR_EINPUT, "fft_length needs 1 to 3 entries, at most the rank");
    p->rank = fl->n;
    int32_t lead = in->rank - fl->n;
    for (int32_t i = 0; i < lead; i++)
        if (in->dims[i] != out->dims[i])
            return dev_kernel_error(k, IR_EINPUT, "batch dimension %d differs", (int)i);
    bool real_in = p->kind == FFT_R2C, real_out = p->kind == FFT_C2R;
    p->n = 1;
    int64_t is = 1, os = 1;
    for (int i = fl->n - 1; i >= 0; i--) {
        int64_t len = fl->v[i], half = len / 2 + 1;
        bool last = i == fl->n - 1;
        int64_t want_in = last && real_out ? half : len, want_out = last && real_in ? half : len;
        if (len < 0 || in->dims[lead + i] != want_in || out->dims[lead + i] != want_out)
            return dev_kernel_error(k, IR_EINPUT, "fft_length=%lld does not fit dimension %d",
                                    (long long)len, (int)(lead + i));
        p->dims[i] = (fftw_iodim64){len, is, os};
        is *= want_in;
        os *= want_out;
        p->n *= len;
    }
    int64_t howmany = 1;
    for (int32_t i = 0; i < lead; i++)
        howmany *= in->dims[i];
    p->batch = (fftw_iodim64){howmany, is, os};
    p->in_elems = howmany * is;
    p->out_elems = howmany * os;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* Plan cache                                                          */
/* ------------------------------------------------------------------ */

/* Plans made once per (transform, sizes, strides, buffer alignment) and
 * run on new buffers with FFTW's new-array execute functions, which need
 * buffers aligned as the planning ones were (hence the alignment in the
 * key). An entry in use (`busy`, a count of running executions) is never
 * evicted; when every entry is busy the call plans for itself. Everything
 * here is guarded by planner_lock; executions run outside it. */
enum { FFT_CACHE = 16 };

typedef struct CachedPlan {
    FftPlan key;               /* kind, precision, dims, batch */
    int align_in, align_out;   /* buffer addresses mod 64 */
    void *plan;                /* fftw_plan or fftwf_plan; NULL: free slot */
    int busy;
    uint64_t used;             /* LRU clock */
} CachedPlan;

static CachedPlan cache[FFT_CACHE];
static uint64_t cache_clock;

static bool same_key(const CachedPlan *c, const FftPlan *p, int ai, int ao)
{
    if (c->key.kind != p->kind || c->key.dbl != p->dbl || c->key.rank != p->rank ||
        c->align_in != ai || c->align_out != ao)
        return false;
    const fftw_iodim64 *x = c->key.dims, *y = p->dims;
    for (int i = 0; i < p->rank; i++)
        if (x[i].n != y[i].n || x[i].is != y[i].is || x[i].os != y[i].os)
            return false;
    return c->key.batch.n == p->batch.n && c->key.batch.is == p->batch.is &&
           c->key.batch.os == p->batch.os;
}

/* A new FFTW plan on these buffers (ESTIMATE: reads no data). */
static void *make_plan(const FftPlan *p, void *in, void *out)
{
    const unsigned fl = FFTW_ESTIMATE;
    int sign = p->kind == FFT_C2C_FWD ? FFTW_FORWARD : FFTW_BACKWARD;
    if (p->dbl) {
        switch (p->kind) {
        case FFT_R2C: return fftw_plan_guru64_dft_r2c(p->rank, p->dims, 1, &p->batch, in, out, fl);
        case FFT_C2R: return fftw_plan_guru64_dft_c2r(p->rank, p->dims, 1, &p->batch, in, out, fl);
        default: return fftw_plan_guru64_dft(p->rank, p->dims, 1, &p->batch, in, out, sign, fl);
        }
    }
    switch (p->kind) {
    case FFT_R2C: return fftwf_plan_guru64_dft_r2c(p->rank, p->dims, 1, &p->batch, in, out, fl);
    case FFT_C2R: return fftwf_plan_guru64_dft_c2r(p->rank, p->dims, 1, &p->batch, in, out, fl);
    default: return fftwf_plan_guru64_dft(p->rank, p->dims, 1, &p->batch, in, out, sign, fl);
    }
}

static void destroy_plan(bool dbl, void *plan)
{
    if (dbl)
        fftw_destroy_plan(plan);
    else
        fftwf_destroy_plan(plan);
}

/* A plan for p on (in, out), from the cache (marked busy: release it with
 * release_plan) or made afresh (*slot = -1: destroy it after use). NULL
 * when FFTW cannot plan it. Call with planner_lock held. */
static void *acquire_plan(const FftPlan *p, void *in, void *out, int *slot)
{
    int ai = (int)((uintptr_t)in % 64), ao = (int)((uintptr_t)out % 64), victim = -1;
    for (int i = 0; i < FFT_CACHE; i++) {
        if (cache[i].plan && same_key(&cache[i], p, ai, ao)) {
            cache[i].busy++;
            cache[i].used = ++cache_clock;
            *slot = i;
            return cache[i].plan;
        }
        if (!cache[i].busy && (victim < 0 || !cache[i].plan ||
                               (cache[victim].plan && cache[i].used < cache[victim].used)))
            victim = i;
    }
    void *plan = make_plan(p, in, out);
    *slot = -1;
    if (!plan || victim < 0)
        return plan;
    if (cache[victim].plan)
        destroy_plan(cache[victim].key.dbl, cache[victim].plan);
    cache[victim] = (CachedPlan){*p, ai, ao, plan, 1, ++cache_clock};
    *slot = victim;
    return plan;
}

static void release_plan(bool dbl, void *plan, int slot)
{
    pthread_mutex_lock(&planner_lock);
    if (slot >= 0)
        cache[slot].busy--;
    else
        destroy_plan(dbl, plan);
    pthread_mutex_unlock(&planner_lock);
}

/* Run on new arrays (thread-safe in FFTW). */
static void execute(const FftPlan *p, void *plan, void *in, void *out)
{
    if (p->dbl) {
        switch (p->kind) {
        case FFT_R2C: fftw_execute_dft_r2c(plan, in, out); break;
        case FFT_C2R: fftw_execute_dft_c2r(plan, in, out); break;
        default: fftw_execute_dft(plan, in, out); break;
        }
    } else {
        switch (p->kind) {
        case FFT_R2C: fftwf_execute_dft_r2c(plan, in, out); break;
        case FFT_C2R: fftwf_execute_dft_c2r(plan, in, out); break;
        default: fftwf_execute_dft(plan, in, out); break;
        }
    }
}

/* The inverses are unnormalised in FFTW; XLA scales by 1/N. */
static void scale_inverse(const FftPlan *p, void *out)
{
    if (p->kind != FFT_C2C_INV && p->kind != FFT_C2R)
        return;
    int64_t m = p->out_elems * (p->kind == FFT_C2R ? 1 : 2);
    if (p->dbl) {
        double s = 1.0 / (double)p->n, *o = out;
        for (int64_t i = 0; i < m; i++)
            o[i] *= s;
    } else {
        float s = 1.0f / (float)p->n, *o = out;
        for (int64_t i = 0; i < m; i++)
            o[i] *= s;
    }
}

/* Plan (or find the plan), run, scale. `in` must be writable for C2R
 * (FFTW destroys a c2r input). false when FFTW gives no plan. */
static bool fft_run(const FftPlan *p, void *in, void *out)
{
    int slot;
    pthread_mutex_lock(&planner_lock);
    void *plan = acquire_plan(p, in, out, &slot);
    pthread_mutex_unlock(&planner_lock);
    if (!plan)
        return false;
    execute(p, plan, in, out);
    release_plan(p->dbl, plan, slot);
    scale_inverse(p, out);
    return true;
}

IrStatus dev_k_fft(const DevKernelArgs *k, DevValue **out)
{
    const IrShape *rs = &k->ins->shape;
    if (k->nopnd != 1 || k->opnd[0]->shape.type == IR_TUPLE || rs->type == IR_TUPLE)
        return dev_kernel_error(k, IR_EINPUT, "fft takes one array operand");
    const DevValue *x = k->opnd[0];
    FftPlan p = {0};
    IrStatus st = fft_kind(k, &p.kind);
    if (st == IR_OK)
        st = check_types(k, p.kind, x->shape.type, rs->type, &p.dbl);
    if (st == IR_OK)
        st = fft_plan(k, &x->shape, rs, &p);
    if (st != IR_OK)
        return st;
    /* FFTW writes every output element; only an empty transform needs
     * the zeros. */
    bool empty = p.in_elems == 0 || p.out_elems == 0;
    DevValue *r = empty ? dev_value_new(rs) : dev_value_new_uninit(rs);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in fft");
    if (empty) {
        *out = r;
        return IR_OK;
    }
    /* c2c and r2c read the operand in place (FFTW preserves their input);
     * c2r works on a copy, which it destroys. */
    void *in = x->data, *copy = NULL;
    if (p.kind == FFT_C2R) {
        copy = ts_malloc((size_t)x->nbytes);
        if (!copy) {
            dev_value_unref(r);
            return dev_kernel_error(k, IR_ENOMEM, "out of memory in fft");
        }
        memcpy(copy, x->data, (size_t)x->nbytes);
        in = copy;
    }
    bool ok = fft_run(&p, in, r->data);
    ts_free(copy);
    if (!ok) {
        dev_value_unref(r);
        return dev_kernel_error(k, IR_ERUNTIME, "FFTW could not plan this transform");
    }
    *out = r;
    return IR_OK;
}
