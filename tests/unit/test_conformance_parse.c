/*
 * test_conformance_parse.c: every module of XLA's SPMD partitioner tests
 * (shared/conformance/xla_spmd/modules, listed in manifest.tsv) parses
 * with verify off. Cross-checks against the manifest, which was written
 * independently of tessel: the set of opcodes each module uses, and every
 * sharding validated against the module's device count. Skips when the
 * directory is absent.
 *
 * Modules that must be rejected by the parser: none.
 * SubgroupIllegalManualAllReduce is meant to be rejected, but for a
 * semantic reason (an all-reduce across a manual subgroup) that is the
 * partitioner's or the verifier's to find: its text is well formed.
 *
 * Limits: seven modules declare shapes of more than 2^34 elements (XLA's
 * tests never allocate them). tessel's default max_elements refuses them
 * with a message naming the limit; this test checks exactly those seven
 * are refused with the defaults and parses everything with the limit
 * raised.
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

#include "ir/ir.h"

#define MODULES TESSEL_SHARED_DIR "/conformance/xla_spmd/modules"
#define MANIFEST TESSEL_SHARED_DIR "/conformance/xla_spmd/manifest.tsv"

/* Modules over the default element limit (2^34), with their largest shape. */
static const char *const too_big[] = {
    "BidirectionalEinsumRHSWindowedInContractingOutNonContractingPartitioned.hlo", /* f32[320,39296,64,128] */
    "EinsumRHSWindowedInContractingOutNonContractingPartitioned.hlo",
    "UnrolledEinsumRHSWindowedInContractingOutNonContractingPartitioned.hlo",
    "WindowedEinsumPreferMemoryFootprint.hlo",   /* bf16[128,1024,4,176,256,1,1] */
    "WindowedEinsumPreferMemoryFootprint2.hlo",  /* bf16[512,1024,16,36,256] */
    "WindowedEinsumPreferNumberIterations.hlo",
    "WindowedEinsumPreferNumberIterations2.hlo",
};

static bool is_too_big(const char *file)
{
    for (size_t i = 0; i < sizeof too_big / sizeof *too_big; i++)
        if (strcmp(too_big[i], file) == 0)
            return true;
    return false;
}

typedef struct Entry {
    char file[256];
    int64_t devices;
    char opcodes[1024];
} Entry;

/* manifest.tsv: file, test_name, num_devices, opcodes (comma-separated). */
static Entry *read_manifest(int *n)
{
    FILE *f = fopen(MANIFEST, "r");
    if (!f)
        return NULL;
    Entry *v = calloc(1024, sizeof *v);
    char line[4096];
    *n = 0;
    bool header = true;
    while (fgets(line, sizeof line, f) && *n < 1024) {
        if (header) {
            header = false;
            continue;
        }
        line[strcspn(line, "\r\n")] = 0;
        char *file = strtok(line, "\t");
        strtok(NULL, "\t");
        char *dev = strtok(NULL, "\t");
        char *ops = strtok(NULL, "\t");
        if (!file || !dev)
            continue;
        Entry *e = &v[(*n)++];
        snprintf(e->file, sizeof e->file, "%s", file);
        e->devices = atoll(dev);
        snprintf(e->opcodes, sizeof e->opcodes, "%s", ops ? ops : "");
    }
    fclose(f);
    return v;
}

/* The sorted, comma-joined set of opcodes the module uses. */
static void opcode_set(const IrModule *m, char *out, size_t n)
{
    bool used[OP_COUNT] = {0};
    for (int32_t c = 0; c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            used[m->comp[c]->instr[i].op] = true;
    const char *names[OP_COUNT];
    int k = 0;
    for (int op = 0; op < OP_COUNT; op++)
        if (used[op])
            names[k++] = ir_op_name((IrOpcode)op);
    for (int i = 1; i < k; i++) /* insertion sort by name */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    out[0] = 0;
    size_t len = 0;
    for (int i = 0; i < k; i++)
        len += (size_t)snprintf(out + len, n - len, i ? ",%s" : "%s", names[i]);
}

/* Indices in range, roots set, one entry. */
static void check_structure(const IrModule *m, const char *file)
{
    int entries = 0;
    for (int32_t c = 0; c < m->ncomp; c++) {
        const IrComputation *comp = m->comp[c];
        entries += comp->is_entry;
        if (comp->root < 0 || comp->root >= comp->ninstr)
            fail_msg("%s: computation %s has no root", file, comp->name);
        for (int32_t i = 0; i < comp->ninstr; i++) {
            const IrInstr *ins = &comp->instr[i];
            for (int32_t k = 0; k < ins->nopnd; k++)
                if (ins->opnd[k] < 0 || ins->opnd[k] >= comp->ninstr)
                    fail_msg("%s: %s operand %d unresolved", file, ins->name, (int)k);
            for (int32_t k = 0; k < ins->ncalled; k++)
                if (ins->called[k] < 0 || ins->called[k] >= m->ncomp)
                    fail_msg("%s: %s callee %d unresolved", file, ins->name, (int)k);
            if (ins->shape.type == IR_INVALID)
                fail_msg("%s: %s has no shape", file, ins->name);
        }
    }
    assert_int_equal(entries, 1);
    assert_true(m->comp[m->entry]->is_entry);
}

static void test_conformance(void **state)
{
    (void)state;
    struct stat sb;
    if (stat(MODULES, &sb) != 0 || !S_ISDIR(sb.st_mode))
        skip();
    int n = 0;
    Entry *entries = read_manifest(&n);
    if (!entries)
        skip();
    int parsed = 0, refused_by_limit = 0, shardings = 0;
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", MODULES, entries[i].file);

        /* defaults: only the listed modules are over the element limit */
        IrParseOptions o = ir_default_parse_options();
        o.verify = false;
        IrModule *m = NULL;
        IrDiag d = {0};
        IrStatus st = ir_parse_file(path, &o, &m, &d);
        if (is_too_big(entries[i].file)) {
            if (st != IR_EINPUT || !strstr(d.msg, "more than the limit"))
                fail_msg("%s: expected the element limit to refuse it", entries[i].file);
            refused_by_limit++;
        } else if (st != IR_OK) {
            char *f = ir_diag_format(&d, "conformance");
            fail_msg("%s", f ? f : entries[i].file);
        }
        ir_module_free(m);
        ir_diag_clear(&d);

        /* raised limit: everything parses */
        o.limits.max_elements = INT64_MAX;
        m = NULL;
        st = ir_parse_file(path, &o, &m, &d);
        if (st != IR_OK) {
            char *f = ir_diag_format(&d, "conformance");
            fail_msg("%s", f ? f : entries[i].file);
        }
        check_structure(m, entries[i].file);

        char ops[1024];
        opcode_set(m, ops, sizeof ops);
        if (strcmp(ops, entries[i].opcodes) != 0)
            fail_msg("%s: opcodes '%s', manifest says '%s'", entries[i].file, ops, entries[i].opcodes);

        /* every sharding holds for the module's device count */
        for (int32_t c = 0; c < m->ncomp; c++) {
            for (int32_t k = 0; k < m->comp[c]->ninstr; k++) {
                IrInstr *ins = &m->comp[c]->instr[k];
                if (!ins->sharding)
                    continue;
                shardings++;
                IrStatus vs = ir_sharding_validate(ins->sharding, &ins->shape, entries[i].devices, &d, m->file,
                                                   m->src, ins->pos);
                if (vs != IR_OK) {
                    char *f = ir_diag_format(&d, "conformance");
                    fail_msg("%s (%lld devices): %s", entries[i].file, (long long)entries[i].devices, f ? f : "");
                }
            }
        }
        ir_module_free(m);
        ir_diag_clear(&d);
        parsed++;
    }
    free(entries);
    assert_int_equal(refused_by_limit, (int)(sizeof too_big / sizeof *too_big));
    assert_true(parsed >= 346);
    print_message("parsed %d XLA SPMD conformance modules (%d shardings validated; %d refused by the default "
                  "element limit, parsed with it raised)\n",
                  parsed, shardings, refused_by_limit);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
