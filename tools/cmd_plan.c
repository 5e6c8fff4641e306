/*
 * cmd_plan.c: `tessel plan MODEL.hlo|PLAN [--format text|json|dot|html]
 * [--show NAME ...] [--why NAME] [-o FILE]`: what the partitioner decided,
 * for a person (text, sharding grids, why a value's collectives are there,
 * an HTML page), a program (JSON, see docs/plan.md) or Graphviz (DOT). For HTML the graph is drawn by Graphviz's `dot` when
 * it is installed (run here, the library never starts a process), else by
 * tessel's own layout.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char HELP[] =
    "Usage: tessel plan MODEL.hlo|PLAN [--format text|json|dot|html] [-o FILE]\n"
    "                   [--show NAME ...] [--why NAME] [--ascii] [--expand NAME ...]\n"
    "                   [--dump-dir DIR]\n"
    "                   [--num-partitions N] [--num-replicas R] [--hosts H] [--local-devices L]\n"
    "                   [--link-gbps G] [--auto-shard [--mesh SPEC] [--profile FILE] [--host-cores C] [--explain]]\n"
    "\n"
    "Dump the sharding plan: every instruction's shape, sharding and per-device\n"
    "shape, the collectives the partitioner inserted (replica groups, bytes per\n"
    "device), each input's split tree and each output's concat tree, the device\n"
    "assignment, each host's replica islands, InputMapping / XlaInputShape /\n"
    "XlaOutputShape, and the per-device peak memory estimate.\n"
    "\n"
    "  --format text|json|dot|html\n"
    "                          text for people (default), JSON for programs,\n"
    "                          DOT for Graphviz (coloured by sharding, per-device\n"
    "                          shapes, each collective on the edge it serves,\n"
    "                          fallbacks in red), html: one self-contained page\n"
    "                          (graph, tables, grids; open it in a browser)\n"
    "  --show NAME             draw how NAME (an instruction, an entry parameter,\n"
    "                          'input K', 'output K'; 'all': every input and\n"
    "                          output) is cut over the devices: a box per tile,\n"
    "                          sized in proportion, with the devices holding it;\n"
    "                          repeatable; coloured when stdout is a terminal\n"
    "  --why NAME              why each collective that produces or consumes NAME\n"
    "                          (an instruction, or a collective's name) is there:\n"
    "                          the instruction whose rule asked for it and its\n"
    "                          FILE:LINE:COL, the sharding conflict in words, bytes\n"
    "                          per device, and the change that would avoid it\n"
    "  --ascii                 draw the grids with + - | only\n"
    "  --expand NAME           DOT and html: draw the computation NAME (or the\n"
    "                          one the while/call/conditional/fusion NAME calls)\n"
    "                          whole, instead of as one node; repeatable\n"
    "  --dump-dir DIR          also write the module after each compile pass\n"
    "                          into DIR (as `tessel compile --dump-dir`)\n"
    "  --limit NAME=VALUE      refuse models declaring more: NAME elements (per\n"
    "                          array, default 2^34), rank (64), tuple (65536),\n"
    "                          depth (64: nesting of tuples and braces, and of\n"
    "                          calls), name (4096 bytes), instructions (2^22);\n"
    "                          repeatable (docs/cli.md, Limits); memory=BYTES\n"
    "                          (K/M/G): fit the estimated peak per device,\n"
    "                          reordering and recomputing values (stderr says\n"
    "                          what; exit 2 naming the least peak reached)\n"    "  -o FILE                 write to FILE (default, or -: stdout)\n"
    "  --num-partitions N, --num-replicas R, --hosts H, --local-devices L,\n"
    CLI_HELP_DONATE
    "  --link-gbps G,\n"
    "  --auto-shard, --mesh SPEC, --profile FILE, --host-cores C\n"
    "                          as for `tessel compile`\n"
    "  --explain               with --auto-shard: print, for each chosen\n"
    "                          sharding, the alternatives considered and their\n"
    "                          estimated costs (the html page shows it too);\n"
    "                          with --format json: as one JSON object, every\n"
    "                          alternative of every choice (docs/auto-shard.md)\n"
    "  --sign-key FILE         the plan must be signed with the key in FILE (as run)\n"
    "  --no-verify             skip the verifier after the passes that rewrite\n"
    "                          the module (outlining, partitioning): about 5%\n"
    "                          of compile time; a failure there is tessel's bug\n"
    "  -h, --help              show this help\n"
    "\n"
    "Environment: TESSEL_DOT names Graphviz's dot for --format html (default\n"
    "`dot` on PATH; `none`: tessel's own layout). NO_COLOR turns colour off.\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad input.\n";

/* The graph as SVG by Graphviz: `dot -Tsvg FILE` with the DOT text in a
 * temporary file (so that no pipe can fill up both ways). NULL when dot
 * is not there or fails: the page then uses tessel's own layout. */
static char *graphviz_svg(const char *dot_text)
{
    const char *dot = getenv("TESSEL_DOT");
    if (dot && strcmp(dot, "none") == 0)
        return NULL;
    if (!dot || !*dot)
        dot = "dot";
    char tmp[] = "/tmp/tessel-plan-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0)
        return NULL;
    size_t n = strlen(dot_text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, dot_text + off, n - off);
        if (w <= 0 && errno != EINTR)
            break;
        off += w > 0 ? (size_t)w : 0;
    }
    close(fd);
    char *svg = NULL;
    int out[2];
    if (off == n && pipe(out) == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        char *argv[] = {(char *)dot, "-Tsvg", tmp, NULL};
        pid_t pid;
        int rc = posix_spawnp(&pid, dot, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(out[1]);
        size_t len = 0, cap = 0;
        bool ok = rc == 0;
        for (;;) {
            if (!ok)
                break;
            if (len + 4096 + 1 > cap) {
                char *ns = realloc(svg, cap = (cap ? cap * 2 : 65536));
                if (!ns) {
                    ok = false;
                    break;
                }
                svg = ns;
            }
            ssize_t r = read(out[0], svg + len, cap - len - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            len += (size_t)r;
        }
        close(out[0]);
        int status = 0;
        if (rc == 0)
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        if (ok && svg && WIFEXITED(status) && WEXITSTATUS(status) == 0 && len > 0) {
            svg[len] = 0;
        } else {
            free(svg);
            svg = NULL;
        }
    }
    unlink(tmp);
    return svg;
}

/* Colour for the grids: stdout a terminal, no -o file, no NO_COLOR, a
 * terminal that draws colour. */
static bool want_colour(const CliOptions *o)
{
    if (o->out && strcmp(o->out, "-") != 0)
        return false;
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    if ((nc && *nc) || (term && strcmp(term, "dumb") == 0))
        return false;
    return isatty(1);
}

static int show_grids(const CliOptions *o, const TsPlan *p)
{
    unsigned flags = (o->ascii ? TS_SHOW_ASCII : 0) | (want_colour(o) ? TS_SHOW_COLOUR : 0);
    size_t len = 0;
    char *all = NULL;
    for (int32_t k = 0; k < o->nshow; k++) {
        TsDiag d = {0};
        char *g = NULL;
        TsStatus st = ts_plan_show(p, o->show[k], flags, &g, &d);
        if (st != TS_OK) {
            free(all);
            return cli_report(st, &d);
        }
        size_t n = strlen(g);
        char *na = realloc(all, len + n + 2);
        if (!na) {
            ts_free(g);
            free(all);
            fputs("tessel: error: out of memory\n", stderr);
            return CLI_FAIL;
        }
        all = na;
        if (len)
            all[len++] = '\n';
        memcpy(all + len, g, n + 1);
        len += n;
        ts_free(g);
    }
    int rc = cli_write_text(o->out, all ? all : "");
    free(all);
    return rc;
}

static int why(const CliOptions *o, const TsPlan *p)
{
    TsDiag d = {0};
    char *text = NULL;
    TsStatus st = ts_plan_why(p, o->why, &text, &d);
    int rc = st == TS_OK ? cli_write_text(o->out, text) : cli_report(st, &d);
    ts_free(text);
    return rc;
}

static int dump(const CliOptions *o, const TsPlan *p, const char *fmt)
{
    TsDumpOptions dopt = {.format = fmt, .nexpand = o->nexpand, .expand = o->expand};
    TsDiag d = {0};
    char *svg = NULL;
    if (strcmp(fmt, "html") == 0 && ts_plan_num_clusters(p) > 0) {
        char *dot = NULL;
        TsDumpOptions dd = {.format = "dot", .nexpand = o->nexpand, .expand = o->expand};
        TsStatus st = ts_plan_dump_ex(p, &dd, &dot, &d);
        if (st != TS_OK)
            return cli_report(st, &d);
        svg = graphviz_svg(dot);
        ts_free(dot);
        dopt.graph_svg = svg;
    }
    char *text = NULL;
    TsStatus st = ts_plan_dump_ex(p, &dopt, &text, &d);
    free(svg);
    int rc = st == TS_OK ? cli_write_text(o->out, text) : cli_report(st, &d);
    ts_free(text);
    return rc;
}

/* --explain: why each chosen sharding (a plan compiled with --auto-shard). */
static int explain(const CliOptions *o, const TsPlan *p)
{
    char *text = o->format ? ts_plan_explain_json(p) : ts_plan_explain(p);
    if (!text) {
        if (ts_plan_from_file(p))
            return cli_usage_error(&cli_cmd_plan, "--explain needs a plan compiled with --auto-shard: give "
                                   "MODEL.hlo with --auto-shard, or a plan file compiled with it");
        return cli_usage_error(&cli_cmd_plan, "--explain says why --auto-shard chose each sharding: give "
                               "--auto-shard");
    }
    int rc = cli_write_text(o->out, text);
    ts_free(text);
    return rc;
}

static int run_plan(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_plan, o->npos ? "plan takes one MODEL.hlo or PLAN" : "missing MODEL.hlo");
    const char *fmt = o->format ? o->format : "text";
    if (o->nshow && o->format)
        return cli_usage_error(&cli_cmd_plan, "--show draws sharding grids; --format chooses a dump: give one "
                               "(the html page holds the grids too)");
    if (o->why && (o->nshow || o->format || o->explain))
        return cli_usage_error(&cli_cmd_plan, "--why prints the reasons of one value's collectives; give it "
                               "without --show, --format or --explain (every format carries the reasons of all)");
    if (o->ascii && !o->nshow)
        return cli_usage_error(&cli_cmd_plan, "--ascii applies to the grids of --show");
    if (o->explain && (o->nshow || (o->format && strcmp(o->format, "json"))))
        return cli_usage_error(&cli_cmd_plan, "--explain prints why each sharding was chosen, as text or with "
                               "--format json; give it without --show or another --format (--format html shows "
                               "the same on the page)");
    if (o->nexpand && strcmp(fmt, "dot") && strcmp(fmt, "html"))
        return cli_usage_error(&cli_cmd_plan, "--expand applies to --format dot and html");
    TsPlan *p = NULL;
    int rc = cli_open(o, o->pos[0], &p);
    if (rc == CLI_OK)
        rc = cli_layout(o, p);
    if (rc == CLI_OK && ts_plan_num_clusters(p) == 0)
        cli_say("tessel: ", "%s: no device work: nothing is partitioned", o->pos[0]);
    else if (rc == CLI_OK && o->explain)
        rc = explain(o, p);
    else if (rc == CLI_OK)
        rc = o->nshow ? show_grids(o, p) : o->why ? why(o, p) : dump(o, p, fmt);
    ts_plan_free(p);
    return rc;
}

const CliCommand cli_cmd_plan = {
    .name = "plan",
    .summary = "dump the sharding plan (text, JSON, DOT, HTML, sharding grids)",
    .help = HELP,
    .accepts = OPT_LIMIT | OPT_PARTITIONS | OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_FORMAT | OPT_OUT |
               OPT_NO_VERIFY | OPT_SHOW | OPT_ASCII | OPT_EXPAND | OPT_DUMP_DIR | OPT_LINK_GBPS | OPT_AUTO | OPT_DONATE |
               OPT_EXPLAIN | OPT_WHY | OPT_SIGN_KEY,
    .run = run_plan,
};
