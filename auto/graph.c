/*
 * graph.c: the entry computation as the solver sees it.
 *
 * Every instruction with strategies (strategy.c) is a node; the others are
 * opaque (while, custom-calls, tuples: propagation shards them)
 * and their operands are priced as arriving replicated. Reduction first,
 * as Alpa does: an elementwise instruction whose computed operand of the
 * same dims has strategies follows it: it joins that operand's group and
 * takes, for the group's strategy k, the output spec of the leader's
 * strategy k. So a chain dot -> add -> tanh -> convert is one group and
 * one choice. A parameter is not followed (an SGD update runs where its
 * gradient is) unless the output takes its buffer (declared aliased, a
 * buffer_donor, or --donate auto's pair, tie_updates): the update then
 * leaves the step sharded as the parameter came in.
 *
 * Costs: a group's unary cost of strategy k sums its members' compute and
 * collectives and the reshards between members; an edge between two
 * groups holds, for each pair of strategies, the seconds to reshard each
 * producer's output into what its user needs (auto_reshard_seconds); edges
 * between the same two groups are summed into one; an edge to a group of
 * one strategy becomes unary cost of the other end. A read that needs what
 * an earlier read of the same value in the same computation needs is free
 * (read_before), as the partitioner reshards once per target.
 *
 * Memory (for a limit, and the tie-break's last search): the values live
 * at the peak of the unsharded program by partition/memory.c's model
 * (mem_estimate: the executor's order, parameters live to the end,
 * buffers shared or reused counted once, elementwise chains fused as the
 * executor runs them) are charged their per-device bytes under each
 * strategy; opaque ones their whole bytes, and so does what a called
 * computation holds at the peak (AutoGraph.mem_fixed), except a loop in
 * the view: its state and its body's part of the peak at the shardings
 * chosen for them, and a state resharded from its operand with both
 * buffers, on their edge (loop_memory.c, auto_graph_charge_pair); and
 * what resharding the operands of the instruction run at the peak holds
 * (reshard_bytes, charge_reshard_at_peak). Under a limit the rows at
 * other steps are computed too (auto/shard.c fit_steps).
 */
#include "auto.h"

#include <stdlib.h>
#include <string.h>

static bool user_sharded(const IrInstr *x)
{
    return x->sharding && !x->sharding->unknown;
}

/* The parameter (number) each output of the entry takes the buffer of,
 * pair[k] for root tuple element k (k = 0 for an array root), -1 for
 * none: the module's input_output_alias (a whole parameter to a whole
 * output), then its buffer_donor parameters, then with `donate_auto`
 * every parameter, each round by partition/donate.c's rule less the
 * sharding (the sharding is what is being chosen): outputs in order, each
 * with the first parameter of its type and dims no pair took yet. */
static void donation_pairs(const IrModule *m, const IrComputation *c, bool donate_auto, int32_t *pair,
                           bool *taken, int32_t nout)
{
    const IrInstr *root = &c->instr[c->root];
    bool tuple = root->op == OP_TUPLE;
    for (int32_t k = 0; k < nout; k++)
        pair[k] = -1;
    for (int32_t p = 0; p < c->nparam; p++)
        taken[p] = false;
    for (int32_t j = 0; j < m->nalias; j++) {
        const IrAlias *al = &m->alias[j];
        int64_t k = tuple ? (al->output_index.n == 1 ? al->output_index.v[0] : -1) : (al->output_index.n ? -1 : 0);
        if (al->param_index.n == 0 && k >= 0 && k < nout && al->param_number >= 0 && al->param_number < c->nparam) {
            pair[k] = (int32_t)al->param_number;
            taken[al->param_number] = true;
        }
    }
    for (int round = 0; round < (donate_auto ? 2 : 1); round++)
        for (int32_t k = 0; k < nout; k++) {
            const IrShape *os = tuple ? &c->instr[root->opnd[k]].shape : &root->shape;
            for (int32_t p = 0; pair[k] < 0 && p < c->nparam; p++) {
                bool donor = round == 1;
                for (int32_t j = 0; !donor && j < m->ndonor; j++)
                    donor = m->donor[j].param_number == p && m->donor[j].param_index.n == 0;
                const IrShape *ps = c->param[p] >= 0 ? &c->instr[c->param[p]].shape : NULL;
                if (donor && ps && !taken[p] && ps->type == os->type && ps->type != IR_TUPLE &&
                    ir_shape_same_dims(ps, os)) {
                    pair[k] = p;
                    taken[p] = true;
                }
            }
        }
}

/* Does value j reach parameter p through elementwise ops of its dims
 * (depth at most `depth` below j)? */
static bool reaches_parameter(const IrComputation *c, int32_t j, int64_t p, int depth)
{
    const IrInstr *x = &c->instr[j];
    if (x->op == OP_PARAMETER)
        return x->a.parameter_number == p;
    if (depth == 0 || ir_op_family(x->op) != FAM_ELEMENTWISE)
        return false;
    for (int32_t o = 0; o < x->nopnd; o++)
        if (ir_shape_same_dims(&c->instr[x->opnd[o]].shape, &x->shape) &&
            reaches_parameter(c, x->opnd[o], p, depth - 1))
            return true;
    return false;
}

enum { TIE_DEPTH = 8 }; /* an Adam moment: add(multiply(m, 0.9), ...), a bf16 weight's converts */

/* tie[i] (c->ninstr entries): the operand instruction i follows so that
 * an update leaves the step sharded as the parameter whose buffer it
 * takes came in, -1 where none. An update written over its parameter
 * (w - lr * g, declared aliased, a buffer_donor or --donate auto's pair)
 * must, or the pair could not be made (partition/donate.c pairs only a
 * shard of the same sharding) nor the next step take it back (`tessel run
 * --steps`): the output's writer follows, through elementwise ops of its
 * dims, the operand chain that reaches the parameter, each link its
 * operand's group (a moment's 0.9 m + 0.1 g: the add follows 0.9 m, which
 * follows m). IR_ENOMEM only. */
static IrStatus tie_updates(const IrModule *m, const IrComputation *c, bool donate_auto, int32_t *tie, IrDiag *d)
{
    for (int32_t i = 0; i < c->ninstr; i++)
        tie[i] = -1;
    const IrInstr *root = c->root >= 0 ? &c->instr[c->root] : NULL;
    if (!root)
        return IR_OK;
    bool tuple = root->op == OP_TUPLE;
    int32_t nout = tuple ? root->nopnd : 1;
    int32_t *pair = ts_malloc((size_t)(nout > 0 ? nout : 1) * sizeof *pair);
    bool *taken = ts_malloc((size_t)(c->nparam > 0 ? c->nparam : 1) * sizeof *taken);
    if (!pair || !taken) {
        ts_free(pair);
        ts_free(taken);
        return ir_oom(d, NULL);
    }
    donation_pairs(m, c, donate_auto, pair, taken, nout);
    for (int32_t k = 0; k < nout; k++) {
        int32_t cur = tuple ? root->opnd[k] : c->root;
        for (int depth = TIE_DEPTH; pair[k] >= 0 && depth > 0 && tie[cur] < 0; depth--) {
            const IrInstr *x = &c->instr[cur];
            if (ir_op_family(x->op) != FAM_ELEMENTWISE)
                break;
            int32_t next = -1;
            for (int32_t o = 0; o < x->nopnd && next < 0; o++)
                if (ir_shape_same_dims(&c->instr[x->opnd[o]].shape, &x->shape) &&
                    reaches_parameter(c, x->opnd[o], pair[k], depth - 1))
                    next = o;
            if (next < 0)
                break;
            tie[cur] = next;
            cur = x->opnd[next];
        }
    }
    ts_free(pair);
    ts_free(taken);
    return IR_OK;
}

/* Is view instruction i a loop state's identity (a get-tuple-element of
 * a body's parameter or of a while's result, loop.c)? It follows the
 * state node: one choice. */
static bool state_identity(const AutoGraph *g, int32_t i)
{
    const IrInstr *x = &g->comp->instr[i];
    return x->op == OP_COPY && x->nopnd == 1 && g->view.where_comp[x->opnd[0]] < 0;
}

/* The next permutation of p[0..n) in lexicographic order; false after
 * the last. */
static bool next_order(int32_t *p, int32_t n)
{
    int32_t i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0)
        return false;
    int32_t j = n - 1;
    while (p[j] <= p[i])
        j--;
    int32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
    for (int32_t a = i + 1, b = n - 1; a < b; a++, b--) {
        t = p[a];
        p[a] = p[b];
        p[b] = t;
    }
    return true;
}

static int by_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A copy of normalised sharding s whose replication groups (the trailing
 * REPLICATED subgroup) list their devices in increasing order: the order
 * inside a group says nothing. NULL on OOM. */
static IrSharding *groups_sorted(IrArena *a, const IrSharding *s)
{
    IrSharding *c = ir_alloc_array(a, 1, sizeof *c);
    if (!c || ir_sharding_copy(a, c, s) != IR_OK)
        return NULL;
    if (c->kind == SHD_TILED && c->nsubgroup == 1 && c->subgroup[0] == SUBGROUP_REPLICATED && c->devices) {
        int64_t r = c->tile[c->ntile - 1];
        for (int64_t k = 0; r > 1 && k + r <= c->ndevices; k += r)
            qsort(c->devices + k, (size_t)r, sizeof *c->devices, by_id);
    }
    return c;
}

/* Is `want` the sharding of some spec over the mesh, its axes taken in
 * any order (whatever the shape's divisibility)? Every assignment of the
 * axes to the dims, (rank + 1)^naxes, in every order, naxes!. */
static IrStatus expressible(AutoGraph *g, const IrSharding *want, int32_t rank, bool *yes, IrDiag *d)
{
    AutoSpec s = auto_spec_replicated();
    *yes = false;
    for (;;) {
        int32_t order[AUTO_MAX_AXES] = {0, 1, 2, 3};
        do {
            IrSharding *have = auto_spec_sharding_order(g->arena, &g->mesh, &s, rank, order);
            if (!have)
                return ir_oom(d, NULL);
            have = groups_sorted(g->arena, have);
            if (!have)
                return ir_oom(d, NULL);
            if (ir_sharding_equal(have, want))
                *yes = true;
        } while (!*yes && next_order(order, g->mesh.naxes));
        int32_t a = g->mesh.naxes - 1;
        for (; a >= 0; a--) {
            if (++s.dim[a] < rank)
                break;
            s.dim[a] = -1;
        }
        if (a < 0 || *yes)
            return IR_OK;
    }
}

/* A user's sharding that cuts a dim of one element into tiles (every
 * device but one holding nothing but padding, none holding less than the
 * whole; a larger dim cut into more tiles than it has elements is a plan
 * the auto-sharder makes too: strategy.c), or that is no tiling over the
 * mesh's axes in any order (its devices in an order no axes give): the
 * user's shardings contradict the mesh. */
static IrStatus contradicts(AutoGraph *g, const IrInstr *x, const IrSharding *want, IrDiag *d)
{
    const IrSharding *us = x->sharding;
    char mesh[160];
    auto_mesh_text(&g->mesh, mesh, sizeof mesh);
    for (int32_t k = 0; us->kind == SHD_TILED && k < x->shape.rank; k++)
        if (x->shape.dims[k] == 1 && shd_tiles(us, k) > 1)
            return ir_error(d, IR_EINPUT, g->file, g->src, x->pos,
                            "the sharding of %s cuts its dim %d, of %lld element%s, into %lld tiles: %lld of "
                            "them would hold nothing but padding (shard a larger dim, or leave %s unsharded "
                            "and --auto-shard chooses)",
                            x->name, (int)k, (long long)x->shape.dims[k], x->shape.dims[k] == 1 ? "" : "s",
                            (long long)shd_tiles(us, k), (long long)(shd_tiles(us, k) - x->shape.dims[k]),
                            x->name);
    bool yes = true;
    if (!shd_is_replicated(want) && !(want = groups_sorted(g->arena, want)))
        return ir_oom(d, NULL);
    IrStatus st = shd_is_replicated(want) ? IR_OK : expressible(g, want, x->shape.rank, &yes, d);
    if (st != IR_OK || yes)
        return st;
    char *text = ir_sharding_str(us);
    st = ir_error(d, IR_EINPUT, g->file, g->src, x->pos,
                  "the sharding of %s, %s, is no tiling over the axes of --mesh %s (each dim cut by whole "
                  "axes, over the devices in the mesh's row-major order): the user's shardings contradict "
                  "the mesh",
                  x->name, text ? text : "?", mesh);
    ts_free(text);
    return st;
}

/* Keep the strategies of node v that give the user's sharding; none (a
 * dim the mesh's axes do not divide: the partitioner pads it): the node
 * stays as the user wrote it (opaque). A sharding that contradicts the
 * mesh (contradicts) is IR_EINPUT. */
static IrStatus constrain(AutoGraph *g, int32_t i, IrDiag *d)
{
    const IrInstr *x = &g->comp->instr[i];
    AutoNode *v = &g->node[i];
    v->fixed = true;
    const IrSharding *us = x->sharding;
    if (us->kind == SHD_TILED && us->ndevices != g->mesh.ndevices)
        return ir_error(d, IR_EINPUT, g->file, g->src, x->pos,
                        "the sharding of %s names %lld devices, but --mesh has %lld: the user's shardings "
                        "contradict the mesh",
                        x->name, (long long)us->ndevices, (long long)g->mesh.ndevices);
    if (x->shape.type == IR_TUPLE) {
        v->nstrat = 0;
        return IR_OK;
    }
    IrSharding *want = shd_normalize(g->arena, us);
    if (!want)
        return ir_oom(d, NULL);
    if (v->nstrat > 0) {
        IrStatus st = contradicts(g, x, want, d);
        if (st != IR_OK)
            return st;
    }
    int32_t k = 0;
    for (int32_t s = 0; s < v->nstrat; s++) {
        IrSharding *have = auto_spec_sharding(g->arena, &g->mesh, &v->strat[s].out, x->shape.rank);
        if (!have)
            return ir_oom(d, NULL);
        if (ir_sharding_equal(have, want) || (shd_is_replicated(have) && shd_is_replicated(want)))
            v->strat[k++] = v->strat[s];
    }
    v->nstrat = k;
    return IR_OK;
}

/* The group's strategies for follower i of its operand `o` (in a group). */
static IrStatus follow(AutoGraph *g, const AutoCost *cost, int32_t i, int32_t o, IrDiag *d)
{
    const AutoNode *lead = &g->node[g->comp->instr[i].opnd[o]];
    AutoGroup *gr = &g->group[lead->group];
    AutoNode *v = &g->node[i];
    v->strat = ir_alloc_array(g->arena, (size_t)gr->nstrat, sizeof *v->strat);
    if (!v->strat)
        return ir_oom(d, NULL);
    for (int32_t k = 0; k < gr->nstrat; k++) {
        IrStatus st = auto_follow(g->arena, &g->mesh, cost, g->comp, i, o, &lead->strat[k].out, &v->strat[k], d);
        if (st != IR_OK)
            return st;
    }
    v->nstrat = gr->nstrat;
    v->group = lead->group;
    return IR_OK;
}

static IrStatus new_group(AutoGraph *g, int32_t i, IrDiag *d)
{
    AutoNode *v = &g->node[i];
    AutoGroup *gr = &g->group[g->ngroup];
    gr->leader = i;
    gr->nstrat = v->nstrat;
    gr->unary = ir_alloc_array(g->arena, (size_t)v->nstrat, sizeof *gr->unary);
    gr->mem = ir_alloc_array(g->arena, (size_t)v->nstrat, sizeof *gr->mem);
    gr->compute = ir_alloc_array(g->arena, (size_t)v->nstrat, sizeof *gr->compute);
    if (!gr->unary || !gr->mem || !gr->compute)
        return ir_oom(d, NULL);
    v->group = g->ngroup++;
    return IR_OK;
}

/* The edge from group a to group b, made on first use. */
static IrStatus edge(AutoGraph *g, int32_t a, int32_t b, AutoEdge **out, IrDiag *d)
{
    for (int32_t e = 0; e < g->nedge; e++)
        if (g->edge[e].from == a && g->edge[e].to == b) {
            *out = &g->edge[e];
            return IR_OK;
        }
    int32_t *cap = &g->edge_cap;
    if (g->nedge == *cap) {
        int32_t nc = *cap ? *cap * 2 : 64;
        AutoEdge *ne = ir_alloc_array(g->arena, (size_t)nc, sizeof *ne);
        if (!ne)
            return ir_oom(d, NULL);
        if (g->nedge)
            memcpy(ne, g->edge, (size_t)g->nedge * sizeof *ne);
        g->edge = ne;
        *cap = nc;
    }
    AutoEdge *e = &g->edge[g->nedge++];
    e->from = a;
    e->to = b;
    e->cost = ir_alloc_array(g->arena, (size_t)g->group[a].nstrat * (size_t)g->group[b].nstrat, sizeof *e->cost);
    if (!e->cost)
        return ir_oom(d, NULL);
    *out = e;
    return IR_OK;
}

/* The reads of each value priced so far (price_operand), as lists
 * through `next`: the partitioner reshards a value once for each target
 * in a computation (partition/reshard_cache.c), and a read that needs
 * what an earlier read of the same computation asked for is free. */
typedef struct Reads {
    int32_t *first;          /* instruction -> its latest read, -1 */
    int32_t *instr, *opnd, *next;
    int32_t n;
} Reads;

static IrStatus price_reshard(AutoGraph *g, const AutoCost *cost, int32_t u, int32_t i, int32_t o, double w,
                              const Reads *r, IrDiag *d);

/* Does node i need the same spec of its operand u whatever i's group chooses,
 * once u's group has chosen (i opaque, in u's group, or of one
 * strategy)? Those reads are priced first: a read whose need varies with
 * its own group's choice can then find them (read_before). */
static bool need_known_from_u(const AutoGraph *g, int32_t u, int32_t i)
{
    const AutoNode *v = &g->node[i];
    return v->group < 0 || v->group == g->node[u].group || g->group[v->group].nstrat == 1;
}

/* The costs of operand `o` (instruction u) reaching node i; the read
 * recorded in r. */
static IrStatus price_operand(AutoGraph *g, const AutoCost *cost, int32_t i, int32_t o, Reads *r, IrDiag *d)
{
    const IrInstr *x = &g->comp->instr[i];
    int32_t u = x->opnd[o];
    const AutoNode *v = &g->node[i];
    if (v->group < 0 && (x->op == OP_TUPLE || i == g->comp->root))
        return IR_OK; /* a result takes any sharding */
    IrStatus st = price_reshard(g, cost, u, i, o, g->view.weight[i], r, d);
    AutoSpec el;
    IrShape els;
    int64_t eld[IR_MAX_RANK];
    if (st == IR_OK && g->node[u].group >= 0 && g->view.where_comp[i] >= 0 &&
        !auto_element_spec(g->comp, x, &g->node[u].strat[0].out, &el, &els, eld)) {
        r->instr[r->n] = i;
        r->opnd[r->n] = o;
        r->next[r->n] = r->first[u];
        r->first[u] = r->n++;
    }
    return st;
}

/* Is node i, needing `need` of u when u's group takes strategy s and
 * i's group t (t < 0: i's group has no choice of its own here), served
 * by an earlier read of u in the same computation that needs the same?
 * That read's need must be known from s (need_known_from_u) or from t (a
 * node of i's group); a read by a third group depends on that group's
 * choice, which an edge's cost cannot see, and does not count (the
 * estimate then charges the reshard again where the partitioner may run
 * it once). Reads of an element its tuple's spec does not stand for
 * (auto_element_spec) are not recorded, and are not asked about. */
static bool read_before(const AutoGraph *g, const Reads *r, int32_t u, int32_t i, int32_t s, int32_t t,
                        const AutoSpec *need)
{
    const AutoView *vw = &g->view;
    const AutoNode *pv = &g->node[u];
    AutoSpec rep = auto_spec_replicated();
    for (int32_t k = r ? r->first[u] : -1; k >= 0; k = r->next[k]) {
        int32_t j = r->instr[k], p = r->opnd[k];
        const AutoNode *vj = &g->node[j];
        if (vw->where_comp[j] != vw->where_comp[i])
            continue;
        const AutoSpec *nj = NULL;
        if (vj->group < 0)
            nj = &rep;
        else if (vj->group == pv->group)
            nj = &vj->strat[s].in[p];
        else if (g->group[vj->group].nstrat == 1)
            nj = &vj->strat[0].in[p];
        else if (t >= 0 && vj->group == g->node[i].group)
            nj = &vj->strat[t].in[p];
        if (nj && auto_spec_equal(nj, need))
            return true;
    }
    return false;
}

/* The spec `out`, a strategy of node i's operand, leaves where i reads
 * it: an element's own where i is a get-tuple-element of one its tuple's
 * spec does not stand for (auto_element_spec; *el its shape), else out. */
static const AutoSpec *arriving(const AutoGraph *g, int32_t i, const AutoSpec *out, AutoSpec *buf, IrShape *el,
                                int64_t *dims)
{
    return auto_element_spec(g->comp, &g->comp->instr[i], out, buf, el, dims) ? buf : out;
}

/* The seconds, `w` times, to reshard value u's output into what node i
 * needs: its operand `o`'s spec, or (o < 0) its own output spec (a loop's
 * state node, loop.c); none where an earlier read in r needs the same
 * (read_before; r NULL: no reads). */
static IrStatus price_reshard(AutoGraph *g, const AutoCost *cost, int32_t u, int32_t i, int32_t o, double w,
                              const Reads *r, IrDiag *d)
{
    const AutoNode *pv = &g->node[u], *v = &g->node[i];
    const IrShape *shape = &g->comp->instr[u].shape;
    if (pv->group < 0 || w == 0)
        return IR_OK; /* from an opaque value: a local slice at most */
    if (o < 0)
        r = NULL;
    /* An element its tuple's spec does not stand for (an rng's state, a
     * batch-norm's statistics): what arrives is the element's own spec. */
    IrShape el;
    int64_t el_dims[IR_MAX_RANK];
    AutoSpec el_spec;
    if (auto_element_spec(g->comp, &g->comp->instr[i], &pv->strat[0].out, &el_spec, &el, el_dims)) {
        shape = &el;
        r = NULL;
    }
    if (g->view.where_comp[i] < 0)
        r = NULL;
#define HAVE(s) arriving(g, i, &pv->strat[s].out, &el_spec, &el, el_dims)
#define PRICE(s, t, need)                                                                              \
    (read_before(g, r, u, i, s, t, need) ? 0                                                          \
                                         : w * auto_reshard_seconds(cost, &g->mesh, g->local, shape, HAVE(s), need))
    AutoGroup *gu = &g->group[pv->group];
    AutoSpec rep = auto_spec_replicated();
    if (v->group < 0) {
        for (int32_t s = 0; s < gu->nstrat; s++)
            gu->unary[s] += PRICE(s, -1, &rep);
        return IR_OK;
    }
    AutoGroup *gv = &g->group[v->group];
#define NEED(t) (o >= 0 ? &v->strat[t].in[o] : &v->strat[t].out)
    if (pv->group == v->group) {
        for (int32_t s = 0; s < gv->nstrat; s++)
            gv->unary[s] += PRICE(s, s, NEED(s));
        return IR_OK;
    }
    if (gu->nstrat == 1 || gv->nstrat == 1) {
        for (int32_t s = 0; s < gu->nstrat; s++)
            for (int32_t t = 0; t < gv->nstrat; t++) {
                double c = PRICE(s, gv->nstrat == 1 ? -1 : t, NEED(t));
                if (gu->nstrat == 1)
                    gv->unary[t] += c;
                else
                    gu->unary[s] += c;
            }
        return IR_OK;
    }
    AutoEdge *ed = NULL;
    IrStatus st = edge(g, pv->group, v->group, &ed, d);
    if (st != IR_OK)
        return st;
    double *m = ed->cost;
    for (int32_t s = 0; s < gu->nstrat; s++)
        for (int32_t t = 0; t < gv->nstrat; t++)
            m[(size_t)s * (size_t)gv->nstrat + (size_t)t] += PRICE(s, t, NEED(t));
#undef PRICE
#undef NEED
#undef HAVE
    return IR_OK;
}

/* A pair cost in bytes: operand group ug's strategy s with node group vg's
 * strategy t (charge_pair_memory). */
typedef double PairBytes(const AutoGraph *g, const void *ctx, int32_t s, int32_t t);

/* Adds bytes(s, t) to the memory rows: one group's where the pair shares a
 * group (s = t) or the other has one strategy, else the edge's table
 * between them. IR_ENOMEM. */
static IrStatus charge_pair_memory(AutoGraph *g, int32_t ug, int32_t vg, PairBytes *bytes, const void *ctx,
                                   IrDiag *d)
{
    AutoGroup *gu = &g->group[ug], *gv = &g->group[vg];
    if (ug == vg) {
        for (int32_t t = 0; t < gv->nstrat; t++)
            gv->mem[t] += bytes(g, ctx, t, t);
        return IR_OK;
    }
    if (gu->nstrat == 1 || gv->nstrat == 1) {
        for (int32_t s = 0; s < gu->nstrat; s++)
            for (int32_t t = 0; t < gv->nstrat; t++)
                *(gu->nstrat == 1 ? &gv->mem[t] : &gu->mem[s]) += bytes(g, ctx, s, t);
        return IR_OK;
    }
    AutoEdge *ed = NULL;
    IrStatus st = edge(g, ug, vg, &ed, d);
    if (st != IR_OK)
        return st;
    size_t nt = (size_t)gv->nstrat;
    if (!ed->mem && !(ed->mem = ir_alloc_array(g->arena, (size_t)gu->nstrat * nt, sizeof *ed->mem)))
        return ir_oom(d, NULL);
    for (int32_t s = 0; s < gu->nstrat; s++)
        for (size_t t = 0; t < nt; t++)
            ed->mem[(size_t)s * nt + t] += bytes(g, ctx, s, (int32_t)t);
    return IR_OK;
}

/* The bytes the pair (u under spec a, node i under its strategy t) holds
 * beyond u's own: i's where the specs differ (auto_graph_charge_pair). */
static double pair_bytes(const AutoNode *v, int32_t t, const AutoSpec *a)
{
    return auto_spec_equal(a, &v->strat[t].out) ? 0 : (double)v->strat[t].bytes;
}

/* pair_bytes of a loop state's pair: ctx is {the operand's node, i's}. */
static double state_pair_bytes(const AutoGraph *g, const void *ctx, int32_t s, int32_t t)
{
    (void)g;
    const AutoNode *const *ends = ctx;
    return pair_bytes(ends[1], t, &ends[0]->strat[s].out);
}

IrStatus auto_graph_charge_pair(AutoGraph *g, int32_t u, int32_t i, IrDiag *d)
{
    const AutoNode *pv = &g->node[u], *v = &g->node[i];
    if (v->group < 0)
        return IR_OK; /* i is whole: propagation gives the state the operand's sharding */
    AutoGroup *gv = &g->group[v->group];
    AutoSpec rep = auto_spec_replicated();
    if (pv->group < 0) { /* an opaque operand, held whole */
        for (int32_t t = 0; t < gv->nstrat; t++)
            gv->mem[t] += pair_bytes(v, t, &rep);
        return IR_OK;
    }
    const AutoNode *ends[2] = {pv, v};
    return charge_pair_memory(g, pv->group, v->group, state_pair_bytes, ends, d);
}

/* The bytes of operand `o` of node i resharded for it (the operand u
 * under strategy s, i under t) held beside u's shard while i runs, so
 * charged where i runs at the step charged: what the reshard
 * partition/reshard.c runs holds (auto_reshard_classify, the classifier
 * the price uses too). The estimate of the sharded program counts them
 * (partition/memory.c: collective buffers and temporaries); left out, a
 * plan that gathers at the peak passed the limit and the fitting step
 * refused it (tests/models/ragged_moe.hlo on 2 and 4). A local cut holds
 * nothing (where a dim is padded to unequal tiles first the padded copy
 * is held too, but charged, the held-out t5_attn on 8 took a plan of
 * 10,752 bytes where the fitting step makes the one of none fit). Charged
 * the new shard alone where the whole value is gathered, the held-out
 * segments on 4 (tests/jax/test_auto_heldout45.py) took its updates
 * gathered whole, padded and cut for a scatter tiled on its columns: 784
 * bytes, charged 112. */
static double reshard_bytes(const AutoGraph *g, int32_t u, int32_t i, int32_t o, int32_t s, int32_t t)
{
    AutoReshard r;
    auto_reshard_classify(&g->mesh, &g->comp->instr[u].shape, &g->node[u].strat[s].out,
                          &g->node[i].strat[t].in[o], &r);
    return r.held;
}

/* reshard_bytes of operand uio[2] (node uio[0]) of node uio[1]. */
static double reshard_pair_bytes(const AutoGraph *g, const void *ctx, int32_t s, int32_t t)
{
    const int32_t *uio = ctx;
    return reshard_bytes(g, uio[0], uio[1], uio[2], s, t);
}

/* Charge operand `o` of node i, run at the step charged, its reshard's
 * buffers (reshard_bytes): on the edge between the groups, or on one
 * group's memory where the other has one strategy or they share one.
 * IR_ENOMEM. */
static IrStatus charge_reshard_at_peak(AutoGraph *g, int32_t i, int32_t o, IrDiag *d)
{
    int32_t u = g->comp->instr[i].opnd[o];
    const AutoNode *pv = &g->node[u], *v = &g->node[i];
    IrShape el;
    int64_t el_dims[IR_MAX_RANK];
    AutoSpec el_spec;
    /* An opaque end, or an element its tuple's spec does not stand for:
     * not charged (held whole, or priced by its own rule). */
    if (pv->group < 0 || v->group < 0 ||
        auto_element_spec(g->comp, &g->comp->instr[i], &pv->strat[0].out, &el_spec, &el, el_dims))
        return IR_OK;
    const int32_t uio[3] = {u, i, o};
    return charge_pair_memory(g, pv->group, v->group, reshard_pair_bytes, uio, d);
}

/* Memory: the values live at step `peak` of e (the unsharded program's
 * peak, or another step auto_graph_charge_at asks for; see the file
 * comment). */
static IrStatus charge_memory_at(AutoGraph *g, const IrModule *m, const MemEstimate *ep, int32_t peak, IrDiag *d)
{
    const IrComputation *c = g->comp;
    const MemEstimate e = *ep;
    IrStatus st = IR_OK;
    int32_t *step = ts_malloc((size_t)(c->ninstr > 0 ? c->ninstr : 1) * sizeof *step);
    if (!step)
        return ir_oom(d, NULL);
    for (int32_t i = 0; i < c->ninstr; i++)
        step[i] = -1;
    for (int32_t k = 0; k < e.n; k++)
        step[e.order[k]] = k;
    /* What a called computation holds at the peak beyond its parameters
     * and result: charged whole (it is not partitioned by these choices,
     * and erring high keeps the plan within the limit). */
    const AutoLoop *at_peak = peak >= 0 ? auto_loop_of(g, e.order[peak]) : NULL;
    const AutoCond *cond_at_peak = peak >= 0 ? auto_cond_of(g, e.order[peak]) : NULL;
    if (peak == e.peak_step) {
        if (at_peak)
            st = auto_loop_charge_body(g, m, at_peak, (double)e.callee_at_peak, d);
        else if (cond_at_peak)
            st = auto_cond_charge_branch(g, m, cond_at_peak, (double)e.callee_at_peak, d);
        else
            g->mem_fixed += (double)e.callee_at_peak;
    }
    for (int32_t i = 0; st == IR_OK && i < c->ninstr; i++) {
        const IrInstr *x = &c->instr[i];
        bool param = x->op == OP_PARAMETER;
        /* A parameter is live from before step 0 wherever the order
         * puts its step. */
        bool live = step[i] >= 0 && e.own[i] > 0 && peak <= e.end[i] && (param || (step[i] <= peak && peak >= 0));
        if (!live)
            continue;
        const AutoNode *v = &g->node[i];
        double full = (double)ir_shape_bytes(&x->shape);
        const AutoLoop *loop = i < g->view.nentry ? auto_loop_of(g, i) : NULL;
        const AutoCond *cond = i < g->view.nentry ? auto_cond_of(g, i) : NULL;
        if (cond) {
            auto_cond_charge_result(g, cond, (double)e.own[i]);
            continue;
        }
        if (loop) {
            auto_loop_charge_state(g, m, loop, (double)e.own[i]);
            st = auto_loop_charge_pairs(g, m, loop, d);
            continue;
        }
        /* A host op's value (a tessel_print's) is the host program's,
         * whose bytes the limit counts apart (compile/driver.c): the
         * cluster that reads it holds it as a parameter, sharded as its
         * operand where it has its dims (the propagation's), so charged
         * at the operand's per-device bytes; charged whole, the host op
         * of tests/models/host_ops_chain.hlo on 8 kept the plan over a
         * limit the hand plan meets. */
        int32_t u = x->nopnd > 0 ? x->opnd[0] : -1;
        double ufull = u >= 0 ? (double)ir_shape_bytes(&c->instr[u].shape) : 0;
        if (g->on_host && i < g->view.nentry && g->view.where_comp[i] >= 0 && g->on_host(x) && ufull > 0 &&
            g->node[u].group >= 0 && ir_shape_same_dims(&c->instr[u].shape, &x->shape)) {
            for (int32_t s = 0; s < g->node[u].nstrat; s++)
                g->group[g->node[u].group].mem[s] += (double)g->node[u].strat[s].bytes / ufull * (double)e.own[i];
            continue;
        }
        if (v->group < 0 || full <= 0) {
            g->mem_fixed += (double)e.own[i];
            continue;
        }
        /* own is all of the value or a part of it (a tuple's leaves of its
         * own): the same part of each strategy's per-device bytes. */
        double part = (double)e.own[i] / full;
        for (int32_t s = 0; s < v->nstrat; s++)
            g->group[v->group].mem[s] += (double)v->strat[s].bytes * part;
    }
    /* The instruction run at the step: its operands' reshards, where the
     * partitioner reshards its operands to its strategy's (a dot's, a
     * convolution's: partition/spmd_dot.c, spmd_conv.c; a slice's, pad's,
     * concatenate's, reshape's or scatter's too, which only contractions'
     * were: the held-out roll_pad on 4 gathered its concatenate for the
     * flattening reshape, 1,460 bytes where the row said 860). Not a reduce's: it
     * reduces the shard it has and gathers the partial results (charged
     * the operand, reduce_general.hlo on 8 fitted no limit its plan of 541
     * bytes met). A convolution's were not charged while the auto-sharder
     * cut no dim into more tiles than elements (conv_out_feature.hlo on 8
     * then fitted no limit); uncharged, conv_in_feature.hlo on 8 under
     * 1.1x its hand plan's peak took its image gathered for the output
     * features' tiles to fit, and it needed 8272 bytes, not 4628. */
    if (auto_graph_reshards_at(g, &e, peak))
        for (int32_t o = 0; st == IR_OK && o < c->instr[e.order[peak]].nopnd; o++)
            st = charge_reshard_at_peak(g, e.order[peak], o, d);
    ts_free(step);
    return st;
}

/* Memory at the unsharded program's peak. */
static IrStatus charge_memory(AutoGraph *g, const IrModule *m, IrDiag *d)
{
    MemEstimate e;
    IrStatus st = mem_estimate(m, m->entry, NULL, &e, d);
    if (st != IR_OK)
        return st;
    st = charge_memory_at(g, m, &e, e.peak_step, d);
    mem_estimate_free(&e);
    return st;
}

IrStatus auto_graph_charge_at(AutoGraph *g, const IrModule *m, const MemEstimate *e, int32_t step, IrDiag *d)
{
    g->mem_fixed = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        memset(g->group[k].mem, 0, (size_t)g->group[k].nstrat * sizeof *g->group[k].mem);
    for (int32_t k = 0; k < g->nedge; k++)
        if (g->edge[k].mem)
            memset(g->edge[k].mem, 0,
                   (size_t)g->group[g->edge[k].from].nstrat * (size_t)g->group[g->edge[k].to].nstrat *
                       sizeof *g->edge[k].mem);
    return charge_memory_at(g, m, e, step < 0 ? e->peak_step : step, d);
}

bool auto_graph_reshards_at(const AutoGraph *g, const MemEstimate *e, int32_t step)
{
    int32_t at = step >= 0 && step < e->n ? e->order[step] : -1;
    if (at < 0 || at >= g->view.nentry || g->node[at].group < 0 || auto_loop_of(g, at))
        return false;
    IrOpFamily fam = ir_op_family(g->comp->instr[at].op);
    return fam != FAM_REDUCE;
}

bool auto_graph_gathers_at(const AutoGraph *g, const MemEstimate *e, int32_t step, const int32_t *choice)
{
    if (!auto_graph_reshards_at(g, e, step))
        return false;
    int32_t i = e->order[step];
    const IrInstr *x = &g->comp->instr[i];
    IrOpFamily fam = ir_op_family(x->op);
    if (fam == FAM_DOT || fam == FAM_RAGGED_DOT || fam == FAM_CONVOLUTION)
        return true;
    const AutoNode *v = &g->node[i];
    int32_t t = choice[v->group];
    IrShape el;
    int64_t el_dims[IR_MAX_RANK];
    AutoSpec el_spec;
    for (int32_t o = 0; o < x->nopnd; o++) {
        int32_t u = x->opnd[o];
        const AutoNode *pv = &g->node[u];
        if (pv->group < 0 || auto_element_spec(g->comp, x, &pv->strat[0].out, &el_spec, &el, el_dims))
            continue;
        if (reshard_bytes(g, u, i, o, choice[pv->group], t) > 0)
            return true;
    }
    return false;
}

IrStatus auto_graph_row_take(const AutoGraph *g, AutoMemRow *r, IrDiag *d)
{
    size_t n = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        n += (size_t)g->group[k].nstrat;
    for (int32_t e = 0; e < g->nedge; e++)
        n += (size_t)g->group[g->edge[e].from].nstrat * (size_t)g->group[g->edge[e].to].nstrat;
    r->fixed = g->mem_fixed;
    if (!(r->cell = ts_calloc(n > 0 ? n : 1, sizeof *r->cell)))
        return ir_oom(d, NULL);
    size_t c = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        for (int32_t s = 0; s < g->group[k].nstrat; s++)
            r->cell[c++] = g->group[k].mem[s];
    for (int32_t e = 0; e < g->nedge; e++) {
        size_t cells = (size_t)g->group[g->edge[e].from].nstrat * (size_t)g->group[g->edge[e].to].nstrat;
        if (g->edge[e].mem)
            memcpy(&r->cell[c], g->edge[e].mem, cells * sizeof *r->cell);
        c += cells;
    }
    return IR_OK;
}

void auto_mem_row_free(AutoMemRow *r)
{
    ts_free(r->cell);
    memset(r, 0, sizeof *r);
}

IrStatus auto_graph_build(const IrModule *m, const AutoMesh *mesh, const AutoCost *cost, int64_t local,
                          bool donate_auto, AutoOnHost on_host, AutoGraph *g, IrDiag *d)
{
    memset(g, 0, sizeof *g);
    g->on_host = on_host;
    const IrComputation *c = &g->view.comp;
    g->comp = c;
    g->file = m->file;
    g->src = m->src;
    g->mesh = *mesh;
    g->local = local;
    int32_t *order = NULL;
    if (!(g->arena = ir_arena_new()))
        return ir_oom(d, NULL);
    IrStatus st = auto_loop_view(g->arena, m, &g->view, d);
    if (st == IR_OK)
        st = auto_cond_view(g->arena, m, &g->view, d);
    if (st == IR_OK)
        st = ir_topo_order(m, c, &order, d);
    if (st != IR_OK)
        return st;
    int32_t *tie = ts_malloc((size_t)(c->ninstr > 0 ? c->ninstr : 1) * sizeof *tie);
    st = tie ? tie_updates(m, c, donate_auto, tie, d) : ir_oom(d, NULL);
    g->node = ir_alloc_array(g->arena, (size_t)c->ninstr, sizeof *g->node);
    g->group = ir_alloc_array(g->arena, (size_t)c->ninstr, sizeof *g->group);
    if (!g->node || !g->group)
        st = ir_oom(d, NULL);
    /* Nodes and groups, operands first. */
    for (int32_t k = 0; st == IR_OK && k < c->ninstr; k++) {
        int32_t i = order[k];
        const IrInstr *x = &c->instr[i];
        AutoNode *v = &g->node[i];
        v->group = -1;
        int32_t lead = -1;
        if (state_identity(g, i))
            lead = 0;
        else if (!user_sharded(x) && (lead = tie[i]) < 0)
            lead = auto_follows(c, i);
        if (lead >= 0) {
            const AutoNode *u = &g->node[x->opnd[lead]];
            if (u->group >= 0 && g->group[u->group].nstrat > 1) {
                st = follow(g, cost, i, lead, d);
                continue;
            }
        }
        st = auto_strategies(g->arena, mesh, cost, local, m, c, i, &v->strat, &v->nstrat, d);
        if (st == IR_OK && user_sharded(x))
            st = constrain(g, i, d);
        if (st == IR_OK && v->nstrat > 0)
            st = new_group(g, i, d);
    }
    /* A loop body's instructions run once an iteration; a state's
     * identities (get-tuple-elements) move nothing. */
    for (int32_t i = 0; st == IR_OK && i < c->ninstr; i++) {
        double w = state_identity(g, i) ? 0 : g->view.weight[i];
        for (int32_t s = 0; w != 1 && s < g->node[i].nstrat; s++) {
            g->node[i].strat[s].compute *= w;
            g->node[i].strat[s].comm *= w;
        }
    }
    /* Unary costs, then the operands' edges and the loops' links. */
    for (int32_t i = 0; st == IR_OK && i < c->ninstr; i++) {
        const AutoNode *v = &g->node[i];
        for (int32_t s = 0; v->group >= 0 && s < v->nstrat; s++) {
            g->group[v->group].unary[s] += v->strat[s].compute + v->strat[s].comm;
            g->group[v->group].compute[s] += v->strat[s].compute;
        }
    }
    /* The reads whose need u's choice fixes first (need_known_from_u),
     * then the others, each free where an earlier one needs the same. */
    int64_t nread = 0;
    for (int32_t i = 0; i < c->ninstr; i++)
        nread += c->instr[i].nopnd;
    Reads rd = {.first = ts_malloc((size_t)(c->ninstr > 0 ? c->ninstr : 1) * sizeof(int32_t)),
                .instr = ts_malloc((size_t)(nread > 0 ? nread : 1) * sizeof(int32_t)),
                .opnd = ts_malloc((size_t)(nread > 0 ? nread : 1) * sizeof(int32_t)),
                .next = ts_malloc((size_t)(nread > 0 ? nread : 1) * sizeof(int32_t))};
    if (st == IR_OK && (!rd.first || !rd.instr || !rd.opnd || !rd.next))
        st = ir_oom(d, NULL);
    for (int32_t i = 0; st == IR_OK && i < c->ninstr; i++)
        rd.first[i] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; st == IR_OK && i < c->ninstr; i++)
            for (int32_t o = 0; st == IR_OK && o < c->instr[i].nopnd; o++)
                if (need_known_from_u(g, c->instr[i].opnd[o], i) == (pass == 0))
                    st = price_operand(g, cost, i, o, &rd, d);
    ts_free(rd.first);
    ts_free(rd.instr);
    ts_free(rd.opnd);
    ts_free(rd.next);
    for (int32_t k = 0; st == IR_OK && k < g->view.nlink; k++) {
        const AutoLink *l = &g->view.link[k];
        st = price_reshard(g, cost, l->from, l->to, -1, l->weight, NULL, d);
    }
    if (st == IR_OK)
        st = charge_memory(g, m, d);
    ts_free(order);
    ts_free(tie);
    if (st != IR_OK)
        auto_graph_free(g);
    return st;
}

void auto_graph_free(AutoGraph *g)
{
    ir_arena_free(g->arena);
    memset(g, 0, sizeof *g);
}

double auto_graph_cost(const AutoGraph *g, const int32_t *choice)
{
    double t = 0;
    for (int32_t k = 0; k < g->ngroup; k++)
        t += g->group[k].unary[choice[k]];
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        t += ed->cost[(size_t)choice[ed->from] * (size_t)g->group[ed->to].nstrat + (size_t)choice[ed->to]];
    }
    return t;
}

double auto_graph_mem(const AutoGraph *g, const int32_t *choice)
{
    double m = g->mem_fixed;
    for (int32_t k = 0; k < g->ngroup; k++)
        m += g->group[k].mem[choice[k]];
    for (int32_t e = 0; e < g->nedge; e++) {
        const AutoEdge *ed = &g->edge[e];
        if (ed->mem)
            m += ed->mem[(size_t)choice[ed->from] * (size_t)g->group[ed->to].nstrat + (size_t)choice[ed->to]];
    }
    return m;
}
