/*
 * spmd.c: the SPMD partitioner's driver.
 *
 * Walks each computation in topological order and hands every instruction to
 * the handler of its op family (spmd_*.c); a handler writes instructions into
 * the destination computation that compute this device's shard of the
 * instruction's value under its sharding. The result is one program for all
 * partitions: shapes are per device, partition-id selects offsets from
 * constant tables, and collectives carry XLA's replica_groups and channel_id.
 *
 * Any instruction without a handler goes through spmd_fallback: operands
 * replicated, the op computed whole, the result resharded (correct, only
 * slower, and reported in the plan).
 */
#include "spmd_internal.h"

#include <assert.h>
#include <string.h>

static IrStatus err(PComp *pc, int32_t i, IrStatus st, const char *msg)
{
    const IrModule *m = pc->sp->src;
    const IrInstr *ins = &pc->sc->instr[i];
    return ir_error(pc->sp->d, st, m->file, m->src, ins->pos, "%s: %s", ins->name, msg);
}

IrStatus spmd_set_val(PComp *pc, int32_t i, int32_t v)
{
    /* Every failure but one records its diagnostic where it happens: the
     * sharding transforms (shd_*) and shape copies return NULL / an error
     * only when the arena cannot grow, so a failure without a diagnostic
     * is out of memory. */
    if (v < 0)
        return pc->sp->d->status != IR_OK ? pc->sp->d->status
                                           : err(pc, i, IR_ENOMEM, "out of memory while partitioning");
    assert(v < pc->dc->ninstr && "a value of the computation being built");
    pc->val[i] = v;
    return IR_OK;
}

/* Mark source instruction i as computed by the fallback (for the plan). */
static void spmd_note_fallback(PComp *pc, int32_t i)
{
    SpmdReport *r = pc->sp->report;
    if (!r)
        return;
    /* The list grows by doubling: its capacity is the next power of two
     * of nfallback, so a new array is needed when nfallback is 0 or a
     * power of two (n fallbacks cost O(n), not O(n^2)). */
    int32_t n = r->nfallback;
    if ((n & (n - 1)) == 0) {
        const char **nf = ir_alloc_array(r->arena, (size_t)(n ? 2 * n : 1), sizeof(char *));
        if (!nf)
            return;
        if (n)
            memcpy(nf, r->fallback, (size_t)n * sizeof(char *));
        r->fallback = nf;
    }
    const char *name = ir_strdup(r->arena, pc->sc->instr[i].name);
    if (name)
        r->fallback[r->nfallback++] = name;
}

/* Maximal shardings are computed on every device (see reshard.c); missing
 * shardings mean replicated. Tuple shardings keep their shape. */
static const IrSharding *effective(IrArena *a, const IrSharding *s, const IrShape *shape)
{
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    if (!s)
        return &repl;
    if (s->kind == SHD_MAXIMAL)
        return &repl;
    if (s->kind == SHD_TUPLE) {
        int32_t n = s->ntuple;
        IrSharding **el = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *el);
        if (!el)
            return NULL;
        for (int32_t k = 0; k < n; k++)
            el[k] = s->tuple[k].kind == SHD_MAXIMAL ? (IrSharding *)&repl : &s->tuple[k];
        IrSharding *t = shd_tuple(a, n, el);
        ts_free(el);
        return t;
    }
    (void)shape;
    return s;
}

/* Instructions in a manual region (sharding {manual}) run per device as
 * written: operands are manual too, shapes are the declared ones. */
static IrStatus spmd_manual(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    int32_t called[ins->ncalled > 0 ? ins->ncalled : 1];
    for (int32_t k = 0; k < ins->nopnd; k++)
        ops[k] = spmd_operand_as(pc, i, k, pc->shd[i]->kind == SHD_TUPLE
                                          ? shd_manual(spmd_tmp(pc)) : pc->shd[i]);
    for (int32_t k = 0; k < ins->ncalled; k++)
        if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
            return err(pc, i, IR_ENOMEM, "out of memory");
    return spmd_set_val(pc, i, spmd_emit_clone(pc, ins, &ins->shape, ins->nopnd, ops, ins->ncalled, called));
}

/* "Replicated" for a value of sharding s: the whole value on every device,
 * or, for partially manual shardings, the whole value on every device of
 * each manual group (manual groups never exchange data). */
static const IrSharding *replicated_like(PComp *pc, const IrSharding *s)
{
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    if (s->kind != SHD_TILED || !shd_has_manual_subgroup(s))
        return &repl;
    int64_t dims[IR_MAX_RANK];
    int32_t k = ir_sharding_data_rank(s);
    for (int32_t d = 0; d < k; d++)
        dims[d] = d;
    const IrSharding *r = shd_replicate_dims(spmd_tmp(pc), s, k, dims);
    return r ? r : &repl;
}

IrStatus spmd_fallback(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    const IrSharding *mine = pc->shd[i]->kind == SHD_TUPLE ? &pc->shd[i]->tuple[0] : pc->shd[i];
    const IrSharding *repl = pc->shd[i]->kind == SHD_TUPLE && pc->shd[i]->ntuple == 0
                                 ? replicated_like(pc, &(IrSharding){.kind = SHD_REPLICATED})
                                 : replicated_like(pc, mine);
    int32_t ops[ins->nopnd > 0 ? ins->nopnd : 1];
    int32_t called[ins->ncalled > 0 ? ins->ncalled : 1];
    for (int32_t k = 0; k < ins->nopnd; k++) {
        const IrSharding *os = pc->shd[ins->opnd[k]];
        if (os->kind == SHD_TUPLE && os->ntuple > 0)
            os = &os->tuple[0];
        ops[k] = spmd_operand_as(pc, i, k, shd_has_manual_subgroup(os) ? replicated_like(pc, os) : repl);
    }
    for (int32_t k = 0; k < ins->ncalled; k++)
        if ((called[k] = spmd_scalar_comp(pc->sp, ins->called[k])) < 0)
            return err(pc, i, IR_ENOMEM, "out of memory");
    int32_t v = spmd_emit_clone(pc, ins, &ins->shape, ins->nopnd, ops, ins->ncalled, called);
    if (ins->op != OP_PARTITION_ID && ins->op != OP_REPLICA_ID)
        spmd_note_fallback(pc, i);
    return spmd_set_val(pc, i, spmd_reshard(pc, v, &ins->shape, repl, pc->shd[i]));
}

static bool is_manual_instr(const PComp *pc, int32_t i)
{
    const IrSharding *s = pc->shd[i];
    if (s->kind == SHD_TUPLE)
        return s->ntuple > 0 && shd_is_manual(&s->tuple[0]);
    return shd_is_manual(s);
}

static IrStatus dispatch(PComp *pc, int32_t i)
{
    const IrInstr *ins = &pc->sc->instr[i];
    if (ins->op == OP_CUSTOM_CALL)
        return spmd_custom_call(pc, i);
    if (ins->op == OP_PARAMETER)
        return spmd_parameter(pc, i);
    if (is_manual_instr(pc, i))
        return spmd_manual(pc, i);
    switch (ir_op_family(ins->op)) {
    case FAM_ELEMENTWISE:
        return spmd_elementwise(pc, i); /* map: its scalar computation per element */
    case FAM_CONSTANT: return spmd_constant(pc, i);
    case FAM_IOTA: return spmd_iota(pc, i);
    case FAM_TUPLE: return spmd_tuple(pc, i);
    case FAM_BROADCAST: return spmd_broadcast(pc, i);
    case FAM_TRANSPOSE: return spmd_transpose(pc, i);
    case FAM_RESHAPE: return spmd_reshape(pc, i);
    case FAM_BITCAST_CONVERT: return spmd_bitcast_convert(pc, i);
    case FAM_SLICE: return spmd_slice(pc, i);
    case FAM_PAD: return spmd_pad(pc, i);
    case FAM_CONCATENATE: return spmd_concatenate(pc, i);
    case FAM_REVERSE: return spmd_reverse(pc, i);
    case FAM_DYNAMIC_SLICE: return spmd_dynamic_slice(pc, i);
    case FAM_DOT: return spmd_dot(pc, i);
    case FAM_CONVOLUTION: return spmd_convolution(pc, i);
    case FAM_REDUCE_WINDOW: return spmd_reduce_window(pc, i);
    case FAM_REDUCE: return spmd_reduce(pc, i);
    case FAM_SORT: return spmd_sort(pc, i);
    case FAM_CONTROL:
    case FAM_FUSION: return spmd_control(pc, i); /* fusion: a call that keeps its kind */
    case FAM_ASYNC: return spmd_async(pc, i);
    case FAM_RAGGED_DOT: return spmd_ragged_dot(pc, i);
    case FAM_RNG_BIT_GENERATOR: return spmd_rng_bit_generator(pc, i);
    case FAM_GATHER: return spmd_gather(pc, i);
    case FAM_SCATTER: return spmd_scatter(pc, i);
    case FAM_FFT:
    case FAM_TOPK:
    case FAM_LINALG: return spmd_local_batch(pc, i);
    case FAM_BATCH_NORM: return spmd_batch_norm(pc, i);
    default: return spmd_fallback(pc, i);
    }
}

int32_t spmd_partition_computation(Spmd *sp, int32_t comp, const IrSharding *const *param_shd,
                                   const IrSharding *root_shd)
{
    const IrComputation *sc = sp->src->comp[comp];
    const char *name = ir_unique_name(sp->dst, sc->name);
    int32_t ci = name ? ir_add_computation(sp->dst, name) : -1;
    if (ci < 0) {
        ir_oom(sp->d, "while partitioning");
        return -1;
    }
    PComp pc = {.sp = sp, .sc = sc, .dc = sp->dst->comp[ci], .pid = -1, .cur = -1};
    /* A nested computation is partitioned inside its call site's handler:
     * the call site is what the report names again after it. */
    SpmdSite caller = sp->site;
    int32_t *order = NULL;
    int32_t result = -1;
    /* Room for the usual growth (collectives, masks, offsets: about one
     * instruction in six on sharded models) in one allocation. */
    if (sc->ninstr >= 256 && ir_reserve_instrs(pc.dc, sc->ninstr + sc->ninstr / 4) != IR_OK) {
        ir_oom(sp->d, "while partitioning");
        return -1;
    }
    sp->depth++;
    pc.val = ts_malloc((size_t)(sc->ninstr > 0 ? sc->ninstr : 1) * sizeof(int32_t));
    pc.shd = ts_malloc((size_t)(sc->ninstr > 0 ? sc->ninstr : 1) * sizeof(IrSharding *));
    if (!pc.val || !pc.shd) {
        ir_oom(sp->d, "while partitioning");
        goto done;
    }
    for (int32_t i = 0; i < sc->ninstr; i++) {
        const IrInstr *ins = &sc->instr[i];
        const IrSharding *s = ins->sharding;
        if (ins->op == OP_PARAMETER && param_shd && ins->a.parameter_number < sc->nparam)
            s = param_shd[ins->a.parameter_number];
        pc.val[i] = -1;
        pc.shd[i] = effective(sp->dst->arena, s, &ins->shape);
        if (!pc.shd[i]) {
            ir_oom(sp->d, "while partitioning");
            goto done;
        }
    }
    if (ir_topo_order(sp->src, sc, &order, sp->d) != IR_OK)
        goto done;
    for (int32_t k = 0; k < sc->ninstr; k++) {
        sp->site = (SpmdSite){.comp = sc->name, .source = sc->instr[order[k]].name, .pos = sc->instr[order[k]].pos};
        pc.cur = order[k];
        if (dispatch(&pc, order[k]) != IR_OK)
            goto done;
        if (sp->depth == 1)
            ir_arena_reset(sp->tmp);
    }
    const IrSharding *want = effective(sp->dst->arena, root_shd, &sc->instr[sc->root].shape);
    if (!want) {
        ir_oom(sp->d, "while partitioning");
        goto done;
    }
    sp->site = (SpmdSite){.comp = sc->name, .source = sc->instr[sc->root].name, .output = true,
                          .pos = sc->instr[sc->root].pos};
    pc.cur = sc->root;
    SpmdWhy why = ir_sharding_equal(pc.shd[sc->root], want) ? sp->why
                                                            : spmd_why_output(&pc, sc->root, pc.shd[sc->root], want);
    int32_t root = spmd_reshard(&pc, pc.val[sc->root], &sc->instr[sc->root].shape, pc.shd[sc->root], want);
    spmd_why_restore(&pc, why);
    if (root < 0)
        goto done;
    pc.dc->root = root;
    result = ci;
done:
    sp->depth--;
    sp->site = caller;
    ts_free(order);
    spmd_reshard_cache_free(&pc);
    ts_free(pc.val);
    ts_free(pc.shd);
    return result;
}

IrStatus spmd_partition(const IrModule *src, const SpmdOptions *opt, IrModule **out,
                        SpmdReport *report, IrDiag *d)
{
    *out = NULL;
    const IrComputation *entry = ir_entry(src);
    if (!entry || entry->root < 0)
        return ir_error(d, IR_EINPUT, src->file, NULL, (IrPos){0, 0}, "module has no entry computation");
    double gbps = opt->link_gbps > 0 ? opt->link_gbps : SPMD_LINK_GBPS;
    Spmd sp = {.src = src, .n = opt->num_partitions, .r = opt->num_replicas, .link_bytes_us = gbps * 125.0, .d = d,
               .report = report};
    if (sp.n < 1 || sp.r < 1)
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "partition and replica counts must be >= 1");
    if (report && !report->arena && !(report->arena = ir_arena_new()))
        return ir_oom(d, NULL);
    if (report && src->file && !(report->file = ir_strdup(report->arena, src->file)))
        return ir_oom(d, NULL);
    sp.dst = ir_module_new(src->name);
    sp.tmp = ir_arena_new();
    sp.scalar_comp = ts_malloc((size_t)(src->ncomp > 0 ? src->ncomp : 1) * sizeof(int32_t));
    if (!sp.dst || !sp.tmp || !sp.scalar_comp) {
        ir_module_free(sp.dst);
        ir_arena_free(sp.tmp);
        ts_free(sp.scalar_comp);
        return ir_oom(d, NULL);
    }
    /* The SPMD instructions keep their source positions: a kernel failing
     * at run time is reported at the source line. */
    if ((src->file && !(sp.dst->file = ir_strdup(sp.dst->arena, src->file))) ||
        (src->src && !(sp.dst->src = ir_strdup(sp.dst->arena, src->src)))) {
        ir_module_free(sp.dst);
        ir_arena_free(sp.tmp);
        ts_free(sp.scalar_comp);
        return ir_oom(d, NULL);
    }
    for (int32_t i = 0; i < src->ncomp; i++)
        sp.scalar_comp[i] = -1;
    for (int op = 0; op < OP_COUNT; op++)
        for (int t = 0; t < IR_NTYPES; t++)
            sp.reducer[op][t] = -1;
    sp.dst->num_partitions = sp.n;
    sp.dst->replica_count = sp.r;
    IrStatus st = IR_OK;
    const IrSharding **ps = ts_malloc((size_t)(entry->nparam > 0 ? entry->nparam : 1) * sizeof *ps);
    if (!ps) {
        st = ir_oom(d, NULL);
        goto done;
    }
    for (int32_t p = 0; p < entry->nparam; p++)
        ps[p] = entry->param[p] >= 0 ? entry->instr[entry->param[p]].sharding : NULL;
    int32_t ci = spmd_partition_computation(&sp, src->entry, ps, entry->instr[entry->root].sharding);
    ts_free(ps);
    if (ci < 0) {
        st = d->status != IR_OK ? d->status
                                : ir_error(d, IR_EINTERNAL, NULL, NULL, (IrPos){0, 0}, "partitioning failed");
        goto done;
    }
    sp.dst->entry = ci;
    sp.dst->comp[ci]->is_entry = true;
    for (int32_t k = 0; k < sp.dst->ncomp; k++) {
        int32_t moved;
        if (spmd_sink_transposes(sp.dst->comp[k], &moved) != IR_OK ||
            spmd_swap_dots(sp.dst->arena, sp.dst->comp[k], &moved) != IR_OK) {
            st = ir_oom(d, NULL);
            goto done;
        }
    }
    /* Aliases refer to parameters and outputs, which keep their numbering. */
    if (src->nalias > 0) {
        sp.dst->alias = ir_alloc_array(sp.dst->arena, (size_t)src->nalias, sizeof(IrAlias));
        if (!sp.dst->alias) {
            st = ir_oom(d, NULL);
            goto done;
        }
        for (int32_t k = 0; k < src->nalias; k++) {
            IrAlias *al = &sp.dst->alias[k];
            *al = src->alias[k];
            int64_t *o = ir_alloc_array(sp.dst->arena, (size_t)al->output_index.n + 1, sizeof(int64_t));
            int64_t *p = ir_alloc_array(sp.dst->arena, (size_t)al->param_index.n + 1, sizeof(int64_t));
            if (!o || !p) {
                st = ir_oom(d, NULL);
                goto done;
            }
            if (al->output_index.n > 0)
                memcpy(o, al->output_index.v, (size_t)al->output_index.n * sizeof(int64_t));
            if (al->param_index.n > 0)
                memcpy(p, al->param_index.v, (size_t)al->param_index.n * sizeof(int64_t));
            al->output_index.v = o;
            al->param_index.v = p;
        }
        sp.dst->nalias = src->nalias;
    }
done:
    ts_free(sp.scalar_comp);
    ir_arena_free(sp.tmp);
    if (st != IR_OK) {
        ir_module_free(sp.dst);
        return st;
    }
    *out = sp.dst;
    return IR_OK;
}

void spmd_report_free(SpmdReport *r)
{
    if (r) {
        ir_arena_free(r->arena);
        memset(r, 0, sizeof *r);
    }
}
