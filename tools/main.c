/*
 * main.c: `tessel <command> [options]`: dispatch to the command, or print
 * the overview (--help) or the version (--version). The commands are the
 * rows of COMMANDS; adding one is a row here plus its cmd_NAME.c.
 */
#include "cli.h"
#include "tessel.h"

#include <stdio.h>
#include <string.h>

static const CliCommand *const COMMANDS[] = {
    &cli_cmd_check,
    &cli_cmd_compile,
    &cli_cmd_plan,
    &cli_cmd_run,
    &cli_cmd_devices,
    &cli_cmd_grad,
    &cli_cmd_profile,
};
enum { NCOMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void overview(FILE *f)
{
    fputs("Usage: tessel <command> [options]\n"
          "\n"
          "tessel: an XLA-like SPMD partitioner and device-cluster compiler for HLO\n"
          "modules, with an MPI runtime.\n"
          "\n"
          "Commands:\n", f);
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", COMMANDS[i]->name, COMMANDS[i]->summary);
    fputs("\n"
          "Options:\n"
          "  -h, --help     show this help; 'tessel <command> --help' for a command\n"
          "  --version      print the version\n"
          "\n"
          "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad input.\n"
          "See docs/cli.md for every command, option and file format.\n", f);
}

static const CliCommand *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i]->name, name) == 0)
            return COMMANDS[i];
    return NULL;
}

/* The command `name` is a slip of (ts_nearest_name), or NULL. */
static const char *nearest_command(const char *name)
{
    const char *names[NCOMMANDS];
    for (int i = 0; i < NCOMMANDS; i++)
        names[i] = COMMANDS[i]->name;
    return ts_nearest_name(name, names, NCOMMANDS);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        overview(stderr);
        return CLI_USAGE;
    }
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0) {
        const CliCommand *c = argc > 2 ? find_command(argv[2]) : NULL;
        if (argc > 2 && !c) {
            const char *near = nearest_command(argv[2]);
            return cli_usage_error(NULL, "unknown command '%s'%s%s%s", argv[2], near ? "; did you mean " : "",
                                   near ? near : "", near ? "?" : "");
        }
        if (c)
            fputs(c->help, stdout);
        else
            overview(stdout);
        return CLI_OK;
    }
    if (strcmp(a, "--version") == 0) {
        printf("tessel %s\n", ts_version());
        return CLI_OK;
    }
    const CliCommand *cmd = find_command(a);
    if (!cmd) {
        static const char *const top[] = {"--help", "--version"};
        const char *near = a[0] == '-' ? ts_nearest_name(a, top, 2) : nearest_command(a);
        return cli_usage_error(NULL, "unknown %s '%s'%s%s%s", a[0] == '-' ? "option" : "command", a,
                               near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    }
    CliOptions o;
    int rc = cli_parse(cmd, argc - 2, argv + 2, &o);
    if (rc == CLI_OK)
        rc = cmd->run(&o);
    else if (rc < 0)
        rc = CLI_OK; /* --help was printed */
    cli_options_free(&o);
    fflush(stdout);
    if (ferror(stdout)) {
        fputs("tessel: error: cannot write to standard output\n", stderr);
        return CLI_FAIL;
    }
    return rc;
}
