/*
 * fusion.c: elementwise chains run as one blocked loop over the output
 * (see fusion.h for what a group is).
 *
 * Finding groups. The executor's order puts operands first, so walking it
 * backwards meets every user of a value before the value. An instruction
 * joins a group when all its users are members of that group, it has the
 * members' dimensions, and it is elementwise, a broadcast or a transpose
 * of a small array; otherwise an elementwise instruction starts a group of
 * its own. A broadcast or transpose joins as a node but takes no operands
 * in with it (it reads them through strides).
 * Example: t = tanh(add(dot, broadcast(bias))) is one group {broadcast,
 * add, tanh} with leaves dot and bias; in u = add(x, y), v = multiply(u,
 * u), w = max(v, u), u joins {v, w}; a value also used outside stays a
 * leaf. A broadcast read by members of several groups runs inside each
 * of them instead of as an array they all read (share_broadcasts).
 *
 * Row groups (fusion_rows.c runs them). A group's shape S may split into
 * outer dims and row dims: a broadcast along the leading dims of S whose
 * operand could be an outer node (a reduce over exactly the remaining
 * minor dims, with a reducer ir_simple_reducer knows, or an elementwise op
 * over the outer dims) takes that operand in, and fixes the split; then
 * reduces over the row dims and elementwise ops over the outer dims join
 * too, and a reduce's input follows it in. A fitting reduce whose users
 * are elsewhere starts a group of its own (a group that ends in a
 * reduction). Example, softmax: p = divide(e, broadcast(z)), z =
 * reduce(e, add) over dim 1, e = exp(subtract(x, broadcast(reduce(x,
 * max)))): one group of 7 nodes, leaf x (and the inits). An outer node
 * may carry dims of size 1 (f32[a,b,1] for outer dims [a,b]), and
 * reshapes and broadcasts between such shapes join as copies:
 * JAX writes softmax's z as reshape(broadcast(reshape(z))) to [a,b,1] and
 * back before the broadcast over the rows; a reduce of such a value over
 * its dims of size 1 joins as an outer reduce. A reduce over a
 * major dim, or with any other reducer, stays outside. A group with no
 * node outside S is an elementwise group, however it was found.
 *
 * Multi-output groups (merge_outputs). A group whose root is read by
 * members of one other group, of the same dims, and otherwise only by
 * instructions after that group's root, runs inside it: its root becomes
 * an extra output, made whole beside the group's root. Adam's m' and v'
 * (returned, and read by the parameter's update) join the update: one
 * pass reads g, m, v and w and writes m', v' and w', where three passes
 * wrote m' and v' and read them back and read g twice (XLA's CPU
 * backend makes the same multi-output loop fusion).
 *
 * Dot-transpose pairs. A dot whose one use is a transpose that swaps its
 * lhs and rhs free dims (JAX writes weight gradients as
 * transpose(dot(g, x))) is a group of two, {dot, transpose}, whose
 * leaves are the dot's operands: the dot writes the transposed result
 * itself (k_dot.c), so the dot's own result is never made and the
 * transpose moves nothing. A transpose whose every reader is a dot
 * (unfused or such a pair's) runs inside each of them
 * (transposes_into_dots): the dot reads the transpose's operand through
 * strides, so the transposed array is never made.
 *
 * Running a group. Output elements go a block at a time: every node
 * computes the block into its scratch buffer (the root into the result),
 * through the same range kernels the unfused path uses, so the result is
 * bit for bit the unfused one. An extra output is copied out of its
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
 * maximum, minimum, negate, abs, sqrt) go through AVX-512 registers instead,
 * where the CPU has them (the register path, below the interpreter).
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
/* cand[] marks while finding groups. */
#define UNSEEN (-1)
#define CONFLICT (-2)
/* gid[] of a broadcast that runs inside each group reading it. */
#define SHARED (-3)

/* ---- finding groups ---- */

/* Instructions with control edges keep their own place in the order. */
static bool has_control(const IrComputation *c, const bool *ctrl_succ, int32_t i)
{
    return c->instr[i].a.x->control_predecessors.n > 0 || ctrl_succ[i];
}

static bool can_start(const IrComputation *c, const bool *ctrl_succ, int32_t i)
{
    const IrInstr *ins = &c->instr[i];
    return ir_op_is_elementwise(ins->op) && ins->op != OP_COPY && ins->op != OP_MAP &&
           ins->nopnd >= 1 && ins->nopnd <= MAX_OPND && ir_shape_is_array(&ins->shape) &&
           !has_control(c, ctrl_succ, i);
}

/* The kinds of instruction that can join a group: elementwise ops with a
 * range kernel, and broadcasts. */
static bool can_join(const IrComputation *c, const bool *ctrl_succ, int32_t o)
{
    const IrInstr *op = &c->instr[o];
    if (o == c->root || has_control(c, ctrl_succ, o))
        return false;
    if (op->op == OP_BROADCAST)
        return op->nopnd == 1 && ir_shape_is_array(&op->shape);
    return can_start(c, ctrl_succ, o);
}

/* Nodes that read their operand (a leaf) through strides. */
static bool strided(const IrInstr *ins)
{
    return ins->op == OP_BROADCAST || ins->op == OP_TRANSPOSE;
}

/* A transpose of a small array joins as a strided read of its operand. */
static bool small_transpose(const IrComputation *c, const bool *ctrl_succ, int32_t o)
{
    const IrInstr *op = &c->instr[o];
    return op->op == OP_TRANSPOSE && op->nopnd == 1 && o != c->root && !has_control(c, ctrl_succ, o) &&
           ir_shape_is_array(&op->shape) && ir_shape_elements(&op->shape) <= DEV_FUSION_TRANSPOSE_MAX;
}

/* ---- row spaces ---- */

/* While finding groups: per group (by its root), the instruction whose
 * shape is the group's S and its number of outer dims (-1: not known
 * yet; it is fixed by the first reduce or outer broadcast that joins). */
typedef struct Find {
    const IrModule *m;
    const IrComputation *c;
    const bool *ctrl_succ;
    int32_t *space;
    int32_t *nouter;
    bool small; /* fuse rows however short (tests) */
} Find;

static int64_t row_length(const IrShape *s, int32_t nouter)
{
    int64_t r = 1;
    for (int32_t d = nouter; d < s->rank; d++)
        r *= s->dims[d];
    return r;
}

static bool row_length_ok(const Find *f, const IrShape *s, int32_t nouter)
{
    int64_t r = row_length(s, nouter);
    return nouter >= 0 && nouter < s->rank && r <= DEV_FUSION_ROW_MAX && (f->small || r >= DEV_FUSION_ROW_MIN);
}

bool dev_fusion_is_outer(const IrShape *S, int32_t nouter, const IrShape *t)
{
    if (!ir_shape_is_array(t))
        return false;
    int32_t a = 0, b = 0;
    for (;;) {
        while (a < t->rank && t->dims[a] == 1)
            a++;
        while (b < nouter && S->dims[b] == 1)
            b++;
        if (a == t->rank || b == nouter)
            return a == t->rank && b == nouter;
        if (t->dims[a++] != S->dims[b++])
            return false;
    }
}

/* A reduce of an S-shaped operand over exactly its minor dims from nouter
 * on (a row reduce), or of an outer value over dims of size 1 only (an
 * outer reduce: JAX's grad sums the softmax backward's reshaped row sum
 * over its dim of size 1), with a reducer the fast path knows (associative and commutative:
 * add, multiply, maximum, minimum, and, or, xor), one input, a scalar
 * init and the operand's element type. Custom reducers keep their place. */
static bool reduce_fits(const Find *f, int32_t i, const IrShape *S, int32_t nouter)
{
    const IrInstr *ins = &f->c->instr[i];
    if (ins->op != OP_REDUCE || ins->nopnd != 2 || ins->ncalled < 1 || i == f->c->root ||
        has_control(f->c, f->ctrl_succ, i) || !ir_shape_is_array(&ins->shape))
        return false;
    const IrShape *x = &f->c->instr[ins->opnd[0]].shape, *init = &f->c->instr[ins->opnd[1]].shape;
    if (x->type != ins->shape.type || init->type != ins->shape.type || init->rank != 0 ||
        !dev_fusion_is_outer(S, nouter, &ins->shape) || !row_length_ok(f, S, nouter))
        return false;
    const IrI64List *dm = &ins->a.dimensions;
    if (!ir_shape_same_dims(x, S)) {
        /* An outer reduce: over dims of size 1 of an outer value. */
        if (!dev_fusion_is_outer(S, nouter, x))
            return false;
        for (int32_t j = 0; j < dm->n; j++)
            if (dm->v[j] < 0 || dm->v[j] >= x->rank || x->dims[dm->v[j]] != 1)
                return false;
    } else {
        bool seen[IR_MAX_RANK] = {false};
        if (dm->n != S->rank - nouter)
            return false;
        for (int32_t j = 0; j < dm->n; j++) {
            if (dm->v[j] < nouter || dm->v[j] >= S->rank || seen[dm->v[j]])
                return false;
            seen[dm->v[j]] = true;
        }
    }
    DevRedDom d;
    IrOpcode op = ir_simple_reducer(f->m, ins->called[0]);
    return op != OP_COUNT && dev_red_dom(x->type, &d) && dev_red_has(d, op);
}

/* A reshape or a broadcast from and to shapes with the outer dims of S
 * (up to dims of size 1): the same elements in the same order, one a
 * row, copied. JAX writes a row's mean m[a,b] as
 * reshape to [a,b,1], broadcast to the same shape, reshape back to [a,b]
 * before it broadcasts it over the rows. */
static bool outer_copy(const Find *f, int32_t i, const IrShape *S, int32_t nouter)
{
    const IrInstr *ins = &f->c->instr[i];
    if ((ins->op != OP_RESHAPE && ins->op != OP_BROADCAST) || ins->nopnd != 1 || i == f->c->root ||
        has_control(f->c, f->ctrl_succ, i))
        return false;
    /* A broadcast's dims ascend (ir/infer.c): it cannot permute. */
    const IrShape *x = &f->c->instr[ins->opnd[0]].shape;
    return x->type == ins->shape.type && dev_fusion_is_outer(S, nouter, &ins->shape) &&
           dev_fusion_is_outer(S, nouter, x);
}

/* Can instruction i, all of whose users are in group g, join it? */
static bool joins(const Find *f, int32_t g, int32_t i)
{
    const IrInstr *ins = &f->c->instr[i];
    const IrShape *S = &f->c->instr[f->space[g]].shape;
    if (ir_shape_same_dims(&ins->shape, S))
        return can_join(f->c, f->ctrl_succ, i) || small_transpose(f->c, f->ctrl_succ, i);
    int32_t no = f->nouter[g];
    if (no < 0 || !dev_fusion_is_outer(S, no, &ins->shape))
        return false;
    return ins->op == OP_REDUCE ? reduce_fits(f, i, S, no)
                                : can_join(f->c, f->ctrl_succ, i) || outer_copy(f, i, S, no);
}

/* Broadcast b of group g spreads an outer value over the rows when it
 * maps its operand o onto the leading dims of S and o could be an outer
 * node (a fitting reduce, or elementwise with the outer dims): then o's
 * users are followed into the group like an elementwise operand's, and
 * the group's row space is fixed. */
static bool spreads(Find *f, int32_t g, int32_t b)
{
    const IrInstr *ins = &f->c->instr[b];
    const IrShape *S = &f->c->instr[f->space[g]].shape;
    int32_t o = ins->opnd[0], no = f->c->instr[o].shape.rank;
    if (!ir_shape_same_dims(&ins->shape, S) || ins->a.dimensions.n != no ||
        (f->nouter[g] >= 0 && f->nouter[g] != no) || !row_length_ok(f, S, no))
        return false;
    for (int32_t j = 0; j < no; j++)
        if (ins->a.dimensions.v[j] != j)
            return false;
    const IrInstr *oi = &f->c->instr[o];
    bool fits = oi->op == OP_REDUCE ? reduce_fits(f, o, S, no)
                                     : outer_copy(f, o, S, no) ||
                                           (oi->op != OP_BROADCAST && can_join(f->c, f->ctrl_succ, o) &&
                                            dev_fusion_is_outer(S, no, &oi->shape));
    if (fits)
        f->nouter[g] = no;
    return fits;
}

/* Broadcast b, an outer node of group g, takes its operand in when it
 * only copies it (outer_copy). */
static bool copies(const Find *f, int32_t g, int32_t b)
{
    return f->nouter[g] >= 0 && outer_copy(f, b, &f->c->instr[f->space[g]].shape, f->nouter[g]);
}

/* A dot whose one use is a transpose that swaps its free dims
 * (ir_dot_transpose_swaps; JAX writes weight gradients so) forms a group
 * of two with it, run as the dot writing its result transposed (k_dot.c):
 * its leaves are the dot's operands, and the dot's own result is never
 * made. False on OOM. */
static bool dot_transpose_pairs(const IrComputation *c, const bool *ctrl_succ, const int32_t *order,
                                int32_t norder, int32_t *gid, int32_t *size, Find *f, int32_t *nroots)
{
    int32_t *uses = ts_calloc((size_t)c->ninstr, sizeof *uses);
    if (!uses)
        return false;
    for (int32_t k = 0; k < norder; k++) {
        const IrInstr *ins = &c->instr[order[k]];
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < c->ninstr)
                uses[ins->opnd[j]]++;
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        if (ins->op != OP_TRANSPOSE || gid[i] >= 0 || has_control(c, ctrl_succ, i) ||
            !ir_dot_transpose_swaps(c, ins))
            continue;
        int32_t o = ins->opnd[0];
        if (uses[o] != 1 || o == c->root || gid[o] >= 0 || has_control(c, ctrl_succ, o))
            continue;
        gid[i] = gid[o] = i;
        size[i] = 2;
        f->space[i] = i;
        f->nouter[i] = -1;
        (*nroots)++;
    }
    ts_free(uses);
    return true;
}

/* Can dot u take in transpose t as a node? u runs unfused or as the dot
 * of a dot-transpose pair (gid[u] its transpose). */
static bool dot_takes(const IrComputation *c, const bool *ctrl_succ, const int32_t *gid, int32_t u)
{
    const IrInstr *ui = &c->instr[u];
    return ui->op == OP_DOT && ui->nopnd == 2 && !has_control(c, ctrl_succ, u) &&
           (gid[u] < 0 || (gid[u] != u && c->instr[gid[u]].op == OP_TRANSPOSE));
}

/* A transpose read only by dots (JAX's q/k/v heads, [B,S,H,D] written as
 * transpose(dot) to [B,H,S,D] for the attention's batched dots) runs
 * inside each of them: the dot reads the transpose's operand through
 * strides (k_dot.c), so the transposed array is never made. A dot that
 * ran alone becomes a group root. Its gid becomes SHARED (as a shared
 * broadcast's); the groups' sizes count it. False on OOM. */
static bool transposes_into_dots(const IrComputation *c, const bool *ctrl_succ, const int32_t *order,
                                 int32_t norder, int32_t *gid, int32_t *size, Find *f, int32_t *nroots)
{
    bool *fits = ts_calloc((size_t)c->ninstr, sizeof *fits);
    if (!fits)
        return false;
    for (int32_t k = 0; k < norder; k++) {
        int32_t t = order[k];
        const IrInstr *ti = &c->instr[t];
        fits[t] = ti->op == OP_TRANSPOSE && ti->nopnd == 1 && gid[t] == -1 && t != c->root &&
                  !has_control(c, ctrl_succ, t) && ir_shape_is_array(&ti->shape);
    }
    bool *read = ts_calloc((size_t)c->ninstr, sizeof *read);
    if (!read) {
        ts_free(fits);
        return false;
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        const IrInstr *ui = &c->instr[u];
        for (int32_t j = 0; j < ui->nopnd; j++) {
            int32_t t = ui->opnd[j];
            if (t >= 0 && t < c->ninstr && fits[t]) {
                fits[t] = dot_takes(c, ctrl_succ, gid, u);
                read[t] = true;
            }
        }
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        const IrInstr *ui = &c->instr[u];
        for (int32_t j = 0; j < ui->nopnd; j++) {
            int32_t t = ui->opnd[j];
            if (t < 0 || t >= c->ninstr || !fits[t] || !read[t] || (j == 1 && ui->opnd[0] == t))
                continue;
            if (gid[u] < 0) {
                gid[u] = u;
                size[u] = 1;
                f->space[u] = u;
                f->nouter[u] = -1;
                (*nroots)++;
            }
            size[gid[u]]++;
        }
    }
    for (int32_t t = 0; t < c->ninstr; t++)
        if (fits[t] && read[t])
            gid[t] = SHARED;
    ts_free(fits);
    ts_free(read);
    return true;
}

void dev_fusion_free(DevFusion *f)
{
    for (int32_t g = 0; g < f->ngroups; g++) {
        ts_free(f->groups[g].nodes);
        ts_free(f->groups[g].leaves);
        ts_free(f->groups[g].leaf_refs);
        ts_free(f->groups[g].leaf_direct);
        ts_free(f->groups[g].extra);
    }
    ts_free(f->groups);
    ts_free(f->group_of);
    *f = (DevFusion){0};
}

/* Add one reference to leaf l of group g (from node `ins`). */
static void add_leaf(DevFusionGroup *g, const IrComputation *c, const IrInstr *ins, int32_t l)
{
    int32_t k = 0;
    while (k < g->nleaves && g->leaves[k] != l)
        k++;
    if (k == g->nleaves) {
        g->leaves[k] = l;
        g->leaf_refs[k] = 0;
        g->leaf_direct[k] = true;
        g->nleaves++;
    }
    g->leaf_refs[k]++;
    if (strided(ins) || !ir_shape_same_dims(&c->instr[l].shape, &ins->shape))
        g->leaf_direct[k] = false;
}

static bool chunk_op(const IrInstr *ins)
{
#define ONE(T, OPC, EXPR) case OPC:
    if (strided(ins))
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
    for (int32_t k = 0; k < g->nnodes; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        if (ins->shape.type != IR_F32 || !chunk_op(ins))
            return false;
    }
    for (int32_t l = 0; l < g->nleaves; l++)
        if (c->instr[g->leaves[l]].shape.type != IR_F32)
            return false;
    return true;
}

/* A group is a row group when some node has not S's dims (an outer node:
 * a reduce, or what follows one); otherwise it is elementwise, however it
 * was found. */
static bool row_group(const IrComputation *c, const DevFusionGroup *g)
{
    if (g->nouter < 0)
        return false;
    for (int32_t k = 0; k < g->nnodes; k++)
        if (!ir_shape_same_dims(&c->instr[g->nodes[k]].shape, &c->instr[g->space].shape))
            return true;
    return false;
}

/* Shared broadcasts. A broadcast whose users are in several groups (the
 * constant 0.5 of GELU's backward, broadcast once and multiplied in three
 * places; Adam's b1 over a weight's shape) would be the leaf of each, an
 * array written whole and read back by every group. Instead it runs as a
 * node inside every group that reads it, each computing its own blocks
 * from the broadcast's operand (a strided read, in cache): it joins when
 * every user is an elementwise member of a group whose shape it has, with
 * room left. A group root that gathered nobody gains it as a node (and
 * runs fused). Its gid becomes SHARED; the groups' sizes count it. */
static bool share_broadcasts(const Find *f, const int32_t *order, int32_t norder, int32_t *gid, int32_t *size,
                             int32_t *nroots)
{
    const IrComputation *c = f->c;
    int32_t n = c->ninstr, nref = 0;
    /* Each candidate's readers (first[b] .. first[b + 1] in reader[]). */
    int32_t *first = ts_calloc((size_t)n + 1, sizeof *first), *reader = NULL;
    bool *fits = ts_calloc((size_t)n, sizeof *fits);
    if (!first || !fits)
        goto oom;
    for (int32_t i = 0; i < n; i++) {
        const IrInstr *bi = &c->instr[i];
        fits[i] = bi->op == OP_BROADCAST && gid[i] == -1 && can_join(c, f->ctrl_succ, i);
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k], g = gid[u];
        const IrInstr *ins = &c->instr[u];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t b = ins->opnd[j];
            if (c->instr[b].op != OP_BROADCAST)
                continue;
            fits[b] = fits[b] && g >= 0 && ir_op_is_elementwise(ins->op) && !strided(ins) &&
                      ir_shape_same_dims(&c->instr[b].shape, &c->instr[f->space[g]].shape);
            first[b + 1]++;
            nref++;
        }
    }
    for (int32_t i = 0; i < n; i++)
        first[i + 1] += first[i];
    if (!(reader = ts_malloc((size_t)(nref > 0 ? nref : 1) * sizeof *reader)))
        goto oom;
    for (int32_t k = norder - 1; k >= 0; k--) { /* fills each list from its end */
        const IrInstr *ins = &c->instr[order[k]];
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (c->instr[ins->opnd[j]].op == OP_BROADCAST)
                reader[--first[ins->opnd[j] + 1]] = order[k];
    }
    /* The lists now start at first[b + 1]; each broadcast, with its
     * distinct groups, joins when all have room. */
    for (int32_t b = 0; b < n; b++) {
        int32_t seen[DEV_FUSION_MAX_NODES], ng = 0;
        bool room = fits[b];
        for (int32_t q = first[b + 1]; room && q < (b + 2 <= n ? first[b + 2] : nref); q++) {
            int32_t g = gid[reader[q]], t = 0;
            while (t < ng && seen[t] != g)
                t++;
            if (t == ng && (ng == DEV_FUSION_MAX_NODES || size[g] >= DEV_FUSION_MAX_NODES))
                room = false;
            else if (t == ng)
                seen[ng++] = g;
        }
        if (!room || ng == 0)
            continue;
        gid[b] = SHARED;
        for (int32_t t = 0; t < ng; t++)
            if (size[seen[t]]++ == 1)
                (*nroots)++;
    }
    ts_free(first);
    ts_free(fits);
    ts_free(reader);
    return true;
oom:
    ts_free(first);
    ts_free(fits);
    return false;
}

/* Multi-output groups. A group A whose root a is read by members of one
 * other group B (Adam's m' = b1 m + (1 - b1) g, read by the parameter's
 * update w - lr m'' / (sqrt(v'') + eps) and returned) runs inside B: one
 * pass reads A's and B's leaves once and writes a whole as an extra
 * output beside B's root, where two passes wrote a and read it back (and
 * read a leaf they share, g, twice). Both are elementwise groups of the
 * same dims (no row space fixed, not a dot-transpose pair) with room
 * for both; a's readers in B read it element for element (not through a
 * broadcast's strides). The merged group runs at B's root, so every
 * reader of a member of A outside A must be in B or come after B's root
 * in the order. Merges chain (A into B, then B into C) in the order's
 * direction. extra[i]: member i of a group is read outside it (the
 * group makes it whole). False on OOM. */
static bool merge_outputs(const Find *f, const int32_t *order, int32_t norder, int32_t *gid, int32_t *size,
                          int32_t *nroots, bool *extra)
{
    const IrComputation *c = f->c;
    int32_t n = c->ninstr, nref = 0;
    int32_t *pos = ts_malloc((size_t)n * sizeof *pos), *first = ts_calloc((size_t)n + 2, sizeof *first);
    int32_t *head = ts_malloc((size_t)n * sizeof *head), *next = ts_malloc((size_t)n * sizeof *next);
    int32_t *tail = ts_malloc((size_t)n * sizeof *tail), *user = NULL;
    bool ok = false;
    if (!pos || !first || !head || !next || !tail)
        goto done;
    for (int32_t i = 0; i < n; i++)
        pos[i] = head[i] = next[i] = tail[i] = -1;
    for (int32_t k = 0; k < norder; k++) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        pos[i] = k;
        for (int32_t j = 0; j < ins->nopnd; j++, nref++)
            first[ins->opnd[j] + 1]++;
        if (gid[i] >= 0) { /* member lists in the order's order */
            int32_t g = gid[i];
            if (tail[g] < 0)
                head[g] = i;
            else
                next[tail[g]] = i;
            tail[g] = i;
        }
    }
    for (int32_t i = 0; i <= n; i++)
        first[i + 1] += first[i];
    if (!(user = ts_malloc((size_t)(nref > 0 ? nref : 1) * sizeof *user)))
        goto done;
    for (int32_t k = norder - 1; k >= 0; k--) { /* fills each list from its end */
        const IrInstr *ins = &c->instr[order[k]];
        for (int32_t j = 0; j < ins->nopnd; j++)
            user[--first[ins->opnd[j] + 1]] = order[k];
    }
    /* Users of i: user[first[i + 1] .. first[i + 2]). */
    for (int32_t k = 0; k < norder; k++) {
        int32_t a = order[k], b = -1;
        if (gid[a] != a || f->nouter[a] >= 0 || c->instr[a].op == OP_TRANSPOSE)
            continue;
        for (int32_t q = first[a + 1]; q < first[a + 2]; q++) {
            int32_t g = gid[user[q]];
            if (g >= 0 && g != a)
                b = b < 0 || b == g ? g : -2;
        }
        if (b < 0 || f->nouter[b] >= 0 || c->instr[b].op == OP_TRANSPOSE || size[a] + size[b] > DEV_FUSION_MAX_NODES ||
            !ir_shape_same_dims(&c->instr[a].shape, &c->instr[b].shape))
            continue;
        bool fits = true;
        for (int32_t x = head[a]; fits && x >= 0; x = next[x])
            for (int32_t q = first[x + 1]; fits && q < first[x + 2]; q++) {
                int32_t u = user[q];
                fits = gid[u] == a || (gid[u] == b && !strided(&c->instr[u])) ||
                       (gid[u] != SHARED && pos[u] > pos[b]);
            }
        if (!fits)
            continue;
        for (int32_t x = head[a]; x >= 0; x = next[x])
            gid[x] = b;
        next[tail[a]] = head[b]; /* A's members, then B's */
        head[b] = head[a];
        size[b] += size[a];
        (*nroots)--;
    }
    for (int32_t i = 0; i < n; i++) {
        if (gid[i] < 0 || gid[i] == i)
            continue;
        for (int32_t q = first[i + 1]; q < first[i + 2]; q++)
            extra[i] = extra[i] || gid[user[q]] != gid[i];
    }
    ok = true;
done:
    ts_free(pos);
    ts_free(first);
    ts_free(head);
    ts_free(next);
    ts_free(tail);
    ts_free(user);
    return ok;
}

/* Members into their groups' node lists (operands first: the order's)
 * and the values they read from outside into the leaf lists. A shared
 * broadcast goes into each group before its first reader there. */
static void collect(const IrComputation *c, const int32_t *order, int32_t norder, const int32_t *gid,
                    const bool *extra, DevFusion *f)
{
    for (int32_t k = 0; k < norder; k++) {
        int32_t i = order[k];
        if (gid[i] < 0)
            continue;
        int32_t g = f->group_of[gid[i]];
        DevFusionGroup *grp = &f->groups[g];
        const IrInstr *ins = &c->instr[i];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t b = ins->opnd[j];
            if (gid[b] != SHARED || dev_fusion_node_index(grp, b) >= 0)
                continue;
            grp->nodes[grp->nnodes++] = b;
            if (f->group_of[b] < 0)
                f->group_of[b] = g;
            add_leaf(grp, c, &c->instr[b], c->instr[b].opnd[0]);
        }
        grp->nodes[grp->nnodes++] = i;
        if (extra[i])
            grp->extra[grp->nextra++] = i;
        f->group_of[i] = g;
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (gid[ins->opnd[j]] != gid[i] && gid[ins->opnd[j]] != SHARED)
                add_leaf(grp, c, ins, ins->opnd[j]);
    }
}

IrStatus dev_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order,
                         int32_t norder, const DevExecOptions *opt,
                         DevFusion *out, IrDiag *d)
{
    (void)m;
    *out = (DevFusion){0};
    if (opt->no_fusion || norder < 2)
        return IR_OK;
    int32_t n = c->ninstr;
    int64_t min_elems = opt->fusion_block > 0 || opt->fuse_small ? 1 : DEV_FUSION_MIN_ELEMENTS;
    int32_t *gid = ts_malloc((size_t)n * sizeof *gid);
    int32_t *cand = ts_malloc((size_t)n * sizeof *cand);
    int32_t *size = ts_calloc((size_t)n, sizeof *size);
    bool *ctrl_succ = ts_calloc((size_t)n, sizeof *ctrl_succ);
    bool *extra = ts_calloc((size_t)n, sizeof *extra);
    Find f = {m, c, ctrl_succ, ts_malloc((size_t)n * sizeof(int32_t)), ts_malloc((size_t)n * sizeof(int32_t)),
              opt->fusion_block > 0 || opt->fuse_small};
    IrStatus st = IR_ENOMEM;
    if (!gid || !cand || !size || !ctrl_succ || !extra || !f.space || !f.nouter)
        goto done;
    for (int32_t i = 0; i < n; i++) {
        gid[i] = -1;
        cand[i] = UNSEEN;
        const IrI64List *cp = &c->instr[i].a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                ctrl_succ[cp->v[j]] = true;
    }
    /* Consumers before operands. By the time the walk reaches o, every
     * user of o has marked it (cand): with the one group they all belong
     * to, or CONFLICT. o joins that group if it can (its row space, a kind
     * that fuses, room left), else it may start its own: an elementwise
     * op over its own dims, or a reduce over minor dims (a group that
     * ends in a reduction). */
    int32_t nroots = 0;
    for (int32_t k = norder - 1; k >= 0; k--) {
        int32_t i = order[k];
        const IrInstr *ins = &c->instr[i];
        int32_t g = cand[i];
        if (g >= 0 && size[g] < DEV_FUSION_MAX_NODES && joins(&f, g, i)) {
            gid[i] = g;
            if (size[g]++ == 1)
                nroots++;
        } else if (can_start(c, ctrl_succ, i) && ir_shape_elements(&ins->shape) >= min_elems) {
            gid[i] = g = i;
            size[i] = 1;
            f.space[i] = i;
            f.nouter[i] = -1;
        } else if (ins->op == OP_REDUCE && ins->nopnd == 2 &&
                   ir_shape_elements(&c->instr[ins->opnd[0]].shape) >= min_elems &&
                   reduce_fits(&f, i, &c->instr[ins->opnd[0]].shape, ins->shape.rank)) {
            gid[i] = g = i;
            size[i] = 1;
            f.space[i] = ins->opnd[0];
            f.nouter[i] = ins->shape.rank;
        } else {
            g = -1;
        }
        /* Strided reads (broadcasts, transposes) take their operand as a
         * leaf, except a broadcast that spreads an outer value over the
         * rows; a reduce takes its input in, not its init. */
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j];
            bool pass = g >= 0 && (ins->op == OP_REDUCE ? j == 0
                                   : ins->op == OP_TRANSPOSE ? false
                                   : ins->op == OP_BROADCAST ? spreads(&f, g, i) || copies(&f, g, i)
                                   : true);
            cand[o] = pass && (cand[o] == UNSEEN || cand[o] == g) ? g : CONFLICT;
        }
    }
    if (!share_broadcasts(&f, order, norder, gid, size, &nroots))
        goto done;
    /* Roots that gathered nobody run unfused. */
    for (int32_t i = 0; i < n; i++)
        if (gid[i] == i && size[i] == 1)
            gid[i] = -1;
    if (!dot_transpose_pairs(c, ctrl_succ, order, norder, gid, size, &f, &nroots) ||
        !merge_outputs(&f, order, norder, gid, size, &nroots, extra) ||
        !transposes_into_dots(c, ctrl_succ, order, norder, gid, size, &f, &nroots))
        goto done;
    st = IR_OK;
    if (nroots == 0)
        goto done;
    st = IR_ENOMEM;
    out->group_of = ts_malloc((size_t)n * sizeof *out->group_of);
    out->groups = ts_calloc((size_t)nroots, sizeof *out->groups);
    if (!out->group_of || !out->groups)
        goto done;
    for (int32_t i = 0; i < n; i++)
        out->group_of[i] = -1;
    /* Number the groups by their roots' order, then size their lists. */
    for (int32_t k = 0; k < norder; k++) {
        int32_t i = order[k];
        if (gid[i] != i)
            continue;
        DevFusionGroup *g = &out->groups[out->ngroups];
        int32_t nn = size[i], nl = nn * MAX_OPND;
        g->root = i;
        g->space = f.space[i];
        g->nouter = f.nouter[i];
        out->group_of[i] = out->ngroups++;
        if (!(g->nodes = ts_malloc((size_t)nn * sizeof *g->nodes)) ||
            !(g->leaves = ts_malloc((size_t)nl * sizeof *g->leaves)) ||
            !(g->leaf_refs = ts_malloc((size_t)nl * sizeof *g->leaf_refs)) ||
            !(g->leaf_direct = ts_malloc((size_t)nl * sizeof *g->leaf_direct)) ||
            !(g->extra = ts_malloc((size_t)nn * sizeof *g->extra)))
            goto done;
    }
    collect(c, order, norder, gid, extra, out);
    for (int32_t k = 0; k < out->ngroups; k++) {
        DevFusionGroup *g = &out->groups[k];
        if (!row_group(c, g))
            g->nouter = -1;
        g->dot_transposed = c->instr[g->root].op == OP_TRANSPOSE;
        g->dot = -1;
        for (int32_t j = 0; j < g->nnodes; j++)
            if (c->instr[g->nodes[j]].op == OP_DOT)
                g->dot = j;
        g->chunked = g->nouter < 0 && g->dot < 0 && chunkable(c, g);
    }
    st = IR_OK;
done:
    ts_free(gid);
    ts_free(cand);
    ts_free(size);
    ts_free(ctrl_succ);
    ts_free(extra);
    ts_free(f.space);
    ts_free(f.nouter);
    if (st != IR_OK) {
        dev_fusion_free(out);
        return ir_error(d, st, NULL, NULL, c->pos, "out of memory");
    }
    return IR_OK;
}

/* ---- running a group ---- */

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
    int32_t xnode[DEV_FUSION_MAX_NODES]; /* each one's node index, */
    uint8_t *xout[DEV_FUSION_MAX_NODES]; /* its whole array, */
    bool xlent[DEV_FUSION_MAX_NODES];    /* lent by a leaf (read in the same chunk) */
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
}

int32_t dev_fusion_leaf_index(const DevFusionGroup *g, int32_t instr)
{
    for (int32_t k = 0; k < g->nleaves; k++)
        if (g->leaves[k] == instr)
            return k;
    return -1;
}

int32_t dev_fusion_node_index(const DevFusionGroup *g, int32_t instr)
{
    for (int32_t k = 0; k < g->nnodes; k++)
        if (g->nodes[k] == instr)
            return k;
    return -1;
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
    int32_t nn = g->nnodes, nl = g->nleaves > 0 ? g->nleaves : 1;
    r->nn = nn;
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
            int32_t o = ins->opnd[j], at = dev_fusion_node_index(g, o);
            r->opnd[k * MAX_OPND + j] = at >= 0 && at < k ? &r->nview[at] : &r->lview[dev_fusion_leaf_index(g, o)];
        }
        r->k[k] = (DevKernelArgs){m, c, ins, ins->nopnd, &r->opnd[k * MAX_OPND], opt, d};
        IrStatus st;
        if (strided(ins)) {
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
    size_t total = 0, at[DEV_FUSION_MAX_NODES];
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

/* One block [first, first + n) through every node. With `direct` the root
 * writes straight into the result; otherwise (the result is a leaf's
 * buffer, read in the same block) into its own buffer, copied out after
 * the block, as the extra outputs always are. */
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
        if (strided(ins)) {
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
    if (!direct)
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
            if (dev_vmath_f32(f->op, x, r, m))
                continue;
            switch (f->op) {
                DEV_FLOAT_UNARY_OPS(FAST_UNARY, float)
            default: break;
            }
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

/* ---- the register path (AVX-512) ----
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
 * so results are bit for bit the interpreter's. Partial chunks, other
 * ops, and CPUs without AVX-512 take the interpreter. */
#define REG_VECS (FAST_CHUNK / 16)

enum { REG_ACC = 0, REG_MEM = 1 };

typedef struct RegNode {
    IrOpcode op;
    int32_t nopnd;
    uint8_t ka, kb; /* REG_ACC or REG_MEM */
    int32_t a, b;   /* slots of MEM operands */
    bool spill;     /* store the value to its chunk (res[k]) */
    int32_t k;      /* node index */
} RegNode;

/* The ops of the VECTOR column of ir/hlo_op_sem.def, with their arity;
 * reg_chunk has a case for each. */
static bool reg_op(IrOpcode op, int32_t nopnd)
{
    return ir_op_vector(op) && nopnd == ir_op_arity(op);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

static bool reg_cpu(void)
{
    return __builtin_cpu_supports("avx512f");
}

#define REG_T __attribute__((target("avx512f")))
#define REG_EACH(S)                          \
    for (int32_t j = 0; j < REG_VECS; j++) { \
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

/* One full chunk through every node; the last node's value into res[k]
 * of the last node (the result's chunk or its scratch). GCC cannot see
 * that v is written before it is read (and zeroing it first costs a
 * fifth of the function's time: v then lives on the stack at the start),
 * hence the pragma. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/* With `to` (64-byte aligned) the last node goes there with non-temporal
 * stores, straight from the registers, instead of into its chunk. */
REG_T static void reg_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res,
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
        default: assert(!"reg_op admits only the ops above"); break;
        }
        if (k == n - 1 && to) {
            REG_EACH(_mm512_stream_ps(to + 16 * j, v[j]))
        } else if (f->spill || k == n - 1) {
            float *r = res[f->k];
            REG_EACH(_mm512_storeu_ps(r + 16 * j, v[j]))
        }
    }
}
#pragma GCC diagnostic pop
#else
static bool reg_cpu(void)
{
    return false;
}

static void reg_chunk(const RegNode *prog, int32_t n, const float *const *slot, float *const *res,
                      float *to)
{
    (void)prog, (void)n, (void)slot, (void)res, (void)to;
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

/* The whole group, chunk by chunk. Broadcasts of a scalar are filled
 * once; others are cut per chunk. With `direct` the root writes straight
 * into the result; otherwise (the result is a leaf's buffer, read in the
 * same chunk) into its own buffer, copied out after the chunk. So do the
 * extra outputs, each by whether a leaf lent it its buffer; streamed ones
 * go through their chunks, as the result does. */
static void run_chunks(Run *r, const IrComputation *c, int64_t total, uint8_t *out, bool direct)
{
    const DevFusionGroup *g = r->g;
    int32_t nl = g->nleaves, nn = r->nn;
    FastNode prog[DEV_FUSION_MAX_NODES];
    const float *slot[DEV_FUSION_MAX_NODES * (MAX_OPND + 1)];
    float *res[DEV_FUSION_MAX_NODES];
    bool cut[DEV_FUSION_MAX_NODES], whole[DEV_FUSION_MAX_NODES * MAX_OPND];
    for (int32_t l = 0; l < nl; l++) {
        /* Leaves read element for element have the result's size; a
         * broadcast's source is read only through its strides. */
        whole[l] = ir_shape_elements(&r->lview[l].shape) == total;
        slot[l] = (const float *)r->lbase[l];
    }
    for (int32_t k = 0; k < nn; k++) {
        const IrInstr *ins = &c->instr[g->nodes[k]];
        res[k] = (float *)r->scratch[k];
        slot[nl + k] = res[k];
        cut[k] = false;
        if (strided(ins)) {
            prog[k] = (FastNode){.op = ins->op};
            if (r->opnd[k * MAX_OPND]->shape.rank == 0)
                for (int64_t i = 0; i < FAST_CHUNK; i++)
                    res[k][i] = *(const float *)r->src[k];
            else
                cut[k] = true;
            continue;
        }
        int32_t at[2] = {0, 0};
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t o = ins->opnd[j], t = dev_fusion_node_index(g, o);
            at[j] = t >= 0 && t < k ? nl + t : dev_fusion_leaf_index(g, o);
        }
        prog[k] = (FastNode){ins->op, ins->nopnd, at[0], ins->nopnd > 1 ? at[1] : at[0]};
    }
    RegNode rprog[DEV_FUSION_MAX_NODES];
    int32_t nr = 0;
    bool regs = reg_cpu() && reg_program(prog, nn, nl, rprog, &nr);
    for (int32_t t = 0; regs && t < nr; t++) /* the extra outputs are copied out of their chunks */
        for (int32_t e = 0; e < r->nx; e++)
            rprog[t].spill = rprog[t].spill || rprog[t].k == r->xnode[e];
    /* Streamed: the root's chunk goes through its scratch (in L1) and on
     * with non-temporal stores. */
    bool stream = total * 4 >= stream_min_bytes() && (uintptr_t)out % 16 == 0;
    /* The register path streams its whole chunks itself (a chunk is 1 KiB:
     * 64-byte aligned wherever the result is). */
    bool reg_stream = stream && regs && (uintptr_t)out % 64 == 0;
    for (int64_t first = 0; first < total; first += FAST_CHUNK) {
        int64_t m = total - first < FAST_CHUNK ? total - first : FAST_CHUNK;
        for (int32_t l = 0; l < nl; l++)
            if (whole[l])
                slot[l] = (const float *)r->lbase[l] + first;
        for (int32_t k = 0; k < nn; k++)
            if (cut[k])
                dev_broadcast_range(&c->instr[g->nodes[k]].shape, &r->sstr[k * IR_MAX_RANK], r->src[k],
                                    first, m, r->scratch[k]);
        if (direct && !stream)
            res[nn - 1] = (float *)out + first;
        for (int32_t e = 0; e < r->nx; e++) /* an extra output's node writes into it, read back from there */
            if (!r->xlent[e] && !stream)
                slot[nl + r->xnode[e]] = res[r->xnode[e]] = (float *)r->xout[e] + first;
        bool in_regs = regs && m == FAST_CHUNK;
        if (in_regs)
            reg_chunk(rprog, nr, slot, res, reg_stream ? (float *)out + first : NULL);
        else
            fast_chunk(prog, nn, slot, res, m);
        for (int32_t e = 0; e < r->nx; e++) {
            float *to = (float *)r->xout[e] + first;
            if ((r->xlent[e] || stream) && !(stream && stream_f32(to, res[r->xnode[e]], m)))
                memcpy(to, res[r->xnode[e]], (size_t)m * 4);
        }
        if (in_regs && reg_stream)
            continue;
        if ((!direct || stream) && !(stream && stream_f32((float *)out + first, res[nn - 1], m)))
            memcpy(out + first * 4, (const uint8_t *)res[nn - 1], (size_t)m * 4);
    }
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
    r->xnode[e] = dev_fusion_node_index(g, g->extra[e]);
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

IrStatus dev_fusion_run(const IrModule *m, const IrComputation *c, const DevFusionGroup *g,
                        const DevExecOptions *opt, IrDiag *d, DevValue **vals, int32_t *rem,
                        DevValue **out)
{
    *out = NULL;
    if (g->nouter >= 0)
        return dev_fusion_run_rows(m, c, g, opt, d, vals, out);
    const IrInstr *root = &c->instr[g->root];
    if (g->dot >= 0) {
        /* The dot reads its transposed operands' sources; it may write
         * its result transposed. */
        const IrInstr *dot = &c->instr[g->nodes[g->dot]];
        DevValue *opnd[2] = {NULL, NULL};
        const IrI64List *perm[2] = {NULL, NULL};
        for (int32_t j = 0; j < 2 && j < dot->nopnd; j++) {
            int32_t o = dot->opnd[j];
            if (dev_fusion_node_index(g, o) >= 0) {
                perm[j] = &c->instr[o].a.dimensions;
                o = c->instr[o].opnd[0];
            }
            opnd[j] = vals[o];
        }
        DevKernelArgs k = {m, c, dot, dot->nopnd, opnd, opt, d};
        return dev_k_dot_fused(&k, perm, g->dot_transposed ? &root->shape : NULL, out);
    }
    Run r = {.g = g, .nx = g->nextra};
    DevValue *res = NULL, *xv[DEV_FUSION_MAX_NODES] = {NULL};
    bool taken[DEV_FUSION_MAX_NODES * MAX_OPND] = {false};
    int32_t xlend[DEV_FUSION_MAX_NODES];
    for (int32_t e = 0; e < g->nextra; e++)
        xlend[e] = -1;
    IrStatus st = run_setup(&r, m, c, opt, d, vals);
    int32_t lend = st == IR_OK ? in_place_leaf(g, root, vals, rem, taken) : -1;
    if (lend >= 0)
        taken[lend] = true;
    for (int32_t e = 0; st == IR_OK && e < g->nextra; e++)
        if ((xlend[e] = in_place_leaf(g, &c->instr[g->extra[e]], vals, rem, taken)) >= 0)
            taken[xlend[e]] = true;
    bool chunks = g->chunked && opt->fusion_block <= 0;
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
        run_chunks(&r, c, total, res->data, lend < 0);
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
