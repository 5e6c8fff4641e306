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

/* An opt-barrier of the entry (jax.checkpoint's, around the values a
 * remat'ed block saves) leads no group: it passes its operand tuple on
 * unchanged, and the estimate priced the users of its get-tuple-elements
 * as reading the values that went in. So the barrier, its tuple and its
 * get-tuple-elements take those values' shardings as annotated; left to
 * propagation they took others (the held-out remat_mom on 2, test_auto_
 * heldout47.py: the saved activation tiled, all-gathered again for each
 * of its users, 18 all-gathers and 7,424 bytes where the plan priced
 * none). Where an element has no sharding, propagation decides. */
static IrStatus follow_barriers(IrModule *m, IrDiag *d)
{
    IrComputation *c = m->comp[m->entry];
    for (int32_t i = 0; i < c->ninstr; i++) {
        IrInstr *b = &c->instr[i];
        if (b->op != OP_OPTIMIZATION_BARRIER || b->nopnd != 1 || (b->sharding && !b->sharding->unknown))
            continue;
        IrInstr *t = &c->instr[b->opnd[0]];
        if (t->op != OP_TUPLE || (t->sharding && !t->sharding->unknown) || t->nopnd < 1 || t->nopnd > 64)
            continue;
        IrSharding *el[64];
        bool all = true;
        for (int32_t k = 0; k < t->nopnd && all; k++) {
            IrInstr *o = &c->instr[t->opnd[k]];
            all = o->shape.type != IR_TUPLE && o->sharding && !o->sharding->unknown;
            el[k] = all ? o->sharding : NULL;
        }
        if (!all)
            continue;
        IrSharding *s = shd_tuple(m->arena, t->nopnd, el);
        if (!s)
            return ir_oom(d, NULL);
        t->sharding = s;
        b->sharding = s;
        for (int32_t j = i + 1; j < c->ninstr; j++) {
            IrInstr *y = &c->instr[j];
            if (y->op != OP_GET_TUPLE_ELEMENT || y->nopnd != 1 || y->opnd[0] != i ||
                (y->sharding && !y->sharding->unknown) || y->a.tuple_index < 0 || y->a.tuple_index >= t->nopnd)
                continue;
            if (!(y->sharding = shd_tuple_element(m->arena, s, &b->shape, (int32_t)y->a.tuple_index)))
                return ir_oom(d, NULL);
        }
    }
    return IR_OK;
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
    if (st == IR_OK)
        st = auto_cond_annotate(m, g, choice, d);
    return st == IR_OK ? follow_barriers(m, d) : st;
}

/* One strategy per group into choice[], under opt->mem_limit by the
 * memory row as charged. */
static IrStatus solve(AutoGraph *g, const AutoOptions *opt, bool shared, int32_t *choice, AutoIlpInfo *ilp,
                      IrDiag *d)
{
    double limit = (double)opt->mem_limit;
    /* Elimination first; its optimum is the constrained one too when it
     * fits the memory limit. Where the graph's budget of elimination is
     * spent (a round of fit_steps), the plan so far stays. */
    int solved = auto_elim_solve(g, choice);
    if (solved == 0 && g->elim_out)
        return IR_OK;
    /* Its optimum past the memory limit: the Lagrangian over elimination
     * (lagrange.c) finds a plan that fits, in milliseconds per solve
     * (where its gap is large, the integer program's: *ilp says). */
    if (solved > 0 && limit > 0 && auto_graph_mem(g, choice) > limit)
        solved = auto_lagrange_solve(g, limit, choice, ilp);
    /* An elimination plan: among the plans as fast, the one that
     * communicates least; not where devices share cores: there a
     * collective's rendezvous hides behind the work of the devices still
     * computing on the same core, and the plans the tie-break took, a few
     * tenths of a percent slower by the estimate, ran 11-16% slower
     * (docs/auto-shard.md, "Ties"). */
    if (solved > 0 && !shared && auto_tiebreak_solve(g, limit, 0, choice) < 0)
        solved = -1;
    if (solved < 0)
        return ir_oom(d, NULL);
    return solved ? IR_OK : auto_ilp_solve(g, limit, choice, ilp, d);
}

/* Plans solved again with the memory row charged at another step: by
 * the integer program, each with one row more (MEM_CUTS), or else by
 * solve() at that step's row alone (MEM_ROUNDS). */
#define MEM_CUTS 8
#define MEM_ROUNDS 3
/* The integer program's columns (strategies and edge cells) up to which
 * such a plan is solved by it, exactly (within its bound of subproblems),
 * not by the Lagrangian, whose plan can skip the one that fits: on
 * mlp_megatron on 2 (row at the second dot) the Megatron plan, 1% slower
 * than the gathering plan, is on no price's optimum. Twice the
 * Lagrangian's bound (AUTO_EXACT_COLUMNS), since one row at a time can
 * fit no step at all: the held-out gnn_mp (tests/jax/test_auto_heldout47.py)
 * on 2x2 under 6,982 bytes, 8,185 columns, went from a plan within the
 * row at the peak and over it at another step (9,760 bytes) to one within
 * that step's and over the peak's (12,384) and back, 3 times; the
 * partitioner refused the first, and compile/driver.c's plan under a
 * limit lowered to 4,255 moved 2,304 bytes where the edges plan (1,152
 * bytes, 6,264 by every row) fits. GLPK with both rows finds that one in
 * 0.5 s (5 subproblems; on 2x4, 8,033 columns, 1.0 s), where the rounds
 * took 20 s of CPU. Not much further: the held-out VAE step on 2x4 (30,106
 * columns) took 56 s with GLPK and its rows, 31 s by the rounds (wall
 * clock, at a load of 10). */
#define EXACT_COLUMNS (2 * AUTO_EXACT_COLUMNS)

static int64_t columns(const AutoGraph *g)
{
    int64_t n = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        n += g->group[k].nstrat;
    for (int32_t e = 0; e < g->nedge; e++)
        n += (int64_t)g->group[g->edge[e].from].nstrat * g->group[g->edge[e].to].nstrat;
    return n;
}

/* Under a limit the row charges the values live at the unsharded
 * program's peak and the reshards of the instruction run there; one run
 * at another step whose operand is gathered for it can make the sharded
 * program's peak: a contraction (tests/models/mlp_megatron.hlo on 2 under
 * 1.1x its hand plan's peak: the plan's second dot gathers the hidden
 * activations, 10,112 bytes by the partitioner's count where the row, at
 * the tanh, said 7,936), a reshape, slice, pad or concatenate of a tiled
 * dim, a scatter (the held-out roll_pad on 4: its columns' plan gathers
 * the concatenate for the flattening reshape, 1,460 bytes where the row,
 * at the concatenate, said 860). So choice[]'s row at each step where it
 * gathers, and at each contraction's, is computed too; where one passes
 * the limit, the row charged at the step that passes it most is kept and
 * the plan solved again with the rows kept so far and the peak's (the
 * integer program; one row alone, the plan fitted at that step passed
 * the limit at the peak and back, roll_pad's 4 rounds), at most MEM_CUTS
 * times; where the program is too wide, by solve() at that step's row
 * alone, at most MEM_ROUNDS times. Kept: the first plan within the limit
 * at every step (or the one over it least, the partitioner's count
 * decides: compile/driver.c plans again); *mem its most at any step,
 * *ilp how its integer program ended. The row is left at the peak.
 * IR_ENOMEM. */
static IrStatus fit_steps(AutoGraph *g, const IrModule *m, const AutoOptions *opt, bool shared, int32_t *choice,
                          double *mem, AutoIlpInfo *ilp, IrDiag *d)
{
    MemEstimate e;
    IrStatus st = mem_estimate(m, m->entry, NULL, &e, d);
    if (st != IR_OK)
        return st;
    size_t bytes = (size_t)(g->ngroup > 0 ? g->ngroup : 1) * sizeof *choice;
    int32_t *best = ts_malloc(bytes);
    bool exact = columns(g) <= EXACT_COLUMNS;
    AutoMemRow *rows = exact ? ts_calloc(MEM_CUTS, sizeof *rows) : NULL;
    int32_t nrows = 0;
    double least = -1;
    AutoIlpInfo info = *ilp, best_info = *ilp;
    if (!best || (exact && !rows))
        st = ir_oom(d, NULL);
    for (int32_t round = 0; st == IR_OK; round++) {
        double worst = -1;
        int32_t at = -1;
        for (int32_t k = -1; st == IR_OK && k < e.n; k++) {
            if (k >= 0 && (k == e.peak_step || !auto_graph_gathers_at(g, &e, k, choice)))
                continue;
            st = auto_graph_charge_at(g, m, &e, k, d);
            double b = auto_graph_mem(g, choice);
            if (b > worst) {
                worst = b;
                at = k;
            }
        }
        if (st != IR_OK)
            break;
        if (least < 0 || worst < least) {
            least = worst;
            best_info = info;
            memcpy(best, choice, bytes);
        }
        /* Elimination's budget spent: solve() would give the same plan. */
        if (worst <= (double)opt->mem_limit || round == (exact ? MEM_CUTS : MEM_ROUNDS) || (!exact && g->elim_out))
            break;
        st = auto_graph_charge_at(g, m, &e, at, d);
        if (st == IR_OK && exact && at >= 0)
            st = auto_graph_row_take(g, &rows[nrows++], d);
        if (st == IR_OK && exact)
            st = auto_graph_charge_at(g, m, &e, -1, d);
        IrDiag none = {0};
        info = (AutoIlpInfo){.optimal = true};
        IrStatus again = st != IR_OK ? st
                         : exact ? auto_ilp_solve_rows(g, (double)opt->mem_limit, rows, nrows, choice, &info, &none)
                                 : solve(g, opt, shared, choice, &info, &none);
        ir_diag_clear(&none);
        if (again == IR_ENOMEM)
            st = ir_oom(d, NULL);
        if (again != IR_OK)
            break; /* nothing fits the rows */
    }
    if (st == IR_OK) {
        memcpy(choice, best, bytes);
        *mem = least;
        *ilp = best_info;
        st = auto_graph_charge_at(g, m, &e, -1, d);
    }
    for (int32_t k = 0; k < nrows; k++)
        auto_mem_row_free(&rows[k]);
    ts_free(rows);
    ts_free(best);
    mem_estimate_free(&e);
    return st;
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
    /* After inlining, which brings the callees' broadcasts into the
     * readers' computation. */
    int32_t nclone;
    if (st == IR_OK)
        st = auto_clone_broadcasts(m, &nclone, d);
    if (st != IR_OK)
        return st;
    AutoGraph g;
    st = auto_graph_build(m, &opt->mesh, &cost, local, opt->donate_auto, opt->on_host, &g, d);
    if (st != IR_OK)
        return st;
    g.elim_budget = AUTO_ELIM_GRAPH_WORK;
    g.mem_asked = opt->mem_asked;
    int32_t *choice = ts_calloc((size_t)(g.ngroup > 0 ? g.ngroup : 1), sizeof *choice);
    if (!choice)
        st = ir_oom(d, NULL);
    /* The bytes each choice moves, for the tie-break (not run where
     * devices share cores). */
    if (st == IR_OK && !shared)
        st = auto_tiebreak_wire(&g, m, &cost, opt->donate_auto, opt->on_host, d);
    if (st == IR_OK)
        st = auto_graph_prune(&g, true, d);
    AutoIlpInfo ilp = {.optimal = true};
    if (st == IR_OK)
        st = solve(&g, opt, shared, choice, &ilp, d);
    double mem = st == IR_OK ? auto_graph_mem(&g, choice) : 0;
    if (st == IR_OK && opt->mem_limit > 0)
        st = fit_steps(&g, m, opt, shared, choice, &mem, &ilp, d);
    if (st == IR_OK)
        st = annotate(m, &g, choice, d);
    if (st == IR_OK) {
        /* The gap of the plan kept (the tie-break's, where it moved). */
        double c = auto_graph_cost(&g, choice);
        if (!ilp.optimal && isfinite(ilp.bound))
            ilp.gap = c > 0 && ilp.bound < c ? (c - ilp.bound) / c : 0;
        rep->explain = auto_explain_text(&g, choice, m->name, &ilp);
        rep->explain_json = auto_explain_json(&g, choice, m->name, &ilp);
        if (!rep->explain || !rep->explain_json)
            st = ir_oom(d, NULL);
    }
    if (st == IR_OK) {
        rep->seconds = auto_graph_cost(&g, choice);
        rep->mem = mem;
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
