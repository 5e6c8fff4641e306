/*
 * spmd_why_need.c: what an op does with the operand dim whose sharding it
 * cannot take, in words, for the reason of a collective that reshards an
 * operand (spmd_why.c). The dim is the first one the operand's sharding
 * tiles more than the user's rule needs (else the first it tiles less);
 * the words say why that dim cannot stay split: "it sorts along dim 1",
 * "it slices dim 0 at an offset known only at run time", "custom-call foo
 * has no partitioning rule: it takes its operands whole".
 *
 * Example: sort s along dim 1 of x, x tiled on dim 1 over 4 devices; the
 * rule moves the tiles to dim 0 first, and the reason reads "operand x is
 * tiled on dim 1 over 4 devices but sort s needs it tiled on dim 0 over 4
 * devices (it sorts along dim 1, which is tiled over 4 devices)".
 */
#include "spmd_internal.h"

#include <string.h>

static bool listed(const IrI64List *l, int64_t d)
{
    for (int64_t j = 0; j < l->n; j++)
        if (l->v[j] == d)
            return true;
    return false;
}

/* The dim of operand shape `shape` whose tiles differ between `from` and
 * `to`: first one tiled more by `from`, else first tiled more by `to`. */
static int32_t differing_dim(const IrShape *shape, const IrSharding *from, const IrSharding *to)
{
    for (int32_t d = 0; d < shape->rank; d++)
        if (shd_tiles(from, d) > shd_tiles(to, d))
            return d;
    for (int32_t d = 0; d < shape->rank; d++)
        if (shd_tiles(from, d) < shd_tiles(to, d))
            return d;
    return -1;
}

/* What ins does along dim d of operand k (NULL: nothing specific). */
static const char *op_verb(const IrInstr *ins, int32_t k, int32_t d, const IrShape *shape)
{
    const IrAttrsX *x = ins->a.x;
    switch (ins->op) {
    case OP_SORT: return listed(&ins->a.dimensions, d) ? "it sorts along dim %d" : NULL;
    case OP_TOPK: return d == shape->rank - 1 ? "it takes the top k along dim %d" : NULL;
    case OP_SCAN: return listed(&ins->a.dimensions, d) ? "it scans along dim %d" : NULL;
    case OP_CONCATENATE: return listed(&ins->a.dimensions, d) ? "it concatenates along dim %d" : NULL;
    case OP_REVERSE: return listed(&ins->a.dimensions, d) ? "it reverses dim %d" : NULL;
    case OP_PAD:
        return k == 0 && x && d < x->pad_lo.n && d < x->pad_hi.n &&
                       (x->pad_lo.v[d] || x->pad_hi.v[d] || (d < x->pad_interior.n && x->pad_interior.v[d]))
                   ? "it pads dim %d"
                   : NULL;
    case OP_SLICE:
        return k == 0 && x && d < x->slice_start.n && d < x->slice_limit.n &&
                       (x->slice_start.v[d] != 0 || x->slice_limit.v[d] != shape->dims[d] ||
                        (d < x->slice_stride.n && x->slice_stride.v[d] != 1))
                   ? "it slices dim %d"
                   : NULL;
    case OP_DYNAMIC_SLICE: return k == 0 ? "it slices dim %d at an offset known only at run time" : NULL;
    case OP_DYNAMIC_UPDATE_SLICE:
        return k <= 1 ? "it writes into dim %d at an offset known only at run time" : NULL;
    case OP_GATHER:
        return k == 0 ? "it reads dim %d at indices known only at run time"
                      : "dim %d of its indices must be tiled as its result's batch dims";
    case OP_ALL_REDUCE:
    case OP_ALL_GATHER:
    case OP_ALL_TO_ALL:
    case OP_REDUCE_SCATTER:
    case OP_COLLECTIVE_PERMUTE:
        return "the module's own collectives run on whole values, so dim %d cannot stay split";
    case OP_SCATTER: return "it writes into dim %d at indices known only at run time";
    case OP_FFT: return x && d >= shape->rank - x->fft_length.n ? "it transforms along dim %d" : NULL;
    case OP_CHOLESKY:
    case OP_TRIANGULAR_SOLVE: return d >= shape->rank - 2 ? "dim %d is one of its matrix dims" : NULL;
    case OP_REDUCE_WINDOW:
    case OP_SELECT_AND_SCATTER:
        if (!x || d >= x->window.rank)
            return NULL;
        return x->window.dim[d].size > 1 ? "its window slides along dim %d"
                                         : "its window pads, strides or dilates dim %d, so a device's rows do not "
                                           "line up with its result's";
    case OP_RESHAPE: return "it merges or splits dim %d";
    case OP_BITCAST: return "it reinterprets the buffer's bytes, dim %d with the rest";
    case OP_TRANSPOSE: return "it moves dim %d";
    case OP_DOT:
    case OP_RAGGED_DOT:
        if (k > 1)
            return NULL;
        if (listed(k == 0 ? &ins->a.dot.lhs_contracting : &ins->a.dot.rhs_contracting, d))
            return "dim %d is a contracted dim, split otherwise in the other operand";
        if (listed(k == 0 ? &ins->a.dot.lhs_batch : &ins->a.dot.rhs_batch, d))
            return "dim %d is a batch dim, split otherwise in the other operand or the result";
        return "dim %d is a free dim, split otherwise in the result";
    case OP_CONVOLUTION:
        if (!x || k > 1)
            return NULL;
        if (d == (k == 0 ? x->conv.in_feature : x->conv.k_in_feature))
            return "dim %d is its input feature dim, summed over";
        if (k == 0 && d == x->conv.in_batch)
            return "dim %d is its batch dim, split otherwise in the result";
        if (k == 1 && d == x->conv.k_out_feature)
            return "dim %d is its output feature dim, split otherwise in the result";
        return "its window slides along dim %d";
    case OP_RNG:
    case OP_RNG_BIT_GENERATOR: return "its draw matches the one-device numbers only with dim %d laid out so";
    case OP_WHILE:
    case OP_CONDITIONAL:
    case OP_CALL: return "its loop state keeps one sharding through every iteration, and it differs on dim %d";
    default: return NULL;
    }
}

void spmd_why_need(const PComp *pc, IrStrBuf *b, const IrInstr *ins, int32_t o, const IrSharding *to)
{
    const IrInstr *op = &pc->sc->instr[o];
    const IrSharding *from = pc->shd[o];
    int32_t k = 0;
    while (k < ins->nopnd && ins->opnd[k] != o)
        k++;
    if (ins->op == OP_CUSTOM_CALL && ins->a.x && ins->a.x->custom_call_target) {
        if (ir_batch_custom_call(ins) >= 0)
            ir_sb_printf(b, " (custom-call %s keeps its leading %d dims split and takes the others whole)",
                         ins->a.x->custom_call_target, (int)ir_batch_custom_call(ins));
        else
            ir_sb_printf(b, " (custom-call %s has no partitioning rule: it takes its operands whole)",
                         ins->a.x->custom_call_target);
        return;
    }
    if (ins->op == OP_OUTFEED || ins->op == OP_SEND) {
        ir_sb_printf(b, " (%s sends the whole value)", ir_op_name(ins->op));
        return;
    }
    if (ins->op == OP_TUPLE) {
        ir_sb_printf(b, " (the tuple's sharding gives element %d so)", (int)k);
        return;
    }
    if (!from || !to || from->kind == SHD_TUPLE || to->kind == SHD_TUPLE || op->shape.rank == 0)
        return;
    int32_t d = differing_dim(&op->shape, from, to);
    if (d < 0) {
        ir_sb_puts(b, " (the same tiles on other devices)");
        return;
    }
    int64_t has = shd_tiles(from, d), wants = shd_tiles(to, d);
    const char *v = op_verb(ins, k, d, &op->shape);
    ir_sb_puts(b, " (");
    if (v)
        ir_sb_printf(b, v, (int)d);
    else if (ir_op_is_elementwise(ins->op) || ins->op == OP_COPY)
        ir_sb_puts(b, "an elementwise op takes its operands sharded as its result");
    else if (wants < has)
        ir_sb_printf(b, "its rule takes dim %d %s", (int)d, wants > 1 ? "in fewer pieces" : "whole");
    else
        ir_sb_printf(b, "its rule splits dim %d over %lld devices", (int)d, (long long)wants);
    /* "... dim 1, which is ..." where the words end on the dim, else a clause of its own */
    bool on_dim = v && strlen(v) >= 2 && strcmp(v + strlen(v) - 2, "%d") == 0;
    if (v && has > wants)
        ir_sb_printf(b, on_dim ? ", which is tiled over %lld devices" : "; here it is tiled over %lld devices",
                     (long long)has);
    else if (v)
        ir_sb_printf(b, on_dim ? ", which it needs split over %lld devices" : "; it needs it split over %lld devices",
                     (long long)wants);
    ir_sb_puts(b, ")");
}
