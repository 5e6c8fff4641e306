/*
 * cmd_profile.c: `tessel profile [-o FILE] [--num-partitions N]`: the
 * rates of --auto-shard's cost model measured on this machine with
 * tessel's own kernels and collectives over N devices (default 2),
 * written as the profile file that `--profile FILE` reads
 * (docs/auto-shard.md, "Profile").
 *
 *   flops, bytes  SPMD programs of 16 rounds, each some work on every
 *           device and an all-reduce that keeps the devices in step: a
 *           dot f32[128]^2 against f32[64]^2, an add over f32[64K N]
 *           against one over f32[256]
 *   alpha, beta of each collective kind: chains of 32 collectives back
 *           to back against chains of 16, at three sizes (1 KiB to 512
 *           KiB a device); at each size the seconds a collective takes;
 *           beta the slope of the least-squares line through them over
 *           the bytes the kind moves, alpha the smallest size's time less
 *           its bytes at that beta. Nothing between two of them,
 *           so no work hides a collective's latency; the same kind after
 *           a dot f32[256]^2 of work (how the profile measured alpha
 *           before) is reported beside it as a check, not used
 *
 * Each figure is repeated (5 times) and written as its median with its
 * interquartile range; a median alpha at its floor, a beta or a rate
 * difference not > 0 is measured again, and if again, the default is
 * kept (the figure written as "NAME_rejected") and the output says so.
 * The "local" scope (a group inside one host) is measured in this
 * process; under `mpirun -np H` (H >= 2) rank 0 measures it the same
 * way, then every rank runs the same collectives over H devices, one per
 * rank (hosts H, local devices 1: the group crosses hosts, over the
 * transport `tessel run` uses), for the "remote" scope; rank 0 writes the
 * profile. Without mpirun the remote figures keep the defaults.
 */
#include "cli.h"
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HELP[] =
    "Usage: tessel profile [-o FILE] [--num-partitions N]\n"
    "\n"
    "Measure the rates of --auto-shard's cost model on this machine with\n"
    "tessel's own kernels and collectives: a dot's FLOP/s, elementwise bytes/s,\n"
    "and alpha (seconds) and beta (seconds per byte) of all-reduce, all-gather,\n"
    "reduce-scatter and all-to-all over N devices of one host (default 2): the\n"
    "rates with all N devices busy at once (where they outnumber the cores,\n"
    "sharing them), each collective kind from chains of it back to back at\n"
    "three sizes (beta the least-squares slope, alpha the smallest size's time\n"
    "less its bytes). Each figure is measured 5 times; the profile and the\n"
    "output (stderr) give its median and interquartile range. An alpha at its\n"
    "floor or a beta not > 0 is measured again, and if again the default is\n"
    "kept (the output says so).\n"
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

static const char *const KIND[PROFILE_NKIND] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};
static const char *const SCOPE[2] = {"local", "remote"};

/* Repeats of each figure: its median and interquartile range. */
#define REPEATS 5
/* Repeats of the check behind work (a median alone). */
#define CHECK_REPEATS 3
/* Collectives back to back in the longer chain; the shorter has half. */
#define CHAIN 32
/* Elements per device of the chains' buffers (an all-gather's result,
 * the others' operand), rounded up to a multiple of n: every kind moves
 * about as many bytes at each size, at any n. The largest is where the
 * bytes, not the latency, take most of a collective's time here. */
#define NSIZE 3
static const int64_t CHAIN_SIZE[NSIZE] = {256, 16384, 131072};
/* A fitted alpha at or below it is "at its floor": no latency measured. */
#define ALPHA_FLOOR 1e-7

/* The figures of one run of the profile, rank 0's (others': zeros). */
typedef struct Scope {
    ProfileFigure alpha[PROFILE_NKIND], beta[PROFILE_NKIND];
    bool alpha_kept[PROFILE_NKIND], beta_kept[PROFILE_NKIND]; /* insane twice: the default kept */
    double behind[PROFILE_NKIND]; /* alpha with ~1 ms of work between collectives (the check) */
} Scope;

typedef struct Rates {
    ProfileFigure flops, bytes;
    bool flops_kept, bytes_kept; /* lost in the noise twice: the default kept */
} Rates;

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

/* The median step of a measuring program's text (freed here), in
 * seconds; < 0 after printing why (0 on ranks other than 0). */
static double program_step(char *text, int64_t n, TsMpiWorld *world)
{
    double t = text ? step_seconds(text, n, true, world) : -1;
    free(text);
    return t;
}

/* *sec: the seconds a round of `more` takes beyond a round of `less`
 * over `repeats` pairs, each run one after the other (a loaded machine
 * moves a step by 2x from one run to the next; noise may make a
 * difference <= 0); false after printing why. */
static bool extra(const ProfileWork *more, const ProfileWork *less, int64_t n, TsMpiWorld *world, int repeats,
                  ProfileFigure *sec)
{
    double d[PROFILE_MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        double b = program_step(profile_work_module(less, n), n, world);
        double t = b >= 0 ? program_step(profile_work_module(more, n), n, world) : -1;
        if (b < 0 || t < 0)
            return false;
        d[r] = (t - b) / PROFILE_ROUNDS;
    }
    *sec = profile_figure(d, repeats);
    return true;
}

/* The rate `amount / seconds` of each quartile of sec (its quartiles
 * swap: the slowest time is the lowest rate; a time <= 0 reads 1 ns). */
static ProfileFigure rate(double amount, ProfileFigure sec)
{
#define RATE(t) (amount / ((t) > 1e-9 ? (t) : 1e-9))
    return (ProfileFigure){RATE(sec.hi), RATE(sec.median), RATE(sec.lo)};
#undef RATE
}

/* The compute rates of one device with every one of the n devices busy,
 * as a step sees them (each round ends in an all-reduce of 256 n
 * elements, which keeps the devices in step): flops from a dot
 * f32[128]^2 against f32[64]^2 (the dots of a step are small: a 512^3
 * one runs 2x faster a FLOP), bytes from an add over f32[64K n] against
 * f32[256] (its bytes counted as auto/cost.c counts them: the
 * broadcast's and the add's outputs). A difference lost in the noise (a
 * median <= 0) is measured again, and if lost again the default is kept. */
static bool rates(int64_t n, Rates *r)
{
    ProfileWork small = {.dot = 64, .elems = 256, .kind = PROFILE_ALL_REDUCE, .celems = 256 * n, .every = 1};
    ProfileWork dot = small, add = small;
    dot.dot = 128;
    add.elems = 65536 * n;
    ProfileFigure tdot = {0}, tadd = {0};
    for (int again = 0; again < 2 && !(tdot.median > 0); again++)
        if (!extra(&dot, &small, n, NULL, REPEATS, &tdot))
            return false;
    for (int again = 0; again < 2 && !(tadd.median > 0); again++)
        if (!extra(&add, &small, n, NULL, REPEATS, &tadd))
            return false;
    r->flops = rate(2.0 * (128.0 * 128 * 128 - 64.0 * 64 * 64), tdot);
    r->bytes = rate(2.0 * 4 * (double)(add.elems - small.elems), tadd);
    r->flops_kept = !(tdot.median > 0);
    r->bytes_kept = !(tadd.median > 0);
    return true;
}

/* Bytes a collective of `kind` on f32[elems] per device moves as
 * auto/cost.c counts them: (n-1)/n of its buffer (an all-gather's result,
 * the others' operand), twice for all-reduce. */
static double moved(int kind, int64_t elems, int64_t n)
{
    double f = (double)(n - 1) / (double)n * (kind == PROFILE_ALL_REDUCE ? 2 : 1);
    return f * 4.0 * (double)(kind == PROFILE_ALL_GATHER ? elems * n : elems);
}

/* Operand elements per device of kind's chain at size s. */
static int64_t chain_elems(int kind, int s, int64_t n)
{
    int64_t whole = (CHAIN_SIZE[s] + n - 1) / n * n;
    return kind == PROFILE_ALL_GATHER ? whole / n : whole;
}

/* One measurement of kind's alpha and beta over n devices (with world:
 * one per rank): at each size the seconds a collective takes, from a
 * chain of CHAIN back to back against one of CHAIN/2 (run one after the
 * other); beta the slope of the least-squares line through them over the
 * bytes moved, alpha the smallest size's time less its bytes at that
 * beta. Not the line's intercept: the largest size's time moves the most
 * from run to run (by milliseconds on 8 devices of 2 loaded cores), and
 * the intercept, far from it, takes that swing magnified, where the
 * smallest size (1 KiB, a few ns of bytes) is the latency itself. */
static bool fit_once(int kind, int64_t n, TsMpiWorld *world, double *alpha, double *beta)
{
    double x[NSIZE], y[NSIZE];
    for (int s = 0; s < NSIZE; s++) {
        int64_t e = chain_elems(kind, s, n);
        double half = program_step(profile_chain_module(kind, e, CHAIN / 2, n), n, world);
        double full = half >= 0 ? program_step(profile_chain_module(kind, e, CHAIN, n), n, world) : -1;
        if (half < 0 || full < 0)
            return false;
        x[s] = moved(kind, e, n);
        y[s] = (full - half) / (CHAIN / 2);
    }
    double intercept;
    if (!profile_fit_line(x, y, NSIZE, &intercept, beta))
        *beta = 0;
    *alpha = y[0] - x[0] * *beta;
    return true;
}

/* alpha and beta of the four kinds over n devices (with world: one per
 * rank, every rank calls it; lead: this rank has the figures) into sc,
 * each REPEATS fits, and measured again where the median alpha is at its
 * floor or the median beta not > 0; insane again: the default kept. Then
 * the check: each kind at its smallest size after a dot f32[256]^2 on
 * every device (about 1 ms a device on 4 devices of 2 cores) against
 * after every other one, alpha read as the old method did (the time less
 * its bytes at the fitted beta): how much of the latency work hides. */
static bool collectives(int64_t n, TsMpiWorld *world, bool lead, Scope *sc)
{
    for (int k = 0; k < PROFILE_NKIND; k++) {
        for (int again = 0; again < 2; again++) {
            double a[REPEATS], b[REPEATS];
            for (int r = 0; r < REPEATS; r++)
                if (!fit_once(k, n, world, &a[r], &b[r]))
                    return false;
            sc->alpha[k] = profile_figure(a, REPEATS);
            sc->beta[k] = profile_figure(b, REPEATS);
            sc->alpha_kept[k] = lead && !(sc->alpha[k].median > ALPHA_FLOOR);
            sc->beta_kept[k] = lead && !(sc->beta[k].median > 0);
            /* Every rank learns rank 0's verdict (and none of the others'). */
            if (ts_mpi_agree(world, !sc->alpha_kept[k] && !sc->beta_kept[k], 0, NULL) < 0)
                break;
        }
        ProfileWork with = {.dot = 256, .elems = 256, .kind = k, .celems = chain_elems(k, 0, n), .every = 1};
        ProfileWork half = with;
        half.every = 2;
        ProfileFigure t;
        if (!extra(&with, &half, n, world, CHECK_REPEATS, &t))
            return false;
        double beta = sc->beta_kept[k] ? 0 : sc->beta[k].median;
        sc->behind[k] = 2 * t.median - moved(k, with.celems, n) * beta; /* extra() is per round: 2 rounds a collective */
    }
    return true;
}

/* The figure's fields: `"name": median, "name_iqr": [lo, hi]`, or where
 * the default was kept `"name_rejected": median` instead of the value
 * (which a compile then takes from its defaults). */
static size_t put_figure(char *j, size_t cap, size_t len, const char *name, ProfileFigure f, bool kept)
{
    return len + (size_t)snprintf(j + len, cap - len, "\"%s%s\": %.4g, \"%s_iqr\": [%.4g, %.4g]", name,
                                  kept ? "_rejected" : "", f.median, name, f.lo, f.hi);
}

/* The profile's JSON (scopes: 1 local, or 2 with remote over `hosts`
 * ranks) into j. */
static void profile_json(char *j, size_t cap, int64_t n, int hosts, const Rates *r, const Scope *sc, int scopes)
{
    char cores[48], hostf[32] = "";
    cores_field(cores, sizeof cores);
    if (hosts)
        snprintf(hostf, sizeof hostf, " \"hosts\": %d,", hosts);
    size_t len = (size_t)snprintf(j, cap, "{\"tessel_profile\": 2, \"devices\": %lld,%s%s \"repeats\": %d,\n ",
                                  (long long)n, hostf, cores, REPEATS);
    len = put_figure(j, cap, len, "flops", r->flops, r->flops_kept);
    len += (size_t)snprintf(j + len, cap - len, ",\n ");
    len = put_figure(j, cap, len, "bytes", r->bytes, r->bytes_kept);
    len += (size_t)snprintf(j + len, cap - len, ",\n \"collectives\": {");
    for (int k = 0; k < PROFILE_NKIND; k++) {
        len += (size_t)snprintf(j + len, cap - len, "%s\n  \"%s\": {", k ? "," : "", KIND[k]);
        for (int s = 0; s < scopes; s++) {
            len += (size_t)snprintf(j + len, cap - len, "%s\n   \"%s\": {", s ? "," : "", SCOPE[s]);
            len = put_figure(j, cap, len, "alpha", sc[s].alpha[k], sc[s].alpha_kept[k]);
            len += (size_t)snprintf(j + len, cap - len, ", ");
            len = put_figure(j, cap, len, "beta", sc[s].beta[k], sc[s].beta_kept[k]);
            len += (size_t)snprintf(j + len, cap - len, ", \"alpha_behind_work\": %.4g}", sc[s].behind[k]);
        }
        len += (size_t)snprintf(j + len, cap - len, "}");
    }
    snprintf(j + len, cap - len, "}}\n");
}

/* One figure on the command's output (stderr: the profile may go to
 * stdout). */
static void say_figure(const char *what, const char *unit, ProfileFigure f, bool kept, const char *insane)
{
    if (kept)
        fprintf(stderr, "  %-28s %s twice (median %.3g %s): the default kept\n", what, insane, f.median, unit);
    else
        fprintf(stderr, "  %-28s %10.3g %-6s [%.3g, %.3g]\n", what, f.median, unit, f.lo, f.hi);
}

/* The figures, each as its median and interquartile range. */
static void say_profile(int64_t n, int hosts, const Rates *r, const Scope *sc, int scopes)
{
    fprintf(stderr, "tessel profile: %lld devices%s: each figure the median of %d runs [its interquartile range]\n",
            (long long)n, hosts ? " and the ranks across hosts" : "", REPEATS);
    say_figure("flops", "FLOP/s", r->flops, r->flops_kept, "lost in the noise");
    say_figure("bytes", "B/s", r->bytes, r->bytes_kept, "lost in the noise");
    for (int s = 0; s < scopes; s++)
        for (int k = 0; k < PROFILE_NKIND; k++) {
            char what[64];
            snprintf(what, sizeof what, "%s %s alpha", KIND[k], SCOPE[s]);
            say_figure(what, "s", sc[s].alpha[k], sc[s].alpha_kept[k], "at its floor");
            snprintf(what, sizeof what, "%s %s beta", KIND[k], SCOPE[s]);
            say_figure(what, "s/B", sc[s].beta[k], sc[s].beta_kept[k], "not > 0");
            fprintf(stderr, "  %-28s %10.3g s      (the check, not used: ~1 ms of work between collectives)\n",
                    "  alpha behind work", sc[s].behind[k]);
        }
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
        json = malloc(16384);
        rc = json ? CLI_OK : CLI_FAIL;
    }
    Rates r = {0};
    Scope sc[2] = {0};
    if (rc == CLI_OK && rank == 0)
        rc = rates(n, &r) && collectives(n, NULL, true, &sc[0]) ? CLI_OK : CLI_FAIL;
    int stop = 0;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && !collectives(size, w, rank == 0, &sc[1]))
        rc = CLI_FAIL;
    if (ts_mpi_agree(w, rc == CLI_OK, rc, &stop) >= 0)
        rc = stop ? stop : CLI_FAIL;
    if (rc == CLI_OK && rank == 0) {
        profile_json(json, 16384, n, size, &r, sc, 2);
        say_profile(n, size, &r, sc, 2);
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
    Rates r = {0};
    Scope sc = {0};
    if (!rates(n, &r) || !collectives(n, NULL, true, &sc))
        return CLI_FAIL;
    char json[8192];
    profile_json(json, sizeof json, n, 0, &r, &sc, 1);
    say_profile(n, 0, &r, &sc, 1);
    return cli_write_text(o->out, json);
}

const CliCommand cli_cmd_profile = {
    .name = "profile",
    .summary = "measure the cost model's rates for --auto-shard (writes a profile)",
    .help = HELP,
    .accepts = OPT_OUT | OPT_PARTITIONS,
    .run = run_profile,
};
