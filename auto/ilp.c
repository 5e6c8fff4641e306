/*
 * ilp.c: one strategy per group by an integer program (Alpa, OSDI 2022,
 * section 4.2), solved with GLPK.
 *
 *   minimise   Σ_g Σ_k unary[g][k] x[g][k] + Σ_e Σ_st cost[e][s][t] y[e][s][t]
 *   subject to Σ_k x[g][k] = 1                       (one choice per group)
 *              Σ_t y[e][s][t] = x[from(e)][s]         (the edge variables are
 *              Σ_s y[e][s][t] = x[to(e)][t]            the product x_s x_t,
 *                                                      linearised)
 *              Σ_g Σ_k mem[g][k] x[g][k] + Σ_e Σ_st mem[e][s][t] y[e][s][t]
 *                   <= limit - fixed   (with a limit)
 *              x binary, 0 <= y <= 1
 *
 * With x integral the two edge rows force y[e][s][t] = x_s x_t, so y
 * needs no integrality. The relaxation is solved first; where its x are
 * integral (usual: the program is a relaxation of a shortest-path-like
 * problem) it is the optimum and branch and bound does not run. Where it
 * runs, it stops after AUTO_ILP_NODE_LIMIT subproblems (a count, not a
 * clock: the same plan on every run) with the best plan found and its gap
 * to the best bound (AutoIlpInfo, said by --explain). Without
 * a memory limit elim.c usually solves first, exactly and faster; this
 * program is for the memory row and for graphs too wide for elimination. Costs are in microseconds (GLPK's tolerances are
 * absolute). Why GLPK and not CBC: GLPK is a C library with a C API
 * (CBC's is C++ with a C wrapper, coinor-libcbc-dev pulling in the COIN-OR
 * stack), it is one Debian package (libglpk-dev), its GPL-3 licence is
 * compatible with the project, and it is deterministic: the same program
 * gives the same solution (docs/auto-shard.md).
 */
#include "auto.h"

#include <float.h>
#include <glpk.h>
#include <math.h>
#include <string.h>

#define US 1e6

/* What the search saw: its subproblems (at most limit), the best bound of
 * the open ones when it stopped (microseconds), whether it was stopped. */
typedef struct Search {
    int nodes, limit;
    double bound;
    bool stopped;
} Search;

static void on_node(glp_tree *t, void *info)
{
    Search *s = info;
    int total;
    glp_ios_tree_size(t, NULL, NULL, &total);
    s->nodes = total;
    if (total < s->limit || s->stopped)
        return;
    /* The best bound of the open subproblems, where it is above the
     * relaxation's (one not solved yet has none). */
    int best = glp_ios_best_node(t);
    double b = best ? glp_ios_node_bound(t, best) : s->bound;
    s->bound = b > s->bound ? b : s->bound;
    s->stopped = true;
    glp_ios_terminate(t);
}

/* Row and column counts and the matrix, as glp_load_matrix takes them
 * (1-based). */
typedef struct Lp {
    glp_prob *p;
    int *ia, *ja;
    double *ar;
    int nz, cap;
} Lp;

static void put(Lp *lp, int row, int col, double v)
{
    lp->nz++;
    lp->ia[lp->nz] = row;
    lp->ja[lp->nz] = col;
    lp->ar[lp->nz] = v;
}

/* Are the relaxation's x all 0 or 1? */
static bool integral(const AutoGraph *g, const Lp *lp, const int *xcol)
{
    for (int32_t k = 0; k < g->ngroup; k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            double v = glp_get_col_prim(lp->p, xcol[k] + s);
            if (v > 1e-9 && v < 1 - 1e-9)
                return false;
        }
    return true;
}

/* Each group's strategy of the largest x (col: the relaxation's or the
 * integer solution's values). */
static void argmax(const AutoGraph *g, const int *xcol, double (*col)(glp_prob *, int), glp_prob *p, int32_t *choice)
{
    for (int32_t k = 0; k < g->ngroup; k++) {
        double best = -1;
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            double v = col(p, xcol[k] + s);
            if (v > best) {
                best = v;
                choice[k] = s;
            }
        }
    }
}

/* Cell `s` of group k's memory in row r (NULL: the graph's own row), at
 * *c in r's cells (counted on). */
static double group_mem(const AutoGraph *g, const AutoMemRow *r, int32_t k, int32_t s, size_t *c)
{
    return r ? r->cell[(*c)++] : g->group[k].mem[s];
}

static IrStatus too_big(const AutoGraph *g, const AutoMemRow *r, double limit, IrDiag *d)
{
    double least = r ? r->fixed : g->mem_fixed;
    size_t c = 0;
    for (int32_t k = 0; k < g->ngroup; k++) {
        double m = group_mem(g, r, k, 0, &c);
        for (int32_t s = 1; s < g->group[k].nstrat; s++) {
            double v = group_mem(g, r, k, s, &c);
            m = v < m ? v : m;
        }
        least += m;
    }
    if (least <= limit)
        return IR_OK;
    /* A share of the user's limit is said as one: "the limit 6618
     * (--limit memory)" where the user gave 14976 read as a wrong number. */
    if (g->mem_asked > 0 && (double)g->mem_asked != limit)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "no sharding over the mesh fits the memory limit: the smallest estimate is %.0f bytes per "
                        "device, the limit %.0f (the devices' share of --limit memory=%lld, per device, that a "
                        "first plan over it left)",
                        least, limit, (long long)g->mem_asked);
    return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                    "no sharding over the mesh fits the memory limit: the smallest estimate is %.0f bytes per "
                    "device, the limit %.0f (--limit memory, per device)",
                    least, limit);
}

/* The row Σ mem x + Σ mem y <= limit - fixed of r (NULL: the graph's
 * own). */
static void put_mem_row(Lp *lp, const AutoGraph *g, const int *xcol, const int *ycol, double limit,
                        const AutoMemRow *r)
{
    int row = glp_add_rows(lp->p, 1);
    glp_set_row_bnds(lp->p, row, GLP_UP, 0.0, limit - (r ? r->fixed : g->mem_fixed));
    size_t c = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            double v = group_mem(g, r, k, s, &c);
            if (v != 0)
                put(lp, row, xcol[k] + s, v);
        }
    /* A pair's memory (auto_graph_charge_pair, a reshard's buffer) on its
     * edge's cells. */
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        int ns = g->group[ed->from].nstrat, nt = g->group[ed->to].nstrat;
        for (int s = 0; s < ns; s++)
            for (int t = 0; t < nt; t++) {
                double v = r ? r->cell[c++] : ed->mem ? ed->mem[s * nt + t] : 0;
                if (v != 0)
                    put(lp, row, ycol[e] + s * nt + t, v);
            }
    }
}

IrStatus auto_ilp_solve(const AutoGraph *g, double mem_limit, int32_t *choice, AutoIlpInfo *info, IrDiag *d)
{
    return auto_ilp_solve_bounded(g, mem_limit, AUTO_ILP_NODE_LIMIT, choice, info, d);
}

static IrStatus least_rows(const AutoGraph *g, AutoTerm objective, const double *bound, int32_t node_limit,
                           const AutoMemRow *rows, int32_t nrows, int32_t *choice, AutoIlpInfo *info, IrDiag *d);

IrStatus auto_ilp_solve_rows(const AutoGraph *g, double mem_limit, const AutoMemRow *rows, int32_t nrows,
                             int32_t *choice, AutoIlpInfo *info, IrDiag *d)
{
    const double bound[AUTO_NTERMS] = {0, 0, mem_limit};
    return least_rows(g, AUTO_TERM_TIME, bound, AUTO_ILP_NODE_LIMIT, rows, nrows, choice, info, d);
}

IrStatus auto_ilp_solve_bounded(const AutoGraph *g, double mem_limit, int32_t node_limit, int32_t *choice,
                                AutoIlpInfo *info, IrDiag *d)
{
    const double bound[AUTO_NTERMS] = {0, 0, mem_limit};
    return auto_ilp_least(g, AUTO_TERM_TIME, bound, node_limit, choice, info, d);
}

/* Term t's coefficient of strategy s of group k, and of edge e's cell j
 * (time in microseconds, GLPK's tolerances being absolute). */
static double unary_of(const AutoGraph *g, AutoTerm t, int32_t k, int32_t s)
{
    const AutoGroup *gr = &g->group[k];
    return t == AUTO_TERM_TIME ? gr->unary[s] * US : t == AUTO_TERM_WIRE ? (gr->wire ? gr->wire[s] : 0) : gr->mem[s];
}

static double edge_of(const AutoGraph *g, AutoTerm t, int32_t e, size_t j)
{
    const AutoEdge *ed = &g->edge[e];
    const double *c = t == AUTO_TERM_TIME ? ed->cost : t == AUTO_TERM_WIRE ? ed->wire : ed->mem;
    return !c ? 0 : t == AUTO_TERM_TIME ? c[j] * US : c[j];
}

IrStatus auto_ilp_least(const AutoGraph *g, AutoTerm objective, const double *bound, int32_t node_limit,
                        int32_t *choice, AutoIlpInfo *info, IrDiag *d)
{
    return least_rows(g, objective, bound, node_limit, NULL, 0, choice, info, d);
}

static IrStatus least_rows(const AutoGraph *g, AutoTerm objective, const double *bound, int32_t node_limit,
                           const AutoMemRow *rows, int32_t nrows, int32_t *choice, AutoIlpInfo *info, IrDiag *d)
{
    double mem_limit = bound[AUTO_TERM_MEM];
    memset(choice, 0, (size_t)g->ngroup * sizeof *choice);
    if (info)
        *info = (AutoIlpInfo){.optimal = true, .by = AUTO_BY_ILP, .bound = -INFINITY, .node_limit = node_limit};
    nrows = mem_limit > 0 ? nrows : 0;
    for (int32_t k = -1; mem_limit > 0 && k < nrows; k++) {
        IrStatus st = too_big(g, k < 0 ? NULL : &rows[k], mem_limit, d);
        if (st != IR_OK)
            return st;
    }
    if (g->ngroup == 0)
        return IR_OK;
    /* Columns: x of each group, then y of each edge. */
    int *xcol = ts_calloc((size_t)g->ngroup, sizeof *xcol), *ycol = ts_calloc((size_t)g->nedge + 1, sizeof *ycol);
    int ncol = 0;
    size_t nz = 0;
    if (!xcol || !ycol) {
        ts_free(xcol);
        ts_free(ycol);
        return ir_oom(d, NULL);
    }
    for (int32_t k = 0; k < g->ngroup; k++) {
        xcol[k] = ncol + 1;
        ncol += g->group[k].nstrat;
        nz += 2 * (size_t)g->group[k].nstrat;
    }
    for (int32_t e = 0; e < g->nedge; e++) {
        size_t ns = (size_t)g->group[g->edge[e].from].nstrat, nt = (size_t)g->group[g->edge[e].to].nstrat;
        ycol[e] = ncol + 1;
        ncol += (int)(ns * nt);
        nz += (g->edge[e].mem ? 3 : 2) * ns * nt + ns + nt; /* a pair's memory: its row's cells */
    }
    /* The rows of time and bytes, where bounded: every column once. */
    for (int t = AUTO_TERM_TIME; t <= AUTO_TERM_WIRE; t++)
        nz += bound[t] > 0 ? (size_t)ncol : 0;
    nz += (size_t)nrows * (size_t)ncol; /* the rows kept apart: a cell per column at most */
    /* The simplex's time grows faster than the columns (128,307 of a
     * 4-layer MLP step on 2x2x2: 31 s here; 1,649,212 on 2x2x2x2: more
     * than 10 minutes and 700 MB), and no count bounds it: a program past
     * AUTO_ILP_MAX_COLUMNS is refused at once, saying so. */
    if (ncol > AUTO_ILP_MAX_COLUMNS) {
        ts_free(xcol);
        ts_free(ycol);
        return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                        "the sharding program over this mesh has %d columns (its groups' strategies and their "
                        "pairs), more than the %d tessel solves: give --mesh fewer axes (a 2-axis mesh of the "
                        "same devices), or shardings for some of the values",
                        ncol, AUTO_ILP_MAX_COLUMNS);
    }
    Lp lp = {.p = glp_create_prob()};
    lp.ia = ts_calloc(nz + 1, sizeof *lp.ia);
    lp.ja = ts_calloc(nz + 1, sizeof *lp.ja);
    lp.ar = ts_calloc(nz + 1, sizeof *lp.ar);
    IrStatus st = IR_OK;
    if (!lp.ia || !lp.ja || !lp.ar) {
        st = ir_oom(d, NULL);
        goto done;
    }
    glp_set_obj_dir(lp.p, GLP_MIN);
    glp_add_cols(lp.p, ncol);
    for (int32_t k = 0; k < g->ngroup; k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++) {
            glp_set_col_kind(lp.p, xcol[k] + s, GLP_BV);
            glp_set_obj_coef(lp.p, xcol[k] + s, unary_of(g, objective, k, s));
        }
    for (int32_t e = 0; e < g->nedge; e++) {
        int ns = g->group[g->edge[e].from].nstrat, nt = g->group[g->edge[e].to].nstrat;
        for (int s = 0; s < ns; s++)
            for (int t = 0; t < nt; t++) {
                int col = ycol[e] + s * nt + t;
                glp_set_col_bnds(lp.p, col, GLP_DB, 0.0, 1.0);
                glp_set_obj_coef(lp.p, col, edge_of(g, objective, e, (size_t)s * (size_t)nt + (size_t)t));
            }
    }
    /* Rows: one choice per group. */
    for (int32_t k = 0; k < g->ngroup; k++) {
        int row = glp_add_rows(lp.p, 1);
        glp_set_row_bnds(lp.p, row, GLP_FX, 1.0, 1.0);
        for (int32_t s = 0; s < g->group[k].nstrat; s++)
            put(&lp, row, xcol[k] + s, 1.0);
    }
    /* The edges' marginals. */
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        int ns = g->group[ed->from].nstrat, nt = g->group[ed->to].nstrat;
        int rows = glp_add_rows(lp.p, ns + nt);
        for (int s = 0; s < ns; s++) {
            glp_set_row_bnds(lp.p, rows + s, GLP_FX, 0.0, 0.0);
            put(&lp, rows + s, xcol[ed->from] + s, -1.0);
            for (int t = 0; t < nt; t++)
                put(&lp, rows + s, ycol[e] + s * nt + t, 1.0);
        }
        for (int t = 0; t < nt; t++) {
            glp_set_row_bnds(lp.p, rows + ns + t, GLP_FX, 0.0, 0.0);
            put(&lp, rows + ns + t, xcol[ed->to] + t, -1.0);
            for (int s = 0; s < ns; s++)
                put(&lp, rows + ns + t, ycol[e] + s * nt + t, 1.0);
        }
    }
    for (int32_t k = -1; mem_limit > 0 && k < nrows; k++)
        put_mem_row(&lp, g, xcol, ycol, mem_limit, k < 0 ? NULL : &rows[k]);
    for (int term = AUTO_TERM_TIME; term <= AUTO_TERM_WIRE; term++) {
        if (!(bound[term] > 0))
            continue;
        int row = glp_add_rows(lp.p, 1);
        glp_set_row_bnds(lp.p, row, GLP_UP, 0.0, term == AUTO_TERM_TIME ? bound[term] * US : bound[term]);
        for (int32_t k = 0; k < g->ngroup; k++)
            for (int32_t s = 0; s < g->group[k].nstrat; s++)
                put(&lp, row, xcol[k] + s, unary_of(g, (AutoTerm)term, k, s));
        for (int32_t e = 0; e < g->nedge; e++) {
            size_t n = (size_t)g->group[g->edge[e].from].nstrat * (size_t)g->group[g->edge[e].to].nstrat;
            for (size_t j = 0; j < n; j++)
                put(&lp, row, ycol[e] + (int)j, edge_of(g, (AutoTerm)term, e, j));
        }
    }
    glp_load_matrix(lp.p, lp.nz, lp.ia, lp.ja, lp.ar);
    /* The relaxation first (primal simplex): when its x are 0 or 1 it is
     * the integer optimum, and branch and bound is not needed. */
    int term = glp_term_out(GLP_OFF);
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    glp_scale_prob(lp.p, GLP_SF_AUTO);
    glp_adv_basis(lp.p, 0);
    int lrc = glp_simplex(lp.p, &sp);
    bool relaxed = lrc == 0 && glp_get_status(lp.p) == GLP_OPT;
    if (relaxed) /* the relaxation's largest x of each group: a plan where no limit binds */
        argmax(g, xcol, glp_get_col_prim, lp.p, choice);
    if (relaxed && integral(g, &lp, xcol)) {
        glp_term_out(term);
        goto done;
    }
    /* Branch and bound from the relaxation's bound, stopped after
     * node_limit subproblems (on_node): no clock, so the plan is the same
     * on every run. */
    Search search = {0, node_limit, relaxed ? glp_get_obj_val(lp.p) : -DBL_MAX, false};
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.mip_gap = 1e-6;
    parm.cb_func = on_node;
    parm.cb_info = &search;
    int rc = glp_intopt(lp.p, &parm);
    glp_term_out(term);
    int ms = glp_mip_status(lp.p);
    if (info)
        info->nodes = search.nodes;
    if (rc == GLP_ENOPFS || ms == GLP_NOFEAS) {
        if (g->mem_asked > 0 && (double)g->mem_asked != mem_limit)
            st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                          "no sharding over the mesh fits the memory limit of %.0f bytes per device (the devices' "
                          "share of --limit memory=%lld that a first plan over it left)",
                          mem_limit, (long long)g->mem_asked);
        else
            st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                          "no sharding over the mesh fits the memory limit of %.0f bytes per device (--limit memory)",
                          mem_limit);
        goto done;
    }
    if (search.stopped && ms != GLP_OPT && ms != GLP_FEAS && relaxed && mem_limit <= 0 &&
        objective == AUTO_TERM_TIME && !(bound[AUTO_TERM_TIME] > 0) && !(bound[AUTO_TERM_WIRE] > 0)) {
        /* No integer plan in the bound, none needed to fit: the
         * relaxation's, rounded. */
        double obj = auto_graph_cost(g, choice) * US;
        if (info) {
            info->optimal = false;
            info->gap = obj > 0 ? (obj - search.bound) / obj : INFINITY;
            info->bound = search.bound / US;
        }
        goto done;
    }
    if (search.stopped && ms != GLP_OPT && ms != GLP_FEAS) {
        st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                      "the sharding program found no plan%s in %d subproblems of branch and bound (its bound)",
                      mem_limit > 0 ? " that fits the memory limit (--limit memory)" : "", (int)node_limit);
        goto done;
    }
    if ((rc != 0 && rc != GLP_ESTOP) || (ms != GLP_OPT && ms != GLP_FEAS)) {
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0},
                      "internal error: GLPK could not solve the sharding program (glp_intopt %d, status %d)", rc, ms);
        goto done;
    }
    if (search.stopped && info) {
        double obj = glp_mip_obj_val(lp.p);
        info->optimal = false;
        info->gap = obj > 0 && search.bound > -DBL_MAX ? (obj - search.bound) / obj : INFINITY;
        info->gap = info->gap > 0 ? info->gap : 0;
        info->bound = search.bound > -DBL_MAX ? search.bound / US : -INFINITY;
    }
    argmax(g, xcol, glp_mip_col_val, lp.p, choice);
done:
    glp_delete_prob(lp.p);
    ts_free(lp.ia);
    ts_free(lp.ja);
    ts_free(lp.ar);
    ts_free(xcol);
    ts_free(ycol);
    return st;
}
