/*
 * mpi_gather.c: the outputs of a run across hosts, to rank 0: every
 * host's devices' roots gathered (one gather of equal blocks through
 * coll/'s MPI transport, coll_mpi_gather), then, for a sharded output,
 * put back together from the first holder of each tile (shards.c). Run
 * state, not transport: it knows the program's root and its sharding.
 */
#include "runtime.h"

#include <string.h>

IrStatus rt_mpi_gather_devices(CollMpi *t, int64_t nlocal, DevValue **local, const bool *wanted, DevValue **all,
                               IrDiag *d)
{
    int rank = coll_mpi_rank(t), size = coll_mpi_size(t);
    /* Every device's root has the same per-device shape (one program):
     * serialize its leaves, gather the wanted devices at rank 0. Every
     * rank knows which devices each rank holds (rank r: [r * nlocal,
     * (r + 1) * nlocal)), so each sends its own wanted ones, padded to the
     * most any rank sends (one gather of equal blocks). */
    const IrShape *ds = &local[0]->shape;
    int32_t nleaf = ir_shape_leaf_count(ds);
    size_t b = 0;
    for (int32_t l = 0; l < nleaf; l++)
        b += (size_t)dev_value_leaf(local[0], l)->nbytes;
    int64_t ndev = nlocal * size, most = 0;
    for (int r = 0; r < size; r++) {
        int64_t c = 0;
        for (int64_t k = 0; k < nlocal; k++)
            c += !wanted || wanted[r * nlocal + k];
        most = c > most ? c : most;
    }
    uint8_t *send = ts_malloc(b * (size_t)most + 1);
    uint8_t *recv = rank == 0 ? ts_malloc(b * (size_t)most * (size_t)size + 1) : NULL;
    if (!send || (rank == 0 && !recv)) {
        ts_free(send);
        ts_free(recv);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", rank);
    }
    size_t o = 0;
    for (int64_t k = 0; k < nlocal; k++) {
        if (wanted && !wanted[rank * nlocal + k])
            continue;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(local[k], l);
            if (v->nbytes)
                memcpy(send + o, v->data, (size_t)v->nbytes);
            o += (size_t)v->nbytes;
        }
    }
    if (o < b * (size_t)most)
        memset(send + o, 0, b * (size_t)most - o);
    IrStatus gst = coll_mpi_gather(t, send, b * (size_t)most, recv, 0, d);
    ts_free(send);
    if (gst != IR_OK) {
        ts_free(recv);
        return gst;
    }
    if (rank != 0)
        return IR_OK;
    /* Device g's root from its bytes: the j-th wanted device of rank r is
     * block r * most + j. */
    IrStatus st = IR_OK;
    int64_t j = 0;
    for (int64_t g = 0; g < ndev; g++) {
        if (g % nlocal == 0)
            j = 0;
        all[g] = NULL;
        if (wanted && !wanted[g])
            continue;
        all[g] = dev_value_clone(local[0]);
        if (!all[g]) {
            st = ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
            break;
        }
        size_t off = ((size_t)(g / nlocal) * (size_t)most + (size_t)j++) * b;
        for (int32_t l = 0; l < nleaf; l++) {
            DevValue *v = dev_value_leaf(all[g], l);
            if (v->nbytes)
                memcpy(v->data, recv + off, (size_t)v->nbytes);
            off += (size_t)v->nbytes;
        }
    }
    for (int64_t g = 0; st != IR_OK && g < ndev; g++) {
        dev_value_unref(all[g]);
        all[g] = NULL;
    }
    ts_free(recv);
    return st;
}

IrStatus rt_mpi_gather_results(CollMpi *t, const PlanCluster *c, int64_t nlocal, DevValue **local,
                               DevValue **out, IrDiag *d)
{
    int rank = coll_mpi_rank(t), size = coll_mpi_size(t);
    *out = NULL;
    int64_t ndev = nlocal * size;
    DevValue **all = rank == 0 ? ts_calloc((size_t)ndev, sizeof *all) : NULL;
    if (rank == 0 && !all) /* the caller ends the job: the others wait in the gather */
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank 0: out of memory");
    /* Replica 0's partitions hold the root; of them, the first holder of
     * each tile is enough. Every rank computes the same set. */
    bool *wanted = ts_calloc((size_t)ndev, sizeof *wanted);
    if (!wanted || rt_unshard_needed(&c->out_shape, plan_root_sharding(c), c->num_partitions, wanted) != IR_OK) {
        ts_free(wanted); /* the caller ends the job */
        ts_free(all);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "rank %d: out of memory", rank);
    }
    IrStatus st = rt_mpi_gather_devices(t, nlocal, local, wanted, all, d);
    ts_free(wanted);
    if (st != IR_OK || rank != 0) {
        ts_free(all);
        return st;
    }
    /* Replica 0's partitions hold the root. */
    st = rt_unshard_value(&c->out_shape, plan_root_sharding(c), c->num_partitions, all, out, d);
    for (int64_t g = 0; g < ndev; g++)
        dev_value_unref(all[g]);
    ts_free(all);
    return st;
}
