/*
 * cmd_profile.c: `tessel profile [-o FILE] [--num-partitions N]`: the
 * rates of --auto-shard's cost model measured on this machine with
 * tessel's own kernels and collectives, as a step over N devices (default
 * 2) sees them, written as the profile file that `--profile FILE` reads
 * (docs/auto-shard.md).
 *
 * Every figure comes from SPMD programs over the N devices (replayed as
 * they are, --spmd) of 16 rounds, each round some work on every device
 * and a collective that waits for it (work_module): all N devices busy at
 * once and in step, as in a step, so that where devices outnumber cores
 * a device's rate is its share of a core and a collective's rendezvous
 * is what it costs among devices that were computing.
 *
 *   flops   a round with a dot f32[128]^2 against one with f32[64]^2
 *   bytes   a round with an add over f32[64K N] against one over f32[256]
 *   alpha, beta of each collective kind: rounds with a dot f32[256]^2
 *           (the work between two collectives), the collective at the end
 *           of each against at the end of every other one, on f32[256 N]
 *           and f32[16K N] per device; beta from the difference of the
 *           two sizes' times over the difference of the bytes the kind
 *           moves ((n-1)/n of its buffer, twice for all-reduce), alpha
 *           the small one's time less its bytes
 *
 * Each difference is the median of 3, each of two median steps of
 * `--steps 9` (tessel's own timer: the first step excluded) run one after
 * the other. The "local" scope (a group inside one host) is measured in
 * this process; under `mpirun -np H` (H >= 2) rank 0 measures it the same
 * way, then every rank runs the same collectives over H devices, one per
 * rank (hosts H, local devices 1: the group crosses hosts, over the
 * transport `tessel run` uses), for the "remote" scope; rank 0 writes the
 * profile. Without mpirun the remote figures keep the defaults.
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
    "reduce-scatter and all-to-all over N devices of one host (default 2), each\n"
    "figure as a step over the N devices sees it: all of them busy at once (where\n"
    "they outnumber the cores, sharing them).\n"
    "Writes the profile file `tessel compile --auto-shard --profile FILE` reads\n"
    "(JSON, docs/auto-shard.md). Under `mpirun -np H` (H >= 2) the collectives\n"
    "are measured across the H ranks too (one device each: the \"remote\"\n"
    "figures, for groups that span hosts) and rank 0 writes the profile;\n"
    "without mpirun the across-hosts figures keep their defaults.\n"
    "\n"
    "  -o FILE                 write the profile there (default, or -: stdout)\n"
    "  --num-partitions N      devices measured (default 2): give the count the\n"
    "                          plans will run on\n"
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

/* `, "host_cores": C` (this machine's cores, which the measured devices
 * shared) into buf, or "" when hwloc cannot tell. */
static const char *cores_field(char *buf, size_t cap)
{
    int32_t c = ts_host_cores();
    if (c > 0)
        snprintf(buf, cap, " \"host_cores\": %d,", (int)c);
    else
        buf[0] = 0;
    return buf;
}

/* Rounds in each measuring program. */
#define ROUNDS 16
/* Times each figure is measured, each time against its pair (the program
 * with less of the work measured) run just before: the median of the
 * differences is kept (a loaded machine moves a step by 2x from one run
 * to the next). */
#define REPEATS 3

/* What one measuring program does each round, on each device. */
typedef struct Work {
    int64_t dot;   /* a dot f32[dot,dot] x f32[dot,dot] */
    int64_t elems; /* an add over f32[elems] of the dot's largest element */
    int coll;      /* then collective coll (0 all-reduce, 1 all-gather, 2 reduce-scatter,
                    * 3 all-to-all) ... */
    int64_t celems; /* ... over f32[celems] per device, of the add's largest element, */
    int every;      /* after every `every`-th round (1: each) */
} Work;

/* The measuring program over n devices: ROUNDS rounds of w, each
 * (every w->every-th) ending in the collective, which takes one element
 * of the round's work and gives one to the next round's dot, so that each
 * collective waits for every device's work and the next work for it, as
 * in a step:
 *
 *   m1 = dot(a0, w); y1 = x + max(m1); c1 = coll(xc + max(y1));
 *   a1 = m1 + c1[0]; m2 = dot(a1, w); ...  ROOT a16
 *
 * (a round without the collective reads its own add's first element). A
 * collective then costs what it costs in a step: where devices outnumber
 * cores, the latency of its rendezvous hides behind the devices still
 * computing on the same core (on 4 devices of 2 cores an all-reduce
 * measures 60-110 us after a dot f32[64]^2, 0-50 us after f32[256]^2),
 * which alone in its program, nothing to hide it, it does not; and the
 * work runs at the rate a device
 * gets with every device busy (without a collective between them the
 * devices run their steps apart, each with a core to itself for a while,
 * or preempted in the middle of one). Heap text (free), NULL on OOM. */
static char *work_module(const Work *w, int64_t n)
{
    size_t cap = 2048 + ROUNDS * 1536;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    char groups[512] = "{";
    for (int64_t i = 0; i < n && strlen(groups) < sizeof groups - 16; i++)
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%lld", i ? "," : "", (long long)i);
    strcat(groups, "}");
    long long D = (long long)w->dot, E = (long long)w->elems, C = (long long)w->celems;
    size_t len = (size_t)snprintf(
        t, cap,
        "HloModule p, num_partitions=%lld\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\nmax {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] maximum(a, b)\n}\nENTRY e {\n  a0 = f32[%lld,%lld] parameter(0)\n"
        "  w = f32[%lld,%lld] parameter(1)\n  x = f32[%lld] parameter(2)\n  xc = f32[%lld] parameter(3)\n"
        "  ninf = f32[] constant(-inf)\n",
        (long long)n, D, D, D, D, E, C);
    /* Elements of each kind's result per device. */
    long long out = w->coll == 1 ? C * n : w->coll == 2 ? C / n : C;
    static const char *const OP[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};
    for (int r = 1; r <= ROUNDS; r++) {
        len += (size_t)snprintf(
            t + len, cap - len,
            "  m%d = f32[%lld,%lld] dot(a%d, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            "  s%d = f32[] reduce(m%d, ninf), dimensions={0,1}, to_apply=max\n"
            "  sb%d = f32[%lld] broadcast(s%d), dimensions={}\n  y%d = f32[%lld] add(x, sb%d)\n"
            "  t%d = f32[] reduce(y%d, ninf), dimensions={0}, to_apply=max\n"
            "  tb%d = f32[%lld] broadcast(t%d), dimensions={}\n  u%d = f32[%lld] add(xc, tb%d)\n",
            r, D, D, r - 1, r, r, r, E, r, r, E, r, r, r, r, C, r, r, C, r);
        bool coll = r % w->every == 0;
        if (coll)
            len += (size_t)snprintf(t + len, cap - len,
                                    "  c%d = f32[%lld] %s(u%d), channel_id=%d, replica_groups={%s}%s%s\n", r, out,
                                    OP[w->coll], r, r, groups, w->coll == 1 || w->coll == 2 ? ", dimensions={0}" : "",
                                    w->coll == 3   ? ", dimensions={0}"
                                    : w->coll == 1 ? ", use_global_device_ids=true"
                                                   : ", use_global_device_ids=true, to_apply=add");
        len += (size_t)snprintf(t + len, cap - len,
                                "  f%d = f32[1] slice(%s%d), slice={[0:1]}\n  g%d = f32[] reshape(f%d)\n"
                                "  gb%d = f32[%lld,%lld] broadcast(g%d), dimensions={}\n"
                                "  %sa%d = f32[%lld,%lld] add(m%d, gb%d)\n",
                                r, coll ? "c" : "u", r, r, r, r, D, D, r, r == ROUNDS ? "ROOT " : "", r, D, D,
                                r, r);
    }
    snprintf(t + len, cap - len, "}\n");
    return t;
}

/* The median step of work_module(w, n), in seconds; < 0 after printing
 * why (0 on ranks other than 0). */
static double work_step(const Work *w, int64_t n, TsMpiWorld *world)
{
    char *text = work_module(w, n);
    double t = text ? step_seconds(text, n, true, world) : -1;
    free(text);
    return t;
}

static double median3(const double *v)
{
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* *sec: the seconds a round of `more` takes beyond a round of `less`
 * (the median of REPEATS differences; noise may make it <= 0); false
 * after printing why. */
static bool extra(const Work *more, const Work *less, int64_t n, TsMpiWorld *world, double *sec)
{
    double d[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double b = work_step(less, n, world), t = b >= 0 ? work_step(more, n, world) : -1;
        if (b < 0 || t < 0)
            return false;
        d[r] = (t - b) / ROUNDS;
    }
    *sec = median3(d);
    return true;
}

/* The compute rates of one device with every one of the n devices busy,
 * as a step sees them (each round ends in an all-reduce of 256 n
 * elements, which keeps the devices in step): *flops from a dot
 * f32[128]^2 against f32[64]^2 (the dots of a step are small: a 512^3
 * one runs 2x faster a FLOP), *bytes from an add over f32[64K n] against
 * f32[256] (its bytes counted as auto/cost.c counts them: the
 * broadcast's and the add's outputs). Where devices outnumber cores they
 * share them: 4 devices on 2 cores get about 23 GFLOP/s each here, where
 * one device alone gets 220 from a 512^3 dot. */
static bool rates(int64_t n, double *flops, double *bytes)
{
    Work small = {.dot = 64, .elems = 256, .coll = 0, .celems = 256 * n, .every = 1};
    Work dot = small, add = small;
    dot.dot = 128;
    add.elems = 65536 * n;
    double tdot, tadd;
    if (!extra(&dot, &small, n, NULL, &tdot) || !extra(&add, &small, n, NULL, &tadd))
        return false;
    /* A difference lost in the noise (<= 0) reads as a fast rate, never
     * a negative one. */
    *flops = 2.0 * (128.0 * 128 * 128 - 64.0 * 64 * 64) / (tdot > 1e-9 ? tdot : 1e-9);
    *bytes = 2.0 * 4 * (double)(add.elems - small.elems) / (tadd > 1e-9 ? tadd : 1e-9);
    return true;
}

/* alpha and beta of the four kinds over n devices (with world: one per
 * rank) into a[] and b[]; false after printing why. Each kind's time at
 * a size is what ROUNDS rounds (a dot f32[256]^2, work between two
 * collectives, about 1 ms a device on 4 devices of 2 cores, as a step's;
 * and adds over f32[256] and the size)
 * each ending in it take beyond the same rounds with it after every
 * other one, over the ROUNDS/2 collectives more; on f32[256 n] and
 * f32[16384 n] per device (1 and 64 KiB a device on 4: the sizes of a
 * step's activations). beta is the difference of the two times over the
 * difference of the bytes the kind moves ((n-1)/n of its buffer, twice
 * for all-reduce), alpha the small one's time less its bytes. On ranks
 * other than 0 the figures are 0. */
static bool collectives(int64_t n, TsMpiWorld *world, double *a, double *b)
{
    const int64_t size[2] = {256 * n, 16384 * n};
    for (int k = 0; k < 4; k++) {
        double t[2];
        for (int s = 0; s < 2; s++) {
            Work with = {.dot = 256, .elems = 256, .coll = k, .celems = size[s], .every = 1}, half = with;
            half.every = 2;
            if (!extra(&with, &half, n, world, &t[s]))
                return false;
            t[s] *= 2; /* extra() divides by ROUNDS; ROUNDS/2 collectives more */
        }
        /* Bytes each device moves, as auto/cost.c counts them. */
        double f = (double)(n - 1) / (double)n * (k == 0 ? 2 : 1);
        double bs = 4.0 * (double)(k == 1 ? size[0] * n : size[0]), bl = 4.0 * (double)(k == 1 ? size[1] * n : size[1]);
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
    double al[4] = {0}, bl[4] = {0}, ar[4] = {0}, br[4] = {0}, flops = 0, bytes = 0;
    if (rc == CLI_OK && rank == 0)
        rc = rates(n, &flops, &bytes) && collectives(n, NULL, al, bl) ? CLI_OK : CLI_FAIL;
    int stop = 0;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && !collectives(size, w, ar, br))
        rc = CLI_FAIL;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && rank == 0) {
        char cores[48];
        cores_field(cores, sizeof cores);
        size_t len = (size_t)snprintf(json, 8192,
                                      "{\"tessel_profile\": 1, \"devices\": %lld, \"hosts\": %d,%s\n \"flops\": %.4g, "
                                      "\"bytes\": %.4g,\n \"collectives\": {",
                                      (long long)n, size, cores, flops, bytes);
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
    double flops, bytes;
    if (!rates(n, &flops, &bytes))
        return CLI_FAIL;
    char json[4096], cores[48];
    cores_field(cores, sizeof cores);
    size_t len = (size_t)snprintf(json, sizeof json,
                                  "{\"tessel_profile\": 1, \"devices\": %lld,%s\n \"flops\": %.4g, \"bytes\": %.4g,\n"
                                  " \"collectives\": {",
                                  (long long)n, cores, flops, bytes);
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
