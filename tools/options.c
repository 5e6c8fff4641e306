/*
 * options.c: the options shared by tessel's commands, parsed once here.
 * Each option is one row of a table (spelling, OPT_* bit, whether it takes
 * a value); a command accepts the bits it lists, and any other option is a
 * usage error that says which command refused it. `--opt VALUE` and
 * `--opt=VALUE` are both accepted; `--` ends the options.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct OptSpec {
    const char *name;
    uint64_t bit;
    bool has_arg;
} OptSpec;

static const OptSpec OPTS[] = {
    {"--input", OPT_INPUT, true},
    {"--random-inputs", OPT_RANDOM, true},
    {"--output-dir", OPT_OUTPUT_DIR, true},
    {"--reference", OPT_REFERENCE, false},
    {"--num-partitions", OPT_PARTITIONS, true},
    {"--num-replicas", OPT_REPLICAS, true},
    {"--hosts", OPT_HOSTS, true},
    {"--local-devices", OPT_LOCAL_DEVICES, true},
    {"--steps", OPT_STEPS, true},
    {"--stats", OPT_STATS, false},
    {"--format", OPT_FORMAT, true},
    {"-o", OPT_OUT, true},
    {"--limit", OPT_LIMIT, true},
    {"--print", OPT_PRINT, false},
    {"--infeed", OPT_INFEED, true},
    {"--no-verify", OPT_NO_VERIFY, false},
    {"--spmd", OPT_SPMD, false},
    {"--per-device", OPT_PER_DEVICE, false},
    {"--output-device", OPT_OUTPUT_DEVICE, true},
    {"--wrt", OPT_WRT, true},
    {"--loss", OPT_LOSS, true},
    {"--sgd", OPT_SGD, true},
    {"--adam", OPT_ADAM, true},
    {"--jvp", OPT_JVP, false},
    {"--remat", OPT_REMAT, true},
    {"--show", OPT_SHOW, true},
    {"--ascii", OPT_ASCII, false},
    {"--expand", OPT_EXPAND, true},
    {"--dump-dir", OPT_DUMP_DIR, true},
    {"--watch", OPT_WATCH, true},
    {"--progress", OPT_PROGRESS, false},
    {"--timeout", OPT_TIMEOUT, true},
    {"--heartbeat", OPT_HEARTBEAT, true},
    {"--checkpoint-every", OPT_CHECKPOINT_EVERY, true},
    {"--checkpoint-dir", OPT_CHECKPOINT_DIR, true},
    {"--resume", OPT_RESUME, true},
    {"--link-gbps", OPT_LINK_GBPS, true},
    {"--donate", OPT_DONATE, true},
    {"--auto-shard", OPT_AUTO_SHARD, false},
    {"--mesh", OPT_MESH, true},
    {"--profile", OPT_PROFILE, true},
    {"--host-cores", OPT_HOST_CORES, true},
    {"--explain", OPT_EXPLAIN, false},
    {"--why", OPT_WHY, true},
    {"--init-state", OPT_INIT_STATE, true},
    {"--sgemm", OPT_SGEMM, true},
    {"--sign-key", OPT_SIGN_KEY, true},
};

int cli_usage_error(const CliCommand *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tessel: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nTry 'tessel %s --help'.\n", cmd->name);
    else
        fputs("\nTry 'tessel --help'.\n", stderr);
    return CLI_USAGE;
}

int cli_exit_status(TsStatus st)
{
    switch (st) {
    case TS_OK: return CLI_OK;
    case TS_EINPUT:
    case TS_EUNSUPPORTED: return CLI_USAGE;
    default: return CLI_FAIL;
    }
}

static const char *status_text(TsStatus st)
{
    switch (st) {
    case TS_EINPUT: return "bad input";
    case TS_ENOMEM: return "out of memory";
    case TS_EUNSUPPORTED: return "not supported";
    case TS_EINTERNAL: return "internal error";
    default: return "failure while running";
    }
}

void cli_print_diag(const TsDiag *d)
{
    char *s = ts_diag_format(d);
    if (s) {
        fputs(s, stderr);
        ts_free(s);
    } else {
        fprintf(stderr, "tessel: error: %s\n", d->msg ? d->msg : "out of memory");
    }
}

void cli_print_ranked(const TsDiag *d, int rank)
{
    char prefix[32];
    int np = snprintf(prefix, sizeof prefix, "rank %d: ", rank);
    const char *msg = d->msg ? d->msg : "out of memory";
    size_t n = strlen(msg) + (size_t)np + 1;
    char *m = strncmp(msg, prefix, (size_t)np) == 0 ? NULL : malloc(n);
    TsDiag copy = *d;
    if (m) {
        snprintf(m, n, "%s%s", prefix, msg);
        copy.msg = m;
    }
    cli_print_diag(&copy);
    free(m);
}

int cli_report(TsStatus st, TsDiag *d)
{
    if (d->status == TS_OK) /* a callee failed without saying why */
        fprintf(stderr, "tessel: error: %s\n", status_text(st == TS_OK ? TS_EINTERNAL : st));
    else
        cli_print_diag(d);
    int rc = cli_exit_status(d->status != TS_OK ? d->status : st);
    ts_diag_clear(d);
    return rc;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_load_model(const CliOptions *o, const char *path, TsModule **m)
{
    TsDiag d = {0};
    TsStatus st = ts_module_load_ex(path, &o->limits, m, &d);
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

void cli_say(const char *lead, const char *fmt, ...)
{
    char small[512], *text = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof small && (text = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (!text) /* no memory for the whole line: its first part */
        text = small;
    fputs(lead, stderr);
    for (const char *p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fputc('\n', stderr);
    if (text != small)
        free(text);
}

/* A compile's warning, on stderr as the command line prints them. */
static void cli_warning(void *ctx, const char *msg)
{
    (void)ctx;
    cli_say("tessel: warning: ", "%s", msg);
}

TsCompileOptions cli_compile_options(const CliOptions *o)
{
    return (TsCompileOptions){.num_partitions = o->num_partitions, .num_replicas = o->num_replicas,
                              .hosts = o->hosts, .local_devices = o->local_devices, .limits = &o->limits,
                              .no_verify = o->no_verify, .spmd = o->spmd, .dump_dir = o->dump_dir,
                              .link_gbps = o->link_gbps, .on_warning = cli_warning,
                              .auto_shard = o->auto_shard, .mesh = o->mesh, .profile = o->profile,
                              .donate = o->donate, .sign_key = o->sign_key, .sign_key_len = o->sign_key_len,
                              .host_cores = o->host_cores};
}

int cli_open(const CliOptions *o, const char *path, TsPlan **p)
{
    TsDiag d = {0};
    TsCompileOptions co = cli_compile_options(o);
    /* The layout is the command's to decide (cli_layout), not the
     * compile's: a plan keeps what it was compiled for. */
    /* (--auto-shard keeps them: its cost model prices a group that
     * crosses hosts by the links between them.) */
    if (!o->auto_shard)
        co.hosts = co.local_devices = 0;
    TsStatus st = ts_plan_open(path, &co, p, &d);
    if (st != TS_OK)
        return cli_report(st, &d);
    /* What fitting --limit memory changed: said, as a compile's warnings are. */
    char *fit = ts_plan_memory_fit(*p);
    if (fit)
        fprintf(stderr, "tessel: memory: %s", fit);
    ts_free(fit);
    return CLI_OK;
}

int cli_layout(const CliOptions *o, TsPlan *p)
{
    if (!o->hosts && !o->local_devices)
        return CLI_OK; /* a loaded plan's own, or 1 host */
    TsDiag d = {0};
    int64_t hosts = o->hosts ? o->hosts : ts_plan_hosts(p);
    int64_t local = o->local_devices ? o->local_devices : (o->hosts ? 0 : ts_plan_local_devices(p));
    TsStatus st = ts_plan_set_layout(p, hosts, local, &d);
    return st == TS_OK ? CLI_OK : cli_report(st, &d);
}

/* Did strtoll or strtoull overflow upwards (a whole number too large for
 * it, which is not a malformed one)? */
static bool read_too_large(const char *v, const char *end, bool at_max)
{
    return errno == ERANGE && at_max && end != v && *v != '-' && !*end;
}

/* A number as written: it starts with a digit (or a '.' where decimals
 * are allowed) and has no hexadecimal 'x'. strtoll and strtod also take
 * leading blanks, a '+', and strtod hexadecimal floats, infinities and
 * NaNs: --steps ' 3', --steps +3 and --timeout 0x10 (16 s) were taken,
 * --random-inputs ' 5' refused. */
static bool plain_number(const char *v, bool decimals)
{
    bool lead = (*v >= '0' && *v <= '9') || (decimals && *v == '.');
    return lead && !strpbrk(v, "xX");
}

/* A count option: a decimal integer >= 1 and <= max. */
static int parse_count_to(const CliCommand *cmd, const char *opt, const char *v, long long max, int64_t *out)
{
    if (!plain_number(v, false))
        return cli_usage_error(cmd, "%s needs a whole number >= 1, not '%s'", opt, v);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (read_too_large(v, end, x == LLONG_MAX) || (!errno && end != v && !*end && x > max))
        return cli_usage_error(cmd, "%s %s is too large: the largest is %lld", opt, v, max);
    if (errno || end == v || *end || x < 1)
        return cli_usage_error(cmd, "%s needs a whole number >= 1, not '%s'", opt, v);
    *out = x;
    return CLI_OK;
}

static int parse_count(const CliCommand *cmd, const char *opt, const char *v, int64_t *out)
{
    return parse_count_to(cmd, opt, v, LLONG_MAX, out);
}

/* A number > 0 and <= max (decimals allowed); `what` names it in the
 * error ("a number of seconds > 0"). */
static int parse_positive(const CliCommand *cmd, const char *opt, const char *v, double max, const char *what,
                          double *out)
{
    if (!plain_number(v, true))
        return cli_usage_error(cmd, "%s needs %s, not '%s'", opt, what, v);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end != v && !*end && x > max) /* 1e999 too: strtod's HUGE_VAL */
        return cli_usage_error(cmd, "%s %s is too large: the largest is %.15g", opt, v, max);
    if (errno || end == v || *end || !(x > 0))
        return cli_usage_error(cmd, "%s needs %s, not '%s'", opt, what, v);
    *out = x;
    return CLI_OK;
}

/* A duration: seconds > 0, at most a year. */
static int parse_seconds(const CliCommand *cmd, const char *opt, const char *v, double *out)
{
    return parse_positive(cmd, opt, v, 366.0 * 86400, "a number of seconds > 0", out);
}

/* A heartbeat: seconds from TS_HEARTBEAT_MIN_SECONDS (a shorter one would
 * end jobs whose ranks are merely busy: 1e-9 failed every MPI run) to
 * TS_HEARTBEAT_MAX_SECONDS. */
static int parse_heartbeat(const CliCommand *cmd, const char *opt, const char *v, double *out)
{
    int r = parse_seconds(cmd, opt, v, out);
    if (r == CLI_OK && *out < TS_HEARTBEAT_MIN_SECONDS)
        return cli_usage_error(cmd, "%s needs a number of seconds >= %g (a shorter one would end jobs whose ranks "
                               "are busy, not lost), not '%s'", opt, TS_HEARTBEAT_MIN_SECONDS, v);
    return r;
}

/* A seed: an unsigned 64-bit decimal or 0x-hex number. Decimal even with
 * leading zeros: strtoull's base 0 read "010" as octal, seed 8. */
static int parse_seed(const CliCommand *cmd, const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
    if (!(hex ? isxdigit((unsigned char)v[2]) : isdigit((unsigned char)v[0])))
        return cli_usage_error(cmd, "--random-inputs needs a seed from 0 to 18446744073709551615 (decimal, or "
                               "hexadecimal after 0x), not '%s'", v);
    unsigned long long x = strtoull(hex ? v + 2 : v, &end, hex ? 16 : 10);
    if (read_too_large(v, end, x == ULLONG_MAX))
        return cli_usage_error(cmd, "--random-inputs %s is too large: the largest seed is 18446744073709551615 "
                               "(0xffffffffffffffff)", v);
    if (errno || *end)
        return cli_usage_error(cmd, "--random-inputs needs a seed from 0 to 18446744073709551615 (decimal, or "
                               "hexadecimal after 0x), not '%s'", v);
    *out = x;
    return CLI_OK;
}

/* A learning rate: a finite decimal number > 0. */
static int parse_rate(const CliCommand *cmd, const char *opt, const char *v, double *out)
{
    return parse_positive(cmd, opt, v, 1e30, "a learning rate > 0", out);
}

/* A link bandwidth: Gb/s > 0, at most 10^6 (a petabit). */
static int parse_gbps(const CliCommand *cmd, const char *opt, const char *v, double *out)
{
    return parse_positive(cmd, opt, v, 1e6, "a bandwidth in Gb/s > 0 and <= 1000000", out);
}

/* --input KEY=FILE: split at the first '=' into a heap key. */
static int add_input(const CliCommand *cmd, CliOptions *o, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1])
        return cli_usage_error(cmd, "--input needs INDEX_OR_NAME=FILE.npy, not '%s'", v);
    TsInput *ni = realloc(o->inputs, ((size_t)o->ninputs + 1) * sizeof *ni);
    char *key = malloc((size_t)(eq - v) + 1);
    if (ni)
        o->inputs = ni;
    if (!ni || !key) {
        free(key);
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    memcpy(key, v, (size_t)(eq - v));
    key[eq - v] = 0;
    o->inputs[o->ninputs].key = key;
    o->inputs[o->ninputs].path = eq + 1;
    o->inputs[o->ninputs].array = NULL;
    o->ninputs++;
    return CLI_OK;
}

/* --infeed FILE: appended; infeed and recv-from-host take them in order. */
static int add_infeed(CliOptions *o, const char *v)
{
    const char **ni = realloc(o->infeeds, ((size_t)o->ninfeeds + 1) * sizeof *ni);
    if (!ni) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    o->infeeds = ni;
    o->infeeds[o->ninfeeds++] = v;
    return CLI_OK;
}

/* --show / --expand NAME: appended to a list of borrowed names. */
static int add_name(const char ***list, int32_t *n, const char *v)
{
    const char **nl = realloc(*list, ((size_t)*n + 1) * sizeof *nl);
    if (!nl) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    *list = nl;
    nl[(*n)++] = v;
    return CLI_OK;
}

/* --limit NAME=VALUE, one syntax for every limit: what a model may
 * declare and the run-time limits (ts_limits_set parses them all). */
/* --sign-key FILE: the key is the file's bytes, as they are (1 byte to
 * 64 KiB; a trailing newline is part of it). A repeated option replaces
 * the key. */
static int read_key(const CliCommand *cmd, const char *path, CliOptions *o)
{
    enum { MAX = 64 << 10 };
    TsDiag d = {0};
    char *text = NULL;
    size_t n = 0;
    if (ts_read_file(path, MAX, &text, &n, &d) != TS_OK) {
        int rc = cli_usage_error(cmd, "--sign-key %s: %s", path, d.msg ? d.msg : "cannot read it");
        ts_diag_clear(&d);
        return rc;
    }
    if (n == 0) {
        ts_free(text);
        return cli_usage_error(cmd, "--sign-key %s: the file is empty: a key needs bytes", path);
    }
    uint8_t *k = malloc(n);
    if (!k) {
        ts_free(text);
        return cli_usage_error(cmd, "--sign-key %s: out of memory", path);
    }
    memcpy(k, text, n);
    ts_free(text);
    free(o->sign_key);
    o->sign_key = k;
    o->sign_key_len = n;
    return CLI_OK;
}

/* --limit NAME=VALUE, each NAME once: a second one (--limit memory=1G
 * --limit memory=2G) is refused as any option given twice is, rather than
 * the last silently winning. */
static int set_limit(const CliCommand *cmd, CliOptions *o, const char *v)
{
    size_t n = strcspn(v, "=");
    for (int32_t k = 0; k < o->nlimit_given; k++)
        if (strncmp(o->limit_given[k], v, n) == 0 && o->limit_given[k][n] == '=')
            return cli_usage_error(cmd, "--limit %.*s given twice (%s and %s)", (int)n, v, o->limit_given[k], v);
    TsDiag d = {0};
    if (ts_limits_set(&o->limits, v, &d) == TS_OK) {
        if (o->nlimit_given < (int32_t)(sizeof o->limit_given / sizeof *o->limit_given))
            o->limit_given[o->nlimit_given++] = v;
        return CLI_OK;
    }
    int rc = cli_usage_error(cmd, "%s", d.msg ? d.msg : "bad --limit");
    ts_diag_clear(&d);
    return rc;
}

/* A path option (--output-dir, --checkpoint-dir, --resume, -o, --infeed):
 * an empty one names no file, and would otherwise reach the file system as
 * "" and fail there as an I/O error (status 1, "tessel: : error: ..."). */
static int set_path(const CliCommand *cmd, const OptSpec *s, const char *v, const char **out)
{
    if (!*v)
        return cli_usage_error(cmd, "%s needs a path, not ''", s->name);
    *out = v;
    return CLI_OK;
}

/* "WHAT, not 'V'" for a value outside an option's words, with "did you
 * mean" the word V is a slip of (jsn: json). */
static int bad_word(const CliCommand *cmd, const char *what, const char *v, const char *const *words, int32_t n)
{
    const char *near = ts_nearest_name(v, words, n);
    return cli_usage_error(cmd, "%s, not '%s'%s%s%s", what, v, near ? "; did you mean " : "", near ? near : "",
                           near ? "?" : "");
}

static int set_value(const CliCommand *cmd, CliOptions *o, const OptSpec *s, const char *v)
{
    switch (s->bit) {
    case OPT_INPUT: return add_input(cmd, o, v);
    case OPT_RANDOM: o->random = true; return parse_seed(cmd, v, &o->seed);
    case OPT_OUTPUT_DIR: return set_path(cmd, s, v, &o->output_dir);
    case OPT_PARTITIONS: return parse_count(cmd, s->name, v, &o->num_partitions);
    case OPT_REPLICAS: return parse_count(cmd, s->name, v, &o->num_replicas);
    case OPT_HOSTS: return parse_count(cmd, s->name, v, &o->hosts);
    case OPT_LINK_GBPS: return parse_gbps(cmd, s->name, v, &o->link_gbps);
    case OPT_DONATE:
        if (strcmp(v, "auto") == 0 || strcmp(v, "declared") == 0) {
            o->donate = strcmp(v, "auto") == 0 ? TS_DONATE_AUTO : TS_DONATE_DECLARED;
            return CLI_OK;
        }
        return bad_word(cmd, "--donate takes auto or declared", v, (const char *const[]){"auto", "declared"}, 2);
    case OPT_LOCAL_DEVICES: return parse_count(cmd, s->name, v, &o->local_devices);
    case OPT_STEPS: return parse_count_to(cmd, s->name, v, TS_MAX_STEPS, &o->steps);
    case OPT_TIMEOUT: return parse_seconds(cmd, s->name, v, &o->timeout);
    case OPT_HEARTBEAT: return parse_heartbeat(cmd, s->name, v, &o->heartbeat);
    case OPT_CHECKPOINT_EVERY: return parse_count(cmd, s->name, v, &o->checkpoint_every);
    case OPT_CHECKPOINT_DIR: return set_path(cmd, s, v, &o->checkpoint_dir);
    case OPT_RESUME: return set_path(cmd, s, v, &o->resume);
    case OPT_OUTPUT_DEVICE: {
        /* A device number is >= 0: parse_count's rule shifted by one. */
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (read_too_large(v, end, x == LLONG_MAX))
            return cli_usage_error(cmd, "--output-device %s is too large: the largest is %lld", v, LLONG_MAX);
        if (errno || end == v || *end || x < 0)
            return cli_usage_error(cmd, "--output-device needs a device number >= 0, not '%s'", v);
        o->output_device = x;
        return CLI_OK;
    }
    case OPT_FORMAT:
        /* devices prints text or json only: said here, with its words */
        if (strcmp(cmd->name, "devices") == 0 && strcmp(v, "text") && strcmp(v, "json"))
            return bad_word(cmd, "--format is text or json for 'tessel devices'", v,
                            (const char *const[]){"text", "json"}, 2);
        if (strcmp(v, "text") && strcmp(v, "json") && strcmp(v, "dot") && strcmp(v, "html"))
            return bad_word(cmd, "--format is text, json, dot or html", v,
                            (const char *const[]){"text", "json", "dot", "html"}, 4);
        o->format = v;
        return CLI_OK;
    case OPT_OUT: return set_path(cmd, s, v, &o->out);
    case OPT_WRT: o->wrt = v; return CLI_OK;
    case OPT_LOSS: o->loss = v; return CLI_OK;
    case OPT_REMAT: o->remat = v; return CLI_OK;
    case OPT_SGD: return parse_rate(cmd, s->name, v, &o->sgd);
    case OPT_ADAM: return parse_rate(cmd, s->name, v, &o->adam);
    case OPT_LIMIT: return set_limit(cmd, o, v);
    case OPT_INFEED: return *v ? add_infeed(o, v) : cli_usage_error(cmd, "--infeed needs a path, not ''");
    case OPT_SHOW: return add_name(&o->show, &o->nshow, v);
    case OPT_EXPAND: return add_name(&o->expand, &o->nexpand, v);
    case OPT_DUMP_DIR:
        if (!*v)
            return cli_usage_error(cmd, "--dump-dir needs a directory");
        o->dump_dir = v;
        return CLI_OK;
    case OPT_WATCH: o->watch = v; return CLI_OK;
    case OPT_SIGN_KEY: return read_key(cmd, v, o);
    case OPT_MESH: o->mesh = v; return CLI_OK;
    case OPT_PROFILE: o->profile = v; return CLI_OK;
    case OPT_HOST_CORES: return parse_count(cmd, s->name, v, &o->host_cores);
    case OPT_WHY: o->why = v; return CLI_OK;
    case OPT_SGEMM:
        if ((o->sgemm = cli_sgemm_parse(v)) < 0)
            return bad_word(cmd, "--sgemm is openblas, blis, onednn, avx512, amx-bf16x3 or probe", v,
                            (const char *const[]){"openblas", "blis", "onednn", "avx512", "amx-bf16x3", "probe"}, 6);
        return CLI_OK;
    case OPT_INIT_STATE:
        if (strcmp(v, "zeros"))
            return bad_word(cmd, "--init-state is zeros (the optimizer state starts at zero)", v,
                            (const char *const[]){"zeros"}, 1);
        o->zero_state = true;
        return CLI_OK;
    default: return CLI_OK;
    }
}

/* --stats=ops (`tessel run`): --stats, and the CLI_STATS_OPS instructions
 * of each device that took the most time. The value is attached (`--stats
 * ops` would read ops as the model). */
static int stats_value(const CliCommand *cmd, const char *v, CliOptions *o)
{
    if (strcmp(v, "ops"))
        return bad_word(cmd, "--stats takes no value, or =ops (per-instruction times)", v, (const char *const[]){"ops"}, 1);
    if (strcmp(cmd->name, "run"))
        return cli_usage_error(cmd, "--stats=ops times the instructions of a run: 'tessel run', not 'tessel %s'",
                               cmd->name);
    if (o->given & OPT_STATS)
        return cli_usage_error(cmd, "option --stats given twice");
    o->given |= OPT_STATS;
    o->stats = true;
    o->stats_ops = CLI_STATS_OPS;
    return CLI_OK;
}

/* Match argv[*i] against the table; consume its value. */
static int parse_option(const CliCommand *cmd, int argc, char **argv, int *i, CliOptions *o)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t n = eq && arg[1] == '-' ? (size_t)(eq - arg) : strlen(arg);
    for (size_t k = 0; k < sizeof OPTS / sizeof OPTS[0]; k++) {
        const OptSpec *s = &OPTS[k];
        if (strlen(s->name) != n || strncmp(arg, s->name, n) != 0)
            continue;
        if (!(cmd->accepts & s->bit))
            return cli_usage_error(cmd, "option %s does not apply to 'tessel %s'", s->name,
                                   cmd->name);
        if (s->bit == OPT_STATS && eq && arg[1] == '-')
            return stats_value(cmd, eq + 1, o);
        if (!s->has_arg && eq && arg[1] == '-')
            return cli_usage_error(cmd, "option %s takes no value", s->name);
        if ((o->given & s->bit) && s->bit != OPT_INPUT && s->bit != OPT_LIMIT &&
            s->bit != OPT_INFEED && s->bit != OPT_SHOW && s->bit != OPT_EXPAND)
            return cli_usage_error(cmd, "option %s given twice", s->name);
        o->given |= s->bit;
        if (!s->has_arg) {
            if (s->bit == OPT_REFERENCE)
                o->reference = true;
            else if (s->bit == OPT_STATS)
                o->stats = true;
            else if (s->bit == OPT_PRINT)
                o->print = true;
            else if (s->bit == OPT_NO_VERIFY)
                o->no_verify = true;
            else if (s->bit == OPT_SPMD)
                o->spmd = true;
            else if (s->bit == OPT_AUTO_SHARD)
                o->auto_shard = true;
            else if (s->bit == OPT_EXPLAIN)
                o->explain = true;
            else if (s->bit == OPT_PER_DEVICE)
                o->per_device = true;
            else if (s->bit == OPT_JVP)
                o->jvp = true;
            else if (s->bit == OPT_ASCII)
                o->ascii = true;
            else if (s->bit == OPT_PROGRESS)
                o->progress = true;
            return CLI_OK;
        }
        const char *v = eq && arg[1] == '-' ? eq + 1 : NULL;
        if (!v) {
            if (*i + 1 >= argc)
                return cli_usage_error(cmd, "option %s needs a value", s->name);
            v = argv[++*i];
        }
        return set_value(cmd, o, s, v);
    }
    /* The nearest option this command takes, for "did you mean". */
    const char *names[sizeof OPTS / sizeof OPTS[0] + 1];
    int32_t nn = 0;
    for (size_t k = 0; k < sizeof OPTS / sizeof OPTS[0]; k++)
        if (cmd->accepts & OPTS[k].bit)
            names[nn++] = OPTS[k].name;
    names[nn++] = "--help"; /* every command takes it */
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), arg);
    const char *near = ts_nearest_name(key, names, nn);
    return cli_usage_error(cmd, "unknown option '%s' for 'tessel %s'%s%s%s", arg, cmd->name,
                           near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
}

/* -o FILE naming a file the command reads (its model or plan, the
 * profile, the key) would replace it: refused before anything is read
 * (`run` guards its output directory the same way, api/outdir.c). */
static int out_over_input(const CliCommand *cmd, const CliOptions *o)
{
    struct stat out;
    if (!o->out || strcmp(o->out, "-") == 0 || stat(o->out, &out) != 0 || !S_ISREG(out.st_mode))
        return CLI_OK;
    for (int i = 0; i <= o->npos; i++) {
        const char *in = i < o->npos ? o->pos[i] : o->profile;
        struct stat st;
        if (in && stat(in, &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
            return cli_usage_error(cmd, "-o %s is %s, which this command reads: writing it would replace it; "
                                        "give another output path",
                                   o->out, i < o->npos ? in : "the --profile file");
    }
    return CLI_OK;
}

int cli_parse(const CliCommand *cmd, int argc, char **argv, CliOptions *o)
{
    memset(o, 0, sizeof *o);
    o->limits = ts_limits_default();
    o->pos = calloc((size_t)argc + 1, sizeof *o->pos);
    if (!o->pos) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    bool opts_done = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            fputs(cmd->help, stdout);
            return -1;
        }
        if (!opts_done && strcmp(a, "--") == 0) {
            opts_done = true;
            continue;
        }
        if (!opts_done && a[0] == '-' && a[1] != 0) {
            int rc = parse_option(cmd, argc, argv, &i, o);
            if (rc != CLI_OK)
                return rc;
            continue;
        }
        if (!*a) /* '' names no file: "tessel: : error: cannot open" before */
            return cli_usage_error(cmd, "an empty argument where a file is expected");
        o->pos[o->npos++] = argv[i];
    }
    return out_over_input(cmd, o);
}

void cli_options_free(CliOptions *o)
{
    for (int32_t i = 0; i < o->ninputs; i++)
        free((void *)o->inputs[i].key);
    free(o->inputs);
    free(o->infeeds);
    free(o->sign_key);
    free(o->show);
    free(o->expand);
    free(o->pos);
    memset(o, 0, sizeof *o);
}
