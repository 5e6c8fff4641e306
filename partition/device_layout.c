/*
 * device_layout.c: a compiled program's device layout (DeviceLayout), what
 * it looks like to the runtime and to people (the plan views): split-node trees of
 * the inputs and concat trees of the outputs, the device assignment
 * (replica x partition -> device -> host), per-host replica islands, every
 * instruction's sharding and per-device shape, and the compile result lines
 * TensorFlow's compiler prints (InputMapping, XlaInputShape,
 * XlaOutputShape).
 *
 * Split tree example: f32[7,4] on {devices=[2,2]0,1,2,3}: the root splits
 * dim 0 into 2, each child splits dim 1 into 2; leaves in row-major order:
 * devices 0 [0:4,0:2], 1 [0:4,2:4], 2 [4:7,0:2], 3 [4:7,2:4] (the last row
 * block has 3 valid rows of a 4-row shard).
 */
#include "partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Build the subtree for tile coordinates fixed in `coords[0..level)`
 * over the tiled dims `dims`. */
static bool build(IrArena *a, PlanTree *node, const IrShape *shape, const IrSharding *s,
                  const int32_t *dims, int32_t ndims, int32_t level, int64_t *coords)
{
    if (level == ndims) {
        int32_t k = ir_sharding_data_rank(s);
        node->leaf = true;
        node->rank = shape->rank;
        node->offset = ir_alloc_array(a, (size_t)shape->rank + 1, sizeof(int64_t));
        node->extent = ir_alloc_array(a, (size_t)shape->rank + 1, sizeof(int64_t));
        int64_t repl = s->kind == SHD_TILED ? s->ndevices / shd_total_tiles(s) : 1;
        node->devices = ir_alloc_array(a, (size_t)repl, sizeof(int64_t));
        if (!node->offset || !node->extent || !node->devices)
            return false;
        int64_t full[IR_MAX_RANK] = {0};
        for (int32_t d = 0; d < shape->rank; d++)
            full[d] = 0;
        for (int32_t j = 0; j < ndims; j++)
            full[dims[j]] = coords[j];
        for (int32_t d = 0; d < shape->rank; d++) {
            int64_t size = shd_shard_size(shape->dims[d], shd_tiles(s, d));
            node->offset[d] = full[d] * size;
            int64_t e = shape->dims[d] - node->offset[d];
            node->extent[d] = e < 0 ? 0 : e < size ? e : size;
        }
        if (s->kind != SHD_TILED) {
            node->ndevices = 0; /* every device */
            return true;
        }
        /* Devices holding this tile: every subgroup coordinate. The
         * data dims lead the tile assignment (row-major), so they are one
         * contiguous run of `repl` entries: found in O(repl), not by a
         * pass over every device per tile (that made the trees of a
         * 4096-device plan cost 4096^2). */
        int64_t lin = 0;
        for (int32_t d = 0; d < k; d++)
            lin = lin * s->tile[d] + full[d];
        for (int64_t j = 0; j < repl; j++)
            node->devices[node->ndevices++] = s->devices[lin * repl + j];
        return true;
    }
    int32_t dim = dims[level];
    node->dim = dim;
    node->pieces = shd_tiles(s, dim);
    node->child = ir_alloc_array(a, (size_t)node->pieces, sizeof(PlanTree));
    if (!node->child)
        return false;
    for (int64_t j = 0; j < node->pieces; j++) {
        coords[level] = j;
        if (!build(a, &node->child[j], shape, s, dims, ndims, level + 1, coords))
            return false;
    }
    return true;
}

PlanTree *plan_split_tree(IrArena *a, const IrShape *shape, const IrSharding *s)
{
    if (shape->type == IR_TUPLE)
        return NULL;
    int32_t dims[IR_MAX_RANK], n = 0;
    for (int32_t d = 0; d < shape->rank; d++)
        if (shd_tiles(s, d) > 1)
            dims[n++] = d;
    PlanTree *t = ir_alloc(a, sizeof *t);
    int64_t coords[IR_MAX_RANK];
    if (!t || !build(a, t, shape, s, dims, n, 0, coords))
        return NULL;
    return t;
}

static const IrSharding replicated = {.kind = SHD_REPLICATED};

static bool value_for(IrArena *a, PlanValue *v, int32_t index, const char *name, const IrShape *shape,
                      const IrSharding *s)
{
    v->index = index;
    v->name = name ? ir_strdup(a, name) : NULL;
    v->sharding = s ? s : &replicated;
    if (ir_shape_copy(a, &v->shape, shape) != IR_OK ||
        shd_shard_shape(a, shape, v->sharding, &v->device_shape) != IR_OK)
        return false;
    return true;
}

int64_t plan_peak_bytes(const IrModule *spmd)
{
    return mem_peak(spmd, NULL);
}

static IrStatus islands(DeviceLayout *p, IrDiag *d)
{
    IrArena *a = p->arena;
    int64_t n = p->num_partitions, r = p->num_replicas, l = p->local_devices;
    /* Device k is global id k: the assignment and every island are ranges
     * of the shared iota table, so a plan holds no table per device. */
    const int64_t *ids = ir_iota_table(n * r);
    p->device_assignment = ids;
    p->islands = ir_alloc_array(a, (size_t)(p->hosts * r), sizeof(PlanIsland));
    if (!ids || !p->islands)
        return ir_oom(d, "while planning");
    /* Hosts own consecutive devices; an island is a replica's devices on
     * one host. */
    for (int64_t h = 0; h < p->hosts; h++)
        for (int64_t rep = 0; rep < r; rep++) {
            int64_t lo = h * l, hi = lo + l;
            int64_t rlo = rep * n, rhi = rlo + n;
            int64_t a0 = lo > rlo ? lo : rlo, a1 = hi < rhi ? hi : rhi;
            if (a0 >= a1)
                continue;
            PlanIsland *is = &p->islands[p->nislands++];
            is->host = h;
            is->replica = rep;
            is->ndevices = (int32_t)(a1 - a0);
            is->devices = ids + a0;
        }
    return IR_OK;
}

/* Does s split some dim of the array shape (a per-device shape differs)? */
static bool splits(const IrShape *shape, const IrSharding *s)
{
    if (s->kind != SHD_TILED)
        return false;
    for (int32_t d = 0; d < shape->rank; d++)
        if (shd_shard_size(shape->dims[d], shd_tiles(s, d)) != shape->dims[d])
            return true;
    return false;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The instructions a person sees: the source's, with their shardings, or
 * (for a loaded plan) the SPMD module's, whose shapes are per device.
 * Names and shapes are the module's own (the plan borrows from the
 * modules it describes, as it does their shardings and the report); a
 * per-device shape is made only where a dim is split. Fallbacks are looked
 * up in a sorted copy of the report's list: O((n + f) log f), not n * f. */
static bool describe_instrs(DeviceLayout *p, const IrModule *src, const IrModule *spmd, const SpmdReport *rep)
{
    IrArena *a = p->arena;
    const IrComputation *e = ir_entry(src ? src : spmd);
    p->ninstrs = e->ninstr;
    p->instrs = ir_alloc_array(a, (size_t)(e->ninstr > 0 ? e->ninstr : 1), sizeof(PlanInstr));
    if (!p->instrs)
        return false;
    int32_t nf = rep ? rep->nfallback : 0;
    const char **fb = NULL;
    if (nf > 0) {
        if (!(fb = ir_alloc_array(a, (size_t)nf, sizeof *fb)))
            return false;
        memcpy(fb, rep->fallback, (size_t)nf * sizeof *fb);
        qsort(fb, (size_t)nf, sizeof *fb, cmp_str);
    }
    for (int32_t i = 0; i < e->ninstr; i++) {
        const IrInstr *ins = &e->instr[i];
        PlanInstr *pi = &p->instrs[i];
        pi->name = ins->name;
        pi->opcode = ir_op_name(ins->op);
        pi->sharding = src && ins->sharding ? ins->sharding : &replicated;
        pi->shape = ins->shape;
        if (src && (ins->shape.type == IR_TUPLE || splits(&ins->shape, pi->sharding))) {
            if (shd_shard_shape(a, &ins->shape, pi->sharding, &pi->device_shape) != IR_OK)
                return false;
        } else {
            pi->device_shape = ins->shape;
        }
        pi->fallback = nf > 0 && bsearch(&ins->name, fb, (size_t)nf, sizeof *fb, cmp_str) != NULL;
    }
    return true;
}

IrStatus device_layout_build(const IrModule *src, const IrModule *spmd, const SpmdReport *rep, const PlanIo *io,
                             int64_t hosts, int64_t local_devices, DeviceLayout **out, IrDiag *d)
{
    *out = NULL;
    int64_t n = spmd->num_partitions > 0 ? spmd->num_partitions : 1;
    int64_t r = spmd->replica_count > 0 ? spmd->replica_count : 1;
    if (hosts < 1)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "--hosts must be at least 1");
    if (local_devices == 0) {
        if ((n * r) % hosts != 0)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "%lld devices (%lld partitions x %lld replicas) cannot be split evenly over %lld hosts",
                            (long long)(n * r), (long long)n, (long long)r, (long long)hosts);
        local_devices = n * r / hosts;
    }
    if (local_devices * hosts != n * r)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "%lld hosts x %lld local devices is not %lld devices (%lld partitions x %lld replicas)",
                        (long long)hosts, (long long)local_devices, (long long)(n * r), (long long)n,
                        (long long)r);
    IrArena *a = ir_arena_new();
    DeviceLayout *p = a ? ir_alloc(a, sizeof *p) : NULL;
    if (!p) {
        ir_arena_free(a);
        return ir_oom(d, "while planning");
    }
    p->arena = a;
    p->module = ir_strdup(a, (src ? src : spmd)->name);
    p->cluster = ir_strdup(a, ir_entry(src ? src : spmd)->name);
    p->num_partitions = n;
    p->num_replicas = r;
    p->hosts = hosts;
    p->local_devices = local_devices;
    p->report = rep;
    IrStatus st = islands(p, d);
    if (st != IR_OK)
        goto fail;
    const IrComputation *pe = ir_entry(src ? src : spmd);
    p->ninputs = io->nparam;
    p->inputs = ir_alloc_array(a, (size_t)(io->nparam > 0 ? io->nparam : 1), sizeof(PlanValue));
    p->noutputs = ir_shape_leaf_count(io->out_shape);
    p->outputs = ir_alloc_array(a, (size_t)(p->noutputs > 0 ? p->noutputs : 1), sizeof(PlanValue));
    if (!p->inputs || !p->outputs)
        goto nomem;
    for (int32_t k = 0; k < io->nparam; k++) {
        const char *name = k < pe->nparam && pe->param[k] >= 0 ? pe->instr[pe->param[k]].name : NULL;
        if (!value_for(a, &p->inputs[k], k, name, &io->param_shape[k], io->param_sharding[k]))
            goto nomem;
    }
    const IrShape **leaves = ts_malloc((size_t)(p->noutputs > 0 ? p->noutputs : 1) * sizeof *leaves);
    if (!leaves)
        goto nomem;
    ir_shape_leaves(io->out_shape, leaves); /* one walk, not one per leaf */
    for (int32_t k = 0; k < p->noutputs; k++)
        if (!value_for(a, &p->outputs[k], k, NULL, leaves[k], shd_leaf(io->out_sharding, io->out_shape, k))) {
            ts_free(leaves);
            goto nomem;
        }
    ts_free(leaves);
    if (!describe_instrs(p, src, spmd, rep))
        goto nomem;
    if (plan_memory(p->arena, spmd, &p->memory) != IR_OK) {
        st = ir_oom(d, NULL);
        goto fail; /* the arena holds p: freed with it */
    }
    p->peak_bytes_per_device = p->memory.peak;
    *out = p;
    return IR_OK;
nomem:
    st = ir_oom(d, "while planning");
fail:
    ir_arena_free(a);
    return st;
}

void device_layout_free(DeviceLayout *p)
{
    if (p)
        ir_arena_free(p->arena);
}

char *device_layout_compile_result(const DeviceLayout *p)
{
    IrStrBuf b = {0};
    ir_sb_puts(&b, "// InputMapping {");
    for (int32_t k = 0; k < p->ninputs; k++)
        ir_sb_printf(&b, k ? ", %d" : "%d", (int)p->inputs[k].index);
    ir_sb_puts(&b, "}\n");
    for (int32_t k = 0; k < p->ninputs; k++) {
        ir_sb_puts(&b, "// XlaInputShape ");
        ir_sb_put_owned(&b, ir_shape_str(&p->inputs[k].shape, false));
        ir_sb_puts(&b, "\n");
    }
    ir_sb_puts(&b, "// XlaOutputShape (");
    for (int32_t k = 0; k < p->noutputs; k++) {
        if (k)
            ir_sb_puts(&b, ", ");
        ir_sb_put_owned(&b, ir_shape_str(&p->outputs[k].shape, false));
    }
    ir_sb_puts(&b, ")\n");
    return ir_sb_take(&b);
}
