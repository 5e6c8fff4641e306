/*
 * test_api_null.c: the C API's one rule for NULL (include/tessel.h,
 * "NULL"), checked on every public function: a required pointer that is
 * NULL is TS_EINPUT with "FUNCTION: ARG is NULL" (or, for the run options,
 * the field named), outputs are cleared first, value-returning functions
 * give 0, false, NULL or "", and frees of NULL do nothing. Each call is
 * made with d = NULL too. On main, ts_module_parse, ts_plan_parse,
 * ts_plan_run, ts_outputs_write, ts_limits_set, ts_write_text,
 * ts_plan_show, ts_outputs_read, a TsInput with a NULL key and inputs =
 * NULL with ninputs > 0 crashed (SIGSEGV; ASan in the asan preset).
 * Also: TsLimits fields set directly are clamped (a depth of 10^6 no longer
 * lets a deep module overflow the stack), steps < 0 and a heartbeat below
 * the minimum are refused.
 * test_every_function reads include/tessel.h and this file: every function
 * the header declares must be called here (outside comments and strings),
 * so a new function without a NULL case fails this test.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessel.h"

static const char MODEL[] = "HloModule m\n"
                            "ENTRY main {\n"
                            "  x = f32[4] parameter(0)\n"
                            "  ROOT y = f32[4] add(x, x)\n"
                            "}\n";

/* st must be TS_EINPUT and d's message `msg`; d is cleared. */
static void expect_null(TsStatus st, TsDiag *d, const char *msg)
{
    assert_int_equal(st, TS_EINPUT);
    assert_int_equal(d->status, TS_EINPUT);
    assert_non_null(d->msg);
    assert_string_equal(d->msg, msg);
    ts_diag_clear(d);
}

#define EXPECT(call, msg)                                                                                      \
    do {                                                                                                       \
        TsDiag d = {0};                                                                                        \
        expect_null(call, &d, msg);                                                                            \
    } while (0)

static TsModule *module(void)
{
    TsModule *m = NULL;
    assert_int_equal(ts_module_parse("m", MODEL, strlen(MODEL), NULL, &m, NULL), TS_OK);
    return m;
}

static void test_modules_and_text(void **state)
{
    (void)state;
    TsModule *m = (TsModule *)0x1;
    EXPECT(ts_module_parse("m", NULL, 5, NULL, &m, &d), "ts_module_parse: text is NULL");
    assert_null(m);
    EXPECT(ts_module_parse("m", MODEL, strlen(MODEL), NULL, NULL, &d), "ts_module_parse: out is NULL");
    assert_int_equal(ts_module_parse(NULL, NULL, 0, NULL, NULL, NULL), TS_EINPUT); /* d NULL too */
    EXPECT(ts_module_load(NULL, &m, &d), "ts_module_load_ex: path is NULL");
    EXPECT(ts_module_load_ex("x", NULL, NULL, &d), "ts_module_load_ex: out is NULL");
    assert_null(ts_module_name(NULL));
    assert_int_equal(ts_module_num_parameters(NULL), 0);
    assert_null(ts_module_summary(NULL));
    assert_null(ts_module_text(NULL));
    assert_false(ts_module_is_plan(NULL));
    EXPECT(ts_module_check_devices(NULL, 0, 0, &d), "ts_module_check_devices: mod is NULL");
    ts_module_free(NULL);
    TsModule *g = (TsModule *)0x1;
    EXPECT(ts_add_gradients(NULL, NULL, &g, &d), "ts_add_gradients: m is NULL");
    assert_null(g);
    m = module();
    EXPECT(ts_add_gradients(m, NULL, NULL, &d), "ts_add_gradients: out is NULL");
    assert_int_equal(ts_module_check_devices(m, 0, 0, NULL), TS_OK);
    assert_int_equal(ts_module_check_devices(m, INT64_MAX, INT64_MAX, NULL), TS_OK);
    assert_int_equal(ts_module_check_devices(m, -1, 0, NULL), TS_EINPUT);
    assert_int_equal(ts_module_check_devices(m, 0, INT64_MIN, NULL), TS_EINPUT);
    ts_module_free(m);

    char dg[65] = "x";
    EXPECT(ts_input_sha256(NULL, dg, &d), "ts_input_sha256: in is NULL");
    assert_string_equal(dg, "");
    TsInput none = {0}, nokey = {.path = "/tmp/never"}, keyonly = {.key = "x"};
    EXPECT(ts_input_sha256(&none, dg, &d), "ts_input_sha256: in->key is NULL");
    EXPECT(ts_input_sha256(&nokey, dg, &d), "ts_input_sha256: in->key is NULL");
    EXPECT(ts_input_sha256(&keyonly, dg, &d), "ts_input_sha256: in->path (and in->array) is NULL");
    EXPECT(ts_input_sha256(&keyonly, NULL, &d), "ts_input_sha256: out is NULL");
    assert_int_equal(ts_input_sha256(NULL, NULL, NULL), TS_EINPUT);
    EXPECT(ts_sha256("ab", 2, NULL, &d), "ts_sha256: out is NULL");
    EXPECT(ts_sha256(NULL, 2, dg, &d), "ts_sha256: bytes is NULL");
    assert_string_equal(dg, "");
    /* n = 0 needs no bytes: the SHA-256 of nothing */
    assert_int_equal(ts_sha256(NULL, 0, dg, NULL), TS_OK);
    assert_string_equal(dg, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT(ts_write_text(NULL, "x", &d), "ts_write_text: path is NULL");
    EXPECT(ts_write_text("/tmp/never", NULL, &d), "ts_write_text: text is NULL");
    char *rt = (char *)"untouched";
    size_t rn = 7;
    EXPECT(ts_read_file(NULL, 10, &rt, &rn, &d), "ts_read_file: path is NULL");
    assert_null(rt);
    assert_int_equal(rn, 0);
    EXPECT(ts_read_file("/etc/hostname", 10, NULL, &rn, &d), "ts_read_file: text is NULL");
    EXPECT(ts_read_file("/etc/hostname", 10, &rt, NULL, &d), "ts_read_file: len is NULL");
    EXPECT(ts_limits_set(NULL, "depth=3", &d), "ts_limits_set: l is NULL");
    TsLimits l = ts_limits_default();
    TsDiag d = {0};
    assert_int_equal(ts_limits_set(&l, NULL, &d), TS_EINPUT);
    ts_diag_clear(&d);
    assert_null(ts_diag_format(NULL));
    ts_diag_clear(NULL);
    ts_free(NULL);
    char *s = (char *)0x1;
    EXPECT(ts_devices_describe(1, "text", NULL, &d), "ts_devices_describe: out is NULL");
    (void)s;
}

static void test_plans(void **state)
{
    (void)state;
    TsPlan *p = (TsPlan *)0x1;
    EXPECT(ts_compile(NULL, NULL, &p, &d), "ts_compile: m is NULL");
    assert_null(p);
    TsModule *m = module();
    EXPECT(ts_compile(m, NULL, NULL, &d), "ts_compile: out is NULL");
    p = (TsPlan *)0x1;
    EXPECT(ts_plan_parse("p", NULL, 10, NULL, &p, &d), "ts_plan_parse: text is NULL");
    assert_null(p);
    EXPECT(ts_plan_parse("p", MODEL, strlen(MODEL), NULL, NULL, &d), "ts_plan_parse: out is NULL");
    EXPECT(ts_plan_load(NULL, NULL, &p, &d), "ts_plan_load: path is NULL");
    EXPECT(ts_plan_open(NULL, NULL, &p, &d), "ts_plan_open: path is NULL");
    EXPECT(ts_plan_open("x", NULL, NULL, &d), "ts_plan_open: out is NULL");
    ts_plan_free(NULL);
    EXPECT(ts_plan_set_layout(NULL, 1, 0, &d), "ts_plan_set_layout: p is NULL");
    assert_int_equal(ts_plan_num_partitions(NULL), 0);
    assert_int_equal(ts_plan_num_replicas(NULL), 0);
    assert_int_equal(ts_plan_hosts(NULL), 0);
    assert_int_equal(ts_plan_local_devices(NULL), 0);
    assert_int_equal(ts_plan_num_clusters(NULL), 0);
    assert_false(ts_plan_from_file(NULL));
    assert_int_equal(ts_plan_num_aliases(NULL), 0);
    assert_int_equal(ts_plan_num_inputs(NULL), 0);
    assert_int_equal(ts_plan_num_outputs(NULL), 0);
    assert_null(ts_plan_file_text(NULL));
    int32_t a, b;
    char dg[65];
    char *s = (char *)0x1;
    TsArrayInfo info;
    EXPECT(ts_plan_alias(NULL, 0, &a, &b, &d), "ts_plan_alias: p is NULL");
    int32_t c2, e2;
    EXPECT(ts_plan_alias_leaves(NULL, 0, &a, &b, &c2, &e2, &d), "ts_plan_alias_leaves: p is NULL");
    EXPECT(ts_plan_input_key(NULL, "0", &a, &b, &d), "ts_plan_input_key: p is NULL");
    EXPECT(ts_plan_digest(NULL, dg, &d), "ts_plan_digest: p is NULL");
    EXPECT(ts_plan_save(NULL, "x", &d), "ts_plan_save: p is NULL");
    EXPECT(ts_plan_dump(NULL, "text", &s, &d), "ts_plan_dump: p is NULL");
    assert_null(s);
    EXPECT(ts_plan_dump_ex(NULL, NULL, &s, &d), "ts_plan_dump_ex: p is NULL");
    EXPECT(ts_plan_show(NULL, "all", 0, &s, &d), "ts_plan_show: p is NULL");
    EXPECT(ts_plan_input_info(NULL, 0, &info, &d), "ts_plan_input_info: p is NULL");
    EXPECT(ts_plan_output_info(NULL, 0, &info, &d), "ts_plan_output_info: p is NULL");

    TsCompileOptions co = {.num_partitions = 2};
    assert_int_equal(ts_compile(m, &co, &p, NULL), TS_OK);
    EXPECT(ts_plan_alias(p, 0, NULL, &b, &d), "ts_plan_alias: output_leaf is NULL");
    EXPECT(ts_plan_alias_leaves(p, 0, &a, &b, &c2, NULL, &d), "ts_plan_alias_leaves: count is NULL");
    EXPECT(ts_plan_input_key(p, NULL, &a, &b, &d), "ts_plan_input_key: key is NULL");
    EXPECT(ts_plan_digest(p, NULL, &d), "ts_plan_digest: out is NULL");
    EXPECT(ts_plan_save(p, NULL, &d), "ts_plan_save: path is NULL");
    EXPECT(ts_plan_dump(p, "text", NULL, &d), "ts_plan_dump: out is NULL");
    EXPECT(ts_plan_show(p, NULL, 0, &s, &d), "ts_plan_show: name is NULL");
    EXPECT(ts_plan_show(p, "all", 0, NULL, &d), "ts_plan_show: out is NULL");
    EXPECT(ts_plan_input_info(p, 0, NULL, &d), "ts_plan_input_info: info is NULL");
    EXPECT(ts_plan_output_info(p, 0, NULL, &d), "ts_plan_output_info: info is NULL");
    TsDumpOptions dopt = {.format = "dot", .nexpand = 2, .expand = NULL};
    EXPECT(ts_plan_dump_ex(p, &dopt, &s, &d), "ts_plan_dump_ex: o->expand is NULL");
    const char *names[] = {"main", NULL};
    dopt.expand = names;
    EXPECT(ts_plan_dump_ex(p, &dopt, &s, &d), "ts_plan_dump_ex: o->expand[1] is NULL");
    ts_plan_free(p);
    ts_module_free(m);
}

static void test_runs_and_outputs(void **state)
{
    (void)state;
    TsModule *m = module();
    TsPlan *p = NULL;
    TsCompileOptions co = {.num_partitions = 2};
    assert_int_equal(ts_compile(m, &co, &p, NULL), TS_OK);
    TsOutputs *o = (TsOutputs *)0x1;
    EXPECT(ts_plan_run(NULL, NULL, &o, &d), "ts_plan_run: p is NULL");
    assert_null(o);
    EXPECT(ts_plan_run(p, NULL, NULL, &d), "ts_plan_run: out is NULL");
    EXPECT(ts_plan_run_reference(NULL, NULL, &o, &d), "ts_plan_run_reference: p is NULL");
    EXPECT(ts_run_reference(NULL, NULL, &o, &d), "ts_run_reference: m is NULL");
    EXPECT(ts_plan_run_mpi(NULL, NULL, NULL, &o, &d), "ts_plan_run_mpi: p is NULL");
    EXPECT(ts_plan_run_mpi(p, NULL, NULL, &o, &d), "ts_plan_run_mpi: mpi_comm is NULL");

    /* the run options */
    TsRunOptions ro = {.ninputs = 1, .inputs = NULL};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: inputs is NULL with ninputs > 0");
    EXPECT(ts_run_reference(m, &ro, &o, &d), "run options: inputs is NULL with ninputs > 0");
    TsInput in = {.key = NULL, .path = "/nonexistent.npy"};
    ro.inputs = &in;
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: input 0 needs a key and exactly one of path and array");
    in.key = "0";
    in.path = NULL;
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: input 0 needs a key and exactly one of path and array");
    ro = (TsRunOptions){.ninputs = -1};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: ninputs is negative");
    ro = (TsRunOptions){.ninfeeds = 1};
    EXPECT(ts_run_reference(m, &ro, &o, &d), "run options: infeeds is NULL with ninfeeds > 0");
    const char *feeds[] = {NULL};
    ro.infeeds = feeds;
    EXPECT(ts_run_reference(m, &ro, &o, &d), "run options: infeed 0 is NULL");
    ro = (TsRunOptions){.random = true, .steps = -7};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: steps must be >= 0 (0: one step), not -7");
    EXPECT(ts_run_reference(m, &ro, &o, &d), "run options: steps must be >= 0 (0: one step), not -7");
    ro.steps = TS_MAX_STEPS + 1;
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: steps 1000000000001 is too large: the largest is 1000000000000");
    EXPECT(ts_run_reference(m, &ro, &o, &d), "run options: steps 1000000000001 is too large: the largest is "
                                             "1000000000000");
    ro = (TsRunOptions){.random = true, .heartbeat_seconds = 1e-9};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: heartbeat_seconds must be 0 (60 s), negative (none) or "
                                        "from 1 to 3.16224e+07 seconds, not 1e-09");
    EXPECT(ts_mpi_heartbeat(NULL, 5, &d), "ts_mpi_heartbeat: w is NULL");
    ro = (TsRunOptions){.random = true, .nagree = 1};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: agree is NULL with nagree > 0");
    ro.nagree = TS_AGREE_MAX + 1;
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: nagree is outside [0, TS_AGREE_MAX]");
    TsAgreeItem same = {.what = "x", .value = NULL};
    ro = (TsRunOptions){.random = true, .nagree = 1, .agree = &same};
    EXPECT(ts_plan_run(p, &ro, &o, &d), "run options: agree 0 needs what and value");
    /* a sign key of no bytes */
    TsCompileOptions nokey = {.sign_key = "", .sign_key_len = 0};
    TsPlan *q = (TsPlan *)0x1;
    EXPECT(ts_compile(m, &nokey, &q, &d), "sign_key is empty (sign_key_len 0): a key needs bytes");
    assert_null(q);

    /* outputs */
    ro = (TsRunOptions){.random = true, .seed = 1};
    assert_int_equal(ts_plan_run(p, &ro, &o, NULL), TS_OK);
    assert_int_equal(ts_outputs_count(NULL), 0);
    assert_int_equal(ts_outputs_num_devices(NULL), 0);
    assert_null(ts_outputs_summary(NULL));
    assert_string_equal(ts_outputs_stats(NULL), "");
    TsArrayInfo info;
    float buf[4];
    EXPECT(ts_outputs_info(NULL, 0, &info, &d), "ts_outputs_info: o is NULL");
    EXPECT(ts_outputs_info(o, 0, NULL, &d), "ts_outputs_info: info is NULL");
    EXPECT(ts_outputs_read(NULL, 0, buf, sizeof buf, &d), "ts_outputs_read: o is NULL");
    EXPECT(ts_outputs_read(o, 0, NULL, sizeof buf, &d), "ts_outputs_read: buf is NULL");
    EXPECT(ts_outputs_write(NULL, "/tmp/never", &d), "ts_outputs_write: o is NULL");
    EXPECT(ts_outputs_write(o, NULL, &d), "ts_outputs_write: dir is NULL");
    EXPECT(ts_outputs_write_to(o, NULL, &d), "ts_outputs_write_to: od is NULL");
    EXPECT(ts_outputs_write_to(NULL, NULL, &d), "ts_outputs_write_to: o is NULL");
    TsOutputDir *od = (TsOutputDir *)0x1;
    EXPECT(ts_output_dir_open(NULL, &od, &d), "ts_output_dir_open: dir is NULL");
    assert_null(od);
    EXPECT(ts_output_dir_open("/tmp/never", NULL, &d), "ts_output_dir_open: out is NULL");
    od = (TsOutputDir *)0x1;
    EXPECT(ts_output_dir_make(NULL, &od, &d), "ts_output_dir_make: dir is NULL");
    assert_null(od);
    EXPECT(ts_output_dir_make("/tmp/never", NULL, &d), "ts_output_dir_make: out is NULL");
    EXPECT(ts_outputs_verify(NULL, NULL, &d), "ts_outputs_verify: dir is NULL");
    ts_output_dir_close(NULL);
    ts_output_dir_on_cancel(NULL, NULL, NULL);
    ts_outputs_remove(NULL, "/tmp/never");
    ts_outputs_remove(o, NULL);
    ts_outputs_free(NULL);
    ts_outputs_free(o);

    /* MPI worlds */
    TsMpiWorld *w = (TsMpiWorld *)0x1;
    EXPECT(ts_mpi_init(NULL, &d), "ts_mpi_init: out is NULL");
    EXPECT(ts_mpi_init_ex(NULL, NULL, &d), "ts_mpi_init_ex: out is NULL");
    (void)w;
    ts_mpi_on_error(NULL, NULL, NULL);
    assert_null(ts_mpi_comm(NULL));
    assert_int_equal(ts_mpi_rank(NULL), 0);
    assert_int_equal(ts_mpi_size(NULL), 1);
    int mx = 0;
    assert_int_equal(ts_mpi_agree(NULL, true, 3, &mx), -1);
    assert_int_equal(mx, 3);
    assert_int_equal(ts_mpi_agree(NULL, false, 2, NULL), 0);
    assert_int_equal(ts_mpi_finalize(NULL, true, NULL), TS_OK);
    ts_plan_free(p);
    ts_module_free(m);
}

/* TsLimits set directly are clamped where they enter: depth 10^6 is 200,
 * so a module nested 300 calls deep is refused, not run into the stack. */
static void test_limits_clamped(void **state)
{
    (void)state;
    enum { LEVELS = 300 };
    size_t cap = 200 + (size_t)LEVELS * 160, n = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    n += (size_t)snprintf(t + n, cap - n, "HloModule deep\n\nc0 {\n  ROOT x = f32[] parameter(0)\n}\n\n");
    for (int k = 1; k < LEVELS; k++)
        n += (size_t)snprintf(t + n, cap - n, "c%d {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), to_apply=c%d\n}\n\n",
                              k, k - 1);
    n += (size_t)snprintf(t + n, cap - n, "ENTRY main {\n  x = f32[] parameter(0)\n  ROOT y = f32[] call(x), "
                                          "to_apply=c%d\n}\n", LEVELS - 1);
    TsLimits l = ts_limits_default();
    l.depth = 1000000;
    l.rank = 1 << 30;
    l.devices = -5;
    TsModule *m = NULL;
    TsDiag d = {0};
    assert_int_equal(ts_module_parse("deep.hlo", t, n, &l, &m, &d), TS_EINPUT);
    assert_non_null(strstr(d.msg, "nested more than 200 levels deep"));
    ts_diag_clear(&d);
    assert_null(m);
    TsPlan *p = NULL;
    assert_int_equal(ts_plan_parse("deep.hlo", t, n, &l, &p, &d), TS_EINPUT);
    ts_diag_clear(&d);
    free(t);
}

/* The functions left: ts_plan_why's arguments, the value getters of a
 * NULL plan, ts_nearest_name's NULLs and counts, and those without
 * pointer arguments. */
static void test_rest(void **state)
{
    (void)state;
    char *s = (char *)0x1;
    EXPECT(ts_plan_why(NULL, "x", &s, &d), "ts_plan_why: p is NULL");
    assert_null(s);
    assert_null(ts_plan_explain(NULL));
    assert_null(ts_plan_explain_json(NULL));
    assert_null(ts_plan_memory_fit(NULL));
    TsModule *m = module();
    TsPlan *p = NULL;
    TsCompileOptions co = {.num_partitions = 2};
    assert_int_equal(ts_compile(m, &co, &p, NULL), TS_OK);
    s = (char *)0x1;
    EXPECT(ts_plan_why(p, NULL, &s, &d), "ts_plan_why: name is NULL");
    assert_null(s);
    EXPECT(ts_plan_why(p, "y", NULL, &d), "ts_plan_why: out is NULL");
    ts_plan_free(p);
    /* TsCompileOptions set directly to extremes: a negative count is named
     * (it was reported as "-2 partitions x 1 replicas: at most 4096
     * devices"), INT64_MAX is over the device limit */
    TsCompileOptions bad = {.num_partitions = -2};
    EXPECT(ts_compile(m, &bad, &p, &d), "num_partitions must be 1 or more (0: the module's), not -2");
    bad = (TsCompileOptions){.num_replicas = INT64_MIN};
    EXPECT(ts_compile(m, &bad, &p, &d),
           "num_replicas must be 1 or more (0: the module's), not -9223372036854775808");
    bad = (TsCompileOptions){.num_partitions = INT64_MAX, .num_replicas = INT64_MAX};
    EXPECT(ts_compile(m, &bad, &p, &d),
           "9223372036854775807 partitions x 9223372036854775807 replicas: at most 4096 devices "
           "(--limit devices=N)");
    assert_null(p);
    ts_module_free(m);
    const char *names[] = {NULL, "add", NULL};
    assert_null(ts_nearest_name(NULL, names, 3));
    assert_null(ts_nearest_name("ad", NULL, 3));
    assert_null(ts_nearest_name("ad", names, -1));
    assert_null(ts_nearest_name("ad", names, INT32_MIN));
    assert_string_equal(ts_nearest_name("ad", names, 3), "add");
    assert_non_null(ts_version());
    assert_true(ts_mpi_calls() >= 0);
    assert_false(ts_mpi_launched());
    /* hwloc's count, or 0 where it cannot tell: never negative. */
    assert_true(ts_host_cores() >= 0);
}

/* Read a whole file (NUL-terminated) or fail the test. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *t = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            t = realloc(t, cap);
            assert_non_null(t);
        }
        got = fread(t + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    t[n] = 0;
    return t;
}

/* Blank out C comments, string and character literals and preprocessor
 * lines of t, in place. */
static void blank_non_code(char *t)
{
    for (char *c = t; *c;) {
        if (c[0] == '/' && c[1] == '*') {
            char *e = strstr(c + 2, "*" "/");
            char *end = e ? e + 2 : c + strlen(c);
            memset(c, ' ', (size_t)(end - c));
            c = end;
        } else if ((c[0] == '/' && c[1] == '/') || (c[0] == '#' && (c == t || c[-1] == '\n'))) {
            while (*c && *c != '\n')
                *c++ = ' ';
        } else if (*c == '"' || *c == '\'') {
            char q = *c;
            *c++ = ' ';
            while (*c && *c != q) {
                if (*c == '\\' && c[1])
                    *c++ = ' ';
                *c++ = ' ';
            }
            if (*c)
                *c++ = ' ';
        } else {
            c++;
        }
    }
}

/* Does code (blanked) hold `name` followed by '(' as a whole identifier? */
static bool calls(const char *code, const char *name, size_t len)
{
    for (const char *c = strstr(code, name); c; c = strstr(c + 1, name)) {
        if (c > code && (isalnum((unsigned char)c[-1]) || c[-1] == '_'))
            continue;
        const char *e = c + len;
        while (*e == ' ' || *e == '\n' || *e == '\t')
            e++;
        if (*e == '(')
            return true;
    }
    return false;
}

/* Every function include/tessel.h declares (an identifier ts_... followed
 * by '(' in its code) is called in this file. ts_mpi_abort alone is
 * exempt: it never returns, and the header rules out a NULL world. */
static void test_every_function(void **state)
{
    (void)state;
    char *h = slurp(TESSEL_SRC_DIR "/include/tessel.h");
    char *me = slurp(TESSEL_SRC_DIR "/tests/unit/test_api_null.c");
    blank_non_code(h);
    blank_non_code(me);
    int found = 0, missing = 0;
    for (char *c = h; (c = strstr(c, "ts_")) != NULL;) {
        if (c > h && (isalnum((unsigned char)c[-1]) || c[-1] == '_')) {
            c += 3;
            continue;
        }
        size_t len = 3;
        while (isalnum((unsigned char)c[len]) || c[len] == '_')
            len++;
        const char *e = c + len;
        while (*e == ' ' || *e == '\n' || *e == '\t')
            e++;
        if (*e == '(') {
            char name[128];
            assert_true(len < sizeof name);
            memcpy(name, c, len);
            name[len] = 0;
            found++;
            if (strcmp(name, "ts_mpi_abort") != 0 && !calls(me, name, len)) {
                fprintf(stderr, "test_api_null.c does not call %s (declared in include/tessel.h)\n", name);
                missing++;
            }
        }
        c += len;
    }
    assert_true(found >= 76);
    assert_int_equal(missing, 0);
    free(h);
    free(me);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modules_and_text),
        cmocka_unit_test(test_plans),
        cmocka_unit_test(test_runs_and_outputs),
        cmocka_unit_test(test_limits_clamped),
        cmocka_unit_test(test_rest),
        cmocka_unit_test(test_every_function),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    ts_shutdown();
    return r;
}
