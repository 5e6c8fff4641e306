/*
 * strategy.c: the ways to shard one instruction.
 *
 * An instruction is described by its roles: its output dims, then the
 * dims it contracts or reduces (a dot's contracting dims, a reduce's
 * reduced dims, a convolution's input feature), each with a size; and for
 * every operand which of its dims plays each role (-1: none, and the
 * operand is then replicated along the axes of that role). A strategy
 * gives every mesh axis one role or none; it is valid when each role's
 * size (and each operand dim playing it) is divisible by its tiles, or,
 * for an output dim of an op the partitioner pads (elementwise, leaves,
 * broadcast, transpose, a reduce's kept dims, a dot's output dims, the
 * dims a slice, pad or concatenate leaves alone), at
 * least as large as its tiles: the last tiles are padded. Axes
 * on a contracted role leave partial sums: one all-reduce of the output
 * shard over them (or, for a dot of a matrix, a reduce-scatter onto an
 * output dim they tile too: scatter_variant). The dot of an MLP layer, x[16,24] . w[24,40] on mesh
 * x=2,y=4:
 *
 *   roles  out0=16 (x dim 0)  out1=40 (w dim 1)  red0=24 (x dim 1, w dim 0)
 *   x->out0, y->out1   x [x,-]+y  w [-,y]+x   out [x,y]    no collective
 *   x->red0, y->out1   x [-,x]+y  w [x,y]     out [-,y]+x  all-reduce over x
 *
 * (Alpa enumerates a dot's strategies the same way; XLA's auto-sharding
 * pass, dot_handler.cc, by mesh dims per batch, space and contracting dim.)
 * Every strategy's operand specs are what the partitioner computes it
 * from without moving data; other specs arriving are resharded (graph.c).
 */
#include "strategy_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static bool array(const IrShape *s)
{
    return s->type != IR_TUPLE && s->type != IR_TOKEN && s->rank <= MAX_ROLES && !ir_shape_is_dynamic(s);
}

static void out_roles(Roles *r, const IrShape *s)
{
    r->nout = s->rank;
    for (int32_t d = 0; d < s->rank; d++) {
        r->size[d] = s->dims[d];
        r->tileable[d] = true;
    }
    memset(r->map, -1, sizeof r->map);
}

/* Operand dims of the same size where nothing else maps: the identity
 * roles of slice, pad, concatenate, dynamic-slice and -update-slice (dims
 * the op changes are untileable). The dims left alone may be cut into
 * unequal tiles: the partitioner runs the op on each padded shard
 * (partition/spmd_ops.c, local where every tiled dim is untouched), as it
 * runs the hand plans' (tests/models/scan_sharded.hlo's expanded scans: 5
 * rows over 4 devices, each step's dynamic-slice of a column on its rows). */
static void same_dims(Roles *r, const IrComputation *c, const IrInstr *x, const bool *changed)
{
    for (int32_t i = 0; i < x->nopnd && i < MAX_OPERANDS; i++) {
        const IrShape *os = &c->instr[x->opnd[i]].shape;
        if (os->rank != x->shape.rank)
            continue;
        for (int32_t d = 0; d < os->rank; d++)
            if (!changed[d] && os->dims[d] == x->shape.dims[d])
                r->map[i][d] = (int8_t)d;
    }
    for (int32_t d = 0; d < x->shape.rank; d++)
        r->tileable[d] = !changed[d];
    r->uneven = true;
}

/* A reshape: dims of equal size in the same group map 1:1; the major
 * dims of a group that splits or merges map to each other. A 1:1 dim may
 * be cut into unequal tiles (the partitioner keeps its padded shard, as
 * propagation maps it: partition/prop_reshape.c); a merged or split one
 * only evenly. Held even, JAX's softmax [6,130] -> [6,130,1] over 4
 * devices gathered its row maximum and sum and held the broadcasts whole
 * (tests/models/memory/attn_softmax_u.hlo: 2.93x the batch plan's peak). */
static bool reshape_roles(Roles *r, const IrShape *in, const IrShape *out)
{
    r->uneven = true;
    int32_t i = 0, o = 0;
    while (i < in->rank && o < out->rank) {
        if (in->dims[i] == 1 && out->dims[o] != 1) {
            i++;
            continue;
        }
        if (out->dims[o] == 1 && in->dims[i] != 1) {
            o++;
            continue;
        }
        int32_t i0 = i, o0 = o;
        int64_t pi = in->dims[i++], po = out->dims[o++];
        while (pi != po) {
            if (pi < po && i < in->rank)
                pi *= in->dims[i++];
            else if (po < pi && o < out->rank)
                po *= out->dims[o++];
            else
                return false;
        }
        if (pi > 1)
            r->map[0][o0] = (int8_t)i0;
        r->regrouped[o0] = i - i0 > 1 || o - o0 > 1;
    }
    return true;
}

/* The roles of instruction x; false: opaque. */
/* A gather, as partition/spmd_gather.c's handler runs it: its output's
 * batch dims are the indices' own (and, for a batching dim, the operand's
 * too: take_along_axis, tiled alike with no collective); an offset dim
 * whose operand dim is sliced whole (a passthrough dim: its start clamps
 * to 0, indexed or not) tiles with that operand dim; another offset dim
 * stays whole, its operand dim replicated. Each operand dim the indices
 * address with a slice of one (a trivially indexed dim: an embedding's
 * vocabulary) is a role of its own that, tiled, leaves each device the
 * rows it holds and zeros elsewhere: partial sums, one all-reduce of the
 * output. An embedding lookup is one such dim with every other dim whole;
 * a gather of two index dims (an index into a dim sliced whole beside the
 * rows: tests/models/gather_batch.hlo's g3; an index of one row and one
 * passthrough beside a batching dim: gather_batching.hlo's g2) was
 * opaque, its operands priced as arriving replicated. */
static bool gather_roles(Roles *r, const IrComputation *c, const IrInstr *x)
{
    if (x->op != OP_GATHER || x->nopnd != 2 || !x->a.x)
        return false;
    const IrGatherDnums *g = &x->a.x->gather;
    const IrShape *op = &c->instr[x->opnd[0]].shape, *ix = &c->instr[x->opnd[1]].shape;
    const IrI64List *sz = &x->a.x->slice_sizes;
    const IrI64List *ob = &g->operand_batching_dims, *ib = &g->start_indices_batching_dims;
    if (ob->n != ib->n || sz->n != op->rank || op->rank > MAX_ROLES || ix->rank > MAX_ROLES)
        return false;
    for (int32_t d = 0; d < x->shape.rank; d++)
        r->tileable[d] = false;
    /* Operand dims to output offset dims, in order; passthrough ones tile. */
    int32_t w = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        if (ir_list_has(&g->collapsed_slice_dims, d) || ir_list_has(ob, d))
            continue;
        if (w >= g->offset_dims.n)
            return false;
        int64_t o = g->offset_dims.v[w++];
        if (o < 0 || o >= x->shape.rank)
            return false;
        if (sz->v[d] == op->dims[d]) {
            r->map[0][o] = (int8_t)d;
            r->tileable[o] = true;
        }
    }
    if (w != g->offset_dims.n)
        return false;
    /* Indices dims (but the index vector) to the output's batch dims. */
    int32_t b = 0;
    for (int32_t d = 0; d < ix->rank; d++) {
        if (d == g->index_vector_dim)
            continue;
        while (b < x->shape.rank && ir_list_has(&g->offset_dims, b))
            b++;
        if (b >= x->shape.rank)
            return false;
        r->map[1][b] = (int8_t)d;
        r->tileable[b] = true;
        for (int32_t k = 0; k < ib->n; k++)
            if (ib->v[k] == d)
                r->map[0][b] = (int8_t)ob->v[k];
        b++;
    }
    /* Trivially indexed dims: partial sums over their tiles. */
    for (int32_t d = 0; d < op->rank; d++) {
        bool pass = !ir_list_has(&g->collapsed_slice_dims, d) && !ir_list_has(ob, d) && sz->v[d] == op->dims[d];
        if (pass || sz->v[d] != 1 || !ir_list_has(&g->start_index_map, d))
            continue;
        if (r->nout + r->nred >= MAX_ROLES)
            return false;
        int32_t role = r->nout + r->nred++;
        r->size[role] = op->dims[d];
        r->tileable[role] = true;
        r->map[0][role] = (int8_t)d;
    }
    r->flops = (double)ir_shape_elements(&x->shape);
    r->uneven = true; /* its output dims padded (tests/models/gather_batch.hlo: 7 columns over 2, 4) */
    return true;
}

/* A scatter into one operand, as partition/spmd_gather.c's handler runs
 * it: the output dims are the operand's; a passthrough dim (the updates'
 * window spans it whole) tiles the operand and that window dim alike; a
 * trivially indexed dim (window size 1: the vocabulary of an embedding's
 * gradient) tiles the operand alone, each device shifting the indices
 * into its rows and the others' updates falling out of bounds, no
 * collective. With a simple combiner (add, max, ...) each indices batch
 * dim, with its updates scatter dim, is a contracted role: each device
 * scatters its own updates and one all-reduce merges them (or, where its
 * byte count prefers it, the partitioner gathers the indices and updates:
 * partitioner_gathers). A batching dim (take_along_axis's gradient) is
 * the operand's output dim, played by its indices batching dim and their
 * updates scatter dim too: tiled alike, no collective. */
static bool scatter_roles(Roles *r, const IrModule *mod, const IrComputation *c, const IrInstr *x)
{
    if (!mod || x->op != OP_SCATTER || x->nopnd != 3 || x->ncalled < 1)
        return false;
    const IrScatterDnums *dn = &ir_attrs_x(&x->a)->scatter;
    const IrShape *op = &c->instr[x->opnd[0]].shape, *ix = &c->instr[x->opnd[1]].shape;
    const IrShape *up = &c->instr[x->opnd[2]].shape;
    const IrI64List *ob = &dn->input_batching_dims, *ib = &dn->scatter_indices_batching_dims;
    if (ob->n != ib->n)
        return false;
    /* The updates' scatter dim of each indices dim (-1: the index vector). */
    int32_t scatter_dim[MAX_ROLES];
    for (int32_t d = 0, u = 0; d < ix->rank && d < MAX_ROLES; d++) {
        scatter_dim[d] = -1;
        if (d == dn->index_vector_dim)
            continue;
        while (u < up->rank && ir_list_has(&dn->update_window_dims, u))
            u++;
        scatter_dim[d] = u < up->rank ? u++ : -1;
    }
    if (ix->rank > MAX_ROLES)
        return false;
    int32_t w = 0;
    for (int32_t d = 0; d < op->rank; d++) {
        r->map[0][d] = (int8_t)d;
        int64_t ud = -1;
        int32_t k = 0;
        while (k < ob->n && ob->v[k] != d)
            k++;
        if (k < ob->n) {
            /* A batching dim (take_along_axis's gradient): the operand's,
             * the indices' and the updates' tiled alike, no collective
             * (partition/spmd_gather.c). */
            int32_t sd = scatter_dim[ib->v[k]];
            if (sd < 0 || up->dims[sd] != op->dims[d] || ix->dims[ib->v[k]] != op->dims[d])
                return false;
            r->tileable[d] = true;
            r->map[1][d] = (int8_t)ib->v[k];
            r->map[2][d] = (int8_t)sd;
            continue;
        }
        if (!ir_list_has(&dn->inserted_window_dims, d)) {
            if (w >= dn->update_window_dims.n)
                return false;
            ud = dn->update_window_dims.v[w++];
        }
        bool pass = ud >= 0 && up->dims[ud] == op->dims[d];
        bool trivial = !pass && ir_list_has(&dn->scatter_dims_to_operand_dims, d) && (ud < 0 || up->dims[ud] == 1);
        r->tileable[d] = pass || trivial;
        if (pass)
            r->map[2][d] = (int8_t)ud;
    }
    if (ir_simple_reducer(mod, x->called[0]) != OP_COUNT) {
        int32_t u = 0;
        for (int32_t d = 0; d < ix->rank; d++) {
            if (d == dn->index_vector_dim)
                continue;
            while (u < up->rank && ir_list_has(&dn->update_window_dims, u))
                u++;
            if (ir_list_has(ib, d)) { /* an output role above */
                u++;
                continue;
            }
            if (u >= up->rank || r->nout + r->nred >= MAX_ROLES)
                return false;
            int32_t role = r->nout + r->nred++;
            r->size[role] = ix->dims[d];
            r->tileable[role] = true;
            r->map[1][role] = (int8_t)d;
            r->map[2][role] = (int8_t)u++;
        }
        /* Unequal tiles of the updates: the partitioner gives the
         * indices' padding rows index -1, dropped (spmd_scatter). Held
         * even, the held-out segment_sum of 14 rows on 4 and 8 devices
         * had no plan that scatters each device's rows: the updates were
         * gathered, and no plan fitted 1.1x the data-parallel plan's
         * peak. */
        r->uneven_red = true;
    }
    r->flops = (double)ir_shape_elements(up);
    r->uneven = true; /* the operand's dims padded (tests/models/scatter_sharded.hlo: 7 rows over 4) */
    return true;
}

/* A "Sharding" marker of one operand without a sharding: an identity
 * (partition/spmd_control.c reshards its operand to the sharding it is
 * given, here the one chosen for it). */
static bool bare_sharding_marker(const IrInstr *x)
{
    const char *t = x->a.x->custom_call_target;
    return !x->sharding && x->nopnd == 1 && t && strcmp(t, "Sharding") == 0;
}

static bool describe(const IrModule *mod, const IrComputation *c, const IrInstr *x, Roles *r)
{
    memset(r, 0, sizeof *r);
    const IrShape *xs = auto_result_dims(x);
    if (!xs || !array(xs) || x->nopnd > MAX_OPERANDS)
        return false;
    for (int32_t i = 0; i < x->nopnd; i++) {
        const IrShape *os = auto_result_dims(&c->instr[x->opnd[i]]);
        if (!os || !array(os))
            return false;
    }
    out_roles(r, xs);
    r->nopnd = x->nopnd;
    const IrShape *s0 = x->nopnd ? &c->instr[x->opnd[0]].shape : NULL;
    bool changed[MAX_ROLES] = {0};
    switch (ir_op_family(x->op)) {
    case FAM_PARAMETER:
    case FAM_CONSTANT:
    case FAM_IOTA:
        r->nopnd = 0;
        r->uneven = true;
        return true;
    case FAM_ELEMENTWISE:
        r->uneven = true;
        for (int32_t i = 0; i < x->nopnd; i++)
            if (c->instr[x->opnd[i]].shape.rank == x->shape.rank)
                for (int32_t d = 0; d < x->shape.rank; d++)
                    r->map[i][d] = (int8_t)d;
        return x->op != OP_MAP;
    case FAM_BROADCAST:
        r->uneven = true;
        for (int32_t k = 0; k < x->a.dimensions.n; k++)
            if (x->a.dimensions.v[k] >= 0 && x->a.dimensions.v[k] < MAX_ROLES)
                r->map[0][x->a.dimensions.v[k]] = (int8_t)k;
        return true;
    case FAM_TRANSPOSE:
        r->uneven = true;
        for (int32_t k = 0; k < x->a.dimensions.n && k < MAX_ROLES; k++)
            r->map[0][k] = (int8_t)x->a.dimensions.v[k];
        return true;
    case FAM_RESHAPE:
        return reshape_roles(r, s0, &x->shape);
    case FAM_BITCAST_CONVERT:
        /* Elementwise at equal widths; else the narrower side's minor dim
         * (one element's bytes) stays whole, the shared dims tile as the
         * partitioner runs them (partition/spmd_ops.c). */
        r->uneven = true;
        for (int32_t d = 0; d < x->shape.rank && d < s0->rank; d++)
            r->map[0][d] = (int8_t)d;
        if (x->shape.rank > s0->rank)
            r->tileable[x->shape.rank - 1] = false;
        return x->shape.rank - s0->rank <= 1 && s0->rank - x->shape.rank <= 1;
    case FAM_CUSTOM_CALL:
        /* The identities the partitioner runs shard by shard (XLA's memory
         * annotations: MoveToHost, Pin, ...; and a "Sharding" marker the
         * user left without a sharding, or whose sharding was taken out:
         * partition/spmd_control.c reshards its operand to its own): as an
         * elementwise op of one operand; XLA's TopK as the topk op
         * (strategy_local.c). Any other custom-call is opaque, and so is a
         * "Sharding" with the user's sharding (its unspecified_dims say
         * which dims the user left free: propagation's). */
        if (ir_is_topk(x))
            return auto_local_roles(r, c, x);
        if (!(shd_identity_custom_call(x, NULL) || bare_sharding_marker(x)) || !ir_shape_equal(s0, &x->shape))
            return false;
        for (int32_t d = 0; d < x->shape.rank; d++)
            r->map[0][d] = (int8_t)d;
        r->uneven = true;
        return true;
    case FAM_SLICE:
        if (x->op != OP_SLICE)
            return false;
        for (int32_t d = 0; d < x->shape.rank; d++)
            changed[d] = x->shape.dims[d] != s0->dims[d];
        same_dims(r, c, x, changed);
        return true;
    case FAM_DYNAMIC_SLICE: {
        /* A dim the slice or the update spans whole tiles with the
         * operand (and the update); the one indexed (a scan's layer dim)
         * is never tiled: the partitioner runs it shard by shard where
         * every tiled dim is untouched (partition/spmd_ops.c). The start
         * indices are scalars, replicated. */
        const IrShape *part = x->op == OP_DYNAMIC_UPDATE_SLICE && x->nopnd > 1 ? &c->instr[x->opnd[1]].shape
                                                                              : &x->shape;
        if (part->rank != s0->rank)
            return false;
        for (int32_t d = 0; d < x->shape.rank; d++)
            changed[d] = part->dims[d] != s0->dims[d];
        same_dims(r, c, x, changed);
        return true;
    }
    case FAM_PAD:
        for (int32_t d = 0; d < x->shape.rank; d++)
            changed[d] = x->shape.dims[d] != s0->dims[d];
        same_dims(r, c, x, changed);
        return true;
    case FAM_CONCATENATE:
        changed[x->a.dimensions.n ? x->a.dimensions.v[0] : 0] = true;
        same_dims(r, c, x, changed);
        return true;
    case FAM_REDUCE: {
        /* Operands (inputs, inits): every input alike (a tuple result's
         * elements share one dims: strategy_tuple.c). */
        int32_t nin = x->nopnd / 2;
        if (x->nopnd < 2 || x->nopnd % 2 || (nin > 1 && x->shape.type != IR_TUPLE) || x->ncalled != 1)
            return false;
        for (int32_t k = 1; k < nin; k++)
            if (!ir_shape_same_dims(&c->instr[x->opnd[k]].shape, s0))
                return false;
        r->gathers_partials = nin > 1 || !mod || ir_simple_reducer(mod, x->called[0]) == OP_COUNT;
        r->uneven = true;
        int32_t o = 0;
        for (int32_t d = 0; d < s0->rank; d++) {
            int32_t k = o;
            if (ir_list_has(&x->a.dimensions, d)) {
                if (r->nout + r->nred >= MAX_ROLES)
                    return false;
                k = r->nout + r->nred++;
                r->size[k] = s0->dims[d];
                r->tileable[k] = true;
            } else {
                o++;
            }
            for (int32_t i = 0; i < nin; i++)
                r->map[i][k] = (int8_t)d;
        }
        r->flops = (double)ir_shape_elements(s0) * nin;
        return true;
    }
    case FAM_DOT: {
        const IrDotDnums *dn = &x->a.dot;
        const IrShape *s1 = &c->instr[x->opnd[1]].shape;
        int32_t o = 0;
        if (x->shape.rank > MAX_ROLES || dn->lhs_batch.n != dn->rhs_batch.n)
            return false;
        r->uneven = true;
        for (int32_t k = 0; k < dn->lhs_batch.n && o < MAX_ROLES; k++, o++) {
            r->map[0][o] = (int8_t)dn->lhs_batch.v[k];
            r->map[1][o] = (int8_t)dn->rhs_batch.v[k];
        }
        for (int32_t d = 0; d < s0->rank && o < MAX_ROLES; d++)
            if (!ir_list_has(&dn->lhs_batch, d) && !ir_list_has(&dn->lhs_contracting, d))
                r->map[0][o++] = (int8_t)d;
        for (int32_t d = 0; d < s1->rank && o < MAX_ROLES; d++)
            if (!ir_list_has(&dn->rhs_batch, d) && !ir_list_has(&dn->rhs_contracting, d))
                r->map[1][o++] = (int8_t)d;
        if (o != x->shape.rank || r->nout + dn->lhs_contracting.n > MAX_ROLES)
            return false;
        double k_elems = 1;
        for (int32_t k = 0; k < dn->lhs_contracting.n; k++) {
            int32_t role = r->nout + r->nred++;
            r->size[role] = s0->dims[dn->lhs_contracting.v[k]];
            r->tileable[role] = true;
            r->map[0][role] = (int8_t)dn->lhs_contracting.v[k];
            r->map[1][role] = (int8_t)dn->rhs_contracting.v[k];
            k_elems *= (double)r->size[role];
        }
        r->flops = 2.0 * (double)ir_shape_elements(&x->shape) * k_elems;
        return true;
    }
    case FAM_CONVOLUTION: {
        const IrConvDnums *cd = &ir_attrs_x(&x->a)->conv;
        const IrAttrsX *ax = ir_attrs_x(&x->a);
        if (x->nopnd != 2 || !cd->present || ax->batch_group_count > 1 || r->nout + 1 > MAX_ROLES)
            return false;
        /* Feature groups tie each output feature to its group of input
         * features: only the batch tiles (partition/spmd_conv.c), which,
         * as the output features, the partitioner pads (4 images over 3
         * devices: tests/models/conv_batch.hlo). */
        r->uneven = true;
        bool grouped = ax->feature_group_count > 1;
        for (int32_t d = 0; d < x->shape.rank; d++)
            r->tileable[d] = d == cd->out_batch || (d == cd->out_feature && !grouped);
        r->map[0][cd->out_batch] = (int8_t)cd->in_batch;
        r->map[1][cd->out_feature] = (int8_t)cd->k_out_feature;
        /* A spatial dim tiles with the input's, each device taking the
         * rows its windows reach from its neighbours (the partitioner's
         * halo exchange, where it plans one: auto_conv_tiles_ok); the
         * kernel's window stays whole. */
        for (int32_t k = 0; k < cd->nspatial && ax->window.rank == cd->nspatial; k++) {
            r->tileable[cd->out_spatial[k]] = true;
            r->map[0][cd->out_spatial[k]] = (int8_t)cd->in_spatial[k];
        }
        const IrShape *k = &c->instr[x->opnd[1]].shape;
        r->flops = 2.0 * (double)ir_shape_elements(&x->shape) * (double)ir_shape_elements(k) /
                   (double)(k->dims[cd->k_out_feature] > 0 ? k->dims[cd->k_out_feature] : 1);
        if (grouped)
            return true;
        int32_t role = r->nout + r->nred++;
        r->size[role] = s0->dims[cd->in_feature];
        r->tileable[role] = true;
        r->map[0][role] = (int8_t)cd->in_feature;
        r->map[1][role] = (int8_t)cd->k_in_feature;
        return true;
    }
    case FAM_REDUCE_WINDOW:
        return auto_window_roles(r, mod, c, x);
    case FAM_BATCH_NORM:
    case FAM_FFT:
    case FAM_TOPK:
    case FAM_SORT:
    case FAM_REVERSE:
    case FAM_LINALG:
        return auto_local_roles(r, c, x);
    case FAM_TUPLE:
        return auto_gte_roles(r, c, x);
    case FAM_RNG_BIT_GENERATOR:
        return auto_rng_roles(r, x);
    case FAM_RAGGED_DOT:
        return auto_ragged_roles(r, c, x);
    case FAM_GATHER:
        return gather_roles(r, c, x);
    case FAM_SCATTER:
        return scatter_roles(r, mod, c, x);
    default:
        return false;
    }
}

/* May a dim of `size` elements be cut into t tiles: evenly, or, where
 * the partitioner pads it (`uneven`), into unequal ones, the last of
 * padding alone where t passes size (never a dim of one element)? */
static bool fits_tiles(int64_t size, int64_t t, bool uneven)
{
    if (uneven)
        return size >= t || size > 1;
    return size >= t && size % t == 0;
}

/* Is the assignment role[] (per axis) valid for r and the operands? */
static bool valid(const Roles *r, const AutoMesh *m, const int32_t *role, const IrComputation *c, const IrInstr *x)
{
    if (!auto_ragged_tiles_ok(r, x, role, m->naxes))
        return false;
    for (int32_t k = 0; k < r->nout + r->nred; k++) {
        int64_t t = 1;
        for (int32_t a = 0; a < m->naxes; a++)
            if (role[a] == k)
                t *= m->size[a];
        if (t == 1)
            continue;
        /* Unequal tiles: an output dim of an op the partitioner pads,
         * even into more tiles than it has elements (a batch of 4 over 8
         * devices: tiles of one row, four of padding alone, as hand plans
         * cut it), priced at its padded tile (make); never a dim of one
         * element, whose every tile would hold it whole or nothing. */
        bool uneven = (r->uneven && k < r->nout && !r->regrouped[k]) || (r->uneven_red && k >= r->nout);
        if (!r->tileable[k] || !fits_tiles(r->size[k], t, uneven))
            return false;
        if (ir_op_family(x->op) == FAM_REDUCE_WINDOW && !auto_window_tiles_ok(c, x, k, t))
            return false;
        if (ir_op_family(x->op) == FAM_CONVOLUTION && k < r->nout && !auto_conv_tiles_ok(c, x, k, t))
            return false;
        for (int32_t i = 0; i < r->nopnd; i++) {
            int64_t od = r->map[i][k] >= 0 ? auto_result_dims(&c->instr[x->opnd[i]])->dims[r->map[i][k]] : t;
            if (!fits_tiles(od, t, uneven))
                return false;
        }
    }
    return true;
}

/* Where a dot's or convolution's contracted role is tiled, the SPMD
 * partitioner (partition/spmd_dot.c, spmd_conv.c) picks, by the bytes it
 * counts, between the partial sums (a local dot, then an all-reduce: twice
 * the output shard) and gathering both operands along the contracted axes
 * first (each reshard counted as partition/reshard.c counts it: the bytes
 * of the gathered shard, and half the operand more when that shard is
 * still tiled) and, for a dot, each side's multiply-adds a device
 * weighed as bytes (spmd_dot_mac_bytes, at the default link: the gathers
 * compute nred times the partial sums' work); ties go to the gathers (the
 * result's tiling is tried first). True when it gathers: the dot then
 * runs whole along the contracted axes on every device. *gathered: the
 * bytes of each operand's shard after the gather, summed. Operands no
 * contracted role tiles (a scatter's operand) are not gathered. */
static bool partitioner_gathers(const Roles *r, const AutoMesh *m, const IrComputation *c, const IrInstr *x,
                                const int32_t *role, double out_shard, double used, int64_t nred,
                                double *gathered)
{
    double gather_cost = 0;
    *gathered = 0;
    for (int32_t i = 0; i < r->nopnd; i++) {
        bool contracted = false;
        for (int32_t ax = 0; ax < m->naxes; ax++)
            contracted |= role[ax] >= r->nout && r->map[i][role[ax]] >= 0;
        if (!contracted)
            continue;
        const IrShape *os = &c->instr[x->opnd[i]].shape;
        double full = (double)ir_shape_bytes(os), tiles = 1;
        for (int32_t ax = 0; ax < m->naxes; ax++)
            if (role[ax] >= 0 && role[ax] < r->nout && r->map[i][role[ax]] >= 0)
                tiles *= (double)m->size[ax];
        *gathered += full / tiles;
        gather_cost += full / tiles + (tiles > 1 ? full / 2 : 0);
    }
    double macs = ir_op_family(x->op) == FAM_DOT ? r->flops / 2 / used : 0, mac = spmd_dot_mac_bytes(0);
    return gather_cost + macs * (double)nred * mac <= 2 * out_shard + macs * mac;
}

/* The bytes of output shard `bytes` an instruction writes. A
 * dynamic-update-slice whose operand it is the only use of (a scan's
 * stacked state, the body owning it: device/exec.c's run_while) updates
 * it in place (device/k_data.c): it writes its update's share of the
 * shard, a layer, not the stack, each iteration. Charged the whole shard,
 * a replicated stack of a weight's gradients cost its L layers' bytes at
 * every iteration, and the solver tiled it to gather it after the loop.
 * A parameter (the caller's value) is copied. */
static double written_bytes(const IrComputation *c, const IrInstr *x, double bytes)
{
    if (x->op != OP_DYNAMIC_UPDATE_SLICE || x->nopnd < 2 || !ir_shape_elements(&x->shape))
        return bytes;
    int32_t stack = x->opnd[0], uses = 0;
    if (stack == c->root || c->instr[stack].op == OP_PARAMETER)
        return bytes;
    for (int32_t i = 0; i < c->ninstr && uses < 2; i++)
        for (int32_t k = 0; k < c->instr[i].nopnd; k++)
            uses += c->instr[i].opnd[k] == stack;
    if (uses != 1)
        return bytes;
    return bytes * (double)ir_shape_elements(&c->instr[x->opnd[1]].shape) / (double)ir_shape_elements(&x->shape);
}

/* The bytes of x's partial sums over its output's, as the partitioner
 * moves them (partition: spmd_partial_type): an f16 dot whose contracting
 * dim is tiled all-reduces f32 partials, twice the f16 output (lowp in
 * tests/jax/test_auto_heldout45.py on 4 devices: 576 bytes, counted 288). */
static double partial_widen(const IrModule *mod, const IrComputation *c, const IrInstr *x)
{
    IrType t = x->shape.type, w = spmd_partial_type(mod, c, x);
    return w == t || ir_type_size(t) == 0 ? 1 : (double)ir_type_size(w) / (double)ir_type_size(t);
}

static double widen(const Roles *r)
{
    return r->widen > 0 ? r->widen : 1;
}

/* The strategy of assignment role[]. */
static IrStatus make(IrArena *a, const Roles *r, const AutoMesh *m, const AutoCost *cost, int64_t local,
                     const IrComputation *c, const IrInstr *x, const int32_t *role, AutoStrategy *s, IrDiag *d)
{
    s->out = auto_spec_replicated();
    if (r->nopnd && !(s->in = ir_alloc_array(a, (size_t)r->nopnd, sizeof *s->in)))
        return ir_oom(d, NULL);
    for (int32_t i = 0; i < r->nopnd; i++)
        s->in[i] = auto_spec_replicated();
    double used = 1, bytes = (double)ir_shape_bytes(&x->shape);
    int64_t nred = 1;
    unsigned redmask = 0;
    for (int32_t ax = 0; ax < m->naxes; ax++) {
        int32_t k = role[ax];
        if (k < 0)
            continue;
        used *= (double)m->size[ax];
        if (k < r->nout) {
            s->out.dim[ax] = (int8_t)k;
        } else {
            nred *= m->size[ax];
            redmask |= 1u << ax;
        }
        for (int32_t i = 0; i < r->nopnd; i++)
            s->in[i].dim[ax] = r->map[i][k];
    }
    /* A tiled output dim's shard is its largest (padded) tile, and each
     * device computes that tile: `used` counts the devices the work
     * spreads over as if even (7 rows over 8 devices: tiles of one row,
     * the work over 7; 4 rows over 8: over 4). */
    for (int32_t k = 0; k < r->nout; k++) {
        int64_t t = auto_spec_tiles(m, &s->out, k);
        if (t > 1 && r->size[k] > 0) {
            int64_t tile = (r->size[k] + t - 1) / t;
            bytes *= (double)tile / (double)r->size[k];
            used *= (double)r->size[k] / (double)(tile * t);
        }
    }
    s->bytes = (int64_t)bytes;
    int scope = auto_axes_scope(m, redmask, local);
    IrOpFamily f = ir_op_family(x->op);
    double gathered;
    if (nred > 1 && (f == FAM_DOT || f == FAM_CONVOLUTION || f == FAM_SCATTER) &&
        partitioner_gathers(r, m, c, x, role, bytes * widen(r), used, nred, &gathered)) {
        /* What the partitioner will run: all-gathers, then the whole
         * contraction on every device of the group. */
        s->compute = r->flops / (used / (double)nred) / cost->flops + bytes / cost->bytes;
        s->comm = auto_coll_seconds(cost, AUTO_ALL_GATHER, nred, scope, gathered) +
                  (r->nopnd > 1 ? cost->alpha[AUTO_ALL_GATHER][scope ? 1 : 0] : 0);
        return IR_OK;
    }
    /* An rng-bit-generator tiled past dim 0 draws the whole array. */
    double drawn = auto_rng_draws_whole(m, x, &s->out) ? r->flops : r->flops / used;
    s->compute = drawn / cost->flops + written_bytes(c, x, bytes) / cost->bytes +
                 auto_conv_mask_seconds(m, cost, c, x, &s->out);
    s->comm = r->gathers_partials && nred > 1 ? auto_partials_gather_seconds(cost, x, nred, scope, bytes)
                                              : auto_coll_seconds(cost, AUTO_ALL_REDUCE, nred, scope, bytes * widen(r));
    if (x->op == OP_REDUCE_WINDOW || x->op == OP_CONVOLUTION)
        s->comm += auto_window_halo_seconds(m, cost, local, c, x, &s->out);
    s->comm += auto_norm_stats_seconds(m, cost, local, x, &s->out);
    return IR_OK;
}

/* Strategy *base (role[]: axes on a contracted role, their partial sums
 * all-reduced, the output replicated over them) with the sums
 * reduce-scattered onto output dim o instead, into *s: the output tiled on
 * o by those axes, as partition/spmd_partial.c finishes partial sums that
 * end sharded (half the all-reduce's bytes). An FSDP step's weight
 * gradient, the batch contracted: the sum arrives in the weight's tiles,
 * where the all-reduce moved twice as much and every device held the
 * whole gradient (scan_wide_sgd on 4 devices: 98,304 bytes a layer
 * against 49,152; under FSDP's peak x 1.1 its plan moved 2.07x FSDP's
 * bytes, 1.00x now). For a dot of a matrix (a weight's gradient: an
 * activation's sums stay all-reduced) whose partial sums the partitioner
 * all-reduces (not gathering the operands), o untiled and even in the
 * new tiles: every dot's variants made a 24-layer transformer's compile
 * on 2x4 take 0.6 s of CPU against 0.2. */
static bool scatter_variant(const Roles *r, const AutoMesh *m, const AutoCost *cost, int64_t local,
                            const IrInstr *x, const int32_t *role, const AutoStrategy *base, int32_t o,
                            AutoStrategy *s)
{
    IrOpFamily f = ir_op_family(x->op);
    if (f != FAM_DOT || x->shape.rank != 2 || r->gathers_partials || o >= r->nout ||
        !r->tileable[o] || r->size[o] <= 0)
        return false;
    int64_t nred = 1;
    unsigned redmask = 0;
    for (int32_t ax = 0; ax < m->naxes; ax++)
        if (role[ax] >= r->nout) {
            nred *= m->size[ax];
            redmask |= 1u << ax;
        }
    if (nred < 2)
        return false;
    if (auto_spec_tiles(m, &base->out, o) > 1 || r->size[o] % nred != 0)
        return false;
    /* A dot the partitioner computes by gathering its operands is no
     * partial sum (make() priced that). */
    double all_reduce = auto_coll_seconds(cost, AUTO_ALL_REDUCE, nred, auto_axes_scope(m, redmask, local),
                                          (double)base->bytes * widen(r));
    if (fabs(base->comm - all_reduce) > 1e-9 * all_reduce)
        return false;
    *s = *base;
    for (int32_t ax = 0; ax < m->naxes && ax < AUTO_MAX_AXES; ax++)
        if (redmask & (1u << ax))
            s->out.dim[ax] = (int8_t)o;
    s->bytes = base->bytes / nred;
    s->comm = auto_coll_seconds(cost, AUTO_REDUCE_SCATTER, nred, auto_axes_scope(m, redmask, local),
                                (double)base->bytes * widen(r));
    return true;
}

IrStatus auto_strategies(IrArena *a, const AutoMesh *m, const AutoCost *cost, int64_t local, const IrModule *mod,
                         const IrComputation *c, int32_t i, AutoStrategy **out, int32_t *n, IrDiag *d)
{
    *out = NULL;
    *n = 0;
    const IrInstr *x = &c->instr[i];
    Roles r;
    if (!describe(mod, c, x, &r))
        return IR_OK;
    r.widen = partial_widen(mod, c, x);
    int32_t nroles = r.nout + r.nred;
    int64_t total = 1;
    for (int32_t ax = 0; ax < m->naxes; ax++)
        if (m->size[ax] > 1 && (total *= nroles + 1) > MAX_STRATEGIES)
            return IR_OK;
    AutoStrategy *s = ir_alloc_array(a, (size_t)total * (size_t)(1 + r.nout), sizeof *s);
    if (!s)
        return ir_oom(d, NULL);
    /* Odometer over the axes' roles, -1 first: replicated is strategy 0. */
    int32_t role[AUTO_MAX_AXES];
    for (int32_t ax = 0; ax < AUTO_MAX_AXES; ax++)
        role[ax] = -1;
    int32_t k = 0;
    for (;;) {
        if (valid(&r, m, role, c, x)) {
            IrStatus st = make(a, &r, m, cost, local, c, x, role, &s[k], d);
            if (st != IR_OK)
                return st;
            int32_t base = k++;
            for (int32_t o = 0; o < r.nout; o++)
                k += scatter_variant(&r, m, cost, local, x, role, &s[base], o, &s[k]);
        }
        int32_t ax = m->naxes - 1;
        for (; ax >= 0; ax--) {
            if (m->size[ax] == 1)
                continue;
            if (++role[ax] < nroles)
                break;
            role[ax] = -1;
        }
        if (ax < 0)
            break;
    }
    *out = s;
    *n = k;
    return IR_OK;
}

IrStatus auto_follow(IrArena *a, const AutoMesh *m, const AutoCost *cost, const IrComputation *c, int32_t i,
                     int32_t opnd, const AutoSpec *in, AutoStrategy *s, IrDiag *d)
{
    const IrInstr *x = &c->instr[i];
    Roles r;
    bool ok = describe(NULL, c, x, &r);
    (void)ok;
    assert(ok && r.nred == 0 && opnd < r.nopnd);
    /* Each axis goes to the output dim its operand dim becomes; none
     * there (a dim merged away as a minor part): the axis is dropped, and
     * the operand gathered along it (priced as a reshard in the group). */
    int32_t role[AUTO_MAX_AXES];
    for (int32_t ax = 0; ax < AUTO_MAX_AXES; ax++) {
        role[ax] = -1;
        for (int32_t k = 0; ax < m->naxes && in->dim[ax] >= 0 && k < r.nout; k++)
            if (r.map[opnd][k] == in->dim[ax])
                role[ax] = k;
    }
    for (int32_t ax = m->naxes - 1; ax >= 0 && !valid(&r, m, role, c, x); ax--)
        role[ax] = -1;
    return make(a, &r, m, cost, 0, c, x, role, s, d);
}

/* The instruction i reshapes: back through reshapes and broadcasts that
 * add no dim (JAX's bias b -> [1,N] -> [N] before it meets the rows),
 * copies, and a dynamic-slice's operand (a scan's layer of its stacked
 * biases bs[L,N], sliced from the loop's state: loop.c's state node, a
 * parameter of the view, behind the copy that is the body's
 * get-tuple-element). */
static int32_t reshaped_from(const IrComputation *c, int32_t i)
{
    for (;;) {
        const IrInstr *x = &c->instr[i];
        IrOpFamily f = ir_op_family(x->op);
        if (x->nopnd < 1 || !(f == FAM_RESHAPE || x->op == OP_COPY || x->op == OP_DYNAMIC_SLICE ||
                              (f == FAM_BROADCAST && x->shape.rank == c->instr[x->opnd[0]].shape.rank)))
            return i;
        i = x->opnd[0];
    }
}

/* Is instruction i computed from constants and iotas alone (a rotary
 * table, a position encoding, a mask), or with parameters too (batch
 * norm's folded scale rsqrt(var + eps) * g), through at most 64
 * instructions of the elementwise, broadcast, reshape, transpose and
 * slice families? */
static bool from_constants(const IrComputation *c, int32_t i, bool parameters)
{
    int32_t stack[64];
    int32_t n = 0, seen = 0;
    stack[n++] = i;
    while (n > 0) {
        const IrInstr *x = &c->instr[stack[--n]];
        IrOpFamily f = ir_op_family(x->op);
        if (++seen > 64)
            return false;
        if (f == FAM_CONSTANT || f == FAM_IOTA || (parameters && f == FAM_PARAMETER))
            continue;
        if (!(f == FAM_ELEMENTWISE || f == FAM_BROADCAST || f == FAM_RESHAPE || f == FAM_TRANSPOSE ||
              f == FAM_SLICE) || x->nopnd < 1 || n + x->nopnd > 64)
            return false;
        for (int32_t o = 0; o < x->nopnd; o++)
            stack[n++] = x->opnd[o];
    }
    return true;
}

/* Is p a broadcast that adds dims to an array (not a scalar's)? */
static bool widens(const IrComputation *c, const IrInstr *p)
{
    return ir_op_family(p->op) == FAM_BROADCAST && p->nopnd >= 1 && p->shape.rank > c->instr[p->opnd[0]].shape.rank &&
           c->instr[p->opnd[0]].shape.rank > 0;
}

/* The operand the elementwise op x follows, -1 for none (auto_follows).
 * An elementwise op follows a computed operand of its dims, never a
 * parameter: following the weight, an SGD update w - lr * g runs where
 * the weight lies, replicated under data parallelism, where on its own
 * it may run on the gradient's shard (left so: a result takes any
 * sharding). With the parameter leading such groups the JAX language model's
 * auto plan moved 1.14-1.30x data parallel's bytes while data parallel
 * itself was estimated faster: the reduction had cut it out.
 * A broadcast that adds dims to an array (widens) is followed last: its
 * group is led by the value it broadcasts, which has no such dim to tile.
 * A causal mask broadcast over batch and heads leading a select(mask,
 * scores, -inf) held the scores replicated on the batch (a GPT block on 4
 * devices: 2304 bytes gathered where data parallel moves none). An iota
 * is of the broadcast family with no operand. Two such broadcasts (an
 * outer product, AdaFactor's row and column moments broadcast to [R,C] and
 * multiplied) lead a group of their own: following either, the product
 * could be tiled only on the dims that operand's value has (following the
 * rows', AdaFactor's step of tests/jax/test_auto_heldout46.py
 * all-gathered the column-tiled [24,32] factor on 4 devices where
 * Megatron's plan keeps it tiled). */
static int32_t elementwise_leader(const IrComputation *c, const IrInstr *x)
{
    int32_t widened = -1, nwidened = 0;
    for (int32_t o = 0; o < x->nopnd; o++) {
        const IrInstr *p = &c->instr[x->opnd[o]];
        if (!ir_shape_same_dims(&p->shape, &x->shape) || ir_op_family(p->op) == FAM_PARAMETER)
            continue;
        if (!widens(c, p))
            return o;
        if (widened < 0)
            widened = o;
        nwidened++;
    }
    return nwidened > 1 ? -1 : widened;
}

/* Is i a factor of an outer product: an operand of an elementwise op of
 * its dims that leads its own group because two broadcasts widen into it
 * (elementwise_leader)? The users are found by a pass over c, made only
 * for the broadcasts that widen a computed array. */
static bool outer_factor(const IrComputation *c, int32_t i)
{
    for (int32_t u = 0; u < c->ninstr; u++) {
        const IrInstr *x = &c->instr[u];
        if (ir_op_family(x->op) != FAM_ELEMENTWISE || !ir_shape_same_dims(&x->shape, &c->instr[i].shape))
            continue;
        for (int32_t o = 0; o < x->nopnd; o++)
            if (x->opnd[o] == i && elementwise_leader(c, x) < 0)
                return true;
    }
    return false;
}

int32_t auto_follows(const IrComputation *c, int32_t i)
{
    Roles r;
    const IrInstr *x = &c->instr[i];
    IrOpFamily f = ir_op_family(x->op);
    if (!(f == FAM_ELEMENTWISE || f == FAM_RESHAPE || f == FAM_TRANSPOSE || f == FAM_BROADCAST ||
          f == FAM_CUSTOM_CALL || f == FAM_TUPLE) ||
        ir_is_topk(x) || !describe(NULL, c, x, &r))
        return -1;
    if (f == FAM_CUSTOM_CALL || f == FAM_TUPLE)
        return 0;
    /* A broadcast of a parameter that adds dims (a bias or a scale
     * broadcast over the rows of a row-tiled activation) leads a group of
     * its own: its result may be tiled on a new dim where the parameter is
     * replicated; following it, the result would be held whole on every
     * device. So does the broadcast of a value computed from constants
     * alone (a rotary table [T,hd] broadcast over batch and heads: held
     * whole in the table's group, each device held the [B,T,H,hd] result,
     * grouped-query attention with RoPE on 8 devices 1.29x data parallel's
     * peak), of a scalar (its group has no dim the broadcast could take:
     * under every strategy the result was whole) and of a factor of an
     * outer product (outer_factor: following the rows' moment, replicated
     * in Megatron's plan, AdaFactor's [24,32] row factor was held whole
     * where the product and propagation's plan tile its columns, 14,164
     * bytes on 2 devices, not 12,620, and under 1.1x that the plan
     * all-gathered x instead). A computed value's broadcast (a softmax's
     * row maximum) keeps following: its rows are the operand's. A layer of
     * a scan's stacked biases is a parameter's value too (reshaped_from):
     * following its slice, replicated under data parallelism, the
     * broadcast [256,128] ran whole on each of 4 devices, 0.12 ms of a
     * 1.3 ms step. So is a value computed elementwise from parameters
     * (batch norm's folded scale rsqrt(var + eps) * g, [C]): following it,
     * replicated, the [N,H,W,C] broadcast was held whole on each device and
     * its rows dynamic-sliced (a conv net in eval mode on 2, 86,868 bytes of
     * peak where data parallel's is 40,928). */
    if (f == FAM_BROADCAST && x->shape.rank > c->instr[x->opnd[0]].shape.rank &&
        (c->instr[x->opnd[0]].shape.rank == 0 ||
         ir_op_family(c->instr[reshaped_from(c, x->opnd[0])].op) == FAM_PARAMETER ||
         from_constants(c, x->opnd[0], true) || outer_factor(c, i)))
        return -1;
    if (f != FAM_ELEMENTWISE)
        return 0;
    return elementwise_leader(c, x);
}
