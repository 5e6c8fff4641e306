/*
 * explain.c: why each sharding was chosen. For every group (a leader and
 * the elementwise instructions that follow it) the chosen strategy and the
 * alternatives, each priced as the solver priced it with every other group
 * at its choice: the group's own cost (compute, its collectives, reshards
 * inside it) plus the reshards on the edges to its neighbours. The chosen
 * one is the cheapest alone or, where it is not, the one that lets the
 * neighbours be cheaper (the plan's total is the minimum, not each line).
 *
 *   h = dot f32[16,40] (+2 following): [-,y]+x  own 0.012 ms, reshard 0 ms
 *       alternatives: [x,y] 0.019 ms (+0.007); [-,-]+x+y 0.041 ms (+0.029)
 *
 * auto_explain_json gives the same as one JSON object, every alternative
 * of every group (docs/auto-shard.md has the format).
 *
 * Before the groups, the estimate by term: compute (dots and
 * convolutions, reduces, everything else), the collectives of the chosen
 * strategies (all-reduces of partial sums, gathers of a contraction), and
 * the reshards between and inside groups. After them, each instruction
 * that computes and was given no strategy, held whole (left to
 * propagation, its operands priced as arriving replicated), with why:
 *
 *   held whole: r3 = ragged-dot (line 23): its ragged dim is contracted ...
 */
#include "auto.h"

#include <math.h>
#include <stdlib.h>

typedef struct Alt {
    int32_t s;
    double own, edges;
} Alt;

static int by_cost(const void *a, const void *b)
{
    const Alt *x = a, *y = b;
    double cx = x->own + x->edges, cy = y->own + y->edges;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return x->s - y->s; /* deterministic */
}

/* Edge seconds of group k at strategy s, the others at their choice. */
static double edges_at(const AutoGraph *g, const int32_t *choice, int32_t k, int32_t s)
{
    double t = 0;
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        size_t nt = (size_t)g->group[ed->to].nstrat;
        if (ed->from == k)
            t += ed->cost[(size_t)s * nt + (size_t)choice[ed->to]];
        else if (ed->to == k)
            t += ed->cost[(size_t)choice[ed->from] * nt + (size_t)s];
    }
    return t;
}

#define ALTERNATIVES 4

/* What view instruction i is, as the reader knows it: a loop's state
 * element (auto/loop.c), a get-tuple-element made its identity, or its
 * op. */
static const char *op_text(const AutoGraph *g, int32_t i)
{
    const IrInstr *x = &g->comp->instr[i];
    if (g->view.where_comp[i] < 0)
        return auto_cond_state_text(g, i) ? auto_cond_state_text(g, i) : "while state";
    if (x->op == OP_COPY && x->nopnd == 1 && g->view.where_comp[x->opnd[0]] < 0)
        return "get-tuple-element";
    return ir_op_name(x->op);
}

/* One line per loop in the graph: its trips and state. */
static void loops_text(IrStrBuf *o, const AutoGraph *g)
{
    for (int32_t l = 0; l < g->view.nloop; l++) {
        const AutoLoop *L = &g->view.loop[l];
        ir_sb_printf(o, "  loop %s: %d state elements; %sits body priced at %.0f iteration%s\n",
                     g->comp->instr[L->instr].name, (int)L->nstate, L->trips_known ? "" : "trip count unknown: ",
                     L->trips, L->trips == 1 ? "" : "s");
    }
}

static void one_group(IrStrBuf *o, const AutoGraph *g, const int32_t *choice, int32_t k, Alt *alt)
{
    const AutoGroup *gr = &g->group[k];
    const IrInstr *x = &g->comp->instr[gr->leader];
    const AutoNode *v = &g->node[gr->leader];
    int32_t followers = 0;
    for (int32_t i = 0; i < g->comp->ninstr; i++)
        followers += g->node[i].group == k && i != gr->leader;
    for (int32_t s = 0; s < gr->nstrat; s++)
        alt[s] = (Alt){s, gr->unary[s], edges_at(g, choice, k, s)};
    qsort(alt, (size_t)gr->nstrat, sizeof *alt, by_cost);
    char spec[160];
    auto_spec_text(&g->mesh, &v->strat[choice[k]].out, auto_result_dims(x)->rank, spec, sizeof spec);
    ir_sb_printf(o, "  %s = %s%s", x->name, op_text(g, gr->leader), v->fixed ? " (user's sharding)" : "");
    if (followers)
        ir_sb_printf(o, " (+%d following)", (int)followers);
    double own = gr->unary[choice[k]], ed = edges_at(g, choice, k, choice[k]);
    ir_sb_printf(o, ": %s  own %.4g ms, reshard %.4g ms\n", spec, own * 1e3, ed * 1e3);
    int32_t shown = 0;
    for (int32_t j = 0; j < gr->nstrat && shown < ALTERNATIVES; j++) {
        if (alt[j].s == choice[k])
            continue;
        /* Skip an alternative whose output spec repeats a shown one. */
        bool dup = auto_spec_equal(&v->strat[alt[j].s].out, &v->strat[choice[k]].out);
        for (int32_t p = 0; p < j && !dup; p++)
            dup = alt[p].s != choice[k] && auto_spec_equal(&v->strat[alt[p].s].out, &v->strat[alt[j].s].out);
        if (dup)
            continue;
        auto_spec_text(&g->mesh, &v->strat[alt[j].s].out, auto_result_dims(x)->rank, spec, sizeof spec);
        double t = alt[j].own + alt[j].edges;
        ir_sb_printf(o, "%s%s %.4g ms (%+.4g)", shown ? "; " : "      alternatives: ", spec, t * 1e3,
                     (t - own - ed) * 1e3);
        shown++;
    }
    if (shown)
        ir_sb_puts(o, "\n");
}

/* Is view instruction i plumbing rather than work (a tuple, a
 * get-tuple-element, a tuple parameter, a token)? Not listed as held. */
static bool plumbing(const AutoGraph *g, int32_t i)
{
    const IrInstr *x = &g->comp->instr[i];
    IrOpFamily f = ir_op_family(x->op);
    for (int32_t l = 0; l < g->view.nloop; l++)
        if (g->view.loop[l].instr == i)
            return true; /* a loop in the graph: its state elements are */
    if (auto_cond_of(g, i))
        return true; /* a conditional in the graph: its result's elements are */
    return g->view.where_comp[i] < 0 || f == FAM_TUPLE || x->op == OP_AFTER_ALL ||
           x->shape.type == IR_TOKEN || ((f == FAM_PARAMETER || f == FAM_CONSTANT) && x->shape.type == IR_TUPLE);
}

/* Why view instruction i, which has no strategy, is held whole. */
static const char *held_why(const AutoGraph *g, int32_t i)
{
    const IrInstr *x = &g->comp->instr[i];
    if (x->op == OP_WHILE)
        return "a while the graph does not take in (its state not a flat tuple of arrays, a user's sharding "
               "on it, side effects in its body, its body called elsewhere, or nested over 8 deep: auto/loop.c)";
    switch (ir_op_family(x->op)) {
    case FAM_CONTROL:
        return x->op == OP_CONDITIONAL
                   ? "a conditional the graph does not take in (a branch shared or called elsewhere, the user's "
                     "sharding on it, its branch's parameter or root, a branch's parameter not a tuple of arrays "
                     "read by get-tuple-element, its result not a tuple of arrays, or side effects in a branch: "
                     "auto/cond.c); propagation shards it"
                   : "control flow not in the graph";
    case FAM_RAGGED_DOT:
        return "a ragged-dot whose ragged dim is contracted (the groups cut the sum): partition/spmd_ragged.c "
               "runs it whole";
    case FAM_ASYNC:
        return "an async pair not inlined (the user's sharding on it, side effects in its wrapper, or a start "
               "read by more than its done): propagation shards the wrapped op";
    case FAM_CUSTOM_CALL:
        return "a custom-call the partitioner runs whole on gathered operands (partition/spmd_control.c)";
    case FAM_COLLECTIVE:
        return "a collective of the module's own: its groups are written for the devices as they are";
    case FAM_FUSION:
        return "a fusion not inlined (the user's sharding on it, or side effects in its computation)";
    case FAM_SCAN:
        return "a scan op partition/expand_scan.c leaves as it is (an input that is a tuple, or no single "
               "scanned dim): propagation shards it";
    case FAM_FALLBACK:
        return "an op the partitioner has no rule for: it runs whole on gathered operands";
    default:
        break;
    }
    if (x->shape.type == IR_TUPLE || ir_shape_is_dynamic(&x->shape))
        return "a result the strategies do not describe (a tuple of other dims, or dynamic dims)";
    return "no strategy for this op or its operands' shapes (auto/strategy*.c)";
}

/* One line per instruction held whole (see the file comment). */
static void held_text(IrStrBuf *o, const AutoGraph *g)
{
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        const IrInstr *x = &g->comp->instr[i];
        if (g->node[i].group >= 0 || plumbing(g, i) || (x->sharding && !x->sharding->unknown))
            continue;
        const char *target = x->op == OP_CUSTOM_CALL ? ir_attrs_x(&x->a)->custom_call_target : NULL;
        ir_sb_printf(o, "  held whole: %s = %s%s%s%s (line %d): %s\n", x->name, ir_op_name(x->op),
                     target ? " \"" : "", target ? target : "", target ? "\"" : "", (int)x->pos.line, held_why(g, i));
    }
}

typedef struct Terms {
    double dots, reduces, other, comm, reshard, total;
} Terms;

/* The estimate of choice[] by term (see the file comment). */
static Terms terms(const AutoGraph *g, const int32_t *choice)
{
    double dots = 0, reduces = 0, other = 0, comm = 0;
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        const AutoNode *v = &g->node[i];
        if (v->group < 0)
            continue;
        const AutoStrategy *s = &v->strat[choice[v->group]];
        IrOpFamily f = ir_op_family(g->comp->instr[i].op);
        if (f == FAM_DOT || f == FAM_CONVOLUTION)
            dots += s->compute;
        else if (f == FAM_REDUCE)
            reduces += s->compute;
        else
            other += s->compute;
        comm += s->comm;
    }
    double total = auto_graph_cost(g, choice), reshard = total - dots - reduces - other - comm;
    reshard = reshard > 1e-9 * total ? reshard : 0; /* rounding, not a reshard */
    return (Terms){dots, reduces, other, comm, reshard, total};
}

static void by_term(IrStrBuf *o, const AutoGraph *g, const int32_t *choice)
{
    Terms t = terms(g, choice);
    ir_sb_printf(o,
                 "  by term: compute %.4g ms (dots %.4g, reduces %.4g, elementwise and data %.4g), "
                 "collectives of the strategies %.4g ms, reshards %.4g ms\n",
                 (t.dots + t.reduces + t.other) * 1e3, t.dots * 1e3, t.reduces * 1e3, t.other * 1e3,
                 t.comm * 1e3, t.reshard * 1e3);
}

/* The solver's line under the first where its plan is not proven optimal
 * (how: shard.c's; NULL or optimal: none): the integer program stopped at
 * its bound of subproblems, or the Lagrangian's plan above its bound. */
static void solver_text(IrStrBuf *o, const AutoIlpInfo *how)
{
    if (!how || how->optimal)
        return;
    if (how->by == AUTO_BY_ILP)
        ir_sb_printf(o,
                     "  solver: the integer program (GLPK) stopped after %d subproblems of branch and bound (its "
                     "bound, a count): the best plan found",
                     (int)how->nodes);
    else
        ir_sb_puts(o, "  solver: the Lagrangian on memory over elimination (auto/lagrange.c): its plan fits the "
                      "limit");
    if (isfinite(how->gap))
        ir_sb_printf(o, ", its estimate at most %.3g%% above the optimum's", how->gap * 100);
    ir_sb_puts(o, " (the same plan on every run)\n");
}

char *auto_explain_text(const AutoGraph *g, const int32_t *choice, const char *module, const AutoIlpInfo *how)
{
    IrStrBuf o = {0};
    char mesh[160];
    auto_mesh_text(&g->mesh, mesh, sizeof mesh);
    int32_t nodes = 0, opaque = 0, maxs = 1;
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        nodes += g->node[i].group >= 0;
        opaque += g->node[i].group < 0;
    }
    int64_t kept = 0, pruned = 0;
    for (int32_t k = 0; k < g->ngroup; k++) {
        maxs = g->group[k].nstrat > maxs ? g->group[k].nstrat : maxs;
        kept += g->group[k].nstrat;
        pruned += g->group[k].npruned;
    }
    ir_sb_printf(&o,
                 "auto-shard of %s over mesh %s: %d instructions in %d groups (%d left to propagation), %d "
                 "edges, %lld strategies (%lld more dominated, not shown); estimated step %.4g ms\n",
                 module ? module : "?", mesh, (int)nodes, (int)g->ngroup, (int)opaque, (int)g->nedge,
                 (long long)kept, (long long)pruned, auto_graph_cost(g, choice) * 1e3);
    solver_text(&o, how);
    by_term(&o, g, choice);
    loops_text(&o, g);
    Alt *alt = ts_calloc((size_t)maxs, sizeof *alt);
    if (!alt) {
        ir_sb_free(&o);
        return NULL;
    }
    for (int32_t k = 0; k < g->ngroup; k++)
        one_group(&o, g, choice, k, alt);
    ts_free(alt);
    held_text(&o, g);
    return ir_sb_take(&o);
}

/* ---- JSON ---- */

/* A JSON string of s (quotes, backslashes and control characters escaped). */
static void json_str(IrStrBuf *o, const char *s)
{
    ir_sb_puts(o, "\"");
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            ir_sb_printf(o, "\\%c", ch);
        else if (ch < 0x20)
            ir_sb_printf(o, "\\u%04x", ch);
        else
            ir_sb_printf(o, "%c", ch);
    }
    ir_sb_puts(o, "\"");
}

/* {"spec": "[-,x]", "sharding": "{devices=...}", ...} of strategy s of
 * the group's leader. */
static bool json_spec(IrStrBuf *o, const AutoGraph *g, const AutoNode *v, int32_t rank, int32_t s)
{
    char spec[160];
    auto_spec_text(&g->mesh, &v->strat[s].out, rank, spec, sizeof spec);
    IrSharding *sh = auto_spec_sharding(g->arena, &g->mesh, &v->strat[s].out, rank);
    char *text = sh ? ir_sharding_str(sh) : NULL;
    if (!text)
        return false;
    ir_sb_puts(o, "\"spec\": ");
    json_str(o, spec);
    ir_sb_puts(o, ", \"sharding\": ");
    json_str(o, text);
    ts_free(text);
    return true;
}

static bool json_group(IrStrBuf *o, const AutoGraph *g, const int32_t *choice, int32_t k, Alt *alt)
{
    const AutoGroup *gr = &g->group[k];
    const IrInstr *x = &g->comp->instr[gr->leader];
    const AutoNode *v = &g->node[gr->leader];
    ir_sb_puts(o, "    {\"leader\": ");
    json_str(o, x->name);
    ir_sb_puts(o, ", \"op\": ");
    json_str(o, op_text(g, gr->leader));
    ir_sb_printf(o, ", \"line\": %d, \"column\": %d, \"user\": %s, \"following\": [", (int)x->pos.line,
                 (int)x->pos.col, v->fixed ? "true" : "false");
    int32_t nf = 0;
    for (int32_t i = 0; i < g->comp->ninstr; i++)
        if (g->node[i].group == k && i != gr->leader) {
            ir_sb_puts(o, nf++ ? ", " : "");
            json_str(o, g->comp->instr[i].name);
        }
    double own = gr->unary[choice[k]], ed = edges_at(g, choice, k, choice[k]);
    ir_sb_puts(o, "],\n     \"chosen\": {");
    if (!json_spec(o, g, v, auto_result_dims(x)->rank, choice[k]))
        return false;
    ir_sb_printf(o, ", \"own_seconds\": %.6g, \"reshard_seconds\": %.6g, \"seconds\": %.6g},\n", own, ed,
                 own + ed);
    ir_sb_puts(o, "     \"alternatives\": [");
    for (int32_t s = 0; s < gr->nstrat; s++)
        alt[s] = (Alt){s, gr->unary[s], edges_at(g, choice, k, s)};
    qsort(alt, (size_t)gr->nstrat, sizeof *alt, by_cost);
    int32_t shown = 0;
    for (int32_t j = 0; j < gr->nstrat; j++) {
        if (alt[j].s == choice[k])
            continue;
        double t = alt[j].own + alt[j].edges;
        ir_sb_puts(o, shown++ ? ",\n       {" : "\n       {");
        if (!json_spec(o, g, v, auto_result_dims(x)->rank, alt[j].s))
            return false;
        ir_sb_printf(o, ", \"own_seconds\": %.6g, \"reshard_seconds\": %.6g, \"seconds\": %.6g, "
                        "\"more_seconds\": %.6g}",
                     alt[j].own, alt[j].edges, t, t - own - ed);
    }
    ir_sb_puts(o, "]}");
    return true;
}

/* "solver": who made the plan and how far from the optimum it may be. */
static void solver_json(IrStrBuf *o, const AutoIlpInfo *how)
{
    static const char *const by[] = {"elimination", "lagrangian", "integer program"};
    AutoIlpInfo exact = {.optimal = true};
    how = how ? how : &exact;
    ir_sb_printf(o, ",\n \"solver\": {\"by\": \"%s\", \"optimal\": %s, \"gap\": ", by[how->by],
                 how->optimal ? "true" : "false");
    if (how->optimal)
        ir_sb_puts(o, "0");
    else if (isfinite(how->gap))
        ir_sb_printf(o, "%.6g", how->gap);
    else
        ir_sb_puts(o, "null");
    ir_sb_printf(o, ", \"subproblems\": %d, \"subproblem_bound\": %d}", (int)how->nodes, (int)how->node_limit);
}

char *auto_explain_json(const AutoGraph *g, const int32_t *choice, const char *module, const AutoIlpInfo *how)
{
    IrStrBuf o = {0};
    ir_sb_puts(&o, "{\"tessel_auto_shard\": 1, \"module\": ");
    json_str(&o, module ? module : "");
    ir_sb_puts(&o, ",\n \"mesh\": [");
    for (int32_t a = 0; a < g->mesh.naxes; a++) {
        ir_sb_puts(&o, a ? ", {\"name\": " : "{\"name\": ");
        json_str(&o, g->mesh.name[a]);
        ir_sb_printf(&o, ", \"size\": %lld}", (long long)g->mesh.size[a]);
    }
    Terms t = terms(g, choice);
    ir_sb_printf(&o, "],\n \"estimated_seconds\": %.6g", t.total);
    solver_json(&o, how);
    ir_sb_printf(&o,
                 ",\n \"by_term\": {\"dots\": %.6g, \"reduces\": %.6g, "
                 "\"elementwise_and_data\": %.6g, \"collectives\": %.6g, \"reshards\": %.6g},\n \"loops\": [",
                 t.dots, t.reduces, t.other, t.comm, t.reshard);
    for (int32_t l = 0; l < g->view.nloop; l++) {
        const AutoLoop *L = &g->view.loop[l];
        ir_sb_puts(&o, l ? ", {\"while\": " : "{\"while\": ");
        json_str(&o, g->comp->instr[L->instr].name);
        ir_sb_printf(&o, ", \"state\": %d, \"iterations\": %.0f, \"known\": %s}", (int)L->nstate, L->trips,
                     L->trips_known ? "true" : "false");
    }
    ir_sb_puts(&o, "],\n \"groups\": [\n");
    int32_t maxs = 1;
    for (int32_t k = 0; k < g->ngroup; k++)
        maxs = g->group[k].nstrat > maxs ? g->group[k].nstrat : maxs;
    Alt *alt = ts_calloc((size_t)maxs, sizeof *alt);
    bool ok = alt != NULL;
    for (int32_t k = 0; ok && k < g->ngroup; k++) {
        ok = json_group(&o, g, choice, k, alt);
        ir_sb_puts(&o, k + 1 < g->ngroup ? ",\n" : "\n");
    }
    ts_free(alt);
    ir_sb_puts(&o, " ],\n \"held_whole\": [");
    int32_t nh = 0;
    for (int32_t i = 0; i < g->comp->ninstr; i++) {
        const IrInstr *x = &g->comp->instr[i];
        if (g->node[i].group >= 0 || plumbing(g, i) || (x->sharding && !x->sharding->unknown))
            continue;
        ir_sb_puts(&o, nh++ ? ",\n   {\"name\": " : "\n   {\"name\": ");
        json_str(&o, x->name);
        ir_sb_puts(&o, ", \"op\": ");
        json_str(&o, ir_op_name(x->op));
        ir_sb_printf(&o, ", \"line\": %d, \"why\": ", (int)x->pos.line);
        json_str(&o, held_why(g, i));
        ir_sb_puts(&o, "}");
    }
    ir_sb_puts(&o, "]}\n");
    if (!ok) {
        ir_sb_free(&o);
        return NULL;
    }
    return ir_sb_take(&o);
}
