/*
 * k_gather.c: gather and scatter with XLA's full dimension numbers.
 *
 * Both walk the "batch" positions of the index array (every dim but
 * index_vector_dim; when index_vector_dim equals the indices' rank the
 * index vector is an implicit trailing dim of size 1), read one index
 * vector per position, turn it into a start position in the operand, and
 * then walk a window (gather: the slice, scatter: the update window).
 *
 * operand_batching_dims / input_batching_dims pair operand dims with index
 * batch dims (start_indices_batching_dims / scatter_indices_batching_dims):
 * on such an operand dim the start is the batch position's own coordinate.
 *
 * Gather clamps each start so that the slice fits (XLA); scatter skips a
 * whole update window when any part of it would fall outside the operand
 * (XLA's evaluator and CPU backend). Index elements of any integer type are
 * read as signed 64-bit values (unsigned values above INT64_MAX saturate).
 *
 * Scatter applies updates in row-major order of the updates; the update
 * computation is called through dev_call unless it is a simple reducer
 * (ir_simple_reducer) over one operand, or just returns the update
 * (overwrite), which have fast paths. Fast-path arithmetic is the reducer
 * algebra of reducer.c: floats in double, ints wrapping in 64 bits,
 * NaN-propagating max/min.
 */
#include "device.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* Entries of l are distinct and in [0, rank). */
static bool valid_dims(const IrI64List *l, int32_t rank)
{
    bool seen[IR_MAX_RANK] = {false};
    for (int32_t i = 0; i < l->n; i++) {
        if (l->v[i] < 0 || l->v[i] >= rank || seen[l->v[i]])
            return false;
        seen[l->v[i]] = true;
    }
    return true;
}

/* Index element i as int64 (unsigned values above INT64_MAX saturate). */
static int64_t load_index(const DevValue *idx, int64_t i)
{
    IrType t = idx->shape.type;
    if (ir_type_is_unsigned_int(t)) {
        uint64_t u = dev_load_u64(t, idx->data, i);
        return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    return dev_load_i64(t, idx->data, i);
}

/* The batch positions of an index array: its dims other than
 * index_vector_dim, in order (ibd), and how an index vector is read. */
typedef struct IndexSpace {
    int32_t nb;                 /* number of batch dims */
    int64_t ibd[IR_MAX_RANK];   /* which index dims they are */
    int64_t size[IR_MAX_RANK];  /* their sizes */
    int64_t istr[IR_MAX_RANK];  /* their strides in the index array */
    int64_t nvec;               /* index vector length */
    int64_t vstride;            /* stride between index vector entries */
} IndexSpace;

static bool index_space(const DevValue *idx, int64_t ivd, IndexSpace *is)
{
    const IrShape *s = &idx->shape;
    if (ivd < 0 || ivd > s->rank)
        return false;
    int64_t st[IR_MAX_RANK];
    ir_shape_strides(s, st);
    is->nb = 0;
    for (int32_t d = 0; d < s->rank; d++)
        if (d != ivd) {
            is->ibd[is->nb] = d;
            is->size[is->nb] = s->dims[d];
            is->istr[is->nb++] = st[d];
        }
    is->nvec = ivd < s->rank ? s->dims[ivd] : 1;
    is->vstride = ivd < s->rank ? st[ivd] : 0;
    return true;
}

/* Position (among the batch dims) of index dim d, or -1. */
static int32_t batch_pos(const IndexSpace *is, int64_t d)
{
    for (int32_t j = 0; j < is->nb; j++)
        if (is->ibd[j] == d)
            return j;
    return -1;
}

/* Advance a multi-index over `size` (n dims) and the offsets that follow
 * it with strides s1 and s2; false after the last index. */
static bool bump2(int32_t n, const int64_t *size, int64_t *idx, const int64_t *s1, int64_t *o1,
                  const int64_t *s2, int64_t *o2)
{
    for (int32_t j = n - 1; j >= 0; j--) {
        *o1 += s1[j];
        *o2 += s2[j];
        if (++idx[j] < size[j])
            return true;
        *o1 -= size[j] * s1[j];
        *o2 -= size[j] * s2[j];
        idx[j] = 0;
    }
    return false;
}

static int64_t product(int32_t n, const int64_t *v)
{
    int64_t p = 1;
    for (int32_t i = 0; i < n; i++)
        p *= v[i];
    return p;
}

/* ------------------------------------------------------------------ */
/* gather                                                              */
/* ------------------------------------------------------------------ */

/* Everything a gather needs, derived from the dimension numbers. */
typedef struct GatherPlan {
    IndexSpace is;
    int64_t obd_str[IR_MAX_RANK];   /* output strides of the batch dims */
    int32_t nw;                     /* slice (offset) dims */
    int64_t wsize[IR_MAX_RANK], w_in_str[IR_MAX_RANK], w_out_str[IR_MAX_RANK];
    int64_t in_str[IR_MAX_RANK];
    int32_t bpos[IR_MAX_RANK];      /* operand dim -> batch position, or -1 */
} GatherPlan;

static IrStatus gather_plan(const DevKernelArgs *k, GatherPlan *p)
{
    const DevValue *x = k->opnd[0], *idx = k->opnd[1];
    const IrGatherDnums *g = &k->ins->a.x->gather;
    const IrI64List *ss = &k->ins->a.x->slice_sizes;
    const IrShape *in = &x->shape, *os = &k->ins->shape;
#define BAD(what) dev_kernel_error(k, IR_EINPUT, "gather: %s", what)
    if (!index_space(idx, g->index_vector_dim, &p->is))
        return BAD("bad index_vector_dim");
    if (ss->n != in->rank)
        return BAD("slice_sizes does not match the operand rank");
    for (int32_t d = 0; d < in->rank; d++)
        if (ss->v[d] < 0 || ss->v[d] > in->dims[d])
            return BAD("slice size out of range");
    if (!valid_dims(&g->start_index_map, in->rank) || g->start_index_map.n != p->is.nvec ||
        !valid_dims(&g->collapsed_slice_dims, in->rank) ||
        !valid_dims(&g->operand_batching_dims, in->rank) ||
        g->operand_batching_dims.n != g->start_indices_batching_dims.n ||
        !valid_dims(&g->offset_dims, os->rank))
        return BAD("bad dimension numbers");
    ir_shape_strides(in, p->in_str);
    int64_t ostr[IR_MAX_RANK];
    ir_shape_strides(os, ostr);
    /* Operand dims: collapsed and batching ones have slice size 1; the rest
     * are the window, mapped to offset_dims in order. */
    p->nw = 0;
    for (int32_t d = 0; d < in->rank; d++) {
        p->bpos[d] = -1;
        bool coll = ir_list_has(&g->collapsed_slice_dims, d);
        int32_t bi = -1;
        for (int32_t i = 0; i < g->operand_batching_dims.n; i++)
            if (g->operand_batching_dims.v[i] == d)
                bi = i;
        if (coll && bi >= 0)
            return BAD("a dim is both collapsed and batching");
        if (coll || bi >= 0) {
            if (ss->v[d] != 1)
                return BAD("collapsed and batching dims need slice size 1");
            if (bi >= 0 &&
                (p->bpos[d] = batch_pos(&p->is, g->start_indices_batching_dims.v[bi])) < 0)
                return BAD("bad start_indices_batching_dims");
            continue;
        }
        if (p->nw >= g->offset_dims.n)
            return BAD("too few offset_dims");
        int64_t od = g->offset_dims.v[p->nw];
        if (p->nw > 0 && od <= g->offset_dims.v[p->nw - 1])
            return BAD("offset_dims must be sorted");
        if (os->dims[od] != ss->v[d])
            return BAD("result shape does not match slice_sizes");
        p->wsize[p->nw] = ss->v[d];
        p->w_in_str[p->nw] = p->in_str[d];
        p->w_out_str[p->nw++] = ostr[od];
    }
    if (p->nw != g->offset_dims.n || os->rank != p->nw + p->is.nb)
        return BAD("result rank does not match");
    /* Output batch dims: those not in offset_dims, in order. */
    for (int32_t d = 0, j = 0; d < os->rank; d++) {
        if (ir_list_has(&g->offset_dims, d))
            continue;
        if (os->dims[d] != p->is.size[j])
            return BAD("result batch dims do not match the indices");
        p->obd_str[j++] = ostr[d];
    }
    return IR_OK;
#undef BAD
}

/* Copy one slice: window of sizes wsize starting at operand offset `src`
 * into the output at offset `dst`. The innermost window dim is a run. */
static void gather_slice(const GatherPlan *p, size_t esz, const uint8_t *in, int64_t src,
                         uint8_t *out, int64_t dst)
{
    if (p->nw == 0) {
        memcpy(out + (size_t)dst * esz, in + (size_t)src * esz, esz);
        return;
    }
    int32_t last = p->nw - 1;
    int64_t run = p->wsize[last], si = p->w_in_str[last], so = p->w_out_str[last];
    int64_t w[IR_MAX_RANK] = {0};
    do {
        if (si == 1 && so == 1) {
            memcpy(out + (size_t)dst * esz, in + (size_t)src * esz, (size_t)run * esz);
        } else {
            for (int64_t j = 0; j < run; j++)
                memcpy(out + (size_t)(dst + j * so) * esz, in + (size_t)(src + j * si) * esz, esz);
        }
    } while (bump2(last, p->wsize, w, p->w_in_str, &src, p->w_out_str, &dst));
}

/*
 * gather (XLA): for each batch position b of start_indices, the index
 * vector V = start_indices[b, :] (along index_vector_dim) gives
 *   start[start_index_map[i]] = clamp(V[i], 0, operand_dim - slice_size)
 *   start[operand_batching_dims[i]] = b's coordinate on
 *                                     start_indices_batching_dims[i]
 * and the slice of slice_sizes at start is copied to the output; its
 * non-collapsed, non-batching dims become offset_dims, the batch position
 * fills the other output dims in order.
 * Example: operand f32[3,2] {{1,2},{3,4},{5,6}}, indices s32[2] {2, 7},
 * offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
 * index_vector_dim=1, slice_sizes={1,2} gives {{5,6},{5,6}} (7 clamps to 2).
 *
 * On success *out is a new array. Fails with IR_EINPUT on inconsistent
 * dimension numbers, IR_ENOMEM on OOM.
 */
IrStatus dev_k_gather(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 2 || !dev_value_is_array(k->opnd[0]) || !dev_value_is_array(k->opnd[1]) ||
        !ir_type_is_int(k->opnd[1]->shape.type) || k->ins->shape.type != k->opnd[0]->shape.type)
        return dev_kernel_error(k, IR_EINPUT, "gather: bad operands");
    GatherPlan p;
    IrStatus st = gather_plan(k, &p);
    if (st != IR_OK)
        return st;
    DevValue *r = dev_value_new_uninit(&k->ins->shape);
    if (!r)
        return dev_kernel_oom(k, NULL);
    const DevValue *x = k->opnd[0], *idx = k->opnd[1];
    const IrGatherDnums *g = &k->ins->a.x->gather;
    const int64_t *ss = k->ins->a.x->slice_sizes.v;
    size_t esz = ir_type_size(x->shape.type);
    int64_t nbatch = product(p.is.nb, p.is.size);
    if (ir_shape_elements(&r->shape) == 0)
        nbatch = 0;
    int64_t b[IR_MAX_RANK] = {0}, ioff = 0, ooff = 0;
    for (int64_t n = 0; n < nbatch; n++) {
        int64_t src = 0;
        for (int32_t i = 0; i < g->start_index_map.n; i++) {
            int64_t d = g->start_index_map.v[i], v = load_index(idx, ioff + i * p.is.vstride);
            int64_t hi = x->shape.dims[d] - ss[d];
            src += (v < 0 ? 0 : v > hi ? hi : v) * p.in_str[d];
        }
        for (int32_t d = 0; d < x->shape.rank; d++)
            if (p.bpos[d] >= 0)
                src += b[p.bpos[d]] * p.in_str[d];
        gather_slice(&p, esz, x->data, src, r->data, ooff);
        bump2(p.is.nb, p.is.size, b, p.is.istr, &ioff, p.obd_str, &ooff);
    }
    *out = r;
    return IR_OK;
}

/* ------------------------------------------------------------------ */
/* scatter: the update computation                                     */
/* ------------------------------------------------------------------ */

/* How updates are applied. */
typedef enum ScatterMode { SCAT_CALL, SCAT_OVERWRITE, SCAT_REDUCE } ScatterMode;

typedef struct ScatterRun {
    const DevKernelArgs *k;
    int32_t n;                 /* operands (= updates) */
    DevValue **res;            /* n result arrays, initialised from the operands */
    const DevValue *const *upd;
    ScatterMode mode;
    IrOpcode op;
    DevRedDom d;
    DevValue **slot;           /* SCAT_CALL: 2n scalar arguments */
    uint8_t *tmp;              /* SCAT_CALL: staged results, 16 bytes each */
} ScatterRun;

/* Is computation comp `ROOT parameter(n)` with 2 parameters (overwrite)? */
static bool is_overwrite(const IrModule *m, int32_t comp)
{
    const IrComputation *c = m->comp[comp];
    return c->nparam == 2 && c->root >= 0 && c->param[1] >= 0 && c->root == c->param[1];
}

static void scatter_run_free(ScatterRun *r)
{
    if (r->slot)
        for (int32_t i = 0; i < 2 * r->n; i++)
            dev_value_unref(r->slot[i]);
    ts_free(r->slot);
    ts_free(r->tmp);
}

static IrStatus scatter_prepare(ScatterRun *r)
{
    const DevKernelArgs *k = r->k;
    IrType t = r->res[0]->shape.type;
    if (r->n == 1 && r->upd[0]->shape.type == t && is_overwrite(k->m, k->ins->called[0])) {
        r->mode = SCAT_OVERWRITE;
        return IR_OK;
    }
    r->op = ir_simple_reducer(k->m, k->ins->called[0]);
    if (r->n == 1 && r->op != OP_COUNT && r->upd[0]->shape.type == t && dev_red_dom(t, &r->d) &&
        dev_red_has(r->d, r->op)) {
        r->mode = SCAT_REDUCE;
        return IR_OK;
    }
    r->mode = SCAT_CALL;
    if (!(r->slot = ts_calloc((size_t)(2 * r->n), sizeof *r->slot)) ||
        !(r->tmp = ts_malloc((size_t)r->n * 16)))
        return dev_kernel_oom(k, NULL);
    for (int32_t i = 0; i < 2 * r->n; i++) {
        IrShape sh = {.type = i < r->n ? r->res[i]->shape.type : r->upd[i - r->n]->shape.type};
        if (!(r->slot[i] = dev_value_new(&sh)))
            return dev_kernel_oom(k, NULL);
    }
    return IR_OK;
}

/* Call the update computation on (operands[o]..., updates[u]...) and store
 * its results at o. Results are staged first: they may alias arguments. */
static IrStatus scatter_call(ScatterRun *r, int64_t o, int64_t u)
{
    const DevKernelArgs *k = r->k;
    for (int32_t i = 0; i < r->n; i++) {
        size_t rs = ir_type_size(r->res[i]->shape.type), us = ir_type_size(r->upd[i]->shape.type);
        memcpy(r->slot[i]->data, r->res[i]->data + (size_t)o * rs, rs);
        memcpy(r->slot[r->n + i]->data, r->upd[i]->data + (size_t)u * us, us);
    }
    DevValue *v = NULL;
    IrStatus st = dev_call(k, k->ins->called[0], 2 * r->n, r->slot, &v);
    if (st != IR_OK)
        return st;
    bool ok = v != NULL;
    for (int32_t i = 0; ok && i < r->n; i++) {
        DevValue *leaf = r->n == 1 && v->shape.type != IR_TUPLE ? v
                         : v->shape.type == IR_TUPLE && v->nelems == r->n ? v->elems[i] : NULL;
        ok = leaf && leaf->shape.type == r->res[i]->shape.type && leaf->shape.rank == 0;
        if (ok)
            memcpy(r->tmp + 16 * i, leaf->data, ir_type_size(leaf->shape.type));
    }
    dev_value_unref(v);
    if (!ok)
        return dev_kernel_error(k, IR_EINPUT, "scatter: update computation returns the wrong shape");
    for (int32_t i = 0; i < r->n; i++) {
        size_t rs = ir_type_size(r->res[i]->shape.type);
        memcpy(r->res[i]->data + (size_t)o * rs, r->tmp + 16 * i, rs);
    }
    return IR_OK;
}

static IrStatus scatter_apply(ScatterRun *r, int64_t o, int64_t u)
{
    DevValue *res = r->res[0];
    IrType t = res->shape.type;
    if (r->mode == SCAT_OVERWRITE) {
        size_t esz = ir_type_size(t);
        memcpy(res->data + (size_t)o * esz, r->upd[0]->data + (size_t)u * esz, esz);
        return IR_OK;
    }
    if (r->mode == SCAT_REDUCE) {
        DevAcc a = dev_acc_load(r->d, t, res->data, o), b = dev_acc_load(r->d, t, r->upd[0]->data, u);
        dev_acc_store(r->d, t, res->data, o, dev_red_combine(r->d, r->op, a, b));
        return IR_OK;
    }
    return scatter_call(r, o, u);
}

/* ------------------------------------------------------------------ */
/* scatter                                                             */
/* ------------------------------------------------------------------ */

typedef struct ScatterPlan {
    IndexSpace is;
    int64_t usd_str[IR_MAX_RANK];    /* update strides of the scatter dims */
    int32_t nw;                      /* window dims */
    int64_t wsize[IR_MAX_RANK], w_op_str[IR_MAX_RANK], w_up_str[IR_MAX_RANK];
    int64_t op_str[IR_MAX_RANK];
    int64_t opwin[IR_MAX_RANK];      /* window extent per operand dim (1 if not a window dim) */
    int32_t bpos[IR_MAX_RANK];       /* operand dim -> batch position, or -1 */
} ScatterPlan;

static IrStatus scatter_plan(const DevKernelArgs *k, int32_t n, ScatterPlan *p)
{
    const DevValue *x = k->opnd[0], *idx = k->opnd[n], *up = k->opnd[n + 1];
    const IrScatterDnums *s = &k->ins->a.x->scatter;
    const IrShape *in = &x->shape, *us = &up->shape;
#define BAD(what) dev_kernel_error(k, IR_EINPUT, "scatter: %s", what)
    if (!index_space(idx, s->index_vector_dim, &p->is))
        return BAD("bad index_vector_dim");
    if (!valid_dims(&s->scatter_dims_to_operand_dims, in->rank) ||
        s->scatter_dims_to_operand_dims.n != p->is.nvec ||
        !valid_dims(&s->inserted_window_dims, in->rank) ||
        !valid_dims(&s->input_batching_dims, in->rank) ||
        s->input_batching_dims.n != s->scatter_indices_batching_dims.n ||
        !valid_dims(&s->update_window_dims, us->rank))
        return BAD("bad dimension numbers");
    ir_shape_strides(in, p->op_str);
    int64_t ustr[IR_MAX_RANK];
    ir_shape_strides(us, ustr);
    p->nw = 0;
    for (int32_t d = 0; d < in->rank; d++) {
        p->bpos[d] = -1;
        p->opwin[d] = 1;
        bool ins = ir_list_has(&s->inserted_window_dims, d);
        int32_t bi = -1;
        for (int32_t i = 0; i < s->input_batching_dims.n; i++)
            if (s->input_batching_dims.v[i] == d)
                bi = i;
        if (ins && bi >= 0)
            return BAD("a dim is both inserted and batching");
        if (ins)
            continue;
        if (bi >= 0) {
            if ((p->bpos[d] = batch_pos(&p->is, s->scatter_indices_batching_dims.v[bi])) < 0)
                return BAD("bad scatter_indices_batching_dims");
            continue;
        }
        if (p->nw >= s->update_window_dims.n)
            return BAD("too few update_window_dims");
        int64_t ud = s->update_window_dims.v[p->nw];
        if (p->nw > 0 && ud <= s->update_window_dims.v[p->nw - 1])
            return BAD("update_window_dims must be sorted");
        if (us->dims[ud] > in->dims[d])
            return BAD("update window larger than the operand");
        p->opwin[d] = p->wsize[p->nw] = us->dims[ud];
        p->w_op_str[p->nw] = p->op_str[d];
        p->w_up_str[p->nw++] = ustr[ud];
    }
    if (p->nw != s->update_window_dims.n || us->rank != p->nw + p->is.nb)
        return BAD("updates rank does not match");
    for (int32_t d = 0, j = 0; d < us->rank; d++) {
        if (ir_list_has(&s->update_window_dims, d))
            continue;
        if (us->dims[d] != p->is.size[j])
            return BAD("update scatter dims do not match the indices");
        p->usd_str[j++] = ustr[d];
    }
    for (int32_t i = 0; i < n; i++) {
        const DevValue *xi = k->opnd[i], *ui = k->opnd[n + 1 + i];
        const IrShape *ri = k->ins->shape.type == IR_TUPLE ? &k->ins->shape.tuple[i] : &k->ins->shape;
        if (!dev_value_is_array(xi) || !dev_value_is_array(ui) || !ir_shape_equal(&xi->shape, ri) ||
            xi->shape.rank != in->rank || ui->shape.rank != us->rank ||
            !ir_dims_equal(xi->shape.dims, in->dims, in->rank) ||
            !ir_dims_equal(ui->shape.dims, us->dims, us->rank))
            return BAD("operands, updates and result do not agree");
    }
    return IR_OK;
#undef BAD
}

/* Operand start offset of the update window at batch position b (index
 * vector at ioff), or -1 when any part of the window is out of bounds. */
static int64_t scatter_start(const ScatterPlan *p, const DevKernelArgs *k, const DevValue *x,
                             const DevValue *idx, const int64_t *b, int64_t ioff)
{
    const IrScatterDnums *s = &k->ins->a.x->scatter;
    int64_t start[IR_MAX_RANK] = {0};
    for (int32_t i = 0; i < s->scatter_dims_to_operand_dims.n; i++)
        start[s->scatter_dims_to_operand_dims.v[i]] = load_index(idx, ioff + i * p->is.vstride);
    int64_t off = 0;
    for (int32_t d = 0; d < x->shape.rank; d++) {
        if (p->bpos[d] >= 0)
            start[d] = b[p->bpos[d]];
        if (start[d] < 0 || start[d] > x->shape.dims[d] - p->opwin[d])
            return -1;
        off += start[d] * p->op_str[d];
    }
    return off;
}

static IrStatus scatter_loop(ScatterRun *r, const ScatterPlan *p)
{
    const DevKernelArgs *k = r->k;
    const DevValue *x = k->opnd[0], *idx = k->opnd[r->n];
    int64_t nbatch = product(p->is.nb, p->is.size), nwin = product(p->nw, p->wsize);
    int64_t b[IR_MAX_RANK] = {0}, ioff = 0, uoff = 0;
    for (int64_t n = 0; n < nbatch; n++) {
        int64_t start = nwin > 0 ? scatter_start(p, k, x, idx, b, ioff) : -1;
        if (start >= 0) {
            int64_t w[IR_MAX_RANK] = {0}, o = start, u = uoff;
            do {
                IrStatus st = scatter_apply(r, o, u);
                if (st != IR_OK)
                    return st;
            } while (bump2(p->nw, p->wsize, w, p->w_op_str, &o, p->w_up_str, &u));
        }
        bump2(p->is.nb, p->is.size, b, p->is.istr, &ioff, p->usd_str, &uoff);
    }
    return IR_OK;
}

/*
 * scatter (XLA): N operands, scatter_indices, N updates. The result starts
 * as a copy of the operands. For each update position, its scatter dims
 * (those not in update_window_dims) pick an index vector V, giving
 *   start[scatter_dims_to_operand_dims[i]] = V[i]
 *   start[input_batching_dims[i]] = the position's coordinate on
 *                                   scatter_indices_batching_dims[i]
 * and the update window lands at start + window index, on operand dims
 * other than inserted_window_dims and input_batching_dims, in order. Each
 * element becomes update_computation(result..., update...). A window with
 * any element out of bounds is skipped entirely.
 * Example: operand s32[4] {0,0,0,0}, indices s32[3,1] {{1},{1},{9}},
 * updates s32[3] {5,6,7}, update_window_dims={}, inserted_window_dims={0},
 * scatter_dims_to_operand_dims={0}, index_vector_dim=1, add: {0,11,0,0}
 * (index 9 is dropped).
 *
 * On success *out is a new value (a tuple when N > 1). Fails with
 * IR_EINPUT on inconsistent dimension numbers, IR_ENOMEM, or what the
 * update computation reports.
 */
IrStatus dev_k_scatter(const DevKernelArgs *k, DevValue **out)
{
    int32_t n = (k->nopnd - 1) / 2;
    if (k->nopnd < 3 || k->nopnd % 2 == 0 || k->ins->ncalled < 1 ||
        !dev_value_is_array(k->opnd[n]) || !ir_type_is_int(k->opnd[n]->shape.type) ||
        (k->ins->shape.type == IR_TUPLE ? k->ins->shape.ntuple != n : n != 1))
        return dev_kernel_error(k, IR_EINPUT, "scatter: bad operands");
    for (int32_t i = 0; i < n; i++)
        if (!dev_value_is_array(k->opnd[i]) || !dev_value_is_array(k->opnd[n + 1 + i]))
            return dev_kernel_error(k, IR_EINPUT, "scatter: bad operands");
    ScatterPlan p;
    IrStatus st = scatter_plan(k, n, &p);
    if (st != IR_OK)
        return st;
    ScatterRun r = {.k = k, .n = n, .upd = (const DevValue *const *)(k->opnd + n + 1)};
    if (!(r.res = ts_calloc((size_t)n, sizeof *r.res)))
        return dev_kernel_oom(k, NULL);
    /* One operand at its last use (the executor lets a value be sole only
     * there: exec.c pins operands used later) is updated in place, as
     * dynamic-update-slice is: the gradient of a gather scatters into a
     * zero table that then never coexists with its result
     * (partition/memory.c's reused_operand models it). */
    if (n == 1 && dev_value_sole(k->opnd[0]))
        r.res[0] = dev_value_ref(k->opnd[0]);
    for (int32_t i = 0; i < n && st == IR_OK; i++)
        if (!r.res[i] && !(r.res[i] = dev_value_clone(k->opnd[i])))
            st = dev_kernel_oom(k, NULL);
    if (st == IR_OK && (st = scatter_prepare(&r)) == IR_OK)
        st = scatter_loop(&r, &p);
    scatter_run_free(&r);
    if (st == IR_OK && k->ins->shape.type != IR_TUPLE) {
        *out = r.res[0];
        ts_free(r.res);
        return IR_OK;
    }
    if (st == IR_OK) {
        *out = dev_value_tuple(&k->ins->shape, n, r.res);
        ts_free(r.res);
        return *out ? IR_OK : dev_kernel_oom(k, NULL);
    }
    for (int32_t i = 0; i < n; i++)
        dev_value_unref(r.res[i]);
    ts_free(r.res);
    return st;
}
