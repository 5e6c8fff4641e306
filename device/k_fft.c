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
 * One FFTW plan per call, made with FFTW_ESTIMATE on the actual buffers
 * through the guru64 interface (64-bit sizes and strides, batch = the
 * leading dims as one "howmany" loop). ESTIMATE planning takes
 * microseconds and reads no data (bench/fft_bench.c measures it against a
 * cached plan); FFTW_MEASURE would time transforms on every new shape.
 * FFTW's planner is not thread-safe and devices are threads, so making and
 * destroying plans is serialised by one mutex (fftw_execute itself is
 * thread-safe). FFTW allocates its plans with its own malloc, outside
 * ts_malloc's failure injection; a plan it cannot make is IR_ERUNTIME.
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
    const char *t = k->ins->a.fft_type ? k->ins->a.fft_type : "FFT";
    static const char *const names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
    for (int i = 0; i < 4; i++)
        if (strcmp(t, names[i]) == 0) {
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
                                k->ins->a.fft_type ? k->ins->a.fft_type : "FFT",
                                ir_type_name(in), ir_type_name(out));
    *dbl = in == IR_F64 || in == IR_C128;
    return IR_OK;
}

/* Dims and strides: the transformed dims of the logical (real, for R2C and
 * C2R) size fft_length, the complex side's last dim L/2 + 1. */
static IrStatus fft_plan(const DevKernelArgs *k, const IrShape *in, const IrShape *out,
                         FftPlan *p)
{
    const IrI64List *fl = &k->ins->a.fft_length;
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

/* Plan and run in double or single precision. `in` must be writable for
 * C2R (FFTW destroys a c2r input). Returns false when FFTW gives no plan. */
#define FFT_RUN(NAME, PFX, REAL)                                                              \
    static bool NAME(const FftPlan *p, void *in, void *out)                                   \
    {                                                                                         \
        unsigned fl = FFTW_ESTIMATE;                                                          \
        pthread_mutex_lock(&planner_lock);                                                    \
        PFX##_plan pl = NULL;                                                                 \
        switch (p->kind) {                                                                    \
        case FFT_C2C_FWD: case FFT_C2C_INV:                                                   \
            pl = PFX##_plan_guru64_dft(p->rank, p->dims, 1, &p->batch, in, out,               \
                                       p->kind == FFT_C2C_FWD ? FFTW_FORWARD : FFTW_BACKWARD, \
                                       fl);                                                   \
            break;                                                                            \
        case FFT_R2C:                                                                         \
            pl = PFX##_plan_guru64_dft_r2c(p->rank, p->dims, 1, &p->batch, in, out, fl);      \
            break;                                                                            \
        case FFT_C2R:                                                                         \
            pl = PFX##_plan_guru64_dft_c2r(p->rank, p->dims, 1, &p->batch, in, out, fl);      \
            break;                                                                            \
        }                                                                                     \
        pthread_mutex_unlock(&planner_lock);                                                  \
        if (!pl)                                                                              \
            return false;                                                                     \
        PFX##_execute(pl);                                                                    \
        pthread_mutex_lock(&planner_lock);                                                    \
        PFX##_destroy_plan(pl);                                                               \
        pthread_mutex_unlock(&planner_lock);                                                  \
        /* The inverses are unnormalised in FFTW; XLA scales by 1/N. */                      \
        if (p->kind == FFT_C2C_INV || p->kind == FFT_C2R) {                                   \
            REAL s = (REAL)1 / (REAL)p->n;                                                    \
            int64_t m = p->out_elems * (p->kind == FFT_C2R ? 1 : 2);                          \
            REAL *o = out;                                                                    \
            for (int64_t i = 0; i < m; i++)                                                   \
                o[i] *= s;                                                                    \
        }                                                                                     \
        return true;                                                                          \
    }

FFT_RUN(run_double, fftw, double)
FFT_RUN(run_float, fftwf, float)

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
    DevValue *r = dev_value_new(rs);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory in fft");
    if (p.in_elems == 0 || p.out_elems == 0) {   /* nothing to transform: zeros */
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
    bool ok = p.dbl ? run_double(&p, in, r->data) : run_float(&p, in, r->data);
    ts_free(copy);
    if (!ok) {
        dev_value_unref(r);
        return dev_kernel_error(k, IR_ERUNTIME, "FFTW could not plan this transform");
    }
    *out = r;
    return IR_OK;
}
