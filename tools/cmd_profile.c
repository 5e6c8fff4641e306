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
 * first step excluded). The "local" scope (a group inside one host) is
 * measured in this process; under `mpirun -np H` (H >= 2) rank 0 measures
 * it the same way, then every rank runs the same collectives over H
 * devices, one per rank (hosts H, local devices 1: the group crosses
 * hosts, over the transport `tessel run` uses), for the "remote" scope;
 * rank 0 writes the profile. Without mpirun the remote figures keep the
 * defaults.
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
    "(JSON, docs/auto-shard.md). Under `mpirun -np H` (H >= 2) the collectives\n"
    "are measured across the H ranks too (one device each: the \"remote\"\n"
    "figures, for groups that span hosts) and rank 0 writes the profile;\n"
    "without mpirun the across-hosts figures keep their defaults.\n"
    "\n"
    "  -o FILE                 write the profile there (default, or -: stdout)\n"
    "  --num-partitions N      devices of the collectives (default 2)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage.\n";

/* The median step of `text` compiled (spmd: replayed) for n partitions,
 * in seconds; < 0 after printing why. With a world w: over its ranks, one
 * device each (n is its size), the figure on rank 0 (0 on the others). */
static double step_seconds(const char *text, int64_t n, bool spmd, TsMpiWorld *w)
{
    TsDiag d = {0};
    TsModule *m = NULL;
    TsPlan *p = NULL;
    TsOutputs *out = NULL;
    double t = -1;
    TsCompileOptions co = {.num_partitions = n, .spmd = spmd, .hosts = w ? n : 0, .local_devices = w ? 1 : 0};
    TsRunOptions ro = {.random = true, .seed = 1, .steps = 9, .stats = true, .per_device = spmd};
    TsStatus st = ts_module_parse("<profile>", text, strlen(text), NULL, &m, &d);
    if (st == TS_OK)
        st = ts_compile(m, &co, &p, &d);
    if (st == TS_OK)
        st = w ? ts_plan_run_mpi(p, ts_mpi_comm(w), &ro, &out, &d) : ts_plan_run(p, &ro, &out, &d);
    if (st == TS_OK && w && ts_mpi_rank(w) != 0) {
        t = 0;
    } else if (st == TS_OK) {
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

/* alpha and beta of the four kinds over n devices (with w: one per rank)
 * into a[] and b[]; false after printing why. On ranks other than 0 the
 * figures are 0. */
static bool collectives(int64_t n, TsMpiWorld *w, double *a, double *b)
{
    const int64_t small = 256 * n, large = 1048576 / n * n;
    for (int k = 0; k < 4; k++) {
        double t[2];
        for (int s = 0; s < 2; s++) {
            char *text = coll_module(k, n, s ? large : small);
            t[s] = text ? step_seconds(text, n, true, w) : -1;
            free(text);
            if (t[s] < 0 || (t[s] == 0 && !(w && ts_mpi_rank(w) != 0)))
                return false;
        }
        /* Bytes each device moves, as auto/cost.c counts them. */
        double f = (double)(n - 1) / (double)n * (k == 0 ? 2 : 1);
        double bs = 4.0 * (double)(k == 1 ? small * n : small), bl = 4.0 * (double)(k == 1 ? large * n : large);
        double beta = (t[1] - t[0]) / (f * (bl - bs));
        beta = beta > 1e-13 ? beta : 1e-13;
        double alpha = t[0] - f * bs * beta;
        a[k] = alpha > 1e-7 ? alpha : 1e-7;
        b[k] = beta;
    }
    return true;
}

/* Under mpirun: rank 0 the local figures alone (the others wait at the
 * agreement), then all ranks the remote ones; rank 0 writes. */
static int run_profile_mpi(const CliOptions *o, int64_t n)
{
    TsMpiWorld *w = NULL;
    TsDiag d = {0};
    TsStatus st = ts_mpi_init(&w, &d);
    if (st != TS_OK) {
        int rc = cli_report(st, &d);
        if (w)
            ts_mpi_abort(w, NULL);
        return rc;
    }
    int rank = ts_mpi_rank(w), size = ts_mpi_size(w);
    int rc = CLI_OK;
    if (size < 2) {
        if (rank == 0)
            fputs("tessel: error: profile under mpirun measures across hosts: start 2 ranks or more "
                  "(mpirun -np 2 tessel profile), or run it without mpirun\n", stderr);
        rc = CLI_USAGE;
    }
    char *json = NULL;
    if (rc == CLI_OK && rank == 0) {
        json = malloc(8192);
        rc = json ? CLI_OK : CLI_FAIL;
    }
    double al[4] = {0}, bl[4] = {0}, ar[4] = {0}, br[4] = {0}, tdot = 0, tadd = 0;
    static const char DOT[] = "HloModule d\nENTRY e {\n  a = f32[512,512] parameter(0)\n  b = f32[512,512] parameter(1)\n"
                              "  ROOT c = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    static const char ADD[] = "HloModule a\nENTRY e {\n  a = f32[1048576] parameter(0)\n  b = f32[1048576] parameter(1)\n"
                              "  ROOT c = f32[1048576] add(a, b)\n}\n";
    if (rc == CLI_OK && rank == 0) {
        tdot = step_seconds(DOT, 1, false, NULL);
        tadd = tdot > 0 ? step_seconds(ADD, 1, false, NULL) : -1;
        rc = tdot > 0 && tadd > 0 && collectives(n, NULL, al, bl) ? CLI_OK : CLI_FAIL;
    }
    int stop = 0;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && !collectives(size, w, ar, br))
        rc = CLI_FAIL;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && rank == 0) {
        size_t len = (size_t)snprintf(json, 8192,
                                      "{\"tessel_profile\": 1, \"devices\": %lld, \"hosts\": %d,\n \"flops\": %.4g, "
                                      "\"bytes\": %.4g,\n \"collectives\": {",
                                      (long long)n, size, 2.0 * 512 * 512 * 512 / tdot, 3.0 * 4 * 1048576 / tadd);
        for (int k = 0; k < 4; k++)
            len += (size_t)snprintf(json + len, 8192 - len,
                                    "%s\n  \"%s\": {\"local\": {\"alpha\": %.4g, \"beta\": %.4g}, "
                                    "\"remote\": {\"alpha\": %.4g, \"beta\": %.4g}}",
                                    k ? "," : "", KIND[k], al[k], bl[k], ar[k], br[k]);
        snprintf(json + len, 8192 - len, "}}\n");
    }
    TsStatus fin = ts_mpi_finalize(w, rc == CLI_OK, &d);
    if (rc == CLI_OK && fin != TS_OK)
        rc = cli_report(fin, &d);
    ts_diag_clear(&d);
    if (rc == CLI_OK && rank == 0)
        rc = cli_write_text(o->out, json);
    free(json);
    return rc;
}

static int run_profile(const CliOptions *o)
{
    if (o->npos)
        return cli_usage_error(&cli_cmd_profile, "profile takes no model");
    int64_t n = o->num_partitions ? o->num_partitions : 2;
    if (n < 2 || n > 64)
        return cli_usage_error(&cli_cmd_profile, "--num-partitions for the profile is 2 to 64");
    if (ts_mpi_launched())
        return run_profile_mpi(o, n);
    static const char DOT[] = "HloModule d\nENTRY e {\n  a = f32[512,512] parameter(0)\n  b = f32[512,512] parameter(1)\n"
                              "  ROOT c = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    static const char ADD[] = "HloModule a\nENTRY e {\n  a = f32[1048576] parameter(0)\n  b = f32[1048576] parameter(1)\n"
                              "  ROOT c = f32[1048576] add(a, b)\n}\n";
    double tdot = step_seconds(DOT, 1, false, NULL), tadd = tdot > 0 ? step_seconds(ADD, 1, false, NULL) : -1;
    if (tdot <= 0 || tadd <= 0)
        return CLI_FAIL;
    char json[4096];
    size_t len = (size_t)snprintf(json, sizeof json,
                                  "{\"tessel_profile\": 1, \"devices\": %lld,\n \"flops\": %.4g, \"bytes\": %.4g,\n"
                                  " \"collectives\": {",
                                  (long long)n, 2.0 * 512 * 512 * 512 / tdot, 3.0 * 4 * 1048576 / tadd);
    double a[4], b[4];
    if (!collectives(n, NULL, a, b))
        return CLI_FAIL;
    for (int k = 0; k < 4; k++)
        len += (size_t)snprintf(json + len, sizeof json - len, "%s\n  \"%s\": {\"local\": {\"alpha\": %.4g, \"beta\": %.4g}}",
                                k ? "," : "", KIND[k], a[k], b[k]);
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
