/*
 * k_rng.c: random numbers. rng-bit-generator with ThreeFry-2x32 (20 rounds)
 * and Philox-4x32 (10 rounds) bit for bit as XLA computes them
 * (xla/hlo/transforms/expanders/rng_bit_generator_expander.cc and
 * xla/hlo/builder/lib/prng.cc); rng (rng_uniform, rng_normal) from Philox
 * seeded by the run (docs/cli.md, "Random numbers of `rng`");
 * stochastic-convert as XLA's StochasticConvertDecomposer writes it.
 *
 * rng-bit-generator(state u64[n]) -> (new state, bits):
 *   key = state[0].
 *   ThreeFry: counter = state[1]. 64-bit outputs: element i (row-major) is
 *     threefry(counter + i, key), words (lo, hi) -> lo | hi << 32; new
 *     state[1] = counter + N. 32-bit and narrower outputs: the shape is cut
 *     in halves along its first even dimension (else its largest; scalars:
 *     one pair); half element h (row-major in the half shape, that dimension
 *     ceil(d/2)) uses counter + h, and its two words go to indices 2j and
 *     2j+1 of the cut dimension (the last dropped when d is odd); new
 *     state[1] = counter + elements of the half shape. Narrow types keep
 *     the low bits of each 32-bit word.
 *   Philox: the 128-bit counter is (state[1], state[2]) when n >= 3, else
 *     (state[1], state[0]) (the key doubles as the high word). Block b (b =
 *     0 .. ceil(words/4)-1) is philox(counter + b, key) and the outputs are
 *     the blocks' words in order: 32-bit element i is word i, 64-bit
 *     element i is words (2i, 2i+1) as lo | hi << 32. The new counter is
 *     counter + blocks (only the low word is written back when n == 2).
 *   rng_default is Philox: XLA's CPU compiler runs
 *     RngBitGeneratorExpander(RNG_PHILOX).
 * Example (checked in test_k_rng.c): state {0, 0}, ThreeFry, u32[3,2] gives
 * rows {0x6b200159, 0x99ba4efe}, ... and state {0, 3}.
 */
#include "device.h"

#include <math.h>
#include <string.h>

static uint32_t rotl32(uint32_t v, int r)
{
    return (v << r) | (v >> (32 - r));
}

void dev_threefry2x32(const uint32_t ctr[2], const uint32_t key[2], uint32_t out[2])
{
    static const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    uint32_t ks[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
    uint32_t x0 = ctr[0] + ks[0], x1 = ctr[1] + ks[1];
    /* Five groups of four rounds, a key injection after each group. */
    for (int g = 0; g < 5; g++) {
        for (int r = 0; r < 4; r++) {
            x0 += x1;
            x1 = rotl32(x1, rot[(g & 1) * 4 + r]) ^ x0;
        }
        x0 += ks[(g + 1) % 3];
        x1 += ks[(g + 2) % 3] + (uint32_t)(g + 1);
    }
    out[0] = x0;
    out[1] = x1;
}

void dev_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)x[0] * 0xD2511F53u, p1 = (uint64_t)x[2] * 0xCD9E8D57u;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y1 = (uint32_t)p1;
        uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1, y3 = (uint32_t)p0;
        x[0] = y0, x[1] = y1, x[2] = y2, x[3] = y3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    memcpy(out, x, sizeof x);
}

/* Store the low bits of a random word as element i of type t. */
static void put_bits(IrType t, void *base, int64_t i, uint64_t w)
{
    switch (ir_type_size(t)) {
    case 1: ((uint8_t *)base)[i] = dev_subbyte_wrap(t, w); break;
    case 2: ((uint16_t *)base)[i] = (uint16_t)w; break;
    case 4: ((uint32_t *)base)[i] = (uint32_t)w; break;
    default: ((uint64_t *)base)[i] = w; break;
    }
}

static uint64_t threefry64(uint64_t ctr, uint64_t key)
{
    uint32_t c[2] = {(uint32_t)ctr, (uint32_t)(ctr >> 32)}, k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    uint32_t o[2];
    dev_threefry2x32(c, k, o);
    return o[0] | (uint64_t)o[1] << 32;
}

/* ThreeFry's 32-bit-and-narrower layout (see the top of the file). */
static uint64_t threefry_narrow(const IrShape *s, uint64_t key, uint64_t ctr, void *data)
{
    int32_t cut = -1;
    for (int32_t d = 0; d < s->rank && cut < 0; d++)
        if (s->dims[d] % 2 == 0)
            cut = d;
    if (cut < 0) /* no even dimension: the first largest */
        for (int32_t d = 0; d < s->rank; d++)
            if (cut < 0 || s->dims[d] > s->dims[cut])
                cut = d;
    if (s->rank == 0) {
        put_bits(s->type, data, 0, threefry64(ctr, key) & 0xffffffffu);
        return 1;
    }
    int64_t outer = 1, inner = 1, d = s->dims[cut], half = (d + 1) / 2;
    for (int32_t j = 0; j < cut; j++)
        outer *= s->dims[j];
    for (int32_t j = cut + 1; j < s->rank; j++)
        inner *= s->dims[j];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t h = 0; h < half; h++)
            for (int64_t in = 0; in < inner; in++) {
                uint64_t w = threefry64(ctr + (uint64_t)((o * half + h) * inner + in), key);
                for (int64_t c = 0; c < 2 && 2 * h + c < d; c++)
                    put_bits(s->type, data, (o * d + 2 * h + c) * inner + in,
                             c ? w >> 32 : w & 0xffffffffu);
            }
    return (uint64_t)(outer * half * inner);
}

/* Philox's words; returns the number of 128-bit blocks used. */
static uint64_t philox_fill(const IrShape *s, uint64_t key, uint64_t lo, uint64_t hi, void *data)
{
    int64_t n = ir_shape_elements(s);
    bool wide = ir_type_size(s->type) == 8;
    int64_t words = wide ? 2 * n : n, blocks = (words + 3) / 4;
    uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)}, o[4];
    for (int64_t b = 0; b < blocks; b++) {
        uint64_t cl = lo + (uint64_t)b, ch = hi + (cl < lo); /* 128-bit add */
        uint32_t c[4] = {(uint32_t)cl, (uint32_t)(cl >> 32), (uint32_t)ch, (uint32_t)(ch >> 32)};
        dev_philox4x32(c, k, o);
        for (int j = 0; j < 4; j += wide ? 2 : 1) {
            int64_t e = wide ? 2 * b + j / 2 : 4 * b + j;
            if (e < n)
                put_bits(s->type, data, e, wide ? o[j] | (uint64_t)o[j + 1] << 32 : o[j]);
        }
    }
    return (uint64_t)blocks;
}

IrStatus dev_k_rng_bit_generator(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    const IrShape *rs = &k->ins->shape;
    /* XLA writes (new state, bits); JAX's older lowering, which XLA's
     * verifier still accepts, declares the bits alone (the new state is
     * dropped). */
    bool bits_only = rs->type != IR_TUPLE;
    if (k->nopnd != 1 || (!bits_only && rs->ntuple != 2))
        return dev_kernel_error(k, IR_EINPUT, "rng-bit-generator takes a state and returns (state, bits) or bits");
    const DevValue *st = k->opnd[0];
    const IrShape *ds = bits_only ? rs : &rs->tuple[1];
    const char *alg = k->ins->a.x->rng_algorithm ? k->ins->a.x->rng_algorithm : "rng_default";
    bool philox = strcmp(alg, "rng_three_fry") != 0;
    int64_t ns = dev_value_elements(st);
    /* ThreeFry reads the key from word 0 and the counter from word 1, as
     * XLA's expander slices them; further words pass through unchanged. */
    if (st->shape.type != IR_U64 || st->shape.rank != 1 || ns < 2 ||
        (!bits_only && !ir_shape_equal(&st->shape, &rs->tuple[0])))
        return dev_kernel_error(k, IR_EINPUT, "rng-bit-generator %s needs a u64[N] state, N >= 2, got %s",
                                alg, ir_type_name(st->shape.type));
    if (!ir_shape_is_array(ds) || ds->type == IR_PRED || ir_type_is_complex(ds->type) ||
        ir_type_size(ds->type) == 16)
        return dev_kernel_error(k, IR_EINPUT, "rng-bit-generator cannot make %s",
                                ir_type_name(ds->type));
    DevValue *v[2] = {dev_value_clone(st), dev_value_new(ds)};
    if (!v[0] || !v[1]) {
        dev_value_unref(v[0]);
        dev_value_unref(v[1]);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for rng-bit-generator");
    }
    uint64_t *s = (uint64_t *)v[0]->data;
    if (!philox) {
        if (ir_type_size(ds->type) == 8) {
            int64_t n = ir_shape_elements(ds);
            for (int64_t i = 0; i < n; i++)
                put_bits(ds->type, v[1]->data, i, threefry64(s[1] + (uint64_t)i, s[0]));
            s[1] += (uint64_t)n;
        } else {
            s[1] += threefry_narrow(ds, s[0], s[1], v[1]->data);
        }
    } else {
        uint64_t lo = s[1], hi = ns >= 3 ? s[2] : s[0];
        uint64_t nb = philox_fill(ds, s[0], lo, hi, v[1]->data);
        s[1] = lo + nb;
        if (ns >= 3)
            s[2] = hi + (s[1] < lo);
    }
    if (bits_only) {
        dev_value_unref(v[0]);
        *out = v[1];
        return IR_OK;
    }
    *out = dev_value_tuple(rs, 2, v);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory for rng-bit-generator");
}

/* ---- rng ---- */

/* 64-bit FNV-1a of the instruction's name: which stream an `rng` draws. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Uniform in [0, 1) from the top mantissa bits, as prng.cc's
 * ConvertRandomBitsToUniformFloatingPoint: f64 from 52 of 64 bits,
 * others from 23 of 32 (f32 arithmetic, then rounded to the type). */
static double unit_draw(IrType t, uint64_t w)
{
    if (t == IR_F64)
        return (double)(w >> 12) * 0x1p-52;
    return (float)((uint32_t)w >> 9) * 0x1p-23f;
}

IrStatus dev_k_rng(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    const IrShape *rs = &k->ins->shape;
    const char *dist = k->ins->a.x->distribution ? k->ins->a.x->distribution : "";
    bool normal = strcmp(dist, "rng_normal") == 0;
    if (k->nopnd != 2 || !ir_shape_is_array(rs) || k->opnd[0]->shape.rank != 0 ||
        k->opnd[1]->shape.rank != 0 || k->opnd[0]->shape.type != rs->type ||
        k->opnd[1]->shape.type != rs->type)
        return dev_kernel_error(k, IR_EINPUT, "rng takes two %s scalars", ir_type_name(rs->type));
    if (!normal && strcmp(dist, "rng_uniform") != 0)
        return dev_kernel_error(k, IR_EINPUT, "rng needs distribution=rng_uniform or rng_normal");
    bool flt = ir_type_is_float(rs->type);
    if (!flt && (normal || !ir_type_is_int(rs->type)))
        return dev_kernel_error(k, IR_EINPUT, "rng %s is not defined for %s", dist, ir_type_name(rs->type));
    DevValue *r = dev_value_new(rs);
    int64_t n = ir_shape_elements(rs);
    IrShape u64 = {.type = IR_U64, .rank = 1, .dims = &n};
    /* The draws are the kernel's scratch, not a value: plain memory, not
     * counted against the device (device/alloc.c's value_bytes). */
    uint64_t *bits = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof *bits);
    if (!r || !bits) {
        dev_value_unref(r);
        ts_free(bits);
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for rng");
    }
    uint64_t key = k->opt->rng_seed ^ name_hash(k->ins->name);
    philox_fill(&u64, key, 0, 0, (uint8_t *)bits);
    double a = dev_load_f64(rs->type, k->opnd[0]->data, 0), b = dev_load_f64(rs->type, k->opnd[1]->data, 0);
    for (int64_t i = 0; i < n; i++) {
        if (normal) { /* Box-Muller on the pair (2j, 2j+1), as prng.cc */
            int64_t j = i & ~(int64_t)1;
            double u1 = fmax(unit_draw(IR_F64, bits[j]), 1e-7), u2 = unit_draw(IR_F64, j + 1 < n ? bits[j + 1] : bits[j] >> 1);
            double z = sqrt(-2 * log(u1)) * ((i & 1) ? cos(2 * M_PI * u2) : sin(2 * M_PI * u2));
            dev_store_f64(rs->type, r->data, i, a + b * z);
        } else if (flt) {
            dev_store_f64(rs->type, r->data, i, unit_draw(rs->type, bits[i]) * (b - a) + a);
        } else { /* prng.cc's ConvertRandomBitsToUniformInt: a + bits mod (b - a) */
            int64_t lo = dev_load_i64(rs->type, k->opnd[0]->data, 0);
            uint64_t range = (uint64_t)dev_load_i64(rs->type, k->opnd[1]->data, 0) - (uint64_t)lo;
            uint64_t dist_i = range ? bits[i] % range : 0;
            dev_store_u64(rs->type, r->data, i, (uint64_t)lo + dist_i);
        }
    }
    ts_free(bits);
    *out = r;
    return IR_OK;
}

/* ---- stochastic-convert ---- */

/* XLA's StochasticConvertDecomposer, float -> signed int: |x| = t + f with
 * t = floor(|x|); round up when random < convert<u_bits>(f * 2^bits) (a
 * saturating convert, computed in the operand's type, f32 for f16);
 * negate for x < 0; x <= INT_MIN gives INT_MIN, x >= INT_MAX gives INT_MAX;
 * NaN gives 0. Example: s8 from 2.25 with u16 random 0x3fff: 0.25 * 2^16 =
 * 0x4000 > 0x3fff: 3; with 0x4000: 2. */
IrStatus dev_k_stochastic_convert(const DevKernelArgs *k, DevValue **out)
{
    *out = NULL;
    const IrShape *rs = &k->ins->shape;
    if (k->nopnd != 2)
        return dev_kernel_error(k, IR_EINPUT, "stochastic-convert takes an operand and random bits");
    IrType ft = k->opnd[0]->shape.type, ut = k->opnd[1]->shape.type;
    int bits = ir_type_bits(ut);
    if (!ir_type_is_float(ft) || !ir_type_is_unsigned_int(ut) || ir_type_bits(ft) != bits ||
        !ir_type_is_signed_int(rs->type) || !ir_shape_same_dims(&k->opnd[0]->shape, rs) ||
        !ir_shape_same_dims(&k->opnd[1]->shape, rs))
        return dev_kernel_error(k, IR_EINPUT,
                                "stochastic-convert needs a float operand, unsigned random bits of its width "
                                "and a signed integer result of its shape");
    DevValue *r = dev_value_new(rs);
    if (!r)
        return dev_kernel_error(k, IR_ENOMEM, "out of memory for stochastic-convert");
    int ob = ir_type_bits(rs->type);
    int64_t lo = ob == 64 ? INT64_MIN : -((int64_t)1 << (ob - 1)), hi = ob == 64 ? INT64_MAX : ((int64_t)1 << (ob - 1)) - 1;
    int64_t n = ir_shape_elements(rs);
    for (int64_t i = 0; i < n; i++) {
        double x = dev_load_f64(ft, k->opnd[0]->data, i);
        uint64_t rnd = dev_load_u64(ut, k->opnd[1]->data, i);
        double ax = fabs(x), t = floor(ax), f = ax - t;
        /* f * 2^bits in the operand's type (f32 for f16 and narrower). */
        double fixed = ft == IR_F64 ? f * ldexp(1.0, bits) : (double)((float)f * ldexpf(1.0f, bits));
        uint64_t tmp = 0;
        dev_store_f64(ut, &tmp, 0, fixed); /* saturating, NaN -> 0 */
        uint64_t ff = dev_load_u64(ut, &tmp, 0);
        tmp = 0;
        dev_store_f64(rs->type, &tmp, 0, t); /* saturating */
        int64_t v = dev_load_i64(rs->type, &tmp, 0);
        if (rnd < ff)
            v = (int64_t)((uint64_t)v + 1);
        if (x < 0)
            v = (int64_t)(0 - (uint64_t)v);
        if (x <= (double)lo)
            v = lo;
        if (x >= (double)hi)
            v = hi;
        dev_store_i64(rs->type, r->data, i, v);
    }
    *out = r;
    return IR_OK;
}
