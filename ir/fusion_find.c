/*
 * fusion_find.c: the groups of instructions device/exec.c runs fused
 * (device/fusion.c and fusion_rows.c run them), found on the IR alone so
 * that the memory estimate (partition/memory.c) counts the values the run
 * makes and no others: a group's interior values never exist.
 *
 * A fusion group is a tree of elementwise instructions (and broadcasts
 * feeding them) whose interior values are used only inside the tree: the
 * executor skips the interior instructions and, at the root, runs the
 * whole tree a block of output elements at a time.
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
 * Row groups. A group's shape S may split into
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
 * Column groups. A reduce over major dims with its innermost dims kept
 * (ir_fusion_column_reduce: batch norm's sum((h - mean)^2) over N, H, W
 * of NHWC, a bias gradient's sum over the batch) whose input is an
 * elementwise op starts a group with the reduce as root, S its input's
 * shape: its input's tree joins as an elementwise group's would (ops of
 * S's dims, broadcasts taking their operands as leaves), no row space is
 * fixed and nothing outer joins; the group never merges with another.
 * device/fusion.c runs the tree a block at a time and folds each block
 * into the reduce's accumulators, so the input never exists whole.
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
 * strides, so the transposed array is never made. A dot whose result a
 * causal mask reads only on and below the diagonal (causal.c) is marked
 * dot_lower (a group of one if it had none): k_dot.c computes only the
 * tiles the mask keeps. A dot whose result is only scaled by a scalar and
 * masked by a select (attention's scores: dot_epilogues, below) takes the
 * two in as its epilogue, the group rooted at the select or at the call
 * of JAX's `_where` that holds it. An f32 dot whose result (or its pair's
 * transpose) only one elementwise group or lone op reads joins that group
 * (dot_consumers, below): the group runs in the dot's epilogue.
 */
#include "ir.h"

/* Elementwise ops have at most 3 operands (select, clamp). */
#define MAX_OPND 3
/* cand[] marks while finding groups. */
#define UNSEEN (-1)
#define CONFLICT (-2)
/* gid[] of a broadcast that runs inside each group reading it. */
#define SHARED (-3)

bool ir_reducer_folds(IrType t, IrOpcode op)
{
    bool domain = ir_type_is_float(t) || ir_type_is_signed_int(t) || ir_type_is_unsigned_int(t) || t == IR_PRED;
    bool bitwise = op == OP_AND || op == OP_OR || op == OP_XOR;
    return domain && ir_op_is_reducer(op) && !(ir_type_is_float(t) && bitwise);
}

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

bool ir_fusion_strided(const IrInstr *ins)
{
    return ins->op == OP_BROADCAST || ins->op == OP_TRANSPOSE;
}

/* A transpose of a small array joins as a strided read of its operand. */
static bool small_transpose(const IrComputation *c, const bool *ctrl_succ, int32_t o)
{
    const IrInstr *op = &c->instr[o];
    return op->op == OP_TRANSPOSE && op->nopnd == 1 && o != c->root && !has_control(c, ctrl_succ, o) &&
           ir_shape_is_array(&op->shape) && ir_shape_elements(&op->shape) <= IR_FUSION_TRANSPOSE_MAX;
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
    IrCausal *causal; /* readers indexed once for every dot asked about */
    bool *column; /* per group (by its root): a column group */
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
    return nouter >= 0 && nouter < s->rank && r <= IR_FUSION_ROW_MAX && (f->small || r >= IR_FUSION_ROW_MIN);
}

bool ir_fusion_is_outer(const IrShape *S, int32_t nouter, const IrShape *t)
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
        !ir_fusion_is_outer(S, nouter, &ins->shape) || !row_length_ok(f, S, nouter))
        return false;
    const IrI64List *dm = &ins->a.dimensions;
    if (!ir_shape_same_dims(x, S)) {
        /* An outer reduce: over dims of size 1 of an outer value. */
        if (!ir_fusion_is_outer(S, nouter, x))
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
    return ir_reducer_folds(x->type, ir_simple_reducer(f->m, ins->called[0]));
}

bool ir_fusion_column_reduce(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (ins->op != OP_REDUCE || ins->nopnd != 2 || ins->ncalled < 1 || !ir_shape_is_array(&ins->shape))
        return false;
    const IrShape *x = &c->instr[ins->opnd[0]].shape, *init = &c->instr[ins->opnd[1]].shape;
    if (!ir_shape_is_array(x) || x->type != ins->shape.type || init->type != ins->shape.type || init->rank != 0)
        return false;
    bool red[IR_MAX_RANK] = {false}, last = false;
    const IrI64List *dm = &ins->a.dimensions;
    for (int32_t j = 0; j < dm->n; j++) {
        if (dm->v[j] < 0 || dm->v[j] >= x->rank || red[dm->v[j]])
            return false;
        red[dm->v[j]] = true;
    }
    int32_t nm = 0; /* merged dims, as k_reduce.c's fast path merges them */
    for (int32_t d = 0; d < x->rank; d++) {
        if (x->dims[d] == 1)
            continue;
        if (nm == 0 || red[d] != last)
            nm++;
        last = red[d];
    }
    return nm >= 2 && !last && ir_reducer_folds(x->type, ir_simple_reducer(m, ins->called[0]));
}

/* A column group starts at a reduce over major dims whose input is an
 * elementwise op of at least min_elems elements (that may start a group:
 * its tree then joins as an elementwise group's would). */
static bool column_starts(const Find *f, int32_t i, int64_t min_elems)
{
    const IrInstr *ins = &f->c->instr[i];
    if (ins->op != OP_REDUCE || ins->nopnd != 2 || has_control(f->c, f->ctrl_succ, i) ||
        !ir_fusion_column_reduce(f->m, f->c, ins))
        return false;
    int32_t o = ins->opnd[0];
    return o != ins->opnd[1] && can_start(f->c, f->ctrl_succ, o) && o != f->c->root &&
           ir_shape_elements(&f->c->instr[o].shape) >= min_elems;
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
    return x->type == ins->shape.type && ir_fusion_is_outer(S, nouter, &ins->shape) &&
           ir_fusion_is_outer(S, nouter, x);
}

/* Can instruction i, all of whose users are in group g, join it? */
static bool joins(const Find *f, int32_t g, int32_t i)
{
    const IrInstr *ins = &f->c->instr[i];
    const IrShape *S = &f->c->instr[f->space[g]].shape;
    if (ir_shape_same_dims(&ins->shape, S))
        return can_join(f->c, f->ctrl_succ, i) || small_transpose(f->c, f->ctrl_succ, i);
    int32_t no = f->nouter[g];
    if (no < 0 || !ir_fusion_is_outer(S, no, &ins->shape))
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
    if (f->column[g] || !ir_shape_same_dims(&ins->shape, S) || ins->a.dimensions.n != no ||
        (f->nouter[g] >= 0 && f->nouter[g] != no) || !row_length_ok(f, S, no))
        return false;
    for (int32_t j = 0; j < no; j++)
        if (ins->a.dimensions.v[j] != j)
            return false;
    const IrInstr *oi = &f->c->instr[o];
    bool fits = oi->op == OP_REDUCE ? reduce_fits(f, o, S, no)
                                     : outer_copy(f, o, S, no) ||
                                           (oi->op != OP_BROADCAST && can_join(f->c, f->ctrl_succ, o) &&
                                            ir_fusion_is_outer(S, no, &oi->shape));
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

/* A dot that runs alone and whose result is read only below a causal
 * mask's diagonal (ir_dot_reads_lower) becomes a group of one, so that
 * the executor learns it (IrFusionGroup.dot_lower). */
static void lower_dots(const Find *f, const int32_t *order, int32_t norder, int32_t *gid, int32_t *size,
                       int32_t *nroots)
{
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        if (gid[u] != -1 || !dot_takes(f->c, f->ctrl_succ, gid, u) || !ir_causal_dot_reads_lower(f->causal, f->c, u))
            continue;
        gid[u] = u;
        size[u] = 1;
        f->space[u] = u;
        f->nouter[u] = -1;
        (*nroots)++;
    }
}

/* ---- dot epilogues ----
 *
 * Attention's scores: JAX writes s = select(mask, dot(q, k) / 8, -1e9)
 * (the select often inside a call to `_where`, the mask pred[S,S]
 * broadcast over batch and heads). Unfused, the divide and the select
 * each read and write the [B,H,S,S] scores once more. A dot whose one
 * reader is an elementwise scale by a scalar (divide by, or multiply with,
 * a broadcast rank-0 f32), whose one reader in turn (or the dot's, with
 * no scale) is a select of it against a broadcast scalar under a pred
 * [M,N] broadcast over the result's batch dims (in the same computation,
 * or as a call whose callee's root is that select of its parameters),
 * runs as one group rooted at the select (or the call): k_dot.c applies
 * the scale and the select to each block of rows while it is in cache
 * (IrFusionGroup.dot_scale, dot_select). The same operations on the same
 * values, element by element: the result is bit for bit the unfused one.
 * The dot has one free dim a side (its result [batch..., M, N]) and f32
 * operands and result, and is not a dot-transpose pair's. */

/* The one instruction among order[] that reads i, or -1 (none, several,
 * or i read twice by it). */
static int32_t sole_reader(const int32_t *nuse, const int32_t *reader, int32_t i)
{
    return nuse[i] == 1 ? reader[i] : -1;
}

/* Is instruction b a broadcast of a rank-0 value of type t (dims {})? */
static bool scalar_broadcast(const IrComputation *c, int32_t b, IrType t)
{
    const IrInstr *bi = &c->instr[b];
    return bi->op == OP_BROADCAST && bi->nopnd == 1 && bi->shape.type == t && bi->a.dimensions.n == 0 &&
           c->instr[bi->opnd[0]].shape.rank == 0 && c->instr[bi->opnd[0]].shape.type == t;
}

/* Is instruction b of computation c a broadcast of a pred [M,N] over the
 * leading dims of shape s ([..., M, N])? */
static bool mask_broadcast(const IrComputation *c, int32_t b, const IrShape *s)
{
    const IrInstr *bi = &c->instr[b];
    if (bi->op != OP_BROADCAST || bi->nopnd != 1 || bi->a.dimensions.n != 2 || s->rank < 2)
        return false;
    const IrShape *p = &c->instr[bi->opnd[0]].shape;
    return p->type == IR_PRED && p->rank == 2 && bi->a.dimensions.v[0] == s->rank - 2 &&
           bi->a.dimensions.v[1] == s->rank - 1 && p->dims[0] == s->dims[s->rank - 2] &&
           p->dims[1] == s->dims[s->rank - 1];
}

/* Is select instruction si of computation c (of shape s) a select of its
 * operand slot v (1 or 2) against a broadcast scalar under a broadcast
 * mask? In a callee (param), the mask's and the scalar's sources must be
 * parameters. */
static bool epilogue_select(const IrComputation *c, int32_t si, int32_t v, bool param)
{
    const IrInstr *s = &c->instr[si];
    if (s->op != OP_SELECT || s->nopnd != 3 || s->shape.type != IR_F32 || (v != 1 && v != 2))
        return false;
    int32_t fill = s->opnd[3 - v], mask = s->opnd[0];
    if (!scalar_broadcast(c, fill, IR_F32) || !mask_broadcast(c, mask, &s->shape))
        return false;
    return !param || (c->instr[c->instr[fill].opnd[0]].op == OP_PARAMETER &&
                      c->instr[c->instr[mask].opnd[0]].op == OP_PARAMETER);
}

bool ir_fusion_epilogue_call(const IrModule *m, const IrInstr *call, int32_t operand)
{
    if (call->op != OP_CALL || call->ncalled != 1 || call->called[0] < 0 || call->called[0] >= m->ncomp)
        return false;
    const IrComputation *b = m->comp[call->called[0]];
    if (b->root < 0 || b->instr[b->root].op != OP_SELECT)
        return false;
    const IrInstr *s = &b->instr[b->root];
    for (int32_t v = 1; v <= 2; v++) {
        const IrInstr *p = &b->instr[s->opnd[v]];
        if (p->op == OP_PARAMETER && p->a.parameter_number == operand && epilogue_select(b, b->root, v, true))
            return true;
    }
    return false;
}

/* Do the groups r[0..nr) (roots, -1: none) hold only instructions in
 * allowed[0..n)? */
static bool groups_only(const IrComputation *c, const int32_t *gid, const int32_t *r, int32_t nr,
                        const int32_t *allowed, int32_t n)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        bool in = false, ok = false;
        for (int32_t j = 0; j < nr; j++)
            in = in || (r[j] >= 0 && gid[i] == r[j]);
        for (int32_t j = 0; in && j < n; j++)
            ok = ok || allowed[j] == i;
        if (in && !ok)
            return false;
    }
    return true;
}

/* Does dot u give [batch..., M, N] from f32 operands? */
static bool epilogue_dot(const IrComputation *c, int32_t u)
{
    const IrInstr *d = &c->instr[u];
    if (d->op != OP_DOT || d->nopnd != 2 || d->shape.type != IR_F32)
        return false;
    const IrShape *l = &c->instr[d->opnd[0]].shape, *r = &c->instr[d->opnd[1]].shape;
    const IrDotDnums *dn = &d->a.dot;
    return l->type == IR_F32 && r->type == IR_F32 && l->rank - dn->lhs_batch.n - dn->lhs_contracting.n == 1 &&
           r->rank - dn->rhs_batch.n - dn->rhs_contracting.n == 1 && d->shape.rank == dn->lhs_batch.n + 2;
}

static void dot_epilogues(const Find *f, const int32_t *order, int32_t norder, int32_t *gid, int32_t *size,
                          int32_t *escale, int32_t *eselect)
{
    const IrComputation *c = f->c;
    int32_t n = c->ninstr;
    int32_t *nuse = ts_calloc((size_t)n, sizeof *nuse), *reader = ts_malloc((size_t)n * sizeof *reader);
    if (!nuse || !reader)
        goto done; /* no epilogues: the groups stay as they are */
    for (int32_t k = 0; k < norder; k++) {
        const IrInstr *ins = &c->instr[order[k]];
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < n) {
                nuse[ins->opnd[j]]++;
                reader[ins->opnd[j]] = order[k];
            }
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        if (!epilogue_dot(c, u) || u == c->root || has_control(c, f->ctrl_succ, u) || (gid[u] >= 0 && gid[u] != u))
            continue;
        /* allowed: the instructions the scale's and the select's groups may
         * hold (they may be one group: the divide joins the select's); the
         * broadcasts must run inside them (or be shared), so that their
         * sources are the new group's leaves. */
        int32_t e = sole_reader(nuse, reader, u), prev = u, sc = -1, allowed[5], na = 0, roots[3] = {-1, -1, -1};
        if (e < 0)
            continue;
        const IrInstr *ei = &c->instr[e];
        int32_t bsc = -1;
        if ((ei->op == OP_DIVIDE || ei->op == OP_MULTIPLY) && ei->nopnd == 2 && ei->shape.type == IR_F32 &&
            e != c->root && !has_control(c, f->ctrl_succ, e) && gid[e] >= 0 &&
            ((ei->opnd[0] == u && scalar_broadcast(c, ei->opnd[1], IR_F32)) ||
             (ei->op == OP_MULTIPLY && ei->opnd[1] == u && scalar_broadcast(c, ei->opnd[0], IR_F32)))) {
            bsc = ei->opnd[0] == u ? ei->opnd[1] : ei->opnd[0];
            sc = prev = e;
            allowed[na++] = e;
            allowed[na++] = bsc;
            roots[1] = gid[e];
        }
        int32_t s = sole_reader(nuse, reader, prev);
        if (s < 0 || has_control(c, f->ctrl_succ, s) || !ir_shape_same_dims(&c->instr[s].shape, &c->instr[u].shape))
            continue;
        const IrInstr *si = &c->instr[s];
        bool fits = false;
        int32_t bm = -1, bf = -1;
        if (si->op == OP_SELECT && gid[s] == s) {
            bm = si->opnd[0];
            bf = si->opnd[si->opnd[1] == prev ? 2 : 1];
            fits = (epilogue_select(c, s, 1, false) && si->opnd[1] == prev) ||
                   (epilogue_select(c, s, 2, false) && si->opnd[2] == prev);
            allowed[na++] = bm;
            allowed[na++] = bf;
            roots[2] = s;
        } else if (si->op == OP_CALL && gid[s] == -1 && si->shape.type == IR_F32) {
            for (int32_t j = 0; j < si->nopnd; j++)
                if (si->opnd[j] == prev)
                    fits = ir_fusion_epilogue_call(f->m, si, j);
        }
        allowed[na++] = s;
        int32_t bcast[3] = {bsc, bm, bf};
        for (int32_t j = 0; j < 3; j++)
            fits = fits && (bcast[j] < 0 || gid[bcast[j]] == SHARED ||
                            (gid[bcast[j]] >= 0 && (gid[bcast[j]] == roots[1] || gid[bcast[j]] == roots[2])));
        if (sc >= 0 && roots[1] != sc && roots[1] != roots[2])
            fits = false; /* the scale's group is its own, or the select's */
        if (!fits || !groups_only(c, gid, roots + 1, 2, allowed, na))
            continue;
        roots[0] = gid[u] == u ? u : -1;
        int32_t total = roots[0] >= 0 ? size[u] : 1;
        for (int32_t j = 1; j < 3; j++)
            if (roots[j] >= 0 && (j == 1 || roots[2] != roots[1]))
                total += size[roots[j]];
        if (roots[2] < 0)
            total++; /* the call */
        if (total > IR_FUSION_MAX_NODES)
            continue;
        for (int32_t i = 0; i < n; i++)
            if (i == u || i == s || (gid[i] >= 0 && (gid[i] == roots[0] || gid[i] == roots[1] || gid[i] == roots[2])))
                gid[i] = s;
        size[s] = total;
        f->space[s] = s;
        f->nouter[s] = -1;
        escale[s] = sc;
        eselect[s] = s;
    }
done:
    ts_free(nuse);
    ts_free(reader);
}

/* ---- softmax in the dot epilogue ----
 *
 * The masked scores' one pair of readers is often a softmax over their
 * last dim (ir_fusion_softmax), a row group of its own that reads the
 * [B,H,S,S] array the epilogue wrote back from memory. dot_softmaxes
 * takes that row group into the epilogue's group (rooted at the divide):
 * k_dot.c runs the softmax on each block of rows right after scaling and
 * masking it, while it is in cache, with the row group's operations in
 * its order (bit for bit), and computes exp only up to a row's last kept
 * column (the rest of the row is the fill, exp'ed once). */

/* Follow reshapes and order-keeping broadcasts of an outer value (rows
 * elements) back from i, each into s's node list; the value they copy. */
static int32_t outer_origin(const IrComputation *c, int32_t i, int64_t rows, IrSoftmax *s)
{
    for (;;) {
        const IrInstr *ins = &c->instr[i];
        if ((ins->op != OP_RESHAPE && ins->op != OP_BROADCAST) || ins->nopnd != 1 ||
            ir_shape_elements(&ins->shape) != rows || ir_shape_elements(&c->instr[ins->opnd[0]].shape) != rows ||
            s->nnodes >= (int32_t)(sizeof s->nodes / sizeof s->nodes[0]) - 8)
            return i;
        for (int32_t j = 1; ins->op == OP_BROADCAST && j < ins->a.dimensions.n; j++)
            if (ins->a.dimensions.v[j] <= ins->a.dimensions.v[j - 1])
                return i;
        s->nodes[s->nnodes++] = i;
        i = ins->opnd[0];
    }
}

/* Is b a broadcast of an outer value over the rows of shape S (its
 * operand's dims onto S's leading ones, in order)? Its origin then. */
static int32_t spread_origin(const IrComputation *c, int32_t b, const IrShape *S, IrSoftmax *s)
{
    const IrInstr *bi = &c->instr[b];
    int64_t rows = ir_shape_elements(S) / (S->dims[S->rank - 1] > 0 ? S->dims[S->rank - 1] : 1);
    if (bi->op != OP_BROADCAST || bi->nopnd != 1 || !ir_shape_same_dims(&bi->shape, S) ||
        ir_shape_elements(&c->instr[bi->opnd[0]].shape) != rows || S->dims[S->rank - 1] < 1)
        return -1;
    for (int32_t j = 0; j < bi->a.dimensions.n; j++)
        if (bi->a.dimensions.v[j] >= S->rank - 1 || (j > 0 && bi->a.dimensions.v[j] <= bi->a.dimensions.v[j - 1]))
            return -1;
    s->nodes[s->nnodes++] = b;
    return outer_origin(c, bi->opnd[0], rows, s);
}

/* Is r an f32 reduce of x over the last dim of S with reducer op? */
static bool row_reduce(const IrModule *m, const IrComputation *c, int32_t r, int32_t x, const IrShape *S, IrOpcode op)
{
    const IrInstr *ri = &c->instr[r];
    return ri->op == OP_REDUCE && ri->nopnd == 2 && ri->opnd[0] == x && ri->ncalled == 1 &&
           ri->shape.type == IR_F32 && ri->a.dimensions.n == 1 && ri->a.dimensions.v[0] == S->rank - 1 &&
           c->instr[ri->opnd[1]].shape.rank == 0 && c->instr[ri->opnd[1]].shape.type == IR_F32 &&
           ir_simple_reducer(m, ri->called[0]) == op;
}

bool ir_fusion_softmax(const IrModule *m, const IrComputation *c, int32_t div, IrSoftmax *s)
{
    *s = (IrSoftmax){.div = div, .clamp = -1, .clamp_scalar = -1};
    const IrInstr *d = &c->instr[div];
    const IrShape *S = &d->shape;
    if (d->op != OP_DIVIDE || d->nopnd != 2 || S->type != IR_F32 || S->rank < 1)
        return false;
    s->exp = d->opnd[0];
    const IrInstr *e = &c->instr[s->exp];
    if (e->op != OP_EXP || e->nopnd != 1 || !ir_shape_equal(&e->shape, S))
        return false;
    s->sub = e->opnd[0];
    const IrInstr *u = &c->instr[s->sub];
    if (u->op != OP_SUBTRACT || u->nopnd != 2 || !ir_shape_equal(&u->shape, S) ||
        !ir_shape_equal(&c->instr[u->opnd[0]].shape, S))
        return false;
    s->x = u->opnd[0];
    s->nodes[s->nnodes++] = div;
    s->nodes[s->nnodes++] = s->exp;
    s->nodes[s->nnodes++] = s->sub;
    int32_t mo = spread_origin(c, u->opnd[1], S, s), zo = mo < 0 ? -1 : spread_origin(c, d->opnd[1], S, s);
    if (zo < 0 || !row_reduce(m, c, zo, s->exp, S, OP_ADD))
        return false;
    s->rsum = zo;
    s->nodes[s->nnodes++] = zo;
    const IrInstr *mi = &c->instr[mo];
    if (mi->op == OP_MAXIMUM && mi->nopnd == 2 && mi->shape.type == IR_F32) {
        for (int32_t j = 0; j < 2 && s->clamp < 0; j++) {
            const IrInstr *b = &c->instr[mi->opnd[j]];
            if (b->op == OP_BROADCAST && b->nopnd == 1 && b->a.dimensions.n == 0 &&
                c->instr[b->opnd[0]].shape.rank == 0 && c->instr[b->opnd[0]].shape.type == IR_F32) {
                s->clamp = mo;
                s->clamp_first = j == 0;
                s->clamp_scalar = b->opnd[0];
                s->nodes[s->nnodes++] = mo;
                s->nodes[s->nnodes++] = mi->opnd[j];
                mo = outer_origin(c, mi->opnd[1 - j], ir_shape_elements(&mi->shape), s);
            }
        }
    }
    if (!row_reduce(m, c, mo, s->x, S, OP_MAXIMUM))
        return false;
    s->rmax = mo;
    s->nodes[s->nnodes++] = mo;
    return true;
}

/* Each epilogue group (root s = eselect[s]) whose value's only readers
 * are a softmax's reduce and subtract, in the softmax's own group (no
 * other member, no extra output), becomes one group rooted at the
 * softmax's divide. */
static void dot_softmaxes(const Find *f, const int32_t *order, int32_t norder, const bool *extra, int32_t *gid,
                          int32_t *size, int32_t *escale, int32_t *eselect, int32_t *esoftmax)
{
    const IrComputation *c = f->c;
    for (int32_t k = 0; k < norder; k++) {
        int32_t div = order[k];
        IrSoftmax sm;
        if (gid[div] != div || c->instr[div].op != OP_DIVIDE || !ir_fusion_softmax(f->m, c, div, &sm) ||
            gid[sm.x] != sm.x || eselect[sm.x] != sm.x || sm.x == c->root ||
            size[sm.x] + size[div] > IR_FUSION_MAX_NODES)
            continue;
        bool ok = true;
        for (int32_t j = 0; j < sm.nnodes && ok; j++)
            ok = (gid[sm.nodes[j]] == div || gid[sm.nodes[j]] == SHARED) && !extra[sm.nodes[j]];
        int32_t readers = 0;
        for (int32_t j = 0; j < norder && ok; j++) {
            const IrInstr *ins = &c->instr[order[j]];
            for (int32_t o = 0; o < ins->nopnd; o++)
                readers += ins->opnd[o] == sm.x;
        }
        int32_t root = div;
        if (!ok || readers != 2 || !groups_only(c, gid, &root, 1, sm.nodes, sm.nnodes))
            continue;
        for (int32_t i = 0; i < c->ninstr; i++)
            if (gid[i] == sm.x)
                gid[i] = div;
        size[div] += size[sm.x];
        f->space[div] = div;
        f->nouter[div] = -1;
        escale[div] = escale[sm.x];
        eselect[div] = eselect[sm.x];
        esoftmax[div] = div;
        escale[sm.x] = eselect[sm.x] = -1;
    }
}

/* ---- attention's P.V in the same group ----
 *
 * A causal softmax epilogue's probabilities P [batch..., M, N] (the
 * scores' dot dot_lower) whose one reader is a dot P.V, P its lhs with
 * the batch dims first and in order and contracted over N (attention's
 * out = P V), join that dot's group (a group of one, or the dot reading V
 * through a transpose), rooted at the dot: k_dot.c makes P a block of 64
 * rows at a time and multiplies it by V at once, so P is never written
 * nor read back (IrFusionGroup.dot_then). */

/* Is dot u of c a P.V over softmax p (its lhs), p read by nobody else? */
static bool pv_dot(const IrComputation *c, const int32_t *order, int32_t norder, int32_t u, int32_t p)
{
    const IrInstr *d = &c->instr[u];
    const IrDotDnums *dn = &d->a.dot;
    int32_t rank = c->instr[p].shape.rank, nb = rank - 2;
    if (d->op != OP_DOT || d->nopnd != 2 || d->opnd[0] != p || d->opnd[1] == p || !epilogue_dot(c, u) ||
        dn->lhs_batch.n != nb || dn->lhs_contracting.n != 1 || dn->lhs_contracting.v[0] != rank - 1)
        return false;
    for (int32_t i = 0; i < nb; i++)
        if (dn->lhs_batch.v[i] != i)
            return false;
    int32_t readers = 0;
    for (int32_t j = 0; j < norder; j++) {
        const IrInstr *ins = &c->instr[order[j]];
        for (int32_t o = 0; o < ins->nopnd; o++)
            readers += ins->opnd[o] == p;
    }
    return readers == 1;
}

static void dot_pvs(const Find *f, const int32_t *order, int32_t norder, int32_t *gid, int32_t *size,
                    int32_t *escale, int32_t *eselect, int32_t *esoftmax, int32_t *epv)
{
    const IrComputation *c = f->c;
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        const IrInstr *d = &c->instr[u];
        if (d->op != OP_DOT || d->nopnd != 2 || has_control(c, f->ctrl_succ, u))
            continue;
        int32_t p = d->opnd[0], v = d->opnd[1], scores = -1;
        if (p < 0 || p >= c->ninstr || gid[p] != p || esoftmax[p] != p || !pv_dot(c, order, norder, u, p) ||
            (gid[v] == SHARED && c->instr[v].op != OP_TRANSPOSE)) /* V read in place, or through a transpose */
            continue;
        for (int32_t i = 0; i < c->ninstr && scores < 0; i++)
            if (gid[i] == p && c->instr[i].op == OP_DOT)
                scores = i;
        int32_t alone = u;
        if (scores < 0 || !ir_causal_dot_reads_lower(f->causal, c, scores) ||
            (gid[u] != -1 && (gid[u] != u || !groups_only(c, gid, &u, 1, &alone, 1))))
            continue;
        int32_t total = size[p] + (gid[u] == u ? size[u] : 1);
        if (total > IR_FUSION_MAX_NODES)
            continue;
        for (int32_t i = 0; i < c->ninstr; i++)
            if (gid[i] == p)
                gid[i] = u;
        gid[u] = u;
        size[u] = total;
        f->space[u] = u;
        f->nouter[u] = -1;
        escale[u] = escale[p];
        eselect[u] = eselect[p];
        esoftmax[u] = esoftmax[p];
        epv[u] = u;
        escale[p] = eselect[p] = esoftmax[p] = -1;
    }
}

/* ---- elementwise consumers in the dot's epilogue ----
 *
 * XLA's output fusion. An f32 dot's result (or its dot-transpose pair's
 * transpose: the weight gradient) read only by one elementwise group, or
 * by one elementwise op of its dims that fused with nothing, every read
 * element for element (mlp's tanh(dot), GELU of a projection, SGD's
 * w - lr * dw), joins that group: k_dot.c runs the group's other nodes on
 * each block of the GEMM's result as the GEMM finishes it, while it is in
 * cache, writing the group's values over it, where the unfused group read
 * the whole result back from memory and wrote another array
 * (IrFusionGroup.dot_feeds). The group's other leaves are arrays of its
 * dims read at the same index, scalars and broadcasts, as in any
 * elementwise group; its root is f32 (it takes the dot's buffer). Not a
 * row, column or multi-output group, nor one holding another dot (one
 * dot a group). The group then runs at its root, the dot with it: where
 * the order is scheduled (compile/memfit.c), only if nothing but the two
 * (and constants, broadcasts, parameters) lies between them. */

/* The key of reader x of a value: its group's root, x itself where it is
 * in no group, or -1 (a broadcast run in several groups). */
static int32_t reader_key(const int32_t *gid, int32_t x)
{
    return gid[x] >= 0 ? gid[x] : gid[x] == -1 ? x : -1;
}

/* Can g (the root of a group, or an instruction in none) take dot value
 * v in as an elementwise consumer? */
static bool consumer_fits(const Find *f, const int32_t *gid, const bool *extra, const int32_t *eselect,
                          const int32_t *epv, int64_t min_elems, int32_t g, int32_t v)
{
    const IrComputation *c = f->c;
    const IrInstr *gi = &c->instr[g];
    if (gi->shape.type != IR_F32 || !ir_shape_same_dims(&gi->shape, &c->instr[v].shape))
        return false;
    if (gid[g] == -1) { /* an add of an all-reduce's sum is left to it (allreduce_add.c takes it in) */
        bool summed = gi->op == OP_ADD && gi->nopnd == 2 &&
                      (c->instr[gi->opnd[0]].op == OP_ALL_REDUCE || c->instr[gi->opnd[1]].op == OP_ALL_REDUCE);
        return !summed && can_start(c, f->ctrl_succ, g) && ir_shape_elements(&gi->shape) >= min_elems;
    }
    if (gid[g] != g || f->nouter[g] >= 0 || f->column[g] || eselect[g] >= 0 || epv[g] >= 0 ||
        gi->op == OP_TRANSPOSE || gi->op == OP_DOT)
        return false;
    for (int32_t i = 0; i < c->ninstr; i++)
        if (gid[i] == g && (c->instr[i].op == OP_DOT || extra[i]))
            return false;
    return true;
}

static bool dot_consumers(const Find *f, const int32_t *order, int32_t norder, int64_t min_elems,
                          const bool *extra, int32_t *gid, int32_t *size, const int32_t *eselect,
                          const int32_t *epv, int32_t *efeeds)
{
    const IrComputation *c = f->c;
    int32_t n = c->ninstr;
    int32_t *key = ts_malloc((size_t)n * sizeof *key), *pos = ts_malloc((size_t)n * sizeof *pos);
    if (!key || !pos) {
        ts_free(key);
        ts_free(pos);
        return false;
    }
    /* key[v]: the one group (or lone op) all of v's readers are in,
     * reading it element for element; UNSEEN: no reader; CONFLICT. */
    for (int32_t i = 0; i < n; i++)
        key[i] = UNSEEN, pos[i] = -1;
    for (int32_t k = 0; k < norder; k++) {
        int32_t x = order[k], kx = reader_key(gid, x);
        const IrInstr *xi = &c->instr[x];
        pos[x] = k;
        for (int32_t j = 0; j < xi->nopnd; j++) {
            int32_t o = xi->opnd[j];
            if (o < 0 || o >= n)
                continue;
            bool ok = kx >= 0 && !ir_fusion_strided(xi) && (key[o] == UNSEEN || key[o] == kx);
            key[o] = ok ? kx : CONFLICT;
        }
    }
    for (int32_t k = 0; k < norder; k++) {
        int32_t u = order[k];
        const IrInstr *d = &c->instr[u];
        if (d->op != OP_DOT || d->nopnd != 2 || d->shape.type != IR_F32 || u == c->root ||
            has_control(c, f->ctrl_succ, u))
            continue;
        int32_t v = u, du = gid[u]; /* the value read, the dot's group (-1: none) */
        if (gid[u] >= 0 && gid[u] != u)
            v = gid[u]; /* a dot-transpose pair's transpose, or no fit below */
        if ((du >= 0 && (gid[du] != du || eselect[du] >= 0 || epv[du] >= 0)) ||
            (v != u && c->instr[v].op != OP_TRANSPOSE) || v == c->root || has_control(c, f->ctrl_succ, v) ||
            c->instr[v].shape.type != IR_F32)
            continue;
        int32_t g = key[v];
        if (g < 0 || g == du || (gid[g] != g && gid[g] != -1) ||
            !consumer_fits(f, gid, extra, eselect, epv, min_elems, g, v))
            continue;
        int32_t total = (du >= 0 ? size[du] : 1) + (gid[g] == g ? size[g] : 1);
        bool fits = total <= IR_FUSION_MAX_NODES && pos[g] > pos[u];
        for (int32_t k2 = pos[u] + 1; fits && f->m->is_scheduled && k2 < pos[g]; k2++) {
            int32_t x = order[k2];
            IrOpcode op = c->instr[x].op;
            fits = (du >= 0 && gid[x] == du) || gid[x] == g || op == OP_CONSTANT || op == OP_BROADCAST ||
                   op == OP_PARAMETER;
        }
        if (!fits)
            continue;
        for (int32_t i = 0; i < n; i++)
            if (i == u || (du >= 0 && gid[i] == du))
                gid[i] = g;
        gid[g] = g;
        size[g] = total;
        f->space[g] = g;
        f->nouter[g] = -1;
        efeeds[g] = v;
    }
    ts_free(key);
    ts_free(pos);
    return true;
}

void ir_fusion_free(IrFusion *f)
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
    *f = (IrFusion){0};
}

/* Add one reference to leaf l of group g (from node `ins`). */
static void add_leaf(IrFusionGroup *g, const IrComputation *c, const IrInstr *ins, int32_t l)
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
    if (ir_fusion_strided(ins) || !ir_shape_same_dims(&c->instr[l].shape, &ins->shape))
        g->leaf_direct[k] = false;
}

/* A group is a row group when some node has not S's dims (an outer node:
 * a reduce, or what follows one); otherwise it is elementwise, however it
 * was found. */
static bool row_group(const IrComputation *c, const IrFusionGroup *g)
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
            fits[b] = fits[b] && g >= 0 && ir_op_is_elementwise(ins->op) && !ir_fusion_strided(ins) &&
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
        int32_t seen[IR_FUSION_MAX_NODES], ng = 0;
        bool room = fits[b];
        for (int32_t q = first[b + 1]; room && q < (b + 2 <= n ? first[b + 2] : nref); q++) {
            int32_t g = gid[reader[q]], t = 0;
            while (t < ng && seen[t] != g)
                t++;
            if (t == ng && (ng == IR_FUSION_MAX_NODES || size[g] >= IR_FUSION_MAX_NODES))
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
        if (gid[a] != a || f->nouter[a] >= 0 || f->column[a] || c->instr[a].op == OP_TRANSPOSE)
            continue;
        for (int32_t q = first[a + 1]; q < first[a + 2]; q++) {
            int32_t g = gid[user[q]];
            if (g >= 0 && g != a)
                b = b < 0 || b == g ? g : -2;
        }
        if (b < 0 || f->nouter[b] >= 0 || f->column[b] || c->instr[b].op == OP_TRANSPOSE || size[a] + size[b] > IR_FUSION_MAX_NODES ||
            !ir_shape_same_dims(&c->instr[a].shape, &c->instr[b].shape))
            continue;
        bool fits = true;
        for (int32_t x = head[a]; fits && x >= 0; x = next[x])
            for (int32_t q = first[x + 1]; fits && q < first[x + 2]; q++) {
                int32_t u = user[q];
                fits = gid[u] == a || (gid[u] == b && !ir_fusion_strided(&c->instr[u])) ||
                       (gid[u] != SHARED && pos[u] > pos[b]);
            }
        /* A scheduled order (the memory fit's, compile/memfit.c) that put
         * other work between the two keeps them apart: merged, A would be
         * made at B's step, its leaves held until then. */
        for (int32_t k2 = pos[a] + 1; fits && f->m->is_scheduled && k2 < pos[b]; k2++) {
            int32_t x = order[k2];
            IrOpcode op = c->instr[x].op;
            fits = gid[x] == a || gid[x] == b || op == OP_CONSTANT || op == OP_BROADCAST || op == OP_PARAMETER;
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
                    const bool *extra, IrFusion *f)
{
    for (int32_t k = 0; k < norder; k++) {
        int32_t i = order[k];
        if (gid[i] < 0)
            continue;
        int32_t g = f->group_of[gid[i]];
        IrFusionGroup *grp = &f->groups[g];
        const IrInstr *ins = &c->instr[i];
        for (int32_t j = 0; j < ins->nopnd; j++) {
            int32_t b = ins->opnd[j];
            if (gid[b] != SHARED || ir_fusion_node_index(grp, b) >= 0)
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

IrStatus ir_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order,
                         int32_t norder, const IrFusionOptions *opt,
                         IrFusion *out, IrDiag *d)
{
    *out = (IrFusion){0};
    if (!opt || opt->off || norder < 2)
        return IR_OK;
    int32_t n = c->ninstr;
    int64_t min_elems = opt->small ? 1 : IR_FUSION_MIN_ELEMENTS;
    int32_t *gid = ts_malloc((size_t)n * sizeof *gid);
    int32_t *cand = ts_malloc((size_t)n * sizeof *cand);
    int32_t *size = ts_calloc((size_t)n, sizeof *size);
    bool *ctrl_succ = ts_calloc((size_t)n, sizeof *ctrl_succ);
    bool *extra = ts_calloc((size_t)n, sizeof *extra);
    int32_t *escale = ts_malloc((size_t)n * sizeof *escale), *eselect = ts_malloc((size_t)n * sizeof *eselect);
    int32_t *esoftmax = ts_malloc((size_t)n * sizeof *esoftmax), *epv = ts_malloc((size_t)n * sizeof *epv);
    int32_t *efeeds = ts_malloc((size_t)n * sizeof *efeeds);
    Find f = {m, c, ctrl_succ, ts_malloc((size_t)n * sizeof(int32_t)), ts_malloc((size_t)n * sizeof(int32_t)),
              opt->small, ir_causal_new(m), ts_calloc((size_t)n, sizeof(bool))};
    IrStatus st = IR_ENOMEM;
    if (!gid || !cand || !size || !ctrl_succ || !extra || !escale || !eselect || !esoftmax || !epv || !efeeds || !f.space || !f.nouter ||
        !f.causal || !f.column)
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
        if (g >= 0 && size[g] < IR_FUSION_MAX_NODES && joins(&f, g, i)) {
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
        } else if (column_starts(&f, i, min_elems)) {
            gid[i] = g = i;
            size[i] = 1;
            f.space[i] = ins->opnd[0];
            f.nouter[i] = -1;
            f.column[i] = true;
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
    lower_dots(&f, order, norder, gid, size, &nroots);
    for (int32_t i = 0; i < n; i++)
        escale[i] = eselect[i] = esoftmax[i] = epv[i] = efeeds[i] = -1;
    dot_epilogues(&f, order, norder, gid, size, escale, eselect);
    dot_softmaxes(&f, order, norder, extra, gid, size, escale, eselect, esoftmax);
    dot_pvs(&f, order, norder, gid, size, escale, eselect, esoftmax, epv);
    if (!dot_consumers(&f, order, norder, min_elems, extra, gid, size, eselect, epv, efeeds))
        goto done;
    nroots = 0;
    for (int32_t i = 0; i < n; i++)
        nroots += gid[i] == i;
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
        IrFusionGroup *g = &out->groups[out->ngroups];
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
        IrFusionGroup *g = &out->groups[k];
        if (!row_group(c, g))
            g->nouter = -1;
        g->dot_transposed = c->instr[g->root].op == OP_TRANSPOSE;
        g->dot = -1;
        for (int32_t j = 0; j < g->nnodes; j++)
            if (c->instr[g->nodes[j]].op == OP_DOT && g->dot < 0)
                g->dot = j; /* the first: the scores' where dot_then */
        g->dot_then = epv[g->root] >= 0 ? g->nnodes - 1 : -1;
        g->dot_lower = g->dot >= 0 && !g->dot_transposed && ir_causal_dot_reads_lower(f.causal, c, g->nodes[g->dot]);
        g->dot_scale = escale[g->root];
        g->dot_select = eselect[g->root];
        g->columns = f.column[g->root];
        g->dot_softmax = esoftmax[g->root];
        g->dot_feeds = efeeds[g->root];
    }
    st = IR_OK;
done:
    ts_free(gid);
    ts_free(cand);
    ts_free(size);
    ts_free(ctrl_succ);
    ts_free(extra);
    ts_free(escale);
    ts_free(eselect);
    ts_free(esoftmax);
    ts_free(epv);
    ts_free(efeeds);
    ts_free(f.space);
    ts_free(f.nouter);
    ir_causal_free(f.causal);
    ts_free(f.column);
    if (st != IR_OK) {
        ir_fusion_free(out);
        return ir_error(d, st, NULL, NULL, c->pos, "out of memory");
    }
    return IR_OK;
}

int32_t ir_fusion_leaf_index(const IrFusionGroup *g, int32_t instr)
{
    for (int32_t k = 0; k < g->nleaves; k++)
        if (g->leaves[k] == instr)
            return k;
    return -1;
}

int32_t ir_fusion_node_index(const IrFusionGroup *g, int32_t instr)
{
    for (int32_t k = 0; k < g->nnodes; k++)
        if (g->nodes[k] == instr)
            return k;
    return -1;
}
