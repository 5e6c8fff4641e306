/*
 * lapack_calls.c: the LAPACK custom-calls JAX's CPU lowering emits for
 * cholesky and triangular solves, made tessel's own cholesky and
 * triangular-solve instructions (which have kernels and partitioning
 * rules) right after parsing; for QR, made XLA's Qr and Householder
 * product custom-calls; for LU, checked and kept (device/k_lu.c).
 *
 *   (F[..., n, n], s32[...]) custom-call(a), custom_call_target="lapack_?potrf_ffi",
 *       backend_config={uplo = 76 : ui8}
 *     becomes tuple(cholesky(a), info): lower = (uplo == 'L'), and info, as
 *     LAPACK's, 0 where the factor succeeded: tessel's cholesky turns a
 *     matrix that is not positive definite (potrf's info > 0, a NaN pivot
 *     included) entirely NaN, so info = isnan(factor[..., 0, 0]) as s32
 *     (JAX only compares it with 0, then selects NaN where it is not).
 *
 *   F[..., m, k] custom-call(a, b), custom_call_target="lapack_?trsm_ffi",
 *       backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : ui8}
 *     becomes triangular-solve(a, b): left_side = (side == 'L'), lower =
 *     (uplo == 'L'), transpose_a = N / T / C: NO_TRANSPOSE / TRANSPOSE /
 *     ADJOINT, unit_diagonal = (diag == 'U'). JAX's lowering passes no
 *     alpha (it is 1): a third operand is refused.
 *
 *   (F[..., m, n], F[..., min(m, n)]) custom-call(a), custom_call_target="lapack_?geqrf_ffi"
 *     becomes the custom-call target Qr (XLA's, device/k_qr.c): the same
 *     results, a with R and the Householder vectors, and the taus.
 *
 *   F[..., m, n] custom-call(a, taus), custom_call_target="lapack_?orgqr_ffi"
 *       (lapack_?ungqr_ffi for complex types)
 *     becomes ProductOfElementaryHouseholderReflectors (XLA's, k_qr.c).
 *
 *   (F[..., m, n], s32[..., min(m, n)], s32[...]) custom-call(a),
 *       custom_call_target="lapack_?getrf_ffi"
 *     stays a custom-call of that target, which the runtime runs
 *     (device/k_lu.c): LU with partial pivoting, 1-based pivots, info.
 *
 *   (F[..., n, n], R[..., n], s32[...]) custom-call(a),
 *       custom_call_target="lapack_?syevd_ffi" (s, d) or "lapack_?heevd_ffi" (c, z),
 *       backend_config={mode = 86 : ui8, uplo = 76 : ui8}
 *     stays a custom-call (device/k_eigh_svd.c): eigenvectors (mode V; N
 *     asks for none) and eigenvalues of the Hermitian matrix whose uplo
 *     triangle a holds; R is F's real type.
 *
 *   (F[..., m, n], R[..., k], F[..., m, uc], F[..., vr, n], s32[...])
 *       custom-call(a), custom_call_target="lapack_?gesdd_ffi" or
 *       "lapack_?gesvd_ffi", backend_config={mode = 65 : ui8}
 *     stays a custom-call (k_eigh_svd.c): the SVD, k = min(m, n); mode A
 *     gives U [m, m] and V^H [n, n] (uc = m, vr = n), S gives [m, k] and
 *     [k, n], N neither (U's and V^H's shapes are then unchecked beyond
 *     their rows, columns and batch). Mode O (JAX refuses it too) is an
 *     error.
 *
 *   (R[..., n], R[..., n], C[..., n, n], C[..., n, n], s32[...]) custom-call(a),
 *       custom_call_target="lapack_?geev_ffi" (s, d; for c, z: (C[..., n],
 *       C[..., n, n], C[..., n, n], s32[...])),
 *       backend_config={compute_left = 78 : ui8, compute_right = 86 : ui8}
 *     stays a custom-call (device/k_geev.c): the eigenvalues (a real
 *     matrix's as real and imaginary parts), the left and right
 *     eigenvectors (V computed, N not) as C, a's complex type, and info.
 *
 * ? is s, d, c or z, and must name a's type (f32, f64, c64, c128). The
 * characters are the ASCII codes JAX writes (jax/_src/lax/linalg.py,
 * _matrix_*_attr, _svd_computation_attr, _eig_computation_attr). Any other
 * value or attribute, or a num_batch_dims that is not rank - 2, is an
 * error naming the target; other LAPACK targets (gees, gehrd, ...) stay
 * custom-calls, which the runtime refuses by name.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* The backend_config keys of the two families, each a character code. */
enum { K_UPLO, K_SIDE, K_TRANS, K_DIAG, K_MODE, K_LEFT, K_RIGHT, NKEYS };
static const char *const key_names[NKEYS] = {"uplo",  "side",         "trans_x",      "diag",
                                             "mode", "compute_left", "compute_right"};

typedef struct Call {
    IrModule *m;
    IrDiag *d;
    const char *target;
    IrPos pos;
} Call;

static IrStatus refuse(const Call *k, const char *what)
{
    return ir_error(k->d, IR_EINPUT, k->m->file, k->m->src, k->pos, "custom-call target \"%s\": %s",
                    k->target, what);
}

/* Which family target names: 'p' (potrf), 't' (trsm), 'q' (geqrf), 'o'
 * (orgqr, ungqr), 'l' (getrf), 'e' (syevd, heevd), 's' (gesdd, gesvd), 'g'
 * (geev) or 0. */
static char family(const char *t)
{
    if (!t || strncmp(t, "lapack_", 7) != 0 || !t[7] || !strchr("sdcz", t[7]))
        return 0;
    bool complex = t[7] == 'c' || t[7] == 'z';
    if (strcmp(t + 8, "potrf_ffi") == 0)
        return 'p';
    if (strcmp(t + 8, "trsm_ffi") == 0)
        return 't';
    if (strcmp(t + 8, "geqrf_ffi") == 0)
        return 'q';
    if (strcmp(t + 8, complex ? "ungqr_ffi" : "orgqr_ffi") == 0)
        return 'o';
    if (strcmp(t + 8, "getrf_ffi") == 0)
        return 'l';
    if (strcmp(t + 8, complex ? "heevd_ffi" : "syevd_ffi") == 0)
        return 'e';
    if (strcmp(t + 8, "gesdd_ffi") == 0 || strcmp(t + 8, "gesvd_ffi") == 0)
        return 's';
    if (strcmp(t + 8, "geev_ffi") == 0)
        return 'g';
    return 0;
}

/* The type the target's letter names. */
static IrType letter_type(const char *t)
{
    return t[7] == 's' ? IR_F32 : t[7] == 'd' ? IR_F64 : t[7] == 'c' ? IR_C64 : IR_C128;
}

/* Read `{key = N : ui8, ...}` into v (-1 where a key is absent); false on
 * any other key or syntax. */
static bool read_config(const char *s, int v[NKEYS])
{
    for (int i = 0; i < NKEYS; i++)
        v[i] = -1;
    if (!s)
        return true;
    const char *p = s + (*s == '{');
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '}' || !*p)
            return true;
        size_t n = strcspn(p, " =");
        int key = -1;
        for (int i = 0; i < NKEYS; i++)
            if (strlen(key_names[i]) == n && strncmp(p, key_names[i], n) == 0)
                key = i;
        if (key < 0)
            return false;
        p += n;
        while (*p == ' ')
            p++;
        if (*p++ != '=')
            return false;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 255)
            return false;
        if (v[key] >= 0)
            return false; /* a key given twice */
        v[key] = (int)x;
        p = end;
        while (*p == ' ')
            p++;
        if (strncmp(p, ": ui8", 5) != 0)
            return false;
        p += 5;
    }
}

/* Drop the custom-call's own attributes (and the frontend attributes JAX
 * puts on it) from x, which becomes opcode op. */
static IrAttrsX *become(IrModule *m, IrInstr *x, IrOpcode op)
{
    IrAttrsX *ax = ir_attrs_x_edit(m->arena, &x->a);
    if (!ax)
        return NULL;
    ax->custom_call_target = ax->backend_config = ax->api_version = NULL;
    ax->output_to_operand_aliasing = ax->custom_call_schedule = NULL;
    ax->operand_layout_constraints = NULL;
    ax->noperand_layouts = 0;
    ax->custom_call_has_side_effect = false;
    IrKeyValue *f = x->a.nfrontend ? ir_alloc_array(m->arena, (size_t)x->a.nfrontend, sizeof *f) : NULL;
    if (x->a.nfrontend && !f)
        return NULL;
    int32_t w = 0;
    for (int32_t i = 0; i < x->a.nfrontend; i++)
        if (strcmp(x->a.frontend[i].key, "num_batch_dims") != 0 &&
            strcmp(x->a.frontend[i].key, "xla.sdy.sharding_rule") != 0)
            f[w++] = x->a.frontend[i];
    x->a.frontend = f;
    x->a.nfrontend = w;
    x->op = op;
    return ax;
}

/* s an array of F32/F64/C64/C128 of rank >= 2 whose batch
 * count num_batch_dims (when given) names. */
static bool linalg_array(const IrInstr *x, const IrShape *s)
{
    if (!ir_shape_is_array(s) || s->rank < 2 ||
        (s->type != IR_F32 && s->type != IR_F64 && s->type != IR_C64 && s->type != IR_C128))
        return false;
    const char *nb = ir_frontend_attr(x, "num_batch_dims");
    return !nb || atoi(nb) == s->rank - 2;
}

static IrStatus trsm(const Call *k, IrComputation *c, int32_t i, const int v[NKEYS])
{
    IrInstr *x = &c->instr[i];
    if (x->nopnd != 2)
        return refuse(k, "takes two operands (a, b; no alpha)");
    if (!linalg_array(x, &x->shape) || !linalg_array(x, &c->instr[x->opnd[0]].shape))
        return refuse(k, "needs f32, f64, c64 or c128 matrices with num_batch_dims = rank - 2");
    if ((v[K_SIDE] != 'L' && v[K_SIDE] != 'R') || (v[K_UPLO] != 'L' && v[K_UPLO] != 'U') ||
        (v[K_TRANS] != 'N' && v[K_TRANS] != 'T' && v[K_TRANS] != 'C') || (v[K_DIAG] != 'N' && v[K_DIAG] != 'U') || v[K_MODE] >= 0)
        return refuse(k, "backend_config must give side (L, R), uplo (L, U), trans_x (N, T, C) and diag "
                         "(N, U) as ASCII codes, and nothing else");
    IrAttrsX *ax = become(k->m, x, OP_TRIANGULAR_SOLVE);
    if (!ax)
        return ir_oom(k->d, NULL);
    ax->left_side = v[K_SIDE] == 'L';
    ax->lower = v[K_UPLO] == 'L';
    ax->unit_diagonal = v[K_DIAG] == 'U';
    ax->transpose_a = v[K_TRANS] == 'N' ? "NO_TRANSPOSE" : v[K_TRANS] == 'T' ? "TRANSPOSE" : "ADJOINT";
    return IR_OK;
}

/* An instruction op(opnd...) of `shape` added to c; -1 on OOM. */
static int32_t add(IrModule *m, IrComputation *c, IrOpcode op, const IrShape *shape, int32_t n,
                   const int32_t *opnd, IrPos pos)
{
    int32_t x = ir_add_simple(m, c, op, shape, n, opnd, NULL);
    if (x >= 0)
        c->instr[x].pos = pos;
    return x;
}

/* info = convert(isnan(factor[..., 0, 0])) of shape s32[batch...]. */
static int32_t info_of(IrModule *m, IrComputation *c, int32_t factor, const IrShape *info, IrPos pos)
{
    /* f is read before anything is added: adding may move the instructions. */
    const IrShape *f = &c->instr[factor].shape;
    int32_t r = f->rank;
    IrType type = f->type, t = type == IR_C64 ? IR_F32 : type == IR_C128 ? IR_F64 : type;
    IrShape s11, batch, real, pred;
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, f->dims, (size_t)r * sizeof dims[0]);
    dims[r - 2] = dims[r - 1] = 1;
    if (ir_shape_make(m->arena, &s11, type, r, dims) != IR_OK ||
        ir_shape_make(m->arena, &batch, type, r - 2, dims) != IR_OK ||
        ir_shape_make(m->arena, &real, t, r - 2, dims) != IR_OK ||
        ir_shape_make(m->arena, &pred, IR_PRED, r - 2, dims) != IR_OK)
        return -1;
    int32_t sl = add(m, c, OP_SLICE, &s11, 1, &factor, pos);
    if (sl < 0)
        return -1;
    IrAttrsX *ax = ir_attrs_x_edit(m->arena, &c->instr[sl].a);
    int64_t *v = ir_alloc_array(m->arena, (size_t)(3 * r), sizeof *v);
    if (!ax || !v)
        return -1;
    for (int32_t d = 0; d < r; d++) {
        v[d] = 0;
        v[r + d] = dims[d];
        v[2 * r + d] = 1;
    }
    ax->slice_start = (IrI64List){r, v};
    ax->slice_limit = (IrI64List){r, v + r};
    ax->slice_stride = (IrI64List){r, v + 2 * r};
    int32_t x = add(m, c, OP_RESHAPE, &batch, 1, &sl, pos);
    if (x >= 0 && t != type)
        x = add(m, c, OP_REAL, &real, 1, &x, pos);
    if (x < 0)
        return -1;
    int32_t both[2] = {x, x};
    int32_t ne = add(m, c, OP_COMPARE, &pred, 2, both, pos);
    if (ne < 0)
        return -1;
    c->instr[ne].a.direction = CMP_NE;
    return add(m, c, OP_CONVERT, info, 1, &ne, pos);
}

static IrStatus potrf(const Call *k, IrComputation *c, int32_t i, const int v[NKEYS])
{
    IrInstr *x = &c->instr[i];
    const IrShape *s = &x->shape;
    if (x->nopnd != 1)
        return refuse(k, "takes one operand");
    if (s->type != IR_TUPLE || s->ntuple != 2 || !linalg_array(x, &s->tuple[0]) ||
        !ir_shape_is_array(&s->tuple[1]) || s->tuple[1].type != IR_S32 || s->tuple[1].rank != s->tuple[0].rank - 2)
        return refuse(k, "must give (factor, s32 info) with num_batch_dims = rank - 2, the factor f32, f64, "
                         "c64 or c128");
    if (s->tuple[0].dims[s->tuple[0].rank - 1] == 0)
        return refuse(k, "of 0x0 matrices is not supported");
    if ((v[K_UPLO] != 'L' && v[K_UPLO] != 'U') || v[K_SIDE] >= 0 || v[K_TRANS] >= 0 || v[K_DIAG] >= 0 ||
        v[K_MODE] >= 0)
        return refuse(k, "backend_config must give uplo (L, U) as an ASCII code, and nothing else");
    IrShape factor_shape = s->tuple[0], info_shape = s->tuple[1];
    int32_t a = x->opnd[0];
    int32_t ch = add(k->m, c, OP_CHOLESKY, &factor_shape, 1, &a, k->pos);
    IrAttrsX *cx = ch >= 0 ? ir_attrs_x_edit(k->m->arena, &c->instr[ch].a) : NULL;
    if (!cx)
        return ir_oom(k->d, NULL);
    cx->lower = v[K_UPLO] == 'L';
    int32_t info = info_of(k->m, c, ch, &info_shape, k->pos);
    int32_t *opnd = ir_alloc_array(k->m->arena, 2, sizeof *opnd);
    if (info < 0 || !opnd)
        return ir_oom(k->d, NULL);
    opnd[0] = ch;
    opnd[1] = info;
    x = &c->instr[i]; /* adding may have moved the instructions */
    if (!become(k->m, x, OP_TUPLE))
        return ir_oom(k->d, NULL);
    x->opnd = opnd;
    x->nopnd = 2;
    return IR_OK;
}

/* Whether s is an s32 array of `rank` whose dims are dims[0..rank). */
static bool s32_of(const IrShape *s, int32_t rank, const int64_t *dims)
{
    return ir_shape_is_array(s) && s->type == IR_S32 && s->rank == rank && ir_dims_equal(s->dims, dims, rank);
}

/* geqrf, orgqr/ungqr and getrf: the shapes the kernels take (k_qr.c,
 * k_lu.c check them again when they run), no backend_config; geqrf and
 * orgqr take XLA's target names, getrf keeps its own. */
static IrStatus qr_lu(const Call *k, IrComputation *c, int32_t i, char f, const int v[NKEYS])
{
    IrInstr *x = &c->instr[i];
    const IrShape *s = &x->shape;
    for (int j = 0; j < NKEYS; j++)
        if (v[j] >= 0)
            return refuse(k, "takes no backend_config");
    if (x->nopnd != (f == 'o' ? 2 : 1) || !linalg_array(x, &c->instr[x->opnd[0]].shape))
        return refuse(k, f == 'o' ? "takes (a, taus), a f32, f64, c64 or c128 matrices with num_batch_dims = rank - 2"
                                  : "takes one operand, f32, f64, c64 or c128 matrices with num_batch_dims = rank - 2");
    const IrShape *a = &c->instr[x->opnd[0]].shape;
    int32_t r = a->rank;
    int64_t p = a->dims[r - 2] < a->dims[r - 1] ? a->dims[r - 2] : a->dims[r - 1];
    int64_t bp[IR_MAX_RANK];
    memcpy(bp, a->dims, (size_t)r * sizeof bp[0]);
    bp[r - 2] = p;
    bool ok;
    if (f == 'q')
        ok = s->type == IR_TUPLE && s->ntuple == 2 && ir_shape_equal(&s->tuple[0], a) &&
             ir_shape_is_array(&s->tuple[1]) && s->tuple[1].type == a->type && s->tuple[1].rank == r - 1 &&
             ir_dims_equal(s->tuple[1].dims, bp, r - 1);
    else if (f == 'o')
        ok = ir_shape_equal(s, a) && c->instr[x->opnd[1]].shape.type == a->type;
    else
        ok = s->type == IR_TUPLE && s->ntuple == 3 && ir_shape_equal(&s->tuple[0], a) &&
             s32_of(&s->tuple[1], r - 1, bp) && s32_of(&s->tuple[2], r - 2, a->dims);
    if (!ok)
        return refuse(k, f == 'q'   ? "must give (a's shape, taus [..., min(m, n)] of a's type)"
                         : f == 'o' ? "must give a's shape, from taus of a's type"
                                    : "must give (a's shape, s32 pivots [..., min(m, n)], s32 info [...])");
    if (f == 'l')
        return IR_OK; /* the kernel runs it by name */
    IrAttrsX *ax = become(k->m, x, OP_CUSTOM_CALL);
    if (!ax)
        return ir_oom(k->d, NULL);
    ax->custom_call_target = f == 'q' ? "Qr" : "ProductOfElementaryHouseholderReflectors";
    return IR_OK;
}

/* Whether s is an array of `type` of nb batch dims batch[0..nb) and then
 * nm more, dim nb + i equal to want[i] where want[i] >= 0. */
static bool array_of(const IrShape *s, IrType type, int32_t nb, const int64_t *batch, int32_t nm, const int64_t *want)
{
    if (!ir_shape_is_array(s) || s->type != type || s->rank != nb + nm || !ir_dims_equal(s->dims, batch, nb))
        return false;
    for (int32_t i = 0; i < nm; i++)
        if (want[i] >= 0 && s->dims[nb + i] != want[i])
            return false;
    return true;
}

/* syevd/heevd and gesdd/gesvd: the results the kernels give
 * (k_eigh_svd.c checks them again when they run), and the modes JAX
 * writes. */
static IrStatus eig_svd(const Call *k, IrComputation *c, int32_t i, char f, const int v[NKEYS])
{
    IrInstr *x = &c->instr[i];
    const IrShape *s = &x->shape;
    if (x->nopnd != 1 || !linalg_array(x, &c->instr[x->opnd[0]].shape))
        return refuse(k, "takes one operand, f32, f64, c64 or c128 matrices with num_batch_dims = rank - 2");
    const IrShape *a = &c->instr[x->opnd[0]].shape;
    int32_t r = a->rank;
    int64_t m = a->dims[r - 2], n = a->dims[r - 1], p = m < n ? m : n;
    IrType real = a->type == IR_C64 ? IR_F32 : a->type == IR_C128 ? IR_F64 : a->type;
    if (f == 'e') {
        if ((v[K_MODE] != 'V' && v[K_MODE] != 'N') || (v[K_UPLO] != 'L' && v[K_UPLO] != 'U') || v[K_SIDE] >= 0 ||
            v[K_TRANS] >= 0 || v[K_DIAG] >= 0)
            return refuse(k, "backend_config must give mode (V, N) and uplo (L, U) as ASCII codes, and nothing "
                             "else");
        bool ok = m == n && s->type == IR_TUPLE && s->ntuple == 3 && ir_shape_equal(&s->tuple[0], a) &&
                  array_of(&s->tuple[1], real, r - 2, a->dims, 1, &n) &&
                  array_of(&s->tuple[2], IR_S32, r - 2, a->dims, 0, NULL);
        return ok ? IR_OK
                  : refuse(k, "must give (a's shape, eigenvalues R[..., n], s32 info [...]) for square matrices "
                              "a [..., n, n], R a's real type");
    }
    if (v[K_MODE] == 'O')
        return refuse(k, "mode O (overwrite a) is not supported, as in JAX");
    if ((v[K_MODE] != 'A' && v[K_MODE] != 'S' && v[K_MODE] != 'N') || v[K_UPLO] >= 0 || v[K_SIDE] >= 0 ||
        v[K_TRANS] >= 0 || v[K_DIAG] >= 0)
        return refuse(k, "backend_config must give mode (A, S, N) as an ASCII code, and nothing else");
    bool full = v[K_MODE] == 'A', none = v[K_MODE] == 'N';
    int64_t u[2] = {m, none ? -1 : full ? m : p}, vt[2] = {none ? -1 : full ? n : p, n};
    bool ok = s->type == IR_TUPLE && s->ntuple == 5 && ir_shape_equal(&s->tuple[0], a) &&
              array_of(&s->tuple[1], real, r - 2, a->dims, 1, &p) && array_of(&s->tuple[2], a->type, r - 2, a->dims, 2, u) &&
              array_of(&s->tuple[3], a->type, r - 2, a->dims, 2, vt) &&
              array_of(&s->tuple[4], IR_S32, r - 2, a->dims, 0, NULL);
    return ok ? IR_OK
              : refuse(k, "must give (a's shape, S R[..., k], U [..., m, m or k], V^H [..., n or k, n], s32 info "
                          "[...]) for a [..., m, n], k = min(m, n), R a's real type, U and V^H full for mode A "
                          "and reduced for S");
}

/* geev: the results the kernel gives (k_geev.c checks them again when it
 * runs), and the computation modes JAX writes. */
static IrStatus geev(const Call *k, IrComputation *c, int32_t i, const int v[NKEYS])
{
    IrInstr *x = &c->instr[i];
    const IrShape *s = &x->shape;
    if (x->nopnd != 1 || !linalg_array(x, &c->instr[x->opnd[0]].shape))
        return refuse(k, "takes one operand, f32, f64, c64 or c128 matrices with num_batch_dims = rank - 2");
    for (int j = 0; j < NKEYS; j++)
        if (j != K_LEFT && j != K_RIGHT && v[j] >= 0)
            return refuse(k, "backend_config must give compute_left and compute_right (V, N) as ASCII codes, and "
                             "nothing else");
    if ((v[K_LEFT] != 'V' && v[K_LEFT] != 'N') || (v[K_RIGHT] != 'V' && v[K_RIGHT] != 'N'))
        return refuse(k, "backend_config must give compute_left and compute_right (V, N) as ASCII codes, and "
                         "nothing else");
    const IrShape *a = &c->instr[x->opnd[0]].shape;
    int32_t r = a->rank;
    int64_t n = a->dims[r - 1], nn[2] = {n, n};
    bool real = a->type == IR_F32 || a->type == IR_F64;
    IrType ct = a->type == IR_F32 ? IR_C64 : a->type == IR_F64 ? IR_C128 : a->type;
    int32_t nres = real ? 5 : 4;
    bool ok = a->dims[r - 2] == n && s->type == IR_TUPLE && s->ntuple == nres &&
              array_of(&s->tuple[0], real ? a->type : ct, r - 2, a->dims, 1, &n) &&
              (!real || array_of(&s->tuple[1], a->type, r - 2, a->dims, 1, &n)) &&
              array_of(&s->tuple[nres - 3], ct, r - 2, a->dims, 2, nn) &&
              array_of(&s->tuple[nres - 2], ct, r - 2, a->dims, 2, nn) &&
              array_of(&s->tuple[nres - 1], IR_S32, r - 2, a->dims, 0, NULL);
    return ok ? IR_OK
              : refuse(k, "must give (wr R[..., n], wi R[..., n], vl C[..., n, n], vr C[..., n, n], s32 info "
                          "[...]) for a real a [..., n, n], or (w C[..., n], vl, vr, info) for a complex one, C "
                          "the complex type of R");
}

int ir_lapack_char(const char *backend_config, const char *key)
{
    int v[NKEYS];
    if (!read_config(backend_config, v))
        return -1;
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key_names[i], key) == 0)
            return v[i];
    return -1;
}

IrStatus ir_lapack_import(IrModule *m, IrDiag *d)
{
    for (int32_t ci = 0; ci < m->ncomp; ci++) {
        IrComputation *c = m->comp[ci];
        int32_t n = c->ninstr; /* what is added is not a LAPACK call */
        for (int32_t i = 0; i < n; i++) {
            IrInstr *x = &c->instr[i];
            char f = x->op == OP_CUSTOM_CALL ? family(x->a.x->custom_call_target) : 0;
            if (!f)
                continue;
            Call k = {m, d, x->a.x->custom_call_target, x->pos};
            int v[NKEYS];
            if (!read_config(x->a.x->backend_config, v))
                return refuse(&k, "backend_config must be {key = N : ui8, ...} of uplo, side, trans_x, diag, mode "
                                  "(each once)");
            if (x->nopnd >= 1 && ir_shape_is_array(&c->instr[x->opnd[0]].shape) &&
                c->instr[x->opnd[0]].shape.type != letter_type(k.target))
                return refuse(&k, "names a type other than its operand's (s f32, d f64, c c64, z c128)");
            IrStatus st = f == 'p'   ? potrf(&k, c, i, v)
                          : f == 't' ? trsm(&k, c, i, v)
                          : f == 'e' || f == 's' ? eig_svd(&k, c, i, f, v)
                          : f == 'g' ? geev(&k, c, i, v)
                                     : qr_lu(&k, c, i, f, v);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}
