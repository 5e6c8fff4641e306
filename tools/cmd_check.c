/*
 * cmd_check.c: `tessel check MODEL.hlo`: parse and verify a module and say
 * in one line what it holds, e.g.
 *   model.hlo: ok: module mlp, 3 computations, 27 instructions, entry main
 *   (2 parameters -> f32[4,8]), num_partitions=1 replica_count=1
 * (one line). Errors in the file print as FILE:LINE:COL with a caret.
 * With --print it prints the parsed module instead, as HLO text that parses
 * back to the same module (the round-trip tests rely on it).
 */
#include "cli.h"

#include <stdio.h>

static const char HELP[] =
    "Usage: tessel check MODEL.hlo [--print] [--stats] [--limit NAME=VALUE ...]\n"
    "                    [--num-partitions N] [--num-replicas R]\n"
    "\n"
    "Parse and verify an HLO text module (XLA's syntax) and print a one-line\n"
    "summary: module name, computations, instructions, the entry computation's\n"
    "parameters and result shape, num_partitions and replica_count.\n"
    "\n"
    "Options:\n"
    "  --print     print the parsed module as HLO text (XLA's syntax) instead\n"
    "              of the summary; the text parses back to the same module\n"
    "  --stats     print the time spent parsing and verifying (to stderr)\n"
    "  --num-partitions N, --num-replicas R\n"
    "              the devices the collectives' replica_groups and pairs may\n"
    "              name (default: the module's header, else 1), as compile\n"
    "              and run check them\n"
    "  --limit NAME=VALUE\n"
    "              refuse models declaring more: NAME elements (per array,\n"
    "              default 2^34), rank (64), tuple (65536), depth (64: nesting\n"
    "              of tuples and braces, and of calls), name (4096 bytes),\n"
    "              instructions (2^22); repeatable (docs/cli.md, Limits)\n"
    "  -h, --help  show this help\n"
    "\n"
    "Exit status: 0 the module is valid; 2 it is not (the first error is\n"
    "printed as FILE:LINE:COL: error: MESSAGE with the line and a caret);\n"
    "1 a failure while running (out of memory, I/O).\n";

static int print_module(const TsModule *m)
{
    char *text = ts_module_text(m);
    if (!text) {
        fputs("tessel: error: out of memory printing the module\n", stderr);
        return CLI_FAIL;
    }
    int rc = fputs(text, stdout) < 0 || fflush(stdout) != 0 ? CLI_FAIL : CLI_OK;
    if (rc != CLI_OK)
        fputs("tessel: error: could not write the module to standard output\n", stderr);
    ts_free(text);
    return rc;
}

static int run_check(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_check, o->npos ? "check takes one MODEL.hlo"
                                                       : "missing MODEL.hlo");
    double t0 = cli_now();
    TsModule *m = NULL;
    int rc = cli_load_model(o, o->pos[0], &m);
    if (rc != CLI_OK)
        return rc;
    double t1 = cli_now();
    /* The devices its collectives name: compile's first check, the same
     * error (run found it on the first device; check passed it). */
    TsDiag d = {0};
    if (ts_module_check_devices(m, o->num_partitions, o->num_replicas, &d) != TS_OK) {
        rc = cli_report(d.status, &d);
        ts_module_free(m);
        return rc;
    }
    if (o->print) {
        rc = print_module(m);
    } else {
        char *s = ts_module_summary(m);
        if (s)
            printf("%s: ok: %s\n", o->pos[0], s);
        else
            fputs("tessel: error: out of memory\n", stderr);
        rc = s ? CLI_OK : CLI_FAIL;
        ts_free(s);
    }
    if (o->stats)
        fprintf(stderr, "tessel: stats: parse+verify %.3f ms\n", (t1 - t0) * 1e3);
    ts_module_free(m);
    return rc;
}

const CliCommand cli_cmd_check = {
    .name = "check",
    .summary = "parse and verify an HLO module; print a one-line summary",
    .help = HELP,
    .accepts = OPT_STATS | OPT_LIMIT | OPT_PRINT | OPT_PARTITIONS | OPT_REPLICAS,
    .run = run_check,
};
