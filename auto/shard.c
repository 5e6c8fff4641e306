/*
 * shard.c: auto_shard, the pass. Runs on a verified module before
 * propagation (compile/driver.c, step 3a):
 *
 *   scans      every scan made the while loop the partitioner would
 *              make it (partition/expand_scan.c), so its body is in the
 *              graph as any loop's (loop.c)
 *   inline     the entry's calls inlined (inline.c): what they compute
 *              is priced and sharded like the rest
 *   graph      strategies of every instruction of the entry computation,
 *              followers merged, edges priced (graph.c); the user's
 *              shardings are constraints
 *   prune      dominated strategies removed (prune.c)
 *   solve      one strategy per group: by elimination (elim.c), exact;
 *              where its optimum passes the memory limit, by the
 *              Lagrangian on memory over it (lagrange.c); by the integer
 *              program (ilp.c) where the graph is too wide for elimination
 *              or the Lagrangian finds no plan that fits
 *   tie-break  among elimination's plans within 2% of its estimate, the
 *              one that communicates least (tiebreak.c)
 *   annotate   every instruction of a group that the user did not shard
 *              gets its chosen output sharding; opaque ones get none (the
 *              propagation gives them one)
 *   explain    the chosen strategies and their alternatives (explain.c)
 *
 * Establishes shardings the partitioner can execute: tiled on dims the
 * shapes divide, partially replicated along the unused mesh axes. Breaks
 * nothing: the module verifies as before (with its calls inlined).
 */
#include "auto.h"

#include <math.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static IrStatus annotate(IrModule *m, const AutoGraph *g, const int32_t *choice, IrDiag *d)
{
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        const AutoNode *v = &g->node[i];
        if (v->group < 0 || v->fixed || g->view.where_comp[i] < 0)
            continue;
        IrInstr *x = &m->comp[g->view.where_comp[i]]->instr[g->view.where_instr[i]];
        IrSharding *s = auto_result_sharding(m->arena, &g->mesh, x, &v->strat[choice[v->group]].out);
        if (!s)
            return ir_oom(d, NULL);
        x->sharding = s;
    }
    IrStatus st = auto_loop_annotate(m, g, choice, d);
    return st == IR_OK ? auto_cond_annotate(m, g, choice, d) : st;
}

/* The explanation with a line after its first saying that the integer
 * program stopped at its bound (ilp.c) and how far from the optimum its
 * plan may be; NULL out of memory. Takes text. */
static char *with_gap(char *text, const AutoIlpInfo *ilp)
{
    const char *nl = strchr(text, '\n');
    size_t head = nl ? (size_t)(nl - text) + 1 : strlen(text);
    IrStrBuf o = {0};
    ir_sb_putn(&o, text, head);
    ir_sb_printf(&o,
                 "  solver: the integer program (GLPK) stopped after %d subproblems of branch and bound (its bound, "
                 "a count): the best plan found",
                 (int)ilp->nodes);
    if (isfinite(ilp->gap))
        ir_sb_printf(&o, ", its estimate at most %.3g%% above the optimum's", ilp->gap * 100);
    ir_sb_puts(&o, " (the same plan on every run)\n");
    ir_sb_puts(&o, text + head);
    ts_free(text);
    return ir_sb_take(&o);
}

IrStatus auto_shard(IrModule *m, const AutoOptions *opt, AutoReport *rep, IrDiag *d)
{
    memset(rep, 0, sizeof *rep);
    double t0 = now();
    char mesh[160];
    auto_mesh_text(&opt->mesh, mesh, sizeof mesh);
    int64_t n = m->num_partitions > 0 ? m->num_partitions : 1;
    if (opt->mesh.ndevices != n)
        return ir_error(d, IR_EINPUT, m->file, NULL, (IrPos){0, 0},
                        "--mesh %s has %lld devices, but the module is compiled for %lld partitions "
                        "(--num-partitions must be the mesh's device count)",
                        mesh, (long long)opt->mesh.ndevices, (long long)n);
    IrStatus st = auto_per_device(m, n, d);
    if (st != IR_OK)
        return st;
    int64_t local = opt->local_devices > 0 ? opt->local_devices : n;
    /* Do a host's devices share its cores? */
    bool shared = opt->host_cores > 0 && local > opt->host_cores;
    AutoCost cost = opt->cost;
    auto_cost_fill(&cost, opt->link_gbps);
    /* Scans become while loops first, as the partitioner would make them
     * after the choice (partition/expand_scan.c, compile/driver.c step 3):
     * the loops, their calls inlined, are part of the graph, not opaque
     * (tests/models/scan_sharded.hlo: held whole, 1.90x to 5.53x its hand
     * plan's peak on 2 to 8 devices and no plan fitted 1.1x of it; now
     * 0.97x to 1.00x, no collective). */
    st = shd_expand_scans(m, d);
    if (st != IR_OK)
        return st;
    int32_t ninlined;
    st = auto_inline_calls(m, &ninlined, d);
    if (st != IR_OK)
        return st;
    AutoGraph g;
    st = auto_graph_build(m, &opt->mesh, &cost, local, opt->donate_auto, &g, d);
    if (st != IR_OK)
        return st;
    int32_t *choice = ts_calloc((size_t)(g.ngroup > 0 ? g.ngroup : 1), sizeof *choice);
    if (!choice)
        st = ir_oom(d, NULL);
    if (st == IR_OK)
        st = auto_graph_prune(&g, true, d);
    /* Elimination first; its optimum is the constrained one too when it
     * fits the memory limit. */
    int solved = 0;
    if (st == IR_OK && (solved = auto_elim_solve(&g, choice)) < 0)
        st = ir_oom(d, NULL);
    /* Its optimum past the memory limit: the Lagrangian over elimination
     * (lagrange.c) finds a plan that fits, in milliseconds per solve. */
    if (solved > 0 && opt->mem_limit > 0 && auto_graph_mem(&g, choice) > (double)opt->mem_limit &&
        (solved = auto_lagrange_solve(&g, (double)opt->mem_limit, choice)) < 0)
        st = ir_oom(d, NULL);
    /* An elimination plan: among the plans as fast, the one that
     * communicates least; not where devices share cores: there a
     * collective's rendezvous hides behind the work of the devices still
     * computing on the same core, and the plans the tie-break took, a few
     * tenths of a percent slower by the estimate, ran 11-16% slower
     * (docs/auto-shard.md, "Ties"). */
    if (solved > 0 && !shared && auto_tiebreak_solve(&g, (double)opt->mem_limit, choice) < 0)
        st = ir_oom(d, NULL);
    AutoIlpInfo ilp = {true, 0, 0};
    if (st == IR_OK && !solved)
        st = auto_ilp_solve(&g, (double)opt->mem_limit, choice, &ilp, d);
    if (st == IR_OK)
        st = annotate(m, &g, choice, d);
    if (st == IR_OK) {
        rep->explain = auto_explain_text(&g, choice, m->name);
        rep->explain_json = auto_explain_json(&g, choice, m->name);
        if (rep->explain && !ilp.optimal)
            rep->explain = with_gap(rep->explain, &ilp);
        if (!rep->explain || !rep->explain_json)
            st = ir_oom(d, NULL);
    }
    if (st == IR_OK) {
        rep->seconds = auto_graph_cost(&g, choice);
        rep->ngroups = g.ngroup;
        for (int32_t i = 0; i < g.comp->ninstr; i++)
            rep->nnodes += g.node[i].group >= 0;
        rep->solve_seconds = now() - t0;
    }
    ts_free(choice);
    auto_graph_free(&g);
    if (st != IR_OK)
        auto_report_free(rep);
    return st;
}

void auto_report_free(AutoReport *r)
{
    ts_free(r->explain);
    ts_free(r->explain_json);
    memset(r, 0, sizeof *r);
}
