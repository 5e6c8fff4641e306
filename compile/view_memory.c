/*
 * view_memory.c: the memory section of the plan view's HTML page: the
 * estimate's peak broken down (parameters, outputs, collective buffers,
 * temporaries, a called computation's own values), the values live at the
 * peak, largest first, and the live bytes over the execution order drawn
 * as an inline SVG (no script, no fetch: the page stays self-contained).
 *
 * The drawing: x is the step (one per instruction run, in the executor's
 * order), y the bytes live while it runs, 0 at the bottom; a red dot and
 * a dashed line mark the peak. Hovering a point shows its step,
 * instruction and bytes (an SVG <title>).
 *
 * Then the donated pairs, each with where it comes from: the module's own
 * input_output_alias, a buffer_donor tessel paired, or --donate auto's
 * (a plan file keeps them apart with its TesselDonation lines).
 */
#include "compile.h"

#include <stdio.h>

enum { W = 720, H = 180, PAD = 40 };

/* At most this many points are drawn (one every ceil(n/MAX_POINTS) steps
 * on longer programs, the peak always among them). */
#define MAX_POINTS 2000

static void curve_svg(IrStrBuf *o, const PlanMemory *pm)
{
    int32_t n = pm->nsteps;
    if (n < 1 || pm->peak <= 0)
        return;
    int32_t every = (n + MAX_POINTS - 1) / MAX_POINTS;
    double sx = n > 1 ? (double)(W - 2 * PAD) / (n - 1) : 0, sy = (double)(H - 2 * PAD) / (double)pm->peak;
    ir_sb_printf(o, "<svg class=\"memcurve\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                    "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"live bytes per step\">\n",
                 W, H, W, H);
    ir_sb_printf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>"
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n",
                 PAD, H - PAD, W - PAD, H - PAD, PAD, PAD, PAD, H - PAD);
    ir_sb_printf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n", PAD,
                 PAD, W - PAD, PAD);
    ir_sb_printf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\">peak %lld bytes</text>"
                    "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">0</text>\n",
                 PAD + 4, PAD - 6, (long long)pm->peak, PAD - 4, H - PAD + 4);
    ir_sb_printf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">step (execution order, %d "
                    "instructions); bytes live per device</text>\n",
                 W / 2, H - 8, (int)n);
    ir_sb_puts(o, "<polyline fill=\"none\" stroke=\"#36c\" stroke-width=\"1.5\" points=\"");
    for (int32_t s = 0; s < n; s++)
        if (s % every == 0 || s == pm->peak_step || s == n - 1)
            ir_sb_printf(o, "%.1f,%.1f ", PAD + sx * s, H - PAD - sy * (double)pm->live[s]);
    ir_sb_puts(o, "\"/>\n");
    if (pm->peak_step >= 0) {
        ir_sb_printf(o, "<circle cx=\"%.1f\" cy=\"%d\" r=\"4\" fill=\"#c00\"><title>peak: step %d, ", PAD + sx * pm->peak_step,
                     PAD, (int)pm->peak_step + 1);
        compile_html_esc(o, pm->peak_instr);
        ir_sb_printf(o, ", %lld bytes</title></circle>\n", (long long)pm->peak);
    }
    ir_sb_puts(o, "</svg>\n");
}

const char *compile_donation_source(const PlanDonation *pd)
{
    return pd->inferred     ? "inferred (--donate auto)"
           : pd->from_donor ? "a buffer_donor paired by shape, type and shard"
                            : "declared by the module";
}

static void donations_html(IrStrBuf *o, const PlanMemory *pm)
{
    if (pm->ndonations == 0)
        return;
    if (pm->undonated_peak > 0) {
        char why[640];
        plan_donation_why(pm, why, sizeof why);
        ir_sb_printf(o, "<p>the donated pairs lower the peak by %lld bytes (%lld with nothing donated)",
                     (long long)(pm->undonated_peak - pm->peak), (long long)pm->undonated_peak);
        if (why[0]) {
            ir_sb_puts(o, ": ");
            compile_html_esc(o, why);
        }
        ir_sb_puts(o, "</p>\n");
    }
    ir_sb_puts(o, "<table class=\"donations\"><tr><th>donated parameter</th><th>output</th><th>from</th>"
                  "<th>last read at step</th><th>written at step</th></tr>\n");
    for (int32_t k = 0; k < pm->ndonations; k++) {
        const PlanDonation *pd = &pm->donations[k];
        ir_sb_printf(o, "<tr><td>%lld (", (long long)pd->param);
        compile_html_esc(o, pd->param_name ? pd->param_name : "?");
        ir_sb_printf(o, ")</td><td>%lld</td><td>%s</td><td>", (long long)pd->output, compile_donation_source(pd));
        if (pd->last_read)
            ir_sb_printf(o, "%d", (int)pd->read_step + 1);
        ir_sb_puts(o, "</td><td>");
        if (pd->written)
            ir_sb_printf(o, "%d", (int)pd->write_step + 1);
        ir_sb_puts(o, "</td></tr>\n");
    }
    ir_sb_puts(o, "</table>\n");
}

void compile_memory_html(IrStrBuf *o, const PlanMemory *pm)
{
    ir_sb_puts(o, "<h3>Memory per device (estimate)</h3>\n<p>peak ");
    ir_sb_printf(o, "%lld bytes", (long long)pm->peak);
    if (pm->peak_instr) {
        ir_sb_printf(o, " at step %d of %d (<code>", (int)pm->peak_step + 1, (int)pm->nsteps);
        compile_html_esc(o, pm->peak_instr);
        ir_sb_puts(o, "</code>)");
    } else {
        ir_sb_puts(o, " before the first step (the parameters)");
    }
    ir_sb_puts(o, "; liveness over the execution order (docs/plan.md, \"Memory per device\")</p>\n");
    ir_sb_puts(o, "<table class=\"memory\"><tr><th>at the peak</th><th>bytes</th></tr>\n");
    static const char *const what[4] = {"parameters", "outputs", "collective buffers", "temporaries"};
    for (int k = 0; k < 4; k++)
        ir_sb_printf(o, "<tr><td>%s</td><td>%lld</td></tr>\n", what[k], (long long)pm->by_kind[k]);
    ir_sb_printf(o, "<tr><td>inside a called computation</td><td>%lld</td></tr></table>\n", (long long)pm->callee);
    curve_svg(o, pm);
    ir_sb_puts(o, "<table class=\"memvalues\"><tr><th>live at the peak</th><th>opcode</th><th>bytes</th>"
                  "<th>kind</th></tr>\n");
    for (int32_t k = 0; k < pm->nvalues; k++) {
        ir_sb_puts(o, "<tr><td>");
        compile_html_esc(o, pm->values[k].name);
        ir_sb_printf(o, "</td><td>%s</td><td>%lld</td><td>%s</td></tr>\n", pm->values[k].opcode,
                     (long long)pm->values[k].bytes, mem_kind_name(pm->values[k].kind));
    }
    ir_sb_puts(o, "</table>\n");
    donations_html(o, pm);
}
