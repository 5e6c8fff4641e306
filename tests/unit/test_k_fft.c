/*
 * test_k_fft.c: fft (device/k_fft.c) run as HLO text through dev_execute.
 * Expected values by a direct O(N^2) DFT in double written here,
 * X[k] = sum_n x[n] e^{-2 pi i k n / N} over the transformed dims (the
 * inverse with +i and 1/N), independent of FFTW. Also: the plan cache
 * under eviction (more shapes than it holds) and from two threads at once,
 * and out-of-memory at every allocation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "device/device.h"
#include "kernel_test.h"

#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

/* A direct DFT of x [batch, n0, n1] over its last `rank` dims (1 or 2)
 * into y, sign -1 forward, +1 inverse (scaled 1/N). */
static void dft(const double complex *x, double complex *y, int64_t batch, int64_t n0,
                int64_t n1, int rank, int sign)
{
    int64_t m0 = rank == 2 ? n0 : 1, rows = rank == 2 ? batch : batch * n0;
    double scale = sign > 0 ? 1.0 / (double)(m0 * n1) : 1.0;
    for (int64_t b = 0; b < rows; b++)
        for (int64_t k0 = 0; k0 < m0; k0++)
            for (int64_t k1 = 0; k1 < n1; k1++) {
                double complex s = 0;
                for (int64_t j0 = 0; j0 < m0; j0++)
                    for (int64_t j1 = 0; j1 < n1; j1++) {
                        double ph = (double)((k0 * j0) % m0) / (double)m0 +
                                    (double)((k1 * j1) % n1) / (double)n1;
                        s += x[(b * m0 + j0) * n1 + j1] * cexp(sign * 2 * M_PI * I * ph);
                    }
                y[(b * m0 + k0) * n1 + k1] = s * scale;
            }
}

static double complex cval(int64_t i)
{
    return sin(0.7 * (double)i + 0.3) + I * cos(1.3 * (double)i);
}

static DevValue *run_text(const char *txt, DevValue *arg, IrStatus want)
{
    IrModule *m = parse_ok(txt);
    IrDiag d = {0};
    DevValue *out = NULL;
    IrStatus st = exec_module(m, 1, &arg, &out, &d);
    if (st != want)
        print_message("status %d: %s\n", st, d.msg ? d.msg : "");
    assert_int_equal(st, want);
    ir_diag_clear(&d);
    ir_module_free(m);
    return out;
}

/* c64/c128 FFT and IFFT over 1 and 2 dims of [2, n0, n1] for uneven sizes,
 * and a length-1 transform (the identity). */
static void check_c2c(const char *ty, int64_t n0, int64_t n1, int rank, bool inverse)
{
    char txt[512];
    snprintf(txt, sizeof txt, "HloModule t\nENTRY e {\n  x = %s[2,%lld,%lld] parameter(0)\n"
             "  ROOT f = %s[2,%lld,%lld] fft(x), fft_type=%s, fft_length={%s%lld}\n}\n", ty,
             (long long)n0, (long long)n1, ty, (long long)n0, (long long)n1,
             inverse ? "IFFT" : "FFT", rank == 2 ? (n0 == 1 ? "1," : n0 == 3 ? "3," : "5,") : "",
             (long long)n1);
    bool dbl = ty[1] == '1';
    int64_t dims[3] = {2, n0, n1}, n = 2 * n0 * n1;
    DevValue *x = val(dbl ? IR_C128 : IR_C64, 3, dims, NULL);
    double complex xs[512], want[512];
    for (int64_t i = 0; i < n; i++) {
        xs[i] = cval(i);
        if (dbl)
            ((double complex *)x->data)[i] = xs[i];
        else
            ((float complex *)x->data)[i] = (float complex)xs[i];
        if (!dbl)
            xs[i] = (float complex)xs[i];
    }
    dft(xs, want, 2, n0, n1, rank, inverse ? 1 : -1);
    DevValue *r = run_text(txt, x, IR_OK);
    double tol = dbl ? 1e-12 : 1e-5;
    for (int64_t i = 0; i < n; i++) {
        double complex got = dbl ? ((double complex *)r->data)[i] : ((float complex *)r->data)[i];
        if (cabs(got - want[i]) > tol * (double)(n0 * n1)) {
            print_message("%s %lldx%lld rank %d: element %lld %g%+gi, DFT %g%+gi\n", ty,
                          (long long)n0, (long long)n1, rank, (long long)i, creal(got), cimag(got),
                          creal(want[i]), cimag(want[i]));
            fail();
        }
    }
    dev_value_unref(r);
    dev_value_unref(x);
}

static void test_c2c(void **state)
{
    (void)state;
    const int64_t n0s[3] = {1, 3, 5}, n1s[3] = {1, 7, 12};
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int rank = 1; rank <= 2; rank++)
                    for (int inv = 0; inv < 2; inv++)
                        check_c2c(t ? "c128" : "c64", n0s[a], n1s[b], rank, inv);
}

/* RFFT of a real f64[5] is the first 3 bins of the complex DFT; IRFFT of
 * those bins, n = 5, gives the input back (the imaginary part of the DC
 * bin is ignored: it is set to 9 here). */
static void test_rfft_irfft(void **state)
{
    (void)state;
    int64_t d5[1] = {5};
    const double x5[5] = {1, -2, 0.5, 3, -1};
    DevValue *x = val(IR_F64, 1, d5, x5);
    DevValue *r = run_text("HloModule t\nENTRY e {\n  x = f64[5] parameter(0)\n"
                           "  ROOT f = c128[3] fft(x), fft_type=RFFT, fft_length={5}\n}\n", x, IR_OK);
    double complex xs[5], want[5];
    for (int i = 0; i < 5; i++)
        xs[i] = x5[i];
    dft(xs, want, 1, 1, 5, 1, -1);
    double complex *got = (double complex *)r->data;
    for (int i = 0; i < 3; i++)
        assert_true(cabs(got[i] - want[i]) < 1e-12);
    got[0] += 9 * I;
    DevValue *back = run_text("HloModule t\nENTRY e {\n  x = c128[3] parameter(0)\n"
                              "  ROOT f = f64[5] fft(x), fft_type=IRFFT, fft_length={5}\n}\n", r, IR_OK);
    for (int i = 0; i < 5; i++)
        assert_true(fabs(((double *)back->data)[i] - x5[i]) < 1e-12);
    dev_value_unref(back);
    dev_value_unref(r);
    dev_value_unref(x);
}

/* An empty batch: nothing to transform, an empty result. */
static void test_empty(void **state)
{
    (void)state;
    int64_t d[2] = {0, 4};
    DevValue *x = val(IR_C64, 2, d, NULL);
    DevValue *r = run_text("HloModule t\nENTRY e {\n  x = c64[0,4] parameter(0)\n"
                           "  ROOT f = c64[0,4] fft(x), fft_type=FFT, fft_length={4}\n}\n", x, IR_OK);
    assert_int_equal(dev_value_elements(r), 0);
    dev_value_unref(r);
    dev_value_unref(x);
}

/* Two threads, each through 24 shapes (more than the 16 cached plans, so
 * entries are evicted while the other thread may run its own). */
static void *fft_thread(void *arg)
{
    int id = *(int *)arg, bad = 0;
    for (int round = 0; round < 3; round++)
        for (int64_t n = 2 + id; n < 26 + id; n++) {
            char txt[256];
            snprintf(txt, sizeof txt, "HloModule t\nENTRY e {\n  x = c128[3,%lld] parameter(0)\n"
                     "  ROOT f = c128[3,%lld] fft(x), fft_type=FFT, fft_length={%lld}\n}\n",
                     (long long)n, (long long)n, (long long)n);
            IrParseOptions o = ir_default_parse_options();
            IrModule *m = NULL;
            IrDiag d = {0};
            if (ir_parse("t.hlo", txt, strlen(txt), &o, &m, &d) != IR_OK)
                return (void *)1;
            int64_t dims[2] = {3, n};
            IrShape s = {.type = IR_C128, .rank = 2, .dims = dims};
            DevValue *x = dev_value_new(&s), *r = NULL;
            double complex xs[96], want[96];
            for (int64_t i = 0; i < 3 * n; i++)
                ((double complex *)x->data)[i] = xs[i] = cval(i + id);
            dft(xs, want, 1, 3, n, 1, -1);
            DevExecOptions opt = {0};
            if (dev_execute(m, m->entry, 1, &x, &opt, &r, &d) != IR_OK)
                bad = 1;
            for (int64_t i = 0; r && i < 3 * n; i++)
                bad |= cabs(((double complex *)r->data)[i] - want[i]) > 1e-10;
            dev_value_unref(r);
            dev_value_unref(x);
            ir_diag_clear(&d);
            ir_module_free(m);
        }
    return (void *)(intptr_t)bad;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[2];
    int ids[2] = {0, 1};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fft_thread, &ids[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
}

/* Every allocation of an IRFFT run fails in turn: IR_ENOMEM with a
 * message, nothing leaked (the asan build checks), then success. */
static void test_oom(void **state)
{
    (void)state;
    IrModule *m = parse_ok("HloModule t\nENTRY e {\n  x = c64[2,3] parameter(0)\n"
                           "  ROOT f = f32[2,4] fft(x), fft_type=IRFFT, fft_length={4}\n}\n");
    int64_t d[2] = {2, 3};
    DevValue *x = val(IR_C64, 2, d, NULL);
    for (long n = 1;; n++) {
        IrDiag dg = {0};
        DevValue *r = NULL;
        ts_fail_alloc_after(n);
        IrStatus st = exec_module(m, 1, &x, &r, &dg);
        ts_fail_alloc_after(0);
        ir_diag_clear(&dg);
        if (st == IR_OK) {
            dev_value_unref(r);
            break;
        }
        assert_int_equal(st, IR_ENOMEM);
        assert_true(n < 100);
    }
    dev_value_unref(x);
    ir_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c2c),
        cmocka_unit_test(test_rfft_irfft),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
