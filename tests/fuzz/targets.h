/* The fuzz targets' bodies, shared by the libFuzzer executables
 * (tests/fuzz/fuzz_*.c) and the regression replay unit test
 * (tests/unit/test_fuzz_regressions.c), so a crash found by a fuzzer is
 * replayed through exactly the code that found it.
 *
 * Each fuzz_one_* feeds one input to one library entry point and checks
 * the contract every entry point promises for hostile input: it returns
 * IR_OK or a known error status, an error comes with a message in the
 * diag (and its status), outputs are NULL/empty on failure, and nothing
 * leaks (checked by ASan's leak checker or valgrind, not here). A broken
 * contract calls FUZZ_FAIL, which aborts in a fuzzer (libFuzzer records
 * the input) and fails the test in cmocka.
 *
 * Included (not linked) by one .c file per executable: everything here is
 * static. */
#ifndef TESSEL_FUZZ_TARGETS_H
#define TESSEL_FUZZ_TARGETS_H

#include "ir/ir.h"
#include "compile/compile.h"
#include "runtime/runtime.h"
#include "tessel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FUZZ_FAIL
#define FUZZ_FAIL(...)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "fuzz contract broken: " __VA_ARGS__);                                     \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)
#endif

/* Each executable uses one or all of the targets. */
#define FUZZ_TARGET static __attribute__((unused))

/* The largest array the npy target reads back (bytes): bigger headers are
 * still parsed, but their data is not allocated (a fuzzer must not spend
 * its memory limit on a header that says "[1000000000]"). */
#define FUZZ_NPY_MAX_DATA (1 << 20)

/* st is a status the API may return, and the diag agrees with it. */
static void fuzz_check_status(const char *what, IrStatus st, const IrDiag *d)
{
    if (st == IR_OK) {
        if (d->status != IR_OK)
            FUZZ_FAIL("%s: IR_OK with a recorded error: %s", what, d->msg ? d->msg : "(null)");
        return;
    }
    if (st != IR_EINPUT && st != IR_ENOMEM && st != IR_EUNSUPPORTED && st != IR_ERUNTIME)
        FUZZ_FAIL("%s: status %d (IR_EINTERNAL is a bug): %s", what, (int)st,
                  d->msg ? d->msg : "(null)");
    if (d->status != st || !d->msg || !d->msg[0])
        FUZZ_FAIL("%s: status %d without a matching diag (diag status %d, msg %s)", what, (int)st,
                  (int)d->status, d->msg ? d->msg : "(null)");
    /* Formatting the diag must work on whatever position the error names. */
    char *f = ir_diag_format(d, "fuzz");
    if (!f)
        FUZZ_FAIL("%s: ir_diag_format returned NULL", what);
    ts_free(f);
}

/* HLO text: parse, verify, print. The text is passed without a NUL so a
 * read past `len` is an ASan finding. */
/* The text read again with the split reading (ir/parse_split.c) forced on
 * every computation of two lines and more: the same status, and the same
 * error at the same place, or a module of the same computations and
 * instructions (printed the same when it verifies: `print`). */
static void fuzz_same_split(const uint8_t *data, size_t size, IrStatus st, const IrDiag *d, const IrModule *m,
                            const char *print)
{
    IrParseOptions opt = ir_default_parse_options();
    opt.verify = false;
    opt.split_lines = 2;
    IrModule *b = NULL;
    IrDiag db = {0};
    IrStatus sb = ir_parse("fuzz.hlo", (const char *)data, size, &opt, &b, &db);
    if (sb == IR_ENOMEM || st == IR_ENOMEM) {
        /* An injected or real allocation failure: nothing to compare. */
    } else if (sb != st) {
        FUZZ_FAIL("the split reading gives another status");
    } else if (st != IR_OK) {
        if (!d->msg || !db.msg || strcmp(d->msg, db.msg) != 0 || d->pos.line != db.pos.line ||
            d->pos.col != db.pos.col)
            FUZZ_FAIL("the split reading reports another error");
    } else {
        if (b->ncomp != m->ncomp)
            FUZZ_FAIL("the split reading gives other computations");
        for (int32_t i = 0; i < m->ncomp; i++)
            if (b->comp[i]->ninstr != m->comp[i]->ninstr || b->comp[i]->root != m->comp[i]->root)
                FUZZ_FAIL("the split reading gives other instructions");
        char *pb = print ? ir_print_module(b) : NULL;
        if (print && pb && strcmp(print, pb) != 0)
            FUZZ_FAIL("the split reading prints differently");
        ts_free(pb);
    }
    ir_diag_clear(&db);
    ir_module_free(b);
}

FUZZ_TARGET void fuzz_one_parse(const uint8_t *data, size_t size)
{
    IrParseOptions opt = ir_default_parse_options();
    opt.verify = false;
    IrModule *m = NULL;
    IrDiag d = {0};
    IrStatus st = ir_parse("fuzz.hlo", (const char *)data, size, &opt, &m, &d);
    fuzz_check_status("ir_parse", st, &d);
    if (st != IR_OK) {
        if (m)
            FUZZ_FAIL("ir_parse failed but returned a module");
        fuzz_same_split(data, size, st, &d, NULL, NULL);
        ir_diag_clear(&d);
        return;
    }
    IrDiag dv = {0};
    IrStatus vst = ir_verify(m, &opt.limits, &dv);
    fuzz_check_status("ir_verify", vst, &dv);
    char *text = NULL;
    if (vst == IR_OK) {
        /* A verified module prints (the printer's input is only ever
         * verified modules). */
        text = ir_print_module(m);
        if (!text)
            FUZZ_FAIL("ir_print_module returned NULL without a failing allocation");
    }
    fuzz_same_split(data, size, st, &d, m, text);
    ts_free(text);
    ir_diag_clear(&d);
    ir_diag_clear(&dv);
    ir_module_free(m);
}

/* Sharding text, NUL-terminated copy (the API takes a C string). */
FUZZ_TARGET void fuzz_one_sharding(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    IrArena *a = ir_arena_new();
    if (!a) {
        free(text);
        return;
    }
    IrSharding s;
    memset(&s, 0, sizeof s);
    IrDiag d = {0};
    IrStatus st = ir_sharding_parse(a, text, &s, &d);
    fuzz_check_status("ir_sharding_parse", st, &d);
    if (st == IR_OK) {
        /* A parsed sharding prints, and its counts are computable. */
        char *p = ir_sharding_str(&s);
        if (!p)
            FUZZ_FAIL("ir_sharding_str returned NULL");
        ts_free(p);
        (void)ir_sharding_num_tiles(&s);
        (void)ir_sharding_replication(&s);
    }
    ir_diag_clear(&d);
    ir_arena_free(a);
    free(text);
}

/* A scratch file for the readers that take a path. One per process. */
static const char *fuzz_scratch_path(void)
{
    static char path[64];
    if (!path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/tessel-fuzz-%ld.npy", dir && strlen(dir) < 30 ? dir : "/tmp",
                 (long)getpid());
    }
    return path;
}

static int fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    int rc = fclose(f);
    return w == size && rc == 0 ? 0 : -1;
}

/* .npy bytes: the header parser on the buffer, then (when the header
 * parses and the data is small) the whole-file reader and the box reader
 * through a scratch file, expecting the shape the header declares. */
FUZZ_TARGET void fuzz_one_npy(const uint8_t *data, size_t size)
{
    RtNpyHeader h;
    IrDiag d = {0};
    IrStatus st = rt_npy_parse_header(data, size, "fuzz.npy", &h, &d);
    fuzz_check_status("rt_npy_parse_header", st, &d);
    ir_diag_clear(&d);
    if (st != IR_OK)
        return;
    if (h.rank < 0 || h.rank > IR_MAX_RANK)
        FUZZ_FAIL("rt_npy_parse_header: rank %d", (int)h.rank);
    if (h.data_offset < 0 || h.data_bytes < 0 || h.data_bytes > FUZZ_NPY_MAX_DATA)
        return;
    if (h.type == IR_INVALID || !ir_type_is_array(h.type))
        return;
    IrShape shape;
    memset(&shape, 0, sizeof shape);
    shape.type = h.type;
    shape.rank = h.rank;
    shape.dims = h.dims;
    int64_t nbytes = ir_shape_bytes(&shape);
    if (nbytes < 0 || nbytes > FUZZ_NPY_MAX_DATA)
        return;
    const char *path = fuzz_scratch_path();
    if (fuzz_write_file(path, data, size) != 0) {
        unlink(path);
        return;
    }
    uint8_t *out = malloc(nbytes ? (size_t)nbytes : 1);
    if (out) {
        st = rt_npy_read(path, &shape, "the fuzzed array", out, &d);
        fuzz_check_status("rt_npy_read", st, &d);
        ir_diag_clear(&d);
        /* The box of the first half of every dimension. */
        int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK];
        for (int32_t i = 0; i < h.rank; i++) {
            lo[i] = h.dims[i] / 4;
            hi[i] = h.dims[i] / 2 > lo[i] ? h.dims[i] / 2 : lo[i];
        }
        st = rt_npy_read_box(path, &shape, NULL, lo, hi, out, &d);
        fuzz_check_status("rt_npy_read_box", st, &d);
        ir_diag_clear(&d);
        free(out);
    }
    unlink(path);
}

/* One load of a plan text (exactly `size` bytes, no NUL after them). */
static void fuzz_plan_load(const uint8_t *data, size_t size)
{
    CompileResult r;
    IrDiag d = {0};
    IrStatus st = compile_plan_load("fuzz.plan", (const char *)data, size, 0, &r, &d);
    fuzz_check_status("compile_plan_load", st, &d);
    if (st == IR_OK) {
        for (int32_t k = 0; k < r.prog.ncluster; k++) {
            IrModule *sig = rt_signature_module(&r.prog.cluster[k]);
            if (!sig)
                FUZZ_FAIL("rt_signature_module returned NULL");
            ir_module_free(sig);
        }
        compile_result_free(&r);
    } else if (r.prog.cluster || r.prog.host || r.layouts) {
        FUZZ_FAIL("compile_plan_load failed but left owned parts in *out");
    }
    ir_diag_clear(&d);
}

/* A plan file: load (the frame first: header, digest; then parse,
 * verify, check every plan line against the module), the text passed
 * with its length and no NUL (the over-read of
 * regressions/plan-unterminated-text-overread, fixed in 4d8cf29); on
 * success the signature module is built from it, as `tessel run` does.
 * Almost every mutation breaks the digest, so the input is loaded twice:
 * as it is (the frame check), and re-signed (its body, without a header
 * or digest line it has, framed anew: compile_plan_frame), which reaches
 * the loader behind the digest as the fuzzer mutated it. */
FUZZ_TARGET void fuzz_one_plan(const uint8_t *data, size_t size)
{
    fuzz_plan_load(data, size);
    (void)compile_is_plan_text((const char *)data, size);
    char *body = malloc(size + 1);
    if (!body)
        return;
    memcpy(body, data, size);
    body[size] = 0; /* a NUL inside ends the body: compile_plan_frame takes a string */
    char *b = body;
    if (strncmp(b, "// TesselPlanFile ", 18) == 0)
        b = strchr(b, '\n') ? strchr(b, '\n') + 1 : b + strlen(b);
    char *last = strstr(b, "\n// TesselDigest ");
    if (last)
        last[1] = 0;
    char *framed = compile_plan_frame(b);
    free(body);
    if (!framed)
        return;
    size_t n = strlen(framed);
    uint8_t *exact = malloc(n ? n : 1);
    if (exact) {
        memcpy(exact, framed, n);
        fuzz_plan_load(exact, n);
        free(exact);
    }
    ts_free(framed);
}

/* An outputs.json tessel may find in an output directory or checkpoint:
 * the bytes are written as DIR/outputs.json beside one file, output_0.npy
 * (whose SHA-256 a seed may name), and ts_outputs_verify checks it. The
 * contract: TS_OK only for a manifest with tessel's format, version and
 * own digest whose files all match; otherwise TS_EINPUT (or TS_ENOMEM)
 * with a message; never a crash, a leak or a file touched. */
FUZZ_TARGET void fuzz_one_manifest(const uint8_t *data, size_t size)
{
    char dir[] = "/tmp/tessel-fuzz-manifest-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/output_0.npy", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("npy", f); /* 3 bytes; a seed names their SHA-256 to reach TS_OK */
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/outputs.json", dir);
    f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
    TsDiag d = {0};
    char dg[65] = "x";
    TsStatus st = ts_outputs_verify(dir, dg, &d);
    if (st != TS_OK && st != TS_EINPUT && st != TS_ENOMEM)
        FUZZ_FAIL("ts_outputs_verify: status %d", (int)st);
    if (st != TS_OK && (d.status != st || !d.msg || !d.msg[0] || dg[0]))
        FUZZ_FAIL("ts_outputs_verify: status %d without its diag, or a digest given", (int)st);
    if (st == TS_OK && (d.status != TS_OK || strlen(dg) != 64))
        FUZZ_FAIL("ts_outputs_verify: TS_OK without a digest");
    ts_diag_clear(&d);
    snprintf(path, sizeof path, "%s/output_0.npy", dir);
    if (access(path, F_OK) != 0)
        FUZZ_FAIL("ts_outputs_verify removed a file");
    unlink(path);
    snprintf(path, sizeof path, "%s/outputs.json", dir);
    unlink(path);
    rmdir(dir);
}

#endif /* TESSEL_FUZZ_TARGETS_H */
