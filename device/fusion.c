/*
 * fusion.c: elementwise chains run as one blocked loop over the output
 * (see fusion.h for what a group is).
 *
 * The groups are found on the IR (ir/fusion_find.c, which the memory
 * estimate shares); this file runs them.
 *
 * Running a group. Output elements go a block at a time: every node
 * computes the block into its scratch buffer (the root into the result),
 * through the same range kernels the unfused path uses, so the result is
 * bit for bit the unfused one (but for a NaN's sign and payload: an
 * operation on two NaNs returns one of them, and which is the compiled
 * loop's choice of operand order, not C's). An extra output is copied out of its
 * node's block (the chunk interpreter writes it in place where no leaf
 * lent it its buffer); each output may take a different dying leaf's
 * buffer.
 *
 * The common case, f32 arithmetic and math functions (float_ops.h) and
 * broadcasts, runs through a chunk interpreter instead: chunks of
 * FAST_CHUNK elements, one switch per node and chunk, all inside one
 * function, so the chunk's values stay in L1 and no kernel call is made
 * per node. Calling the range kernels on such small chunks would cost more
 * in calls than the loops themselves, and calling them on large blocks
 * moves each intermediate through L2 (measured on the 8-op benchmark: 12
 * ms for the chunk interpreter, 17 ms for blocks, 6 ms for STREAM triad).
 * The expressions come from float_ops.h, the same the kernels expand.
 * Groups of only the simplest ops (add, subtract, multiply, divide,
 * maximum, minimum, negate, abs, sqrt, and vmath's functions) go through
 * AVX-512 or AVX2 registers instead, where the CPU has them (the register
 * path, below the interpreter).
 * The block is sized so that the scratch of
 * all nodes stays within SCRATCH_BUDGET bytes (in L1/L2). A leaf that
 * dies here and has no other owner lends its buffer to the result: block
 * b of every node is computed before block b of the result is copied over
 * it, and no later block reads earlier elements.
 */
#include "fusion.h"

#include <assert.h>
#include <string.h>
#include <tgmath.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "float_ops.h"
#include "vmath.h"

/* Scratch bytes for all nodes of a group together. */
#define SCRATCH_BUDGET (48 << 10)
#define BLOCK_MIN 256
#define BLOCK_MAX 8192
/* Elementwise ops have at most 3 operands (select, clamp). */
#define MAX_OPND 3

static bool chunk_op(const IrInstr *ins)
{
#define ONE(T, OPC, EXPR) case OPC:
    if (ir_fusion_strided(ins))
        return ins->nopnd == 1;
    if (ins->nopnd == 1)
        switch (ins->op) {
            DEV_FLOAT_UNARY_OPS(ONE, float)
            return true;
        default: return false;
        }
    if (ins->nopnd == 2)
        switch (ins->op) {
            DEV_FLOAT_BINARY_OPS(ONE, float)
            return true;
        default: return false;
        }
#undef ONE
    return false;
}

/* The chunk interpreter takes a group when every node is f32 and a
 * chunk_op, and every leaf an f32 array. */
static bool chunkable(const IrComputation *c, const DevFusionGroup *g)
{
    for (int32_t k = 0; k < g->nnodes - (g->columns ? 1 : 0); k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        if (ins->shape.type != IR_F32 || !chunk_op(ins))
            return false;
    }
    for (int32_t l = 0; l < g->nleaves; l++)
        if (c->instr[g->leaves[l]].shape.type != IR_F32)
            return false;
    return true;
}

bool dev_fusion_chunked(const IrComputation *c, const DevFusionGroup *g)
{
    return g->nouter < 0 && g->dot < 0 && chunkable(c, g);
}

IrStatus dev_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order, int32_t norder,
                         const DevExecOptions *opt, DevFusion *out, IrDiag *d)
{
    IrFusionOptions fo = {.off = opt->no_fusion, .small = opt->fusion_block > 0 || opt->fuse_small};
    return ir_fusion_find(m, c, order, norder, &fo, out, d);
}

/* ---- running a group ---- */

/* A broadcast whose elements repeat a pattern (periodic_broadcast):
 * within each run of `len` elements of the result (at a multiple of len),
 * element e is element e mod p of the run's pattern. buf holds the
 * pattern of run `at` repeated over p + blk elements (blk: the chunk or
 * block), so that a chunk or block inside that run is read in place at
 * buf + (its offset mod p), nothing copied for it. buf NULL: an ordinary
 * broadcast, cut per chunk or block. */
typedef struct Period {
    uint8_t *buf;
    int64_t p, len, blk, at;
} Period;

/* Everything one run of a group needs, set up once before the blocks. */
typedef struct Run {
    const DevFusionGroup *g;
    int32_t nn;
    DevValue *nview;       /* [nn] each node's block (scratch or result) */
    DevValue *lview;       /* [nleaves] each leaf's block */
    DevValue **opnd;       /* [nn * MAX_OPND] views the nodes read */
    DevKernelArgs *k;      /* [nn] */
    int64_t *sstr;         /* [nn * IR_MAX_RANK] broadcast source strides */
    const uint8_t **src;   /* [nn] broadcast sources (whole arrays) */
    uint8_t **lbase;       /* [nleaves] each leaf's data */
    uint8_t **scratch;     /* [nn] block buffers */
    uint8_t *arena;        /* all scratch */
    int32_t nx;            /* extra outputs (g->extra): */
    int32_t xnode[IR_FUSION_MAX_NODES]; /* each one's node index, */
    uint8_t *xout[IR_FUSION_MAX_NODES]; /* its whole array, */
    bool xlent[IR_FUSION_MAX_NODES];    /* lent by a leaf (read in the same chunk) */
    Period *per;           /* [nn] periodic broadcasts (periods_setup) */
    bool no_avx512;        /* DevExecOptions.no_avx512: the register path's AVX2 form */
} Run;

static void run_free(Run *r)
{
    ts_free(r->nview);
    ts_free(r->lview);
    ts_free(r->opnd);
    ts_free(r->k);
    ts_free(r->sstr);
    ts_free(r->src);
    ts_free(r->lbase);
    ts_free(r->scratch);
    ts_free(r->arena);
    for (int32_t k = 0; r->per && k < r->nn; k++)
        ts_free(r->per[k].buf);
    ts_free(r->per);
}

IrStatus dev_fusion_bind_leaves(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                                DevValue **vals, DevValue *lview, uint8_t **lbase, IrDiag *d)
{
    for (int32_t l = 0; l < g->nleaves; l++) {
        const DevValue *v = vals[g->leaves[l]];
        if (!v || v->shape.type == IR_TUPLE)
            return ir_error(d, IR_EINTERNAL, m->file, m->src, c->instr[g->leaves[l]].pos,
                            "fused loop: %s is not an array value", c->instr[g->leaves[l]].name);
        lview[l] = *v; /* a shallow copy: shape and data borrowed */
        lview[l].refs = 1;
        lbase[l] = v->data;
    }
    return IR_OK;
}

/* Views with full shapes, operand wiring, and the once-per-run checks
 * (the same ones the unfused kernels make). */
static IrStatus run_setup(Run *r, const IrModule *m, const IrComputation *c, const DevExecOptions *opt,
                          IrDiag *d, DevValue **vals)
{
    const DevFusionGroup *g = r->g;
    /* A column group's reduce runs apart (run_columns): the tree below it here. */
    int32_t nn = g->nnodes - (g->columns ? 1 : 0), nl = g->nleaves > 0 ? g->nleaves : 1;
    r->nn = nn;
    r->no_avx512 = opt && opt->no_avx512;
    if (!(r->nview = ts_calloc((size_t)nn, sizeof *r->nview)) ||
        !(r->lview = ts_calloc((size_t)nl, sizeof *r->lview)) ||
        !(r->opnd = ts_calloc((size_t)nn * MAX_OPND, sizeof *r->opnd)) ||
        !(r->k = ts_calloc((size_t)nn, sizeof *r->k)) ||
        !(r->sstr = ts_calloc((size_t)nn * IR_MAX_RANK, sizeof *r->sstr)) ||
        !(r->src = ts_calloc((size_t)nn, sizeof *r->src)) ||
        !(r->lbase = ts_calloc((size_t)nl, sizeof *r->lbase)) ||
        !(r->scratch = ts_calloc((size_t)nn, sizeof *r->scratch)))
        return ir_error(d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
    IrStatus lst = dev_fusion_bind_leaves(m, c, g, vals, r->lview, r->lbase, d);
    if (lst != IR_OK)
        return lst;
    for (int32_t k = 0; k < nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        r->nview[k] = (DevValue){.shape = ins->shape, .refs = 1};
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j], at = ir_fusion_node_index(g, o);
            r->opnd[k * MAX_OPND + j] = at >= 0 && at < k ? &r->nview[at] : &r->lview[ir_fusion_leaf_index(g, o)];
        }
        r->k[k] = (DevKernelArgs){m, c, ins, ins->nopnd, &r->opnd[k * MAX_OPND], opt, d};
        IrStatus st;
        if (ir_fusion_strided(ins)) {
            st = ins->op == OP_BROADCAST ? dev_k_broadcast_strides(&r->k[k], &r->sstr[k * IR_MAX_RANK])
                                         : dev_k_transpose_strides(&r->k[k], &r->sstr[k * IR_MAX_RANK]);
            r->src[k] = r->opnd[k * MAX_OPND]->data;
        } else {
            st = dev_k_elementwise_check(&r->k[k]);
        }
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

/* Elements per block: all scratch within SCRATCH_BUDGET. */
static int64_t block_elements(const Run *r, const IrComputation *c, const DevExecOptions *opt)
{
    if (opt->fusion_block > 0)
        return opt->fusion_block;
    int64_t per = 0;
    for (int32_t k = 0; k < r->nn; k++)
        per += (int64_t)ir_type_size(c->instr[r->g->nodes[k]].shape.type);
    int64_t b = SCRATCH_BUDGET / (per > 0 ? per : 1);
    b = b < BLOCK_MIN ? BLOCK_MIN : b > BLOCK_MAX ? BLOCK_MAX : b;
    return b & ~(int64_t)15;
}

/* A block buffer for every node, each 64-byte aligned and 320 bytes
 * (5 cache lines) further on than a multiple of the block's size, so
 * that buffers of power-of-two size do not all start at the same offset
 * in a 4 KiB page (loads from one and stores to another would then
 * falsely depend on each other: 4K aliasing). */
#define STAGGER 320

static IrStatus run_scratch(Run *r, const IrComputation *c, int64_t block, IrDiag *d)
{
    size_t total = 0, at[IR_FUSION_MAX_NODES];
    for (int32_t k = 0; k < r->nn; k++) {
        at[k] = total;
        total += (((size_t)block * ir_type_size(c->instr[r->g->nodes[k]].shape.type) + 63) & ~(size_t)63) + STAGGER;
    }
    if (!(r->arena = ts_malloc(total + 64)))
        return ir_error(d, IR_ENOMEM, NULL, NULL, c->pos, "out of memory");
    uint8_t *base = (uint8_t *)(((uintptr_t)r->arena + 63) & ~(uintptr_t)63);
    for (int32_t k = 0; k < r->nn; k++)
        r->scratch[k] = base + at[k];
    return IR_OK;
}

/* A leaf at its last use whose buffer nobody else holds, read element for
 * element and as wide as the output's elements, not taken by another
 * output: -1 if none. */
static int32_t in_place_leaf(const DevFusionGroup *g, const IrInstr *output, DevValue **vals,
                             const int32_t *rem, const bool *taken)
{
    int64_t nbytes = ir_shape_bytes(&output->shape);
    for (int32_t l = 0; nbytes > 0 && l < g->nleaves; l++) {
        const DevValue *v = vals[g->leaves[l]];
        if (!taken[l] && g->leaf_direct[l] && rem[g->leaves[l]] == g->leaf_refs[l] && v &&
            dev_value_sole(v) && v->nbytes == nbytes &&
            v->shape.type != IR_TUPLE)
            return l;
    }
    return -1;
}

/* Patterns longer than this (elements) are cut per chunk or block. */
#define PERIOD_MAX 4096

/* Does the broadcast to rs, read through source strides sstr, repeat a
 * pattern? Its dims split, innermost first, into those the source varies
 * along (the pattern: *p elements), those it does not (the repeats), and
 * the rest (a new pattern every *len = p * repeats elements); dims of size
 * 1 go with either. Examples: batch norm's f32[32] into f32[16,32,32,32]
 * with dimensions={3}: p = 32, len the whole array; f32[16,64] into
 * f32[16,16,16,64] with dimensions={0,3}: p = 64, len = 16*16*64; f32[8]
 * into f32[8,512] with dimensions={0}: p = 1 (a fill), len = 512. True
 * where the pattern repeats, is at most PERIOD_MAX and a run holds at
 * least two blocks of blk. */
static bool periodic_broadcast(const IrShape *rs, const int64_t *sstr, int64_t blk, int64_t *p, int64_t *len)
{
    int32_t s = rs->rank;
    int64_t reps = 1;
    *p = 1;
    for (; s > 0 && (sstr[s - 1] != 0 || rs->dims[s - 1] == 1); s--)
        *p *= rs->dims[s - 1];
    for (; s > 0 && (sstr[s - 1] == 0 || rs->dims[s - 1] == 1); s--)
        reps *= rs->dims[s - 1];
    *len = *p * reps;
    return reps > 1 && *p <= PERIOD_MAX && *len >= 2 * blk;
}

/* r->per, once a run, for the broadcasts among the nodes that are cut
 * per block of blk elements (cut[k]; NULL: every broadcast), but the root
 * and the extra outputs (written out of their blocks): a periodic one
 * gets its buffer. Without memory a broadcast stays cut per block. */
static void periods_setup(Run *r, const IrComputation *c, const bool *cut, int64_t blk)
{
    if (r->per || !(r->per = ts_calloc((size_t)r->nn, sizeof *r->per)))
        return;
    for (int32_t k = 0; k < r->nn - 1; k++) {
        const IrInstr *ins = &c->instr[r->g->nodes[k]];
        Period *pe = &r->per[k];
        bool extra = false;
        for (int32_t e = 0; e < r->nx; e++)
            extra = extra || r->xnode[e] == k;
        pe->at = -1;
        pe->blk = blk;
        if (ins->op == OP_BROADCAST && (!cut || cut[k]) && !extra &&
            periodic_broadcast(&ins->shape, &r->sstr[k * IR_MAX_RANK], blk, &pe->p, &pe->len))
            pe->buf = ts_malloc((size_t)(pe->p + blk) * ir_type_size(ins->shape.type));
    }
}

/* Broadcast node k's elements [first, first + n), n <= blk, to be read
 * where this returns: in its period's buffer (filled anew when they are
 * in another run) or, across two runs or without a period, cut into the
 * node's scratch. */
static uint8_t *broadcast_block(Run *r, const IrComputation *c, int32_t k, int64_t first, int64_t n)
{
    const Period *pe = r->per ? &r->per[k] : NULL;
    const IrShape *rs = &c->instr[r->g->nodes[k]].shape;
    const int64_t *sstr = &r->sstr[k * IR_MAX_RANK];
    size_t w = ir_type_size(rs->type);
    int64_t at = pe && pe->buf ? first / pe->len : 0, e = pe && pe->buf ? first - at * pe->len : 0;
    if (!pe || !pe->buf || e + n > pe->len) {
        dev_broadcast_range(rs, sstr, r->src[k], first, n, r->scratch[k]);
        return r->scratch[k];
    }
    if (pe->at != at) {
        dev_broadcast_range(rs, sstr, r->src[k], at * pe->len, pe->p, pe->buf);
        for (int64_t have = pe->p, want = pe->p + pe->blk; have < want; have *= 2)
            memcpy(pe->buf + (size_t)have * w, pe->buf, (size_t)(have < want - have ? have : want - have) * w);
        r->per[k].at = at;
    }
    return pe->buf + (size_t)(e % pe->p) * w;
}

/* One block [first, first + n) through every node. With `direct` the root
 * writes straight into the result; otherwise (the result is a leaf's
 * buffer, read in the same block) into its own buffer, copied out after
 * the block (unless out is NULL: a column group folds it from there), as
 * the extra outputs always are. */
static IrStatus run_block(Run *r, const IrComputation *c, int64_t first, int64_t n, uint8_t *out,
                          bool direct)
{
    const DevFusionGroup *g = r->g;
    for (int32_t l = 0; l < g->nleaves; l++)
        if (r->lview[l].shape.rank > 0) /* scalars (select/clamp operands) stay put */
            r->lview[l].data = r->lbase[l] + (size_t)first * ir_type_size(r->lview[l].shape.type);
    for (int32_t k = 0; k < r->nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        size_t w = ir_type_size(ins->shape.type);
        DevValue *v = &r->nview[k];
        v->data = direct && k == r->nn - 1 ? out + (size_t)first * w : r->scratch[k];
        v->nbytes = n * (int64_t)w;
        if (ir_fusion_strided(ins)) {
            if (v->data == r->scratch[k])
                v->data = broadcast_block(r, c, k, first, n);
            else
                dev_broadcast_range(&ins->shape, &r->sstr[k * IR_MAX_RANK], r->src[k], first, n, v->data);
            continue;
        }
        IrStatus st = dev_k_elementwise_range(&r->k[k], n, v);
        if (st != IR_OK)
            return st;
    }
    for (int32_t e = 0; e < r->nx; e++) {
        const DevValue *v = &r->nview[r->xnode[e]];
        memcpy(r->xout[e] + (size_t)first * ir_type_size(v->shape.type), v->data, (size_t)v->nbytes);
    }
    const DevValue *root = &r->nview[r->nn - 1];
    if (!direct && out)
        memcpy(out + (size_t)first * ir_type_size(root->shape.type), root->data, (size_t)root->nbytes);
    return IR_OK;
}

/* ---- the chunk interpreter (f32) ---- */

/* Elements a chunk: 256 f32 is 1 KiB a node, so a group's chunk stays in
 * L1. The 8-op chain is bound by the chunks' stores and loads in L1, not
 * by memory: over 256K elements (in cache), fastest of 1500 runs, 0.142
 * ms with 256, 0.158 with 128, 0.145 with 512, 0.154 with 1024. */
#define FAST_CHUNK 256

typedef struct FastNode {
    IrOpcode op;
    int32_t nopnd; /* 1 or 2; 0 for a broadcast, which is filled outside */
    int32_t a, b;  /* operand slots */
} FastNode;

#define FAST_UNARY(T, OPC, EXPR)                      \
    case OPC:                                         \
        for (int64_t i = 0; i < m; i++) {             \
            T a = x[i];                               \
            r[i] = (EXPR);                            \
        }                                             \
        break;
#define FAST_BINARY(T, OPC, EXPR)                     \
    case OPC:                                         \
        for (int64_t i = 0; i < m; i++) {             \
            T a = x[i], b = y[i];                     \
            r[i] = (EXPR);                            \
        }                                             \
        break;

/* r[i] = op(x[i]) for i < m: libmvec's function where it has one
 * (vmath.h: an element's bits depend on its value alone), else
 * float_ops.h's expression. */
static inline __attribute__((always_inline)) void fast_unary(IrOpcode op, const float *x,
                                                             float *r, int64_t m)
{
    if (dev_vmath_f32(op, x, r, m))
        return;
    switch (op) {
        DEV_FLOAT_UNARY_OPS(FAST_UNARY, float)
    default: break;
    }
}

/* One chunk of m elements through every node: slot[] holds the leaves'
 * chunks, then the nodes' buffers (res[k] is slot[nleaves + k]). Inlined
 * twice below: with m a constant the loops have no remainder to handle. */
static inline __attribute__((always_inline)) void fast_nodes(const FastNode *prog, int32_t nn,
                                                             const float *const *slot, float *const *res,
                                                             int64_t m)
{
    for (int32_t k = 0; k < nn; k++) {
        const FastNode *f = &prog[k];
        float *restrict r = res[k];
        const float *restrict x = slot[f->a];
        const float *restrict y = slot[f->b];
        if (f->nopnd == 1) {
            fast_unary(f->op, x, r, m);
        } else if (f->nopnd == 2) {
            switch (f->op) {
                DEV_FLOAT_BINARY_OPS(FAST_BINARY, float)
            default: break;
            }
        }
    }
}

DEV_VECTOR_CLONES static void fast_chunk(const FastNode *prog, int32_t nn, const float *const *slot,
                                         float *const *res, int64_t m)
{
    if (m == FAST_CHUNK)
        fast_nodes(prog, nn, slot, res, FAST_CHUNK);
    else
        fast_nodes(prog, nn, slot, res, m);
}

/* ---- the register path (AVX-512; its AVX2 form below) ----
 *
 * The chunk interpreter stores every node's chunk and loads it again in
 * the next node; in cache that costs the 8-op chain about 0.5 ns an
 * element, as much as the memory it streams on this machine. Where every
 * node is one of the ops below, a whole chunk instead goes through the
 * nodes in 16 AVX-512 registers (256 f32): each node's value stays in
 * the registers for the next node (operand kind ACC) and is stored to its
 * chunk only when a later node reads it otherwise (MEM), or a broadcast
 * or leaf is read from its chunk. One switch per node and chunk, as in
 * the interpreter. Standalone over the same chain in cache: 0.011 ms a
 * 64K chain against 0.0205 (a hand-fused loop: 0.0088). Each op is the
 * same IEEE operation as float_ops.h's expression (the reducers' vector
 * forms are arith.h's dev_v16_*, maximum and minimum with their NaN and
 * tie rule; the ops taken are the VECTOR column of ir/hlo_op_sem.def;
 * negate and abs on the sign bit, as the compiler does for -a and fabs;
 * sqrt correctly rounded, as sqrtf is),
 * so results are bit for bit the interpreter's. Partial chunks (but a
 * half one: chunks_range), other ops, and CPUs without AVX-512 or AVX2
 * take the interpreter. */
#define REG_VECS (FAST_CHUNK / 16)

enum { REG_ACC = 0, REG_MEM = 1 };

/* Which form of the register path runs (reg_isa): none (the
 * interpreter), AVX-512's (reg_chunk) or AVX2's (reg2_chunk). */
typedef enum { REG_NONE, REG_AVX2, REG_AVX512 } RegIsa;

typedef struct RegNode {
    IrOpcode op;
    int32_t nopnd;
    uint8_t ka, kb; /* REG_ACC or REG_MEM */
    int32_t a, b;   /* slots of MEM operands */
    bool spill;     /* store the value to its chunk (res[k]) */
    int32_t k;      /* node index */
    uint8_t sel;    /* reg2_chunk's case: the op's REG_SEL_ and its operands' form (reg_select) */
    uint8_t lead;   /* 1: a, 2: b is a leaf read here first (reg2_chunk prefetches it) */
} RegNode;

/* The ops of the VECTOR column of ir/hlo_op_sem.def, with their arity;
 * reg_chunk has a case for each. And the math functions of vmath.h
 * (tanh, exp, ...: GELU's and the logistic's chains), which reg_chunk
 * runs on the node's chunk in L1 (stored from the registers, through
 * libmvec in place, loaded back): the interpreter's call on the same
 * chunk, so the same bits, with the other nodes in registers. */
static bool reg_op(IrOpcode op, int32_t nopnd)
{
    return (ir_op_vector(op) && nopnd == ir_op_arity(op)) || (nopnd == 1 && dev_vmath_has(op));
}

/* The ops reg2_chunk has a case for; the others (math functions) take
 * its default. */
enum { REG_SEL_ADD, REG_SEL_SUB, REG_SEL_MUL, REG_SEL_DIV, REG_SEL_MAX, REG_SEL_MIN,
       REG_SEL_NEG, REG_SEL_ABS, REG_SEL_SQRT, REG_SEL_OTHER = 63 };

/* Each node's sel: 4 * its op's REG_SEL_ + 2 where operand a is read from
 * memory + 1 where operand b is (REG_ACC: the accumulator); and its lead:
 * the leaves (slots under nl) it is the first to read. */
static void reg_select(RegNode *prog, int32_t n, int32_t nl)
{
    for (int32_t i = 0; i < n; i++) {
        RegNode *f = &prog[i];
        bool a_mem = f->ka == REG_MEM, b_mem = f->nopnd == 2 && f->kb == REG_MEM;
        bool a_lead = a_mem && f->a < nl, b_lead = b_mem && f->b < nl && !(a_mem && f->b == f->a);
        for (int32_t j = 0; j < i; j++) {
            const RegNode *e = &prog[j];
            bool ea = e->ka == REG_MEM, eb = e->nopnd == 2 && e->kb == REG_MEM;
            a_lead = a_lead && !(ea && e->a == f->a) && !(eb && e->b == f->a);
            b_lead = b_lead && !(ea && e->a == f->b) && !(eb && e->b == f->b);
        }
        f->lead = (uint8_t)((a_lead ? 1 : 0) | (b_lead ? 2 : 0));
        int s;
        switch (f->op) {
        case OP_ADD: s = REG_SEL_ADD; break;
        case OP_SUBTRACT: s = REG_SEL_SUB; break;
        case OP_MULTIPLY: s = REG_SEL_MUL; break;
        case OP_DIVIDE: s = REG_SEL_DIV; break;
        case OP_MAXIMUM: s = REG_SEL_MAX; break;
        case OP_MINIMUM: s = REG_SEL_MIN; break;
        case OP_NEGATE: s = REG_SEL_NEG; break;
        case OP_ABS: s = REG_SEL_ABS; break;
        case OP_SQRT: s = REG_SEL_SQRT; break;
        default: s = REG_SEL_OTHER; break;
        }
        f->sel = (uint8_t)(4 * s + (a_mem ? 2 : 0) + (b_mem ? 1 : 0));
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

static RegIsa reg_isa(bool no_avx512)
{
    if (__builtin_cpu_supports("avx512f") && !no_avx512)
        return REG_AVX512;
    return __builtin_cpu_supports("avx2") ? REG_AVX2 : REG_NONE;
}

#define REG_T __attribute__((target("avx512f")))
#define REG_EACH(S)                       \
    for (int32_t j = 0; j < nvec; j++) { \
        S;                                   \
    }
#define REG_LD(p) _mm512_loadu_ps((p) + 16 * j)
#define REG_BIN(F)                                                           \
    if (f->ka == REG_ACC && f->kb == REG_ACC)                                \
        REG_EACH(v[j] = F(v[j], v[j]))                                       \
    else if (f->ka == REG_ACC)                                               \
        REG_EACH(v[j] = F(v[j], REG_LD(y)))                                  \
    else if (f->kb == REG_ACC)                                               \
        REG_EACH(v[j] = F(REG_LD(x), v[j]))                                  \
    else                                                                     \
        REG_EACH(v[j] = F(REG_LD(x), REG_LD(y)))
#define REG_UN(F)            \
    if (f->ka == REG_ACC)    \
        REG_EACH(v[j] = F(v[j])) \
    else                     \
        REG_EACH(v[j] = F(REG_LD(x)))

REG_T static inline __m512 reg_neg(__m512 a)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
}

REG_T static inline __m512 reg_abs(__m512 a)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MAX)));
}

/* A chunk of 16 nvec elements (nvec a constant once inlined: the whole
 * chunk, or its half, a run's tail of 128) through every node; the last
 * node's value into res[k] of the last node (the result's chunk or its
 * scratch). GCC cannot see that v is written before it is read (and
 * zeroing it first costs a fifth of the function's time: v then lives on
 * the stack at the start), hence the pragma. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/* With `to` (64-byte aligned) the last node goes there with non-temporal
 * stores, straight from the registers, instead of into its chunk. */
REG_T static inline __attribute__((always_inline)) void reg_chunk_of(int32_t nvec, const RegNode *prog, int32_t n,
                                                                    const float *const *slot, float *const *res,
                                                                    float *to)
{
    __m512 v[REG_VECS]; /* the first node reads no REG_ACC (reg_program), so v is set first */
    assert(n > 0 && prog[0].ka != REG_ACC && (prog[0].nopnd < 2 || prog[0].kb != REG_ACC));
    for (int32_t k = 0; k < n; k++) {
        const RegNode *f = &prog[k];
        const float *x = slot[f->a], *y = slot[f->b];
        switch (f->op) {
        case OP_ADD: REG_BIN(dev_v16_add); break;
        case OP_SUBTRACT: REG_BIN(_mm512_sub_ps); break;
        case OP_MULTIPLY: REG_BIN(dev_v16_mul); break;
        case OP_DIVIDE: REG_BIN(_mm512_div_ps); break;
        case OP_MAXIMUM: REG_BIN(dev_v16_max); break;
        case OP_MINIMUM: REG_BIN(dev_v16_min); break;
        case OP_NEGATE: REG_UN(reg_neg); break;
        case OP_ABS: REG_UN(reg_abs); break;
        case OP_SQRT: REG_UN(_mm512_sqrt_ps); break;
        default: { /* a math function (reg_op): through its chunk */
            float *r = res[f->k];
            if (f->ka == REG_ACC)
                REG_EACH(_mm512_storeu_ps(r + 16 * j, v[j]))
            fast_unary(f->op, f->ka == REG_ACC ? r : x, r, 16 * nvec);
            REG_EACH(v[j] = REG_LD(r))
            break;
        }
        }
        if (k == n - 1 && to) {
            REG_EACH(_mm512_stream_ps(to + 16 * j, v[j]))
        } else if (f->spill || k == n - 1) {
            float *r = res[f->k];
            REG_EACH(_mm512_storeu_ps(r + 16 * j, v[j]))
        }
    }
}

/* m elements (FAST_CHUNK or half of it) through reg_chunk_of. */
REG_T static void reg_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res, float *to,
                            int64_t m)
{
    if (m == FAST_CHUNK)
        reg_chunk_of(REG_VECS, prog, n, slot, res, to);
    else
        reg_chunk_of(REG_VECS / 2, prog, n, slot, res, to);
}
#pragma GCC diagnostic pop

/* ---- the register path's AVX2 form ----
 *
 * 16 ymm registers hold a quarter of a chunk (64 f32 in 8, the rest for
 * operands): each quarter goes through every node as reg_chunk's whole
 * chunk does, a math function on the node's quarter in L1. The same IEEE
 * operations (DEV_FMAX / DEV_FMIN as blends; no FMA: target avx2 alone,
 * so no multiply and add are contracted), so the same bits. A quarter
 * dispatches each node again, so the switch is on sel (one case for each
 * op and form of its operands, set once by reg_select: 15 % fewer
 * instructions on the 8-op chain than testing the form at each node,
 * counted by callgrind), and the first node to read a leaf prefetches
 * the leaf's quarter REG2_AHEAD elements on. */
#define REG2_VECS 8
#define REG2_T __attribute__((target("avx2")))
#define REG2_EACH(S)                          \
    for (int32_t j = 0; j < REG2_VECS; j++) { \
        S;                                    \
    }
#define REG2_LD(p) _mm256_loadu_ps((p) + q + 8 * j)
/* A quarter of each leaf is asked for this far ahead (elements), two
 * chunks: the hardware's prefetcher alone leaves the first loads of each
 * quarter waiting on memory. On the Zen 3 machine the 8-op benchmark's
 * warm step went from 10.5 to 9.3 ms (medians of 10 alternations; 2048
 * elements ahead 9.5, 1024 and 4096 10.2: BENCHMARKS.md). A
 * prefetch past a leaf's end is harmless (it never faults). */
#define REG2_AHEAD 512

REG2_T static inline void reg2_prefetch(const float *p, int32_t at)
{
    /* An address, not a pointer into the leaf: it may lie past its end. */
    uintptr_t a = (uintptr_t)p + (uintptr_t)at * sizeof *p;
    for (int32_t i = 0; i < 8 * REG2_VECS; i += 16)
        _mm_prefetch((const char *)(a + (uintptr_t)i * sizeof *p), _MM_HINT_T0);
}

/* reg2_chunk's cases of one op, one for each form of its operands
 * (reg_select): the accumulator's or memory's, decided when the program
 * is made rather than tested at each node of each quarter. */
#define REG2_CASES_BIN(S, F)                                       \
    case 4 * (S) + 0: REG2_EACH(v[j] = F(v[j], v[j])) break;       \
    case 4 * (S) + 1: REG2_EACH(v[j] = F(v[j], REG2_LD(y))) break; \
    case 4 * (S) + 2: REG2_EACH(v[j] = F(REG2_LD(x), v[j])) break; \
    case 4 * (S) + 3: REG2_EACH(v[j] = F(REG2_LD(x), REG2_LD(y))) break;
#define REG2_CASES_UN(S, F)                             \
    case 4 * (S) + 0: REG2_EACH(v[j] = F(v[j])) break; \
    case 4 * (S) + 2: REG2_EACH(v[j] = F(REG2_LD(x))) break;

/* DEV_FMAX: a where a is NaN or a >= b; DEV_FMIN: a where a is NaN or a <= b. */
REG2_T static inline __m256 reg2_max(__m256 a, __m256 b)
{
    return _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, _CMP_GE_OQ)));
}

REG2_T static inline __m256 reg2_min(__m256 a, __m256 b)
{
    return _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(a, b, _CMP_LE_OQ)));
}

REG2_T static inline __m256 reg2_neg(__m256 a)
{
    return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}

REG2_T static inline __m256 reg2_abs(__m256 a)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/* reg_chunk in AVX2 over m elements (a multiple of 64), a quarter of
 * the whole chunk at a time; `to` 32-byte aligned at least. */
REG2_T static void reg2_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res,
                              float *to, int64_t m)
{
    __m256 v[REG2_VECS]; /* the first node reads no REG_ACC (reg_program), so v is set first */
    assert(n > 0 && prog[0].ka != REG_ACC && (prog[0].nopnd < 2 || prog[0].kb != REG_ACC));
    for (int32_t q = 0; q < m; q += 8 * REG2_VECS) {
        for (int32_t k = 0; k < n; k++) {
            const RegNode *f = &prog[k];
            const float *x = slot[f->a], *y = slot[f->b];
            if (f->lead & 1)
                reg2_prefetch(x, q + REG2_AHEAD);
            if (f->lead & 2)
                reg2_prefetch(y, q + REG2_AHEAD);
            switch (f->sel) {
                REG2_CASES_BIN(REG_SEL_ADD, _mm256_add_ps)
                REG2_CASES_BIN(REG_SEL_SUB, _mm256_sub_ps)
                REG2_CASES_BIN(REG_SEL_MUL, _mm256_mul_ps)
                REG2_CASES_BIN(REG_SEL_DIV, _mm256_div_ps)
                REG2_CASES_BIN(REG_SEL_MAX, reg2_max)
                REG2_CASES_BIN(REG_SEL_MIN, reg2_min)
                REG2_CASES_UN(REG_SEL_NEG, reg2_neg)
                REG2_CASES_UN(REG_SEL_ABS, reg2_abs)
                REG2_CASES_UN(REG_SEL_SQRT, _mm256_sqrt_ps)
            default: { /* a math function (reg_op): through its quarter */
                float *r = res[f->k];
                if (f->ka == REG_ACC)
                    REG2_EACH(_mm256_storeu_ps(r + q + 8 * j, v[j]))
                fast_unary(f->op, (f->ka == REG_ACC ? r : x) + q, r + q, 8 * REG2_VECS);
                REG2_EACH(v[j] = REG2_LD(r))
                break;
            }
            }
            if (f->spill && k < n - 1) {
                float *r = res[f->k];
                REG2_EACH(_mm256_storeu_ps(r + q + 8 * j, v[j]))
            }
        }
        if (to) {
            REG2_EACH(_mm256_stream_ps(to + q + 8 * j, v[j]))
        } else {
            float *r = res[prog[n - 1].k];
            REG2_EACH(_mm256_storeu_ps(r + q + 8 * j, v[j]))
        }
    }
}
#pragma GCC diagnostic pop
#else
static RegIsa reg_isa(bool no_avx512)
{
    (void)no_avx512;
    return REG_NONE;
}

static void reg_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res,
                      float *to, int64_t m)
{
    (void)prog, (void)n, (void)slot, (void)res, (void)to, (void)m;
}

static void reg2_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res,
                       float *to, int64_t m)
{
    (void)prog, (void)n, (void)slot, (void)res, (void)to, (void)m;
}
#endif

/* The register program of a chunk program (FastNodes, broadcasts with
 * nopnd 0 left out): false where some node is not a reg_op. Operand slot
 * nl + t is node t; the value of the node evaluated just before is in
 * the registers (REG_ACC), every other operand is read from its slot, so
 * a node read that way is spilled. */
static bool reg_program(const FastNode *fast, int32_t nn, int32_t nl, RegNode *prog, int32_t *n)
{
    int32_t prev = -1;
    *n = 0;
    for (int32_t k = 0; k < nn; k++) {
        const FastNode *f = &fast[k];
        if (f->nopnd == 0)
            continue; /* a broadcast: its chunk is filled outside */
        if (!reg_op(f->op, f->nopnd))
            return false;
        RegNode *r = &prog[(*n)++];
        *r = (RegNode){.op = f->op, .nopnd = f->nopnd, .a = f->a, .b = f->b, .k = k};
        r->ka = prev >= 0 && f->a == nl + prev ? REG_ACC : REG_MEM;
        r->kb = f->nopnd == 2 && prev >= 0 && f->b == nl + prev ? REG_ACC : REG_MEM;
        prev = k;
    }
    for (int32_t i = 0; i < *n; i++) {
        int32_t slot = nl + prog[i].k;
        for (int32_t j = i + 1; j < *n; j++)
            if ((prog[j].ka == REG_MEM && prog[j].a == slot) ||
                (prog[j].nopnd == 2 && prog[j].kb == REG_MEM && prog[j].b == slot))
                prog[i].spill = true;
    }
    return *n > 0 && prog[*n - 1].k == nn - 1;
}

/* Results at least this large (bytes) are written with non-temporal
 * stores: they do not fit in the last-level cache, so the next reader
 * finds them in memory either way, and a normal store first reads every
 * line it writes (write-allocate): 4 bytes of traffic for every 3 the
 * chain needs (x, y read, the result written). The last-level cache's
 * size where the system says it, else 32 MiB, and never more than
 * STREAM_CAP: a virtual machine reports its host's whole cache, shared
 * with every other guest (260 MiB here, where one thread's three 64 MiB
 * arrays still stream at memory's rate, STREAM 19 GB/s). With the cap the
 * 8-op benchmark's 64 MiB result is streamed: 16 ms a step instead of 21
 * on the loaded machine (BENCHMARKS.md, elementwise). */
#define STREAM_CAP ((int64_t)32 << 20)

static int64_t stream_min_bytes(void)
{
    static int64_t min;
    if (__atomic_load_n(&min, __ATOMIC_RELAXED) == 0) {
        long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
        l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        int64_t b = l3 >= (1 << 20) ? (int64_t)l3 : STREAM_CAP;
        __atomic_store_n(&min, b < STREAM_CAP ? b : STREAM_CAP, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&min, __ATOMIC_RELAXED);
}

/* dst[0..n) = src[0..n) (src 16-byte aligned) without reading dst's lines
 * into the cache; false (nothing written) where there is no such store or
 * dst is not 16-byte aligned. */
static bool stream_f32(float *dst, const float *src, int64_t n)
{
#if defined(__SSE2__)
    if ((uintptr_t)dst % 16)
        return false;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, _mm_load_ps(src + i));
    for (; i < n; i++)
        dst[i] = src[i];
    return true;
#else
    (void)dst, (void)src, (void)n;
    return false;
#endif
}

static void stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* A run's chunk program (chunks_setup), kept for the chunk ranges it
 * runs (chunks_range): several when it is a dot's consumers, one a strip
 * of the GEMM's rows. */
typedef struct Chunks {
    FastNode prog[IR_FUSION_MAX_NODES];
    const float *slot[IR_FUSION_MAX_NODES * (MAX_OPND + 1)];
    float *res[IR_FUSION_MAX_NODES];
    bool cut[IR_FUSION_MAX_NODES], whole[IR_FUSION_MAX_NODES * MAX_OPND];
    RegNode rprog[IR_FUSION_MAX_NODES];
    int32_t nr;
    bool regs;
    RegIsa isa; /* the register path's form, where regs */
} Chunks;

/* The chunk program of run r: broadcasts of a scalar filled once; those
 * that repeat a pattern read in place from their period's buffer
 * (periods_setup); others cut per chunk. */
static void chunks_setup(Run *r, const IrComputation *c, Chunks *ch)
{
    const DevFusionGroup *g = r->g;
    int32_t nl = g->nleaves, nn = r->nn;
    int64_t all = ir_shape_elements(&c->instr[g->nodes[nn - 1]].shape);
    for (int32_t l = 0; l < nl; l++) {
        /* Leaves read element for element have the result's size; a
         * broadcast's source is read only through its strides. */
        ch->whole[l] = ir_shape_elements(&r->lview[l].shape) == all;
        ch->slot[l] = (const float *)r->lbase[l];
    }
    for (int32_t k = 0; k < nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        ch->res[k] = (float *)r->scratch[k];
        ch->slot[nl + k] = ch->res[k];
        ch->cut[k] = false;
        if (ir_fusion_strided(ins)) {
            ch->prog[k] = (FastNode){.op = ins->op};
            if (r->opnd[k * MAX_OPND]->shape.rank == 0)
                for (int64_t i = 0; i < FAST_CHUNK; i++)
                    ch->res[k][i] = *(const float *)r->src[k];
            else
                ch->cut[k] = true;
            continue;
        }
        int32_t at[2] = {0, 0};
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j], t = ir_fusion_node_index(g, o);
            at[j] = t >= 0 && t < k ? nl + t : ir_fusion_leaf_index(g, o);
        }
        ch->prog[k] = (FastNode){ins->op, ins->nopnd, at[0], ins->nopnd > 1 ? at[1] : at[0]};
    }
    periods_setup(r, c, ch->cut, FAST_CHUNK);
    ch->nr = 0;
    ch->isa = reg_isa(r->no_avx512);
    ch->regs = ch->isa != REG_NONE && reg_program(ch->prog, nn, nl, ch->rprog, &ch->nr);
    for (int32_t t = 0; ch->regs && t < ch->nr; t++) /* the extra outputs are copied out of their chunks */
        for (int32_t e = 0; e < r->nx; e++)
            ch->rprog[t].spill = ch->rprog[t].spill || ch->rprog[t].k == r->xnode[e];
    if (ch->regs)
        reg_select(ch->rprog, ch->nr, nl);
}

/* Elements [first0, first0 + total) of the group, chunk by chunk,
 * element first0 written at out[0]. With `direct` the root writes
 * straight into the result; otherwise (the result is a leaf's buffer,
 * read in the same chunk) into its own buffer, copied out after the
 * chunk. The register path writes it straight there either way: its
 * root is the last node, and stores its chunk only after every load of
 * the chunk (a dot's consumers, whose result is the dot's buffer, spent
 * a third of this function's time in that copy: BENCHMARKS.md, "Stop
 * 60"). So do the extra outputs, each by whether a leaf lent it its
 * buffer. With `stream` the outputs go through their chunks and on with
 * non-temporal stores (the caller fences). Whole chunks and a run's
 * tail of half a chunk (the GEMM's strips of 384 columns: 256 + 128) go
 * through the register path, other tails through the interpreter. */
static void chunks_range(Run *r, const IrComputation *c, Chunks *ch, int64_t first0, int64_t total, uint8_t *out,
                         bool direct, bool stream)
{
    const DevFusionGroup *g = r->g;
    int32_t nl = g->nleaves, nn = r->nn;
    const float **slot = ch->slot;
    float **res = ch->res;
    /* The register path streams its whole chunks itself (a chunk is 1 KiB:
     * 64-byte aligned wherever the result is). */
    bool reg_stream = stream && ch->regs && (uintptr_t)out % 64 == 0;
    for (int64_t first = first0, end = first0 + total; first < end; first += FAST_CHUNK) {
        int64_t m = end - first < FAST_CHUNK ? end - first : FAST_CHUNK;
        float *o = (float *)out + (first - first0);
        for (int32_t l = 0; l < nl; l++)
            if (ch->whole[l])
                slot[l] = (const float *)r->lbase[l] + first;
        for (int32_t k = 0; k < nn; k++)
            if (ch->cut[k] && r->per && r->per[k].buf)
                slot[nl + k] = (const float *)broadcast_block(r, c, k, first, m);
            else if (ch->cut[k])
                dev_broadcast_range(&c->instr[g->nodes[k]].shape, &r->sstr[k * IR_MAX_RANK], r->src[k],
                                    first, m, r->scratch[k]);
        bool in_regs = ch->regs && (m == FAST_CHUNK || m == FAST_CHUNK / 2);
        bool to_o = !stream && (direct || (in_regs && r->nx == 0));
        res[nn - 1] = to_o ? o : (float *)r->scratch[nn - 1];
        for (int32_t e = 0; e < r->nx; e++) /* an extra output's node writes into it, read back from there */
            if (!r->xlent[e] && !stream)
                slot[nl + r->xnode[e]] = res[r->xnode[e]] = (float *)r->xout[e] + first;
        if (in_regs)
            (ch->isa == REG_AVX512 ? reg_chunk : reg2_chunk)(ch->rprog, ch->nr, slot, res, reg_stream ? o : NULL, m);
        else
            fast_chunk(ch->prog, nn, slot, res, m);
        for (int32_t e = 0; e < r->nx; e++) {
            float *to = (float *)r->xout[e] + first;
            if ((r->xlent[e] || stream) && !(stream && stream_f32(to, res[r->xnode[e]], m)))
                memcpy(to, res[r->xnode[e]], (size_t)m * 4);
        }
        if (in_regs && reg_stream)
            continue;
        if (!to_o && !(stream && stream_f32(o, res[nn - 1], m)))
            memcpy(o, res[nn - 1], (size_t)m * 4);
    }
}

/* Elements [first0, first0 + total) of the group (the whole of it but in
 * a column group), chunk by chunk, as chunks_range; results that do not
 * fit in the last-level cache streamed. */
static void run_chunks(Run *r, const IrComputation *c, int64_t first0, int64_t total, uint8_t *out,
                       bool direct)
{
    Chunks ch;
    chunks_setup(r, c, &ch);
    /* Streamed: the root's chunk goes through its scratch (in L1) and on
     * with non-temporal stores. */
    bool stream = total * 4 >= stream_min_bytes() && (uintptr_t)out % 16 == 0;
    chunks_range(r, c, &ch, first0, total, out, direct, stream);
    if (stream)
        stream_fence();
}

/* Extra output e's value: lent by its leaf xlend (taken out of the
 * executor's hands) or new; its data into r->xout[e]. */
static IrStatus extra_output(Run *r, const IrModule *m, const IrComputation *c, int32_t e, int32_t xlend,
                             DevValue **vals, int32_t *rem, IrDiag *d, DevValue **xv)
{
    const DevFusionGroup *g = r->g;
    const IrInstr *ins = &c->instr[g->extra[e]];
    r->xnode[e] = ir_fusion_node_index(g, g->extra[e]);
    if (xlend >= 0) {
        *xv = vals[g->leaves[xlend]];
        vals[g->leaves[xlend]] = NULL;
        rem[g->leaves[xlend]] = 0;
    } else if (!(*xv = dev_value_new_uninit(&ins->shape))) {
        return ir_error(d, IR_ENOMEM, m->file, m->src, ins->pos, "%s: out of memory for the result", ins->name);
    }
    r->xout[e] = (*xv)->data;
    r->xlent[e] = xlend >= 0;
    return IR_OK;
}

/* The f32 scalar value v (rank 0), or false. */
static bool scalar_f32(const DevValue *v, float *x)
{
    if (!v || !dev_value_is_array(v) || v->shape.type != IR_F32 || v->shape.rank != 0)
        return false;
    memcpy(x, v->data, sizeof *x);
    return true;
}

/* The softmax of a dot epilogue (ir_fusion_softmax at g->dot_softmax):
 * the reduces' inits and the clamp's scalar, from the group's leaves. */
static IrStatus dot_softmax(const IrModule *m, const IrComputation *c, const DevFusionGroup *g, DevValue **vals,
                            DevDotEpilogue *e)
{
    IrSoftmax sm;
    if (!ir_fusion_softmax(m, c, g->dot_softmax, &sm) || sm.x != g->dot_select ||
        !scalar_f32(vals[c->instr[sm.rmax].opnd[1]], &e->max_init) ||
        !scalar_f32(vals[c->instr[sm.rsum].opnd[1]], &e->sum_init) ||
        (sm.clamp >= 0 && !scalar_f32(vals[sm.clamp_scalar], &e->clamp)))
        return IR_EINTERNAL;
    e->softmax = true;
    e->clamped = sm.clamp >= 0;
    e->clamp_first = sm.clamp_first;
    return IR_OK;
}

/* Group g's dot epilogue (ir/fusion_find.c's dot_epilogues) from its
 * leaves: the scale's scalar; the select's mask (pred [M,N]), which side
 * keeps the dot's value, and the fill, in this computation or, for a call
 * of `_where`, its callee's parameters mapped onto the call's operands. */
static IrStatus dot_epilogue(const IrModule *m, const IrComputation *c, const DevFusionGroup *g, DevValue **vals,
                             DevDotEpilogue *e)
{
    *e = (DevDotEpilogue){0};
    int32_t prev = g->nodes[g->dot];
    if (g->dot_scale >= 0) {
        const IrInstr *si = &c->instr[g->dot_scale];
        int32_t b = si->opnd[0] == prev ? si->opnd[1] : si->opnd[0];
        e->scaled = true;
        e->divide = si->op == OP_DIVIDE;
        if (!scalar_f32(vals[c->instr[b].opnd[0]], &e->scale))
            return IR_EINTERNAL;
        prev = g->dot_scale;
    }
    const IrInstr *s = &c->instr[g->dot_select];
    const IrComputation *sc = c;
    int32_t mask, fill, keep_slot;
    DevValue *mv, *fv;
    if (s->op == OP_CALL) {
        sc = m->comp[s->called[0]];
        const IrInstr *sel = &sc->instr[sc->root];
        int32_t pn = -1;
        for (int32_t j = 0; j < s->nopnd; j++)
            if (s->opnd[j] == prev)
                pn = j;
        keep_slot = sc->instr[sel->opnd[1]].op == OP_PARAMETER && sc->instr[sel->opnd[1]].a.parameter_number == pn ? 1 : 2;
        mask = sc->instr[sel->opnd[0]].opnd[0];
        fill = sc->instr[sel->opnd[3 - keep_slot]].opnd[0];
        int64_t mp = sc->instr[mask].a.parameter_number, fp = sc->instr[fill].a.parameter_number;
        if (mp < 0 || mp >= s->nopnd || fp < 0 || fp >= s->nopnd)
            return IR_EINTERNAL;
        mv = vals[s->opnd[mp]];
        fv = vals[s->opnd[fp]];
    } else {
        keep_slot = s->opnd[1] == prev ? 1 : 2;
        mask = c->instr[s->opnd[0]].opnd[0];
        fill = c->instr[s->opnd[3 - keep_slot]].opnd[0];
        mv = vals[mask];
        fv = vals[fill];
    }
    const IrShape *rs = &c->instr[g->nodes[g->dot]].shape; /* the root's, or P.V's lhs */
    if (!scalar_f32(fv, &e->fill) || !mv || !dev_value_is_array(mv) || mv->shape.type != IR_PRED ||
        mv->shape.rank != 2 || rs->rank < 2 || mv->shape.dims[0] != rs->dims[rs->rank - 2] ||
        mv->shape.dims[1] != rs->dims[rs->rank - 1])
        return IR_EINTERNAL;
    e->mask = mv->data;
    e->keep = keep_slot == 1;
    return g->dot_softmax >= 0 ? dot_softmax(m, c, g, vals, e) : IR_OK;
}

/* ---- column groups ----
 *
 * A column group (ir_fusion_column_reduce) is a reduce over major dims
 * and the elementwise tree that makes its input: batch norm's variance,
 * sum((h - mean)^2) over N, H, W of h f32[N,H,W,C]. Its input's elements
 * go a block of COLS_BLOCK at a time through the tree (the chunk
 * interpreter or the range kernels, as an elementwise group's), into a
 * buffer that stays in cache, and from there into the accumulators, one
 * a kept element, so the input is never made whole. The dims merge as
 * k_reduce.c's fast path merges them, [... reduced R][kept K] innermost
 * last; the block's rows of K fold with dev_red_fold_cols, each
 * accumulator taking its column in the input's order, as the unfused
 * reduce takes them: the result is the unfused pair's bit for bit. */
#define COLS_BLOCK 8192

typedef struct Cols {
    DevRedDom d;
    IrOpcode op;
    IrType t;
    int32_t nm;                /* merged dims */
    int64_t md[IR_MAX_RANK];   /* their sizes */
    int64_t ostr[IR_MAX_RANK]; /* their strides in the result (0: reduced) */
    int64_t inner, rows;       /* the innermost (kept) merged dim, the reduced one before it */
    DevAcc *acc;               /* one a result element */
} Cols;

/* The merged dims of input `in` reducing `dims`; false unless the
 * innermost is kept and one before it reduced. */
static bool cols_dims(Cols *cl, const IrShape *in, const IrI64List *dims)
{
    bool red[IR_MAX_RANK] = {false}, mr[IR_MAX_RANK];
    for (int32_t j = 0; j < dims->n; j++) {
        if (dims->v[j] < 0 || dims->v[j] >= in->rank)
            return false;
        red[dims->v[j]] = true;
    }
    cl->nm = 0;
    for (int32_t i = 0; i < in->rank; i++) {
        if (in->dims[i] == 1)
            continue;
        if (cl->nm > 0 && mr[cl->nm - 1] == red[i])
            cl->md[cl->nm - 1] *= in->dims[i];
        else
            cl->md[cl->nm] = in->dims[i], mr[cl->nm++] = red[i];
    }
    if (cl->nm < 2 || mr[cl->nm - 1])
        return false;
    for (int32_t i = cl->nm - 1, s = 1; i >= 0; i--) {
        cl->ostr[i] = mr[i] ? 0 : s;
        if (!mr[i])
            s *= cl->md[i];
    }
    cl->inner = cl->md[cl->nm - 1];
    cl->rows = cl->md[cl->nm - 2];
    return true;
}

/* The accumulators' offset for unit u of the input (its u-th run of
 * `inner` elements): from u's index over the merged dims before the last
 * two. */
static int64_t cols_offset(const Cols *cl, int64_t u)
{
    int64_t q = u / cl->rows, off = 0;
    for (int32_t i = cl->nm - 3; i >= 0; i--) {
        off += q % cl->md[i] * cl->ostr[i];
        q /= cl->md[i];
    }
    return off;
}

/* Fold the input's elements [first, first + n), at buf, into the
 * accumulators: whole units that share accumulators in one column fold,
 * a unit cut by the block's edge in two. */
static void cols_fold(const Cols *cl, const uint8_t *buf, int64_t first, int64_t n)
{
    for (int64_t e = first, end = first + n; e < end;) {
        int64_t u = e / cl->inner, j = e % cl->inner, len;
        DevAcc *acc = cl->acc + cols_offset(cl, u);
        if (j == 0 && end - e >= cl->inner) {
            int64_t rows = cl->rows - u % cl->rows, fit = (end - e) / cl->inner;
            rows = rows < fit ? rows : fit;
            dev_red_fold_cols(cl->d, cl->op, cl->t, buf, e - first, rows, cl->inner, acc);
            len = rows * cl->inner;
        } else {
            len = cl->inner - j < end - e ? cl->inner - j : end - e;
            dev_red_fold_cols(cl->d, cl->op, cl->t, buf, e - first, 1, len, acc + j);
        }
        e += len;
    }
}

/* The reduce's domain, reducer, dims and accumulators (from its init, a
 * leaf); the checks k_reduce.c makes. */
static IrStatus cols_setup(Cols *cl, const DevKernelArgs *k, const DevValue *init, const Run *r)
{
    const IrInstr *ins = k->ins;
    const IrShape *in = &k->c->instr[ins->opnd[0]].shape;
    cl->t = in->type;
    cl->op = ir_simple_reducer(k->m, ins->called[0]);
    if (r->nn < 1 || r->g->nodes[r->nn - 1] != ins->opnd[0] || !init || !dev_value_is_array(init) ||
        init->shape.rank != 0 || init->shape.type != ins->shape.type || in->type != ins->shape.type ||
        !dev_red_dom(in->type, &cl->d) || !dev_red_has(cl->d, cl->op) || !cols_dims(cl, in, &ins->a.dimensions))
        return dev_kernel_error(k, IR_EINTERNAL, "fused column reduce: the reduce does not fit");
    int64_t nout = ir_shape_elements(&ins->shape);
    if (!(cl->acc = ts_malloc((size_t)(nout > 0 ? nout : 1) * sizeof *cl->acc)))
        return dev_kernel_oom(k, NULL);
    DevAcc a = dev_acc_load(cl->d, init->shape.type, init->data, 0);
    for (int64_t i = 0; i < nout; i++)
        cl->acc[i] = a;
    return IR_OK;
}

static IrStatus run_columns(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                            const DevExecOptions *opt, IrDiag *d, DevValue **vals, DevValue **out)
{
    const IrInstr *root = &c->instr[g->root];
    DevKernelArgs k = {m, c, root, root->nopnd, NULL, opt, d};
    Run r = {.g = g};
    Cols cl = {0};
    DevValue *res = NULL;
    uint8_t *buf = NULL;
    IrStatus st = run_setup(&r, m, c, opt, d, vals);
    if (st == IR_OK)
        st = cols_setup(&cl, &k, vals[root->opnd[1]], &r);
    bool chunks = opt->fusion_block <= 0 && chunkable(c, g);
    int64_t block = st != IR_OK ? 0 : chunks ? COLS_BLOCK : block_elements(&r, c, opt);
    if (st == IR_OK)
        st = run_scratch(&r, c, chunks ? FAST_CHUNK : block, d);
    if (st == IR_OK && chunks && !(buf = ts_malloc((size_t)block * sizeof(float))))
        st = dev_kernel_oom(&k, NULL);
    if (st == IR_OK && !(res = dev_value_new_uninit(&root->shape)))
        st = dev_kernel_oom(&k, NULL);
    int64_t total = st == IR_OK ? ir_shape_elements(&c->instr[root->opnd[0]].shape) : 0;
    if (st == IR_OK && !chunks)
        periods_setup(&r, c, NULL, block);
    for (int64_t first = 0; st == IR_OK && first < total; first += block) {
        int64_t n = total - first < block ? total - first : block;
        if (chunks)
            run_chunks(&r, c, first, n, buf, true);
        else
            st = run_block(&r, c, first, n, NULL, false);
        if (st == IR_OK)
            cols_fold(&cl, chunks ? buf : r.nview[r.nn - 1].data, first, n);
    }
    if (st == IR_OK)
        dev_acc_store_run(cl.d, root->shape.type, res->data, cl.acc, ir_shape_elements(&root->shape));
    run_free(&r);
    ts_free(cl.acc);
    ts_free(buf);
    if (st != IR_OK) {
        dev_value_unref(res);
        return st;
    }
    *out = res;
    return IR_OK;
}

/* Attention's scores, softmax and P.V as one group (g->dot_then): P.V
 * reads V (its rhs) as the scores' dot reads its operands, through a
 * transpose in the group without making it. */
static IrStatus attention(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                          const DevExecOptions *opt, IrDiag *d, DevValue **vals, const DevKernelArgs *k,
                          const IrI64List *const perm[2], const DevDotEpilogue *epi, DevValue **out)
{
    const IrInstr *pv = &c->instr[g->nodes[g->dot_then]];
    int32_t o = pv->opnd[1];
    const IrI64List *vperm = NULL;
    if (ir_fusion_node_index(g, o) >= 0) {
        vperm = &c->instr[o].a.dimensions;
        o = c->instr[o].opnd[0];
    }
    DevValue *opnd[2] = {NULL, vals[o]};
    DevKernelArgs kv = {m, c, pv, pv->nopnd, opnd, opt, d};
    return dev_k_dot_attention(k, perm, g->dot_lower, epi, &kv, vperm, out);
}

/* ---- elementwise consumers in the dot's epilogue ----
 *
 * A group with dot_feeds (ir/fusion_find.c's dot_consumers): its nodes but
 * the dot's (the dot, its pair's transpose, the transposes it reads in
 * place) form an elementwise group of their own, whose leaves are the
 * ones they read and the dot's value v. k_dot.c hands each block of the
 * dot's result to feeds_then as the GEMM finishes it (inside tessel's own
 * GEMM, a strip of its tile rows while in L1), and the elementwise part
 * runs over it there, through the chunk interpreter (or the range
 * kernels, a block at a time), writing the group's values over the
 * dot's: the dot's buffer becomes the result. The same nodes on the same
 * values as when the group ran after the dot: the same bits. */
typedef struct Feeds {
    Run r;
    Chunks ch;
    const IrComputation *c;
    bool chunks;
    int64_t block;
    int32_t vleaf; /* v among the part's leaves */
    IrOpcode unary; /* the part is one math function of v (vmath.h), or OP_COUNT */
    IrStatus st;   /* the first kernel error of the block path */
    int32_t ahead[IR_FUSION_MAX_NODES * MAX_OPND]; /* the leaves feeds_ahead fetches */
    int32_t nahead;
} Feeds;

/* DevDotEpilogue.then: c[0..n), the result's elements [first, first + n). */
static void feeds_then(void *ctx, float *c, int64_t first, int64_t n)
{
    Feeds *f = ctx;
    uint8_t *base = (uint8_t *)(c - first); /* the result's element 0 */
    f->r.lbase[f->vleaf] = base;
    /* mlp's tanh: in place, a whole run at a time (the chunk interpreter
     * calls the same function a chunk at a time, through its scratch) */
    if (f->unary != OP_COUNT && dev_vmath_f32(f->unary, c, c, n))
        return;
    if (f->chunks) {
        chunks_range(&f->r, f->c, &f->ch, first, n, (uint8_t *)c, false, false);
        return;
    }
    for (int64_t b = first, end = first + n; b < end && f->st == IR_OK; b += f->block)
        f->st = run_block(&f->r, f->c, b, end - b < f->block ? end - b : f->block, base, false);
}

/* The elementwise part eg of group g (its arrays nodes, leaves, refs,
 * direct of IR_FUSION_MAX_NODES (* MAX_OPND) entries): g's nodes but the
 * dot's, in order; v, the dot's value, one of its leaves. */
static void feeds_part(const IrComputation *c, const DevFusionGroup *g, DevFusionGroup *eg, int32_t *nodes,
                       int32_t *leaves, int32_t *refs, bool *direct)
{
    const IrInstr *dot = &c->instr[g->nodes[g->dot]];
    *eg = (DevFusionGroup){.root = g->root, .nodes = nodes, .leaves = leaves, .leaf_refs = refs,
                           .leaf_direct = direct, .nouter = -1, .space = g->root, .dot = -1, .dot_scale = -1,
                           .dot_select = -1, .dot_softmax = -1, .dot_then = -1, .dot_feeds = -1};
    for (int32_t k = 0; k < g->nnodes; k++) {
        int32_t i = g->nodes[k];
        bool dots = k == g->dot || i == g->dot_feeds;
        for (int32_t j = 0; j < dot->nopnd; j++)
            dots = dots || dot->opnd[j] == i;
        if (!dots)
            nodes[eg->nnodes++] = i;
    }
    for (int32_t k = 0; k < eg->nnodes; k++) {
        const IrInstr *ins = &c->instr[nodes[k]];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j], l = ir_fusion_node_index(eg, o) >= 0 ? -2 : ir_fusion_leaf_index(eg, o);
            if (l == -2)
                continue;
            if (l < 0) {
                l = eg->nleaves++;
                leaves[l] = o;
                refs[l] = 0;
                direct[l] = true;
            }
            refs[l]++;
            direct[l] = direct[l] && !ir_fusion_strided(ins);
        }
    }
}

/* DevDotEpilogue.ahead: the other leaves read element for element over
 * [first, first + n) fetched while the GEMM computes. Read in short runs
 * of a strip's rows, they would come from memory at its latency when the
 * strip is handed over (the SGD update's weight: its loads were 3/4 of
 * the fused update's time); fetched in a burst there, the fetches waited
 * for each other. Fetched for L1 (prefetcht0), which fills L2 on the way:
 * the B panels stream the lines out of L1 again before the strip comes,
 * but a hint for L2 alone (prefetcht1) left them in memory on the Zen 5
 * machine, where the update over a weight of 8 MiB then cost 1.2 ms a
 * product above the same chain without the weight, against 0.4 with
 * prefetcht0 (BENCHMARKS.md, "Stop 60"). */
static void feeds_ahead(void *ctx, int64_t first, int64_t n)
{
    const Feeds *f = ctx;
    for (int32_t k = 0; k < f->nahead; k++)
        for (int64_t e = first; e < first + n; e += 16)
            __builtin_prefetch(f->r.lbase[f->ahead[k]] + e * 4, 0, 3);
}

static IrStatus run_feeds(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                          const DevExecOptions *opt, IrDiag *d, DevValue **vals, const DevKernelArgs *k,
                          const IrI64List *const perm[2], DevValue **out)
{
    int32_t nodes[IR_FUSION_MAX_NODES], leaves[IR_FUSION_MAX_NODES * MAX_OPND], refs[IR_FUSION_MAX_NODES * MAX_OPND];
    bool direct[IR_FUSION_MAX_NODES * MAX_OPND];
    DevFusionGroup eg;
    feeds_part(c, g, &eg, nodes, leaves, refs, direct);
    int32_t v = g->dot_feeds;
    const IrInstr *vi = &c->instr[v], *root = &c->instr[g->root];
    Feeds f = {.r = {.g = &eg}, .c = c, .vleaf = ir_fusion_leaf_index(&eg, v), .st = IR_OK};
    if (f.vleaf < 0 || eg.nnodes < 1 || vi->shape.type != IR_F32 || root->shape.type != IR_F32)
        return dev_kernel_error(k, IR_EINTERNAL, "dot epilogue: %s's consumers do not fit", vi->name);
    /* v is bound when the GEMM hands its blocks over (feeds_then); until then
     * the setup sees a value of its shape with no data */
    DevValue unbound = {.shape = vi->shape, .nbytes = ir_shape_bytes(&vi->shape), .refs = 1}, *was = vals[v];
    vals[v] = &unbound;
    IrStatus st = run_setup(&f.r, m, c, opt, d, vals);
    vals[v] = was;
    f.chunks = opt->fusion_block <= 0 && chunkable(c, &eg);
    f.block = st != IR_OK ? 0 : f.chunks ? FAST_CHUNK : block_elements(&f.r, c, opt);
    if (st == IR_OK)
        st = run_scratch(&f.r, c, f.block, d);
    const IrInstr *only = &c->instr[eg.nodes[0]];
    f.unary = f.chunks && eg.nnodes == 1 && only->nopnd == 1 && only->opnd[0] == v ? only->op : OP_COUNT;
    if (st == IR_OK && f.chunks)
        chunks_setup(&f.r, c, &f.ch);
    else if (st == IR_OK)
        periods_setup(&f.r, c, NULL, f.block);
    for (int32_t l = 0; st == IR_OK && f.chunks && l < eg.nleaves; l++)
        if (l != f.vleaf && f.ch.whole[l])
            f.ahead[f.nahead++] = l;
    /* Nothing to fetch (a function of v alone, or of v and broadcasts:
     * mlp's tanh, GELU): no call a tile. */
    DevValue *res = NULL;
    DevDotEpilogue epi = {.then = feeds_then, .ctx = &f, .ahead = f.nahead > 0 ? feeds_ahead : NULL};
    if (st == IR_OK)
        st = dev_k_dot_fused(k, perm, v != g->nodes[g->dot] ? &vi->shape : NULL, g->dot_lower, &epi, &res);
    if (st == IR_OK)
        st = f.st;
    run_free(&f.r);
    if (st == IR_OK && !(res = dev_value_reshaped(res, &root->shape)))
        st = ir_error(d, IR_ENOMEM, m->file, m->src, root->pos, "%s: out of memory", root->name);
    if (st != IR_OK) {
        dev_value_unref(res);
        return st;
    }
    *out = res;
    return IR_OK;
}

IrStatus dev_fusion_run(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                        const DevExecOptions *opt, IrDiag *d, DevValue **vals, int32_t *rem,
                        DevValue **out)
{
    *out = NULL;
    if (g->nouter >= 0)
        return dev_fusion_run_rows(m, c, g, opt, d, vals, out);
    if (g->columns)
        return run_columns(m, c, g, opt, d, vals, out);
    const IrInstr *root = &c->instr[g->root];
    if (g->dot >= 0) {
        /* The dot reads its transposed operands' sources; it may write
         * its result transposed. */
        const IrInstr *dot = &c->instr[g->nodes[g->dot]];
        DevValue *opnd[2] = {NULL, NULL};
        const IrI64List *perm[2] = {NULL, NULL};
        for (int32_t j = 0; j < 2 && j < dot->nopnd; j++) {
            int32_t o = dot->opnd[j];
            if (ir_fusion_node_index(g, o) >= 0) {
                perm[j] = &c->instr[o].a.dimensions;
                o = c->instr[o].opnd[0];
            }
            opnd[j] = vals[o];
        }
        DevKernelArgs k = {m, c, dot, dot->nopnd, opnd, opt, d};
        if (g->dot_feeds >= 0)
            return run_feeds(m, c, g, opt, d, vals, &k, perm, out);
        DevDotEpilogue epi;
        if (g->dot_select >= 0) {
            IrStatus st = dot_epilogue(m, c, g, vals, &epi);
            if (st != IR_OK)
                return dev_kernel_error(&k, st, "dot epilogue: %s does not fit", c->instr[g->dot_select].name);
        }
        if (g->dot_then >= 0)
            return g->dot_select >= 0 ? attention(m, c, g, opt, d, vals, &k, perm, &epi, out)
                                      : dev_kernel_error(&k, IR_EINTERNAL, "P.V in a group without the softmax");
        return dev_k_dot_fused(&k, perm, g->dot_transposed ? &root->shape : NULL, g->dot_lower,
                               g->dot_select >= 0 ? &epi : NULL, out);
    }
    Run r = {.g = g, .nx = g->nextra};
    DevValue *res = NULL, *xv[IR_FUSION_MAX_NODES] = {NULL};
    bool taken[IR_FUSION_MAX_NODES * MAX_OPND] = {false};
    int32_t xlend[IR_FUSION_MAX_NODES];
    for (int32_t e = 0; e < g->nextra; e++)
        xlend[e] = -1;
    IrStatus st = run_setup(&r, m, c, opt, d, vals);
    int32_t lend = st == IR_OK ? in_place_leaf(g, root, vals, rem, taken) : -1;
    if (lend >= 0)
        taken[lend] = true;
    for (int32_t e = 0; st == IR_OK && e < g->nextra; e++)
        if ((xlend[e] = in_place_leaf(g, &c->instr[g->extra[e]], vals, rem, taken)) >= 0)
            taken[xlend[e]] = true;
    bool chunks = opt->fusion_block <= 0 && dev_fusion_chunked(c, g);
    int64_t block = st != IR_OK ? 0 : chunks ? FAST_CHUNK : block_elements(&r, c, opt);
    if (st == IR_OK)
        st = run_scratch(&r, c, block, d);
    if (st == IR_OK && lend >= 0) {
        /* Take the leaf out of the executor's hands: its last use is here. */
        res = vals[g->leaves[lend]];
        vals[g->leaves[lend]] = NULL;
        rem[g->leaves[lend]] = 0;
    } else if (st == IR_OK && !(res = dev_value_new_uninit(&root->shape))) {
        st = ir_error(d, IR_ENOMEM, m->file, m->src, root->pos, "%s: out of memory for the result",
                      root->name);
    }
    for (int32_t e = 0; st == IR_OK && e < g->nextra; e++)
        st = extra_output(&r, m, c, e, xlend[e], vals, rem, d, &xv[e]);
    int64_t total = st == IR_OK ? ir_shape_elements(&root->shape) : 0;
    if (st == IR_OK && chunks)
        run_chunks(&r, c, 0, total, res->data, lend < 0);
    else if (st == IR_OK)
        periods_setup(&r, c, NULL, block);
    for (int64_t first = 0; st == IR_OK && !chunks && first < total; first += block)
        st = run_block(&r, c, first, total - first < block ? total - first : block, res->data, lend < 0);
    run_free(&r);
    if (st == IR_OK && lend >= 0 && !(res = dev_value_reshaped(res, &root->shape)))
        st = ir_error(d, IR_ENOMEM, m->file, m->src, root->pos, "%s: out of memory", root->name);
    for (int32_t e = 0; e < g->nextra; e++) {
        const IrInstr *ins = &c->instr[g->extra[e]];
        if (st == IR_OK && xlend[e] >= 0 && !(xv[e] = dev_value_reshaped(xv[e], &ins->shape)))
            st = ir_error(d, IR_ENOMEM, m->file, m->src, ins->pos, "%s: out of memory", ins->name);
    }
    if (st != IR_OK) {
        dev_value_unref(res);
        for (int32_t e = 0; e < g->nextra; e++)
            dev_value_unref(xv[e]);
        return st;
    }
    for (int32_t e = 0; e < g->nextra; e++)
        vals[g->extra[e]] = xv[e];
    *out = res;
    return IR_OK;
}
