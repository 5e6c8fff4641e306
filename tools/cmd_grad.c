/*
 * cmd_grad.c: `tessel grad MODEL.hlo [--wrt PARAMS] [--loss OUTPUT]
 * [--sgd LR | --adam LR | --jvp] [-o STEP.hlo]`: write the gradient module
 * (a training step, or the forward-mode module) of a forward module, as HLO text that `tessel check`,
 * `tessel run` and `tessel compile` read. Nothing is written when it fails.
 */
#include "cli.h"

#include <stdio.h>

static const char HELP[] =
    "Usage: tessel grad MODEL.hlo [--wrt PARAMS] [--loss OUTPUT] [--sgd LR | --adam LR]\n"
    "                   [--remat dots|nothing|names=A,B] [-o STEP.hlo] [--limit NAME=VALUE ...]\n"
    "       tessel grad MODEL.hlo --jvp [--wrt PARAMS] [-o JVP.hlo]\n"
    "\n"
    "Write the reverse-mode gradient module of a forward HLO module: its root is\n"
    "(forward outputs..., dLoss/dP for each P of --wrt), each gradient with its\n"
    "parameter's shape and sharding.\n"
    "\n"
    "Options:\n"
    "  --wrt PARAMS   comma-separated entry parameter numbers or names, in the\n"
    "                 order of the gradients (default: every floating parameter)\n"
    "  --loss OUTPUT  the root tuple's element (number or name) that is the loss;\n"
    "                 default: the root, which must be a floating scalar\n"
    "  --sgd LR       write a training step instead: the outputs after the forward\n"
    "                 ones are P - LR * dLoss/dP, aliased to P (input_output_alias),\n"
    "                 so 'tessel run STEP.hlo --steps K' trains for K steps\n"
    "  --adam LR      an Adam step: parameters m_P, v_P for each P (P its name)\n"
    "                 and a step counter t (f32[]) are appended, marked as\n"
    "                 optimizer state ('tessel run --init-state zeros' starts\n"
    "                 them at zero); outputs P', m_P', v_P' for each P, then\n"
    "                 t + 1, all aliased\n"
    "  --remat POLICY what the backward keeps of the forward values it reads, as\n"
    "                 jax.checkpoint's policies: dots (dot outputs; the rest is\n"
    "                 recomputed in the backward), nothing (only parameters),\n"
    "                 names=A,B (those instructions); recomputations are named\n"
    "                 NAME.remat (default: everything is kept)\n"
    "  --jvp          forward mode instead: a tangent parameter tangent_P per\n"
    "                 PARAMS entry P is appended; the outputs are the forward\n"
    "                 outputs, then the tangent of each output\n"
    "  -o FILE        write the module there (default: standard output)\n"
    "  --limit NAME=VALUE  as for tessel check\n"
    "  -h, --help     show this help\n"
    "\n"
    "Custom gradients: frontend_attributes={tessel_gradient=\"COMP\"} (or\n"
    "tessel_tangent) on an instruction names the computation to use as its\n"
    "gradient (docs/cli.md). A while loop whose trip count depends on data is\n"
    "counted at run time, its stack bounded by tessel_max_trips (default 1024).\n"
    "\n"
    "Exit status: 0 written; 2 bad input (an op without a gradient rule is named\n"
    "with its FILE:LINE:COL); 1 a failure while running.\n";

static int run_grad(const CliOptions *o)
{
    if (o->npos != 1)
        return cli_usage_error(&cli_cmd_grad, o->npos ? "grad takes one MODEL.hlo" : "missing MODEL.hlo");
    TsModule *m = NULL;
    int rc = cli_load_model(o, o->pos[0], &m);
    if (rc != CLI_OK)
        return rc;
    TsGradOptions go = {.wrt = o->wrt, .loss = o->loss, .jvp = o->jvp, .sgd = o->sgd, .adam = o->adam,
                        .remat = o->remat};
    TsModule *g = NULL;
    TsDiag d = {0};
    TsStatus st = ts_add_gradients(m, &go, &g, &d);
    if (st != TS_OK) {
        ts_module_free(m);
        return cli_report(st, &d);
    }
    char *text = ts_module_text(g);
    if (!text) {
        fputs("tessel: error: out of memory\n", stderr);
        rc = CLI_FAIL;
    } else {
        rc = cli_write_text(o->out, text);
    }
    ts_free(text);
    ts_module_free(g);
    ts_module_free(m);
    return rc;
}

const CliCommand cli_cmd_grad = {
    .name = "grad",
    .summary = "write the gradient module or a training step of a forward module",
    .help = HELP,
    .accepts = OPT_OUT | OPT_LIMIT | OPT_WRT | OPT_LOSS | OPT_SGD | OPT_ADAM | OPT_JVP | OPT_REMAT,
    .run = run_grad,
};
