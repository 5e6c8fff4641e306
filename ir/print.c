/*
 * print.c: the HLO text printer.
 *
 * Prints a module in XLA's syntax so that XLA's parser and tessel's read it
 * back to the same module, and so that parse(print(M)) prints the same text
 * again (the round trip the tests check):
 *
 *   HloModule NAME, is_scheduled=true, input_output_alias={ {0}: (0, {}) },
 *     entry_computation_layout={...}, replica_count=R, num_partitions=P
 *
 *   callee {                               (callees before callers)
 *     x = f32[] parameter(0)
 *     ...
 *   }
 *
 *   ENTRY main {
 *     ROOT add = f32[4]{0} add(a, b), sharding={replicated}
 *   }
 *
 * Header attributes appear in XLA's order and only when the module has
 * them. Names are printed bare, as XLA's current printer does; a name that
 * could not be read back bare (a type name such as `f32`, a keyword, odd
 * characters) gets XLA's `%` prefix. Operands are printed by name only.
 * Attributes follow XLA's HloInstruction::ToString: the opcode's own
 * attributes in XLA's spelling and order, then called computations, then
 * sharding, frontend_attributes, statistics, control-predecessors,
 * metadata, backend_config and origin; which attributes an op prints, in
 * which order and when, is the tables' of hlo_attrs.def (ir_op_attrs,
 * ir_attr_generic). Instructions are printed in stable
 * topological order (definition order when that is already valid), so
 * modules built by passes print as text a parser accepts.
 */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* a growable heap string                                              */
/* ------------------------------------------------------------------ */

typedef struct Buf {
    char *s;
    size_t n, cap;
    bool oom;
} Buf;

static void put_n(Buf *b, const char *s, size_t k)
{
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + k + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *ns = ts_realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, k);
    b->n += k;
    b->s[b->n] = 0;
}

static void put(Buf *b, const char *s)
{
    put_n(b, s, strlen(s));
}

static void putf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void putf(Buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)k < sizeof tmp) {
        put_n(b, tmp, (size_t)k);
        return;
    }
    char *big = ts_malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    put_n(b, big, (size_t)k);
    ts_free(big);
}

/* Hand the string to the caller, or NULL (and free) on OOM. */
static char *finish(Buf *b)
{
    if (b->oom || !b->s) {
        ts_free(b->s);
        if (b->oom)
            return NULL;
        char *e = ts_malloc(1);
        if (e)
            e[0] = 0;
        return e;
    }
    return b->s;
}

/* Decimal without printf: this runs for every dimension of every shape
 * and every number of every instruction. Same text as "%lld". */
static void put_i64(Buf *b, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof tmp, *p = e;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    put_n(b, p, (size_t)(e - p));
}

/* "{1,2,3}" as XLA joins dimension lists. */
static void put_list(Buf *b, const IrI64List *l)
{
    put(b, "{");
    for (int32_t i = 0; i < l->n; i++) {
        if (i)
            put(b, ",");
        put_i64(b, l->v[i]);
    }
    put(b, "}");
}

/* The text of ir_shape_str (shape.c), written straight into b:
 * "f32[8,16]{1,0}", tuples "(f32[2], s32[])". */
static void put_shape(Buf *b, const IrShape *s, bool with_layout)
{
    if (s->type == IR_TUPLE) {
        put_n(b, "(", 1);
        for (int32_t i = 0; i < s->ntuple; i++) {
            if (i)
                put_n(b, ", ", 2);
            put_shape(b, &s->tuple[i], with_layout);
        }
        put_n(b, ")", 1);
        return;
    }
    put(b, ir_type_name(s->type));
    put_n(b, "[", 1);
    for (int32_t i = 0; i < s->rank; i++) {
        if (i)
            put_n(b, ",", 1);
        if (ir_shape_dim_dynamic(s, i)) {
            if (s->dims[i] == IR_DIM_UNBOUNDED) {
                put_n(b, "?", 1);
                continue;
            }
            put_n(b, "<=", 2);
        }
        put_i64(b, s->dims[i]);
    }
    put_n(b, "]", 1);
    if (with_layout && s->has_layout && s->type != IR_TOKEN) {
        put_n(b, "{", 1);
        for (int32_t i = 0; i < s->rank && s->minor_to_major; i++) {
            if (i)
                put_n(b, ",", 1);
            put_i64(b, s->minor_to_major[i]);
        }
        if (s->layout_tail) {
            put_n(b, ":", 1);
            put(b, s->layout_tail);
        }
        put_n(b, "}", 1);
    }
}

/* A C-escaped string in double quotes, as XLA's CEscape writes it. */
static void put_quoted(Buf *b, const char *s)
{
    put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': put(b, "\\\""); break;
        case '\\': put(b, "\\\\"); break;
        case '\n': put(b, "\\n"); break;
        case '\t': put(b, "\\t"); break;
        case '\r': put(b, "\\r"); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                putf(b, "\\%03o", *p);
            else
                put_n(b, (const char *)p, 1);
        }
    }
    put(b, "\"");
}

/* ------------------------------------------------------------------ */
/* names                                                               */
/* ------------------------------------------------------------------ */

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c)
{
    return is_alpha(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* A name XLA's lexer reads as a plain identifier: [A-Za-z_][A-Za-z0-9_.-]*
 * and not a word the lexer gives another meaning. */
static bool bare_ok(const char *s)
{
    static const char *const reserved[] = {
        "ROOT", "ENTRY", "HloModule", "true", "false", "inf", "nan", "tuple",
    };
    if (!s || !is_alpha(s[0]))
        return false;
    size_t n = 0;
    for (const char *p = s; *p; p++, n++)
        if (!is_name_char(*p))
            return false;
    /* Type names and the words above are at most 9 bytes ("HloModule"):
     * a longer name needs no lookup (names are printed 2-3 times a line). */
    if (n > 9)
        return true;
    if (ir_type_from_name(s, n) != IR_INVALID)
        return false;
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (reserved[i][0] == s[0] && strcmp(s, reserved[i]) == 0)
            return false;
    return true;
}

static void put_name(Buf *b, const char *s)
{
    if (!bare_ok(s))
        put(b, "%");
    put(b, s ? s : "");
}

/* ------------------------------------------------------------------ */
/* literals                                                            */
/* ------------------------------------------------------------------ */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Floats with enough digits to read back exactly: %.9g for f32 (and the
 * f32 value of f16/bf16), %.17g for f64; inf, -inf and nan spelled as XLA
 * spells them. */
static void put_float(Buf *b, double v, bool is_f64)
{
    if (isnan(v))
        put(b, signbit(v) ? "-nan" : "nan"); /* as XLA prints it; the parser keeps the sign */
    else if (isinf(v))
        put(b, v < 0 ? "-inf" : "inf");
    else
        putf(b, is_f64 ? "%.17g" : "%.9g", v);
}

/* One element of type t at p. */
static void put_element(Buf *b, IrType t, const uint8_t *p)
{
    union {
        int8_t i8; int16_t i16; int32_t i32; int64_t i64;
        uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
        float f32; double f64; float c64[2]; double c128[2];
    } u;
    memcpy(&u, p, ir_type_size(t));
    switch (t) {
    case IR_PRED: put(b, u.u8 ? "true" : "false"); break;
    case IR_S8: put_i64(b, u.i8); break;
    case IR_S16: put_i64(b, u.i16); break;
    case IR_S32: put_i64(b, u.i32); break;
    case IR_S64: put_i64(b, u.i64); break;
    case IR_U8: putf(b, "%u", (unsigned)u.u8); break;
    case IR_U16: putf(b, "%u", (unsigned)u.u16); break;
    case IR_U32: putf(b, "%lu", (unsigned long)u.u32); break;
    case IR_U64: putf(b, "%llu", (unsigned long long)u.u64); break;
    case IR_F16: put_float(b, half_to_float(u.u16), false); break;
    case IR_BF16: put_float(b, bf16_to_float(u.u16), false); break;
    case IR_F32: put_float(b, u.f32, false); break;
    case IR_F64: put_float(b, u.f64, true); break;
    case IR_C64:
        put(b, "(");
        put_float(b, u.c64[0], false);
        put(b, ", ");
        put_float(b, u.c64[1], false);
        put(b, ")");
        break;
    case IR_C128:
        put(b, "(");
        put_float(b, u.c128[0], true);
        put(b, ", ");
        put_float(b, u.c128[1], true);
        put(b, ")");
        break;
    default:
        /* XLA prints s2/s4 and u2/u4 as integers and the f8/f4 kinds as
         * the decimal of their value, which %.17g gives exactly (every f8
         * and f4 value is a short binary fraction) and reads back to the
         * same code. */
        if (ir_type_is_signed_int(t))
            put_i64(b, u.i8);
        else if (ir_type_is_unsigned_int(t))
            putf(b, "%u", (unsigned)u.u8);
        else if (ir_type_is_lowp_float(t))
            put_float(b, ir_lowp_to_double(t, u.u8), true);
        break;
    }
}

/* Elements of dimension `dim` onwards, row-major, from *p:
 *   rank 1: {1, 2, 3}        rank 2: { {1, 2}, {3, 4} }
 * (the outer levels put a space inside their braces, as in XLA's one-line
 * form; an empty level is {}). */
static void put_array_level(Buf *b, const IrShape *s, int32_t dim, const uint8_t **p)
{
    size_t es = ir_type_size(s->type);
    int64_t n = s->dims[dim];
    if (dim == s->rank - 1) {
        put(b, "{");
        for (int64_t i = 0; i < n && !b->oom; i++) {
            if (i)
                put(b, ", ");
            put_element(b, s->type, *p);
            *p += es;
        }
        put(b, "}");
        return;
    }
    if (n == 0) {
        put(b, "{}");
        return;
    }
    put(b, "{ ");
    for (int64_t i = 0; i < n && !b->oom; i++) {
        if (i)
            put(b, ", ");
        put_array_level(b, s, dim + 1, p);
    }
    put(b, " }");
}

static void put_literal(Buf *b, const IrShape *s, const uint8_t **p)
{
    if (s->type == IR_TUPLE) {
        put(b, "(");
        for (int32_t i = 0; i < s->ntuple; i++) {
            if (i)
                put(b, ", ");
            put_literal(b, &s->tuple[i], p);
        }
        put(b, ")");
        return;
    }
    if (!ir_type_is_array(s->type))
        return;
    if (s->rank == 0) {
        put_element(b, s->type, *p);
        *p += ir_type_size(s->type);
        return;
    }
    put_array_level(b, s, 0, p);
}

/* The literal of `shape` stored at data (the IrAttrs.literal form) as XLA
 * writes it; "{...}" when data is NULL for a non-empty shape. A ts_malloc
 * string, or NULL on OOM. */
char *ir_literal_str(const IrShape *shape, const uint8_t *data)
{
    Buf b = {0};
    const uint8_t *p = data;
    if (!data && ir_shape_bytes(shape) > 0)
        put(&b, "{...}");
    else
        put_literal(&b, shape, &p);
    return finish(&b);
}

/* ------------------------------------------------------------------ */
/* attribute values                                                    */
/* ------------------------------------------------------------------ */

static void put_attr_list(Buf *b, const char *key, const IrI64List *l)
{
    putf(b, ", %s=", key);
    put_list(b, l);
}

static int64_t one_if_zero(int64_t v)
{
    return v == 0 ? 1 : v;
}

/* window_util::ToString: size always; the rest only when not default.
 * "size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=0x1" */
static void put_window(Buf *b, const IrWindow *w)
{
    bool stride = false, pad = false, ld = false, rd = false, rev = false;
    for (int32_t i = 0; i < w->rank; i++) {
        const IrWindowDim *d = &w->dim[i];
        stride |= one_if_zero(d->stride) != 1;
        pad |= d->pad_lo != 0 || d->pad_hi != 0;
        ld |= one_if_zero(d->lhs_dilate) != 1;
        rd |= one_if_zero(d->rhs_dilate) != 1;
        rev |= d->reversal;
    }
    put(b, ", window={size=");
    for (int32_t i = 0; i < w->rank; i++)
        putf(b, i ? "x%lld" : "%lld", (long long)w->dim[i].size);
    if (stride) {
        put(b, " stride=");
        for (int32_t i = 0; i < w->rank; i++)
            putf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].stride));
    }
    if (pad) {
        put(b, " pad=");
        for (int32_t i = 0; i < w->rank; i++)
            putf(b, i ? "x%lld_%lld" : "%lld_%lld", (long long)w->dim[i].pad_lo,
                 (long long)w->dim[i].pad_hi);
    }
    if (ld) {
        put(b, " lhs_dilate=");
        for (int32_t i = 0; i < w->rank; i++)
            putf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].lhs_dilate));
    }
    if (rd) {
        put(b, " rhs_dilate=");
        for (int32_t i = 0; i < w->rank; i++)
            putf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].rhs_dilate));
    }
    if (rev) {
        put(b, " rhs_reversal=");
        for (int32_t i = 0; i < w->rank; i++)
            putf(b, i ? "x%d" : "%d", w->dim[i].reversal ? 1 : 0);
    }
    put(b, "}");
}

/* One side of dim_labels: 'b'/'f' (or 'i'/'o'), spatial digits in order. */
static void put_labels(Buf *b, int32_t nsp, int64_t d0, char c0, int64_t d1, char c1,
                       const int64_t *sp)
{
    int32_t rank = nsp + 2;
    char s[IR_MAX_RANK + 1];
    if (rank > IR_MAX_RANK)
        rank = IR_MAX_RANK;
    memset(s, '?', (size_t)rank);
    s[rank] = 0;
    if (d0 >= 0 && d0 < rank)
        s[d0] = c0;
    if (d1 >= 0 && d1 < rank)
        s[d1] = c1;
    for (int32_t i = 0; i < nsp; i++)
        if (sp[i] >= 0 && sp[i] < rank)
            s[sp[i]] = (char)(i < 10 ? '0' + i : 'a' + i - 10);
    put(b, s);
}

static void put_dim_labels(Buf *b, const IrConvDnums *c)
{
    put(b, ", dim_labels=");
    put_labels(b, c->nspatial, c->in_batch, 'b', c->in_feature, 'f', c->in_spatial);
    put(b, "_");
    put_labels(b, c->nspatial, c->k_in_feature, 'i', c->k_out_feature, 'o', c->k_spatial);
    put(b, "->");
    put_labels(b, c->nspatial, c->out_batch, 'b', c->out_feature, 'f', c->out_spatial);
}

/* operand_precision={HIGH,DEFAULT}: the raw text may be kept with or
 * without the attribute name and braces. */
static void put_precision(Buf *b, const char *raw)
{
    if (!raw || !*raw)
        return;
    if (strncmp(raw, "operand_precision", 17) == 0) {
        put(b, ", ");
        put(b, raw);
    } else if (raw[0] == '{') {
        put(b, ", operand_precision=");
        put(b, raw);
    } else {
        put(b, ", operand_precision={");
        put(b, raw);
        put(b, "}");
    }
}

static void put_padding(Buf *b, const IrAttrs *a)
{
    bool interior = false;
    for (int32_t i = 0; i < a->pad_interior.n; i++)
        interior |= a->pad_interior.v[i] != 0;
    put(b, ", padding=");
    for (int32_t i = 0; i < a->pad_lo.n; i++) {
        if (i)
            put(b, "x");
        putf(b, "%lld_%lld", (long long)a->pad_lo.v[i],
             (long long)(i < a->pad_hi.n ? a->pad_hi.v[i] : 0));
        if (interior)
            putf(b, "_%lld", (long long)(i < a->pad_interior.n ? a->pad_interior.v[i] : 0));
    }
}

/* slice={[0:4], [2:8]}; strides are shown only when one is not 1. */
static void put_slice(Buf *b, const IrAttrs *a)
{
    bool strides = false;
    for (int32_t i = 0; i < a->slice_stride.n; i++)
        strides |= a->slice_stride.v[i] != 1;
    put(b, ", slice={");
    for (int32_t i = 0; i < a->slice_start.n; i++) {
        if (i)
            put(b, ", ");
        putf(b, "[%lld:%lld", (long long)a->slice_start.v[i],
             (long long)(i < a->slice_limit.n ? a->slice_limit.v[i] : 0));
        if (strides)
            putf(b, ":%lld", (long long)(i < a->slice_stride.n ? a->slice_stride.v[i] : 1));
        put(b, "]");
    }
    put(b, "}");
}

/* replica_groups={{0,1},{2,3}}, or the iota form [2,2]<=[4] and
 * [2,2]<=[2,2]T(1,0) as it was written. */
static void put_replica_groups(Buf *b, const IrReplicaGroups *g)
{
    put(b, ", replica_groups=");
    if (g->iota && g->iota_shape.n > 0) {
        put(b, "[");
        for (int32_t i = 0; i < g->iota_shape.n; i++)
            putf(b, i ? ",%lld" : "%lld", (long long)g->iota_shape.v[i]);
        put(b, "]<=[");
        for (int32_t i = 0; i < g->iota_reshape.n; i++)
            putf(b, i ? ",%lld" : "%lld", (long long)g->iota_reshape.v[i]);
        put(b, "]");
        if (g->niota_perm > 0 && g->iota_perm) {
            put(b, "T(");
            for (int32_t i = 0; i < g->niota_perm; i++)
                putf(b, i ? ",%d" : "%d", (int)g->iota_perm[i]);
            put(b, ")");
        }
        return;
    }
    put(b, "{");
    for (int32_t i = 0; i < g->ngroups; i++) {
        if (i)
            put(b, ",");
        put(b, "{");
        for (int32_t k = 0; k < g->group_size[i]; k++) {
            if (k)
                put_n(b, ",", 1);
            put_i64(b, g->groups[i][k]);
        }
        put(b, "}");
    }
    put(b, "}");
}

static const char *cmp_dir_name(IrCmpDir d)
{
    static const char *const n[] = {"", "EQ", "NE", "LT", "LE", "GT", "GE"};
    return (unsigned)d < sizeof n / sizeof *n ? n[d] : "";
}

static const char *cmp_type_name(IrCmpType t)
{
    static const char *const n[] = {"", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"};
    return (unsigned)t < sizeof n / sizeof *n ? n[t] : "";
}

static void put_bool_attr(Buf *b, const char *key, bool v)
{
    putf(b, ", %s=%s", key, v ? "true" : "false");
}

/* source_target_pairs={{0,1},{1,0}} */
static void put_pairs(Buf *b, const IrAttrs *a)
{
    put(b, ", source_target_pairs={");
    for (int32_t i = 0; i + 1 < a->source_target_pairs.n; i += 2)
        putf(b, i ? ",{%lld,%lld}" : "{%lld,%lld}", (long long)a->source_target_pairs.v[i],
             (long long)a->source_target_pairs.v[i + 1]);
    put(b, "}");
}

/* operand_layout_constraints={f32[2]{0}, s32[]} */
static void put_layouts(Buf *b, const IrAttrs *a)
{
    put(b, ", operand_layout_constraints={");
    for (int32_t i = 0; i < a->noperand_layouts; i++) {
        if (i)
            put(b, ", ");
        put_shape(b, &a->operand_layout_constraints[i], true);
    }
    put(b, "}");
}

static int cmp_kv(const void *a, const void *b)
{
    const IrKeyValue *x = a, *y = b;
    int r = strcmp(x->key, y->key);
    return r ? r : strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

/* frontend_attributes={a="1",b="x"}, sorted by key as XLA prints them;
 * values kept as raw {json} print as they were. */
static void put_frontend(Buf *b, const IrAttrs *a)
{
    IrKeyValue *kv = ts_malloc((size_t)a->nfrontend * sizeof *kv);
    if (!kv) {
        b->oom = true;
        return;
    }
    memcpy(kv, a->frontend, (size_t)a->nfrontend * sizeof *kv);
    qsort(kv, (size_t)a->nfrontend, sizeof *kv, cmp_kv);
    put(b, ", frontend_attributes={");
    for (int32_t i = 0; i < a->nfrontend; i++) {
        if (i)
            put(b, ",");
        if (bare_ok(kv[i].key))
            put(b, kv[i].key);
        else
            put_quoted(b, kv[i].key);
        put(b, "=");
        const char *v = kv[i].value ? kv[i].value : "";
        size_t n = strlen(v);
        if (n >= 2 && v[0] == '{' && v[n - 1] == '}')
            put(b, v); /* a {json} value kept raw */
        else
            put_quoted(b, v);
    }
    put(b, "}");
    ts_free(kv);
}

/* A raw attribute kept as text: printed as key=TEXT, with braces added
 * when the text was stored without them. */
static void put_raw_braced(Buf *b, const char *key, const char *raw)
{
    if (!raw)
        return;
    putf(b, ", %s=", key);
    if (raw[0] == '{') {
        put(b, raw);
    } else {
        put(b, "{");
        put(b, raw);
        put(b, "}");
    }
}

static void put_sharding(Buf *b, const IrSharding *sh)
{
    char *s = ir_sharding_str(sh);
    if (!s) {
        b->oom = true;
        return;
    }
    put(b, ", sharding=");
    put(b, s);
    ts_free(s);
}

static void put_control(Buf *b, const IrComputation *c, const IrAttrs *a)
{
    put(b, ", control-predecessors={");
    for (int32_t i = 0; i < a->control_predecessors.n; i++) {
        int64_t k = a->control_predecessors.v[i];
        if (i)
            put(b, ", ");
        put_name(b, c && k >= 0 && k < c->ninstr ? c->instr[k].name : "?");
    }
    put(b, "}");
}

static void put_backend(Buf *b, const char *cfg)
{
    put(b, ", backend_config=");
    if (cfg[0] == '{' || cfg[0] == '"')
        put(b, cfg);
    else
        put_quoted(b, cfg);
}

/* ------------------------------------------------------------------ */
/* attributes, as the tables of hlo_attrs.def say                      */
/* ------------------------------------------------------------------ */

/* Is SPECIAL attribute `id` of ins set? Those an op prints only when set
 * say so here; the others are printed always by the ops that take them. */
static bool special_set(const IrInstr *ins, IrAttrId id)
{
    const IrAttrs *a = &ins->a;
    switch (id) {
    case A_SHARDING: return ins->sharding != NULL;
    case A_FRONTEND: return a->nfrontend > 0;
    case A_CONTROL: return a->control_predecessors.n > 0;
    case A_BACKEND: return a->backend_config != NULL;
    case A_WINDOW: return a->window.rank > 0;
    case A_DIM_LABELS: return a->conv.present;
    case A_PRECISION: return a->precision_config && *a->precision_config;
    case A_ALGORITHM: return (ins->op == OP_RNG_BIT_GENERATOR ? a->rng_algorithm : a->algorithm) != NULL;
    case A_CMP_TYPE: return a->cmp_type != CMPT_DEFAULT;
    case A_SLICE_SIZES: return ins->op == OP_GATHER || a->permute_slice_sizes != NULL;
    case A_OPERAND_LAYOUTS: return a->noperand_layouts > 0 || a->operand_layout_constraints;
    case A_OUTFEED_SHAPE: return a->has_outfeed_shape;
    case A_ASYNC_THREAD: return a->async_execution_thread != NULL;
    default: return true;
    }
}

/* The value of SPECIAL attribute `id`, with its ", name=". `c` names the
 * control predecessors. */
static void put_special(Buf *b, const IrComputation *c, const IrInstr *ins, IrAttrId id)
{
    const IrAttrs *a = &ins->a;
    switch (id) {
    case A_SHARDING: put_sharding(b, ins->sharding); break;
    case A_FRONTEND: put_frontend(b, a); break;
    case A_CONTROL: put_control(b, c, a); break;
    case A_BACKEND: put_backend(b, a->backend_config); break;
    case A_SLICE: put_slice(b, a); break;
    case A_PADDING: put_padding(b, a); break;
    case A_WINDOW: put_window(b, &a->window); break;
    case A_DIM_LABELS: put_dim_labels(b, &a->conv); break;
    case A_PRECISION: put_precision(b, a->precision_config); break;
    case A_ALGORITHM:
        putf(b, ", algorithm=%s", ins->op == OP_RNG_BIT_GENERATOR ? a->rng_algorithm : a->algorithm);
        break;
    case A_DIRECTION: putf(b, ", direction=%s", cmp_dir_name(a->direction)); break;
    case A_CMP_TYPE: putf(b, ", type=%s", cmp_type_name(a->cmp_type)); break;
    case A_INDEX_VECTOR_DIM:
        putf(b, ", index_vector_dim=%lld",
             (long long)(ins->op == OP_GATHER ? a->gather.index_vector_dim : a->scatter.index_vector_dim));
        break;
    case A_SLICE_SIZES:
        if (ins->op == OP_GATHER)
            put_attr_list(b, "slice_sizes", &a->slice_sizes);
        else /* collective-permute's in-place form, raw */
            putf(b, ", slice_sizes=%s", a->permute_slice_sizes);
        break;
    case A_REPLICA_GROUPS: put_replica_groups(b, &a->replica_groups); break;
    case A_SOURCE_TARGET: put_pairs(b, a); break;
    case A_OPERAND_LAYOUTS: put_layouts(b, a); break;
    case A_OUTFEED_SHAPE:
        put(b, ", outfeed_shape=");
        put_shape(b, &a->outfeed_shape, true);
        break;
    case A_ASYNC_THREAD: putf(b, ", async_execution_thread=%s", a->async_execution_thread); break;
    /* %.9g: enough digits that the float reads back to the same value */
    case A_EPSILON: putf(b, ", epsilon=%.9g", (double)a->epsilon); break;
    default: break;
    }
}

/* The IrAttrs member of a generic form (ops.c checks its type). */
static const void *attr_field(const IrAttrs *a, const IrAttrInfo *ai)
{
    return (const char *)a + ai->field;
}

/* Is attribute `id` of ins set, for a use printed only then? A HAS flag
 * decides when there is one (a list is also set when non-empty, except for
 * an N use). Callees and kept attributes are printed elsewhere. */
static bool attr_set(const IrInstr *ins, IrAttrId id, IrAttrMode mode)
{
    const IrAttrInfo *ai = ir_attr_info(id);
    const void *f = attr_field(&ins->a, ai);
    bool has = ai->has_flag && *(const bool *)((const char *)&ins->a + ai->has);
    switch (ai->form) {
    case IR_AF_INT: return ai->has_flag ? has : *(const int64_t *)f != 0;
    case IR_AF_COUNT: return *(const int64_t *)f > 1;
    case IR_AF_INTS: return ((const IrI64List *)f)->n > 0 || (mode == IR_AM_SET && has);
    case IR_AF_BOOL: return ai->has_flag ? has : *(const bool *)f;
    case IR_AF_STR: return *(const char *const *)f && **(const char *const *)f;
    case IR_AF_WORD: case IR_AF_RAW: case IR_AF_INNER: return *(const char *const *)f != NULL;
    case IR_AF_SPECIAL: return special_set(ins, id);
    default: return false;
    }
}

/* ", name=VALUE" of attribute `id`, as its form prints it. */
static void put_attr(Buf *b, const IrComputation *c, const IrInstr *ins, IrAttrId id)
{
    const IrAttrInfo *ai = ir_attr_info(id);
    const void *f = attr_field(&ins->a, ai);
    const char *s = NULL;
    switch (ai->form) {
    case IR_AF_INT: case IR_AF_COUNT:
        putf(b, ", %s=", ai->name);
        put_i64(b, *(const int64_t *)f);
        break;
    case IR_AF_INTS: put_attr_list(b, ai->name, f); break;
    case IR_AF_BOOL: put_bool_attr(b, ai->name, *(const bool *)f); break;
    case IR_AF_STR:
        s = *(const char *const *)f;
        putf(b, ", %s=", ai->name);
        put_quoted(b, s ? s : "");
        break;
    case IR_AF_WORD: /* an unset word printed always: the first, XLA's default */
        s = *(const char *const *)f;
        putf(b, ", %s=%s", ai->name, s ? s : ai->words->w[0]);
        break;
    case IR_AF_RAW: case IR_AF_INNER: put_raw_braced(b, ai->name, *(const char *const *)f); break;
    case IR_AF_SPECIAL: put_special(b, c, ins, id); break;
    default: break;
    }
}

/* The attributes of a use list (ir_op_attrs, ir_attr_generic) in order. */
static void put_uses(Buf *b, const IrComputation *c, const IrInstr *ins, const IrAttrUse *u)
{
    for (; u->id != A_COUNT; u++) {
        if (u->mode == IR_AM_READ)
            continue;
        if (u->mode != IR_AM_ALWAYS && !attr_set(ins, u->id, u->mode))
            continue;
        put_attr(b, c, ins, u->id);
    }
}

/* The opcode's own attributes (XLA's ExtraAttributesToStringImpl). */
static void put_op_attrs(Buf *b, const IrComputation *c, const IrInstr *ins)
{
    put_uses(b, c, ins, ir_op_attrs(ins->op));
}

/* ------------------------------------------------------------------ */
/* called computations and the generic attributes                      */
/* ------------------------------------------------------------------ */

static const char *comp_name(const IrModule *m, int32_t ci)
{
    return ci >= 0 && ci < m->ncomp ? m->comp[ci]->name : "?";
}

static void put_called_list(Buf *b, const IrModule *m, const IrInstr *ins, const char *key)
{
    putf(b, ", %s={", key);
    for (int32_t k = 0; k < ins->ncalled; k++) {
        if (k)
            put(b, ", ");
        put_name(b, comp_name(m, ins->called[k]));
    }
    put(b, "}");
}

static bool pred_selector(const IrComputation *c, const IrInstr *ins)
{
    if (ins->nopnd < 1 || ins->opnd[0] < 0 || ins->opnd[0] >= c->ninstr)
        return false;
    return c->instr[ins->opnd[0]].shape.type == IR_PRED;
}

static void put_callees(Buf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins);

/* A sugared `OP-start` prints the attributes and callees of the op its
 * computation wraps (the computation itself is not printed). */
static void put_wrapped(Buf *b, const IrModule *m, const IrInstr *ins)
{
    if (ins->ncalled != 1 || ins->called[0] < 0 || ins->called[0] >= m->ncomp)
        return;
    const IrComputation *w = m->comp[ins->called[0]];
    if (!w->async_wrapper || w->root < 0 || w->root >= w->ninstr)
        return;
    put_op_attrs(b, w, &w->instr[w->root]);
    put_callees(b, m, w, &w->instr[w->root]);
}

static void put_callees(Buf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (ins->ncalled == 0)
        return;
    switch (ins->op) {
    case OP_WHILE:
        put(b, ", condition=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->ncalled > 1) {
            put(b, ", body=");
            put_name(b, comp_name(m, ins->called[1]));
        }
        break;
    case OP_SELECT_AND_SCATTER:
        put(b, ", select=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->ncalled > 1) {
            put(b, ", scatter=");
            put_name(b, comp_name(m, ins->called[1]));
        }
        break;
    case OP_CONDITIONAL:
        /* XLA's parser wants the true/false form for a pred selector. */
        if (ins->ncalled == 2 && (ins->cond_pred_form || pred_selector(c, ins))) {
            put(b, ", true_computation=");
            put_name(b, comp_name(m, ins->called[0]));
            put(b, ", false_computation=");
            put_name(b, comp_name(m, ins->called[1]));
        } else {
            put_called_list(b, m, ins, "branch_computations");
        }
        break;
    case OP_CUSTOM_CALL:
        if (ins->custom_to_apply && ins->ncalled == 1) {
            put(b, ", to_apply=");
            put_name(b, comp_name(m, ins->called[0]));
        } else {
            put_called_list(b, m, ins, "called_computations");
        }
        break;
    case OP_ASYNC_START: case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
        if (ins->a.async_sugar) /* the wrapped op's callees, as XLA prints them */
            put_wrapped(b, m, ins);
        else
            put(b, ", calls="), put_name(b, comp_name(m, ins->called[0]));
        break;
    case OP_FUSION:
        put(b, ", calls=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->a.output_to_operand_aliasing)
            putf(b, ", output_to_operand_aliasing=%s", ins->a.output_to_operand_aliasing);
        break;
    default:
        put(b, ", to_apply=");
        put_name(b, comp_name(m, ins->called[0]));
        break;
    }
}

/* sharding, frontend_attributes, statistics, control-predecessors,
 * metadata, backend_config, origin (the generic uses), then the kept
 * attributes as they were written. */
static void put_generic_attrs(Buf *b, const IrComputation *c, const IrInstr *ins)
{
    const IrAttrs *a = &ins->a;
    put_uses(b, c, ins, ir_attr_generic());
    for (int32_t i = 0; i < a->nkept; i++)
        putf(b, ", %s=%s", a->kept[i].key, a->kept[i].value);
}

/* ------------------------------------------------------------------ */
/* instructions, computations, the module                              */
/* ------------------------------------------------------------------ */

static void put_operands(Buf *b, const IrComputation *c, const IrInstr *ins)
{
    put(b, "(");
    if (ins->op == OP_PARAMETER) {
        put_i64(b, ins->a.parameter_number);
    } else if (ins->op == OP_CONSTANT) {
        char *lit = ir_literal_str(&ins->shape, ins->a.literal);
        if (!lit) {
            b->oom = true;
            return;
        }
        put(b, lit);
        ts_free(lit);
    } else {
        for (int32_t i = 0; i < ins->nopnd; i++) {
            if (i)
                put(b, ", ");
            int32_t k = ins->opnd[i];
            put_name(b, k >= 0 && k < c->ninstr ? c->instr[k].name : "?");
        }
    }
    put(b, ")");
}

static void put_instr(Buf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (c->root >= 0 && c->root < c->ninstr && &c->instr[c->root] == ins)
        put(b, "ROOT ");
    put_name(b, ins->name);
    put(b, " = ");
    put_shape(b, &ins->shape, true);
    put(b, " ");
    put(b, ir_op_name(ins->a.async_sugar ? ins->a.async_wrapped_op : ins->op));
    if (ins->a.async_sugar)
        put(b, ins->op == OP_ASYNC_START ? "-start" : ins->op == OP_ASYNC_UPDATE ? "-update" : "-done");
    put_operands(b, c, ins);
    put_op_attrs(b, c, ins);
    put_callees(b, m, c, ins);
    put_generic_attrs(b, c, ins);
}

/* One instruction line of c (with ROOT when it is c's root), without
 * indentation or newline: a ts_malloc string, or NULL on OOM. */
char *ir_print_instr(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    Buf b = {0};
    put_instr(&b, m, c, ins);
    return finish(&b);
}

/* "name (p0: f32[2], p1: s32[]) -> f32[2]" when the computation was given
 * a signature. */
static void put_signature(Buf *b, const IrComputation *c)
{
    put(b, " (");
    for (int32_t i = 0, k = 0; i < c->nparam; i++) {
        int32_t pi = c->param[i];
        if (pi < 0 || pi >= c->ninstr)
            continue;
        if (k++)
            put(b, ", ");
        put_name(b, c->instr[pi].name);
        put(b, ": ");
        put_shape(b, &c->instr[pi].shape, false);
    }
    put(b, ") -> ");
    if (c->root >= 0 && c->root < c->ninstr)
        put_shape(b, &c->instr[c->root].shape, false);
    else
        put(b, "()");
}

static void put_computation(Buf *b, const IrModule *m, const IrComputation *c, bool entry)
{
    if (entry)
        put(b, "ENTRY ");
    put_name(b, c->name);
    if (c->has_signature)
        put_signature(b, c);
    put(b, " {\n");
    int32_t *order = NULL;
    IrDiag d = {0};
    if (ir_topo_order(m, c, &order, &d) == IR_ENOMEM)
        b->oom = true;
    ir_diag_clear(&d);
    for (int32_t i = 0; i < c->ninstr && !b->oom; i++) {
        put(b, "  ");
        put_instr(b, m, c, &c->instr[order ? order[i] : i]);
        put(b, "\n");
    }
    ts_free(order);
    put(b, "}");
    if (c->execution_thread) {
        put(b, ", execution_thread=");
        put_quoted(b, c->execution_thread);
    }
    put(b, "\n");
}

/* Computations with their callees first: a depth-first walk of the call
 * graph from each computation in index order, emitting on the way back.
 * A module already in that order prints in its own order. Iterative, with
 * a colour per computation so recursion (invalid, but printable) ends. */
static int32_t *computation_order(const IrModule *m)
{
    int32_t n = m->ncomp;
    int32_t *out = ts_malloc((size_t)(n ? n : 1) * sizeof *out);
    int32_t *stc = ts_malloc((size_t)(n ? n : 1) * sizeof *stc);
    int32_t *sti = ts_malloc((size_t)(n ? n : 1) * sizeof *sti);
    int32_t *stk = ts_malloc((size_t)(n ? n : 1) * sizeof *stk);
    uint8_t *seen = ts_calloc((size_t)(n ? n : 1), 1);
    if (!out || !stc || !sti || !stk || !seen) {
        ts_free(out);
        out = NULL;
        goto done;
    }
    int32_t k = 0;
    for (int32_t s = 0; s < n; s++) {
        if (seen[s])
            continue;
        int32_t top = 0;
        stc[0] = s;
        sti[0] = stk[0] = 0;
        seen[s] = 1;
        while (top >= 0) {
            const IrComputation *c = m->comp[stc[top]];
            if (sti[top] >= c->ninstr) {
                out[k++] = stc[top--];
                continue;
            }
            const IrInstr *ins = &c->instr[sti[top]];
            if (stk[top] >= ins->ncalled) {
                sti[top]++;
                stk[top] = 0;
                continue;
            }
            int32_t t = ins->called[stk[top]++];
            if (t >= 0 && t < n && !seen[t]) {
                seen[t] = 1;
                top++;
                stc[top] = t;
                sti[top] = stk[top] = 0;
            }
        }
    }
done:
    ts_free(stc);
    ts_free(sti);
    ts_free(stk);
    ts_free(seen);
    return out;
}

static void put_shape_index(Buf *b, const IrShapeIndex *ix)
{
    put_list(b, ix);
}

/* input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, must-alias) } */
static void put_aliases(Buf *b, const IrModule *m)
{
    put(b, ", input_output_alias={ ");
    for (int32_t i = 0; i < m->nalias; i++) {
        const IrAlias *al = &m->alias[i];
        if (i)
            put(b, ", ");
        put_shape_index(b, &al->output_index);
        putf(b, ": (%lld, ", (long long)al->param_number);
        put_shape_index(b, &al->param_index);
        put(b, al->must_alias ? ", must-alias)" : ", may-alias)"); /* XLA always names the kind */
    }
    put(b, " }");
}

static void put_header(Buf *b, const IrModule *m)
{
    put(b, "HloModule ");
    put_name(b, m->name);
    if (m->is_scheduled)
        put(b, ", is_scheduled=true");
    if (m->nalias > 0)
        put_aliases(b, m);
    if (m->entry_computation_layout) {
        put(b, ", entry_computation_layout={");
        put(b, m->entry_computation_layout);
        put(b, "}");
    }
    if (m->replica_count > 0)
        putf(b, ", replica_count=%lld", (long long)m->replica_count);
    if (m->num_partitions > 0)
        putf(b, ", num_partitions=%lld", (long long)m->num_partitions);
    for (int32_t i = 0; i < m->nheader_attr; i++)
        putf(b, ", %s=%s", m->header_attr[i].key,
             m->header_attr[i].value ? m->header_attr[i].value : "");
    put(b, "\n");
    if (m->stack_frames) {
        put(b, "\n");
        put(b, m->stack_frames);
        put(b, "\n");
    }
}

/* The whole module as HLO text: a ts_malloc string the caller frees, or
 * NULL when memory runs out. Prints any module, valid or not (a cycle
 * prints in definition order). */
/* Room for the whole text at once: XLA's lines average well under 128
 * bytes. A buffer that grows by realloc is moved page by page to new
 * addresses, and on the virtual machines tessel runs on, touching a moved
 * page again costs about as much as a page fault: megabytes of text read
 * back (written to a file) pay that per page. Advised for huge pages. */
static void reserve_text(Buf *b, const IrModule *m, size_t tail)
{
    size_t n = 4096 + tail;
    for (int32_t i = 0; i < m->ncomp; i++)
        n += 128 * (size_t)m->comp[i]->ninstr;
    b->s = ts_malloc(n);
    if (!b->s) {
        b->oom = true;
        return;
    }
    ir_hint_huge(b->s, n);
    b->s[0] = 0;
    b->cap = n;
}

char *ir_print_module_then(const IrModule *m, const char *tail)
{
    Buf b = {0};
    reserve_text(&b, m, tail ? strlen(tail) : 0);
    put_header(&b, m);
    int32_t *order = computation_order(m);
    if (!order) {
        ts_free(b.s);
        return NULL;
    }
    for (int32_t i = 0; i < m->ncomp && !b.oom; i++) {
        /* m->entry decides; is_entry only when the module names none */
        const IrComputation *c = m->comp[order[i]];
        if (c->async_wrapper)
            continue; /* printed inside its sugared OP-start */
        put(&b, "\n");
        put_computation(&b, m, c, m->entry >= 0 ? order[i] == m->entry : c->is_entry);
    }
    ts_free(order);
    if (tail)
        put(&b, tail);
    return finish(&b);
}

char *ir_print_module(const IrModule *m)
{
    return ir_print_module_then(m, NULL);
}
