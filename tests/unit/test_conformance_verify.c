/*
 * test_conformance_verify.c: XLA's own SPMD partitioner test modules
 * (shared/conformance/xla_spmd) through the parser, the verifier and the
 * printer.
 *
 * Every module listed in manifest.tsv must parse, verify, and round-trip:
 * print(parse(print(M))) == print(M), and the reprinted module verifies
 * too. Modules in `rejected` are invalid by XLA's rules and must fail
 * verification with the given reason. The test skips when the shared
 * directory is absent.
 *
 * The modules declare shapes only to be partitioned, some far larger than
 * tessel's default element limit (f32[320,39296,64,128] is 10^11 elements),
 * so the limit is lifted here; everything else uses the defaults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ir/ir.h"

#define MODULE_DIR TESSEL_SHARED_DIR "/conformance/xla_spmd/modules"
#define MANIFEST TESSEL_SHARED_DIR "/conformance/xla_spmd/manifest.tsv"

/* Modules XLA rejects, with a fragment of the reason tessel must give. */
static const struct {
    const char *file;
    const char *reason;
} rejected[] = {
    /* replica group {1,0} mixes the manual subgroups {0,2} and {1,3} */
    {"SubgroupIllegalManualAllReduce.hlo", "belong to different manual subgroups"},
};

static const char *rejection_for(const char *file)
{
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++)
        if (strcmp(rejected[i].file, file) == 0)
            return rejected[i].reason;
    return NULL;
}

static bool have_corpus(void)
{
    struct stat st;
    return stat(MODULE_DIR, &st) == 0 && S_ISDIR(st.st_mode) && stat(MANIFEST, &st) == 0;
}

/* The `file` column of manifest.tsv (after its header line). */
static char **read_manifest(int *n)
{
    FILE *f = fopen(MANIFEST, "r");
    assert_non_null(f);
    char line[8192];
    char **files = NULL;
    int cap = 0;
    *n = 0;
    bool header = true;
    while (fgets(line, sizeof line, f)) {
        if (header) {
            header = false;
            continue;
        }
        size_t k = strcspn(line, "\t\r\n");
        if (k == 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 512;
            files = realloc(files, (size_t)cap * sizeof *files);
        }
        files[*n] = strndup(line, k);
        (*n)++;
    }
    fclose(f);
    return files;
}

static IrParseOptions options(void)
{
    IrParseOptions o = ir_default_parse_options();
    o.verify = false;
    o.limits.max_elements = INT64_MAX;
    return o;
}

/* Append a line to the failure report. */
static void note(char **report, size_t *len, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t k = strlen(buf);
    *report = realloc(*report, *len + k + 2);
    memcpy(*report + *len, buf, k);
    (*report)[*len + k] = '\n';
    (*report)[*len + k + 1] = 0;
    *len += k + 1;
}

/* One module: NULL when it behaves as expected, else what went wrong
 * (heap string). */
static char *check_module(const char *file)
{
    char path[4096], *why = NULL;
    snprintf(path, sizeof path, "%s/%s", MODULE_DIR, file);
    IrParseOptions o = options();
    IrModule *m = NULL, *m2 = NULL;
    IrDiag d = {0};
    char *t1 = NULL, *t2 = NULL;
    const char *reason = rejection_for(file);
    if (ir_parse_file(path, &o, &m, &d) != IR_OK) {
        why = ir_diag_format(&d, "parse");
        goto done;
    }
    IrStatus st = ir_verify(m, &o.limits, &d);
    if (reason) {
        if (st == IR_OK) {
            why = strdup("verified, but must be rejected");
        } else if (!d.msg || !strstr(d.msg, reason)) {
            char *f = ir_diag_format(&d, "verify");
            why = malloc(strlen(f) + strlen(reason) + 64);
            sprintf(why, "rejected for another reason than '%s': %s", reason, f);
            ts_free(f);
        }
        goto done;
    }
    if (st != IR_OK) {
        why = ir_diag_format(&d, "verify");
        goto done;
    }
    t1 = ir_print_module(m);
    if (!t1) {
        why = strdup("print failed");
        goto done;
    }
    if (ir_parse(file, t1, strlen(t1), &o, &m2, &d) != IR_OK) {
        why = ir_diag_format(&d, "reparse of the printed text");
        goto done;
    }
    if (ir_verify(m2, &o.limits, &d) != IR_OK) {
        why = ir_diag_format(&d, "verify of the printed text");
        goto done;
    }
    t2 = ir_print_module(m2);
    if (!t2 || strcmp(t1, t2) != 0)
        why = strdup("print(parse(print(M))) differs from print(M)");
done:
    ir_diag_clear(&d);
    ts_free(t1);
    ts_free(t2);
    ir_module_free(m);
    ir_module_free(m2);
    return why;
}

static void test_corpus(void **state)
{
    (void)state;
    if (!have_corpus())
        skip();
    int n;
    char **files = read_manifest(&n);
    assert_true(n > 0);
    char *report = NULL;
    size_t len = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char *why = check_module(files[i]);
        if (why) {
            bad++;
            note(&report, &len, "%s: %s", files[i], why);
            free(why);
        }
        free(files[i]);
    }
    free(files);
    if (bad) {
        print_error("%s", report);
        free(report);
        fail_msg("%d of %d conformance modules failed", bad, n);
    }
    print_message("%d modules parsed, verified and round-tripped (%zu rejected as expected)\n",
                  n, sizeof rejected / sizeof *rejected);
}

/* The rejected modules are in the manifest, so the list cannot go stale. */
static void test_rejections_listed(void **state)
{
    (void)state;
    if (!have_corpus())
        skip();
    int n;
    char **files = read_manifest(&n);
    for (size_t r = 0; r < sizeof rejected / sizeof *rejected; r++) {
        bool found = false;
        for (int i = 0; i < n; i++)
            found |= strcmp(files[i], rejected[r].file) == 0;
        if (!found)
            fail_msg("%s is not in the manifest", rejected[r].file);
    }
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_rejections_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
