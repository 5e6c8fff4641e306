/*
 * cmd_compile.c: `tessel compile MODEL.hlo [-o PLAN|-]`: propagate,
 * partition, assign devices and hosts, and write the plan: the SPMD module
 * as HLO text followed by the compile result lines (docs/plan.md).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char HELP[] =
    "Usage: tessel compile MODEL.hlo [-o PLAN|-] [--num-partitions N] [--num-replicas R]\n"
    "                      [--hosts H] [--local-devices L] [--link-gbps G] [--donate auto]\n"
    "                      [--auto-shard [--mesh SPEC] [--profile FILE] [--host-cores C]]\n"
    "\n"
    "Compile a module for N partitions x R replicas on H hosts with L devices\n"
    "each, and write the plan: the partitioned SPMD program as HLO text that\n"
    "XLA's tools read, then the compile result lines (// InputMapping,\n"
    "// XlaInputShape, // XlaOutputShape) and tessel's own (// TesselPlan ...).\n"
    "`mpirun -np H tessel run PLAN` runs it without recompiling.\n"
    "\n"
    "  --limit NAME=VALUE      refuse models declaring more: NAME elements (per\n"
    "                          array, default 2^34), rank (64), tuple (65536),\n"
    "                          depth (64: nesting of tuples and braces, and of\n"
    "                          calls), name (4096 bytes), instructions (2^22);\n"
    "                          repeatable (docs/cli.md, Limits); memory=BYTES\n"
    "                          (K/M/G): fit the estimated peak per device,\n"
    "                          reordering and recomputing values (stderr says\n"
    "                          what; exit 2 naming the least peak reached)\n"    "  -o FILE                 write the plan to FILE (default, or -: stdout);\n"
    "                          written to a temporary name and renamed\n"
    "  --sign-key FILE         sign the plan with the key in FILE (its bytes):\n"
    "                          HMAC-SHA256, checked by run and plan given the\n"
    "                          same key (docs/plan.md, Digest and signature)\n"
    "  --num-partitions N      partitions (default: the module's num_partitions, else 1)\n"
    "  --num-replicas R        replicas (default: the module's replica_count, else 1)\n"
    "  --hosts H               hosts (MPI ranks) the plan is for (default 1)\n"
    "  --local-devices L       devices per host (default N*R/H)\n"
    CLI_HELP_DONATE
    "  --link-gbps G           the links between hosts, in Gb/s (default 10),\n"
    "                          for the cost model that decides which dots are\n"
    "                          windowed (docs/cli.md, Windowed dots)\n"
    "  --auto-shard            choose a sharding for every value the module\n"
    "                          leaves unsharded, minimising the estimated step\n"
    "                          time over the mesh (docs/auto-shard.md); the\n"
    "                          module's own shardings are kept\n"
    "  --mesh SPEC             the device mesh of --auto-shard: 2x4 or\n"
    "                          data=2,model=4 (default: one axis of N); sets N\n"
    "  --profile FILE          the cost model's rates (tessel profile -o FILE;\n"
    "                          default: documented defaults)\n"
    "  --host-cores C          with --auto-shard: the cores of a host; where\n"
    "                          its devices outnumber them (4 devices, 2 cores)\n"
    "                          the tie-break toward less communication is off\n"
    "                          (default: the profile's, else a core per device)\n"
    "  --no-verify             skip the verifier after the passes that rewrite\n"
    "                          the module (outlining, partitioning): about 5%\n"
    "                          of compile time; a failure there is tessel's bug\n"
    "  --dump-dir DIR          write the module after each pass into DIR\n"
    "                          (NNNN.MODULE.after_parse.hlo, .after_propagate,\n"
    "                          .cluster_K.after_spmd_partition, ...) and the\n"
    "                          plan JSON, numbered in pass order\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad input.\n";

int cli_write_text(const char *path, const char *text)
{
    if (!path || strcmp(path, "-") == 0) {
        fputs(text, stdout);
        return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
    }
    TsDiag d = {0};
    TsStatus st = ts_write_text(path, text, &d);
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

static int run_compile(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_compile, o->npos ? "compile takes one MODEL.hlo" : "missing MODEL.hlo");
    TsPlan *p = NULL;
    int rc = cli_open(o, o->pos[0], &p);
    if (rc == CLI_OK)
        rc = cli_layout(o, p);
    if (rc == CLI_OK) {
        char *text = ts_plan_file_text(p);
        if (!text) {
            fprintf(stderr, "tessel: error: out of memory\n");
            rc = CLI_FAIL;
        } else {
            rc = cli_write_text(o->out, text);
        }
        ts_free(text);
    }
    ts_plan_free(p);
    return rc;
}

const CliCommand cli_cmd_compile = {
    .name = "compile",
    .summary = "propagate shardings, partition, and write the plan",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_PARTITIONS | OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_OUT | OPT_NO_VERIFY | OPT_DUMP_DIR |
               OPT_LINK_GBPS | OPT_AUTO | OPT_SIGN_KEY | OPT_DONATE,
    .run = run_compile,
};
