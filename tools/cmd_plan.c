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
    "                          depth (64), name (4096 bytes); repeatable\n"
    "  -o FILE                 write to FILE (default, or -: stdout)\n"
    "  --num-partitions N, --num-replicas R, --hosts H, --local-devices L\n"
    "                          as for `tessel compile`\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad input.\n";

static int write_out(const CliOptions *o, char *text)
{
    if (!text) {
        fprintf(stderr, "tessel: error: out of memory\n");
        return CLI_FAIL;
    }
    int rc = cli_write_text(o->out, text);
    ts_free(text);
    return rc;
}

/* A program with host work: one plan per cluster, plus what stays on the
 * host and the values cut between them. */
static int dump_program(const CliOptions *o, const char *fmt, const RtProgram *prog)
{
    if (strcmp(fmt, "dot") == 0)
        return write_out(o, rt_program_dot(prog));
    int32_t n = prog->ncluster;
    Plan **plans = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *plans);
    int rc = plans ? CLI_OK : CLI_FAIL;
    for (int32_t k = 0; rc == CLI_OK && k < n; k++)
        rc = cli_build_plan(o, &prog->cluster[k], &plans[k]);
    if (rc == CLI_OK && n == 0) {
        fprintf(stderr, "tessel: %s: no device work: nothing is partitioned\n", o->pos[0]);
        rc = CLI_OK;
    } else if (rc == CLI_OK) {
        rc = write_out(o, strcmp(fmt, "json") == 0 ? rt_plans_json(plans, n, &prog->res)
                                                   : rt_plans_text(plans, n, &prog->res));
    }
    for (int32_t k = 0; plans && k < n; k++)
        plan_free(plans[k]);
    ts_free(plans);
    return rc;
}

static int run_plan(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_plan, o->npos ? "plan takes one MODEL.hlo or PLAN" : "missing MODEL.hlo");
    const char *fmt = o->format ? o->format : "text";
    if (strcmp(fmt, "text") && strcmp(fmt, "json") && strcmp(fmt, "dot"))
        return cli_usage_error(&cli_cmd_plan, "--format must be text, json or dot, not '%s'", fmt);
    CliProgram p;
    int rc = cli_prepare(o, o->pos[0], &p);
    if (rc != CLI_OK)
        return rc;
    if (p.has_host)
        rc = dump_program(o, fmt, &p.prog);
    else {
        Plan *plan = NULL;
        rc = cli_build_plan(o, &p.c, &plan);
        if (rc == CLI_OK) {
            char *text = strcmp(fmt, "json") == 0  ? rt_plan_json(plan)
                         : strcmp(fmt, "dot") == 0 ? rt_plan_dot(plan, p.c.src, p.c.spmd)
                                                   : rt_plan_text(plan);
            rc = write_out(o, text);
        }
        plan_free(plan);
    }
    cli_program_free(&p);
    return rc;
}

const CliCommand cli_cmd_plan = {
    .name = "plan",
    .summary = "dump the sharding plan (text, JSON or DOT)",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_PARTITIONS | OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_FORMAT | OPT_OUT,
    .run = run_plan,
};
