/*
 * vmath.c: libmvec's vector functions over arrays (vmath.h).
 *
 * libmvec's names follow the x86 vector function ABI: _ZGV, the ISA (b
 * SSE2, d AVX2, e AVX-512), N (unmasked), the lane count, v (one vector
 * argument), _, then the scalar function's name: _ZGVeN16v_tanhf takes 16
 * floats in a zmm register. A width's functions are declared, and the
 * loop that calls them compiled, under that ISA's target, and only run on
 * a CPU that has it (__builtin_cpu_supports), so the binary stays
 * portable.
 */
#include "vmath.h"

#include <string.h>

#if defined(TESSEL_HAVE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__)
#define VM_ENABLED 1
#include <immintrin.h>
#endif

/* The ops with a libmvec function, by the scalar function's name. The
 * logistic is 1 / (1 + exp(-a)), float_ops.h's expression, with this exp.
 * cbrt is left to libm: libmvec's misses perfect cubes by an ulp
 * (cbrtf(27) = 2.9999998), where libm's is exact. */
#define VM_FUNCS(X)                                                                        \
    X(OP_EXP, exp) X(OP_EXPM1, expm1) X(OP_LOG, log) X(OP_LOG1P, log1p) X(OP_TANH, tanh)  \
    X(OP_SINE, sin) X(OP_COSINE, cos) X(OP_TAN, tan) X(OP_ERF, erf)                        \
    X(OP_ACOS, acos) X(OP_ACOSH, acosh) X(OP_ASIN, asin) X(OP_ASINH, asinh)                \
    X(OP_ATAN, atan) X(OP_ATANH, atanh) X(OP_COSH, cosh) X(OP_SINH, sinh)

bool dev_vmath_has(IrOpcode op)
{
#ifdef VM_ENABLED
#define HAS(OPC, NAME) case OPC:
    switch (op) {
        VM_FUNCS(HAS)
    case OP_LOGISTIC: return true;
    default: return false;
    }
#undef HAS
#else
    (void)op;
    return false;
#endif
}

#ifdef VM_ENABLED

/* One width: ET elements in VT vectors of LANES, EN their name (f32,
 * f64), ISA the ABI letter. The width's helpers vm_<ISA>_<EN>_load,
 * _store, _neg (sign flip) and _logistic (1 / (1 + v)) come first.
 * Defines the op's function (NULL if none) and the loop: whole vectors,
 * then the last partial one through a zero-padded buffer, so that every
 * element goes through the same function. */
#define VM_WIDTH(ISA, EN, ET, VT, LANES)                                                  \
    typedef VT (*vm_##ISA##_##EN##_fn)(VT);                                                \
    static vm_##ISA##_##EN##_fn vm_##ISA##_##EN##_pick(IrOpcode op)                        \
    {                                                                                      \
        switch (op) {                                                                      \
            VM_FUNCS(VM_CASE_##EN##_##ISA)                                                 \
        case OP_LOGISTIC: return VM_NAME_##EN(ISA, LANES, exp);                            \
        default: return NULL;                                                              \
        }                                                                                  \
    }                                                                                      \
    static inline VM_T_##ISA VT vm_##ISA##_##EN##_apply(vm_##ISA##_##EN##_fn f, int kind, VT v) \
    {                                                                                      \
        if (kind == 2)                                                                     \
            return vm_##ISA##_##EN##_logistic(vm_##ISA##_##EN##_exp0(f, vm_##ISA##_##EN##_neg(v))); \
        return kind == 1 ? vm_##ISA##_##EN##_exp0(f, v) : f(v);                           \
    }                                                                                      \
    static VM_T_##ISA bool vm_##ISA##_##EN(IrOpcode op, const ET *a, ET *r, int64_t n)                \
    {                                                                                      \
        vm_##ISA##_##EN##_fn f = vm_##ISA##_##EN##_pick(op);                               \
        if (!f)                                                                            \
            return false;                                                                  \
        int kind = op == OP_LOGISTIC ? 2 : op == OP_EXP ? 1 : 0; /* exp's underflow lanes */  \
        int64_t i = 0;                                                                     \
        for (; i + LANES <= n; i += LANES)                                                 \
            vm_##ISA##_##EN##_store(r + i,                                                 \
                                    vm_##ISA##_##EN##_apply(f, kind,                       \
                                                            vm_##ISA##_##EN##_load(a + i))); \
        if (i < n) {                                                                       \
            ET buf[LANES];                                                                 \
            memset(buf, 0, sizeof buf);                                                    \
            memcpy(buf, a + i, (size_t)(n - i) * sizeof(ET));                              \
            vm_##ISA##_##EN##_store(buf, vm_##ISA##_##EN##_apply(f, kind,                  \
                                                                 vm_##ISA##_##EN##_load(buf))); \
            memcpy(r + i, buf, (size_t)(n - i) * sizeof(ET));                              \
        }                                                                                  \
        return true;                                                                       \
    }

/* Each width's functions are compiled for its ISA by a function
 * attribute (GCC and clang both have it; clang lacks GCC's target
 * pragmas), and only called once vm_isa() has seen the CPU has it. */
#define VM_T_e __attribute__((target("avx512f")))
#define VM_T_d __attribute__((target("avx2")))
#define VM_T_b

/* _ZGV<isa>N<lanes>v_<name>[f] */
#define VM_NAME_f32(ISA, LANES, NAME) _ZGV##ISA##N##LANES##v_##NAME##f
#define VM_NAME_f64(ISA, LANES, NAME) _ZGV##ISA##N##LANES##v_##NAME

#define VM_DECLARE_f32_e(OPC, NAME) VM_T_e __m512 VM_NAME_f32(e, 16, NAME)(__m512);
#define VM_DECLARE_f64_e(OPC, NAME) VM_T_e __m512d VM_NAME_f64(e, 8, NAME)(__m512d);
#define VM_DECLARE_f32_d(OPC, NAME) VM_T_d __m256 VM_NAME_f32(d, 8, NAME)(__m256);
#define VM_DECLARE_f64_d(OPC, NAME) VM_T_d __m256d VM_NAME_f64(d, 4, NAME)(__m256d);
#define VM_DECLARE_f32_b(OPC, NAME) VM_T_b __m128 VM_NAME_f32(b, 4, NAME)(__m128);
#define VM_DECLARE_f64_b(OPC, NAME) VM_T_b __m128d VM_NAME_f64(b, 2, NAME)(__m128d);
#define VM_CASE_f32_e(OPC, NAME) case OPC: return VM_NAME_f32(e, 16, NAME);
#define VM_CASE_f64_e(OPC, NAME) case OPC: return VM_NAME_f64(e, 8, NAME);
#define VM_CASE_f32_d(OPC, NAME) case OPC: return VM_NAME_f32(d, 8, NAME);
#define VM_CASE_f64_d(OPC, NAME) case OPC: return VM_NAME_f64(d, 4, NAME);
#define VM_CASE_f32_b(OPC, NAME) case OPC: return VM_NAME_f32(b, 4, NAME);
#define VM_CASE_f64_b(OPC, NAME) case OPC: return VM_NAME_f64(b, 2, NAME);

/* Helpers of one width: the element type's load, store, sign flip (as C's
 * unary minus: only the sign bit) and 1 / (1 + v). */
#define VM_HELPERS(ISA, EN, ET, VT, LOAD, STORE, SIGN, XOR, SET1, ADD, DIV)            \
    static inline VM_T_##ISA VT vm_##ISA##_##EN##_load(const ET *p) { return LOAD(p); }           \
    static inline VM_T_##ISA void vm_##ISA##_##EN##_store(ET *p, VT v) { STORE(p, v); }           \
    static inline VM_T_##ISA VT vm_##ISA##_##EN##_neg(VT v) { return XOR(v, SET1(SIGN)); }        \
    static inline VM_T_##ISA VT vm_##ISA##_##EN##_logistic(VT v) { return DIV(SET1(1), ADD(SET1(1), v)); }

static inline VM_T_e __m512 vm_xor512_ps(__m512 a, __m512 b)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline VM_T_e __m512d vm_xor512_pd(__m512d a, __m512d b)
{
    return _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
}
/* exp with its underflow lanes done here (issue 34): libmvec's exp sends
 * every lane below its range (f32: about -87.3) to scalar libm, one call a
 * lane, and a causal attention mask makes half a softmax's arguments
 * -1e9. Below -104 (f32; -746 for f64) exp is +0 in libm too (the least
 * subnormal's half is exp(-103.97), exp(-745.13)), so those lanes are set
 * to 0 here and the vector goes through libmvec with 0 in their place:
 * the same bits as before, without the calls. Lanes between the two
 * bounds still take libm's path, as before. */
static inline VM_T_e __m512 vm_e_f32_exp0(__m512 (*f)(__m512), __m512 v)
{
    __mmask16 under = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
    if (!under)
        return f(v);
    return _mm512_maskz_mov_ps((__mmask16)~under, f(_mm512_maskz_mov_ps((__mmask16)~under, v)));
}
static inline VM_T_e __m512d vm_e_f64_exp0(__m512d (*f)(__m512d), __m512d v)
{
    __mmask8 under = _mm512_cmp_pd_mask(v, _mm512_set1_pd(-746.0), _CMP_LT_OQ);
    if (!under)
        return f(v);
    return _mm512_maskz_mov_pd((__mmask8)~under, f(_mm512_maskz_mov_pd((__mmask8)~under, v)));
}
static inline VM_T_d __m256 vm_d_f32_exp0(__m256 (*f)(__m256), __m256 v)
{
    __m256 under = _mm256_cmp_ps(v, _mm256_set1_ps(-104.0f), _CMP_LT_OQ);
    if (!_mm256_movemask_ps(under))
        return f(v);
    return _mm256_andnot_ps(under, f(_mm256_andnot_ps(under, v)));
}
static inline VM_T_d __m256d vm_d_f64_exp0(__m256d (*f)(__m256d), __m256d v)
{
    __m256d under = _mm256_cmp_pd(v, _mm256_set1_pd(-746.0), _CMP_LT_OQ);
    if (!_mm256_movemask_pd(under))
        return f(v);
    return _mm256_andnot_pd(under, f(_mm256_andnot_pd(under, v)));
}
/* SSE2: as libmvec does it. */
static inline __m128 vm_b_f32_exp0(__m128 (*f)(__m128), __m128 v) { return f(v); }
static inline __m128d vm_b_f64_exp0(__m128d (*f)(__m128d), __m128d v) { return f(v); }

VM_FUNCS(VM_DECLARE_f32_e)
VM_FUNCS(VM_DECLARE_f64_e)
VM_HELPERS(e, f32, float, __m512, _mm512_loadu_ps, _mm512_storeu_ps, -0.0f, vm_xor512_ps, _mm512_set1_ps,
           _mm512_add_ps, _mm512_div_ps)
VM_HELPERS(e, f64, double, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, -0.0, vm_xor512_pd, _mm512_set1_pd,
           _mm512_add_pd, _mm512_div_pd)
VM_WIDTH(e, f32, float, __m512, 16)
VM_WIDTH(e, f64, double, __m512d, 8)

VM_FUNCS(VM_DECLARE_f32_d)
VM_FUNCS(VM_DECLARE_f64_d)
VM_HELPERS(d, f32, float, __m256, _mm256_loadu_ps, _mm256_storeu_ps, -0.0f, _mm256_xor_ps, _mm256_set1_ps,
           _mm256_add_ps, _mm256_div_ps)
VM_HELPERS(d, f64, double, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, -0.0, _mm256_xor_pd, _mm256_set1_pd,
           _mm256_add_pd, _mm256_div_pd)
VM_WIDTH(d, f32, float, __m256, 8)
VM_WIDTH(d, f64, double, __m256d, 4)

/* SSE2 is x86-64's baseline. */
VM_FUNCS(VM_DECLARE_f32_b)
VM_FUNCS(VM_DECLARE_f64_b)
VM_HELPERS(b, f32, float, __m128, _mm_loadu_ps, _mm_storeu_ps, -0.0f, _mm_xor_ps, _mm_set1_ps, _mm_add_ps,
           _mm_div_ps)
VM_HELPERS(b, f64, double, __m128d, _mm_loadu_pd, _mm_storeu_pd, -0.0, _mm_xor_pd, _mm_set1_pd, _mm_add_pd,
           _mm_div_pd)
VM_WIDTH(b, f32, float, __m128, 4)
VM_WIDTH(b, f64, double, __m128d, 2)

/* The process's width: the widest the CPU has, the same for every call
 * (an element's result must not depend on which call computed it). */
typedef enum VmIsa { VM_SSE2, VM_AVX2, VM_AVX512 } VmIsa;

static VmIsa vm_isa(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return VM_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return VM_AVX2;
    return VM_SSE2;
}

#endif /* VM_ENABLED */

bool dev_vmath_f32(IrOpcode op, const float *a, float *r, int64_t n)
{
#ifdef VM_ENABLED
    switch (vm_isa()) {
    case VM_AVX512: return vm_e_f32(op, a, r, n);
    case VM_AVX2: return vm_d_f32(op, a, r, n);
    default: return vm_b_f32(op, a, r, n);
    }
#else
    (void)op, (void)a, (void)r, (void)n;
    return false;
#endif
}

bool dev_vmath_f64(IrOpcode op, const double *a, double *r, int64_t n)
{
#ifdef VM_ENABLED
    switch (vm_isa()) {
    case VM_AVX512: return vm_e_f64(op, a, r, n);
    case VM_AVX2: return vm_d_f64(op, a, r, n);
    default: return vm_b_f64(op, a, r, n);
    }
#else
    (void)op, (void)a, (void)r, (void)n;
    return false;
#endif
}
