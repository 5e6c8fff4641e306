/*
 * tessel.h: the public API of libtessel, for programs that use tessel as a
 * library. It is small on purpose: load (parse and verify) an HLO module,
 * run it with the reference executor on .npy inputs, and report errors the
 * way the command line does. The layers' own headers (ir/ir.h,
 * device/device.h, runtime/runtime.h, ...) are internal and may change.
 *
 * Conventions: every function that can fail returns a TsStatus and, when
 * given a TsDiag, records the first error in it (file, line, column, the
 * source line and a message). Nothing here prints or exits. Strings and
 * objects returned to you are yours to free with the function named in
 * their comment.
 *
 *     TsDiag d = {0};
 *     TsModule *m;
 *     if (ts_module_load("mlp.hlo", &m, &d) != TS_OK) {
 *         char *s = ts_diag_format(&d);      // "tessel: mlp.hlo:3:7: error: ..."
 *         fputs(s, stderr);
 *         ts_free(s);
 *         ts_diag_clear(&d);
 *         return 2;
 *     }
 *     TsInput in[] = {{"x", "x.npy"}};
 *     TsRunOptions ro = {.ninputs = 1, .inputs = in, .random = 1, .seed = 1,
 *                        .output_dir = "out"};
 *     TsStatus st = ts_run_reference(m, &ro, &d);   // writes out/output_0.npy
 *     ts_module_free(m);
 */
#ifndef TESSEL_H
#define TESSEL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; ts_version() gives the library's. */
#define TS_VERSION "0.1.0"

/* Results. The values are those of the library's internal status, and
 * the command line maps them to exit statuses: TS_EINPUT and
 * TS_EUNSUPPORTED to 2, the others to 1. */
typedef enum TsStatus {
    TS_OK = 0,
    TS_EINPUT,       /* bad input: syntax, semantics, a bad or missing .npy */
    TS_ENOMEM,       /* out of memory */
    TS_EUNSUPPORTED, /* valid input that tessel cannot handle (yet) */
    TS_EINTERNAL,    /* a bug in tessel */
    TS_ERUNTIME,     /* a failure while running (I/O, a kernel) */
} TsStatus;

/* The first error of a call. `file` is NULL when the error is not about a
 * file; line/col are 0 when unknown; `line_text` is the source line (no
 * newline) or NULL. Strings belong to the diag: ts_diag_clear frees them.
 * Initialise with {0} before the first use. */
typedef struct TsDiag {
    TsStatus status;
    char *file;
    int32_t line, col;
    char *line_text;
    char *msg;
} TsDiag;

/* An HLO module, parsed and verified. */
typedef struct TsModule TsModule;

/* One input: `key` names an entry parameter by index ("0"), by
 * instruction name ("x"), or a leaf of a tuple parameter ("0.1", "p.1");
 * `path` is a .npy file. Both strings are borrowed for the call. */
typedef struct TsInput {
    const char *key;
    const char *path;
} TsInput;

typedef struct TsRunOptions {
    int32_t ninputs;
    const TsInput *inputs;
    bool random;             /* fill unbound leaves with the deterministic random inputs */
    uint64_t seed;
    /* Write the result's leaves to output_dir/output_<i>.npy (all or
     * nothing; the directory is created if missing). NULL: write nothing. */
    const char *output_dir;
} TsRunOptions;

/* The library version, e.g. "0.1.0". Static string. */
const char *ts_version(void);

/* Read, parse and verify the HLO text file at `path`. On success *out is a
 * new module (ts_module_free); on failure *out is NULL and d says why with
 * FILE:LINE:COL. */
TsStatus ts_module_load(const char *path, TsModule **out, TsDiag *d);

/* Free a module (NULL is fine). */
void ts_module_free(TsModule *m);

/* The module's name (owned by the module) and its number of entry parameters. */
const char *ts_module_name(const TsModule *m);
int32_t ts_module_num_parameters(const TsModule *m);

/* Run the entry computation of `m` unpartitioned on one device (the
 * reference executor), inputs from .npy files and/or random fills, and
 * write the outputs as opt->output_dir says. `summary`, when not NULL,
 * receives a heap string (ts_free) with one line per output leaf:
 * "output 0: f32[4,8] min ... max ... mean ... first [...]". */
TsStatus ts_run_reference(const TsModule *m, const TsRunOptions *opt, char **summary,
                          TsDiag *d);

/* Format a diag as the command line prints it:
 * "tessel: FILE:LINE:COL: error: MESSAGE\n  LINE\n  ^\n". Heap string
 * (ts_free) or NULL when out of memory. */
char *ts_diag_format(const TsDiag *d);

/* Free the strings of a diag and reset it to {0}. */
void ts_diag_clear(TsDiag *d);

/* Free memory the library returned (strings). */
void ts_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_H */
