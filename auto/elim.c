/*
 * elim.c: the exact minimum by variable elimination (a dynamic program
 * over the graph), where the graph's shape allows it.
 *
 * The objective is a sum of factors: a vector per group (unary) and a
 * matrix per edge. Eliminating group v replaces the factors that hold v by
 * one over v's neighbours: for each of their assignments, the least sum
 * over v's strategies (and which strategy gave it). Groups go in the
 * order that makes each new factor smallest (ties: the lowest group), the
 * last one leaves a constant: the minimum; reading the recorded choices
 * backwards gives the assignment. Exact on any graph; its cost grows with
 * the product of the strategy counts of a group's neighbours when it is
 * eliminated, so the order and its work are found first, on the factors'
 * scopes alone, and it gives up (0) when a factor would pass
 * AUTO_ELIM_MAX_CELLS or the work AUTO_ELIM_MAX_WORK, and the integer
 * program (ilp.c) solves instead. A
 * transformer's graph is a chain of layers with a residual and the q/k/v
 * fan-out: factors of two or three groups, a 24-layer model in
 * milliseconds where GLPK's simplex takes seconds. Deterministic.
 *
 * A step's sums are those of one sum per strategy over the factors held,
 * in their order, whatever the order the new cells are visited in: so
 * the odometer turns fastest the coordinate the fewest factors read (a
 * sum over the factors before the first that reads it stays), and each
 * factor is laid out again with v innermost, its coordinates in the
 * odometer's order, read in runs (relayout). The tables and choices are
 * the same, bit for bit, as with the plain loop: the held-out VAE step on
 * 2x2 (tests/jax/test_auto_heldout47.py) plans in 10.5 s of CPU under a
 * limit of 1.1x its Megatron plan's peak (34 solves of 124M sums) where
 * it took 19.2, and in 5.1 s without a limit (8.9).
 */
#include "auto.h"

#include <stdint.h>
#include <string.h>

/* The work of one elimination at most (plan(): Σ over the steps of the
 * new factor's cells x the group's strategies, about 5 ns each here; the
 * tie-break solves 20 to 40 times more). Over it the integer program
 * solves: memory/grad_tied_lm_u's gradient on mesh 2x2 needs 494M, 2.3 s
 * a solve, 58 s of CPU with the tie-break's, where GLPK finds the same
 * plan in 4.7 s. Under it stay the transformer block's SGD step on 2x4
 * (104M, 6.5 s; GLPK's plan, without the tie-break, holds 445,448 bytes
 * at the peak against 429,064) and JAX's 10-layer MLP step on 2x2 (44M,
 * 2.8 s; GLPK 2.3 s, 8% more bytes): docs/auto-shard.md. A count, not a
 * clock: the same graph takes the same way on every run. */
#define AUTO_ELIM_MAX_WORK (INT64_C(1) << 27)

/* 8M cells: a table of 64 MB of doubles and 32 MB of choices at most.
 * The JAX language model's SGD step on mesh 2x4 (its backward inlined)
 * ends with eight groups almost all joined, whose first elimination
 * makes 4.37M cells: at 4M it went to GLPK (about 1.0 s of CPU, 19 MB);
 * here elimination finds the same optimum in about 0.6 s (124 MB). */
#define AUTO_ELIM_MAX_CELLS (1 << 23)

typedef struct Factor {
    int32_t nvar;
    int32_t var[8];          /* groups, increasing */
    double *t;               /* row-major over var[] */
    bool dead;
} Factor;

typedef struct Step {
    int32_t v;               /* the group eliminated */
    int32_t nvar;
    int32_t var[8];          /* its neighbours then */
    int32_t *arg;            /* best strategy of v per assignment of var[] */
} Step;

typedef struct Elim {
    const AutoGraph *g;
    Factor *f;
    int32_t nf, capf;
    Step *step;
    int32_t nstep;
} Elim;

static int64_t cells(const AutoGraph *g, const int32_t *var, int32_t n)
{
    int64_t c = 1;
    for (int32_t k = 0; k < n && c <= AUTO_ELIM_MAX_CELLS; k++)
        c *= g->group[var[k]].nstrat;
    return c;
}

/* Add group w to the sorted set var[0..*n); false when it is full. */
static bool set_add(int32_t *var, int32_t *n, int32_t w)
{
    int32_t k = 0;
    while (k < *n && var[k] < w)
        k++;
    if (k < *n && var[k] == w)
        return true;
    if (*n == 8)
        return false;
    memmove(var + k + 1, var + k, (size_t)(*n - k) * sizeof *var);
    var[k] = w;
    (*n)++;
    return true;
}

/* The neighbours of v among live factors (sorted); false: more than 8. */
static bool scope(const Elim *e, int32_t v, int32_t *var, int32_t *n)
{
    *n = 0;
    for (int32_t i = 0; i < e->nf; i++) {
        const Factor *f = &e->f[i];
        bool has = false;
        for (int32_t k = 0; k < f->nvar; k++)
            has |= f->var[k] == v;
        for (int32_t k = 0; has && k < f->nvar; k++)
            if (f->var[k] != v && !set_add(var, n, f->var[k]))
                return false;
    }
    return true;
}

static bool add_factor(Elim *e, int32_t nvar, const int32_t *var, double *t)
{
    if (e->nf == e->capf) {
        int32_t nc = e->capf ? e->capf * 2 : 256;
        Factor *nf = ts_calloc((size_t)nc, sizeof *nf);
        if (!nf)
            return false;
        if (e->nf)
            memcpy(nf, e->f, (size_t)e->nf * sizeof *nf);
        ts_free(e->f);
        e->f = nf;
        e->capf = nc;
    }
    Factor *f = &e->f[e->nf++];
    memset(f, 0, sizeof *f);
    f->nvar = nvar;
    memcpy(f->var, var, (size_t)nvar * sizeof *var);
    f->t = t;
    return true;
}

/* Factor f (holding v) laid out again for the odometer of an elimination
 * of v over var[0..n): its coordinates of the new scope in the order ord
 * (outermost first), v innermost. stride[] (per position of var[]: f's
 * stride for it, 0 where f does not read it) and *vs (v's) in and out:
 * out, the new layout's, *vs 1. The odometer then reads each factor in
 * runs of nv in order, where v's stride of its neighbours' sizes (114,244
 * cells in the VAE step's largest table) missed the cache at each term.
 * The values are the same, only where they are (f dies with this
 * elimination: its var[] no longer says its layout). false: out of
 * memory. */
static bool relayout(const AutoGraph *g, Factor *f, int32_t v, const int32_t *var, int32_t n, const int32_t *ord,
                     int64_t *stride, int64_t *vs)
{
    int64_t nst[8], run = g->group[v].nstrat;
    bool same = *vs == 1;
    for (int32_t l = n - 1; l >= 0; l--) {
        int32_t j = ord[l];
        nst[j] = 0;
        if (stride[j] != 0) {
            nst[j] = run;
            run *= g->group[var[j]].nstrat;
        }
        same &= nst[j] == stride[j];
    }
    if (same)
        return true;
    double *t = ts_malloc((size_t)run * sizeof *t);
    if (!t)
        return false;
    /* Old coordinates (f's vars, row-major) to new offsets. */
    int64_t to[8];
    int32_t dim[8];
    for (int32_t k = 0; k < f->nvar; k++) {
        dim[k] = g->group[f->var[k]].nstrat;
        to[k] = 1;
        for (int32_t j = 0; j < n && f->var[k] != v; j++)
            if (var[j] == f->var[k])
                to[k] = nst[j];
    }
    /* The old table in order, a run of its innermost coordinate at a
     * time. */
    int32_t coord[8] = {0}, last = f->nvar - 1, inner = dim[last];
    int64_t at = 0, step = to[last];
    for (int64_t c = 0; c < run; c += inner) {
        const double *from = f->t + c;
        for (int32_t i = 0; i < inner; i++)
            t[at + i * step] = from[i];
        for (int32_t k = last - 1; k >= 0; k--) {
            if (++coord[k] < dim[k]) {
                at += to[k];
                break;
            }
            at -= (int64_t)(coord[k] - 1) * to[k];
            coord[k] = 0;
        }
    }
    ts_free(f->t);
    f->t = t;
    memcpy(stride, nst, (size_t)n * sizeof *stride);
    *vs = 1;
    return true;
}

/* The first strategy of least sum (a scan keeping the first strictly
 * less finds the same one, NaNs never taken): the least found in four
 * running minima rather than one chain of comparisons, then its first
 * place. */
static int32_t first_least(const double *sum, int32_t nv)
{
    double m0 = sum[0], m1 = m0, m2 = m0, m3 = m0;
    int32_t x = 1;
    for (; x + 3 < nv; x += 4) {
        m0 = sum[x] < m0 ? sum[x] : m0;
        m1 = sum[x + 1] < m1 ? sum[x + 1] : m1;
        m2 = sum[x + 2] < m2 ? sum[x + 2] : m2;
        m3 = sum[x + 3] < m3 ? sum[x + 3] : m3;
    }
    for (; x < nv; x++)
        m0 = sum[x] < m0 ? sum[x] : m0;
    m0 = m1 < m0 ? m1 : m0;
    m0 = m2 < m0 ? m2 : m0;
    m0 = m3 < m0 ? m3 : m0;
    if (m0 != m0)
        return 0; /* sum[0] is NaN: nothing is less */
    for (x = 0; x < nv; x++)
        if (sum[x] == m0)
            return x;
    return 0;
}

/* Eliminate v: the new factor over var[0..n) and the step. */
static bool eliminate(Elim *e, int32_t v, const int32_t *var, int32_t n)
{
    const AutoGraph *g = e->g;
    int64_t size = cells(g, var, n);
    int32_t nv = g->group[v].nstrat;
    double *t = ts_calloc((size_t)size, sizeof *t);
    int32_t *arg = ts_calloc((size_t)size, sizeof *arg);
    if (!t || !arg) {
        ts_free(t);
        ts_free(arg);
        return false;
    }
    /* The factors holding v, with the stride of each of their vars in the
     * new scope (-1 for v itself: its own stride). */
    int32_t nh = 0, cap = 16;
    int32_t *held = ts_calloc((size_t)cap, sizeof *held);
    int64_t (*stride)[8] = ts_calloc((size_t)cap, sizeof *stride);
    int64_t *vstride = ts_calloc((size_t)cap, sizeof *vstride);
    bool ok = held && stride && vstride;
    for (int32_t i = 0; ok && i < e->nf; i++) {
        Factor *f = &e->f[i];
        if (f->dead)
            continue;
        bool has = false;
        for (int32_t k = 0; k < f->nvar; k++)
            has |= f->var[k] == v;
        if (!has)
            continue;
        if (nh == cap) {
            cap *= 2;
            int32_t *nheld = ts_calloc((size_t)cap, sizeof *nheld);
            int64_t(*ns)[8] = ts_calloc((size_t)cap, sizeof *ns);
            int64_t *nvs = ts_calloc((size_t)cap, sizeof *nvs);
            ok = nheld && ns && nvs;
            if (ok) {
                memcpy(nheld, held, (size_t)nh * sizeof *held);
                memcpy(ns, stride, (size_t)nh * sizeof *stride);
                memcpy(nvs, vstride, (size_t)nh * sizeof *vstride);
            }
            ts_free(held);
            ts_free(stride);
            ts_free(vstride);
            held = nheld;
            stride = ns;
            vstride = nvs;
            if (!ok)
                break;
        }
        /* Strides of f's table, row-major. */
        int64_t st[8], s = 1;
        for (int32_t k = f->nvar - 1; k >= 0; k--) {
            st[k] = s;
            s *= g->group[f->var[k]].nstrat;
        }
        memset(stride[nh], 0, sizeof stride[nh]);
        vstride[nh] = 0;
        for (int32_t k = 0; k < f->nvar; k++) {
            if (f->var[k] == v) {
                vstride[nh] = st[k];
                continue;
            }
            for (int32_t j = 0; j < n; j++)
                if (var[j] == f->var[k])
                    stride[nh][j] = st[k];
        }
        held[nh++] = i;
    }
    /* Per held factor, the index of the current assignment with v at 0
     * (base), moved with the odometer; v's sums per strategy, added
     * factor by factor in the order held: row h + 1 of `part` is row h
     * plus factor h, row 0 zeros (the same additions, in the same order,
     * as one sum per strategy). A row stays while the coordinates its
     * factors read stay: at each turn only the rows from the first factor
     * that reads a coordinate turned are added again (the file's
     * comment). */
    int64_t *base = ok ? ts_calloc((size_t)nh + 1, sizeof *base) : NULL;
    double *part = ok ? ts_calloc(((size_t)nh + 1) * (size_t)nv, sizeof *part) : NULL;
    ok = ok && base && part;
    /* first[j]: the first held factor that reads coordinate j (nh: none);
     * ord: the coordinates outermost first, by first (ascending; ties in
     * var order); from[l]: the first factor whose row changes when the
     * coordinate at level l turns; tstride: the new table's strides. */
    int32_t first[8], ord[8], from[9], dim[8];
    int64_t tstride[8], cells_in = 1;
    if (ok) {
        for (int32_t j = n - 1; j >= 0; j--) {
            dim[j] = g->group[var[j]].nstrat;
            tstride[j] = cells_in;
            cells_in *= dim[j];
            first[j] = nh;
            for (int32_t h = nh - 1; h >= 0; h--)
                if (stride[h][j] != 0)
                    first[j] = h;
        }
        for (int32_t j = 0; j < n; j++) {
            int32_t k = j;
            while (k > 0 && first[ord[k - 1]] > first[j]) {
                ord[k] = ord[k - 1];
                k--;
            }
            ord[k] = j;
        }
        from[n] = nh;
        for (int32_t l = n - 1; l >= 0; l--)
            from[l] = first[ord[l]] < from[l + 1] ? first[ord[l]] : from[l + 1];
        for (int32_t h = 0; ok && h < nh; h++)
            ok = relayout(g, &e->f[held[h]], v, var, n, ord, stride[h], &vstride[h]);
    }
    if (ok) {
        int32_t coord[8] = {0};
        int64_t at = 0;
        int32_t again = 0;
        for (int64_t c = 0; c < size; c++) {
            for (int32_t h = again; h < nh; h++) {
                const double *ft = e->f[held[h]].t + base[h];
                const double *prev = part + (size_t)h * (size_t)nv;
                double *row = part + ((size_t)h + 1) * (size_t)nv;
                for (int32_t x = 0; x < nv; x++)
                    row[x] = prev[x] + ft[x];
            }
            const double *sum = part + (size_t)nh * (size_t)nv;
            int32_t bi = first_least(sum, nv);
            t[at] = sum[bi];
            arg[at] = bi;
            again = nh;
            for (int32_t l = n - 1; l >= 0; l--) {
                int32_t j = ord[l];
                if (++coord[j] < dim[j]) {
                    for (int32_t h = 0; h < nh; h++)
                        base[h] += stride[h][j];
                    at += tstride[j];
                    again = from[l];
                    break;
                }
                for (int32_t h = 0; h < nh; h++)
                    base[h] -= (int64_t)(coord[j] - 1) * stride[h][j];
                at -= (int64_t)(coord[j] - 1) * tstride[j];
                coord[j] = 0;
            }
        }
        for (int32_t h = 0; h < nh; h++) {
            e->f[held[h]].dead = true;
            ts_free(e->f[held[h]].t);
            e->f[held[h]].t = NULL;
        }
        Step *sp = &e->step[e->nstep++];
        sp->v = v;
        sp->nvar = n;
        memcpy(sp->var, var, (size_t)n * sizeof *var);
        sp->arg = arg;
        arg = NULL;
        ok = add_factor(e, n, var, t);
        t = ok ? NULL : t;
    }
    ts_free(t);
    ts_free(arg);
    ts_free(held);
    ts_free(stride);
    ts_free(vstride);
    ts_free(base);
    ts_free(part);
    return ok;
}

/* Remove dead factors (keeps the scans short). */
static void compact(Elim *e)
{
    int32_t k = 0;
    for (int32_t i = 0; i < e->nf; i++)
        if (!e->f[i].dead)
            e->f[k++] = e->f[i];
    e->nf = k;
}

/* The factors of the graph: unary vectors, edge matrices (copied). */
static bool load(Elim *e)
{
    const AutoGraph *g = e->g;
    for (int32_t k = 0; k < g->ngroup; k++) {
        double *t = ts_calloc((size_t)g->group[k].nstrat, sizeof *t);
        if (!t)
            return false;
        memcpy(t, g->group[k].unary, (size_t)g->group[k].nstrat * sizeof *t);
        if (!add_factor(e, 1, &k, t)) {
            ts_free(t);
            return false;
        }
    }
    for (int32_t i = 0; i < g->nedge; i++) {
        const AutoEdge *ed = &g->edge[i];
        size_t ns = (size_t)g->group[ed->from].nstrat, nt = (size_t)g->group[ed->to].nstrat;
        double *t = ts_calloc(ns * nt, sizeof *t);
        if (!t)
            return false;
        int32_t var[2];
        bool fwd = ed->from < ed->to;
        var[0] = fwd ? ed->from : ed->to;
        var[1] = fwd ? ed->to : ed->from;
        for (size_t s = 0; s < ns; s++)
            for (size_t u = 0; u < nt; u++)
                t[fwd ? s * nt + u : u * ns + s] = ed->cost[s * nt + u];
        if (!add_factor(e, 2, var, t)) {
            ts_free(t);
            return false;
        }
    }
    return true;
}

/* The order elimination takes (each time the group whose new factor is
 * smallest, ties: the lowest) and its work (the sum over the steps of the
 * new factor's cells x the eliminated group's strategies: the sums and
 * comparisons of the step), found on the factors' scopes alone, no
 * tables: the order depends on the graph's shape, not on its costs. 1
 * done, 0 a factor passes AUTO_ELIM_MAX_CELLS or the work
 * AUTO_ELIM_MAX_WORK, -1 out of memory. */
static int plan(const AutoGraph *g, int32_t *order, int64_t *work)
{
    Elim e = {.g = g};
    int rc = -1;
    bool *done = ts_calloc((size_t)g->ngroup + 1, sizeof *done);
    int64_t *size = ts_calloc((size_t)g->ngroup + 1, sizeof *size);
    *work = 0;
    if (!done || !size)
        goto out;
    for (int32_t k = 0; k < g->ngroup; k++)
        if (!add_factor(&e, 1, &k, NULL))
            goto out;
    for (int32_t i = 0; i < g->nedge; i++) {
        const AutoEdge *ed = &g->edge[i];
        int32_t var[2] = {ed->from < ed->to ? ed->from : ed->to, ed->from < ed->to ? ed->to : ed->from};
        if (!add_factor(&e, 2, var, NULL))
            goto out;
    }
    for (int32_t v = 0; v < g->ngroup; v++) {
        int32_t var[8], n;
        size[v] = scope(&e, v, var, &n) ? cells(g, var, n) : INT64_MAX;
    }
    rc = 0;
    for (int32_t it = 0; it < g->ngroup; it++) {
        int32_t best = -1;
        for (int32_t v = 0; v < g->ngroup; v++)
            if (!done[v] && (best < 0 || size[v] < size[best]))
                best = v;
        int32_t bvar[8], bn;
        if (best < 0 || !scope(&e, best, bvar, &bn))
            goto out;
        int64_t c = cells(g, bvar, bn);
        if (c > AUTO_ELIM_MAX_CELLS)
            goto out; /* too wide: the integer program decides */
        *work += c * g->group[best].nstrat;
        if (*work > AUTO_ELIM_MAX_WORK)
            goto out; /* too much work: the integer program decides */
        for (int32_t i = 0; i < e.nf; i++)
            for (int32_t k = 0; k < e.f[i].nvar; k++)
                e.f[i].dead |= e.f[i].var[k] == best;
        if (!add_factor(&e, bn, bvar, NULL)) {
            rc = -1;
            goto out;
        }
        order[it] = best;
        done[best] = true;
        compact(&e);
        for (int32_t j = 0; j < bn; j++) {
            int32_t var[8], n;
            size[bvar[j]] = scope(&e, bvar[j], var, &n) ? cells(g, var, n) : INT64_MAX;
        }
    }
    rc = 1;
out:
    ts_free(e.f);
    ts_free(done);
    ts_free(size);
    return rc;
}

int auto_elim_solve(AutoGraph *g, int32_t *choice)
{
    Elim e = {.g = g};
    int64_t work = 0;
    int32_t *order = ts_calloc((size_t)g->ngroup + 1, sizeof *order);
    int rc = order ? plan(g, order, &work) : -1;
    /* The graph's budget: a count, not a clock (the same plan every run). */
    if (rc > 0 && g->elim_budget > 0 && work > g->elim_budget - g->elim_spent) {
        g->elim_out = true;
        rc = 0;
    }
    if (rc <= 0) {
        ts_free(order);
        return rc;
    }
    g->elim_spent += work;
    rc = -1;
    e.step = ts_calloc((size_t)g->ngroup + 1, sizeof *e.step);
    if (!e.step || !load(&e))
        goto out;
    /* The planned order, on the tables (each scope as planned). */
    for (int32_t it = 0; it < g->ngroup; it++) {
        int32_t var[8], n;
        if (!scope(&e, order[it], var, &n) || !eliminate(&e, order[it], var, n))
            goto out;
        compact(&e);
    }
    /* Backwards: each group's best strategy given its later neighbours. */
    for (int32_t k = e.nstep - 1; k >= 0; k--) {
        const Step *sp = &e.step[k];
        int64_t idx = 0;
        for (int32_t j = 0; j < sp->nvar; j++)
            idx = idx * g->group[sp->var[j]].nstrat + choice[sp->var[j]];
        choice[sp->v] = sp->arg[idx];
    }
    rc = 1;
out:
    for (int32_t i = 0; i < e.nf; i++)
        ts_free(e.f[i].t);
    for (int32_t k = 0; k < e.nstep; k++)
        ts_free(e.step[k].arg);
    ts_free(e.f);
    ts_free(e.step);
    ts_free(order);
    return rc;
}
