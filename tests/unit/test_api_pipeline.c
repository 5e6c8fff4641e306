/*
 * test_api_pipeline.c: the whole pipeline through the public API alone
 * (only tessel.h is included), as a program embedding libtessel would use
 * it: examples/mlp.hlo and tests/models/mlp_megatron.hlo (for 2 and 3
 * partitions: even and uneven) are compiled, the plan saved and loaded,
 * the loaded plan run in process on arrays in memory; its outputs must
 * equal ts_plan_run_reference's and a computation of tanh(x . W1) . W2
 * written here, within the oracle's f32 tolerance (DESIGN.md: 1e-4 of the
 * largest magnitude). Then the error paths: a truncated plan file is
 * TS_EINPUT naming the file and a line; an input array of the wrong shape,
 * or whose nbytes disagree with its shape, is TS_EINPUT. Last, aliases
 * as leaves and input keys as leaves (ts_plan_alias_leaves,
 * ts_plan_input_key) on a tuple parameter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessel.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessel_test_api_pipeline_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ts_shutdown();
    return system(cmd) == 0 ? 0 : -1;
}

/* Fail with the formatted diag when st is not TS_OK. */
static void ok(TsStatus st, TsDiag *d)
{
    if (st != TS_OK) {
        char *s = ts_diag_format(d);
        fail_msg("status %d: %s", (int)st, s ? s : "(no message)");
    }
}

/* The file at path with "@N" replaced by n and "@D" by 0,1,..,n-1 (the
 * templates of tests/models). Heap string. */
static char *read_model(const char *path, int n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char raw[1 << 16];
    size_t len = fread(raw, 1, sizeof raw - 1, f);
    fclose(f);
    raw[len] = 0;
    char devs[64] = "";
    for (int i = 0; i < n; i++)
        snprintf(devs + strlen(devs), sizeof devs - strlen(devs), i ? ",%d" : "%d", i);
    char *out = malloc(2 * len + 1024);
    assert_non_null(out);
    char *o = out;
    for (const char *p = raw; *p; p++) {
        if (p[0] == '@' && p[1] == 'N') {
            o += sprintf(o, "%d", n);
            p++;
        } else if (p[0] == '@' && p[1] == 'D') {
            o += sprintf(o, "%s", devs);
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

/* y[m,n] = tanh(x[m,k] . w1[k,h]) . w2[h,n], in double. */
static void mlp(const float *x, const float *w1, const float *w2, int64_t m, int64_t k, int64_t h, int64_t n,
                double *y)
{
    double *a = calloc((size_t)(m * h), sizeof *a);
    assert_non_null(a);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < h; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += (double)x[i * k + l] * w1[l * h + j];
            a[i * h + j] = tanh(s);
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < h; l++)
                s += a[i * h + l] * w2[l * n + j];
            y[i * n + j] = s;
        }
    free(a);
}

/* got within 1e-4 of want's largest magnitude; returns the largest error. */
static double check_close(const float *got, const double *want, size_t n, const char *what)
{
    double scale = 0, err = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fabs((double)got[i] - want[i]));
    if (!(err <= 1e-4 * scale))
        fail_msg("%s: max error %g > 1e-4 x %g", what, err, scale);
    return err;
}

/* A TsOutputs' only output, an f32 matrix of rows x cols, copied out. */
static float *read_f32(const TsOutputs *out, int64_t rows, int64_t cols)
{
    TsDiag d = {0};
    assert_int_equal(ts_outputs_count(out), 1);
    TsArrayInfo info;
    ok(ts_outputs_info(out, 0, &info, &d), &d);
    assert_string_equal(info.dtype, "<f4");
    assert_string_equal(info.type, "f32");
    assert_int_equal(info.rank, 2);
    assert_int_equal(info.dims[0], rows);
    assert_int_equal(info.dims[1], cols);
    assert_int_equal(info.nbytes, (size_t)(rows * cols) * sizeof(float));
    float *y = malloc(info.nbytes);
    assert_non_null(y);
    ok(ts_outputs_read(out, 0, y, info.nbytes, &d), &d);
    /* a buffer of another size is refused */
    assert_int_equal(ts_outputs_read(out, 0, y, info.nbytes - 4, &d), TS_EINPUT);
    ts_diag_clear(&d);
    return y;
}

/* Compile an MLP model (parameters x[m,k], w1[k,h], w2[h,n]) for n
 * partitions, save, load, run the loaded plan, compare. */
static void pipeline(const char *name, const char *text, int64_t parts, int64_t m, int64_t k, int64_t h, int64_t n)
{
    TsDiag d = {0};
    TsModule *mod = NULL;
    TsPlan *plan = NULL, *loaded = NULL;
    ok(ts_module_parse(name, text, strlen(text), NULL, &mod, &d), &d);
    assert_int_equal(ts_module_num_parameters(mod), 3);
    TsCompileOptions co = {.num_partitions = parts};
    ok(ts_compile(mod, &co, &plan, &d), &d);
    assert_int_equal(ts_plan_num_partitions(plan), parts);
    assert_int_equal(ts_plan_hosts(plan), 1);
    assert_false(ts_plan_from_file(plan));

    char path[128];
    snprintf(path, sizeof path, "%s/%s.%d.plan", dir, ts_module_name(mod), (int)parts);
    ok(ts_plan_save(plan, path, &d), &d);
    ok(ts_plan_load(path, NULL, &loaded, &d), &d);
    assert_true(ts_plan_from_file(loaded));
    assert_int_equal(ts_plan_num_partitions(loaded), parts);

    /* the inputs, as the loaded plan describes them */
    int64_t shape[3][2] = {{m, k}, {k, h}, {h, n}};
    const char *names[3] = {"x", "w1", "w2"};
    assert_int_equal(ts_plan_num_inputs(loaded), 3);
    assert_int_equal(ts_plan_num_outputs(loaded), 1);
    float *vals[3];
    TsArray arr[3];
    TsInput in[3];
    for (int i = 0; i < 3; i++) {
        TsArrayInfo info;
        ok(ts_plan_input_info(loaded, i, &info, &d), &d);
        assert_string_equal(info.name, names[i]);
        assert_string_equal(info.dtype, "<f4");
        assert_int_equal(info.rank, 2);
        assert_int_equal(info.dims[0], shape[i][0]);
        assert_int_equal(info.dims[1], shape[i][1]);
        size_t count = (size_t)(shape[i][0] * shape[i][1]);
        assert_int_equal(info.nbytes, count * sizeof(float));
        vals[i] = malloc(info.nbytes);
        assert_non_null(vals[i]);
        for (size_t j = 0; j < count; j++) /* in [-1, 1), not a pattern the dots could hide */
            vals[i][j] = (float)((double)((j * 7919 + (size_t)i * 104729) % 2003) / 1001.5 - 1.0);
        arr[i] = (TsArray){.dtype = "<f4", .rank = 2, .dims = shape[i], .data = vals[i], .nbytes = info.nbytes};
        in[i] = (TsInput){.key = names[i], .array = &arr[i]};
    }
    TsArrayInfo oinfo;
    ok(ts_plan_output_info(loaded, 0, &oinfo, &d), &d);
    assert_int_equal(oinfo.rank, 2);
    assert_int_equal(oinfo.dims[0], m);
    assert_int_equal(oinfo.dims[1], n);

    TsRunOptions ro = {.ninputs = 3, .inputs = in};
    TsOutputs *got = NULL, *ref = NULL;
    ok(ts_plan_run(loaded, &ro, &got, &d), &d);
    ok(ts_plan_run_reference(plan, &ro, &ref, &d), &d);
    /* a loaded plan has no module to run unpartitioned */
    TsOutputs *none = NULL;
    assert_int_equal(ts_plan_run_reference(loaded, &ro, &none, &d), TS_EINPUT);
    assert_null(none);
    ts_diag_clear(&d);

    float *y = read_f32(got, m, n), *yr = read_f32(ref, m, n);
    double *want = malloc((size_t)(m * n) * sizeof *want), *wantr = malloc((size_t)(m * n) * sizeof *wantr);
    assert_non_null(want);
    assert_non_null(wantr);
    mlp(vals[0], vals[1], vals[2], m, k, h, n, want);
    for (int64_t i = 0; i < m * n; i++)
        wantr[i] = yr[i];
    double e1 = check_close(y, wantr, (size_t)(m * n), "loaded plan vs ts_plan_run_reference");
    double e2 = check_close(y, want, (size_t)(m * n), "loaded plan vs tanh(x.w1).w2 in double");
    check_close(yr, want, (size_t)(m * n), "reference vs tanh(x.w1).w2 in double");
    printf("%s on %d partitions: saved, loaded, run: max error %.3g vs reference, %.3g vs C\n", name, (int)parts,
           e1, e2);

    /* error: x of the wrong shape */
    int64_t bad[2] = {m, k - 1};
    TsArray xbad = {.dtype = "<f4", .rank = 2, .dims = bad, .data = vals[0], .nbytes = (size_t)(m * (k - 1)) * 4};
    TsInput inbad[3] = {{.key = "x", .array = &xbad}, in[1], in[2]};
    TsRunOptions robad = {.ninputs = 3, .inputs = inbad};
    TsOutputs *o = NULL;
    assert_int_equal(ts_plan_run(loaded, &robad, &o, &d), TS_EINPUT);
    assert_null(o);
    assert_non_null(d.msg);
    printf("  wrong shape: %s\n", d.msg);
    ts_diag_clear(&d);
    /* error: nbytes that disagree with the shape */
    TsArray xshort = arr[0];
    xshort.nbytes -= 4;
    inbad[0].array = &xshort;
    assert_int_equal(ts_plan_run(loaded, &robad, &o, &d), TS_EINPUT);
    assert_null(o);
    ts_diag_clear(&d);

    ts_outputs_free(got);
    ts_outputs_free(ref);
    free(y);
    free(yr);
    free(want);
    free(wantr);
    for (int i = 0; i < 3; i++)
        free(vals[i]);
    ts_plan_free(loaded);
    ts_plan_free(plan);
    ts_module_free(mod);
}

static void test_mlp_example(void **state)
{
    (void)state;
    char *text = read_model(TESSEL_SRC_DIR "/examples/mlp.hlo", 2);
    pipeline("mlp.hlo", text, 2, 8, 16, 32, 8);
    free(text);
}

static void test_mlp_megatron(void **state)
{
    (void)state;
    for (int parts = 2; parts <= 3; parts++) {
        char *text = read_model(TESSEL_SRC_DIR "/tests/models/mlp_megatron.hlo", parts);
        pipeline("mlp_megatron.hlo", text, parts, 16, 24, 40, 24);
        free(text);
    }
}

/* A plan file cut in half: TS_EINPUT naming the file and a line. */
static void test_truncated_plan(void **state)
{
    (void)state;
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *p = NULL;
    ok(ts_module_load(TESSEL_SRC_DIR "/examples/mlp.hlo", &m, &d), &d);
    ok(ts_compile(m, NULL, &p, &d), &d);
    assert_int_equal(ts_plan_num_partitions(p), 2); /* the module header's */
    char *text = ts_plan_file_text(p);
    assert_non_null(text);
    size_t len = strlen(text), cut = len / 2;
    while (cut < len && text[cut] != '\n')
        cut++;
    char path[128];
    snprintf(path, sizeof path, "%s/cut.plan", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(text, 1, cut + 1, f);
    fclose(f);
    TsPlan *q = NULL;
    assert_int_equal(ts_plan_load(path, NULL, &q, &d), TS_EINPUT);
    assert_null(q);
    assert_int_equal(d.status, TS_EINPUT);
    assert_non_null(d.file);
    assert_string_equal(d.file, path);
    assert_true(d.line > 0);
    char *s = ts_diag_format(&d);
    assert_non_null(s);
    printf("truncated plan: %s", s);
    ts_free(s);
    ts_diag_clear(&d);
    /* the whole text is fine */
    ok(ts_plan_parse("mlp.plan", text, len, NULL, &q, &d), &d);
    ts_plan_free(q);
    ts_free(text);
    ts_plan_free(p);
    ts_module_free(m);
}

/* Aliases as leaves (ts_plan_alias_leaves) and input keys as (parameter,
 * leaf) (ts_plan_input_key), what `tessel run --checkpoint-every` binds a
 * tuple parameter's state leaves by: a sub-tuple of p = ((a, b), c) and
 * the array x. */
static void test_alias_leaves(void **state)
{
    (void)state;
    static const char text[] =
        "HloModule al, input_output_alias={ {0}: (1, {0}, may-alias), {1}: (0, {}, may-alias) }\n\n"
        "ENTRY main {\n"
        "  x = f32[4] parameter(0)\n"
        "  p = ((f32[4], f32[4]), f32[4]) parameter(1)\n"
        "  ab = (f32[4], f32[4]) get-tuple-element(p), index=0\n"
        "  a = f32[4] get-tuple-element(ab), index=0\n"
        "  b = f32[4] get-tuple-element(ab), index=1\n"
        "  c = f32[4] get-tuple-element(p), index=1\n"
        "  a1 = f32[4] add(a, c)\n"
        "  b1 = f32[4] add(b, x)\n"
        "  ab1 = (f32[4], f32[4]) tuple(a1, b1)\n"
        "  x1 = f32[4] multiply(x, c)\n"
        "  ROOT r = ((f32[4], f32[4]), f32[4]) tuple(ab1, x1)\n"
        "}\n";
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *p = NULL;
    ok(ts_module_parse("al.hlo", text, strlen(text), NULL, &m, &d), &d);
    ok(ts_compile(m, NULL, &p, &d), &d);
    assert_int_equal(ts_plan_num_aliases(p), 2);
    int32_t out = -9, param = -9, leaf = -9, count = -9;
    ok(ts_plan_alias_leaves(p, 0, &out, &param, &leaf, &count, &d), &d);
    assert_int_equal(out, 0); /* output {0}: leaves 0 and 1 ... */
    assert_int_equal(param, 1);
    assert_int_equal(leaf, 0); /* ... into p's leaves 0 (a) and 1 (b) */
    assert_int_equal(count, 2);
    ok(ts_plan_alias_leaves(p, 1, &out, &param, &leaf, &count, &d), &d);
    assert_int_equal(out, 2);
    assert_int_equal(param, 0);
    assert_int_equal(leaf, -1); /* x is an array */
    assert_int_equal(count, 1);
    assert_int_equal(ts_plan_alias_leaves(p, 2, &out, &param, &leaf, &count, &d), TS_EINPUT);
    ts_diag_clear(&d);
    /* the whole-array form refuses the tuple's, and gives x's */
    assert_int_equal(ts_plan_alias(p, 0, &out, &param, &d), TS_EUNSUPPORTED);
    ts_diag_clear(&d);
    ok(ts_plan_alias(p, 1, &out, &param, &d), &d);
    assert_int_equal(out, 2);
    assert_int_equal(param, 0);
    static const struct {
        const char *key;
        int32_t param, leaf;
    } keys[] = {{"x", 0, -1}, {"0", 0, -1}, {"0.0", 0, -1}, {"1.1", 1, 1}, {"p.2", 1, 2}, {"p.0", 1, 0}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        ok(ts_plan_input_key(p, keys[i].key, &param, &leaf, &d), &d);
        assert_int_equal(param, keys[i].param);
        assert_int_equal(leaf, keys[i].leaf);
    }
    static const char *const bad[] = {"p", "1", "1.3", "0.1", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ts_plan_input_key(p, bad[i], &param, &leaf, &d), TS_EINPUT);
        ts_diag_clear(&d);
    }
    ts_plan_free(p);
    ts_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_example),
        cmocka_unit_test(test_mlp_megatron),
        cmocka_unit_test(test_truncated_plan),
        cmocka_unit_test(test_alias_leaves),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
