/*
 * options.c: the options shared by tessel's commands, parsed once here.
 * Each option is one row of a table (spelling, OPT_* bit, whether it takes
 * a value); a command accepts the bits it lists, and any other option is a
 * usage error that says which command refused it. `--opt VALUE` and
 * `--opt=VALUE` are both accepted; `--` ends the options.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct OptSpec {
    const char *name;
    unsigned bit;
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

int cli_exit_status(IrStatus st)
{
    switch (st) {
    case IR_OK: return CLI_OK;
    case IR_EINPUT:
    case IR_EUNSUPPORTED: return CLI_USAGE;
    default: return CLI_FAIL;
    }
}

static const char *status_text(IrStatus st)
{
    switch (st) {
    case IR_EINPUT: return "bad input";
    case IR_ENOMEM: return "out of memory";
    case IR_EUNSUPPORTED: return "not supported";
    case IR_EINTERNAL: return "internal error";
    default: return "failure while running";
    }
}

int cli_report(IrStatus st, IrDiag *d)
{
    if (d->status == IR_OK) /* a callee failed without saying why */
        ir_error(d, st == IR_OK ? IR_EINTERNAL : st, NULL, NULL, (IrPos){0, 0}, "%s",
                 status_text(st));
    char *s = ir_diag_format(d, "tessel");
    if (s) {
        fputs(s, stderr);
        ts_free(s);
    } else {
        fprintf(stderr, "tessel: error: %s\n", d->msg ? d->msg : "out of memory");
    }
    int rc = cli_exit_status(d->status);
    ir_diag_clear(d);
    return rc;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_load_model(const CliOptions *o, const char *path, IrModule **m)
{
    IrParseOptions po = ir_default_parse_options();
    po.verify = true;
    po.limits = o->limits;
    IrDiag d = {0};
    *m = NULL;
    IrStatus st = ir_parse_file(path, &po, m, &d);
    if (st != IR_OK) {
        *m = NULL;
        return cli_report(st, &d);
    }
    return CLI_OK;
}

/* A count option: a decimal integer >= 1. */
static int parse_count(const CliCommand *cmd, const char *opt, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 1)
        return cli_usage_error(cmd, "%s needs a whole number >= 1, not '%s'", opt, v);
    *out = x;
    return CLI_OK;
}

/* A seed: an unsigned 64-bit decimal or 0x-hex number. */
static int parse_seed(const CliCommand *cmd, const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*v == '-' || *v == '+' || *v == ' ' || *v == 0)
        return cli_usage_error(cmd, "--random-inputs needs a seed >= 0, not '%s'", v);
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end)
        return cli_usage_error(cmd, "--random-inputs needs a seed >= 0, not '%s'", v);
    *out = x;
    return CLI_OK;
}

/* --input KEY=FILE: split at the first '=' into a heap key. */
static int add_input(const CliCommand *cmd, CliOptions *o, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1])
        return cli_usage_error(cmd, "--input needs INDEX_OR_NAME=FILE.npy, not '%s'", v);
    RtInput *ni = ts_realloc(o->inputs, ((size_t)o->ninputs + 1) * sizeof *ni);
    char *key = ts_malloc((size_t)(eq - v) + 1);
    if (ni)
        o->inputs = ni;
    if (!ni || !key) {
        ts_free(key);
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    memcpy(key, v, (size_t)(eq - v));
    key[eq - v] = 0;
    o->inputs[o->ninputs].key = key;
    o->inputs[o->ninputs].path = eq + 1;
    o->ninputs++;
    return CLI_OK;
}

/* --infeed FILE: appended; infeed and recv-from-host take them in order. */
static int add_infeed(CliOptions *o, const char *v)
{
    const char **ni = ts_realloc(o->infeeds, ((size_t)o->ninfeeds + 1) * sizeof *ni);
    if (!ni) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    o->infeeds = ni;
    o->infeeds[o->ninfeeds++] = v;
    return CLI_OK;
}

/* --limit NAME=VALUE: what a model may declare, checked before anything
 * is allocated for it. NAME: elements (per array), rank, tuple (width),
 * depth (nesting of tuples, literals, braces), name (length). A limit can
 * be lowered or raised, rank only up to IR_MAX_RANK. */
static int set_limit(const CliCommand *cmd, CliOptions *o, const char *v)
{
    static const struct {
        const char *name;
        int64_t max;
    } names[] = {{"elements", INT64_MAX}, {"rank", IR_MAX_RANK}, {"tuple", INT32_MAX},
                 {"depth", 4096}, {"name", INT32_MAX}};
    const char *eq = strchr(v, '=');
    size_t k = 0, n = eq ? (size_t)(eq - v) : 0;
    while (k < sizeof names / sizeof *names && (strlen(names[k].name) != n || strncmp(v, names[k].name, n)))
        k++;
    if (!eq || k == sizeof names / sizeof *names)
        return cli_usage_error(cmd, "--limit takes NAME=VALUE with NAME elements, rank, tuple, depth or "
                               "name, not '%s'", v);
    char *end;
    errno = 0;
    long long x = strtoll(eq + 1, &end, 10);
    if (errno || end == eq + 1 || *end || x < 1 || x > names[k].max)
        return cli_usage_error(cmd, "--limit %s needs a whole number from 1 to %lld, not '%s'", names[k].name,
                               (long long)names[k].max, eq + 1);
    switch (k) {
    case 0: o->limits.max_elements = x; break;
    case 1: o->limits.max_rank = (int32_t)x; break;
    case 2: o->limits.max_tuple = (int32_t)x; break;
    case 3: o->limits.max_depth = (int32_t)x; break;
    default: o->limits.max_name = x; break;
    }
    return CLI_OK;
}

static int set_value(const CliCommand *cmd, CliOptions *o, const OptSpec *s, const char *v)
{
    switch (s->bit) {
    case OPT_INPUT: return add_input(cmd, o, v);
    case OPT_RANDOM: o->random = true; return parse_seed(cmd, v, &o->seed);
    case OPT_OUTPUT_DIR: o->output_dir = v; return CLI_OK;
    case OPT_PARTITIONS: return parse_count(cmd, s->name, v, &o->num_partitions);
    case OPT_REPLICAS: return parse_count(cmd, s->name, v, &o->num_replicas);
    case OPT_HOSTS: return parse_count(cmd, s->name, v, &o->hosts);
    case OPT_LOCAL_DEVICES: return parse_count(cmd, s->name, v, &o->local_devices);
    case OPT_STEPS: return parse_count(cmd, s->name, v, &o->steps);
    case OPT_FORMAT:
        if (strcmp(v, "text") && strcmp(v, "json") && strcmp(v, "dot"))
            return cli_usage_error(cmd, "--format is text, json or dot, not '%s'", v);
        o->format = v;
        return CLI_OK;
    case OPT_OUT: o->out = v; return CLI_OK;
    case OPT_LIMIT: return set_limit(cmd, o, v);
    case OPT_INFEED: return add_infeed(o, v);
    default: return CLI_OK;
    }
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
        if (!s->has_arg && eq && arg[1] == '-')
            return cli_usage_error(cmd, "option %s takes no value", s->name);
        if ((o->given & s->bit) && s->bit != OPT_INPUT && s->bit != OPT_LIMIT &&
            s->bit != OPT_INFEED)
            return cli_usage_error(cmd, "option %s given twice", s->name);
        o->given |= s->bit;
        if (!s->has_arg) {
            if (s->bit == OPT_REFERENCE)
                o->reference = true;
            else if (s->bit == OPT_STATS)
                o->stats = true;
            else if (s->bit == OPT_PRINT)
                o->print = true;
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
    return cli_usage_error(cmd, "unknown option '%s' for 'tessel %s'", arg, cmd->name);
}

int cli_parse(const CliCommand *cmd, int argc, char **argv, CliOptions *o)
{
    memset(o, 0, sizeof *o);
    o->limits = ir_default_limits();
    o->pos = ts_calloc((size_t)argc + 1, sizeof *o->pos);
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
        o->pos[o->npos++] = argv[i];
    }
    return CLI_OK;
}

void cli_options_free(CliOptions *o)
{
    for (int32_t i = 0; i < o->ninputs; i++)
        ts_free((void *)o->inputs[i].key);
    ts_free(o->inputs);
    ts_free(o->infeeds);
    ts_free(o->pos);
    memset(o, 0, sizeof *o);
}
