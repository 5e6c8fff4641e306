/*
 * test_k_norm.c: batch-norm-training, -inference and -grad
 * (device/k_norm.c), called directly on instructions built here.
 *
 * Expected values come from NumPy (float64), computed by this script and
 * pasted below: training and inference by the formulas of XLA's
 * operation_semantics.md (np.mean / np.var over axes (0, 2)), and the
 * gradients NOT from the closed form the kernel uses but by central
 * differences (h = 1e-6) of L = sum(training(x, gamma, beta).y * dy), so
 * the kernel's derivation is checked independently:
 *
 *   rng = np.random.default_rng(7)
 *   x = rng.standard_normal((2,3,5)).round(3); dy = (same, next draw)
 *   g = [1.5,-0.5,2.0]; b = [0.25,0.0,-1.0]; eps = float(np.float32(0.001))
 *   (XLA's epsilon is an f32 attribute); feature_index 1
 *   imu = [0.1,-0.2,0.3]; ivar = [0.5,1.5,2.0]     (inference statistics)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "attrs_test.h"
#include "device/device.h"
#include "kernel_call.h"
#include "kernel_test.h"

#include <math.h>
#include <stdio.h>

static const double X[30] = {0.001, 0.29899999999999999, -0.27400000000000002, -0.89100000000000001, -0.45500000000000002, -0.99199999999999999, 0.059999999999999998, 1.3400000000000001, -0.49199999999999999, -0.62, 0.48999999999999999, 0.35699999999999998, 0.105, -0.93000000000000005, -0.029000000000000001, 0.69499999999999995, -1.3440000000000001, -0.45800000000000002, -1.901, -1.29, -1.8420000000000001, -0.23499999999999999, -1.2669999999999999, 0.27100000000000002, 0.157, -0.187, -2.5169999999999999, -0.53900000000000003, -0.049000000000000002, 0.113};
static const double DY[30] = {-1.53, -0.47799999999999998, -0.97899999999999998, -0.80900000000000005, 1.0609999999999999, -0.80800000000000005, -0.033000000000000002, 0.88400000000000001, -0.58399999999999996, -0.112, 0.11, 0.064000000000000001, -1.2250000000000001, 0.075999999999999998, 1.359, -1.5469999999999999, 0.85899999999999999, 0.11899999999999999, -0.64100000000000001, 2, 0.76200000000000001, -1.1990000000000001, 0.074999999999999997, 0.57699999999999996, -0.189, 0.68300000000000005, -0.067000000000000004, 0.66700000000000004, 1.4390000000000001, -0.67600000000000005};
static const double GAMMA[3] = {1.5, -0.5, 2};
static const double BETA[3] = {0.25, 0, -1};
static const double Y[30] = {1.3588505268668292, 1.9459817582213335, 0.81703479323431683, -0.39860268913390207, 0.46042152855255403, 0.36967207215572584, -0.24762161023764492, -0.99870137588737362, 0.076281538698800583, 0.15138951526377345, 0.94473854416793923, 0.62486440816208222, 0.018787097835195388, -2.4704589981502325, -0.30349210686243488, 2.726196414652152, -1.2911209703540045, 0.45451081145838118, -2.3885441108387662, -1.1847280626588927, 0.86843597903249881, -0.074521195498059023, 0.53103686555703467, -0.37143241535646743, -0.30453937372828843, -0.68349296016262584, -6.2873030119945552, -1.5300771396668487, -0.35159348069790197, 0.038027647369382356};
static const double MU[3] = {-0.56180000000000008, -0.36199999999999999, -0.31859999999999999};
static const double VAR[3] = {0.5786217600000001, 0.7250856, 0.69052043999999979};
static const double IMU[3] = {0.10000000000000001, -0.20000000000000001, 0.29999999999999999};
static const double IVAR[3] = {0.5, 1.5, 2};
static const double YI[30] = {0.040198982219591478, 0.67172123776061898, -0.54258162272598753, -1.8501293800038869, -0.92615722089016872, 0.32322492235243661, -0.10610919168135545, -0.62849290457418228, 0.11916878450367611, 0.17140715579295879, -0.73136657311632536, -0.9194099719348976, -1.2757027275911397, -2.7390479740364202, -1.4651599865512051, 1.510925308882253, -2.8101279765142415, -0.93251482748957515, -3.9905236018040142, -2.6956910577249271, 0.67012035669532943, 0.014283929649413224, 0.43545579816925484, -0.19222088185353237, -0.14569608242401497, -1.6885498889071029, -4.9828440185858494, -2.1862286587126478, -1.4934371893810656, -1.2643918464591954};
static const double DX[30] = {-1.7940107248648474, 0.72199730194455469, -1.117509876635836, -1.7004428034539387, 2.6325150006556441, 0.38520623846238777, 0.017485861647514866, -0.41469434020058316, 0.29513369970146641, 0.0075832327084413009, -0.36114018353572419, -0.46498582850773573, -3.552258820427312, -0.37044431522303967, 2.6692772312486568, -0.79508298611585815, 0.91201521357220372, 0.77208691529051521, -2.8719585252190427, 3.2403904803857131, -0.60636295184934852, 0.6772663967424819, -0.15567297495522325, -0.32299395869017644, 0.11704879288032544, 1.0515141566358466, -0.63337827160836468, 1.0309970068789198, 2.8627034041051047, -2.2322843769018164};
static const double DG[3] = {-5.7484547753006154, 1.2014224992640266, 0.17645507899288759};
static const double DB[3] = {-1.945000001057906, -0.62699999947568585, 2.4300000012189571};

static const int64_t XD[3] = {2, 3, 5}, FD[1] = {3};
static const float EPS = 0.001f;

static DevValue *from(IrType t, int32_t rank, const int64_t *dims, const double *v)
{
    DevValue *r = val(t, rank, dims, NULL);
    for (int64_t i = 0; i < dev_value_elements(r); i++)
        dev_store_f64(t, r->data, i, v[i]);
    return r;
}

static void expect_near(const DevValue *v, const double *want, int64_t n, double rel)
{
    assert_int_equal(dev_value_elements(v), n);
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double got = dev_load_f64(v->shape.type, v->data, i);
        if (!(fabs(got - want[i]) <= rel * scale)) {
            print_message("element %lld: got %.9g want %.9g (tolerance %g)\n", (long long)i, got,
                          want[i], rel * scale);
            fail();
        }
    }
}

/* A result (x's shape, [F], [F]) in type t. */
static void tuple3(KCall *kc, IrType t)
{
    const IrType ts[3] = {t, t, t};
    const int32_t rs[3] = {3, 1, 1};
    const int64_t *ds[3] = {XD, FD, FD};
    kc_tuple(kc, 3, ts, rs, ds);
}

static DevValue *run(KCall *kc, KernelFn fn, int n, DevValue **ops)
{
    test_x(&kc->ins.a)->epsilon = EPS;
    test_x(&kc->ins.a)->feature_index = 1;
    DevValue *r = NULL;
    IrStatus st = kc_run(kc, fn, n, ops, &r);
    if (st != IR_OK)
        print_message("status %d: %s\n", st, kc->d.msg ? kc->d.msg : "");
    assert_int_equal(st, IR_OK);
    for (int i = 0; i < n; i++)
        dev_value_unref(ops[i]);
    return r;
}

/* Tolerances: f64 to the double rounding of the formulas; the central
 * differences of the gradients are good to about 1e-8; f32 to its
 * rounding; bf16 (8 bits) to its rounding of inputs and outputs. */
static double tol(IrType t, bool grad)
{
    return t == IR_F64 ? (grad ? 1e-7 : 1e-12) : t == IR_F32 ? 1e-5 : 3e-2;
}

static const IrType TYPES[3] = {IR_F64, IR_F32, IR_BF16};

static void test_training(void **state)
{
    (void)state;
    for (int ti = 0; ti < 3; ti++) {
        IrType t = TYPES[ti];
        KCall kc;
        kc_init(&kc, OP_BATCH_NORM_TRAINING, t, 0, NULL);
        tuple3(&kc, t);
        DevValue *ops[3] = {from(t, 3, XD, X), from(t, 1, FD, GAMMA), from(t, 1, FD, BETA)};
        DevValue *r = run(&kc, dev_k_batch_norm_training, 3, ops);
        assert_int_equal(r->nelems, 3);
        expect_near(r->elems[0], Y, 30, tol(t, false));
        expect_near(r->elems[1], MU, 3, tol(t, false));
        expect_near(r->elems[2], VAR, 3, tol(t, false));
        dev_value_unref(r);
        kc_free(&kc);
    }
}

static void test_inference(void **state)
{
    (void)state;
    for (int ti = 0; ti < 3; ti++) {
        IrType t = TYPES[ti];
        KCall kc;
        kc_init(&kc, OP_BATCH_NORM_INFERENCE, t, 3, XD);
        DevValue *ops[5] = {from(t, 3, XD, X), from(t, 1, FD, GAMMA), from(t, 1, FD, BETA),
                            from(t, 1, FD, IMU), from(t, 1, FD, IVAR)};
        DevValue *r = run(&kc, dev_k_batch_norm_inference, 5, ops);
        expect_near(r, YI, 30, tol(t, false));
        dev_value_unref(r);
        kc_free(&kc);
    }
}

static void test_grad(void **state)
{
    (void)state;
    for (int ti = 0; ti < 3; ti++) {
        IrType t = TYPES[ti];
        KCall kc;
        kc_init(&kc, OP_BATCH_NORM_GRAD, t, 0, NULL);
        tuple3(&kc, t);
        DevValue *ops[5] = {from(t, 3, XD, X), from(t, 1, FD, GAMMA), from(t, 1, FD, MU),
                            from(t, 1, FD, VAR), from(t, 3, XD, DY)};
        DevValue *r = run(&kc, dev_k_batch_norm_grad, 5, ops);
        expect_near(r->elems[0], DX, 30, tol(t, true));
        expect_near(r->elems[1], DG, 3, tol(t, true));
        expect_near(r->elems[2], DB, 3, tol(t, true));
        dev_value_unref(r);
        kc_free(&kc);
    }
}

/* Bad feature_index, a scale of the wrong size, an integer operand. */
static void test_refuses(void **state)
{
    (void)state;
    KCall kc;
    kc_init(&kc, OP_BATCH_NORM_INFERENCE, IR_F32, 3, XD);
    test_x(&kc.ins.a)->feature_index = 3;
    DevValue *ops[5] = {from(IR_F32, 3, XD, X), from(IR_F32, 1, FD, GAMMA), from(IR_F32, 1, FD, BETA),
                        from(IR_F32, 1, FD, IMU), from(IR_F32, 1, FD, IVAR)};
    DevValue *r;
    assert_int_equal(kc_run(&kc, dev_k_batch_norm_inference, 5, ops, &r), IR_EINPUT);
    assert_non_null(strstr(kc.d.msg, "feature_index=3"));
    assert_int_equal(kc.d.pos.line, 3);
    kc_free(&kc);
    kc_init(&kc, OP_BATCH_NORM_INFERENCE, IR_F32, 3, XD);
    test_x(&kc.ins.a)->feature_index = 2;   /* 5 features, but the vectors have 3 */
    assert_int_equal(kc_run(&kc, dev_k_batch_norm_inference, 5, ops, &r), IR_EINPUT);
    assert_non_null(strstr(kc.d.msg, "operand 1 must be a vector"));
    kc_free(&kc);
    for (int i = 0; i < 5; i++)
        dev_value_unref(ops[i]);
    kc_init(&kc, OP_BATCH_NORM_TRAINING, IR_S32, 3, XD);
    DevValue *iops[3] = {val(IR_S32, 3, XD, NULL), val(IR_S32, 1, FD, NULL), val(IR_S32, 1, FD, NULL)};
    assert_int_equal(kc_run(&kc, dev_k_batch_norm_training, 3, iops, &r), IR_EUNSUPPORTED);
    assert_non_null(strstr(kc.d.msg, "batch-norm-training of s32 is not supported"));
    kc_free(&kc);
    for (int i = 0; i < 3; i++)
        dev_value_unref(iops[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training),
        cmocka_unit_test(test_inference),
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
