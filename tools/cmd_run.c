/*
 * cmd_run.c: `tessel run MODEL.hlo --reference [inputs] [--output-dir DIR]`:
 * bind inputs to the entry parameters, execute on one device with the
 * reference executor, and write DIR/output_<i>.npy or print a summary per
 * output. The work itself is in runtime/inputs.c; this file parses, checks
 * the combination of options, times the phases and prints.
 */
#include "cli.h"

#include <stdio.h>

static const char HELP[] =
    "Usage: tessel run MODEL.hlo [--reference] [--input INDEX_OR_NAME=FILE.npy ...]\n"
    "                  [--random-inputs SEED] [--output-dir DIR] [--stats]\n"
    "                  [--num-partitions N] [--num-replicas R] [--hosts H]\n"
    "                  [--local-devices L] [--steps K]\n"
    "\n"
    "Execute the entry computation of a module. With --reference (or when\n"
    "N*R is 1) the unpartitioned module runs on one device: the oracle that\n"
    "partitioned runs are checked against.\n"
    "\n"
    "Inputs (every leaf of every entry parameter must be bound):\n"
    "  --input KEY=FILE.npy    bind a .npy file; KEY is the parameter's index\n"
    "                          (0), its instruction name (x), or for a tuple\n"
    "                          parameter INDEX.LEAF / NAME.LEAF with the leaf\n"
    "                          counted depth first (0.1). Repeatable.\n"
    "  --random-inputs SEED    fill every unbound leaf with tessel's\n"
    "                          deterministic random values (docs/cli.md)\n"
    "Outputs:\n"
    "  --output-dir DIR        write DIR/output_<i>.npy, one per leaf of the\n"
    "                          result, depth first (DIR is created if missing;\n"
    "                          a failed run leaves no output file). Without it,\n"
    "                          print min/max/mean and the first values of each.\n"
    "Execution:\n"
    "  --reference             run the unpartitioned module on one device\n"
    "  --num-partitions N      partitions (default: the module's num_partitions, else 1)\n"
    "  --num-replicas R        replicas (default: the module's replica_count, else 1)\n"
    "  --hosts H, --local-devices L, --steps K\n"
    "                          for partitioned runs (not built yet)\n"
    "  --stats                 print the time of each phase (to stderr)\n"
    "  -h, --help              show this help\n"
    "\n"
    "Exit status: 0 success; 1 a failure while running; 2 bad usage or bad\n"
    "input (syntax or verifier error, bad or missing .npy, unbound parameter).\n";

/* Say why the options ask for something the reference run cannot do;
 * CLI_OK when they describe a one-device reference run. */
static int check_mode(const CliOptions *o, const IrModule *m)
{
    int64_t n = o->num_partitions ? o->num_partitions
                                  : (m->num_partitions > 0 ? m->num_partitions : 1);
    int64_t r = o->num_replicas ? o->num_replicas : (m->replica_count > 0 ? m->replica_count : 1);
    if (o->steps > 1)
        return cli_usage_error(&cli_cmd_run, "--steps is not built yet");
    if (o->reference) {
        if (o->hosts > 1 || o->local_devices > 1)
            return cli_usage_error(&cli_cmd_run, "--reference runs on one device; --hosts and "
                                   "--local-devices do not apply");
        return CLI_OK;
    }
    if (n * r > 1 || o->hosts > 1 || o->local_devices > 1)
        return cli_usage_error(&cli_cmd_run,
                               "partitioned execution is not built yet (%lld partitions x "
                               "%lld replicas); use --reference to run the unpartitioned "
                               "module on one device", (long long)n, (long long)r);
    return CLI_OK;
}

static void print_summaries(DevValue *result)
{
    int32_t n = ir_shape_leaf_count(&result->shape);
    for (int32_t i = 0; i < n; i++) {
        char *s = rt_value_summary(dev_value_leaf(result, i));
        printf("output %d: %s\n", (int)i, s ? s : "(out of memory)");
        ts_free(s);
    }
}

static int run_run(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_run, o->npos ? "run takes one MODEL.hlo"
                                                     : "missing MODEL.hlo");
    double t[5];
    t[0] = cli_now();
    IrModule *m = NULL;
    int rc = cli_load_model(o->pos[0], &m);
    if (rc != CLI_OK)
        return rc;
    rc = check_mode(o, m);
    t[1] = t[2] = t[3] = t[4] = cli_now();
    RtArgs args = {0};
    DevValue *result = NULL;
    IrDiag d = {0};
    RtBindOptions bo = {o->ninputs, o->inputs, o->random, o->seed};
    IrStatus st = IR_OK;
    if (rc == CLI_OK) {
        st = rt_bind_inputs(m, &bo, &args, &d);
        t[2] = cli_now();
    }
    if (rc == CLI_OK && st == IR_OK) {
        st = rt_run_reference(m, &args, &result, &d);
        t[3] = cli_now();
    }
    if (rc == CLI_OK && st == IR_OK) {
        if (o->output_dir)
            st = rt_write_outputs(result, o->output_dir, NULL, &d);
        else
            print_summaries(result);
        t[4] = cli_now();
    }
    if (rc == CLI_OK && st != IR_OK)
        rc = cli_report(st, &d);
    if (o->stats && rc == CLI_OK)
        fprintf(stderr, "tessel: stats: parse+verify %.3f ms, read inputs %.3f ms, execute "
                "%.3f ms, write outputs %.3f ms\n", (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3,
                (t[3] - t[2]) * 1e3, (t[4] - t[3]) * 1e3);
    dev_value_unref(result);
    rt_args_free(&args);
    ir_module_free(m);
    return rc;
}

const CliCommand cli_cmd_run = {
    .name = "run",
    .summary = "execute a module (--reference: unpartitioned, on one device)",
    .help = HELP,
    .accepts = OPT_INPUT | OPT_RANDOM | OPT_OUTPUT_DIR | OPT_REFERENCE | OPT_PARTITIONS |
               OPT_REPLICAS | OPT_HOSTS | OPT_LOCAL_DEVICES | OPT_STEPS | OPT_STATS,
    .run = run_run,
};
