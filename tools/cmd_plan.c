/*
 * cmd_plan.c: `tessel plan MODEL.hlo|PLAN [--format text|json|dot] [-o FILE]`:
 * what the partitioner decided, for a person (text), a program (JSON, see
 * docs/plan.md) or Graphviz (DOT).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char HELP[] =
    "Usage: tessel plan MODEL.hlo|PLAN [--format text|json|dot] [-o FILE]\n"
    "                   [--num-partitions N] [--num-replicas R] [--hosts H] [--local-devices L]\n"
    "\n"
    "Dump the sharding plan: every instruction's shape, sharding and per-device\n"
    "shape, the collectives the partitioner inserted (replica groups, bytes per\n"
    "device), each input's split tree and each output's concat tree, the device\n"
    "assignment, each host's replica islands, InputMapping / XlaInputShape /\n"
    "XlaOutputShape, and the per-device peak memory estimate.\n"
    "\n"
    "  --format text|json|dot  text for people (default), JSON for programs,\n"
    "                          DOT for Graphviz (coloured by sharding,\n"
    "                          fallbacks in red, collectives as octagons)\n"
    "  --limit NAME=VALUE      refuse models declaring more: NAME elements (per\n"
    "                          array, default 2^34), rank (64), tuple (65536),\n"
    "                          depth (64: nesting of tuples and braces, and of\n"
    "                          calls), name (4096 bytes), instructions (2^22);\n"
    "                          repeatable (docs/cli.md, Limits)\n"
    "  -o FILE                 write to FILE (default, or -: stdout)\n"
    "  --num-partitions N, --num-replicas R, --hosts H, --local-devices L\n"
    "                          as for `tessel compile`\n"
    "  --no-verify             skip the verifier after the passes that rewrite\n"
    "                          the module (outlining, partitioning): about 5%\n"
    "                          of compile time; a failure there is tessel's bug\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad input.\n";

static int run_plan(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_plan, o->npos ? "plan takes one MODEL.hlo or PLAN" : "missing MODEL.hlo");
    const char *fmt = o->format ? o->format : "text";
    if (strcmp(fmt, "text") && strcmp(fmt, "json") && strcmp(fmt, "dot"))
        return cli_usage_error(&cli_cmd_plan, "--format must be text, json or dot, not '%s'", fmt);
    TsPlan *p = NULL;
    int rc = cli_open(o, o->pos[0], &p);
    if (rc == CLI_OK)
        rc = cli_layout(o, p);
    if (rc == CLI_OK && ts_plan_num_clusters(p) == 0) {
        fprintf(stderr, "tessel: %s: no device work: nothing is partitioned\n", o->pos[0]);
    } else if (rc == CLI_OK) {
        TsDiag d = {0};
        char *text = NULL;
        TsStatus st = ts_plan_dump(p, fmt, &text, &d);
        rc = st == TS_OK ? cli_write_text(o->out, text) : cli_report(st, &d);
        ts_free(text);
    }
    ts_plan_free(p);
    return rc;
}

const CliCommand cli_cmd_plan = {
    .name = "plan",
    .summary = "dump the sharding plan (text, JSON or DOT)",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_PARTITIONS | OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_FORMAT | OPT_OUT | OPT_NO_VERIFY,
    .run = run_plan,
};
