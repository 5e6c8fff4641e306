/*
 * stats_ops.c: `--stats=ops` (TsRunOptions.stats_ops): where a step's time
 * goes, instruction by instruction, as each local device measured it
 * (runtime/local.c keeps the tables, device/exec.c times). Per device:
 *
 *   tessel: stats: ops of device 0: 4 steps timed, 3.086 ms a step; self time of each instruction
 *   tessel: stats:   instruction   opcode      shape            calls  total ms   share
 *   tessel: stats:   dot.3         dot         f32[256,1024]        4     5.123   41.5%
 *   tessel: stats:   add.7         add         f32[256,1024]        4     2.001   16.2%  fusion of 3
 *   tessel: stats:   all-to-all.1  all-to-all  f32[2,64,128]        4     1.200    9.7%  wait 0.800, transfer 0.400
 *   tessel: stats:   12 others                                     48     0.500    4.0%
 *   tessel: stats:   outside the instructions                             0.100    0.8%
 *
 * The shares are of the timed steps' wall time on that device, so the rows,
 * the others and the time outside the instructions (the executor's plans
 * and fusion analysis of each step, releasing the arguments) add up to
 * 100%. A call, while or conditional shows its self time (its body's
 * instructions have rows of their own); a fusion group shows at its root.
 */
#include "api_internal.h"

#include <stdio.h>
#include <string.h>

/* Names and shapes wider than this are cut (with "..."). */
#define NAME_WIDTH 40
#define SHAPE_WIDTH 32

static void cut(char *s, size_t width)
{
    if (strlen(s) > width)
        memcpy(s + width - 3, "...", 4);
}

static int32_t name_width(const DevOpTime *rows, int32_t n)
{
    int32_t w = (int32_t)strlen("instruction");
    for (int32_t r = 0; r < n; r++) {
        int32_t len = (int32_t)strlen(rows[r].ins->name);
        w = len > w ? len : w;
    }
    return w < NAME_WIDTH ? w : NAME_WIDTH;
}

static void row(IrStrBuf *s, const DevOpTime *e, int32_t nw, double step_total)
{
    char name[NAME_WIDTH + 1], shape[SHAPE_WIDTH + 1];
    snprintf(name, sizeof name, "%s", e->ins->name);
    cut(name, NAME_WIDTH);
    char *sh = ir_shape_str(&e->ins->shape, false);
    snprintf(shape, sizeof shape, "%s", sh ? sh : "?");
    ts_free(sh);
    cut(shape, SHAPE_WIDTH);
    ir_sb_printf(s, "tessel: stats:   %-*s  %-18s  %-*s  %6lld  %9.3f  %5.1f%%", (int)nw, name, ir_op_name(e->ins->op),
                 SHAPE_WIDTH, shape, (long long)e->calls, e->seconds * 1e3,
                 step_total > 0 ? 100 * e->seconds / step_total : 0.0);
    if (e->fused > 0)
        ir_sb_printf(s, "  fusion of %d", (int)e->fused);
    if (e->wait_seconds > 0)
        ir_sb_printf(s, "  wait %.3f, transfer %.3f", e->wait_seconds * 1e3, (e->seconds - e->wait_seconds) * 1e3);
    ir_sb_printf(s, "\n");
}

static void device_table(IrStrBuf *s, const RtOpTimes *ot, int32_t rows, int64_t device)
{
    DevOpTime *top = ts_malloc((size_t)(rows > 0 ? rows : 1) * sizeof *top);
    if (!top) {
        ir_sb_printf(s, "tessel: stats: ops of device %lld: out of memory\n", (long long)device);
        return;
    }
    int32_t ran = dev_op_times_top(&ot->times, top, rows), shown = ran < rows ? ran : rows;
    double total = ot->seconds, listed = 0, timed = 0;
    int64_t rest_calls = 0;
    for (int32_t r = 0; r < shown; r++)
        listed += top[r].seconds;
    int32_t n = ot->times.first ? ot->times.first[ot->times.m->ncomp] : 0;
    for (int32_t e = 0; e < n; e++) {
        timed += ot->times.t[e].seconds;
        rest_calls += ot->times.t[e].calls;
    }
    for (int32_t r = 0; r < shown; r++)
        rest_calls -= top[r].calls;
    ir_sb_printf(s, "tessel: stats: ops of device %lld: %lld step%s timed, %.3f ms a step; self time of each "
                 "instruction, in ms over those steps\n", (long long)device, (long long)ot->steps,
                 ot->steps == 1 ? "" : "s", ot->steps > 0 ? total * 1e3 / (double)ot->steps : 0.0);
    int32_t nw = name_width(top, shown);
    ir_sb_printf(s, "tessel: stats:   %-*s  %-18s  %-*s  %6s  %9s  %6s\n", (int)nw, "instruction", "opcode", SHAPE_WIDTH,
                 "shape", "calls", "total ms", "share");
    for (int32_t r = 0; r < shown; r++)
        row(s, &top[r], nw, total);
    double pct = total > 0 ? 100 / total : 0;
    if (ran > shown) {
        char others[32];
        snprintf(others, sizeof others, "%d other%s", (int)(ran - shown), ran - shown == 1 ? "" : "s");
        ir_sb_printf(s, "tessel: stats:   %-*s  %6lld  %9.3f  %5.1f%%\n", (int)(nw + 22 + SHAPE_WIDTH), others,
                     (long long)rest_calls, (timed - listed) * 1e3, (timed - listed) * pct);
    }
    ir_sb_printf(s, "tessel: stats:   %-*s  %6s  %9.3f  %5.1f%%\n", (int)(nw + 22 + SHAPE_WIDTH),
                 "outside the instructions", "", (total - timed) * 1e3, (total - timed) * pct);
    ts_free(top);
}

void api_stats_ops(IrStrBuf *s, const RtRunStats *rs, int32_t rows, int64_t first)
{
    for (int32_t k = 0; k < rs->nops; k++)
        device_table(s, &rs->ops[k], rows, first + k);
}
