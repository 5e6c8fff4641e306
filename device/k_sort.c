/*
 * k_sort.c: sort, XLA's variadic sort along one dimension.
 *
 * All operands have the same dims; each "row" along `dimensions={d}` is
 * sorted by the comparator computation (parameters: lhs and rhs of operand
 * 0, lhs and rhs of operand 1, ...; it returns pred[] "lhs before rhs"),
 * and every operand is permuted the same way. The result is one array, or a
 * tuple when there are several operands.
 *
 * The sort is a bottom-up merge sort of a permutation, so it is always
 * stable (is_stable=true or not): on a tie the element that came first
 * stays first.
 *
 * Comparisons. Calling the comparator through dev_call for each of the
 * n log n comparisons is the general path. Most comparators have a shape
 * that allows much better (the native path):
 *   - every sub-expression that depends only on the lhs parameters (or only
 *     on the rhs ones) is a per-element "key": it is computed once for all
 *     elements, by running a copy of it lifted to whole arrays through
 *     dev_execute (parameters used as they are need no run at all);
 *   - the remaining "mixed" instructions, which combine lhs and rhs keys,
 *     must be compare, select, and, or, xor or not; they are evaluated here
 *     in C for each comparison.
 * `compare(p0, p1), direction=LT` is the simplest case (two parameter keys,
 * one mixed compare); TopK's comparators (bit-twiddled float keys, ties
 * broken by an iota operand) are covered too. A comparator with any other
 * instruction takes the general path.
 *
 * Native compares follow XLA: floats compare as IEEE values (anything with
 * NaN is unordered: false, except NE) unless type=TOTALORDER, which orders
 * -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN; integers by their
 * signedness or the explicit SIGNED / UNSIGNED type; pred as 0 < 1.
 */
#include "device.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Scalar values of the native evaluator                               */
/* ------------------------------------------------------------------ */

/* One scalar: floats as double (plus their total-order key), signed ints
 * sign-extended, unsigned ints and pred zero-extended. The type is known
 * statically from the instruction that produced it. */
typedef struct Val {
    union {
        double f;
        int64_t s;
        uint64_t u;
    } v;
    int64_t tot;
} Val;


static Val val_load(IrType t, const uint8_t *base, int64_t i)
{
    Val x = {.tot = 0};
    if (ir_type_is_float(t)) {
        x.v.f = dev_load_f64(t, base, i);
        x.tot = dev_total_order_key(t, base, i);
    } else if (ir_type_is_signed_int(t)) {
        x.v.s = dev_load_i64(t, base, i);
    } else {
        x.v.u = dev_load_u64(t, base, i);
    }
    return x;
}

/* The low ir_type_bits(t) bits. */
static uint64_t width_mask(IrType t)
{
    int bits = ir_type_bits(t);
    return bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
}

/* u (bits of type t) read as a signed number. */
static int64_t sign_extend(IrType t, uint64_t u)
{
    int bits = ir_type_bits(t);
    if (bits >= 64)
        return (int64_t)u;
    uint64_t sign = (uint64_t)1 << (bits - 1);
    return (int64_t)(((u & width_mask(t)) ^ sign) - sign);
}

#define CMP3(a, b) (((a) > (b)) - ((a) < (b)))

/* Three-way compare of a and b (type t) under compare type ct; sets
 * *unordered for IEEE compares involving NaN. */
static int val_cmp(IrType t, IrCmpType ct, Val a, Val b, bool *unordered)
{
    *unordered = false;
    if (ir_type_is_float(t)) {
        if (ct == CMPT_TOTALORDER)
            return CMP3(a.tot, b.tot);
        if (isnan(a.v.f) || isnan(b.v.f)) {
            *unordered = true;
            return 0;
        }
        return CMP3(a.v.f, b.v.f);
    }
    if (ir_type_is_signed_int(t)) {
        if (ct == CMPT_UNSIGNED) {
            uint64_t x = a.v.u & width_mask(t), y = b.v.u & width_mask(t);
            return CMP3(x, y);
        }
        return CMP3(a.v.s, b.v.s);
    }
    if (ct == CMPT_SIGNED) {
        int64_t x = sign_extend(t, a.v.u), y = sign_extend(t, b.v.u);
        return CMP3(x, y);
    }
    return CMP3(a.v.u, b.v.u);
}

static bool dir_holds(IrCmpDir dir, int c, bool unordered)
{
    if (unordered)
        return dir == CMP_NE;
    switch (dir) {
    case CMP_EQ: return c == 0;
    case CMP_NE: return c != 0;
    case CMP_LT: return c < 0;
    case CMP_LE: return c <= 0;
    case CMP_GT: return c > 0;
    case CMP_GE: return c >= 0;
    default: return false;
    }
}

/* ------------------------------------------------------------------ */
/* The native comparator                                               */
/* ------------------------------------------------------------------ */

/* A key: a comparator instruction whose value depends on one element only. */
typedef struct Leaf {
    int32_t instr;          /* in the comparator */
    bool rhs;               /* a function of the rhs element (else lhs) */
    IrType t;
    const DevValue *src;    /* the array of its values (an operand, or lifted) */
    Val *row;               /* its values over the current row */
} Leaf;

/* A mixed instruction, evaluated per comparison. Operand refs: >= 0 a node,
 * < 0 leaf -1-ref. */
typedef struct Node {
    IrOpcode op;
    IrType t;               /* result type */
    IrType ot;              /* compare: operand type */
    IrCmpDir dir;
    IrCmpType ct;
    int32_t nopnd;
    int32_t ref[3];
} Node;

/* The state of one sort: operands, the current row, the comparator. */
typedef struct SortRun {
    const DevKernelArgs *k;
    int32_t n;                /* operands */
    int64_t len, stride;      /* row length and element stride along d */
    int64_t base;             /* first element of the current row */
    /* Native path. */
    bool native;
    int simple;               /* one compare of two keys: SIMPLE_* (0: no) */
    int32_t nleaf, nnode;
    Leaf *leaf;
    Node *node;               /* in dependency order; the root last */
    Val *vals;                /* per-node values during one comparison */
    DevValue *lifted;         /* the lifted keys (a tuple), or NULL */
    /* General path. */
    DevValue **slot;          /* 2n scalar arguments */
    IrStatus st;              /* first comparator failure */
} SortRun;

/* The comparator's classification (ir_sort_keys: which instructions are
 * mixed nodes, key leaves, lifted) with the nodes and leaves numbered:
 * per instruction its leaf and node index (-1: none). */
typedef struct Analysis {
    const IrComputation *c;
    IrSortKeys k;
    int32_t *leaf_of, *node_of;
} Analysis;

static void analysis_free(Analysis *a)
{
    ir_sort_keys_free(&a->k);
    ts_free(a->leaf_of);
    ts_free(a->node_of);
}

/* The classification; false (not native) or an error in *st. */
static bool analyse(SortRun *r, Analysis *a, IrStatus *st)
{
    const IrComputation *c = a->c;
    int32_t n = c->ninstr;
    if ((*st = ir_sort_keys(r->k->m, c, r->n, &a->k, r->k->d)) != IR_OK) {
        if (*st == IR_ENOMEM)
            *st = dev_kernel_oom(r->k, "sort");
        return false;
    }
    if (!a->k.native)
        return false;
    a->leaf_of = ts_malloc((size_t)n * sizeof *a->leaf_of);
    a->node_of = ts_malloc((size_t)n * sizeof *a->node_of);
    if (!a->leaf_of || !a->node_of) {
        *st = dev_kernel_oom(r->k, "sort");
        return false;
    }
    for (int32_t i = 0; i < n; i++)
        a->leaf_of[i] = a->node_of[i] = -1;
    return true;
}

/* The nodes (mixed instructions, in dependency order) and leaves (their
 * one-side operands, numbered as first read) of the classification. */
static bool classify(SortRun *r, Analysis *a, IrStatus *st)
{
    const IrComputation *c = a->c;
    int32_t n = c->ninstr;
    r->leaf = ts_calloc((size_t)n, sizeof *r->leaf);
    r->node = ts_calloc((size_t)n, sizeof *r->node);
    if (!r->leaf || !r->node) {
        *st = dev_kernel_oom(r->k, "sort");
        return false;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t i = a->k.order[j];
        const IrInstr *ins = &c->instr[i];
        if (!(a->k.role[i] & IR_SORT_NODE))
            continue;
        Node *nd = &r->node[a->node_of[i] = r->nnode++];
        nd->op = ins->op;
        nd->t = ins->shape.type;
        nd->ot = c->instr[ins->opnd[0]].shape.type;
        nd->dir = ins->a.direction;
        nd->ct = ins->a.cmp_type;
        nd->nopnd = ins->nopnd;
        for (int32_t o = 0; o < ins->nopnd; o++) {
            int32_t x = ins->opnd[o];
            if (a->k.dep[x] == 3) {
                nd->ref[o] = a->node_of[x];
                continue;
            }
            if (a->leaf_of[x] < 0) {
                Leaf *lf = &r->leaf[a->leaf_of[x] = r->nleaf++];
                lf->instr = x;
                lf->rhs = a->k.dep[x] == 2;
                lf->t = c->instr[x].shape.type;
            }
            nd->ref[o] = -1 - a->leaf_of[x];
        }
    }
    return a->node_of[c->root] == r->nnode - 1;
}

/* Append a copy of instruction `src` to c2, retyped to an array of the
 * operands' dims, with operands renumbered through map. */
static int32_t lift_instr(IrModule *m2, IrComputation *c2, const IrInstr *src, const int32_t *map,
                          const IrShape *dims)
{
    IrInstr ins = *src;
    ins.name = ir_unique_name(m2, src->name);
    ins.sharding = NULL;
    ins.a.nfrontend = 0;
    if (ins.a.x->control_predecessors.n > 0) {
        IrAttrsX *x = ir_attrs_x_edit(m2->arena, &ins.a);
        if (!x)
            return -1;
        x->control_predecessors.n = 0;
    }
    if (!ins.name || ir_shape_make(m2->arena, &ins.shape, src->shape.type, dims->rank, dims->dims) != IR_OK)
        return -1;
    if (src->nopnd > 0) {
        if (!(ins.opnd = ir_alloc_array(m2->arena, (size_t)src->nopnd, sizeof(int32_t))))
            return -1;
        for (int32_t o = 0; o < src->nopnd; o++)
            ins.opnd[o] = map[src->opnd[o]];
    }
    if (src->op == OP_CONSTANT) {
        /* A scalar constant, then broadcast to the operands' dims. */
        if (ir_shape_make(m2->arena, &ins.shape, src->shape.type, 0, NULL) != IR_OK ||
            (src->a.literal_bytes > 0 &&
             !(ins.a.literal = ir_alloc(m2->arena, (size_t)src->a.literal_bytes))))
            return -1;
        if (src->a.literal_bytes > 0)
            memcpy(ins.a.literal, src->a.literal, (size_t)src->a.literal_bytes);
        int32_t ci = ir_add_instr(m2, c2, &ins);
        if (ci < 0)
            return -1;
        int32_t b = ir_add_simple(m2, c2, OP_BROADCAST, &ins.shape, 1, &ci, "broadcast");
        if (b < 0 || ir_shape_make(m2->arena, &c2->instr[b].shape, src->shape.type, dims->rank,
                                   dims->dims) != IR_OK)
            return -1;
        c2->instr[b].a.has_dimensions = true;
        return b;
    }
    return ir_add_instr(m2, c2, &ins);
}

/* The root of the lifted computation: a tuple of the lifted leaves. */
static bool lift_root(SortRun *r, const Analysis *a, IrModule *m2, IrComputation *c2,
                      const int32_t *map, int32_t *nlifted)
{
    int32_t *ops = ir_alloc_array(m2->arena, (size_t)(r->nleaf > 0 ? r->nleaf : 1), sizeof *ops);
    IrShape *shapes = ir_alloc_array(m2->arena, (size_t)(r->nleaf > 0 ? r->nleaf : 1), sizeof *shapes);
    if (!ops || !shapes)
        return false;
    *nlifted = 0;
    for (int32_t l = 0; l < r->nleaf; l++)
        if (a->k.role[r->leaf[l].instr] & IR_SORT_LIFT) {
            ops[*nlifted] = map[r->leaf[l].instr];
            shapes[(*nlifted)++] = c2->instr[map[r->leaf[l].instr]].shape;
        }
    IrShape ts;
    return ir_shape_make_tuple(m2->arena, &ts, *nlifted, shapes) == IR_OK &&
           (c2->root = ir_add_simple(m2, c2, OP_TUPLE, &ts, *nlifted, ops, "keys")) >= 0;
}

/* Build the lifted module: parameters = the comparator's (each operand
 * twice), root = a tuple of the lifted leaves. Returns NULL on OOM. */
static IrModule *lift_module(SortRun *r, const Analysis *a, int32_t *nlifted)
{
    const IrComputation *c = a->c;
    const IrShape *dims = &r->k->opnd[0]->shape;
    IrModule *m2 = ir_module_new("sort_keys");
    int32_t *map = ts_malloc((size_t)c->ninstr * sizeof *map);
    int32_t ci = m2 && map ? ir_add_computation(m2, "keys") : -1;
    if (ci < 0)
        goto fail;
    IrComputation *c2 = m2->comp[ci];
    m2->entry = ci;
    c2->is_entry = true;
    for (int32_t p = 0; p < 2 * r->n; p++) {
        IrInstr ins = {.a.x = &ir_no_attrs_x, .op = OP_PARAMETER, .name = ir_unique_name(m2, "p")};
        ins.a.parameter_number = p;
        if (!ins.name || ir_shape_copy(m2->arena, &ins.shape, &r->k->opnd[p / 2]->shape) != IR_OK ||
            ir_add_instr(m2, c2, &ins) < 0)
            goto fail;
    }
    for (int32_t j = 0; j < c->ninstr; j++) {
        int32_t i = a->k.order[j];
        const IrInstr *ins = &c->instr[i];
        if (!(a->k.role[i] & IR_SORT_LIFT))
            continue;
        map[i] = ins->op == OP_PARAMETER ? c2->param[ins->a.parameter_number]
                                         : lift_instr(m2, c2, ins, map, dims);
        if (map[i] < 0)
            goto fail;
    }
    if (!lift_root(r, a, m2, c2, map, nlifted))
        goto fail;
    ts_free(map);
    return m2;
fail:
    ts_free(map);
    ir_module_free(m2);
    return NULL;
}

/* Compute the lifted keys and point every leaf at its values. */
static IrStatus bind_leaves(SortRun *r, const Analysis *a)
{
    int32_t nlifted = 0;
    for (int32_t l = 0; l < r->nleaf; l++)
        nlifted += (a->k.role[r->leaf[l].instr] & IR_SORT_LIFT) != 0;
    if (nlifted > 0) {
        IrModule *m2 = lift_module(r, a, &nlifted);
        if (!m2)
            return dev_kernel_oom(r->k, "sort");
        DevValue **args = ts_malloc((size_t)(2 * r->n) * sizeof *args);
        if (!args) {
            ir_module_free(m2);
            return dev_kernel_oom(r->k, "sort");
        }
        for (int32_t p = 0; p < 2 * r->n; p++)
            args[p] = r->k->opnd[p / 2];
        /* The run's options, less what belongs to the entry computation
         * of the run: its donated arguments (read as m2's, they would hand
         * the sort's operands to this run, which releases them at their
         * last use here: operand 0 is arguments 0 and 1, and the sort
         * reads them after; an SGD step of a sort donated x and crashed),
         * its per-instruction times and packed weights (indexed by the
         * entry's instructions and parameters). */
        DevExecOptions inner = r->k->opt ? *r->k->opt : (DevExecOptions){0};
        inner.donated = NULL;
        inner.ndonated = 0;
        inner.op_times = NULL;
        inner.packed = NULL;
        IrStatus st = dev_execute(m2, m2->entry, 2 * r->n, args, &inner, &r->lifted, r->k->d);
        ts_free(args);
        ir_module_free(m2);
        if (st != IR_OK)
            return st;
    }
    for (int32_t l = 0, j = 0; l < r->nleaf; l++) {
        Leaf *lf = &r->leaf[l];
        const IrInstr *ins = &a->c->instr[lf->instr];
        lf->src = (a->k.role[lf->instr] & IR_SORT_LIFT) ? r->lifted->elems[j++]
                                     : r->k->opnd[ins->a.parameter_number / 2];
        if (!(lf->row = ts_malloc((size_t)(r->len > 0 ? r->len : 1) * sizeof *lf->row)))
            return dev_kernel_oom(r->k, "sort");
    }
    if (!(r->vals = ts_malloc((size_t)r->nnode * sizeof *r->vals)))
        return dev_kernel_oom(r->k, "sort");
    return IR_OK;
}

/* The commonest comparator, one compare of two keys, gets a comparison
 * without the evaluator's dispatch. */
enum { SIMPLE_NONE, SIMPLE_FLOAT, SIMPLE_TOTAL, SIMPLE_SIGNED, SIMPLE_UNSIGNED };

static int simple_kind(const SortRun *r)
{
    const Node *nd = &r->node[0];
    if (r->nnode != 1 || nd->op != OP_COMPARE || nd->ref[0] >= 0 || nd->ref[1] >= 0)
        return SIMPLE_NONE;
    if (ir_type_is_float(nd->ot))
        return nd->ct == CMPT_TOTALORDER ? SIMPLE_TOTAL : SIMPLE_FLOAT;
    if (ir_type_is_signed_int(nd->ot))
        return nd->ct == CMPT_UNSIGNED ? SIMPLE_NONE : SIMPLE_SIGNED;
    return nd->ct == CMPT_SIGNED ? SIMPLE_NONE : SIMPLE_UNSIGNED;
}

static bool simple_before(const SortRun *r, int64_t a, int64_t b)
{
    const Node *nd = &r->node[0];
    const Leaf *l0 = &r->leaf[-1 - nd->ref[0]], *l1 = &r->leaf[-1 - nd->ref[1]];
    Val x = l0->row[l0->rhs ? b : a], y = l1->row[l1->rhs ? b : a];
    int c;
    switch (r->simple) {
    case SIMPLE_FLOAT:
        if (isnan(x.v.f) || isnan(y.v.f))
            return nd->dir == CMP_NE;
        c = CMP3(x.v.f, y.v.f);
        break;
    case SIMPLE_TOTAL: c = CMP3(x.tot, y.tot); break;
    case SIMPLE_SIGNED: c = CMP3(x.v.s, y.v.s); break;
    default: c = CMP3(x.v.u, y.v.u); break;
    }
    return dir_holds(nd->dir, c, false);
}

/* Set up the native comparator when the comparator allows it: *native
 * says whether it does; an error (OOM, a failing key computation) comes
 * back as the status. */
static IrStatus native_prepare(SortRun *r)
{
    const IrModule *m = r->k->m;
    const IrComputation *c = m->comp[r->k->ins->called[0]];
    r->native = false;
    Analysis a = {.c = c};
    IrStatus st = IR_OK;
    bool ok = analyse(r, &a, &st) && classify(r, &a, &st);
    if (ok && st == IR_OK)
        st = bind_leaves(r, &a);
    analysis_free(&a);
    r->native = ok && st == IR_OK;
    r->simple = r->native ? simple_kind(r) : SIMPLE_NONE;
    return st;
}

/* Load every leaf's values over the current row. */
static void load_leaves(SortRun *r)
{
    for (int32_t l = 0; l < r->nleaf; l++) {
        Leaf *lf = &r->leaf[l];
        for (int64_t j = 0; j < r->len; j++)
            lf->row[j] = val_load(lf->t, lf->src->data, r->base + j * r->stride);
    }
}

/* Evaluate the mixed nodes for lhs element a and rhs element b. */
static bool native_before(SortRun *r, int64_t a, int64_t b)
{
    Val *vals = r->vals;
    for (int32_t i = 0; i < r->nnode; i++) {
        const Node *nd = &r->node[i];
        Val x[3];
        for (int32_t o = 0; o < nd->nopnd; o++) {
            int32_t ref = nd->ref[o];
            if (ref >= 0) {
                x[o] = vals[ref];
            } else {
                const Leaf *lf = &r->leaf[-1 - ref];
                x[o] = lf->row[lf->rhs ? b : a];
            }
        }
        Val *y = &vals[i];
        bool un;
        switch (nd->op) {
        case OP_COMPARE: {
            int cmp = val_cmp(nd->ot, nd->ct, x[0], x[1], &un);
            y->v.u = dir_holds(nd->dir, cmp, un);
            break;
        }
        case OP_SELECT: *y = x[0].v.u ? x[1] : x[2]; break;
        case OP_AND: y->v.u = x[0].v.u & x[1].v.u; break;
        case OP_OR: y->v.u = x[0].v.u | x[1].v.u; break;
        case OP_XOR: y->v.u = x[0].v.u ^ x[1].v.u; break;
        case OP_NOT:
            /* ~ keeps a sign-extended value sign-extended; unsigned and pred
             * results are masked back to their width. */
            y->v.u = nd->t == IR_PRED ? !x[0].v.u
                     : ir_type_is_signed_int(nd->t) ? ~x[0].v.u : ~x[0].v.u & width_mask(nd->t);
            break;
        default: y->v.u = 0; break;
        }
    }
    return vals[r->nnode - 1].v.u != 0;
}

/* ------------------------------------------------------------------ */
/* The general comparator                                              */
/* ------------------------------------------------------------------ */

static IrStatus general_prepare(SortRun *r)
{
    if (!(r->slot = ts_calloc((size_t)(2 * r->n), sizeof *r->slot)))
        return dev_kernel_oom(r->k, "sort");
    for (int32_t i = 0; i < 2 * r->n; i++) {
        IrShape sh = {.type = r->k->opnd[i / 2]->shape.type};
        if (!(r->slot[i] = dev_value_new(&sh)))
            return dev_kernel_oom(r->k, "sort");
    }
    return IR_OK;
}

/* Call the comparator on (lhs element a, rhs element b); records the first
 * failure in r->st (and then answers false). */
static bool general_before(SortRun *r, int64_t a, int64_t b)
{
    if (r->st != IR_OK)
        return false;
    for (int32_t i = 0; i < r->n; i++) {
        const DevValue *x = r->k->opnd[i];
        size_t esz = ir_type_size(x->shape.type);
        memcpy(r->slot[2 * i]->data, x->data + (size_t)(r->base + a * r->stride) * esz, esz);
        memcpy(r->slot[2 * i + 1]->data, x->data + (size_t)(r->base + b * r->stride) * esz, esz);
    }
    DevValue *v = NULL;
    r->st = dev_call(r->k, r->k->ins->called[0], 2 * r->n, r->slot, &v);
    bool res = false;
    if (r->st == IR_OK) {
        if (v && v->shape.type == IR_PRED && v->shape.rank == 0)
            res = v->data[0] != 0;
        else
            r->st = dev_kernel_error(r->k, IR_EINPUT, "sort: comparator must return pred[]");
    }
    dev_value_unref(v);
    return res;
}

/* Does row element a come strictly before row element b? */
static bool before(SortRun *r, int64_t a, int64_t b)
{
    if (r->simple)
        return simple_before(r, a, b);
    return r->native ? native_before(r, a, b) : general_before(r, a, b);
}

/* ------------------------------------------------------------------ */
/* Merge sort of a permutation                                         */
/* ------------------------------------------------------------------ */

/* Stable bottom-up merge sort of perm[0..n) (row positions) with `before`;
 * tmp has n entries. On each merge the right run's head goes first only
 * when it is strictly before the left run's head.
 * Example: keys {2, 1, 2', 1'}: width 1 -> {1, 2, 1', 2'}; width 2 ->
 * {1, 1', 2, 2'} (equal keys keep their order). */
static void merge_sort(SortRun *r, int64_t *perm, int64_t *tmp, int64_t n)
{
    int64_t *src = perm, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = before(r, src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != perm)
        memcpy(perm, src, (size_t)n * sizeof *perm);
}

/* ------------------------------------------------------------------ */
/* sort                                                                */
/* ------------------------------------------------------------------ */

static IrStatus sort_check(const DevKernelArgs *k, int32_t n, int64_t *dim)
{
    const IrShape *s0 = &k->opnd[0]->shape, *rs = &k->ins->shape;
    if (k->ins->ncalled < 1 || !k->ins->a.has_dimensions || k->ins->a.dimensions.n != 1 ||
        (rs->type == IR_TUPLE ? rs->ntuple != n : n != 1))
        return dev_kernel_error(k, IR_EINPUT, "sort: bad operands or attributes");
    *dim = k->ins->a.dimensions.v[0];
    if (*dim < 0 || *dim >= s0->rank)
        return dev_kernel_error(k, IR_EINPUT, "sort: dimension out of range");
    for (int32_t i = 0; i < n; i++) {
        const DevValue *x = k->opnd[i];
        const IrShape *ri = rs->type == IR_TUPLE ? &rs->tuple[i] : rs;
        if (!dev_value_is_array(x) || x->shape.rank != s0->rank ||
            !ir_dims_equal(x->shape.dims, s0->dims, s0->rank) || !ir_shape_equal(&x->shape, ri))
            return dev_kernel_error(k, IR_EINPUT, "sort: operand %d does not match", (int)i);
    }
    return IR_OK;
}

static void sort_run_free(SortRun *r)
{
    for (int32_t l = 0; r->leaf && l < r->nleaf; l++)
        ts_free(r->leaf[l].row);
    ts_free(r->leaf);
    ts_free(r->node);
    ts_free(r->vals);
    dev_value_unref(r->lifted);
    if (r->slot)
        for (int32_t i = 0; i < 2 * r->n; i++)
            dev_value_unref(r->slot[i]);
    ts_free(r->slot);
}

/* Sort every row: rows are the index space without dim d, row-major. */
static IrStatus sort_rows(SortRun *r, int64_t d, DevValue **res)
{
    const IrShape *s = &r->k->opnd[0]->shape;
    int64_t st[IR_MAX_RANK], rows = 1;
    ir_shape_strides(s, st);
    for (int32_t i = 0; i < s->rank; i++)
        if (i != d)
            rows *= s->dims[i];
    int64_t *perm = ts_malloc((size_t)(r->len > 0 ? r->len : 1) * 2 * sizeof *perm);
    if (!perm)
        return dev_kernel_oom(r->k, "sort");
    int64_t idx[IR_MAX_RANK] = {0};
    for (int64_t row = 0; row < rows && r->len > 0 && r->st == IR_OK; row++) {
        for (int64_t j = 0; j < r->len; j++)
            perm[j] = j;
        if (r->native)
            load_leaves(r);
        merge_sort(r, perm, perm + r->len, r->len);
        for (int32_t i = 0; i < r->n && r->st == IR_OK; i++) {
            const DevValue *x = r->k->opnd[i];
            size_t esz = ir_type_size(x->shape.type);
            for (int64_t j = 0; j < r->len; j++)
                memcpy(res[i]->data + (size_t)(r->base + j * r->stride) * esz,
                       x->data + (size_t)(r->base + perm[j] * r->stride) * esz, esz);
        }
        /* Next row: an odometer over the dims other than d. */
        for (int32_t i = s->rank - 1; i >= 0; i--) {
            if (i == d)
                continue;
            r->base += st[i];
            if (++idx[i] < s->dims[i])
                break;
            r->base -= s->dims[i] * st[i];
            idx[i] = 0;
        }
    }
    ts_free(perm);
    return r->st;
}

/*
 * sort: operands of equal dims, sorted together along dimensions={d} by
 * the comparator (called[0]). Example: keys f32[4] {3, 1, 2, 1} and values
 * s32[4] {10, 20, 30, 40} with compare(p0, p1), direction=LT give
 * ({1, 1, 2, 3}, {20, 40, 30, 10}).
 *
 * On success *out is a new value (a tuple when several operands). Fails
 * with IR_EINPUT on mismatched operands, IR_ENOMEM, or what the comparator
 * reports.
 */
IrStatus dev_k_sort(const DevKernelArgs *k, DevValue **out)
{
    int32_t n = k->nopnd;
    if (n < 1 || !dev_value_is_array(k->opnd[0]))
        return dev_kernel_error(k, IR_EINPUT, "sort: bad operands");
    int64_t d = 0;
    IrStatus st = sort_check(k, n, &d);
    if (st != IR_OK)
        return st;
    int64_t strides[IR_MAX_RANK];
    ir_shape_strides(&k->opnd[0]->shape, strides);
    SortRun r = {.k = k, .n = n, .len = k->opnd[0]->shape.dims[d], .stride = strides[d]};
    DevValue **res = ts_calloc((size_t)n, sizeof *res);
    if (!res)
        return dev_kernel_oom(k, "sort");
    for (int32_t i = 0; i < n && st == IR_OK; i++)
        if (!(res[i] = dev_value_new_uninit(&k->opnd[i]->shape)))
            st = dev_kernel_oom(k, "sort");
    if (st == IR_OK && ir_shape_elements(&k->opnd[0]->shape) > 0) {
        if ((st = native_prepare(&r)) == IR_OK && !r.native)
            st = general_prepare(&r);
        if (st == IR_OK)
            st = sort_rows(&r, d, res);
    }
    sort_run_free(&r);
    if (st != IR_OK) {
        for (int32_t i = 0; i < n; i++)
            dev_value_unref(res[i]);
        ts_free(res);
        return st;
    }
    if (k->ins->shape.type != IR_TUPLE) {
        *out = res[0];
    } else if (!(*out = dev_value_tuple(&k->ins->shape, n, res))) {
        ts_free(res);
        return dev_kernel_oom(k, "sort");
    }
    ts_free(res);
    return IR_OK;
}
