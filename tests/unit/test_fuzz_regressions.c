/*
 * test_fuzz_regressions.c: replays every input a fuzzer ever found a bug
 * with (tests/fuzz/regressions/TARGET-*), and every seed of the fuzz
 * corpora (every file of tests/fuzz/corpus/TARGET), through the same target bodies the
 * libFuzzer executables run (tests/fuzz/targets.h). Each input must give
 * IR_OK or a clean error (a known status with a message) and never crash;
 * leaks are caught by the ASan build and by valgrind.
 *
 * A regression file is named after its target: parse-*, sharding-*,
 * npy-*, plan-* (the prefix libFuzzer's -artifact_prefix gives it in
 * tests/fuzz/run.sh), so a new crash input only has to be copied in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A broken contract fails the test with the file that broke it. */
static const char *current_file;
#define FUZZ_FAIL(...)                                                                             \
    do {                                                                                           \
        print_message("%s: ", current_file ? current_file : "?");                                  \
        fail_msg(__VA_ARGS__);                                                                     \
    } while (0)
#include "../fuzz/targets.h"

#define FUZZ_DIR TESSEL_SRC_DIR "/tests/fuzz"

typedef void (*FuzzFn)(const uint8_t *data, size_t size);

static const struct {
    const char *name;
    FuzzFn fn;
} targets[] = {
    {"parse", fuzz_one_parse},
    {"sharding", fuzz_one_sharding},
    {"npy", fuzz_one_npy},
    {"plan", fuzz_one_plan},
    {"manifest", fuzz_one_manifest},
};
#define NTARGETS (sizeof targets / sizeof targets[0])

static FuzzFn target_of(const char *file)
{
    for (size_t i = 0; i < NTARGETS; i++) {
        size_t n = strlen(targets[i].name);
        if (strncmp(file, targets[i].name, n) == 0 && file[n] == '-')
            return targets[i].fn;
    }
    return NULL;
}

/* Whole file into a malloc'd buffer of exactly its size (no NUL: the
 * parsers take a length, and a read past it is what ASan should see). */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (buf && n < cap) {
        uint8_t *b = realloc(buf, n ? n : 1); /* exact size: ASan sees one byte past */
        if (b)
            buf = b;
    }
    *len = n;
    return buf;
}

static int replay_one(const char *dir, const char *name, FuzzFn fn)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len = 0;
    uint8_t *buf = slurp(path, &len);
    assert_non_null(buf);
    current_file = path;
    fn(buf, len);
    current_file = NULL;
    free(buf);
    return 1;
}

/* Replay every regular file of `dir`; fn NULL: pick by the name prefix
 * (an unknown prefix fails: a regression that is never replayed is lost). */
static int replay_dir(const char *dir, FuzzFn fn)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
            continue;
        FuzzFn f = fn ? fn : target_of(e->d_name);
        if (!f)
            fail_msg("%s/%s: name does not start with a target (parse-, sharding-, npy-, plan-)",
                     dir, e->d_name);
        n += replay_one(dir, e->d_name, f);
    }
    closedir(dp);
    return n;
}

static void test_regressions(void **state)
{
    (void)state;
    int n = replay_dir(FUZZ_DIR "/regressions", NULL);
    assert_true(n >= 0);
    print_message("replayed %d regression inputs\n", n);
}

static void test_corpora(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/corpus/%s", FUZZ_DIR, targets[i].name);
        int n = replay_dir(dir, targets[i].fn);
        if (n <= 0)
            fail_msg("%s: no seeds", dir);
    }
}

/* The contract check itself: a good module passes, an empty text is a
 * clean IR_EINPUT that fuzz_check_status accepts, and every target takes
 * an empty input. */
static void test_targets_see_errors(void **state)
{
    (void)state;
    static const char good[] = "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n";
    IrDiag d = {0};
    IrModule *m = NULL;
    IrParseOptions opt = ir_default_parse_options();
    assert_int_equal(ir_parse("g", good, sizeof good - 1, &opt, &m, &d), IR_OK);
    ir_module_free(m);
    assert_int_equal(ir_parse("e", "", 0, &opt, &m, &d), IR_EINPUT);
    fuzz_check_status("ir_parse", IR_EINPUT, &d);
    ir_diag_clear(&d);
    fuzz_one_parse((const uint8_t *)good, sizeof good - 1);
    for (size_t i = 0; i < NTARGETS; i++)
        targets[i].fn((const uint8_t *)"", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets_see_errors),
        cmocka_unit_test(test_regressions),
        cmocka_unit_test(test_corpora),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
