/*
 * cmd_profile.c: `tessel profile [-o FILE] [--num-partitions N]`: the
 * rates of --auto-shard's cost model measured on this machine with
 * tessel's own kernels and collectives, written as the profile file that
 * `--profile FILE` reads (docs/auto-shard.md).
 *
 *   flops   a dot f32[512,512] x f32[512,512] on one device: 2*512^3 / step
 *   bytes   an add of two f32[1M]: 12 MB moved / step
 *   alpha, beta of each collective kind over N devices of this process
 *           (default 2): SPMD programs (replayed as they are, --spmd) of
 *           one collective on f32[256] and f32[1M] per device; beta from
 *           the difference of the two step times over the difference of
 *           the bytes the kind moves ((n-1)/n of its buffer, twice for
 *           all-reduce), alpha the small one's time less its bytes
 *
 * Every figure is the median step of `--steps 9` (tessel's own timer: the
 * first step excluded). Only the "local" scope (a group inside one host)
 * is measured; across hosts keeps the defaults.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HELP[] =
    "Usage: tessel profile [-o FILE] [--num-partitions N]\n"
    "\n"
    "Measure the rates of --auto-shard's cost model on this machine with\n"
    "tessel's own kernels and collectives: a dot's FLOP/s, elementwise bytes/s,\n"
    "and alpha (seconds) and beta (seconds per byte) of all-reduce, all-gather,\n"
    "reduce-scatter and all-to-all over N devices of one host (default 2).\n"
    "Writes the profile file `tessel compile --auto-shard --profile FILE` reads\n"
    "(JSON, docs/auto-shard.md). Across-hosts figures keep their defaults.\n"
    "\n"
    "  -o FILE                 write the profile there (default, or -: stdout)\n"
    "  --num-partitions N      devices of the collectives (default 2)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage.\n";

/* The median step of `text` compiled (spmd: replayed) for n partitions,
 * in seconds; < 0 after printing why. */
static double step_seconds(const char *text, int64_t n, bool spmd)
{
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *p = NULL;
    TsOutputs *out = NULL;
    double t = -1;
    TsCompileOptions co = {.num_partitions = n, .spmd = spmd};
    TsRunOptions ro = {.random = true, .seed = 1, .steps = 9, .stats = true, .per_device = spmd};
    TsStatus st = ts_module_parse("<profile>", text, strlen(text), NULL, &m, &d);
    if (st == TS_OK)
        st = ts_compile(m, &co, &p, &d);
    if (st == TS_OK)
        st = ts_plan_run(p, &ro, &out, &d);
    if (st == TS_OK) {
        const char *s = strstr(ts_outputs_stats(out), "then median ");
        if (s)
            t = strtod(s + strlen("then median "), NULL) * 1e-3;
        else
            fputs("tessel: error: profile: no step times in the run's stats\n", stderr);
    } else {
        cli_report(st, &d);
    }
    ts_outputs_free(out);
    ts_plan_free(p);
    ts_module_free(m);
    return t;
}

static const char *const KIND[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};

/* One collective of kind k over n devices on f32[e] per device (all-gather
 * gathers f32[e] from each; reduce-scatter and all-to-all take f32[e]). */
static char *coll_module(int k, int64_t n, int64_t e)
{
    char groups[512] = "{";
    for (int64_t i = 0; i < n && strlen(groups) < sizeof groups - 16; i++)
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%lld", i ? "," : "", (long long)i);
    strcat(groups, "}");
    char *t = malloc(2048);
    if (!t)
        return NULL;
    const char *add = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n";
    if (k == 0)
        snprintf(t, 2048, "HloModule p, num_partitions=%lld\n%sENTRY e {\n  x = f32[%lld] parameter(0)\n"
                 "  ROOT r = f32[%lld] all-reduce(x), channel_id=1, replica_groups={%s}, use_global_device_ids=true, "
                 "to_apply=add\n}\n", (long long)n, add, (long long)e, (long long)e, groups);
    else if (k == 1)
        snprintf(t, 2048, "HloModule p, num_partitions=%lld\nENTRY e {\n  x = f32[%lld] parameter(0)\n"
                 "  ROOT r = f32[%lld] all-gather(x), channel_id=1, replica_groups={%s}, dimensions={0}, "
                 "use_global_device_ids=true\n}\n", (long long)n, (long long)e, (long long)(e * n), groups);
    else if (k == 2)
        snprintf(t, 2048, "HloModule p, num_partitions=%lld\n%sENTRY e {\n  x = f32[%lld] parameter(0)\n"
                 "  ROOT r = f32[%lld] reduce-scatter(x), channel_id=1, replica_groups={%s}, dimensions={0}, "
                 "use_global_device_ids=true, to_apply=add\n}\n", (long long)n, add, (long long)e, (long long)(e / n),
                 groups);
    else
        snprintf(t, 2048, "HloModule p, num_partitions=%lld\nENTRY e {\n  x = f32[%lld] parameter(0)\n"
                 "  ROOT r = f32[%lld] all-to-all(x), channel_id=1, replica_groups={%s}, dimensions={0}\n}\n",
                 (long long)n, (long long)e, (long long)e, groups);
    return t;
}

static int run_profile(const CliOptions *o)
{
    if (o->npos)
        return cli_usage_error(&cli_cmd_profile, "profile takes no model");
    int64_t n = o->num_partitions ? o->num_partitions : 2;
    if (n < 2 || n > 64)
        return cli_usage_error(&cli_cmd_profile, "--num-partitions for the profile is 2 to 64");
    static const char DOT[] = "HloModule d\nENTRY e {\n  a = f32[512,512] parameter(0)\n  b = f32[512,512] parameter(1)\n"
                              "  ROOT c = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    static const char ADD[] = "HloModule a\nENTRY e {\n  a = f32[1048576] parameter(0)\n  b = f32[1048576] parameter(1)\n"
                              "  ROOT c = f32[1048576] add(a, b)\n}\n";
    double tdot = step_seconds(DOT, 1, false), tadd = tdot > 0 ? step_seconds(ADD, 1, false) : -1;
    if (tdot <= 0 || tadd <= 0)
        return CLI_FAIL;
    char json[4096];
    size_t len = (size_t)snprintf(json, sizeof json,
                                  "{\"tessel_profile\": 1, \"devices\": %lld,\n \"flops\": %.4g, \"bytes\": %.4g,\n"
                                  " \"collectives\": {",
                                  (long long)n, 2.0 * 512 * 512 * 512 / tdot, 3.0 * 4 * 1048576 / tadd);
    const int64_t small = 256 * n, large = 1048576 / n * n;
    for (int k = 0; k < 4; k++) {
        double t[2];
        for (int s = 0; s < 2; s++) {
            char *text = coll_module(k, n, s ? large : small);
            t[s] = text ? step_seconds(text, n, true) : -1;
            free(text);
            if (t[s] <= 0)
                return CLI_FAIL;
        }
        /* Bytes each device moves, as auto/cost.c counts them. */
        double f = (double)(n - 1) / (double)n * (k == 0 ? 2 : 1);
        double bs = 4.0 * (double)(k == 1 ? small * n : small), bl = 4.0 * (double)(k == 1 ? large * n : large);
        double beta = (t[1] - t[0]) / (f * (bl - bs));
        beta = beta > 1e-13 ? beta : 1e-13;
        double alpha = t[0] - f * bs * beta;
        alpha = alpha > 1e-7 ? alpha : 1e-7;
        len += (size_t)snprintf(json + len, sizeof json - len, "%s\n  \"%s\": {\"local\": {\"alpha\": %.4g, \"beta\": %.4g}}",
                                k ? "," : "", KIND[k], alpha, beta);
    }
    snprintf(json + len, sizeof json - len, "}}\n");
    return cli_write_text(o->out, json);
}

const CliCommand cli_cmd_profile = {
    .name = "profile",
    .summary = "measure the cost model's rates for --auto-shard (writes a profile)",
    .help = HELP,
    .accepts = OPT_OUT | OPT_PARTITIONS,
    .run = run_profile,
};
