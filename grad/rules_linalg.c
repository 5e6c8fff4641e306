/*
 * rules_linalg.c: gradients of the linear-algebra ops, reverse mode and
 * (grad_linalg_tangent) forward mode, each over matrices [..., m, n]
 * batched on the leading dimensions; op(A) is A or A^T as the instruction
 * says; tril/triu keep a triangle.
 *
 *   triangular-solve  X = op(A)^-1 B (left side; right: X = B op(A)^-1).
 *       B gets op(A)^-T G (right: G op(A)^-T): a triangular solve with the
 *       other transpose. A gets -GB X^T (right: -X^T GB) as op(A)'s
 *       adjoint, transposed back when op transposes, kept to the triangle
 *       the solve reads (without the diagonal under unit_diagonal).
 *   cholesky  L L^T = A, reading A's lower triangle (the upper: U^T U =
 *       A, the same rule on the transposes). JAX's rule, L' = L phi(L^-1
 *       A' L^-T) with phi the lower triangle and half the diagonal
 *       (Murray 2016), transposed: A gets L^-T phi(L^T G) L^-1, G kept to
 *       L's triangle (the other is undefined). As in JAX, A is taken as
 *       symmetric: jnp.linalg.cholesky symmetrizes its input in the HLO
 *       before the op, and that is differentiated as written.
 *   JAX's LU, custom-call lapack_?getrf_ffi (square matrices): P A = L U,
 *       L unit lower and U upper packed in one matrix. From dA_p = dL U +
 *       L dU, M = L^-1 dA_p U^-1 = L^-1 dL + dU U^-1 splits into its
 *       strictly lower part (L^-1 dL) and its upper part (dU U^-1), and
 *       the packed dLU = L tril(M, -1) + triu(M) U; so the packed LU's
 *       adjoint G gives M's, GM = tril(L^T G, -1) + triu(G U^T), then A_p's,
 *       L^-T GM U^-T, and A's: rows put back where the pivots took them
 *       (the permutation from the pivots: custom-call
 *       tessel_lu_permutation, device/k_lu.c; as a one-hot matrix, P^T).
 *       The pivots and info are integers: no gradient.
 * Forward mode (grad_linalg_tangent): JAX's jvp rules, the derivations
 * above read forwards: X' = op(A)^-1 (B' - op(A')_tri X) (right: (B' -
 * X op(A')_tri) op(A)^-1); L' = L phi(L^-1 A' L^-T); LU' = L tril(M, -1) +
 * triu(M) U with M = L^-1 (P A') U^-1.
 */
#include "grad.h"

#include <string.h>

/* x with its last two dimensions swapped. */
static int32_t swap_last(GB *b, int32_t x)
{
    if (x < 0)
        return -1;
    int32_t r = gb_shape(b, x)->rank;
    int64_t perm[IR_MAX_RANK];
    for (int32_t d = 0; d < r; d++)
        perm[d] = d;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    return gb_transpose(b, x, perm);
}

/* op(x) op(y) over the leading (batch) dimensions: x [..., m, k] (tx: its
 * transpose [..., k, m]) times y [..., k, n] (ty: [..., n, k]). */
static int32_t matmul(GB *b, int32_t x, bool tx, int32_t y, bool ty)
{
    if (x < 0 || y < 0)
        return -1;
    int32_t r = gb_shape(b, x)->rank;
    int64_t batch[IR_MAX_RANK], lc = tx ? r - 2 : r - 1, rc = ty ? r - 1 : r - 2;
    for (int32_t d = 0; d < r - 2; d++)
        batch[d] = d;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.dot.lhs_batch = a.dot.rhs_batch = gb_ilist(b->g, r - 2, batch);
    a.dot.lhs_contracting = gb_ilist(b->g, 1, &lc);
    a.dot.rhs_contracting = gb_ilist(b->g, 1, &rc);
    int32_t o[2] = {x, y};
    return gb_emit(b, OP_DOT, NULL, 2, o, &a, 0, NULL); /* [..., free of x, free of y] */
}

/* pred [..., m, n] like x: the lower triangle (col <= row; strict: <), or
 * the upper (col >= row; strict: >). */
static int32_t triangle(GB *b, int32_t x, bool lower, bool strict)
{
    const IrShape *s = gb_shape(b, x);
    IrShape is;
    if (ir_shape_make(b->g->m->arena, &is, IR_S32, s->rank, s->dims) != IR_OK)
        return gb_oom(b->g), -1;
    IrAttrs a = {.x = &ir_no_attrs_x};
    a.iota_dimension = s->rank - 2;
    int32_t row = gb_emit(b, OP_IOTA, &is, 0, NULL, &a, 0, NULL);
    a.iota_dimension = s->rank - 1;
    int32_t col = gb_emit(b, OP_IOTA, &is, 0, NULL, &a, 0, NULL);
    return gb_cmp(b, col, row, lower ? (strict ? CMP_LT : CMP_LE) : (strict ? CMP_GT : CMP_GE));
}

/* pred [..., m, n] like x: the diagonal. */
static int32_t diagonal(GB *b, int32_t x)
{
    return gb_bin(b, OP_AND, triangle(b, x, true, false), triangle(b, x, false, false));
}

/* x kept to a triangle (triangle's arguments), zeros elsewhere. */
static int32_t keep(GB *b, int32_t x, bool lower, bool strict)
{
    if (x < 0)
        return -1;
    return gb_select(b, triangle(b, x, lower, strict), x, gb_full_like(b, x, 0));
}

/* triangular-solve(a, rhs) with these attributes. */
static int32_t tsolve(GB *b, int32_t a, int32_t rhs, bool left, bool lower, bool transpose, bool unit)
{
    IrAttrsX ax = ir_no_attrs_x;
    ax.left_side = left;
    ax.lower = lower;
    ax.unit_diagonal = unit;
    ax.transpose_a = transpose ? "TRANSPOSE" : "NO_TRANSPOSE";
    IrAttrs at = {.x = &ax};
    int32_t o[2] = {a, rhs};
    return gb_emit(b, OP_TRIANGULAR_SOLVE, NULL, 2, o, &at, 0, NULL);
}

static IrStatus rule_triangular_solve(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    const IrAttrsX *x = ins->a.x;
    int32_t a = ins->opnd[0], rhs = ins->opnd[1];
    bool trans = x->transpose_a && strcmp(x->transpose_a, "NO_TRANSPOSE") != 0; /* ADJOINT: real values */
    int32_t gb = tsolve(b, a, g, x->left_side, x->lower, !trans, x->unit_diagonal);
    if (rev_on(r, rhs))
        rev_acc(r, rhs, 0, gb);
    if (!rev_on(r, a))
        return r->g->d->status;
    int32_t gop = gb_un(b, OP_NEGATE, x->left_side ? matmul(b, gb, false, i, true) : matmul(b, i, true, gb, false));
    return rev_acc(r, a, 0, keep(b, trans ? swap_last(b, gop) : gop, x->lower, x->unit_diagonal));
}

/* A's adjoint for L = cholesky_lower(A), G L's (the file's header). */
static int32_t cholesky_lower_adjoint(GB *b, int32_t l, int32_t g)
{
    l = keep(b, l, true, false);
    int32_t p = keep(b, matmul(b, l, true, keep(b, g, true, false), false), true, false);
    int32_t phi = gb_select(b, diagonal(b, p), gb_scale(b, p, 0.5), p); /* the lower triangle, half the diagonal */
    int32_t y = tsolve(b, l, phi, true, true, true, false);    /* L^-T phi */
    return tsolve(b, l, y, false, true, false, false);         /* (L^-T phi) L^-1 */
}

static IrStatus rule_cholesky(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t a = ins->opnd[0];
    if (ins->a.x->lower)
        return rev_acc(r, a, 0, cholesky_lower_adjoint(b, i, g));
    /* U = cholesky_upper(A) = cholesky_lower(A^T)^T: the rule on the transposes */
    int32_t at = cholesky_lower_adjoint(b, swap_last(b, i), swap_last(b, g));
    return rev_acc(r, a, 0, swap_last(b, at));
}

/* The permutation matrix of getrf's result i as a one-hot [..., m, m] of
 * a's type: P[..., i, j] = 1 where row i of P A is row j of A. */
static int32_t lu_permutation(GB *b, int32_t i, const IrShape *as)
{
    int32_t rank = as->rank;
    IrShape perm_shape, ps;
    if (ir_shape_make(b->g->m->arena, &perm_shape, IR_S32, rank - 1, as->dims) != IR_OK ||
        ir_shape_make(b->g->m->arena, &ps, IR_S32, rank, as->dims) != IR_OK)
        return gb_oom(b->g), -1;
    IrAttrsX ax = ir_no_attrs_x;
    ax.custom_call_target = "tessel_lu_permutation";
    IrAttrs at = {.x = &ax};
    int32_t ipiv = gb_gte(b, i, 1);
    int32_t perm = gb_emit(b, OP_CUSTOM_CALL, &perm_shape, 1, &ipiv, &at, 0, NULL);
    int64_t keep_dims[IR_MAX_RANK];
    for (int32_t d = 0; d < rank - 1; d++)
        keep_dims[d] = d;
    int32_t pb = gb_bcast(b, perm, IR_S32, rank, as->dims, rank - 1, keep_dims);
    IrAttrs ia = {.x = &ir_no_attrs_x};
    ia.iota_dimension = rank - 1;
    int32_t col = gb_emit(b, OP_IOTA, &ps, 0, NULL, &ia, 0, NULL);
    return gb_convert(b, gb_select(b, gb_cmp(b, pb, col, CMP_EQ), gb_full(b, &ps, 1), gb_full(b, &ps, 0)),
                      as->type);
}

/* L (unit lower) and U of getrf's result i. */
static void lu_factors(GB *b, int32_t i, int32_t *l, int32_t *u)
{
    int32_t lu = gb_gte(b, i, 0);
    *l = gb_select(b, diagonal(b, lu), gb_full_like(b, lu, 1), keep(b, lu, true, true));
    *u = keep(b, lu, false, false);
}

int32_t grad_linalg_tangent(GB *b, const IrInstr *ins, int32_t self, const int32_t *tan)
{
    const IrAttrsX *x = ins->a.x;
    if (ins->op == OP_TRIANGULAR_SOLVE) {
        bool trans = x->transpose_a && strcmp(x->transpose_a, "NO_TRANSPOSE") != 0;
        int32_t da = keep(b, tan[0], x->lower, x->unit_diagonal);
        if (trans)
            da = swap_last(b, da);
        int32_t rhs = gb_bin(b, OP_SUBTRACT, tan[1],
                             x->left_side ? matmul(b, da, false, self, false) : matmul(b, self, false, da, false));
        return tsolve(b, ins->opnd[0], rhs, x->left_side, x->lower, trans, x->unit_diagonal);
    }
    if (ins->op == OP_CHOLESKY) {
        bool lower = x->lower;
        int32_t l = keep(b, lower ? self : swap_last(b, self), true, false);
        int32_t da = lower ? tan[0] : swap_last(b, tan[0]);
        int32_t m = tsolve(b, l, tsolve(b, l, da, false, true, true, false), true, true, false, false);
        int32_t phi = keep(b, gb_select(b, diagonal(b, m), gb_scale(b, m, 0.5), m), true, false);
        int32_t dl = matmul(b, l, false, phi, false);
        return lower ? dl : swap_last(b, dl);
    }
    if (!grad_is_getrf(ins))
        return -2;
    const IrShape *as = gb_shape(b, ins->opnd[0]);
    if (as->dims[as->rank - 2] != as->dims[as->rank - 1])
        return -2;
    IrShape a_shape = *as;
    int32_t l, u;
    lu_factors(b, self, &l, &u);
    int32_t dap = matmul(b, lu_permutation(b, self, &a_shape), false, tan[0], false);
    int32_t m = tsolve(b, u, tsolve(b, l, dap, true, true, false, true), false, false, false, false);
    return gb_bin(b, OP_ADD, matmul(b, l, false, keep(b, m, true, true), false),
                  matmul(b, keep(b, m, false, false), false, u, false));
}

/* The adjoint of getrf's operand from its packed LU's adjoint g. */
static IrStatus rule_getrf(Rev *r, int32_t i, const IrInstr *ins, int32_t g)
{
    GB *b = &r->b;
    int32_t a = ins->opnd[0];
    IrShape as = *gb_shape(b, a);
    if (as.dims[as.rank - 2] != as.dims[as.rank - 1])
        return rev_no_rule(r, i, "the LU of a matrix that is not square");
    int32_t l, u;
    lu_factors(b, i, &l, &u);
    int32_t gm = gb_bin(b, OP_ADD, keep(b, matmul(b, l, true, g, false), true, true),
                        keep(b, matmul(b, g, false, u, true), false, false));
    int32_t x1 = tsolve(b, l, gm, true, true, true, true);     /* L^-T GM */
    int32_t x2 = tsolve(b, u, x1, false, false, true, false);  /* (L^-T GM) U^-T */
    return rev_acc(r, a, 0, matmul(b, lu_permutation(b, i, &as), true, x2, false)); /* P^T */
}

bool grad_is_getrf(const IrInstr *ins)
{
    const char *t = ins->op == OP_CUSTOM_CALL ? ins->a.x->custom_call_target : NULL;
    return t && strncmp(t, "lapack_", 7) == 0 && t[7] && strchr("sd", t[7]) && strcmp(t + 8, "getrf_ffi") == 0;
}

IrStatus rev_linalg(Rev *r, int32_t i, const IrInstr *ins)
{
    int32_t g = rev_leaf(r, i, 0);
    if (g < 0)
        return IR_OK;
    switch (ins->op) {
    case OP_TRIANGULAR_SOLVE: return rule_triangular_solve(r, i, ins, g);
    case OP_CHOLESKY: return rule_cholesky(r, i, ins, g);
    default: return grad_is_getrf(ins) ? rule_getrf(r, i, ins, g) : rev_no_rule(r, i, NULL);
    }
}
