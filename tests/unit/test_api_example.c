/*
 * test_api_example.c: the example of include/tessel.h's top comment,
 * compiled and run exactly as written (the block between BEGIN and END is
 * a verbatim copy: keep it so when the header's example changes). It runs
 * in a fresh directory holding a link `examples` to the source tree's
 * examples/, so its relative paths (examples/mlp.hlo, mlp.plan) work from
 * anywhere.
 *
 * Checked around it without touching it: ts_outputs_read is wrapped (a
 * macro over the block) to keep what the example read, which must be
 * tanh(x . W1) . W2 for the example's x and the deterministic random W1,
 * W2 (DESIGN.md: splitmix64, seed 1, leaves 1 and 2) computed here, within
 * the oracle's f32 tolerance; and the mlp.plan it saved must load.
 * test_verbatim checks that the block is still the header's example, line
 * for line (the header's " * " and this file's indent taken off).
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

/* What the example's ts_outputs_read call did. */
static int reads;
static TsStatus read_status = TS_EINTERNAL;
static float read_y[8 * 8];

static TsStatus example_read(const TsOutputs *o, int32_t i, void *buf, size_t nbytes, TsDiag *d)
{
    TsStatus st = ts_outputs_read(o, i, buf, nbytes, d);
    reads++;
    read_status = st;
    if (st == TS_OK && nbytes == sizeof read_y)
        memcpy(read_y, buf, nbytes);
    return st;
}

static void example(void)
{
#define ts_outputs_read example_read
    /* BEGIN: include/tessel.h's example, verbatim */
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *plan = NULL;
    TsOutputs *out = NULL;
    TsCompileOptions co = {.num_partitions = 2};
    float x[8 * 16];                          // the model's parameter 0
    for (int i = 0; i < 8 * 16; i++)
        x[i] = (float)i / 128;
    int64_t dims[] = {8, 16};
    TsArray xa = {.dtype = "<f4", .rank = 2, .dims = dims, .data = x, .nbytes = sizeof x};
    TsInput in[] = {{.key = "x", .array = &xa}};
    TsRunOptions ro = {.ninputs = 1, .inputs = in, .random = true, .seed = 1};
    if (ts_module_load("examples/mlp.hlo", &m, &d) != TS_OK ||
        ts_compile(m, &co, &plan, &d) != TS_OK ||
        ts_plan_save(plan, "mlp.plan", &d) != TS_OK ||
        ts_plan_run(plan, &ro, &out, &d) != TS_OK) {
        char *s = ts_diag_format(&d);         // "tessel: mlp.hlo:3:7: error: ..."
        fputs(s ? s : "tessel: out of memory\n", stderr);
        ts_free(s);
    } else {
        float y[8 * 8];                       // output 0: f32[8,8]
        ts_outputs_read(out, 0, y, sizeof y, &d);
    }
    ts_outputs_free(out);
    ts_plan_free(plan);
    ts_module_free(m);
    ts_diag_clear(&d);
    ts_shutdown();
    /* END */
#undef ts_outputs_read
}

static uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* DESIGN.md's random input: leaf k element i for SEED, as f32. */
static float random_f32(uint64_t seed, uint64_t leaf, uint64_t i)
{
    uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ leaf) ^ i);
    return (float)((double)(h >> 11) * 0x1p-53 * 2 - 1);
}

static void test_example(void **state)
{
    (void)state;
    char dir[64], cwd[4096];
    snprintf(dir, sizeof dir, "/tmp/tessel_test_api_example_XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    assert_int_equal(symlink(TESSEL_SRC_DIR "/examples", "examples"), 0);

    assert_int_equal(splitmix64(0), 0xe220a8397b1dcdafull); /* DESIGN.md's test vector */
    example();
    assert_int_equal(reads, 1);
    assert_int_equal(read_status, TS_OK);

    /* y = tanh(x . W1) . W2, x as the example fills it, W1 and W2 drawn */
    float x[8 * 16], w1[16 * 32], w2[32 * 8];
    for (int i = 0; i < 8 * 16; i++)
        x[i] = (float)i / 128;
    for (int i = 0; i < 16 * 32; i++)
        w1[i] = random_f32(1, 1, (uint64_t)i);
    for (int i = 0; i < 32 * 8; i++)
        w2[i] = random_f32(1, 2, (uint64_t)i);
    double a[8 * 32], want[8 * 8], scale = 0, err = 0;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 32; j++) {
            double s = 0;
            for (int l = 0; l < 16; l++)
                s += (double)x[i * 16 + l] * w1[l * 32 + j];
            a[i * 32 + j] = tanh(s);
        }
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            double s = 0;
            for (int l = 0; l < 32; l++)
                s += a[i * 32 + l] * w2[l * 8 + j];
            want[i * 8 + j] = s;
            scale = fmax(scale, fabs(s));
        }
    for (int i = 0; i < 64; i++)
        err = fmax(err, fabs((double)read_y[i] - want[i]));
    printf("example: y[0,0] %g (expected %g), max error %.3g of %.3g\n", (double)read_y[0], want[0], err, scale);
    assert_true(scale > 0);
    assert_true(err <= 1e-4 * scale);

    /* the plan the example saved loads, for 2 partitions */
    TsDiag d = {0};
    TsPlan *p = NULL;
    if (ts_plan_load("mlp.plan", NULL, &p, &d) != TS_OK) {
        char *s = ts_diag_format(&d);
        fail_msg("mlp.plan: %s", s ? s : "?");
    }
    assert_int_equal(ts_plan_num_partitions(p), 2);
    ts_plan_free(p);
    ts_shutdown();

    assert_int_equal(unlink("mlp.plan"), 0);
    assert_int_equal(unlink("examples"), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The lines of `path` from the first containing `from` to the first after
 * it containing `to`, each without its first `skip` characters, joined by
 * newlines, into buf. */
static void excerpt(const char *path, const char *from, const char *to, size_t skip, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("%s: cannot open", path);
    char line[1024];
    bool in = false;
    size_t n = 0;
    buf[0] = 0;
    while (fgets(line, sizeof line, f)) {
        if (!in && strstr(line, from))
            in = true;
        if (!in)
            continue;
        const char *l = strlen(line) > skip ? line + skip : "\n";
        n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s", l);
        if (strstr(line, to))
            break;
    }
    fclose(f);
    assert_true(in);
    assert_true(n < size);
}

static void test_verbatim(void **state)
{
    (void)state;
    static char header[16384], copy[16384];
    excerpt(TESSEL_SRC_DIR "/include/tessel.h", "TsDiag d = {0};", "ts_shutdown();", 7, header, sizeof header);
    excerpt(TESSEL_SRC_DIR "/tests/unit/test_api_example.c", "TsDiag d = {0};", "ts_shutdown();", 4, copy,
            sizeof copy);
    assert_string_equal(copy, header);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verbatim),
        cmocka_unit_test(test_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
