/*
 * fusion_rows.c: row groups (fusion.h) run one row at a time.
 *
 * The group's shape S splits into outer dims and row dims (the minor
 * ones, from g->nouter on): R elements a row, one row per element of the
 * outer shape. Every node keeps one row of its value in a scratch buffer:
 * R elements for a row node, one for an outer node. For each row, the
 * nodes run in the group's order (operands first):
 *   elementwise     the range kernel over the row (R or 1 elements), on
 *                   the operands' rows (leaves read at the row's offset);
 *   strided         a broadcast or transpose of a leaf: the row's part of
 *                   the result, read through strides (dev_broadcast_range);
 *   spread          a broadcast of an outer node along the outer dims: its
 *                   one element filled over the row (a broadcast of an
 *                   outer node to an outer shape copies its element);
 *   copy            a reshape of an outer value (f32[a,b] to f32[a,b,1]):
 *                   its one element copied;
 *   reduce          folds its operand's row (one element for an outer
 *                   reduce, over dims of size 1) with the reducer: f32 and
 *                   f64 with add, multiply, maximum or minimum in 8
 *                   interleaved partial results in double, as the
 *                   unfused reduce of a row (reducer.c's
 *                   dev_red_fold_lanes), everything else exactly as
 *                   k_reduce.c's fast path does (from the init, in
 *                   increasing order, in the reducer's 64-bit domain).
 * The root writes its row straight into the result. A node that computes
 * what an earlier one did (JAX's layer norm writes x - mean twice, each
 * behind broadcasts of its own) reads that one's rows instead, and a
 * broadcast of a leaf along the outer dims (gamma, beta: every row the
 * same) is filled at the first block of rows and kept for the others.
 * An f32 add, subtract, multiply or divide of a row and a spread (x -
 * mean, x * rsqrt(var)) reads the outer node's element for each row, and
 * a spread only such nodes read is never filled.
 * Example, softmax of
 * x f32[4096,4096] over dim 1: per row, m = max(x row), fill, subtract,
 * exp, z = sum, fill, divide into the result's row: x is read from
 * memory once (the passes after the first find its row in cache) and the
 * result written once, where the unfused module moves five arrays of
 * 64 MiB through memory.
 */
#include "fusion.h"

#include <string.h>

#include "float_ops.h" /* arith.h: the reducers */

#define MAX_OPND 3
/* Elements converted into the reducer's domain at a time (as k_reduce.c). */
#define FOLD_RUN 256
/* Scratch rows start 64-byte aligned and staggered by 5 cache lines (see
 * fusion.c's STAGGER: rows of power-of-two size would 4K-alias). */
#define STAGGER 320
/* Elements of a row node a pass: rows of fewer run several at a time
 * (softmax over rows of 512: 8 a pass), so that each node's kernel call
 * and the outer nodes' one-element steps are paid once per 8 rows, and a
 * pass's rows still sit in L2 (16 KiB a row node). */
#define ROWS_BLOCK 4096

typedef enum RowKind {
    RK_ELEMENTWISE, /* a range kernel */
    RK_STRIDED,     /* broadcast or transpose of a leaf */
    RK_SPREAD,      /* broadcast of an outer node over the row */
    RK_COPY,        /* reshape of an outer value (node or leaf) */
    RK_REDUCE,      /* a reduce over the row dims */
} RowKind;

typedef struct RowNode {
    RowKind kind;
    int64_t len;            /* elements a row: R, or 1 for an outer node */
    size_t w;               /* element bytes */
    int64_t sstr[IR_MAX_RANK]; /* strided: source strides */
    const uint8_t *src;     /* strided: the leaf's whole data */
    int32_t from;           /* spread: the node it spreads */
    DevRedDom dom;          /* reduce: domain, reducer, init */
    int64_t fold;           /* reduce: elements folded a row (R, or 1) */
    IrOpcode op;
    DevAcc init;
    int32_t same;           /* an earlier node of the same value (its row is
                             * read in place, nothing run), else -1 */
    bool invariant;         /* strided: every row the same (a leaf broadcast
                             * along the outer dims): filled at the first
                             * block only */
    bool filled;
    int32_t row_scalar;     /* an f32 add, subtract, multiply or divide one of
                             * whose operands is a spread: that operand's
                             * index (0, 1), the other a row; else -1 */
    int32_t scalar_from;    /* row_scalar: the outer node spread */
    bool unread;            /* a spread whose readers all take its element
                             * (row_scalar): not filled */
} RowNode;

typedef struct Rows {
    const DevFusionGroup *g;
    int32_t nn;
    RowNode *node;       /* [nn] */
    DevValue *nview;     /* [nn] each node's row */
    DevValue *lview;     /* [nleaves] each leaf's row */
    DevValue **opnd;     /* [nn * MAX_OPND] */
    DevKernelArgs *k;    /* [nn] */
    uint8_t **lbase;     /* [nleaves] each leaf's data */
    int64_t *lstep;      /* [nleaves] a leaf's elements a row: R, 1, or 0 (stays put) */
    uint8_t *arena;
    uint8_t **scratch;   /* [nn] */
    int64_t nb;          /* rows a pass (ROWS_BLOCK elements, at least 1 row) */
} Rows;

static void rows_free(Rows *r)
{
    ts_free(r->node);
    ts_free(r->nview);
    ts_free(r->lview);
    ts_free(r->opnd);
    ts_free(r->k);
    ts_free(r->lbase);
    ts_free(r->lstep);
    ts_free(r->arena);
    ts_free(r->scratch);
}

/* The reduce node's domain, reducer, init and fold length (the finder has
 * checked the instruction; the values are checked here as k_reduce.c
 * does). */
static IrStatus reduce_setup(const DevKernelArgs *k, const DevFusionGroup *g, const IrShape *S, int64_t R,
                             RowNode *n)
{
    const DevValue *x = k->opnd[0], *init = k->opnd[1];
    n->op = ir_simple_reducer(k->m, k->ins->called[0]);
    n->fold = ir_shape_same_dims(&x->shape, S) ? R : 1;
    if ((n->fold == 1 && !ir_fusion_is_outer(S, g->nouter, &x->shape)) || x->shape.type != k->ins->shape.type ||
        init->shape.rank != 0 || init->shape.type != k->ins->shape.type || !dev_red_dom(x->shape.type, &n->dom))
        return dev_kernel_error(k, IR_EINPUT, "reduce: operand 0 does not fit");
    n->init = dev_acc_load(n->dom, init->shape.type, init->data, 0);
    return IR_OK;
}

/* Elementwise ops whose value is their opcode over their operands (no
 * attribute: a compare's direction, a convert's type are left out). */
static bool plain_op(IrOpcode op)
{
#define ONE(T, OPC, EXPR) case OPC:
    switch (op) {
        DEV_FLOAT_UNARY_OPS(ONE, float)
        DEV_FLOAT_BINARY_OPS(ONE, float)
        return true;
    default: return false;
    }
#undef ONE
}

/* The first node of node k's value. */
static int32_t first_of(const Rows *r, int32_t k)
{
    return r->node[k].same >= 0 ? r->node[k].same : k;
}

/* Operand j of node k as a value id: the first node of its value (nodes
 * 0..nn-1), or nn + its leaf. */
static int32_t operand_id(const Rows *r, const IrComputation *c, int32_t k, int32_t j)
{
    int32_t o = c->instr[r->g->nodes[k]].opnd[j], at = ir_fusion_node_index(r->g, o);
    if (at >= 0 && at < k)
        return first_of(r, at);
    return r->nn + ir_fusion_leaf_index(r->g, o);
}

/* Whether nodes j < k compute the same row values. */
static bool same_value(const Rows *r, const IrComputation *c, int32_t j, int32_t k)
{
    const RowNode *a = &r->node[j], *b = &r->node[k];
    const IrInstr *x = &c->instr[r->g->nodes[j]], *y = &c->instr[r->g->nodes[k]];
    if (a->kind != b->kind || a->len != b->len || x->op != y->op || x->nopnd != y->nopnd ||
        !ir_shape_equal(&x->shape, &y->shape))
        return false;
    switch (b->kind) {
    case RK_SPREAD: return first_of(r, a->from) == first_of(r, b->from);
    case RK_STRIDED:
        if (a->src != b->src)
            return false;
        for (int32_t i = 0; i < y->shape.rank; i++)
            if (a->sstr[i] != b->sstr[i])
                return false;
        return true;
    case RK_COPY: return operand_id(r, c, j, 0) == operand_id(r, c, k, 0);
    case RK_ELEMENTWISE:
        if (!plain_op(y->op) || y->nopnd > MAX_OPND)
            return false;
        for (int32_t i = 0; i < y->nopnd; i++)
            if (operand_id(r, c, j, i) != operand_id(r, c, k, i))
                return false;
        return true;
    case RK_REDUCE: return false;
    }
    return false;
}

/* JAX writes a layer norm's x - mean twice (once for the variance, once
 * for the result), with the broadcasts before each: a node that computes
 * what an earlier one did reads that one's rows (same), and a leaf's
 * broadcast along the outer dims (gamma, beta) is filled at the first
 * block and kept (invariant). The root always runs (it writes the
 * result). */
static void find_same(Rows *r, const IrComputation *c)
{
    for (int32_t k = 0; k < r->nn; k++) {
        RowNode *n = &r->node[k];
        n->same = -1;
        if (n->kind == RK_STRIDED && k + 1 < r->nn) {
            n->invariant = true;
            for (int32_t i = 0; i < r->g->nouter; i++)
                if (n->sstr[i] != 0)
                    n->invariant = false;
        }
        for (int32_t j = 0; k + 1 < r->nn && j < k && n->same < 0; j++)
            if (r->node[j].same < 0 && same_value(r, c, j, k))
                n->same = j;
    }
}

/* Node k as row_scalar: an f32 add, subtract, multiply or divide of a
 * row and a spread of an outer node (x - mean, x * rsqrt(var)) reads the
 * outer node's element for each row instead of the spread's filled row,
 * and a spread that only such nodes read is never filled. */
static void find_row_scalars(Rows *r, const IrComputation *c)
{
    for (int32_t k = 0; k < r->nn; k++) {
        RowNode *n = &r->node[k];
        const IrInstr *ins = &c->instr[r->g->nodes[k]];
        n->row_scalar = -1;
        n->unread = n->kind == RK_SPREAD && n->same < 0 && k + 1 < r->nn;
        IrOpcode op = ins->op;
        if (n->kind != RK_ELEMENTWISE || n->same >= 0 || ins->shape.type != IR_F32 || ins->nopnd != 2 ||
            (op != OP_ADD && op != OP_SUBTRACT && op != OP_MULTIPLY && op != OP_DIVIDE))
            continue;
        for (int32_t j = 0; j < 2 && n->row_scalar < 0; j++) {
            int32_t s = operand_id(r, c, k, j), o = operand_id(r, c, k, 1 - j);
            bool row = o < r->nn ? r->node[o].len == n->len
                                 : r->lstep[o - r->nn] == n->len && r->lview[o - r->nn].shape.type == IR_F32;
            if (s < r->nn && r->node[s].kind == RK_SPREAD && n->len > 1 && row) {
                n->row_scalar = j;
                n->scalar_from = first_of(r, r->node[s].from);
            }
        }
    }
    /* A spread read by anything else (or as both operands) is filled. */
    for (int32_t k = 0; k < r->nn; k++) {
        const IrInstr *ins = &c->instr[r->g->nodes[k]];
        for (int32_t j = 0; j < ins->nopnd && j < MAX_OPND; j++) {
            int32_t s = operand_id(r, c, k, j);
            if (s < r->nn && r->node[s].kind == RK_SPREAD && (r->node[k].same < 0 || k + 1 == r->nn) &&
                r->node[k].row_scalar != j)
                r->node[s].unread = false;
        }
    }
}

/* out[b][i] = op(x[b][i], s[b]) (or op(s[b], x[b][i]) where the scalar is
 * operand 0) for nb rows of len: float_ops.h's expressions, so the bits
 * of the range kernel over the filled spread. */
DEV_VECTOR_CLONES static void row_scalar_f32(IrOpcode op, bool scalar_first, const float *x, const float *s,
                                             int64_t nb, int64_t len, float *out)
{
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * len;
        float *ob = out + b * len, v = s[b];
        switch (op) {
        case OP_ADD:
            for (int64_t i = 0; i < len; i++)
                ob[i] = scalar_first ? DEV_ADD(v, xb[i]) : DEV_ADD(xb[i], v);
            break;
        case OP_SUBTRACT:
            for (int64_t i = 0; i < len; i++)
                ob[i] = scalar_first ? v - xb[i] : xb[i] - v;
            break;
        case OP_MULTIPLY:
            for (int64_t i = 0; i < len; i++)
                ob[i] = scalar_first ? DEV_MUL(v, xb[i]) : DEV_MUL(xb[i], v);
            break;
        default:
            for (int64_t i = 0; i < len; i++)
                ob[i] = scalar_first ? v / xb[i] : xb[i] / v;
            break;
        }
    }
}

/* Views, operand wiring, each node's kind, and the once-per-run checks. */
static IrStatus rows_setup(Rows *r, const IrModule *m, const IrComputation *c, const DevExecOptions *opt,
                           IrDiag *d, DevValue **vals, int64_t R)
{
    const DevFusionGroup *g = r->g;
    const IrShape *S = &c->instr[g->space].shape;
    int32_t nn = g->nnodes, nl = g->nleaves > 0 ? g->nleaves : 1;
    r->nn = nn;
    if (!(r->node = ts_calloc((size_t)nn, sizeof *r->node)) ||
        !(r->nview = ts_calloc((size_t)nn, sizeof *r->nview)) ||
        !(r->lview = ts_calloc((size_t)nl, sizeof *r->lview)) ||
        !(r->opnd = ts_calloc((size_t)nn * MAX_OPND, sizeof *r->opnd)) ||
        !(r->k = ts_calloc((size_t)nn, sizeof *r->k)) ||
        !(r->lbase = ts_calloc((size_t)nl, sizeof *r->lbase)) ||
        !(r->lstep = ts_calloc((size_t)nl, sizeof *r->lstep)) ||
        !(r->scratch = ts_calloc((size_t)nn, sizeof *r->scratch)))
        return ir_error(d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
    IrStatus lst = dev_fusion_bind_leaves(m, c, g, vals, r->lview, r->lbase, d);
    if (lst != IR_OK)
        return lst;
    for (int32_t l = 0; l < g->nleaves; l++) {
        const IrShape *ls = &r->lview[l].shape;
        r->lstep[l] = ir_shape_same_dims(ls, S) ? R : ir_fusion_is_outer(S, g->nouter, ls) ? 1 : 0;
    }
    for (int32_t k = 0; k < nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        RowNode *n = &r->node[k];
        r->nview[k] = (DevValue){.shape = ins->shape, .refs = 1};
        int32_t at0 = -1;
        for (int32_t j = 0; j < ins->nopnd && j < MAX_OPND; j++) {
            int32_t o = ins->opnd[j], at = ir_fusion_node_index(g, o);
            if (j == 0)
                at0 = at;
            r->opnd[k * MAX_OPND + j] = at >= 0 && at < k ? &r->nview[at] : &r->lview[ir_fusion_leaf_index(g, o)];
        }
        r->k[k] = (DevKernelArgs){m, c, ins, ins->nopnd, &r->opnd[k * MAX_OPND], opt, d};
        n->len = ir_shape_same_dims(&ins->shape, S) ? R : 1;
        n->w = ir_type_size(ins->shape.type);
        IrStatus st;
        if (ins->op == OP_REDUCE) {
            n->kind = RK_REDUCE;
            st = reduce_setup(&r->k[k], g, S, R, n);
        } else if (ins->op == OP_BROADCAST && at0 >= 0) {
            n->kind = RK_SPREAD;
            n->from = at0;
            st = r->node[at0].len == 1 && r->opnd[k * MAX_OPND]->shape.type == ins->shape.type
                     ? IR_OK
                     : dev_kernel_error(&r->k[k], IR_EINTERNAL, "fused rows: broadcast of a row");
        } else if (ins->op == OP_RESHAPE) {
            n->kind = RK_COPY;
            st = n->len == 1 && r->opnd[k * MAX_OPND]->shape.type == ins->shape.type
                     ? IR_OK
                     : dev_kernel_error(&r->k[k], IR_EINTERNAL, "fused rows: reshape of a row");
        } else if (ins->op == OP_BROADCAST || ins->op == OP_TRANSPOSE) {
            n->kind = RK_STRIDED;
            n->src = r->opnd[k * MAX_OPND]->data;
            st = ins->op == OP_BROADCAST ? dev_k_broadcast_strides(&r->k[k], n->sstr)
                                         : dev_k_transpose_strides(&r->k[k], n->sstr);
        } else {
            n->kind = RK_ELEMENTWISE;
            st = dev_k_elementwise_check(&r->k[k]);
        }
        if (st != IR_OK)
            return st;
    }
    find_same(r, c);
    find_row_scalars(r, c);
    return IR_OK;
}

/* One buffer of r->nb rows for every node but the root (which writes the
 * result). */
static IrStatus rows_scratch(Rows *r, const IrComputation *c, IrDiag *d)
{
    size_t total = 0, at[IR_FUSION_MAX_NODES];
    for (int32_t k = 0; k + 1 < r->nn; k++) {
        at[k] = total;
        total += (((size_t)(r->node[k].len * r->nb) * r->node[k].w + 63) & ~(size_t)63) + STAGGER;
    }
    if (!(r->arena = ts_malloc(total + 64)))
        return ir_error(d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
    uint8_t *base = (uint8_t *)(((uintptr_t)r->arena + 63) & ~(uintptr_t)63);
    for (int32_t k = 0; k + 1 < r->nn; k++)
        r->scratch[k] = base + at[k];
    return IR_OK;
}

/* n copies of the element at src. */
static void spread(uint8_t *dst, const uint8_t *src, int64_t n, size_t w)
{
    if (w == 4) {
        uint32_t v;
        memcpy(&v, src, 4);
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + 4 * i, &v, 4);
    } else if (w == 8) {
        uint64_t v;
        memcpy(&v, src, 8);
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + 8 * i, &v, 8);
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * w, src, w);
    }
}

/* The largest (max) or smallest of init and x[0..n) with DEV_FMAX's
 * (DEV_FMIN's) rule, in FAST_LANES independent f32 accumulators: a NaN
 * reaches the result. Where the result is neither a NaN nor a zero it is
 * the one value the row holds at the extreme, whatever the order, so it
 * is what dev_red_fold_lanes gives (the order decides only between +0
 * and -0, and which NaN). */
#define FAST_LANES 64
DEV_VECTOR_CLONES static float extreme_f32(const float *x, int64_t n, float init, bool max)
{
    float acc[FAST_LANES], a = init;
    int64_t i = 0;
    for (int32_t j = 0; j < FAST_LANES; j++)
        acc[j] = init;
    if (max)
        for (; i + FAST_LANES <= n; i += FAST_LANES)
            for (int32_t j = 0; j < FAST_LANES; j++)
                acc[j] = DEV_FMAX(acc[j], x[i + j]);
    else
        for (; i + FAST_LANES <= n; i += FAST_LANES)
            for (int32_t j = 0; j < FAST_LANES; j++)
                acc[j] = DEV_FMIN(acc[j], x[i + j]);
    /* The tail into the first lanes (a chain of up to 63 compares took
     * as long as the rest of a causal row's prefix). */
    int64_t t = n - i;
    if (max)
        for (int64_t j = 0; j < t; j++)
            acc[j] = DEV_FMAX(acc[j], x[i + j]);
    else
        for (int64_t j = 0; j < t; j++)
            acc[j] = DEV_FMIN(acc[j], x[i + j]);
    /* The lanes halved in turn (vector compares, where one chain of 64
     * scalar ones was most of a causal row's max: about 5 times its
     * 16-lane loads). */
    for (int32_t h = FAST_LANES / 2; h >= 1; h /= 2) {
        if (max)
            for (int32_t j = 0; j < h; j++)
                acc[j] = DEV_FMAX(acc[j], acc[j + h]);
        else
            for (int32_t j = 0; j < h; j++)
                acc[j] = DEV_FMIN(acc[j], acc[j + h]);
    }
    return max ? DEV_FMAX(a, acc[0]) : DEV_FMIN(a, acc[0]);
}

/* extreme_f32's value where it cannot depend on the order of the
 * compares: no NaN among init and x[0..n), and an extreme that is neither
 * a zero nor a subnormal (which a flushed mode compares as zero). Then
 * true and *out, bit for bit extreme_f32's; else false. In AVX-512
 * registers where the CPU has them (GCC leaves extreme_f32's compares
 * partly scalar: a causal softmax row's max, some 256 elements, took
 * about 1,000 cycles; block-infer's attention group went from 4.8 to 3.9
 * ms a step with this; BENCHMARKS.md, "Stop 59"), else false at once. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static float extreme_avx512(const float *x, int64_t n, float init, bool max,
                                                               bool *unordered)
{
    __m512 acc = _mm512_set1_ps(init), acc2 = acc;
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v = _mm512_loadu_ps(x + i), w = _mm512_loadu_ps(x + i + 16);
        nan |= _mm512_cmp_ps_mask(v, w, _CMP_UNORD_Q);
        acc = max ? _mm512_max_ps(acc, v) : _mm512_min_ps(acc, v);
        acc2 = max ? _mm512_max_ps(acc2, w) : _mm512_min_ps(acc2, w);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        acc = max ? _mm512_mask_max_ps(acc, k, acc, v) : _mm512_mask_min_ps(acc, k, acc, v);
    }
    *unordered = nan != 0;
    return max ? _mm512_reduce_max_ps(_mm512_max_ps(acc, acc2)) : _mm512_reduce_min_ps(_mm512_min_ps(acc, acc2));
}

static bool extreme_any_order(const float *x, int64_t n, float init, bool max, float *out)
{
    static int avx512 = -1; /* racy but idempotent: every thread finds the same */
    if (avx512 < 0)
        avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    if (!avx512 || init != init)
        return false;
    bool nan;
    float v = extreme_avx512(x, n, init, max, &nan);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if (nan || (u & 0x7f800000u) == 0) /* a NaN, a zero or a subnormal */
        return false;
    *out = v;
    return true;
}
#else
static bool extreme_any_order(const float *x, int64_t n, float init, bool max, float *out)
{
    (void)x, (void)n, (void)init, (void)max, (void)out;
    return false;
}
#endif

/* The reduce of one row of R elements at x: floats through the lanes,
 * other types in k_reduce.c's order and domain. An f32 max or min runs
 * extreme_any_order, then extreme_f32 (the lanes' fold is one chain of
 * compares a lane: softmax's max was a third of its row group's time),
 * and the lanes only where that gives a zero or a NaN. */
static void fold_row(const RowNode *n, IrType t, const uint8_t *x, int64_t R, uint8_t *res)
{
    DevAcc acc = n->init, buf[FOLD_RUN];
    if (n->dom == DEV_RED_F && t == IR_F32 && (n->op == OP_MAXIMUM || n->op == OP_MINIMUM)) {
        float v;
        if (extreme_any_order((const float *)(const void *)x, R, (float)acc.f, n->op == OP_MAXIMUM, &v)) {
            memcpy(res, &v, sizeof v);
            return;
        }
        v = extreme_f32((const float *)(const void *)x, R, (float)acc.f, n->op == OP_MAXIMUM);
        if (v == v && v != 0) {
            memcpy(res, &v, sizeof v);
            return;
        }
    }
    if (n->dom == DEV_RED_F && dev_red_fold_lanes(n->op, t, x, 0, R, &acc.f)) {
        dev_acc_store(n->dom, t, res, 0, acc);
        return;
    }
    for (int64_t j = 0; j < R; j += FOLD_RUN) {
        int64_t len = R - j < FOLD_RUN ? R - j : FOLD_RUN;
        dev_red_load_run(n->dom, t, x, j, len, buf);
        dev_red_fold_run(n->dom, n->op, &acc, 0, buf, len);
    }
    dev_acc_store(n->dom, t, res, 0, acc);
}

float dev_fusion_fold_f32(IrOpcode op, float init, const float *x, int64_t n)
{
    RowNode nd = {.dom = DEV_RED_F, .op = op, .init = dev_acc_load(DEV_RED_F, IR_F32, &init, 0)};
    float r;
    fold_row(&nd, IR_F32, (const uint8_t *)x, n, (uint8_t *)&r);
    return r;
}

/* Rows [row, row + nb) through every node, each node over all nb rows
 * at once (its rows lie one after another, in the scratch as in the
 * leaves and the result); the root's rows go to out. */
static IrStatus rows_block(Rows *r, const IrComputation *c, int64_t row, int64_t nb, uint8_t *out)
{
    const DevFusionGroup *g = r->g;
    for (int32_t l = 0; l < g->nleaves; l++)
        if (r->lstep[l] > 0)
            r->lview[l].data = r->lbase[l] + (size_t)(row * r->lstep[l]) * ir_type_size(r->lview[l].shape.type);
    for (int32_t k = 0; k < r->nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        RowNode *n = &r->node[k];
        DevValue *v = &r->nview[k];
        int64_t len = n->len * nb;
        v->data = k == r->nn - 1 ? out + (size_t)(row * n->len) * n->w : r->scratch[k];
        v->nbytes = len * (int64_t)n->w;
        if (n->same >= 0) {
            v->data = r->nview[n->same].data;
            continue;
        }
        if ((n->invariant && n->filled) || n->unread)
            continue;
        n->filled = n->invariant;
        if (n->row_scalar >= 0) {
            int32_t j = 1 - n->row_scalar;
            row_scalar_f32(ins->op, n->row_scalar == 0, (const float *)(const void *)r->opnd[k * MAX_OPND + j]->data,
                           (const float *)(const void *)r->nview[n->scalar_from].data, nb, n->len,
                           (float *)(void *)v->data);
            continue;
        }
        switch (n->kind) {
        case RK_ELEMENTWISE: {
            IrStatus st = dev_k_elementwise_range(&r->k[k], len, v);
            if (st != IR_OK)
                return st;
            break;
        }
        case RK_STRIDED: dev_broadcast_range(&ins->shape, n->sstr, n->src, row * n->len, len, v->data); break;
        case RK_SPREAD:
            for (int64_t b = 0; b < nb; b++)
                spread(v->data + (size_t)(b * n->len) * n->w, r->nview[n->from].data + (size_t)b * n->w, n->len, n->w);
            break;
        case RK_COPY: memcpy(v->data, r->opnd[k * MAX_OPND]->data, (size_t)nb * n->w); break;
        case RK_REDUCE:
            for (int64_t b = 0; b < nb; b++)
                fold_row(n, ins->shape.type, r->opnd[k * MAX_OPND]->data + (size_t)(b * n->fold) * n->w, n->fold,
                         v->data + (size_t)b * n->w);
            break;
        }
    }
    return IR_OK;
}

IrStatus dev_fusion_run_rows(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                             const DevExecOptions *opt, IrDiag *d, DevValue **vals, DevValue **out)
{
    *out = NULL;
    const IrInstr *root = &c->instr[g->root];
    const IrShape *S = &c->instr[g->space].shape;
    int64_t R = 1, nrows = 1;
    for (int32_t i = 0; i < S->rank; i++)
        *(i < g->nouter ? &nrows : &R) *= S->dims[i];
    Rows r = {.g = g, .nb = R > 0 && R < ROWS_BLOCK ? ROWS_BLOCK / R : 1};
    if (r.nb > nrows)
        r.nb = nrows > 0 ? nrows : 1;
    DevValue *res = NULL;
    IrStatus st = rows_setup(&r, m, c, opt, d, vals, R);
    if (st == IR_OK)
        st = rows_scratch(&r, c, d);
    if (st == IR_OK && !(res = dev_value_new_uninit(&root->shape)))
        st = ir_error(d, IR_ENOMEM, m->file, m->src, root->pos, "%s: out of memory for the result",
                      root->name);
    for (int64_t row = 0; st == IR_OK && row < nrows; row += r.nb) /* R = 0: every reduce gives its init */
        st = rows_block(&r, c, row, nrows - row < r.nb ? nrows - row : r.nb, res->data);
    rows_free(&r);
    if (st != IR_OK) {
        dev_value_unref(res);
        return st;
    }
    *out = res;
    return IR_OK;
}
