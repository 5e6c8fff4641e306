/*
 * spmd_swap.c: a dot read only through transposes computes its operands
 * swapped, where that turns its GEMM's two transposed operands into plain
 * ones.
 *
 * JAX's attention projects q, k and v with the weight first,
 * dot(wq[D,H,Dh], x[B,S,D]) to [H,Dh,B,S], then transposes to [B,H,S,Dh]
 * for the heads' batched dots. Row-major, that dot is one GEMM whose
 * operands are both stored transposed (the weight's free dims are its
 * minor ones, x's contracted dim is its minor one: C = W^T X^T), and the
 * heads' dots then read q as a transposed matrix, v as a transposed
 * right-hand side. XLA's CPU backend lays such values out as its users
 * want ({2,0,3,1}); tessel's values are row-major, so the dot's operands
 * trade places instead: dot(x, wq) to [B,S,H,Dh] is a plain GEMM C = X W,
 * the same products summed over the same dim, and each transpose reading
 * it takes the permutation composed with the swap of the free dims, the
 * same values in the same shape. Measured with oneDNN on one core
 * (BENCHMARKS.md): the projection 1024x768x384 at 103 GFLOP/s transposed
 * on both sides, 114 plain; the heads' scores and P.V (512x512x64,
 * 512x64x512) 94 and 81 as read from [H,Dh,B,S], 103 and 99 from
 * [B,S,H,Dh].
 *
 * Rule: a dot (two array operands, no control edge, not the root) whose
 * every use is a transpose, whose lhs' innermost dim of size > 1 is one of
 * its free dims and whose rhs' innermost such dim is one of its contracted
 * dims (both GEMM operands transposed), whose result has no bounded
 * dynamic dim, whose operand_precision (if any) names the same precision
 * twice, and none of whose transposes swaps its free dims (the executor
 * already runs such a pair as the swapped GEMM, ir/fusion_find.c; swapped
 * here, the transpose would become an identity copy). The dot keeps its
 * name, slot and attributes; its operands, dimension numbers and result
 * dims trade places ([batch, rhs free, lhs free]); its users'
 * permutations map through the swap. Bits: the same products, summed over the same
 * contracted dim, but the GEMM library may block the sum differently for
 * the two layouts: the result is within rounding of the unswapped one
 * (the oracle's tolerance), bit for bit where the library sums each
 * entry's products in order whatever the layout (OpenBLAS here).
 */
#include "spmd_internal.h"

#include <stdbool.h>
#include <string.h>

/* The innermost dim of s whose size is not 1 (rank - 1 when every dim is
 * of size 1, -1 for a scalar). */
static int32_t innermost(const IrShape *s)
{
    for (int32_t d = s->rank - 1; d >= 0; d--)
        if (s->dims[d] != 1)
            return d;
    return s->rank - 1;
}

/* "{p,p}" or absent: the operands' precisions survive their swap. */
static bool precision_symmetric(const char *p)
{
    if (!p)
        return true;
    size_t n = strlen(p);
    const char *comma = strchr(p, ',');
    if (n < 5 || p[0] != '{' || p[n - 1] != '}' || !comma || strchr(comma + 1, ','))
        return false;
    size_t a = (size_t)(comma - p) - 1, b = n - 2 - a - 1;
    return a == b && strncmp(p + 1, comma + 1, a) == 0;
}

static bool swaps(const IrComputation *c, const int32_t *uses, const int32_t *transposes, const bool *ctrl,
                  int32_t x)
{
    const IrInstr *xi = &c->instr[x];
    if (xi->op != OP_DOT || xi->nopnd != 2 || x == c->root || ctrl[x] || xi->a.x->control_predecessors.n > 0 ||
        !ir_shape_is_array(&xi->shape) || uses[x] == 0 || transposes[x] != uses[x] ||
        !precision_symmetric(xi->a.precision_config) || xi->shape.dynamic || xi->opnd[0] < 0 ||
        xi->opnd[0] >= c->ninstr || xi->opnd[1] < 0 || xi->opnd[1] >= c->ninstr)
        return false;
    const IrInstr *l = &c->instr[xi->opnd[0]], *r = &c->instr[xi->opnd[1]];
    if (!ir_shape_is_array(&l->shape) || !ir_shape_is_array(&r->shape) || l->shape.rank == 0 ||
        r->shape.rank == 0)
        return false;
    const IrDotDnums *dn = &xi->a.dot;
    int32_t li = innermost(&l->shape), ri = innermost(&r->shape);
    bool lhs_trans = !ir_list_has(&dn->lhs_batch, li) && !ir_list_has(&dn->lhs_contracting, li);
    bool rhs_trans = ir_list_has(&dn->rhs_contracting, ri);
    int32_t nb = dn->lhs_batch.n, nlf = l->shape.rank - nb - dn->lhs_contracting.n;
    int32_t nrf = xi->shape.rank - nb - nlf;
    if (!lhs_trans || !rhs_trans || nlf < 1 || nrf < 1 || nb + nlf + nrf != xi->shape.rank)
        return false;
    /* A transpose that swaps the free dims already has the executor run
     * the swapped GEMM (a dot-transpose pair, ir/fusion_find.c); swapped
     * here it would become an identity transpose, a copy. */
    for (int32_t u = 0; u < c->ninstr; u++)
        if (c->instr[u].op == OP_TRANSPOSE && c->instr[u].nopnd == 1 && c->instr[u].opnd[0] == x &&
            ir_dot_transpose_swaps(c, &c->instr[u]))
            return false;
    return true;
}

/* Dot x with its operands swapped, its users' permutations mapped; false
 * on OOM (nothing changed then). */
static bool swap_dot(IrArena *arena, IrComputation *c, int32_t x)
{
    IrInstr *xi = &c->instr[x];
    IrDotDnums *dn = &xi->a.dot;
    int32_t rank = xi->shape.rank, nb = dn->lhs_batch.n;
    int32_t nlf = c->instr[xi->opnd[0]].shape.rank - nb - dn->lhs_contracting.n, nrf = rank - nb - nlf;
    int64_t *dims = ir_alloc_array(arena, (size_t)rank, sizeof *dims);
    int64_t *to = ir_alloc_array(arena, (size_t)rank, sizeof *to); /* old result dim -> new */
    if (!dims || !to)
        return false;
    for (int32_t d = 0; d < rank; d++) {
        to[d] = d < nb ? d : d < nb + nlf ? d + nrf : d - nlf;
        dims[to[d]] = xi->shape.dims[d];
    }
    /* Every user's new permutation first, so that OOM leaves all as they were. */
    int32_t nusers = 0;
    for (int32_t u = 0; u < c->ninstr; u++)
        nusers += c->instr[u].op == OP_TRANSPOSE && c->instr[u].nopnd == 1 && c->instr[u].opnd[0] == x;
    int64_t **perm = ir_alloc_array(arena, (size_t)(nusers > 0 ? nusers : 1), sizeof *perm);
    if (!perm)
        return false;
    for (int32_t u = 0, k = 0; u < c->ninstr; u++) {
        const IrInstr *ui = &c->instr[u];
        if (ui->op != OP_TRANSPOSE || ui->nopnd != 1 || ui->opnd[0] != x)
            continue;
        if (ui->a.dimensions.n != rank || !(perm[k] = ir_alloc_array(arena, (size_t)rank, sizeof **perm)))
            return false;
        for (int32_t d = 0; d < rank; d++) {
            int64_t p = ui->a.dimensions.v[d];
            if (p < 0 || p >= rank)
                return false;
            perm[k][d] = to[p];
        }
        k++;
    }
    for (int32_t u = 0, k = 0; u < c->ninstr; u++) {
        IrInstr *ui = &c->instr[u];
        if (ui->op == OP_TRANSPOSE && ui->nopnd == 1 && ui->opnd[0] == x)
            ui->a.dimensions.v = perm[k++];
    }
    int32_t o = xi->opnd[0];
    xi->opnd[0] = xi->opnd[1];
    xi->opnd[1] = o;
    IrI64List t = dn->lhs_batch;
    dn->lhs_batch = dn->rhs_batch;
    dn->rhs_batch = t;
    t = dn->lhs_contracting;
    dn->lhs_contracting = dn->rhs_contracting;
    dn->rhs_contracting = t;
    xi->shape.dims = dims;
    xi->shape.has_layout = false;
    xi->shape.minor_to_major = NULL;
    xi->shape.layout_tail = NULL;
    return true;
}

IrStatus spmd_swap_dots(IrArena *arena, IrComputation *c, int32_t *swapped)
{
    int32_t n = c->ninstr;
    *swapped = 0;
    int32_t *uses = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *uses);
    int32_t *transposes = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *transposes);
    bool *ctrl = ts_calloc((size_t)(n > 0 ? n : 1), sizeof *ctrl);
    IrStatus st = IR_OK;
    if (!uses || !transposes || !ctrl) {
        st = IR_ENOMEM;
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t j = 0; j < ins->nopnd; j++)
            if (ins->opnd[j] >= 0 && ins->opnd[j] < n) {
                uses[ins->opnd[j]]++;
                transposes[ins->opnd[j]] += ins->op == OP_TRANSPOSE && ins->nopnd == 1;
            }
        const IrI64List *cp = &ins->a.x->control_predecessors;
        for (int32_t j = 0; j < cp->n; j++)
            if (cp->v[j] >= 0 && cp->v[j] < n)
                ctrl[cp->v[j]] = true;
    }
    for (int32_t x = 0; x < n; x++) {
        if (!swaps(c, uses, transposes, ctrl, x))
            continue;
        if (!swap_dot(arena, c, x)) {
            st = IR_ENOMEM;
            goto done;
        }
        (*swapped)++;
    }
done:
    ts_free(uses);
    ts_free(transposes);
    ts_free(ctrl);
    return st;
}
