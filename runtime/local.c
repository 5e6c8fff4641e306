/*
 * local.c: a host's devices as threads of one process, with collectives in
 * shared memory between them and, through a transport (transport.h, MPI
 * in mpi.c), across hosts. Without a transport one process runs all N x R
 * devices (the embedded default: no MPI launcher needed).
 *
 * Across hosts the host's leader device (its first) moves data for all its
 * devices, hierarchically and only among the hosts a collective's groups
 * join (host_colors; over their communicator, cached by the transport):
 * an all-reduce combines the host's members of each group locally, makes
 * one MPI call for the host (a user-defined MPI operation running the HLO
 * reducer where MPI has no built-in one), and every local member takes
 * the result; a reduce-scatter combines the same way and makes one MPI
 * reduce-scatter, each host receiving only its members' blocks; an
 * all-to-all and a permute or broadcast send each host just the blocks
 * or operands its devices read (point to point); the other collectives
 * (all-gather, several operands, orders a reducer cannot combine per
 * host) exchange the host's operands in one MPI call among the group's
 * hosts and each device then picks its result.
 *
 * Every device runs the same SPMD program, so every device reaches every
 * collective instruction in the same order. A collective is two barriers
 * over all devices: each device publishes its operand, waits until all have
 * (barrier 1), computes its own result by reading the operands of its group
 * in group order (so every member computes bit-identical results), and
 * waits until all have read (barrier 2) before its operand may be freed.
 *
 * Failure: a device whose execution fails marks the world aborted and wakes
 * every waiter; a device waiting in a barrier, or arriving at one later,
 * returns an error instead of waiting. No thread waits forever.
 */
#include "coll.h"
#include "transport.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A collective's groups seen from the hosts (host_colors), kept for the
 * run: a loop meets the same collective every trip, and working them
 * out costs a pass over every device's group. */
typedef struct HostGroups {
    const char *name;          /* the instruction's (its pointer is the key) */
    IrOpcode op;
    int32_t *color;            /* [hosts] */
    int64_t *src;              /* [devices], permute and broadcast; else NULL */
    bool any;
    bool ordered;              /* every group's members on strictly increasing hosts (host_colors) */
} HostGroups;

typedef struct World {
    int64_t ndev, n, r;        /* all devices; partitions; replicas */
    int64_t first, nlocal;     /* this host's devices: [first, first + nlocal) */
    RtTransport *t;            /* NULL: this process runs every device */
    CollTuning tune;           /* the run's (RtRunOptions.tune) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t arrived, generation;
    int64_t finished;          /* local devices done with their program */
    bool aborted;
    int64_t first_failed;      /* the device whose own failure aborted the world, -1 none */
    bool stray;                /* aborted because a device finished while others waited */
    const char **at;           /* the collective each local device is in (its instruction's name) */
    DevValue ***ops;           /* the current collective's operands of each device (global ids) */
    int32_t nops;              /* how many each */
    DevValue ***remote;        /* other hosts' operands, copied in by the leader (owned by it) */
    int32_t nremote;           /* operands of each remote[g] (the leader's: devices may publish the next
                                * collective's nops while it cleans up) */
    DevValue **reduced;        /* all-reduce across hosts: each local member's result */
    DevValue **shared;         /* a group-identical collective's result, by its group's first local member */
    IrStatus leader_status;    /* what the leader's exchange returned */
    struct HostGroups *hg;     /* host_colors of each collective met so far (the leader's) */
    int32_t nhg;
    IrDiag leader_diag;
} World;

/* Steps whose times --stats keeps (the first one and the median of the
 * others are reported). */
#define STEP_SAMPLES 256

typedef struct Device {
    World *w;
    int64_t id;                /* global device id: replica * n + partition */
    const PlanCluster *c;
    DevValue **args;           /* this device's shards of the arguments (owned) */
    int32_t nargs;
    int64_t steps;             /* runs of the program, aliased outputs fed back */
    int64_t max_trips;         /* while loop bound (0: none) */
    const DevHostTransfers *host; /* infeed/outfeed: on a run of one device only */
    const RtStepHook *on_step; /* device 0 only */
    DevValue *result;
    IrDiag diag;
    IrStatus status;
    double coll_seconds;       /* time inside run_collective, summed */
    int64_t coll_calls;
    int32_t nstep_seconds;     /* the first STEP_SAMPLES steps' wall times */
    double step_seconds[STEP_SAMPLES];
    RtAsync *async;            /* collectives started, not yet waited for (coll_async.c); NULL: none run so */
    int32_t nsent;             /* sends between devices not yet received: */
    const IrInstr **sent_by;   /*   the send instructions */
    DevValue **sent;           /*   and their data (owned) */
} Device;

/* Device `id` failed on its own (-1: the world is aborted for another
 * reason): the first such device is the run's root cause, not the
 * devices that then saw "aborted: another device failed". */
static void world_abort_by(World *w, int64_t id)
{
    pthread_mutex_lock(&w->mu);
    if (!w->aborted && id >= 0)
        w->first_failed = id;
    w->aborted = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void world_abort(World *w)
{
    pthread_mutex_lock(&w->mu);
    w->aborted = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* false when the world was aborted (by this or another device). */
static bool barrier(World *w)
{
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pthread_mutex_unlock(&w->mu);
        return false;
    }
    int64_t gen = w->generation;
    if (++w->arrived == w->nlocal) {
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->cv);
    } else if (w->arrived + w->finished >= w->nlocal) {
        /* The others are done: nobody else will arrive. */
        w->aborted = w->stray = true;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (gen == w->generation && !w->aborted)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    bool ok = !w->aborted;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* A device is done with its program: devices still waiting in a
 * collective for it never get their peer (in an SPMD program every
 * device reaches every collective; one that took another branch or loop
 * trip count did not). */
static void device_finished(World *w)
{
    pthread_mutex_lock(&w->mu);
    w->finished++;
    if (w->arrived > 0 && w->arrived + w->finished >= w->nlocal) {
        w->aborted = w->stray = true;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---- across hosts: the leader's exchange ---- */

static bool on_this_host(const World *w, int64_t g)
{
    return g >= w->first && g < w->first + w->nlocal;
}

static IrStatus oom(IrDiag *d)
{
    return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
}

static int64_t host_of(const World *w, int64_t g)
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
static bool reads_one(const IrInstr *ins)
{
    return ins->op == OP_COLLECTIVE_PERMUTE || ins->op == OP_COLLECTIVE_BROADCAST;
}

/* The hosts seen through collective ins's groups: color[h] is the
 * smallest host joined to h by a chain of groups (permute: pairs) with
 * members on several hosts, -1 for a host joined to none; every host
 * computes the same array (so every rank checks in at the same
 * collectives, transport.h). For permute and broadcast src[g] (ndev
 * entries) is the device g reads, -1 none. *any: some group spans hosts. */
static IrStatus host_colors(World *w, const IrModule *m, const IrInstr *ins, int32_t *color, int64_t *src, bool *any,
                            bool *ordered, IrDiag *d)
{
    int64_t hosts = w->ndev / w->nlocal;
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int32_t *parent = ts_malloc((size_t)hosts * sizeof *parent);
    /* A permute's pair is two entries, also on one device. */
    int64_t *members = ts_malloc((size_t)(w->ndev > 2 ? w->ndev : 2) * sizeof *members);
    IrStatus st = parent && members ? IR_OK : oom(d);
    for (int64_t h = 0; parent && h < hosts; h++)
        parent[h] = (int32_t)h;
    *any = false;
    *ordered = ins->op != OP_COLLECTIVE_PERMUTE;
    for (int64_t g = 0; st == IR_OK && g < w->ndev; g++) {
        int32_t size = 0, idx = 0;
        if (ins->op == OP_COLLECTIVE_PERMUTE) {
            members[0] = rt_coll_permute_source(ins, &cw, g);
            members[1] = g;
            size = members[0] >= 0 ? 2 : 0;
        } else if ((st = rt_coll_group(m, ins, &cw, g, members, &size, &idx, d)) != IR_OK) {
            break;
        }
        if (src)
            src[g] = size > 0 ? members[0] : -1;
        /* Each group once (from its first member), each pair once. */
        if (ins->op != OP_COLLECTIVE_PERMUTE && members[0] != g)
            continue;
        for (int32_t j = 1; j < size; j++) {
            *ordered = *ordered && host_of(w, members[j]) > host_of(w, members[j - 1]);
            int64_t a = find_root(parent, host_of(w, members[0])), b = find_root(parent, host_of(w, members[j]));
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

/* The byte counters' name for ins (transport.h). */
static RtXferKind xfer_kind(const IrInstr *ins)
{
    switch (ins->op) {
    case OP_ALL_REDUCE: case OP_COLLECTIVE_REDUCE: return RT_XK_ALL_REDUCE;
    case OP_ALL_GATHER: return RT_XK_ALL_GATHER;
    case OP_REDUCE_SCATTER: return RT_XK_REDUCE_SCATTER;
    case OP_ALL_TO_ALL: case OP_RAGGED_ALL_TO_ALL: return RT_XK_ALL_TO_ALL;
    case OP_COLLECTIVE_PERMUTE: return RT_XK_PERMUTE;
    case OP_COLLECTIVE_BROADCAST: return RT_XK_BROADCAST;
    default: return RT_XK_OTHER;
    }
}

/* The bytes of one device's operands (every device's: one program), or
 * an error for tuple operands. */
static IrStatus operand_bytes(World *w, size_t *b, IrDiag *d)
{
    DevValue *const *mine = w->ops[w->first];
    *b = 0;
    if (w->nops < 1)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "a collective without operands");
    for (int32_t k = 0; k < w->nops; k++) {
        if (mine[k]->shape.type == IR_TUPLE)
            return ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                            "a collective of tuple operands across hosts is not supported");
        *b += (size_t)mine[k]->nbytes;
    }
    return IR_OK;
}

/* Remote device g's operands from `bytes` (w->nops of them, shaped as
 * this host's): w->ops[g] and w->remote[g]. */
static IrStatus install_remote(World *w, int64_t g, const uint8_t *bytes, IrDiag *d)
{
    DevValue *const *mine = w->ops[w->first];
    int32_t n = w->nops;
    DevValue **v = ts_calloc((size_t)n, sizeof *v);
    w->remote[g] = v;
    w->ops[g] = v;
    size_t o = 0;
    for (int32_t k = 0; v && k < n; k++) {
        if (!(v[k] = dev_value_new_uninit(&mine[k]->shape)))
            break;
        if (v[k]->nbytes)
            memcpy(v[k]->data, bytes + o, (size_t)v[k]->nbytes);
        o += (size_t)v[k]->nbytes;
    }
    return v && v[n - 1] ? IR_OK : oom(d);
}

/* Device g's operands appended at buf + *o. */
static void pack_operands(const World *w, int64_t g, uint8_t *buf, size_t *o)
{
    for (int32_t k = 0; k < w->nops; k++) {
        if (w->ops[g][k]->nbytes)
            memcpy(buf + *o, w->ops[g][k]->data, (size_t)w->ops[g][k]->nbytes);
        *o += (size_t)w->ops[g][k]->nbytes;
    }
}

/* The operands of every host of this host's color copied into ops[]
 * (one MPI all-gather among those hosts, over their communicator): each
 * host sends its devices' operands, device by device, operand by
 * operand. Hosts of other colors hold no member of this host's groups. */
static IrStatus exchange_in(World *w, const IrInstr *ins, const int32_t *color, IrDiag *d)
{
    size_t b = 0;
    IrStatus st = operand_bytes(w, &b, d);
    if (st != IR_OK)
        return st;
    int64_t hosts = w->ndev / w->nlocal, me = host_of(w, w->first), k = 0;
    for (int64_t h = 0; h < hosts; h++)
        k += color[me] >= 0 ? color[h] == color[me] : h == me;
    size_t block = b * (size_t)w->nlocal;
    uint8_t *send = ts_malloc(block + 1), *recv = ts_malloc(block * (size_t)k + 1);
    st = send && recv ? IR_OK : oom(d);
    size_t o = 0;
    for (int64_t g = w->first; st == IR_OK && g < w->first + w->nlocal; g++)
        pack_operands(w, g, send, &o);
    if (st == IR_OK)
        st = rt_transport_allgather_in(w->t, color, xfer_kind(ins), send, block, recv, d);
    w->nremote = w->nops;
    /* Block j is the j-th host of the color, in host order. */
    int64_t j = 0;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++) {
        if (color[me] < 0 ? h != me : color[h] != color[me])
            continue;
        for (int64_t l = 0; h != me && st == IR_OK && l < w->nlocal; l++)
            st = install_remote(w, h * w->nlocal + l, recv + (size_t)j * block + (size_t)l * b, d);
        j++;
    }
    ts_free(send);
    ts_free(recv);
    return st;
}

/* Permute and broadcast: each device reads one device's operands
 * (src[], host_colors): host A sends host B, in one message, the
 * operands of A's devices that some device of B reads, in device order;
 * B receives the same list from A. Nothing else moves. */
static IrStatus exchange_p2p(World *w, const IrInstr *ins, const int64_t *src, IrDiag *d)
{
    size_t b = 0;
    IrStatus st = operand_bytes(w, &b, d);
    if (st != IR_OK)
        return st;
    int64_t hosts = w->ndev / w->nlocal, me = host_of(w, w->first), l = w->nlocal;
    /* wanted[s] = stamp: device s is in the list of the current pair. */
    int64_t *wanted = ts_malloc((size_t)w->ndev * sizeof *wanted);
    RtXfer *sends = ts_calloc((size_t)hosts, sizeof *sends), *recvs = ts_calloc((size_t)hosts, sizeof *recvs);
    int32_t nsend = 0, nrecv = 0;
    st = wanted && sends && recvs ? IR_OK : oom(d);
    for (int64_t s = 0; wanted && s < w->ndev; s++)
        wanted[s] = -1;
    for (int64_t h = 0; st == IR_OK && h < hosts; h++) {
        if (h == me)
            continue;
        /* To h: my devices that h's devices read. From h: h's devices mine read. */
        for (int pass = 0; st == IR_OK && pass < 2; pass++) {
            int64_t reader = pass ? me : h, holder = pass ? h : me, stamp = 2 * h + pass, cnt = 0;
            for (int64_t g = reader * l; g < (reader + 1) * l; g++)
                if (src[g] >= 0 && host_of(w, src[g]) == holder && wanted[src[g]] != stamp) {
                    wanted[src[g]] = stamp;
                    cnt++;
                }
            if (!cnt)
                continue;
            RtXfer *x = pass ? &recvs[nrecv++] : &sends[nsend++];
            x->host = (int)h;
            x->bytes = b * (size_t)cnt;
            x->buf = ts_malloc(x->bytes + 1);
            if (!x->buf) {
                st = oom(d);
                break;
            }
            size_t o = 0;
            for (int64_t s = holder * l; !pass && s < (holder + 1) * l; s++)
                if (wanted[s] == stamp)
                    pack_operands(w, s, x->buf, &o);
        }
    }
    int64_t what = (int64_t)b;
    if (st == IR_OK)
        st = rt_transport_exchange(w->t, xfer_kind(ins), what, sends, nsend, recvs, nrecv, d);
    w->nremote = w->nops;
    for (int32_t j = 0; st == IR_OK && j < nrecv; j++) {
        int64_t h = recvs[j].host, stamp = 2 * h + 1;
        size_t o = 0;
        for (int64_t s = h * l; st == IR_OK && s < (h + 1) * l; s++)
            if (wanted[s] == stamp) {
                st = install_remote(w, s, (const uint8_t *)recvs[j].buf + o, d);
                o += b;
            }
    }
    for (int32_t j = 0; sends && j < nsend; j++)
        ts_free(sends[j].buf);
    for (int32_t j = 0; recvs && j < nrecv; j++)
        ts_free(recvs[j].buf);
    ts_free(sends);
    ts_free(recvs);
    ts_free(wanted);
    return st;
}

/* reduce_across for a color with one group spanning hosts (the group of
 * device `first`; members[] has room for every device): the result is
 * allocated once for the host and rt_transport_allreduce_into reduces
 * into it from the local members' operands, in group order. */
static IrStatus reduce_one_across(World *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const int32_t *color,
                                  int64_t first, int64_t *members, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int32_t idx = 0, size = 0, nsrc = 0;
    IrStatus st = rt_coll_group(m, ins, &cw, first, members, &size, &idx, d);
    const void **src = st == IR_OK ? ts_malloc((size_t)size * sizeof *src) : NULL;
    DevValue *v = src ? dev_value_new_uninit(&mine->shape) : NULL;
    if (st == IR_OK && !v)
        st = oom(d);
    for (int32_t k = 0; st == IR_OK && k < size; k++)
        if (on_this_host(w, members[k]))
            src[nsrc++] = w->ops[members[k]][0]->data;
    if (st == IR_OK && nsrc == 0)
        st = ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "an all-reduce group without a member here");
    if (st == IR_OK)
        st = rt_transport_allreduce_into(w->t, color, xfer_kind(ins), mine->nbytes, src, nsrc, v->data,
                                         dev_value_elements(mine), mine->shape.type, op, d);
    for (int32_t k = 0; st == IR_OK && k < size; k++)
        if (on_this_host(w, members[k]))
            w->reduced[members[k]] = dev_value_ref(v);
    dev_value_unref(v);
    ts_free(src);
    return st;
}

/* All-reduce of one operand across hosts: for each group whose members
 * live on several hosts of this host's color, this host combines its own
 * members (in group order), then one MPI all-reduce among the color's
 * hosts over a buffer of every such group (hosts without members of a
 * group contribute the identity). reduced[g] holds the result for each
 * local member g of such a group. */
/* The groups of ins that span hosts of this host's color, by their
 * first member (cross[], in order of it; ndev entries of room). */
static IrStatus cross_groups(World *w, const IrModule *m, const IrInstr *ins, const int32_t *color, int64_t *members,
                             int64_t *cross, int64_t *ncross, IrDiag *d)
{
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = IR_OK;
    int32_t my = color[host_of(w, w->first)];
    *ncross = 0;
    for (int64_t g = 0; my >= 0 && st == IR_OK && g < w->ndev; g++) {
        int32_t idx = 0, size = 0;
        if (color[host_of(w, g)] != my)
            continue;
        st = rt_coll_group(m, ins, &cw, g, members, &size, &idx, d);
        if (st != IR_OK || members[0] != g)
            continue;
        bool spans = false;
        for (int32_t j = 1; j < size; j++)
            spans |= host_of(w, members[j]) != host_of(w, members[0]);
        if (spans)
            cross[(*ncross)++] = g;
    }
    return st;
}

static IrStatus reduce_across(World *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const RtReducer *any,
                              const int32_t *color, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    int64_t count = dev_value_elements(mine);
    size_t b = (size_t)mine->nbytes;
    IrType t = mine->shape.type;
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t ncross = 0;
    IrStatus st = members && cross ? cross_groups(w, m, ins, color, members, cross, &ncross, d) : oom(d);
    if (st == IR_OK && ncross == 1 && !any && rt_coll_can_combine(op, t)) {
        /* One group: straight from the local members' operands into the
         * result its local members share (no staging buffer, no copy out). */
        st = reduce_one_across(w, m, ins, op, color, cross[0], members, d);
        ts_free(members);
        ts_free(cross);
        return st;
    }
    uint8_t *buf = st == IR_OK ? ts_malloc(b * (size_t)ncross + 1) : NULL;
    bool *present = st == IR_OK ? ts_malloc((size_t)ncross + 1) : NULL;
    if (st == IR_OK && (!buf || !present))
        st = oom(d);
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t idx = 0, size = 0;
        st = rt_coll_group(m, ins, &cw, cross[j], members, &size, &idx, d);
        uint8_t *slice = buf + (size_t)j * b;
        bool first = true;
        for (int32_t k = 0; st == IR_OK && k < size; k++) {
            if (!on_this_host(w, members[k]))
                continue;
            if (first)
                memcpy(slice, w->ops[members[k]][0]->data, b);
            else if (any)
                st = dev_red_call(m, any->comp, t, slice, slice, w->ops[members[k]][0]->data, count, d);
            else
                dev_red_combine_array(op, t, slice, w->ops[members[k]][0]->data, count);
            first = false;
        }
        present[j] = !first;
        if (first && !any)
            dev_red_fill_identity(op, t, slice, count);
    }
    if (st == IR_OK && any)
        st = rt_transport_allreduce_any_in(w->t, color, xfer_kind(ins), (int64_t)b, buf, ncross, count, present, t,
                                           any, d);
    else if (st == IR_OK)
        st = rt_transport_allreduce_in(w->t, color, xfer_kind(ins), (int64_t)b, buf, count * ncross, t, op, d);
    /* One value per group, shared by reference by its local members: a
     * kernel writes in place only into a value it alone holds (refs ==
     * 1), so sharing is safe. */
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        DevValue *v = dev_value_new_uninit(&mine->shape);
        int32_t idx = 0, size = 0;
        if (!v) {
            st = oom(d);
            break;
        }
        if (b)
            memcpy(v->data, buf + (size_t)j * b, b);
        st = rt_coll_group(m, ins, &cw, cross[j], members, &size, &idx, d);
        for (int32_t k = 0; st == IR_OK && k < size; k++)
            if (on_this_host(w, members[k]))
                w->reduced[members[k]] = dev_value_ref(v);
        dev_value_unref(v);
    }
    ts_free(buf);
    ts_free(present);
    ts_free(members);
    ts_free(cross);
    return st;
}

/* One device per host, and every group's members on increasing hosts
 * (host_colors: each group is then one color, its hosts in group
 * order): an all-gather, reduce-scatter or all-to-all of one array whose
 * blocks along the dimension are contiguous (the dimensions before it of
 * size 1) moves straight between the operand and a new result, the
 * host's device's (w->reduced), with no packing and no copy of the
 * others' operands: the pattern of MPI_Allgather, MPI_Reduce_scatter_block
 * and MPI_Alltoall, pipelined (rt_transport_allgather_into,
 * rt_transport_reduce_scatter_into, rt_transport_alltoall_in). The decision
 * depends only on the program and the layout of devices, the same on
 * every host. *done: this path ran. */
static IrStatus direct_across(World *w, const IrModule *m, const IrInstr *ins, const HostGroups *hg, bool *done,
                              IrDiag *d)
{
    *done = false;
    bool kind = ins->op == OP_ALL_GATHER || ins->op == OP_REDUCE_SCATTER ||
                (ins->op == OP_ALL_TO_ALL && ins->a.dimensions.n > 0);
    if (!kind || w->nlocal != 1 || !hg->ordered || w->nops != 1 || ins->shape.type == IR_TUPLE)
        return IR_OK;
    const DevValue *x = w->ops[w->first][0];
    const IrShape *ps = &x->shape, *rs = &ins->shape;
    int64_t dim = ins->a.dimensions.n > 0 ? ins->a.dimensions.v[0] : 0;
    if (ps->type == IR_TUPLE || rs->type != ps->type || rs->rank != ps->rank || dim < 0 || dim >= ps->rank)
        return IR_OK;
    for (int32_t i = 0; i < dim; i++)
        if (ps->dims[i] != 1)
            return IR_OK;
    IrOpcode op = ins->op == OP_REDUCE_SCATTER && ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    if (ins->op == OP_REDUCE_SCATTER && (op == OP_COUNT || !rt_coll_can_combine(op, ps->type)))
        return IR_OK;
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    int32_t size = 0, mine = 0;
    IrStatus st = members ? rt_coll_group(m, ins, &cw, w->first, members, &size, &mine, d) : oom(d);
    /* The result shape the group gives (else the ordinary path says why). */
    bool fits = st == IR_OK;
    for (int32_t i = 0; fits && i < ps->rank; i++) {
        int64_t want = ps->dims[i];
        if (i == dim && ins->op == OP_ALL_GATHER)
            want *= size;
        else if (i == dim && ins->op == OP_REDUCE_SCATTER)
            want = ps->dims[i] % size == 0 ? ps->dims[i] / size : -1;
        else if (i == dim)
            fits = ps->dims[i] % size == 0;
        fits = fits && rs->dims[i] == want;
    }
    if (!fits) {
        ts_free(members);
        return st;
    }
    DevValue *v = dev_value_new_uninit(rs);
    st = v ? IR_OK : oom(d);
    if (st == IR_OK && ins->op == OP_ALL_GATHER) {
        st = rt_transport_allgather_into(w->t, hg->color, xfer_kind(ins), x->data, (size_t)x->nbytes, v->data,
                                         rt_coll_stream_into(w->tune.stream_bound, &v, 1, v->nbytes), d);
    } else if (st == IR_OK && ins->op == OP_REDUCE_SCATTER) {
        st = rt_transport_reduce_scatter_into(w->t, hg->color, xfer_kind(ins), x->nbytes, x->data, v->data,
                                              dev_value_elements(x), ps->type, op, d);
    } else if (st == IR_OK) {
        st = rt_transport_alltoall_in(w->t, hg->color, xfer_kind(ins), x->nbytes, x->data, v->data,
                                      (size_t)x->nbytes, rt_coll_stream_into(w->tune.stream_bound, &v, 1, v->nbytes), d);
    }
    if (st == IR_OK) {
        w->reduced[w->first] = v;
        *done = true;
    } else {
        dev_value_unref(v);
    }
    ts_free(members);
    return st;
}

/* The scatter dimension of a one-operand reduce-scatter or all-to-all
 * whose groups (all of size `size`) cut the operand evenly, or -1
 * (then the operands travel and coll.c reports what is wrong). */
static int64_t even_dim(const IrInstr *ins, const DevValue *v, int32_t size)
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
static IrStatus uniform_size(World *w, const IrModule *m, const IrInstr *ins, int64_t *members, int32_t *size,
                             IrDiag *d)
{
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = IR_OK;
    *size = -1;
    for (int64_t g = 0; st == IR_OK && g < w->ndev; g++) {
        int32_t sz = 0, idx = 0;
        st = rt_coll_group(m, ins, &cw, g, members, &sz, &idx, d);
        if (st == IR_OK && *size >= 0 && sz != *size) {
            *size = 0;
            break;
        }
        *size = sz;
    }
    return st;
}

/* Block i (of `size` along dim) of array src (shape s) to dst. */
static void copy_block(const IrShape *s, const uint8_t *src, int64_t dim, int32_t size, int32_t i, uint8_t *dst)
{
    int64_t soff[IR_MAX_RANK] = {0}, zero[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
    for (int32_t k = 0; k < s->rank; k++)
        ext[k] = s->dims[k];
    ext[dim] = s->dims[dim] / size;
    soff[dim] = ext[dim] * i;
    rt_copy_box(ir_type_size(s->type), s->rank, src, s->dims, soff, dst, ext, zero, ext);
}

/* Reduce-scatter of one operand across hosts, with a simple reducer:
 * for each group spanning hosts of this host's color (cross_groups),
 * this host combines its own members in group order (the identity where
 * it has none) and cuts the partial into the group's blocks; one MPI
 * reduce-scatter among the color's hosts brings each host only its own
 * members' blocks, combined over every host (reduced[g]). *done false:
 * the groups do not cut the operand evenly (exchange_in then). */
static IrStatus scatter_across(World *w, const IrModule *m, const IrInstr *ins, IrOpcode op, const int32_t *color,
                               bool *done, IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    IrType t = mine->shape.type;
    size_t es = ir_type_size(t);
    int64_t count = dev_value_elements(mine), hosts = w->ndev / w->nlocal, me = host_of(w, w->first);
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *counts = ts_calloc((size_t)hosts, sizeof(int64_t));
    int64_t ncross = 0;
    IrStatus st = members && cross && counts ? cross_groups(w, m, ins, color, members, cross, &ncross, d) : oom(d);
    int32_t size = 0, idx = 0;
    if (st == IR_OK)
        st = uniform_size(w, m, ins, members, &size, d);
    int64_t dim = st == IR_OK ? even_dim(ins, mine, size) : -1;
    *done = dim >= 0 && ins->shape.type == t && dev_value_elements(mine) / size == ir_shape_elements(&ins->shape);
    int64_t be = *done ? count / size : 0;
    /* Each host's segment: its members' blocks, group by group. */
    for (int64_t j = 0; *done && st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = rt_coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t i = 0; st == IR_OK && i < sz; i++)
            counts[host_of(w, members[i])] += be;
    }
    if (st != IR_OK || !*done) {
        ts_free(members);
        ts_free(cross);
        ts_free(counts);
        return st;
    }
    int64_t total = 0;
    for (int64_t h = 0; h < hosts; h++)
        total += counts[h];
    uint8_t *part = ts_malloc((size_t)count * es + 1), *send = ts_malloc((size_t)total * es + 1);
    uint8_t *recv = ts_malloc((size_t)counts[me] * es + 1);
    int64_t *at = ts_calloc((size_t)hosts, sizeof(int64_t)); /* each host's segment filled so far */
    st = part && send && recv && at ? IR_OK : oom(d);
    for (int64_t h = 1; at && h < hosts; h++)
        at[h] = at[h - 1] + counts[h - 1];
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = rt_coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        bool first = true;
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            if (!on_this_host(w, members[i]))
                continue;
            if (first)
                memcpy(part, w->ops[members[i]][0]->data, (size_t)count * es);
            else
                dev_red_combine_array(op, t, part, w->ops[members[i]][0]->data, count);
            first = false;
        }
        if (first)
            dev_red_fill_identity(op, t, part, count);
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            int64_t h = host_of(w, members[i]);
            copy_block(&mine->shape, part, dim, sz, i, send + (size_t)at[h] * es);
            at[h] += be;
        }
    }
    if (st == IR_OK)
        st = rt_transport_reduce_scatter_in(w->t, color, xfer_kind(ins), (int64_t)(be * (int64_t)es), send, counts,
                                            recv, t, op, d);
    /* This host's blocks, in the order they were packed. */
    int64_t o = 0;
    for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = rt_coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t i = 0; st == IR_OK && i < sz; i++) {
            if (!on_this_host(w, members[i]))
                continue;
            DevValue *v = dev_value_new_uninit(&ins->shape);
            if (!v) {
                st = oom(d);
                break;
            }
            if (be)
                memcpy(v->data, recv + (size_t)o * es, (size_t)be * es);
            o += be;
            w->reduced[members[i]] = v;
        }
    }
    ts_free(part);
    ts_free(send);
    ts_free(recv);
    ts_free(at);
    ts_free(members);
    ts_free(cross);
    ts_free(counts);
    return st;
}

/* All-to-all of one operand along a dimension across hosts: member i of
 * a group receives block i of every member's operand, so host A sends
 * host B, for each group spanning hosts, block i of each of A's members
 * for each of B's members i (point to point, one message per pair of
 * hosts), nothing else. The receiver rebuilds each remote member's
 * operand with just the blocks its own members read (the others zero),
 * and coll.c picks the results as for local operands. *done false: the
 * groups do not cut the operand evenly (exchange_in then). */
static IrStatus alltoall_across(World *w, const IrModule *m, const IrInstr *ins, const int32_t *color, bool *done,
                                IrDiag *d)
{
    const DevValue *mine = w->ops[w->first][0];
    size_t es = ir_type_size(mine->shape.type);
    int64_t count = dev_value_elements(mine), hosts = w->ndev / w->nlocal, me = host_of(w, w->first);
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    int64_t *cross = ts_malloc((size_t)w->ndev * sizeof(int64_t));
    RtXfer *sends = ts_calloc((size_t)hosts, sizeof *sends), *recvs = ts_calloc((size_t)hosts, sizeof *recvs);
    int64_t ncross = 0;
    IrStatus st = members && cross && sends && recvs ? cross_groups(w, m, ins, color, members, cross, &ncross, d)
                                                     : oom(d);
    int32_t size = 0, idx = 0;
    if (st == IR_OK)
        st = uniform_size(w, m, ins, members, &size, d);
    int64_t dim = st == IR_OK ? even_dim(ins, mine, size) : -1;
    *done = dim >= 0 && w->nops == 1;
    int64_t be = *done ? count / size : 0;
    /* Bytes of each pair's message: pass 0 sizes, pass 1 packs (host
     * order of peers, groups in order, senders in group order, their
     * blocks for the peer's members in group order). */
    for (int pass = 0; *done && st == IR_OK && pass < 2; pass++) {
        for (int64_t h = 0; pass && h < hosts; h++) {
            sends[h].host = recvs[h].host = (int)h;
            sends[h].buf = ts_malloc(sends[h].bytes + 1);
            recvs[h].buf = ts_malloc(recvs[h].bytes + 1);
            if (!sends[h].buf || !recvs[h].buf)
                st = oom(d);
            sends[h].bytes = recvs[h].bytes = 0; /* refilled as packed */
        }
        for (int64_t j = 0; st == IR_OK && j < ncross; j++) {
            int32_t sz = 0;
            st = rt_coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
            for (int32_t s = 0; st == IR_OK && s < sz; s++)
                for (int32_t r = 0; r < sz; r++) {
                    int64_t hs = host_of(w, members[s]), hr = host_of(w, members[r]);
                    if (hs == hr || (hs != me && hr != me))
                        continue;
                    if (hs == me) {
                        if (pass)
                            copy_block(&mine->shape, w->ops[members[s]][0]->data, dim, sz, r,
                                       (uint8_t *)sends[hr].buf + sends[hr].bytes);
                        sends[hr].bytes += (size_t)be * es;
                    } else {
                        recvs[hs].bytes += (size_t)be * es;
                    }
                }
        }
    }
    int32_t nsend = 0, nrecv = 0;
    for (int64_t h = 0; *done && st == IR_OK && h < hosts; h++) {
        /* Keep only the peers with data, in host order (their buffers move along). */
        if (sends[h].bytes)
            sends[nsend++] = sends[h];
        else
            ts_free(sends[h].buf);
        if (recvs[h].bytes)
            recvs[nrecv++] = recvs[h];
        else
            ts_free(recvs[h].buf);
        if (h >= nsend)
            sends[h].buf = NULL;
        if (h >= nrecv)
            recvs[h].buf = NULL;
    }
    if (*done && st == IR_OK)
        st = rt_transport_exchange(w->t, xfer_kind(ins), (int64_t)(be * (int64_t)es), sends, nsend, recvs, nrecv,
                                   d);
    /* Unpack in the order packed: remote senders' operands, with the
     * blocks of this host's members. */
    w->nremote = w->nops;
    int64_t *at = *done && st == IR_OK ? ts_calloc((size_t)hosts, sizeof(int64_t)) : NULL;
    int32_t *slot = at ? ts_malloc((size_t)hosts * sizeof(int32_t)) : NULL;
    if (*done && st == IR_OK && (!at || !slot))
        st = oom(d);
    for (int64_t h = 0; slot && h < hosts; h++)
        slot[h] = -1;
    for (int32_t k = 0; slot && k < nrecv; k++)
        slot[recvs[k].host] = k;
    for (int64_t j = 0; at && st == IR_OK && j < ncross; j++) {
        int32_t sz = 0;
        st = rt_coll_group(m, ins, &cw, cross[j], members, &sz, &idx, d);
        for (int32_t s = 0; st == IR_OK && s < sz; s++) {
            int64_t hs = host_of(w, members[s]);
            if (hs == me)
                continue;
            for (int32_t r = 0; st == IR_OK && r < sz; r++) {
                if (host_of(w, members[r]) != me)
                    continue;
                int64_t g = members[s];
                if (!w->remote[g]) {
                    DevValue **v = ts_calloc(1, sizeof *v);
                    if (!v || !(v[0] = dev_value_zeros(&mine->shape))) {
                        ts_free(v);
                        st = oom(d);
                        break;
                    }
                    w->remote[g] = w->ops[g] = v;
                }
                /* block r of sender g's operand */
                int64_t soff[IR_MAX_RANK] = {0}, zero[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
                const IrShape *sh = &mine->shape;
                for (int32_t q = 0; q < sh->rank; q++)
                    ext[q] = sh->dims[q];
                ext[dim] = sh->dims[dim] / sz;
                soff[dim] = ext[dim] * r;
                rt_copy_box(es, sh->rank, (const uint8_t *)recvs[slot[hs]].buf + at[hs], ext, zero,
                            w->remote[g][0]->data, sh->dims, soff, ext);
                at[hs] += be * (int64_t)es;
            }
        }
    }
    for (int64_t h = 0; sends && h < hosts; h++) {
        ts_free(sends[h].buf);
        ts_free(recvs[h].buf);
    }
    ts_free(at);
    ts_free(slot);
    ts_free(sends);
    ts_free(recvs);
    ts_free(members);
    ts_free(cross);
    return st;
}

/* May a reducer that is not proven commutative combine hierarchically?
 * Only if every group's members come host by host in ascending host
 * order (members of one host together): then combining each host's
 * members in group order, and the hosts in rank order (MPI's order for
 * a non-commutative operation), is the group order. Else the operands
 * travel and each device combines in group order (exchange_in). */
static IrStatus hosts_in_group_order(World *w, const IrModule *m, const IrInstr *ins, bool *ok, IrDiag *d)
{
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    IrStatus st = members ? IR_OK : oom(d);
    *ok = true;
    for (int64_t g = 0; st == IR_OK && *ok && g < w->ndev; g++) {
        int32_t size = 0, idx = 0;
        st = rt_coll_group(m, ins, &cw, g, members, &size, &idx, d);
        for (int32_t j = 1; st == IR_OK && members[0] == g && j < size; j++)
            *ok = *ok && host_of(w, members[j]) >= host_of(w, members[j - 1]);
    }
    ts_free(members);
    return st;
}

/* The leader's part of a collective across hosts, among the hosts its
 * groups join (host_colors; nothing when every group is inside a host):
 * the hierarchical all-reduce for one operand with a simple reducer,
 * point to point for permute and broadcast, else every operand of the
 * color's hosts everywhere among them. */
static IrStatus cached_colors(World *w, const IrModule *m, const IrInstr *ins, HostGroups **out, IrDiag *d)
{
    for (int32_t k = 0; k < w->nhg; k++)
        if (w->hg[k].name == ins->name && w->hg[k].op == ins->op) {
            *out = &w->hg[k];
            return IR_OK;
        }
    HostGroups *ng = ts_realloc(w->hg, (size_t)(w->nhg + 1) * sizeof *ng);
    if (!ng)
        return oom(d);
    w->hg = ng;
    HostGroups *h = &w->hg[w->nhg];
    *h = (HostGroups){.name = ins->name, .op = ins->op};
    h->color = ts_malloc((size_t)(w->ndev / w->nlocal) * sizeof *h->color);
    h->src = reads_one(ins) ? ts_malloc((size_t)w->ndev * sizeof *h->src) : NULL;
    IrStatus st = h->color && (h->src || !reads_one(ins))
                      ? host_colors(w, m, ins, h->color, h->src, &h->any, &h->ordered, d)
                      : oom(d);
    if (st != IR_OK) {
        ts_free(h->color);
        ts_free(h->src);
        return st;
    }
    w->nhg++;
    *out = h;
    return IR_OK;
}

/* Floats narrower than f32 (f16, bf16, f8): a sum rounded to them at
 * every step moves by an ulp with the order of its terms, more than the
 * oracle allows, so their reduce-scatters keep one process's group order
 * (the operands travel: exchange_in) instead of combining per host. */
static bool order_sensitive(IrType t)
{
    return ir_type_is_float(t) && ir_type_size(t) < 4;
}

static IrStatus leader_exchange(World *w, const IrModule *m, const IrInstr *ins, IrDiag *d)
{
    HostGroups *hg = NULL;
    IrStatus st = cached_colors(w, m, ins, &hg, d);
    const int32_t *color = hg ? hg->color : NULL;
    const int64_t *src = hg ? hg->src : NULL;
    bool any = hg && hg->any;
    IrOpcode op = ins->ncalled > 0 ? ir_simple_reducer(m, ins->called[0]) : OP_COUNT;
    /* A simple reducer MPI has no operation for (complex, f8): as any other. */
    if (op != OP_COUNT && w->ops[w->first][0]->shape.type != IR_TUPLE &&
        !rt_transport_builtin_op(w->t, w->ops[w->first][0]->shape.type, op))
        op = OP_COUNT;
    bool one = (ins->op == OP_ALL_REDUCE || ins->op == OP_COLLECTIVE_REDUCE) && ins->ncalled > 0 && w->nops == 1 &&
               ins->shape.type != IR_TUPLE && w->ops[w->first][0]->shape.type != IR_TUPLE;
    /* Any other reducer: a user-defined MPI operation runs it (mpi.c). */
    RtReducer red = {m, ins->ncalled > 0 ? ins->called[0] : -1, false};
    bool done = false;
    bool general = one && op == OP_COUNT && red.comp >= 0 && red.comp < m->ncomp && m->comp[red.comp]->nparam == 2;
    if (st == IR_OK && any && general) {
        red.commute = dev_red_commutes(m, red.comp);
        bool ordered = red.commute;
        if (!ordered)
            st = hosts_in_group_order(w, m, ins, &ordered, d);
        general = ordered;
    }
    if (st != IR_OK || !any) {
    } else if (one && op != OP_COUNT) {
        st = reduce_across(w, m, ins, op, NULL, color, d);
    } else if (general) {
        st = reduce_across(w, m, ins, op, &red, color, d);
    } else if ((st = direct_across(w, m, ins, hg, &done, d)) != IR_OK || done) {
        /* one device a host: straight from the operand into the result */
    } else if (ins->op == OP_REDUCE_SCATTER && op != OP_COUNT && w->nops == 1 && ins->shape.type != IR_TUPLE &&
               w->ops[w->first][0]->shape.type != IR_TUPLE && !order_sensitive(w->ops[w->first][0]->shape.type) &&
               (st = scatter_across(w, m, ins, op, color, &done, d)) == IR_OK && done) {
    } else if (st == IR_OK && ins->op == OP_ALL_TO_ALL && w->nops == 1 && w->ops[w->first][0]->shape.type != IR_TUPLE &&
               (st = alltoall_across(w, m, ins, color, &done, d)) == IR_OK && done) {
    } else if (st != IR_OK) {
    } else if (reads_one(ins)) {
        st = exchange_p2p(w, ins, src, d);
    } else {
        st = exchange_in(w, ins, color, d);
    }
    return st;
}

/* After everyone has read: drop the remote copies and group results. */
static void leader_cleanup(World *w)
{
    for (int64_t g = 0; g < w->ndev; g++) {
        for (int32_t k = 0; w->remote[g] && k < w->nremote; k++)
            dev_value_unref(w->remote[g][k]);
        ts_free(w->remote[g]);
        w->remote[g] = NULL;
        if (!on_this_host(w, g))
            w->ops[g] = NULL;
        dev_value_unref(w->reduced[g]);
        w->reduced[g] = NULL;
    }
}

/* ---- the collectives ---- */

static IrStatus coll_error(const IrModule *m, const IrInstr *ins, IrDiag *d, IrStatus st, const char *msg)
{
    return ir_error(d, st, m->file, m->src, ins->pos, "%s: %s", ins->name, msg);
}

/* A barrier of collective ins gave up: why. */
static IrStatus aborted(const World *w, const IrModule *m, const IrInstr *ins, IrDiag *d)
{
    return coll_error(m, ins, d, IR_ERUNTIME, w->stray ? "the other devices finished their program without reaching "
                                                         "this collective (they took another branch or trip count: "
                                                         "an SPMD program's devices must reach the same collectives)"
                                                       : "aborted: another device failed");
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
static int64_t local_representative(const World *w, const IrModule *m, const IrInstr *ins, const RtCollWorld *cw,
                                    int64_t me)
{
    int64_t rep = me;
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    int32_t size = 0, mine = 0;
    IrDiag quiet = {0};
    if (members && rt_coll_group(m, ins, cw, me, members, &size, &mine, &quiet) == IR_OK)
        for (int32_t k = 0; k < size; k++)
            if (on_this_host(w, members[k]) && members[k] < rep)
                rep = members[k];
    ir_diag_clear(&quiet);
    ts_free(members);
    return rep;
}

/* A group whose members are all on this host, all-reduce or all-gather
 * of one array (rt_coll_split_ok): every member computes its part of the
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

static IrStatus split_result(Device *dev, const IrModule *m, const IrInstr *ins, const int64_t *members,
                             int32_t size, int32_t mine, int64_t rep, IrOpcode op, DevValue **out, IrDiag *d)
{
    World *w = dev->w;
    int64_t bytes = ir_shape_bytes(&ins->shape);
    bool own = (int64_t)(size - 1) * bytes <= coll_copies_bytes(&w->tune);
    int32_t nout = own ? size : 1;
    /* Everything that can fail before the barrier: after it the others
     * write into this member's result. */
    enum { ON_STACK = 64 };
    DevValue *outs_stack[ON_STACK], **outs = nout <= ON_STACK ? outs_stack : ts_malloc((size_t)nout * sizeof *outs);
    void *scratch_stack[2 * ON_STACK],
        **scratch = size + nout <= 2 * ON_STACK ? scratch_stack : ts_malloc((size_t)(size + nout) * sizeof *scratch);
    DevValue *v = (own || rep == dev->id) && outs && scratch ? dev_value_new_uninit(&ins->shape) : NULL;
    w->shared[dev->id - w->first] = v;
    bool ok = barrier(w);
    bool ready = ok && outs && scratch && (v || (!own && rep != dev->id));
    for (int32_t q = 0; ready && q < nout; q++)
        ready = (outs[q] = w->shared[(own ? members[q] : rep) - w->first]) != NULL;
    if (ready)
        rt_coll_split_part(ins, (DevValue *const *const *)w->ops, members, size, op, mine, outs, nout, scratch,
                           rt_coll_stream_into(w->tune.stream_bound, outs, nout, bytes * nout));
    if (outs != outs_stack)
        ts_free(outs);
    if (scratch != scratch_stack)
        ts_free(scratch);
    if (!ok) {
        dev_value_unref(v);
        return aborted(w, m, ins, d);
    }
    if (!ready) {
        *out = v; /* collective_body frees it after the closing barrier */
        return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    }
    /* v (own, or the representative's shared result) is this device's
     * reference already; the other members take one of the shared. */
    *out = v ? v : dev_value_ref(w->shared[rep - w->first]);
    return IR_OK;
}

/* This device's result. Values are immutable, so where every member of a
 * group gets the same array (all-gather, all-reduce, broadcast) the group's
 * first member on this host computes it and the others take a reference:
 * one buffer per group and host instead of one per device (a replicated
 * 1.6 GB result on 8 devices is 1.6 GB, not 13), and the work is done
 * once. A member that finds no shared result (its representative failed)
 * computes its own, reaching the same error. One extra barrier. Groups
 * wholly on this host take split_result instead (the same one barrier). */
static IrStatus group_result(Device *dev, const IrModule *m, const IrInstr *ins, const RtCollWorld *cw,
                             int32_t nopnd, DevValue **out, IrDiag *d)
{
    World *w = dev->w;
    DevValue *const *const *ops = (DevValue *const *const *)w->ops;
    if (!group_identical(ins) || w->nlocal == 1)
        return rt_coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
    int64_t *members = ts_malloc((size_t)w->ndev * sizeof *members);
    if (!members) {
        /* The others still meet this device at the barrier. */
        w->shared[dev->id - w->first] = NULL;
        return barrier(w) ? coll_error(m, ins, d, IR_ENOMEM, "out of memory") : aborted(w, m, ins, d);
    }
    int32_t size = 0, mine = 0;
    IrDiag quiet = {0};
    bool local = !w->reduced[dev->id] &&
                 rt_coll_group(m, ins, cw, dev->id, members, &size, &mine, &quiet) == IR_OK;
    ir_diag_clear(&quiet);
    int64_t rep = dev->id;
    for (int32_t k = 0; local && k < size; k++) {
        local = on_this_host(w, members[k]);
        rep = members[k] < rep ? members[k] : rep;
    }
    IrOpcode op = OP_COUNT;
    IrStatus st = IR_OK;
    if (local && rt_coll_split_ok(m, ins, ops, members, size, nopnd, &op)) {
        st = split_result(dev, m, ins, members, size, mine, rep, op, out, d);
        ts_free(members);
        return st;
    }
    ts_free(members);
    rep = local_representative(w, m, ins, cw, dev->id);
    w->shared[dev->id - w->first] = NULL;
    if (rep == dev->id) {
        st = rt_coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
        w->shared[dev->id - w->first] = st == IR_OK ? *out : NULL;
    }
    if (!barrier(w)) {
        dev_value_unref(*out);
        *out = NULL;
        return aborted(w, m, ins, d);
    }
    if (rep != dev->id) {
        DevValue *v = w->shared[rep - w->first];
        st = v ? ((*out = dev_value_ref(v)), IR_OK)
               : rt_coll_result(m, ins, cw, dev->id, ops, nopnd, w->reduced[dev->id], out, d);
    }
    return st;
}

/* Two barriers around the data movement (local.c's header): publish the
 * operands, let the leader bring other hosts' in, compute this device's
 * result from the group's operands (coll.c), wait until everyone has
 * read before the operands may be freed. */
static IrStatus collective_body(Device *dev, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                                DevValue **operands, DevValue **out, IrDiag *d)
{
    World *w = dev->w;
    *out = NULL;
    w->ops[dev->id] = operands;
    w->nops = nopnd;
    w->at[dev->id - w->first] = ins->name;
    if (!barrier(w))
        return aborted(w, m, ins, d);
    /* Every local device must be in this collective (one program). */
    for (int64_t k = 0; k < w->nlocal; k++)
        if (w->at[k] != ins->name) {
            char msg[256];
            snprintf(msg, sizeof msg, "device %lld is in collective %s at the same time: the devices took different "
                     "paths through the program", (long long)(w->first + k), w->at[k] ? w->at[k] : "?");
            coll_error(m, ins, d, IR_ERUNTIME, msg);
            world_abort(w);
            return d->status;
        }
    bool leader = w->t && dev->id == w->first;
    if (w->t) {
        /* The leader moves this host's data; the others wait for it. */
        if (leader) {
            ir_diag_clear(&w->leader_diag);
            w->leader_status = leader_exchange(w, m, ins, &w->leader_diag);
        }
        if (!barrier(w))
            return aborted(w, m, ins, d);
        if (w->leader_status != IR_OK) {
            /* The leader's error names the instruction already (coll.c),
             * or is the transport's. */
            if (w->leader_diag.pos.line)
                ir_error(d, w->leader_status, w->leader_diag.file, m->src, w->leader_diag.pos, "%s",
                         w->leader_diag.msg ? w->leader_diag.msg : "failed");
            else
                coll_error(m, ins, d, w->leader_status,
                           w->leader_diag.msg ? w->leader_diag.msg : "exchange between hosts failed");
            world_abort(w);
            return d->status;
        }
    }
    RtCollWorld cw = {w->n, w->r, w->tune.stream_bound};
    IrStatus st = group_result(dev, m, ins, &cw, nopnd, out, d);
    /* Everyone must finish reading before operands may be released. */
    bool ok = barrier(w);
    if (leader)
        leader_cleanup(w);
    if (st == IR_OK && !ok) {
        dev_value_unref(*out);
        *out = NULL;
        return aborted(w, m, ins, d);
    }
    if (st != IR_OK) {
        /* A failed split_result hands back its buffer, which the other
         * members wrote into until the barrier: released only now. */
        dev_value_unref(*out);
        *out = NULL;
        world_abort(w);
    }
    return st;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A collective, timed: --stats reports the time devices spend in them
 * (waiting for the others included: that is what a collective costs). */
static IrStatus run_collective(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                               DevValue **operands, DevValue **out, IrDiag *d)
{
    Device *dev = ctx;
    double t0 = now_seconds();
    rt_async_drain(dev->async); /* one collective at a time, in program order */
    IrStatus st = collective_body(dev, m, ins, nopnd, operands, out, d);
    dev->coll_seconds += now_seconds() - t0;
    dev->coll_calls++;
    return st;
}

/* The -start/-done pairs: the collective runs on the device's
 * communication thread (coll_async.c); --stats counts the time a -done
 * waits for it, the part that did not overlap. */
static IrStatus async_body(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                           DevValue **out, IrDiag *d)
{
    return collective_body(ctx, m, ins, nopnd, operands, out, d);
}

static IrStatus start_collective(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd,
                                 DevValue **operands, void **handle, IrDiag *d)
{
    Device *dev = ctx;
    return rt_async_start(dev->async, m, ins, nopnd, operands, handle, d);
}

static IrStatus wait_collective(void *ctx, void *handle, DevValue **out, IrDiag *d)
{
    Device *dev = ctx;
    double t0 = now_seconds();
    IrStatus st = rt_async_wait(dev->async, handle, out, d);
    dev->coll_seconds += now_seconds() - t0;
    dev->coll_calls++;
    return st;
}

/* ---- host transfers of a run of several devices ---- */

/* The partitioned program's outfeed (and send to the host) gives every
 * device the whole value: the partitioner has no rule for them and
 * gathers the operand first (the replicate fallback). So device 0's
 * values are the run's and the other devices' copies are dropped (a
 * replay: device 0's own). An infeed cannot be split between devices:
 * refused. */
static IrStatus feed_refused(void *ctx, const IrModule *m, const IrInstr *ins, const IrShape *shape, DevValue **out,
                             IrDiag *d)
{
    (void)ctx;
    (void)shape;
    *out = NULL;
    char msg[200];
    snprintf(msg, sizeof msg, "%s talks to the host, and a value from the host feeds one device: run the reference "
             "or one partition and one replica with --infeed", ir_op_name(ins->op));
    return coll_error(m, ins, d, IR_EUNSUPPORTED, msg);
}

static IrStatus take_dropped(void *ctx, const IrModule *m, const IrInstr *ins, DevValue *v, IrDiag *d)
{
    (void)ctx;
    (void)m;
    (void)ins;
    (void)v;
    (void)d;
    return IR_OK;
}

/* ---- send and recv between devices ---- */

/* XLA's point-to-point channels, in a program every device runs: a send
 * leaves its data with its device (dev->sent, by channel_id); the recv of
 * the same channel is a collective-permute of what each device sent, over
 * the pairs of _xla_send_recv_source_target_pairs (ir_send_recv_pairs)
 * (same_link says which send a recv takes), run where the data is needed: at the recv-done when the recv has one
 * (XLA issues the recv before the send: recv, send, recv-done,
 * send-done), else at the recv itself (the send then comes first). Every
 * device reaches that point in the same order, so it is a collective like
 * the others (two barriers; across hosts the leader's exchange). Example:
 * pairs {{0,1},{1,2}} on 3 devices: device 1 receives device 0's data,
 * device 2 device 1's, device 0 zeros. */

/* The computation holding ins (instructions live in their computation's
 * array). */
static const IrComputation *comp_of(const IrModule *m, const IrInstr *ins)
{
    for (int32_t c = 0; c < m->ncomp; c++)
        if (ins >= m->comp[c]->instr && ins < m->comp[c]->instr + m->comp[c]->ninstr)
            return m->comp[c];
    return NULL;
}

/* The recv whose data recv-done `ins` completes: its operand, or, when
 * that comes through something else (a pipelined loop's parameter), the
 * module's recv of the same channel_id; NULL when there is none. */
static const IrInstr *recv_of(const IrModule *m, const IrInstr *ins)
{
    const IrComputation *c = comp_of(m, ins);
    const IrInstr *r = c && ins->nopnd > 0 && ins->opnd[0] >= 0 ? &c->instr[ins->opnd[0]] : NULL;
    if (r && r->op == OP_RECV)
        return r;
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            r = &m->comp[k]->instr[i];
            if (r->op == OP_RECV && !r->a.x->is_host_transfer && r->a.channel_id == ins->a.channel_id)
                return r; /* XLA gives a recv-done its recv's channel_id */
        }
    return NULL;
}

/* A send and its recv: the same pairs (as NCCL matches them: XLA's
 * pipelined loops give the send and the recv of one link different
 * channel_ids, and its NCCL groups reuse one channel for other pairs);
 * without pairs, the same channel_id. Sends of one link are received in
 * the order they were made. */
static bool same_link(const IrInstr *a, const IrInstr *b)
{
    const char *pa = ir_frontend_attr(a, "_xla_send_recv_source_target_pairs");
    const char *pb = ir_frontend_attr(b, "_xla_send_recv_source_target_pairs");
    if (pa && pb)
        return strcmp(pa, pb) == 0;
    return !pa && !pb && a->a.channel_id == b->a.channel_id;
}

/* Some recv-done completes recv (recv_of): its exchange waits for it. */
static bool has_recv_done(const IrModule *m, const IrInstr *recv)
{
    for (int32_t k = 0; k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            const IrInstr *rd = &m->comp[k]->instr[i];
            if (rd->op != OP_RECV_DONE || rd->a.x->is_host_transfer || rd->nopnd < 1)
                continue;
            const IrInstr *direct = &m->comp[k]->instr[rd->opnd[0]];
            if (direct == recv || (direct->op != OP_RECV && rd->a.channel_id == recv->a.channel_id))
                return true;
        }
    return false;
}

/* The oldest data this device sent on recv's link (taken), or NULL. */
static DevValue *take_sent(Device *dev, const IrInstr *recv)
{
    for (int32_t k = 0; k < dev->nsent; k++)
        if (same_link(dev->sent_by[k], recv)) {
            DevValue *v = dev->sent[k];
            memmove(&dev->sent[k], &dev->sent[k + 1], (size_t)(dev->nsent - k - 1) * sizeof *dev->sent);
            memmove(&dev->sent_by[k], &dev->sent_by[k + 1], (size_t)(dev->nsent - k - 1) * sizeof *dev->sent_by);
            dev->nsent--;
            return v;
        }
    return NULL;
}

static IrStatus keep_sent(Device *dev, const IrInstr *send, DevValue *v)
{
    DevValue **ns = ts_realloc(dev->sent, (size_t)(dev->nsent + 1) * sizeof *ns);
    if (ns)
        dev->sent = ns;
    const IrInstr **nb = ns ? ts_realloc(dev->sent_by, (size_t)(dev->nsent + 1) * sizeof *nb) : NULL;
    if (nb)
        dev->sent_by = nb;
    if (!ns || !nb) {
        dev_value_unref(v);
        return IR_ENOMEM;
    }
    dev->sent[dev->nsent] = v;
    dev->sent_by[dev->nsent++] = send;
    return IR_OK;
}

/* The exchange of a recv (pairs and channel from `recv`, data of shape
 * `data`): a collective-permute of what every device sent. */
static IrStatus p2p_exchange(Device *dev, const IrModule *m, const IrInstr *recv, const IrShape *data, DevValue **out,
                             IrDiag *d)
{
    int32_t cap = (int32_t)(2 * dev->w->ndev), n = 0;
    int64_t *pairs = ts_malloc((size_t)cap * sizeof *pairs);
    if (!pairs)
        return coll_error(m, recv, d, IR_ENOMEM, "out of memory");
    if (!ir_send_recv_pairs(recv, pairs, cap, &n)) {
        ts_free(pairs);
        return coll_error(m, recv, d, IR_EINPUT, "a recv between devices needs its pairs: "
                          "frontend_attributes={_xla_send_recv_source_target_pairs=\"{{0,1},...}\"}, at most one a "
                          "device");
    }
    IrInstr perm = *recv;
    perm.op = OP_COLLECTIVE_PERMUTE;
    perm.shape = *data;
    perm.a.use_global_device_ids = false;
    IrAttrsX px = *perm.a.x; /* perm lives only for this call */
    px.source_target_pairs = (IrI64List){.n = n, .v = pairs};
    perm.a.x = &px;
    DevValue *mine = take_sent(dev, recv);
    if (!mine)
        mine = dev_value_zeros(data);
    IrStatus st = mine ? collective_body(dev, m, &perm, 1, &mine, out, d)
                       : coll_error(m, recv, d, IR_ENOMEM, "out of memory");
    dev_value_unref(mine);
    ts_free(pairs);
    return st;
}

/* (data, u32[] context, token[]) or (data, token[]) of shape s from data
 * (taken). */
static IrStatus p2p_tuple(const IrShape *s, DevValue *data, DevValue **out)
{
    if (!data)
        return IR_ENOMEM;
    DevValue *el[3] = {data, NULL, NULL};
    for (int32_t k = 1; k < s->ntuple && k < 3; k++)
        el[k] = dev_value_zeros(&s->tuple[k]);
    *out = dev_value_tuple(s, s->ntuple < 3 ? s->ntuple : 3, el);
    return *out ? IR_OK : IR_ENOMEM;
}

static IrStatus run_p2p(void *ctx, const IrModule *m, const IrInstr *ins, int32_t nopnd, DevValue **operands,
                        DevValue **out, IrDiag *d)
{
    Device *dev = ctx;
    *out = NULL;
    const IrShape *s = &ins->shape;
    bool tuple = s->type == IR_TUPLE && s->ntuple >= 2;
    rt_async_drain(dev->async); /* a recv's exchange is a collective too */
    switch (ins->op) {
    case OP_SEND:
        if (!tuple || nopnd < 1)
            return coll_error(m, ins, d, IR_EINPUT, "a send is (data, u32[], token[]) of a data operand");
        if (keep_sent(dev, ins, dev_value_ref(operands[0])) != IR_OK)
            return coll_error(m, ins, d, IR_ENOMEM, "out of memory");
        return p2p_tuple(s, dev_value_ref(operands[0]), out) == IR_OK ? IR_OK
                                                                         : coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    case OP_SEND_DONE:
        *out = dev_value_zeros(s);
        return *out ? IR_OK : coll_error(m, ins, d, IR_ENOMEM, "out of memory");
    case OP_RECV: {
        if (!tuple)
            return coll_error(m, ins, d, IR_EINPUT, "a recv is (data, u32[], token[])");
        DevValue *data = NULL;
        IrStatus st = has_recv_done(m, ins) ? ((data = dev_value_zeros(&s->tuple[0])) ? IR_OK : IR_ENOMEM)
                                            : p2p_exchange(dev, m, ins, &s->tuple[0], &data, d);
        if (st == IR_OK)
            st = p2p_tuple(s, data, out);
        return st == IR_ENOMEM && d->status == IR_OK ? coll_error(m, ins, d, st, "out of memory") : st;
    }
    case OP_RECV_DONE: {
        const IrInstr *recv = recv_of(m, ins);
        if (!tuple)
            return coll_error(m, ins, d, IR_EINPUT, "a recv-done is (data, token[])");
        DevValue *data = NULL;
        IrStatus st = p2p_exchange(dev, m, recv ? recv : ins, &s->tuple[0], &data, d);
        if (st == IR_OK)
            st = p2p_tuple(s, data, out);
        return st == IR_ENOMEM && d->status == IR_OK ? coll_error(m, ins, d, st, "out of memory") : st;
    }
    default:
        return coll_error(m, ins, d, IR_EINTERNAL, "not a send or recv");
    }
}

/* The tuning's fusion: COLL_FUSION_OFF runs every instruction on its own
 * (no fused loops), COLL_FUSION_ALL fuses arrays of any size, and
 * fusion_block N fuses arrays of any size in blocks of N elements through
 * the range kernels (tests use small uneven blocks and `all` so that
 * small models exercise both fused paths). Zero: the executor's
 * defaults. */
static void fusion_from_tuning(const CollTuning *t, DevExecOptions *opt)
{
    if (t->fusion == COLL_FUSION_OFF)
        opt->no_fusion = true;
    if (t->fusion == COLL_FUSION_ALL)
        opt->fuse_small = true;
    if (t->fusion_block > 0 && t->fusion_block <= (1 << 20))
        opt->fusion_block = t->fusion_block;
}

/* Every step runs the SPMD program on the device's shards; between steps
 * the aliased outputs replace their parameters (moved, rt_feed_aliases). */
static void device_main(Device *dev)
{
    DevCollectives coll = {.ctx = dev, .run = run_collective, .p2p = run_p2p};
    /* Without a queue (out of memory) the -start ops run at once. */
    if ((dev->async = rt_async_new(async_body, dev))) {
        coll.start = start_collective;
        coll.wait = wait_collective;
    }
    DevExecOptions opt = {
        .partition_id = dev->id % dev->w->n,
        .replica_id = dev->id / dev->w->n,
        .coll = &coll,
        .host = dev->host,
        .max_while_iterations = dev->max_trips,
    };
    fusion_from_tuning(&dev->w->tune, &opt);
    const IrModule *m = dev->c->spmd;
    int64_t steps = dev->steps > 1 ? dev->steps : 1;
    dev->status = IR_OK;
    for (int64_t s = 0; dev->status == IR_OK && s < steps; s++) {
        DevValue *r = NULL;
        double t0 = now_seconds();
        dev->status = dev_execute(m, m->entry, dev->nargs, dev->args, &opt, &r, &dev->diag);
        double t1 = now_seconds();
        if (dev->nstep_seconds < STEP_SAMPLES)
            dev->step_seconds[dev->nstep_seconds++] = t1 - t0;
        if (dev->status == IR_OK && dev->on_step && dev->on_step->fn)
            dev->on_step->fn(dev->on_step->ctx, s + 1, steps, t1 - t0, r);
        if (dev->status == IR_OK && s + 1 < steps)
            rt_feed_aliases(m, r, dev->args);
        else
            dev->result = r;
    }
    rt_async_free(dev->async);
    dev->async = NULL;
    if (dev->status != IR_OK)
        world_abort_by(dev->w, dev->id);
    else
        device_finished(dev->w);
}

static void *device_thread(void *arg)
{
    device_main(arg);
    return NULL;
}

static IrStatus device_job(DevDevice *dd, void *arg, IrDiag *d)
{
    /* The device's large tensors on its NUMA node (device/alloc.c); an
     * allocator that cannot be had leaves them to malloc (first touch on
     * the bound thread), which is still correct. */
    DevAllocator *al = NULL;
    IrDiag quiet = {0};
    if (dev_device_allocator(dd, "cpu", &al, &quiet) != IR_OK)
        al = NULL;
    ir_diag_clear(&quiet);
    (void)d;
    dev_alloc_use(al);
    device_main(arg);
    dev_alloc_use(NULL);
    return IR_OK; /* the device's own status is read from Device */
}

/* Cut every argument into the shards of partition p. */
static IrStatus shard_args(const PlanCluster *c, const RtArgs *args, int64_t p, RtArgs *out, IrDiag *d)
{
    out->nargs = args->nargs;
    out->args = ts_calloc((size_t)(args->nargs > 0 ? args->nargs : 1), sizeof(DevValue *));
    if (!out->args)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int32_t k = 0; k < args->nargs; k++) {
        IrStatus st = rt_shard_value(args->args[k], plan_param_sharding(c, k), p, &out->args[k], d);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* --steps: the SPMD module's aliases must be moveable shard for shard:
 * shapes checked by rt_check_aliases on the per-device program, shardings
 * here (an output sharded unlike its parameter would need a reshard
 * through the whole value: refused, naming both). */
static IrStatus check_step_aliases(const PlanCluster *c, IrDiag *d)
{
    IrArena *a = ir_arena_new();
    IrStatus st = a ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    /* Shardings first: a mismatch also makes the shard shapes differ, and
     * the shardings say why. Bad indices are left to rt_check_aliases. */
    for (int32_t k = 0; st == IR_OK && k < c->spmd->nalias; k++) {
        const IrAlias *al = &c->spmd->alias[k];
        const IrSharding *os = plan_root_sharding(c);
        const IrShape *shape = &c->out_shape;
        bool valid = al->param_number >= 0 && al->param_number < c->nparam;
        for (int32_t j = 0; valid && os && j < al->output_index.n; j++) {
            int64_t e = al->output_index.v[j];
            valid = shape->type == IR_TUPLE && e >= 0 && e < shape->ntuple;
            if (valid) {
                os = shd_tuple_element(a, os, shape, (int32_t)e);
                shape = &shape->tuple[e];
            }
        }
        if (!valid)
            continue;
        const IrSharding *ps = plan_param_sharding(c, (int32_t)al->param_number);
        if (!os) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        } else if (!ir_sharding_equal(os, ps)) {
            char *x = ir_sharding_str(os), *y = ir_sharding_str(ps);
            st = ir_error(d, IR_EUNSUPPORTED, NULL, NULL, (IrPos){0, 0},
                          "--steps: the output aliased to parameter %lld is sharded %s but the parameter %s; "
                          "the partitioned program cannot feed it to the next step without a reshard",
                          (long long)al->param_number, x ? x : "?", y ? y : "?");
            ts_free(x);
            ts_free(y);
        }
    }
    ir_arena_free(a);
    return st == IR_OK ? rt_check_aliases(c->spmd, d) : st;
}

/* Run every local device: on executor threads bound to their cores
 * (device.h), or on plain threads when hwloc gives no devices. */
static IrStatus start_devices(World *w, Device *devs, const RtRunOptions *o, RtRunStats *stats, IrDiag *d)
{
    DevTopology *topo = NULL;
    DevDevices *set = NULL;
    IrDiag hd = {0};
    DevDevicesOptions dopt = {.no_bind = o && o->no_bind};
    bool have = w->nlocal <= DEV_MAX_LOCAL_DEVICES && dev_topology_load(&topo, &hd) == IR_OK &&
                dev_devices_create(topo, (int32_t)w->nlocal, &dopt, &set, &hd) == IR_OK;
    if (stats) {
        stats->ndevices = (int32_t)w->nlocal;
        stats->bind_note = have ? NULL : "hwloc gave no devices; plain threads";
    }
    if (have) {
        void **args = ts_calloc((size_t)w->nlocal, sizeof *args);
        IrStatus st = args ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
        for (int64_t k = 0; args && k < w->nlocal; k++)
            args[k] = &devs[k];
        if (st == IR_OK)
            st = dev_devices_run_all(set, device_job, args, d);
        for (int32_t k = 0; stats && k < set->n; k++) {
            DevDevice *dd = &set->dev[k];
            stats->nbound += dd->bound;
            if (!dd->bound && !stats->bind_note)
                stats->bind_note = dd->bind_note;
            DevAllocator *al = NULL;
            if (k == 0 && dev_device_allocator(dd, "cpu", &al, &hd) == IR_OK) {
                DevAllocStats as;
                dev_allocator_stats(al, &as);
                stats->membind = as.membind;
                stats->numa_node = as.numa_node;
                stats->membind_errno = as.membind_errno;
            }
        }
        if (stats)
            stats->blas_threads = set->blas_threads;
        ts_free(args);
        dev_devices_free(set);
        ir_diag_clear(&hd);
        return st;
    }
    ir_diag_clear(&hd);
    pthread_t *th = ts_calloc((size_t)w->nlocal, sizeof *th);
    if (!th)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    IrStatus st = IR_OK;
    int64_t started = 0;
    for (; started < w->nlocal; started++)
        if (pthread_create(&th[started], NULL, device_thread, &devs[started]) != 0) {
            world_abort(w);
            st = ir_error(d, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "cannot start device thread");
            break;
        }
    for (int64_t k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    ts_free(th);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A step lasts as long as its slowest local device: the first step's
 * time, and the median of the next ones (warm: buffers reused). */
static void step_stats(const Device *devs, int64_t nlocal, RtRunStats *stats)
{
    double slow[STEP_SAMPLES];
    int32_t n = devs[0].nstep_seconds;
    for (int32_t s = 0; s < n; s++) {
        slow[s] = 0;
        for (int64_t k = 0; k < nlocal; k++)
            if (s < devs[k].nstep_seconds && devs[k].step_seconds[s] > slow[s])
                slow[s] = devs[k].step_seconds[s];
    }
    stats->nsteps = n;
    stats->stream_bound = devs[0].w->tune.stream_bound;
    rt_coll_stream_verdicts(stats->stream_verdict);
    stats->first_step_seconds = n > 0 ? slow[0] : 0;
    if (n > 1) {
        qsort(slow + 1, (size_t)(n - 1), sizeof *slow, cmp_double);
        stats->warm_step_seconds = (n - 1) % 2 ? slow[1 + (n - 1) / 2]
                                               : (slow[(n - 1) / 2] + slow[(n - 1) / 2 + 1]) / 2;
    }
}

static void free_device(Device *dev)
{
    for (int32_t k = 0; k < dev->nargs && dev->args; k++)
        dev_value_unref(dev->args[k]);
    ts_free(dev->args);
    for (int32_t k = 0; k < dev->nsent; k++)
        dev_value_unref(dev->sent[k]);
    ts_free(dev->sent);
    ts_free(dev->sent_by);
    dev_value_unref(dev->result);
    ir_diag_clear(&dev->diag);
}

IrStatus rt_run_devices(const PlanCluster *c, RtArgs *shards, int64_t first, int64_t nlocal, RtTransport *t,
                        const RtRunOptions *o, RtRunStats *stats, DevValue **results, IrDiag *d)
{
    World w = {.n = c->num_partitions, .r = c->num_replicas, .first = first, .nlocal = nlocal, .t = t,
               .first_failed = -1};
    if (o && o->tune)
        w.tune = *o->tune;
    w.ndev = w.n * w.r;
    int64_t steps = o && o->steps > 1 ? o->steps : 1;
    if (stats)
        *stats = (RtRunStats){0};
    IrStatus st = IR_OK;
    if (w.ndev < 1 || w.ndev > IR_MAX_DEVICES || nlocal < 1 || first < 0 || first + nlocal > w.ndev ||
        (!t && nlocal != w.ndev))
        st = ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "devices [%lld, %lld) of %lld: out of range",
                      (long long)first, (long long)(first + nlocal), (long long)w.ndev);
    if (st == IR_OK && steps > 1)
        st = check_step_aliases(c, d);
    Device *devs = st == IR_OK ? ts_calloc((size_t)nlocal, sizeof *devs) : NULL;
    if (st == IR_OK) {
        w.ops = ts_calloc((size_t)w.ndev, sizeof *w.ops);
        w.remote = ts_calloc((size_t)w.ndev, sizeof *w.remote);
        w.reduced = ts_calloc((size_t)w.ndev, sizeof *w.reduced);
        w.shared = ts_calloc((size_t)nlocal, sizeof *w.shared);
        w.at = ts_calloc((size_t)nlocal, sizeof *w.at);
        if (!devs || !w.ops || !w.remote || !w.reduced || !w.shared || !w.at)
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    /* Several devices: device 0 gives the run its outfeeds (above). */
    DevHostTransfers lead = {0}, other = {.feed = feed_refused, .take = take_dropped};
    if (o && o->host)
        lead = (DevHostTransfers){.ctx = o->host->ctx, .feed = feed_refused, .take = o->host->take};
    /* The devices take the shards (also on failure: freed with them). */
    for (int64_t k = 0; devs && k < nlocal; k++) {
        const DevHostTransfers *host = !o || !o->host ? NULL : w.ndev == 1 ? o->host : first + k == 0 ? &lead : &other;
        devs[k] = (Device){.w = &w, .id = first + k, .c = c, .steps = steps, .host = host,
                           .on_step = o && first + k == 0 ? o->on_step : NULL,
                           .max_trips = o ? o->max_trips : 0,
                           .args = shards[k].args, .nargs = shards[k].nargs};
        shards[k] = (RtArgs){0};
    }
    for (int64_t k = 0; !devs && k < nlocal; k++)
        rt_args_free(&shards[k]);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    if (st == IR_OK)
        st = start_devices(&w, devs, o, stats, d);
    /* The first failing device's error, named; a root cause is preferred
     * over "aborted: another device failed". */
    int64_t pick = -1;
    if (st == IR_OK && w.first_failed >= first && w.first_failed < first + nlocal &&
        devs[w.first_failed - first].status != IR_OK)
        pick = w.first_failed - first;
    bool root_known = pick >= 0;
    for (int64_t k = 0; st == IR_OK && !root_known && k < nlocal; k++)
        if (devs[k].status != IR_OK && (pick < 0 || (devs[pick].status == IR_ERUNTIME && devs[k].status != IR_ERUNTIME)))
            pick = k;
    if (pick >= 0) {
        IrDiag *e = &devs[pick].diag;
        int64_t id = devs[pick].id;
        st = ir_error(d, devs[pick].status, e->file, NULL, e->pos, "device %lld (replica %lld, partition %lld): %s",
                      (long long)id, (long long)(id / w.n), (long long)(id % w.n), e->msg ? e->msg : "failed");
        if (e->line_text && d->line_text == NULL)
            d->line_text = ts_strdup(e->line_text);
    }
    for (int64_t k = 0; st == IR_OK && k < nlocal; k++) {
        results[k] = devs[k].result;
        devs[k].result = NULL;
        if (stats) {
            if (devs[k].coll_seconds > stats->coll_seconds)
                stats->coll_seconds = devs[k].coll_seconds;
            stats->coll_calls = devs[k].coll_calls;
        }
    }
    if (st == IR_OK && stats && devs)
        step_stats(devs, nlocal, stats);
    for (int64_t k = 0; devs && k < nlocal; k++)
        free_device(&devs[k]);
    ir_diag_clear(&w.leader_diag);
    for (int32_t k = 0; k < w.nhg; k++) {
        ts_free(w.hg[k].color);
        ts_free(w.hg[k].src);
    }
    ts_free(w.hg);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    ts_free(devs);
    ts_free(w.ops);
    ts_free(w.remote);
    ts_free(w.reduced);
    ts_free(w.shared);
    ts_free(w.at);
    return st;
}

IrStatus rt_run_local_ex(const PlanCluster *c, const RtArgs *args, const RtRunOptions *o, RtRunStats *stats,
                         DevValue **out, IrDiag *d)
{
    *out = NULL;
    int64_t ndev = c->num_partitions * c->num_replicas;
    if (ndev < 1 || ndev > IR_MAX_DEVICES)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "device count %lld out of range", (long long)ndev);
    DevValue **res = ts_calloc((size_t)ndev, sizeof *res);
    RtArgs *shards = ts_calloc((size_t)ndev, sizeof *shards);
    IrStatus st = res && shards ? IR_OK : ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    for (int64_t k = 0; st == IR_OK && k < ndev; k++)
        st = shard_args(c, args, k % c->num_partitions, &shards[k], d);
    if (st == IR_OK)
        st = rt_run_devices(c, shards, 0, ndev, NULL, o, stats, res, d);
    /* Replica 0's partitions hold the result; the others are equal. */
    if (st == IR_OK)
        st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, res, out, d);
    for (int64_t k = 0; k < ndev; k++) {
        if (res)
            dev_value_unref(res[k]);
        if (shards)
            rt_args_free(&shards[k]);
    }
    ts_free(res);
    ts_free(shards);
    return st;
}

IrStatus rt_run_local(const PlanCluster *c, const RtArgs *args, DevValue **out, IrDiag *d)
{
    return rt_run_local_ex(c, args, NULL, NULL, out, d);
}
