/*
 * steps.c: a host's devices at one collective (CollHost, CollDevice): the
 * steps every collective shares, and the choice of each one's steps.
 *
 * Every device runs the same SPMD program, so every device reaches every
 * collective instruction in the same order. A collective is barriers over
 * the host's devices (runtime/local.c's, through CollHost.barrier):
 *
 *     1. each device publishes its operands (ops[its id]); barrier
 *     2. across hosts, the host's leader (its first device) runs the
 *        collective's across-hosts step (leader_exchange: allreduce.c,
 *        allgather.c, ...), bringing other hosts' operands or results in
 *        (remote[], reduced[]); barrier
 *     3. each device computes its own result from its group's operands in
 *        group order (result.c), so every member computes the same bits;
 *        members of a group whose result is the same share one buffer
 *     4. barrier: everyone has read, the operands may be freed
 *
 * Failure: a device whose execution fails aborts the world (CollHost.abort)
 * and every barrier returns false; no thread waits forever.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

bool coll_on_host(const CollHost *w, int64_t g)
{
    return g >= w->first && g < w->first + w->nlocal;
}

IrStatus coll_oom(IrDiag *d)
{
    return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

int64_t coll_host_of(const CollHost *w, int64_t g)
{
    return g / w->nlocal;
}

static int64_t find_root(int32_t *parent, int64_t h)
{
    while (parent[h] != h)
        h = parent[h] = parent[parent[h]];
    return h;
}

/* Collectives whose devices each read one other device's operand
 * (permute: its source; broadcast: its group's first member): point to
 * point between the hosts that hold the two. */
static bool coll_reads_one(const IrInstr *ins)
{
    return ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_BROADCAST;
}

/* The hosts seen through collective ins's groups: color[h] is the
 * smallest host joined to h by a chain of groups (permute: pairs) with
 * members on several hosts, -1 for a host joined to none; every host
 * computes the same array (so every rank checks in at the same
 * collectives: the MPI transport's heartbeat). For permute and broadcast src[g] (ndev
 * entries) is the device g reads, -1 none. *any: some group spans hosts. */
static IrStatus host_colors(CollHost *w, const IrModule *m, const IrInstr *ins, int32_t *color, int64_t *src, bool *any,
                            bool *ordered, IrDiag *d)
{
    int64_t hosts = w->ndev / w->nlocal;
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int32_t *parent = ts_malloc((size_t)hosts * sizeof *parent);
    /* A permute's pair is two entries, also on one device. */
    int64_t *members = ts_malloc((size_t)(w->ndev > 2 ? w->ndev : 2) * sizeof *members);
    IrStatus st = parent && members ? IR_OK : coll_oom(d);
    for (int64_t h = 0; parent && h < hosts; h++)
        parent[h] = (int32_t)h;
    *any = false;
    *ordered = ins->op != OP_COLLECTIVE_PERMUTE;
    for (int64_t g = 0; st == IR_OK && g < w->ndev; g++) {
        int32_t size = 0, idx = 0;
        if (ins->op == OP_COLLECTIVE_PERMUTE) {
            members[0] = coll_permute_source(ins, &cw, g);
            members[1] = g;
            size = members[0] >= 0 ? 2 : 0;
        } else if ((st = coll_group(m, ins, &cw, g, members, &size, &idx, d)) != IR_OK) {
            break;
        }
        if (src)
            src[g] = size > 0 ? members[0] : -1;
        /* Each group once (from its first member), each pair once. */
        if (ins->op != OP_COLLECTIVE_PERMUTE && members[0] != g)
            continue;
        for (int32_t j = 1; j < size; j++) {
            *ordered = *ordered && coll_host_of(w, members[j]) > coll_host_of(w, members[j - 1]);
            int64_t a = find_root(parent, coll_host_of(w, members[0])), b = find_root(parent, coll_host_of(w, members[j]));
            if (a != b) {
                parent[a > b ? a : b] = (int32_t)(a < b ? a : b);
                *any = true;
            }
        }
    }
    for (int64_t h = 0; st == IR_OK && h < hosts; h++)
        color[h] = (int32_t)find_root(parent, h);
    /* A host alone is -1 (no communicator); roots are the smallest host
     * of their set, so parent[] now counts each set's hosts. */
    for (int64_t h = 0; st == IR_OK && h < hosts; h++)
        parent[h] = 0;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++)
        parent[color[h]]++;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++)
        if (parent[color[h]] == 1)
            color[h] = -1;
    ts_free(parent);
    ts_free(members);
    return st;
}

/* The byte counters' name for ins (coll_mpi_bytes). */
CollXferKind coll_xfer_kind(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_ALL_REDUCE: case OP_COLLECTIVE_REDUCE: return COLL_XK_ALL_REDUCE;
    case OP_ALL_GATHER: return COLL_XK_ALL_GATHER;
    case OP_REDUCE_SCATTER: return COLL_XK_REDUCE_SCATTER;
    case OP_ALL_TO_ALL: case OP_RAGGED_ALL_TO_ALL: return COLL_XK_ALL_TO_ALL;
    case OP_COLLECTIVE_PERMUTE: return COLL_XK_PERMUTE;
    case OP_COLLECTIVE_BROADCAST: return COLL_XK_BROADCAST;
    default: return COLL_XK_OTHER;
    }
}

/* The groups of ins that span hosts of this host's color, by their
 * first member (cross[], in order of it; ndev entries of room). */
IrStatus coll_cross_groups(CollHost *w, const IrModule *m, const IrInstr *ins, const int32_t *color, int64_t *members,
                             int64_t *cross, int64_t *ncross, IrDiag *d)
{
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = IR_OK;
    int32_t my = color[coll_host_of(w, w->first)];
    *ncross = 0;
    for (int64_t g = 0; my >= 0 && st == IR_OK && g < w->ndev; g++) {
        int32_t idx = 0, size = 0;
        if (color[coll_host_of(w, g)] != my)
            continue;
        st = coll_group(m, ins, &cw, g, members, &size, &idx, d);
        if (st != IR_OK || members[0] != g)
            continue;
        bool spans = false;
        for (int32_t j = 1; j < size; j++)
            spans |= coll_host_of(w, members[j]) != coll_host_of(w, members[0]);
        if (spans)
            cross[(*ncross)++] = g;
    }
    return st;
}

/* ---- the direct path across hosts, one device a host ---- */

/* One device per host, and every group's members on increasing hosts
 * (host_colors: each group is then one color, its hosts in group
 * order): an all-gather, reduce-scatter or all-to-all of one array whose
 * blocks along the dimension are contiguous (the dimensions before it of
 * size 1) moves straight between the operand and a new result, the
 * host's device's (w->reduced), with no packing and no copy of the
 * others' operands: the pattern of MPI_Allgather, MPI_Reduce_scatter_block
 * and MPI_Alltoall, pipelined. Each collective's file draws and runs its
 * own transfer (allgather.c, reduce_scatter.c, alltoall.c); these are the
 * checks they share. The decision depends only on the program and the
 * layout of devices, the same on every host. */
bool coll_direct_operand(const CollHost *w, const IrInstr *ins, const CollHostGroups *hg, CollDirect *c)
{
    if (w->nlocal != 1 || !hg->ordered || w->nops != 1 || ins->shape.type == IR_TUPLE)
        return false;
    *c = (CollDirect){.x = w->ops[w->first][0], .rs = &ins->shape};
    c->ps = &c->x->shape;
    c->dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    const IrShape *ps = c->ps, *rs = c->rs;
    if (ps->type == IR_TUPLE || rs->type != ps->type || rs->rank != ps->rank || c->dim < 0 || c->dim >= ps->rank)
        return false;
    for (int32_t i = 0; i < c->dim; i++)
        if (ps->dims[i] != 1)
            return false;
    return true;
}

IrStatus coll_direct_group(CollHost *w, const IrModule *m, const IrInstr *ins, CollDirect *c, IrDiag *d)
{
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    int32_t mine = 0;
    c->size = 0;
    IrStatus st = members ? coll_group(m, ins, &cw, w->first, members, &c->size, &mine, d) : coll_oom(d);
    ts_free(members);
    return st;
}

bool coll_direct_fits(const CollDirect *c, int64_t want)
{
    for (int32_t i = 0; i < c->ps->rank; i++)
        if (c->rs->dims[i] != (i == c->dim ? want : c->ps->dims[i]))
            return false;
    return true;
}

IrStatus coll_direct_done(CollHost *w, DevValue *v, IrStatus st, bool *done)
{
    if (st == IR_OK) {
        w->reduced[w->first] = v;
        *done = true;
    } else {
        dev_value_unref(v);
    }
    return st;
}

/* The scatter dimension of a one-operand reduce-scatter or all-to-all
 * whose groups (all of size `size`) cut the operand evenly, or -1
 * (then the operands travel and coll.c reports what is wrong). */
int64_t coll_even_dim(const IrInstr *ins, const DevValue *v, int32_t size)
{
    if (ins->a.dimensions.n != 1 || ins->shape.type == IR_TUPLE || size < 1)
        return -1;
    int64_t dim = ins->a.dimensions.v[0];
    if (dim < 0 || dim >= v->shape.rank || v->shape.dims[dim] % size)
        return -1;
    return dim;
}

/* The size every group of ins has, or 0 when they differ: the same
 * answer on every host, so all take the same path (their transport
 * calls must match). */
IrStatus coll_uniform_size(CollHost *w, const IrModule *m, const IrInstr *ins, int64_t *members, int32_t *size,
                             IrDiag *d)
{
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = IR_OK;
    *size = -1;
    for (int64_t g = 0; st == IR_OK && g < w->ndev; g++) {
        int32_t sz = 0, idx = 0;
        st = coll_group(m, ins, &cw, g, members, &sz, &idx, d);
        if (st == IR_OK && *size >= 0 && sz != *size) {
            *size = 0;
            break;
        }
        *size = sz;
    }
    return st;
}

/* Block i (of `size` along dim) of array src (shape s) to dst. */
void coll_copy_block(const IrShape *s, const uint8_t *src, int64_t dim, int32_t size, int32_t i, uint8_t *dst)
{
    int64_t soff[IR_MAX_RANK] = {0}, zero[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
    for (int32_t k = 0; k < s->rank; k++)
        ext[k] = s->dims[k];
    ext[dim] = s->dims[dim] / size;
    soff[dim] = ext[dim] * i;
    coll_copy_box(ir_type_size(s->type), s->rank, src, s->dims, soff, dst, ext, zero, ext);
}

/* The leader's part of a collective across hosts, among the hosts its
 * groups join (host_colors; nothing when every group is inside a host):
 * the hierarchical all-reduce for one operand with a simple reducer,
 * point to point for permute and broadcast, else every operand of the
 * color's hosts everywhere among them. */
static IrStatus cached_colors(CollHost *w, const IrModule *m, const IrInstr *ins, CollHostGroups **out, IrDiag *d)
{
    for (int32_t k = 0; k < w->nhg; k++)
        if (w->hg[k].name == ins->name && w->hg[k].op == ins->op) {
            *out = &w->hg[k];
            return IR_OK;
        }
    CollHostGroups *ng = ts_realloc(w->hg, (size_t)(w->nhg + 1) * sizeof *ng);
    if (!ng)
        return coll_oom(d);
    w->hg = ng;
    CollHostGroups *h = &w->hg[w->nhg];
    *h = (CollHostGroups){.name = ins->name, .op = ins->op};
    h->color = ts_malloc((size_t)(w->ndev / w->nlocal) * sizeof *h->color);
    h->src = coll_reads_one(ins) ? ts_malloc((size_t)w->ndev * sizeof *h->src) : NULL;
    IrStatus st = h->color && (h->src || !coll_reads_one(ins))
                      ? host_colors(w, m, ins, h->color, h->src, &h->any, &h->ordered, d)
                      : coll_oom(d);
    if (st != IR_OK) {
        ts_free(h->color);
        ts_free(h->src);
        return st;
    }
    w->nhg++;
    *out = h;
    return IR_OK;
}

/* The simple reducer of ins the transport runs itself, or OP_COUNT (none,
 * or one the transport has no operation for: complex, f8). */
IrOpcode coll_transport_op(const CollHost *w, const IrModule *m, const IrInstr *ins)
{
    IrOpcode op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    if (op != OP_COUNT && w->ops[w->first][0]->shape.type != IR_TUPLE &&
        !w->t->builtin_op(w->t, w->ops[w->first][0]->shape.type, op))
        op = OP_COUNT;
    return op;
}

/* The leader's part of collective ins across hosts: the collective's own
 * across-hosts step, among the hosts its groups join (nothing when every
 * group is inside a host). */
static IrStatus leader_exchange(CollHost *w, const IrModule *m, const IrInstr *ins, IrDiag *d)
{
    CollHostGroups *hg = NULL;
    IrStatus st = cached_colors(w, m, ins, &hg, d);
    if (st != IR_OK || !hg->any)
        return st;
    switch (ins->op) {
    case OP_ALL_REDUCE: case OP_COLLECTIVE_REDUCE: return coll_allreduce_across(w, m, ins, hg, d);
    case OP_ALL_GATHER: return coll_allgather_across(w, m, ins, hg, d);
    case OP_REDUCE_SCATTER: return coll_reduce_scatter_across(w, m, ins, hg, d);
    case OP_ALL_TO_ALL: return coll_alltoall_across(w, m, ins, hg, d);
    case OP_COLLECTIVE_PERMUTE: return coll_permute_across(w, ins, hg, d);
    case OP_COLLECTIVE_BROADCAST: return coll_broadcast_across(w, ins, hg, d);
    default: return coll_allgather_operands(w, ins, hg->color, d); /* ragged-all-to-all */
    }
}

/* After everyone has read: drop the remote copies and group results. */
static void leader_cleanup(CollHost *w)
{
    for (int64_t g = 0; g < w->ndev; g++) {
        for (int32_t k = 0; w->remote[g] && k < w->nremote; k++)
            dev_value_unref(w->remote[g][k]);
        ts_free(w->remote[g]);
        w->remote[g] = NULL;
        if (!coll_on_host(w, g))
            w->ops[g] = NULL;
        dev_value_unref(w->reduced[g]);
        w->reduced[g] = NULL;
    }
}

/* ---- the collectives ---- */

IrStatus coll_error(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *msg)
{
    return ir_error(d, st, m->file, m->src, ins->pos, "%s: %s", ins->name, msg);
}

/* A coll_barrier of collective ins gave up: why. */
static IrStatus coll_aborted(const CollHost *w, const IrModule *m, const IrInstr *ins, IrDiag *d)
{
    return coll_error(m, ins, d, IR_ERUNTIME, w->stray ? "the other devices finished their program without reaching "
                                                         "this collective (they took another branch or trip count: "
                                                         "an SPMD program's devices must reach the same collectives)"
                                                       : "coll_aborted: another device failed");
}

/* Collectives whose result is the same on every member of a group. */
static bool group_identical(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_COLLECTIVE_BROADCAST: return true;
    default: return false;
    }
}

/* The first member of device me's group that runs on this host, or me. */
static int64_t local_representative(const CollHost *w, const IrModule *m, const IrInstr *ins, const CollWorld *cw,
                                    int64_t me)
{
    int64_t rep = me;
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    int32_t size = 0, mine = 0;
    IrDiag quiet = {0};
    if (members && coll_group(m, ins, cw, me, members, &size, &mine, &quiet) == IR_OK)
        for (int32_t k = 0; k < size; k++)
            if (coll_on_host(w, members[k]) && members[k] < rep)
                rep = members[k];
    ir_diag_clear(&quiet);
    ts_free(members);
    return rep;
}

/* A group whose members are all on this host, all-reduce or all-gather
 * of one array (coll_split_ok): every member computes its part of the
 * result (coll.h: its slice of the reduction, its own block) and writes
 * it straight into the result of every member, so the work is spread
 * over the group's threads and no operand is copied twice. Each member
 * gets a buffer of its own (allocated and later freed by its own thread,
 * so steps reuse warm buffers from the thread's cache, on its own NUMA
 * node) while the copies beyond the first cost at most coll_copies_bytes
 * (256 MiB unless tuned); above that the members share one result, the first local
 * member's. One barrier: the results are allocated before it, written
 * after it; collective_body's closing barrier orders the writes before
 * any use. */

/* Does every member of an all-reduce's group here have an addend of the
 * result's shape (each taking its add in, DevCollectives.run_add)? */
static bool members_add(const CollHost *w, const IrInstr *ins, const int64_t *members, int32_t size)
{
    for (int32_t j = 0; j < size; j++)
        if (!w->addend[members[j]] || !coll_dims_equal(&w->addend[members[j]]->shape, &ins->shape))
            return false;
    return ins->op == OP_ALL_REDUCE && size > 0;
}

/* With `add` (members_add held, own buffers), each member's result is
 * the sum plus its own addend, written in the same pass
 * (coll_split_part_add): the add never reads the sum back. */
static IrStatus split_result(CollDevice *dev, const IrModule *m, const IrInstr *ins, const int64_t *members,
                             int32_t size, int32_t mine, int64_t rep, IrOpcode op, bool add, DevValue **out,
                             IrDiag *d)
{
    CollHost *w = dev->w;
    int64_t bytes = ir_shape_bytes(&ins->shape);
    bool own = add || (int64_t)(size - 1) * bytes <= coll_copies_bytes(&w->tune);
    int32_t nout = own ? size : 1;
    /* Everything that can fail before the coll_barrier: after it the others
     * write into this member's result. */
    enum { ON_STACK = 64 };
    DevValue *outs_stack[2 * ON_STACK],
        **outs = 2 * nout <= 2 * ON_STACK ? outs_stack : ts_malloc((size_t)(2 * nout) * sizeof *outs);
    void *scratch_stack[3 * ON_STACK],
        **scratch = 3 * size <= 3 * ON_STACK ? scratch_stack : ts_malloc((size_t)(3 * size) * sizeof *scratch);
    DevValue *v = (own || rep == dev->id) && outs && scratch ? dev_value_new_uninit(&ins->shape) : NULL;
    w->shared[dev->id - w->first] = v;
    bool ok = coll_barrier(w);
    bool ready = ok && outs && scratch && (v || (!own && rep != dev->id));
    for (int32_t q = 0; ready && q < nout; q++)
        ready = (outs[q] = w->shared[(own ? members[q] : rep) - w->first]) != NULL;
    for (int32_t q = 0; ready && add && q < nout; q++)
        outs[nout + q] = w->addend[members[q]];
    bool stream = ready && coll_stream_into(w->tune.stream_bound, outs, nout, bytes * nout);
    if (ready && add)
        coll_split_part_add((DevValue *const *const *)w->ops, members, size, mine, outs, outs + nout, scratch,
                            stream);
    else if (ready)
        coll_split_part(ins, (DevValue *const *const *)w->ops, members, size, op, mine, outs, nout, scratch,
                           stream);
    if (outs != outs_stack)
        ts_free(outs);
    if (scratch != scratch_stack)
        ts_free(scratch);
    if (!ok) {
        dev_value_unref(v);
        return coll_aborted(w, m, ins, d);
    }
    if (!ready) {
        *out = v; /* coll_collective frees it after the closing coll_barrier */
        return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    }
    if (own) {
        *out = v; /* this member's own buffer */
        return IR_OK;
    }
    /* One result for the group: every member, the representative too,
     * takes a share of it counted against its own device (the
     * representative's reference keeps it alive until the closing
     * coll_barrier, its share after that). */
    DevValue *mine_share = dev_value_share(w->shared[rep - w->first], dev_alloc_current());
    if (!mine_share) {
        *out = v;
        return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    }
    dev_value_unref(v);
    *out = mine_share;
    return IR_OK;
}

/* May the add an all-reduce took in follow its result v (an array of
 * the addend's dims)? */
static bool can_add(const DevValue *v, const DevValue *addend)
{
    return v->shape.type != IR_TUPLE && coll_dims_equal(&addend->shape, &v->shape);
}

/* v + addend into a new array, counted against this thread's device. */
static IrStatus sum_into_new(const IrModule *m, const IrInstr *ins, const DevValue *v, const DevValue *addend,
                             DevValue **out, IrDiag *d)
{
    DevValue *r = dev_value_new_uninit(&v->shape);
    if (!r)
        return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    void *dst[1] = {r->data};
    const void *src[2] = {v->data, addend->data};
    coll_combine(OP_ADD, v->shape.type, dst, 1, 0, src, 2, 0, dev_value_elements(v), false);
    *out = r;
    return IR_OK;
}

/* The representative's result v as the share it publishes, counted
 * against a: arrays that are shares counted against a already (taken
 * from the leader's reduced result) stay as they are, since a second
 * share beside the first counts its bytes twice until the first is
 * released (one array over the memory plan's estimate, measured under
 * mpirun with two devices a rank). On OOM, v as it is. */
static DevValue *rep_share(DevValue *v, DevAllocator *a)
{
    if (v->shape.type == IR_TUPLE && dev_value_sole(v)) {
        for (int32_t k = 0; k < v->nelems; k++)
            v->elems[k] = rep_share(v->elems[k], a);
        return v;
    }
    if (v->shape.type != IR_TUPLE && v->base && v->charged == a)
        return v;
    DevValue *share = dev_value_share(v, a);
    if (!share)
        return v;
    dev_value_unref(v);
    return share;
}

/* This device's result. Values are immutable, so where every member of a
 * group gets the same array (all-gather, all-reduce, broadcast) the group's
 * first member on this host computes it and every member takes a share
 * (dev_value_share: a reference counted against its own device):
 * one buffer per group and host instead of one per device (a replicated
 * 1.6 GB result on 8 devices is 1.6 GB, not 13), and the work is done
 * once. A member that finds no shared result (its representative failed)
 * computes its own, reaching the same error. One extra coll_barrier. Groups
 * wholly on this host take split_result instead (the same one coll_barrier). */
static IrStatus group_result(CollDevice *dev, const IrModule *m, const IrInstr *ins, const CollWorld *cw,
                             int32_t nopnd, DevValue **out, bool *added, IrDiag *d)
{
    CollHost *w = dev->w;
    DevValue *const *const *ops = (DevValue *const *const *)w->ops;
    if (!group_identical(ins) || w->nlocal == 1)
        return coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    if (!members) {
        /* The others still meet this device at the coll_barrier. */
        w->shared[dev->id - w->first] = NULL;
        return coll_barrier(w) ? coll_error(m, ins, d, IR_ENOMEM, "out of memory") : coll_aborted(w, m, ins, d);
    }
    int32_t size = 0, mine = 0;
    IrDiag quiet = {0};
    bool local = !w->reduced[dev->id] &&
                 coll_group(m, ins, cw, dev->id, members, &size, &mine, &quiet) == IR_OK;
    ir_diag_clear(&quiet);
    int64_t rep = dev->id;
    for (int32_t k = 0; local && k < size; k++) {
        local = coll_on_host(w, members[k]);
        rep = members[k] < rep ? members[k] : rep;
    }
    IrOpcode op = OP_COUNT;
    IrStatus st = IR_OK;
    if (local && coll_split_ok(m, ins, ops, members, size, nopnd, &op)) {
        bool add = op == OP_ADD && (ins->shape.type == IR_F32 || ins->shape.type == IR_F64) &&
                   members_add(w, ins, members, size);
        st = split_result(dev, m, ins, members, size, mine, rep, op, add, out, d);
        *added = add && st == IR_OK;
        ts_free(members);
        return st;
    }
    ts_free(members);
    rep = local_representative(w, m, ins, cw, dev->id);
    w->shared[dev->id - w->first] = NULL;
    if (rep == dev->id) {
        st = coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
        /* The representative holds a share too, the one it publishes: the
         * others take shares of it (of its arrays) after the coll_barrier,
         * while it keeps it until the closing one. (A share cannot be had:
         * the result itself, which the others' shares then uncount.) */
        if (st == IR_OK)
            *out = rep_share(*out, dev_alloc_current());
        w->shared[dev->id - w->first] = st == IR_OK ? *out : NULL;
    }
    if (!coll_barrier(w)) {
        dev_value_unref(*out);
        *out = NULL;
        return coll_aborted(w, m, ins, d);
    }
    if (rep == dev->id)
        return st;
    /* The others take shares of the representative's: each device counts
     * what it holds, as under mpirun, and no device counts what only the
     * others still hold. */
    DevValue *v = w->shared[rep - w->first];
    if (!v)
        return coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
    const DevValue *addend = w->addend[dev->id];
    if (addend && can_add(v, addend)) {
        /* The add taken in goes straight into a result of this device's
         * own, never beside a share of the representative's: the two at
         * once were one buffer over the memory plan's estimate (the add
         * in place) on every device but the representative, which adds
         * in place once the others are done (add_after). */
        IrStatus st = sum_into_new(m, ins, v, addend, out, d);
        *added = st == IR_OK;
        return st;
    }
    if (!(*out = dev_value_share(v, dev_alloc_current())))
        return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    return IR_OK;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Two barriers around the data movement (local.c's header): publish the
 * operands, let the leader bring other hosts' in, compute this device's
 * result from the group's operands (coll.c), wait until everyone has
 * read before the operands may be freed. *arrival (NULL: not measured)
 * gets the time the first barrier took: the wait for the host's other
 * devices to reach the collective. */
static IrStatus collective_body(CollDevice *dev, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                                DevValue **operands, DevValue *addend, bool *added, DevValue **out, double *arrival,
                                IrDiag *d)
{
    CollHost *w = dev->w;
    *out = NULL;
    *added = false;
    w->ops[dev->id] = operands;
    w->addend[dev->id] = addend;
    w->nops = nopnd;
    w->at[dev->id - w->first] = ins->name;
    double t0 = arrival ? now_seconds() : 0;
    bool arrived = coll_barrier(w);
    if (arrival)
        *arrival = now_seconds() - t0;
    if (!arrived)
        return coll_aborted(w, m, ins, d);
    /* Every local device must be in this collective (one program). */
    for (int64_t k = 0; k < w->nlocal; k++)
        if (w->at[k] != ins->name) {
            char msg[256];
            snprintf(msg, sizeof msg, "device %lld is in collective %s at the same time: the devices took different "
                     "paths through the program", (long long)(w->first + k), w->at[k] ? w->at[k] : "?");
            coll_error(m, ins, d, IR_ERUNTIME, msg);
            coll_abort(w);
            return d->status;
        }
    bool leader = w->t && dev->id == w->first;
    if (w->t) {
        /* The leader moves this host's data; the others wait for it. */
        if (leader) {
            ir_diag_clear(&w->leader_diag);
            w->leader_status = leader_exchange(w, m, ins, &w->leader_diag);
        }
        if (!coll_barrier(w))
            return coll_aborted(w, m, ins, d);
        if (w->leader_status != IR_OK) {
            /* The leader's error names the instruction already (coll.c),
             * or is the transport's. */
            if (w->leader_diag.pos.line)
                ir_error(d, w->leader_status, w->leader_diag.file, m->src, w->leader_diag.pos, "%s",
                         w->leader_diag.msg ? w->leader_diag.msg : "failed");
            else
                coll_error(m, ins, d, w->leader_status,
                           w->leader_diag.msg ? w->leader_diag.msg : "exchange between hosts failed");
            coll_abort(w);
            return d->status;
        }
    }
    CollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = group_result(dev, m, ins, &cw, nopnd, out, added, d);
    /* Everyone must finish reading before operands may be released. */
    bool ok = coll_barrier(w);
    if (leader)
        leader_cleanup(w);
    if (st == IR_OK && !ok) {
        dev_value_unref(*out);
        *out = NULL;
        return coll_aborted(w, m, ins, d);
    }
    if (st != IR_OK) {
        /* A failed split_result hands back its buffer, which the other
         * members wrote into until the coll_barrier: released only now. */
        dev_value_unref(*out);
        *out = NULL;
        coll_abort(w);
    }
    return st;
}

IrStatus coll_collective(CollDevice *dev, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                         DevValue **operands, DevValue **out, IrDiag *d)
{
    bool added;
    return collective_body(dev, m, ins, nopnd, operands, NULL, &added, out, NULL, d);
}

/* The add an all-reduce took in, where its step did not (across hosts, a
 * result shared by the group, one device): *out + addend, in *out's own
 * buffer when it holds it alone (after the closing barrier the others'
 * references are gone), else in a new one (sum_into_new). The bits of
 * the add run apart (f32 and f64 add commute). */
static IrStatus add_after(const IrModule *m, const IrInstr *ins, DevValue **out, const DevValue *addend, IrDiag *d)
{
    DevValue *v = *out;
    if (!can_add(v, addend))
        return coll_error(m, ins, d, IR_EINTERNAL, "the add taken in has an addend of another shape");
    if (dev_value_sole(v)) {
        void *dst[1] = {v->data};
        const void *src[2] = {v->data, addend->data};
        coll_combine(OP_ADD, v->shape.type, dst, 1, 0, src, 2, 0, dev_value_elements(v), false);
        return IR_OK;
    }
    DevValue *r = NULL;
    IrStatus st = sum_into_new(m, ins, v, addend, &r, d);
    if (st == IR_OK) {
        dev_value_unref(v);
        *out = r;
    }
    return st;
}

/* A collective, timed: --stats reports the time devices spend in them
 * (waiting for the others included: that is what a collective costs),
 * and of it the wait (for the collectives still in flight before it, and
 * for the host's other devices to arrive). */
static IrStatus run_collective(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                               DevValue **operands, DevValue **out, IrDiag *d)
{
    CollDevice *dev = ctx;
    double t0 = now_seconds(), arrival = 0;
    coll_async_drain(dev->async); /* one collective at a time, in program order */
    double t1 = now_seconds();
    bool added;
    IrStatus st = collective_body(dev, m, ins, nopnd, operands, NULL, &added, out, &arrival, d);
    dev->coll_seconds += now_seconds() - t0;
    dev->wait_seconds += t1 - t0 + arrival;
    dev->coll_calls++;
    return st;
}

/* An all-reduce with the add reading its result taken in
 * (DevCollectives.run_add), timed as run_collective: the in-host split
 * path writes the sum plus each member's addend in its one pass
 * (split_result); every other path adds after (add_after). */
static IrStatus run_collective_add(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *operand,
                                   DevValue *addend, DevValue **out, IrDiag *d)
{
    CollDevice *dev = ctx;
    double t0 = now_seconds(), arrival = 0;
    coll_async_drain(dev->async);
    double t1 = now_seconds();
    bool added = false;
    DevValue *opnd[1] = {operand};
    IrStatus st = collective_body(dev, m, ins, 1, opnd, addend, &added, out, &arrival, d);
    if (st == IR_OK && !added && (st = add_after(m, ins, out, addend, d)) != IR_OK) {
        dev_value_unref(*out);
        *out = NULL;
    }
    dev->coll_seconds += now_seconds() - t0;
    dev->wait_seconds += t1 - t0 + arrival;
    dev->coll_calls++;
    return st;
}

/* The -start/-done pairs: the collective runs on the device's
 * communication thread (coll_async.c); --stats counts the time a -done
 * waits for it, the part that did not overlap. */
static IrStatus async_body(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                           DevValue **out, IrDiag *d)
{
    return coll_collective(ctx, m, ins, nopnd, operands, out, d);
}

static IrStatus start_collective(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                                 DevValue **operands, void **handle, IrDiag *d)
{
    CollDevice *dev = ctx;
    return coll_async_start(dev->async, m, ins, nopnd, operands, handle, d);
}

static IrStatus wait_collective(void *ctx, void *handle, DevValue **out, IrDiag *d)
{
    CollDevice *dev = ctx;
    double t0 = now_seconds();
    IrStatus st = coll_async_wait(dev->async, handle, out, d);
    double waited = now_seconds() - t0; /* all of it waiting: the transfer runs on another thread */
    dev->coll_seconds += waited;
    dev->wait_seconds += waited;
    dev->coll_calls++;
    return st;
}


/* ---- the host and its devices ---- */

bool coll_barrier(CollHost *w)
{
    return w->barrier(w->ctx);
}

void coll_abort(CollHost *w)
{
    w->abort(w->ctx);
}

IrStatus coll_host_init(CollHost *w, int64_t n, int64_t r, int64_t first, int64_t nlocal, CollTransport *t,
                        const CollTuning *tune, IrDiag *d)
{
    *w = (CollHost){.n = n, .r = r, .ndev = n * r, .first = first, .nlocal = nlocal, .t = t};
    if (tune)
        w->tune = *tune;
    w->ops = ts_calloc((size_t)w->ndev, sizeof *w->ops);
    w->addend = ts_calloc((size_t)w->ndev, sizeof *w->addend);
    w->remote = ts_calloc((size_t)w->ndev, sizeof *w->remote);
    w->reduced = ts_calloc((size_t)w->ndev, sizeof *w->reduced);
    w->shared = ts_calloc((size_t)nlocal, sizeof *w->shared);
    w->at = ts_calloc((size_t)nlocal, sizeof *w->at);
    return w->ops && w->addend && w->remote && w->reduced && w->shared && w->at ? IR_OK : coll_oom(d);
}

void coll_host_free(CollHost *w)
{
    ir_diag_clear(&w->leader_diag);
    for (int32_t k = 0; k < w->nhg; k++) {
        ts_free(w->hg[k].color);
        ts_free(w->hg[k].src);
    }
    ts_free(w->hg);
    ts_free(w->ops);
    ts_free(w->addend);
    ts_free(w->remote);
    ts_free(w->reduced);
    ts_free(w->shared);
    ts_free(w->at);
    *w = (CollHost){0};
}

DevCollectives coll_device_start(CollDevice *dev)
{
    DevCollectives c = {.ctx = dev, .run = run_collective, .run_add = run_collective_add, .p2p = coll_p2p_run};
    /* Without a queue (out of memory) the -start ops run at once. */
    if ((dev->async = coll_async_new(async_body, dev))) {
        c.start = start_collective;
        c.wait = wait_collective;
    }
    return c;
}

void coll_device_stop(CollDevice *dev)
{
    coll_async_free(dev->async);
    dev->async = NULL;
}

void coll_device_free(CollDevice *dev)
{
    for (int32_t k = 0; k < dev->nsent; k++)
        dev_value_unref(dev->sent[k]);
    ts_free(dev->sent);
    ts_free(dev->sent_by);
    dev->sent = NULL;
    dev->sent_by = NULL;
    dev->nsent = 0;
}

const char *coll_xfer_kind_name(CollXferKind k)
{
    static const char *const names[COLL_XK_COUNT] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                     "permute", "broadcast", "other"};
    return k >= 0 && k < COLL_XK_COUNT ? names[k] : "?";
}
