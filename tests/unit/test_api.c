/*
 * test_api.c: the public API (include/tessel.h) used as a library user
 * would: only tessel.h is included. Loads the while_loop example, runs it
 * with an input file and with random inputs, and checks the error paths
 * (a missing file, a syntax error with its position, a missing input);
 * outputs are written all or nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessel.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tessel_test_api_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(ts_version(), TS_VERSION);
}

/* v = [1, 2, 3, 4] as a .npy written byte by byte: a 128-byte v1.0 header
 * (10 bytes preamble + 118 of dict, spaces and '\n'), then 4 floats. */
static void write_v(const char *path)
{
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
    unsigned char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(hdr + 10, dict, strlen(dict));
    hdr[127] = '\n';
    float v[4] = {1, 2, 3, 4};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(hdr, 1, sizeof hdr, f);
    fwrite(v, sizeof v[0], 4, f);
    fclose(f);
}

static void test_load_and_run(void **state)
{
    (void)state;
    TsDiag d = {0};
    TsModule *m = NULL;
    assert_int_equal(ts_module_load(TESSEL_SRC_DIR "/examples/while_loop.hlo", &m, &d), TS_OK);
    assert_string_equal(ts_module_name(m), "while_loop");
    assert_int_equal(ts_module_num_parameters(m), 1);
    char v[128], out[128];
    snprintf(v, sizeof v, "%s/v.npy", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    write_v(v);
    TsInput in[] = {{.key = "v", .path = v}};
    TsRunOptions ro = {.ninputs = 1, .inputs = in};
    TsOutputs *res = NULL;
    assert_int_equal(ts_run_reference(m, &ro, &res, &d), TS_OK);
    assert_int_equal(ts_outputs_write(res, out, &d), TS_OK);
    char *summary = ts_outputs_summary(res);
    /* five times v: (5, [5, 10, 15, 20]) */
    assert_string_equal(summary, "output 0: s32[] min 5 max 5 mean 5 first [5]\n"
                                 "output 1: f32[4] min 5 max 20 mean 12.5 first [5, 10, 15, 20]\n");
    ts_free(summary);
    /* the same values read into the caller's buffers */
    TsArrayInfo info;
    assert_int_equal(ts_outputs_count(res), 2);
    assert_int_equal(ts_outputs_info(res, 1, &info, &d), TS_OK);
    assert_string_equal(info.dtype, "<f4");
    assert_int_equal(info.rank, 1);
    assert_int_equal(info.dims[0], 4);
    float y[4];
    assert_int_equal(ts_outputs_read(res, 1, y, sizeof y, &d), TS_OK);
    assert_true(y[0] == 5 && y[1] == 10 && y[2] == 15 && y[3] == 20);
    assert_int_equal(ts_outputs_read(res, 1, y, 8, &d), TS_EINPUT); /* wrong size */
    ts_diag_clear(&d);
    ts_outputs_free(res);
    char o1[160];
    snprintf(o1, sizeof o1, "%s/output_1.npy", out);
    assert_int_equal(access(o1, R_OK), 0);
    /* the input as an array in memory instead of a file: the same result */
    float vv[4] = {1, 2, 3, 4};
    int64_t dims[1] = {4};
    TsArray va = {.dtype = "<f4", .rank = 1, .dims = dims, .data = vv, .nbytes = sizeof vv};
    TsInput ia[] = {{.key = "0", .array = &va}};
    TsRunOptions ra = {.ninputs = 1, .inputs = ia};
    assert_int_equal(ts_run_reference(m, &ra, &res, &d), TS_OK);
    assert_int_equal(ts_outputs_read(res, 1, y, sizeof y, &d), TS_OK);
    assert_true(y[0] == 5 && y[3] == 20);
    ts_outputs_free(res);
    /* an array of the wrong dtype or shape is refused, naming the parameter */
    TsArray bad = va;
    bad.dtype = "<f8";
    ia[0].array = &bad;
    assert_int_equal(ts_run_reference(m, &ra, &res, &d), TS_EINPUT);
    assert_null(res);
    assert_non_null(strstr(d.msg, "dtype <f8, expected <f4"));
    ts_diag_clear(&d);
    int64_t three[1] = {3};
    bad = va;
    bad.dims = three;
    bad.nbytes = 12;
    assert_int_equal(ts_run_reference(m, &ra, &res, &d), TS_EINPUT);
    assert_non_null(strstr(d.msg, "shape (3,), expected (4,)"));
    ts_diag_clear(&d);
    /* no input and no random: an error naming the parameter */
    TsRunOptions none = {0};
    assert_int_equal(ts_run_reference(m, &none, &res, &d), TS_EINPUT);
    assert_non_null(strstr(d.msg, "parameter 0 (v: f32[4])"));
    ts_diag_clear(&d);
    TsRunOptions rnd = {.random = true, .seed = 7};
    assert_int_equal(ts_run_reference(m, &rnd, &res, &d), TS_OK);
    ts_outputs_free(res);
    ts_module_free(m);
}

static void test_errors(void **state)
{
    (void)state;
    TsDiag d = {0};
    TsModule *m = (TsModule *)&d; /* must be reset to NULL */
    char path[128];
    snprintf(path, sizeof path, "%s/missing.hlo", dir);
    assert_int_equal(ts_module_load(path, &m, &d), TS_EINPUT);
    assert_null(m);
    assert_string_equal(d.file, path);
    ts_diag_clear(&d);
    snprintf(path, sizeof path, "%s/bad.hlo", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("HloModule bad\n\nENTRY %main (x: f32[4]) -> f32[4] {\n"
          "  %x = f32[4]{0} parameter(0)\n  ROOT %y = f32[4]{0} frobnicate(%x)\n}\n", f);
    fclose(f);
    assert_int_equal(ts_module_load(path, &m, &d), TS_EINPUT);
    assert_int_equal(d.line, 5);
    assert_true(d.col > 0);
    char *s = ts_diag_format(&d);
    char want[160];
    snprintf(want, sizeof want, "tessel: %s:5:", path);
    assert_memory_equal(s, want, strlen(want));
    assert_non_null(strstr(s, "frobnicate(%x)\n"));
    ts_free(s);
    ts_diag_clear(&d);
    assert_null(d.msg);
    ts_module_free(NULL);
}

/* ---- outputs written all or nothing (ts_outputs_write) ---- */

/* Parameters "a" f32[4] and "t.1" (s32[], f32[4]); the root is the tuple
 * of both: three output leaves. */
static const char TUPLE_MODULE[] = "HloModule t\n\nENTRY main {\n  a = f32[4] parameter(0)\n"
                                   "  t.1 = (s32[], f32[4]) parameter(1)\n"
                                   "  ROOT r = (f32[4], (s32[], f32[4])) tuple(a, t.1)\n}\n";

/* The names of DIR's entries that do not start with '.' (tessel's lock
 * and temporaries do), sorted, one per line; "" when DIR is empty or
 * missing. */
static void list_dir(const char *d, char *out, size_t cap)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | sort", d);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    pclose(p);
}

/* The 4-byte payload of a .npy file of one s32 (version 1.0: the header
 * length is bytes 8-9, little endian). */
static int32_t read_npy_s32(const char *path)
{
    unsigned char b[256];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    assert_true(n >= 10);
    size_t off = 10 + (size_t)(b[8] | b[9] << 8);
    assert_int_equal(n, off + 4);
    int32_t v;
    memcpy(&v, b + off, 4);
    return v;
}

static void test_outputs_all_or_nothing(void **state)
{
    (void)state;
    TsDiag d = {0};
    TsModule *m = NULL;
    assert_int_equal(ts_module_parse("t.hlo", TUPLE_MODULE, strlen(TUPLE_MODULE), NULL, &m, &d), TS_OK);
    /* DESIGN.md's random inputs, seed 7: leaf 0 (a) is f32 0.21878906
     * 0.92670345 -0.41471335 -0.79984224, leaf 1 (t.1's s32[]) is element
     * 0 of the s32 vector, 6. */
    TsRunOptions ro = {.random = true, .seed = 7};
    TsOutputs *res = NULL;
    assert_int_equal(ts_run_reference(m, &ro, &res, &d), TS_OK);
    assert_int_equal(ts_outputs_count(res), 3);
    char *s = ts_outputs_summary(res);
    assert_non_null(strstr(s, "output 0: f32[4] min -0.799842 max 0.926703 mean -0.0172658 first "
                              "[0.218789, 0.926703, -0.414713, -0.799842]\n"
                              "output 1: s32[] min 6 max 6 mean 6 first [6]\n"));
    ts_free(s);
    char out[128], path[192], got[512];
    snprintf(out, sizeof out, "%s/tuple_out", dir);
    assert_int_equal(ts_outputs_write(res, out, &d), TS_OK);
    list_dir(out, got, sizeof got);
    assert_string_equal(got, "output_0.npy\noutput_1.npy\noutput_2.npy\noutputs.json\n");
    snprintf(path, sizeof path, "%s/output_1.npy", out);
    assert_int_equal(read_npy_s32(path), 6);
    /* output_2.npy is a directory: its rename fails, and neither the
     * files renamed before it nor any temporary is left */
    snprintf(out, sizeof out, "%s/o2", dir);
    snprintf(path, sizeof path, "%s/output_2.npy", out);
    assert_int_equal(mkdir(out, 0700), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_not_equal(ts_outputs_write(res, out, &d), TS_OK);
    assert_non_null(d.msg);
    ts_diag_clear(&d);
    list_dir(out, got, sizeof got);
    assert_string_equal(got, "output_2.npy\n");
    snprintf(path, sizeof path, "ls -A '%s' | grep -q tessel-tmp", out);
    assert_int_not_equal(system(path), 0);
    /* an output directory that is a file, and one whose parent is missing */
    snprintf(path, sizeof path, "%s/tuple_out/output_0.npy", dir);
    assert_int_equal(ts_outputs_write(res, path, &d), TS_EINPUT);
    ts_diag_clear(&d);
    snprintf(path, sizeof path, "%s/no/such", dir);
    assert_int_not_equal(ts_outputs_write(res, path, &d), TS_OK);
    assert_non_null(d.msg);
    ts_diag_clear(&d);
    ts_outputs_free(res);
    ts_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_load_and_run),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_outputs_all_or_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
