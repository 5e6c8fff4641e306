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

/* Decimal without printf: this runs for every dimension of every shape
 * and every number of every instruction. Same text as "%lld". */
static void put_i64(IrStrBuf *b, int64_t v)
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
    ir_sb_putn(b, p, (size_t)(e - p));
}

/* "{1,2,3}" as XLA joins dimension lists. */
static void put_list(IrStrBuf *b, const IrI64List *l)
{
    ir_sb_puts(b, "{");
    for (int32_t i = 0; i < l->n; i++) {
        if (i)
            ir_sb_puts(b, ",");
        put_i64(b, l->v[i]);
    }
    ir_sb_puts(b, "}");
}

/* The text of ir_shape_str (shape.c), written straight into b:
 * "f32[8,16]{1,0}", tuples "(f32[2], s32[])". */
static void put_shape(IrStrBuf *b, const IrShape *s, bool with_layout)
{
    if (s->type == IR_TUPLE) {
        ir_sb_putn(b, "(", 1);
        for (int32_t i = 0; i < s->ntuple; i++) {
            if (i)
                ir_sb_putn(b, ", ", 2);
            put_shape(b, &s->tuple[i], with_layout);
        }
        ir_sb_putn(b, ")", 1);
        return;
    }
    if (s->buffer)
        ir_sb_putn(b, "b(", 2);
    ir_sb_puts(b, ir_type_name(s->type));
    ir_sb_putn(b, "[", 1);
    for (int32_t i = 0; i < s->rank; i++) {
        if (i)
            ir_sb_putn(b, ",", 1);
        if (ir_shape_dim_dynamic(s, i)) {
            if (s->dims[i] == IR_DIM_UNBOUNDED) {
                ir_sb_putn(b, "?", 1);
                continue;
            }
            ir_sb_putn(b, "<=", 2);
        }
        put_i64(b, s->dims[i]);
    }
    ir_sb_putn(b, "]", 1);
    if (with_layout && s->has_layout && s->type != IR_TOKEN) {
        ir_sb_putn(b, "{", 1);
        for (int32_t i = 0; i < s->rank && s->minor_to_major; i++) {
            if (i)
                ir_sb_putn(b, ",", 1);
            put_i64(b, s->minor_to_major[i]);
        }
        if (s->layout_tail) {
            ir_sb_putn(b, ":", 1);
            ir_sb_puts(b, s->layout_tail);
        }
        ir_sb_putn(b, "}", 1);
    }
    if (s->buffer)
        ir_sb_putn(b, ")", 1);
}

/* A C-escaped string in double quotes, as XLA's CEscape writes it. */
static void put_quoted(IrStrBuf *b, const char *s)
{
    ir_sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': ir_sb_puts(b, "\\\""); break;
        case '\\': ir_sb_puts(b, "\\\\"); break;
        case '\n': ir_sb_puts(b, "\\n"); break;
        case '\t': ir_sb_puts(b, "\\t"); break;
        case '\r': ir_sb_puts(b, "\\r"); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                ir_sb_printf(b, "\\%03o", *p);
            else
                ir_sb_putn(b, (const char *)p, 1);
        }
    }
    ir_sb_puts(b, "\"");
}

/* Attribute text kept as it was written (metadata, backend_config,
 * kept attributes), with the raw line breaks of its string literals
 * escaped (and those between tokens made spaces): a printed module has
 * one instruction a line, so no line of it can be taken for one of the
 * `// ` lines a plan file appends (a model whose op_name held a newline
 * and "// TesselEnd" gave a plan that tessel then refused to load). */
static void put_verbatim(IrStrBuf *b, const char *s)
{
    bool in_str = false;
    const char *run = s;
    for (const char *p = s; *p; p++) {
        if (in_str && *p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p == '"')
            in_str = !in_str;
        if (*p != '\n' && *p != '\r')
            continue;
        ir_sb_putn(b, run, (size_t)(p - run));
        ir_sb_puts(b, !in_str ? " " : *p == '\n' ? "\\n" : "\\r");
        run = p + 1;
    }
    ir_sb_puts(b, run);
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

static void put_name(IrStrBuf *b, const char *s)
{
    if (!bare_ok(s))
        ir_sb_puts(b, "%");
    ir_sb_puts(b, s ? s : "");
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
static void put_float(IrStrBuf *b, double v, bool is_f64)
{
    if (isnan(v))
        ir_sb_puts(b, signbit(v) ? "-nan" : "nan"); /* as XLA prints it; the parser keeps the sign */
    else if (isinf(v))
        ir_sb_puts(b, v < 0 ? "-inf" : "inf");
    else
        ir_sb_printf(b, is_f64 ? "%.17g" : "%.9g", v);
}

/* One element of type t at p. */
static void put_element(IrStrBuf *b, IrType t, const uint8_t *p)
{
    union {
        int8_t i8; int16_t i16; int32_t i32; int64_t i64;
        uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
        float f32; double f64; float c64[2]; double c128[2];
    } u;
    memcpy(&u, p, ir_type_size(t));
    switch (t) {
    case IR_PRED: ir_sb_puts(b, u.u8 ? "true" : "false"); break;
    case IR_S8: put_i64(b, u.i8); break;
    case IR_S16: put_i64(b, u.i16); break;
    case IR_S32: put_i64(b, u.i32); break;
    case IR_S64: put_i64(b, u.i64); break;
    case IR_U8: ir_sb_printf(b, "%u", (unsigned)u.u8); break;
    case IR_U16: ir_sb_printf(b, "%u", (unsigned)u.u16); break;
    case IR_U32: ir_sb_printf(b, "%lu", (unsigned long)u.u32); break;
    case IR_U64: ir_sb_printf(b, "%llu", (unsigned long long)u.u64); break;
    case IR_F16: put_float(b, half_to_float(u.u16), false); break;
    case IR_BF16: put_float(b, bf16_to_float(u.u16), false); break;
    case IR_F32: put_float(b, u.f32, false); break;
    case IR_F64: put_float(b, u.f64, true); break;
    case IR_C64:
        ir_sb_puts(b, "(");
        put_float(b, u.c64[0], false);
        ir_sb_puts(b, ", ");
        put_float(b, u.c64[1], false);
        ir_sb_puts(b, ")");
        break;
    case IR_C128:
        ir_sb_puts(b, "(");
        put_float(b, u.c128[0], true);
        ir_sb_puts(b, ", ");
        put_float(b, u.c128[1], true);
        ir_sb_puts(b, ")");
        break;
    default:
        /* XLA prints s2/s4 and u2/u4 as integers and the f8/f4 kinds as
         * the decimal of their value, which %.17g gives exactly (every f8
         * and f4 value is a short binary fraction) and reads back to the
         * same code. */
        if (ir_type_is_signed_int(t))
            put_i64(b, u.i8);
        else if (ir_type_is_unsigned_int(t))
            ir_sb_printf(b, "%u", (unsigned)u.u8);
        else if (ir_type_is_lowp_float(t))
            put_float(b, ir_lowp_to_double(t, u.u8), true);
        break;
    }
}

/* Elements of dimension `dim` onwards, row-major, from *p:
 *   rank 1: {1, 2, 3}        rank 2: { {1, 2}, {3, 4} }
 * (the outer levels put a space inside their braces, as in XLA's one-line
 * form; an empty level is {}). */
static void put_array_level(IrStrBuf *b, const IrShape *s, int32_t dim, const uint8_t **p)
{
    size_t es = ir_type_size(s->type);
    int64_t n = s->dims[dim];
    if (dim == s->rank - 1) {
        ir_sb_puts(b, "{");
        for (int64_t i = 0; i < n && !b->oom; i++) {
            if (i)
                ir_sb_puts(b, ", ");
            put_element(b, s->type, *p);
            *p += es;
        }
        ir_sb_puts(b, "}");
        return;
    }
    if (n == 0) {
        ir_sb_puts(b, "{}");
        return;
    }
    ir_sb_puts(b, "{ ");
    for (int64_t i = 0; i < n && !b->oom; i++) {
        if (i)
            ir_sb_puts(b, ", ");
        put_array_level(b, s, dim + 1, p);
    }
    ir_sb_puts(b, " }");
}

static void put_literal(IrStrBuf *b, const IrShape *s, const uint8_t **p)
{
    if (s->type == IR_TUPLE) {
        ir_sb_puts(b, "(");
        for (int32_t i = 0; i < s->ntuple; i++) {
            if (i)
                ir_sb_puts(b, ", ");
            put_literal(b, &s->tuple[i], p);
        }
        ir_sb_puts(b, ")");
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
    IrStrBuf b = {0};
    const uint8_t *p = data;
    if (!data && ir_shape_bytes(shape) > 0)
        ir_sb_puts(&b, "{...}");
    else
        put_literal(&b, shape, &p);
    return ir_sb_take(&b);
}

/* ------------------------------------------------------------------ */
/* attribute values                                                    */
/* ------------------------------------------------------------------ */

static void put_attr_list(IrStrBuf *b, const char *key, const IrI64List *l)
{
    ir_sb_printf(b, ", %s=", key);
    put_list(b, l);
}

static int64_t one_if_zero(int64_t v)
{
    return v == 0 ? 1 : v;
}

/* window_util::ToString: size always; the rest only when not default.
 * "size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=0x1" */
static void put_window(IrStrBuf *b, const IrWindow *w)
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
    ir_sb_puts(b, ", window={size=");
    for (int32_t i = 0; i < w->rank; i++)
        ir_sb_printf(b, i ? "x%lld" : "%lld", (long long)w->dim[i].size);
    if (stride) {
        ir_sb_puts(b, " stride=");
        for (int32_t i = 0; i < w->rank; i++)
            ir_sb_printf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].stride));
    }
    if (pad) {
        ir_sb_puts(b, " pad=");
        for (int32_t i = 0; i < w->rank; i++)
            ir_sb_printf(b, i ? "x%lld_%lld" : "%lld_%lld", (long long)w->dim[i].pad_lo,
                 (long long)w->dim[i].pad_hi);
    }
    if (ld) {
        ir_sb_puts(b, " lhs_dilate=");
        for (int32_t i = 0; i < w->rank; i++)
            ir_sb_printf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].lhs_dilate));
    }
    if (rd) {
        ir_sb_puts(b, " rhs_dilate=");
        for (int32_t i = 0; i < w->rank; i++)
            ir_sb_printf(b, i ? "x%lld" : "%lld", (long long)one_if_zero(w->dim[i].rhs_dilate));
    }
    if (rev) {
        ir_sb_puts(b, " rhs_reversal=");
        for (int32_t i = 0; i < w->rank; i++)
            ir_sb_printf(b, i ? "x%d" : "%d", w->dim[i].reversal ? 1 : 0);
    }
    ir_sb_puts(b, "}");
}

/* One side of dim_labels: 'b'/'f' (or 'i'/'o'), spatial digits in order. */
static void put_labels(IrStrBuf *b, int32_t nsp, int64_t d0, char c0, int64_t d1, char c1,
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
    ir_sb_puts(b, s);
}

static void put_dim_labels(IrStrBuf *b, const IrConvDnums *c)
{
    ir_sb_puts(b, ", dim_labels=");
    put_labels(b, c->nspatial, c->in_batch, 'b', c->in_feature, 'f', c->in_spatial);
    ir_sb_puts(b, "_");
    put_labels(b, c->nspatial, c->k_in_feature, 'i', c->k_out_feature, 'o', c->k_spatial);
    ir_sb_puts(b, "->");
    put_labels(b, c->nspatial, c->out_batch, 'b', c->out_feature, 'f', c->out_spatial);
}

/* operand_precision={HIGH,DEFAULT}: the raw text may be kept with or
 * without the attribute name and braces. */
static void put_precision(IrStrBuf *b, const char *raw)
{
    if (!raw || !*raw)
        return;
    if (strncmp(raw, "operand_precision", 17) == 0) {
        ir_sb_puts(b, ", ");
        ir_sb_puts(b, raw);
    } else if (raw[0] == '{') {
        ir_sb_puts(b, ", operand_precision=");
        ir_sb_puts(b, raw);
    } else {
        ir_sb_puts(b, ", operand_precision={");
        ir_sb_puts(b, raw);
        ir_sb_puts(b, "}");
    }
}

static void put_padding(IrStrBuf *b, const IrAttrs *a)
{
    bool interior = false;
    for (int32_t i = 0; i < a->x->pad_interior.n; i++)
        interior |= a->x->pad_interior.v[i] != 0;
    ir_sb_puts(b, ", padding=");
    for (int32_t i = 0; i < a->x->pad_lo.n; i++) {
        if (i)
            ir_sb_puts(b, "x");
        ir_sb_printf(b, "%lld_%lld", (long long)a->x->pad_lo.v[i],
             (long long)(i < a->x->pad_hi.n ? a->x->pad_hi.v[i] : 0));
        if (interior)
            ir_sb_printf(b, "_%lld", (long long)(i < a->x->pad_interior.n ? a->x->pad_interior.v[i] : 0));
    }
}

/* slice={[0:4], [2:8]}; strides are shown only when one is not 1. */
static void put_slice(IrStrBuf *b, const IrAttrs *a)
{
    bool strides = false;
    for (int32_t i = 0; i < a->x->slice_stride.n; i++)
        strides |= a->x->slice_stride.v[i] != 1;
    ir_sb_puts(b, ", slice={");
    for (int32_t i = 0; i < a->x->slice_start.n; i++) {
        if (i)
            ir_sb_puts(b, ", ");
        ir_sb_printf(b, "[%lld:%lld", (long long)a->x->slice_start.v[i],
             (long long)(i < a->x->slice_limit.n ? a->x->slice_limit.v[i] : 0));
        if (strides)
            ir_sb_printf(b, ":%lld", (long long)(i < a->x->slice_stride.n ? a->x->slice_stride.v[i] : 1));
        ir_sb_puts(b, "]");
    }
    ir_sb_puts(b, "}");
}

/* replica_groups={{0,1},{2,3}}, or the iota form [2,2]<=[4] and
 * [2,2]<=[2,2]T(1,0) as it was written, or the mesh-axes form
 * mesh['a'=2,'b'=4] {'b'} as XLA prints it. */
static void put_replica_groups(IrStrBuf *b, const IrReplicaGroups *g)
{
    ir_sb_puts(b, ", replica_groups=");
    if (g->mesh) {
        ir_sb_puts(b, g->mesh);
        return;
    }
    if (g->iota && g->iota_shape.n > 0) {
        ir_sb_puts(b, "[");
        for (int32_t i = 0; i < g->iota_shape.n; i++)
            ir_sb_printf(b, i ? ",%lld" : "%lld", (long long)g->iota_shape.v[i]);
        ir_sb_puts(b, "]<=[");
        for (int32_t i = 0; i < g->iota_reshape.n; i++)
            ir_sb_printf(b, i ? ",%lld" : "%lld", (long long)g->iota_reshape.v[i]);
        ir_sb_puts(b, "]");
        if (g->niota_perm > 0 && g->iota_perm) {
            ir_sb_puts(b, "T(");
            for (int32_t i = 0; i < g->niota_perm; i++)
                ir_sb_printf(b, i ? ",%d" : "%d", (int)g->iota_perm[i]);
            ir_sb_puts(b, ")");
        }
        return;
    }
    ir_sb_puts(b, "{");
    for (int32_t i = 0; i < g->ngroups; i++) {
        if (i)
            ir_sb_puts(b, ",");
        ir_sb_puts(b, "{");
        for (int32_t k = 0; k < g->group_size[i]; k++) {
            if (k)
                ir_sb_putn(b, ",", 1);
            put_i64(b, g->groups[i][k]);
        }
        ir_sb_puts(b, "}");
    }
    ir_sb_puts(b, "}");
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

static void put_bool_attr(IrStrBuf *b, const char *key, bool v)
{
    ir_sb_printf(b, ", %s=%s", key, v ? "true" : "false");
}

/* source_target_pairs={{0,1},{1,0}} */
static void put_pairs(IrStrBuf *b, const IrAttrs *a)
{
    ir_sb_puts(b, ", source_target_pairs={");
    for (int32_t i = 0; i + 1 < a->x->source_target_pairs.n; i += 2)
        ir_sb_printf(b, i ? ",{%lld,%lld}" : "{%lld,%lld}", (long long)a->x->source_target_pairs.v[i],
             (long long)a->x->source_target_pairs.v[i + 1]);
    ir_sb_puts(b, "}");
}

/* operand_layout_constraints={f32[2]{0}, s32[]} */
static void put_layouts(IrStrBuf *b, const IrAttrs *a)
{
    ir_sb_puts(b, ", operand_layout_constraints={");
    for (int32_t i = 0; i < a->x->noperand_layouts; i++) {
        if (i)
            ir_sb_puts(b, ", ");
        put_shape(b, &a->x->operand_layout_constraints[i], true);
    }
    ir_sb_puts(b, "}");
}

static int cmp_kv(const void *a, const void *b)
{
    const IrKeyValue *x = a, *y = b;
    int r = strcmp(x->key, y->key);
    return r ? r : strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

/* frontend_attributes={a="1",b="x"}, sorted by key as XLA prints them;
 * values kept as raw {json} print as they were. */
static void put_frontend(IrStrBuf *b, const IrAttrs *a)
{
    IrKeyValue *kv = ts_malloc((size_t)a->nfrontend * sizeof *kv);
    if (!kv) {
        b->oom = true;
        return;
    }
    memcpy(kv, a->frontend, (size_t)a->nfrontend * sizeof *kv);
    qsort(kv, (size_t)a->nfrontend, sizeof *kv, cmp_kv);
    ir_sb_puts(b, ", frontend_attributes={");
    for (int32_t i = 0; i < a->nfrontend; i++) {
        if (i)
            ir_sb_puts(b, ",");
        if (bare_ok(kv[i].key))
            ir_sb_puts(b, kv[i].key);
        else
            put_quoted(b, kv[i].key);
        ir_sb_puts(b, "=");
        const char *v = kv[i].value ? kv[i].value : "";
        size_t n = strlen(v);
        if (n >= 2 && v[0] == '{' && v[n - 1] == '}')
            ir_sb_puts(b, v); /* a {json} value kept raw */
        else
            put_quoted(b, v);
    }
    ir_sb_puts(b, "}");
    ts_free(kv);
}

/* A raw attribute kept as text: printed as key=TEXT, with braces added
 * when the text was stored without them. */
static void put_raw_braced(IrStrBuf *b, const char *key, const char *raw)
{
    if (!raw)
        return;
    ir_sb_printf(b, ", %s=", key);
    if (raw[0] == '{') {
        put_verbatim(b, raw);
    } else {
        ir_sb_puts(b, "{");
        put_verbatim(b, raw);
        ir_sb_puts(b, "}");
    }
}

static void put_sharding(IrStrBuf *b, const IrSharding *sh)
{
    char *s = ir_sharding_str(sh);
    if (!s) {
        b->oom = true;
        return;
    }
    ir_sb_puts(b, ", sharding=");
    ir_sb_puts(b, s);
    ts_free(s);
}

static void put_control(IrStrBuf *b, const IrComputation *c, const IrAttrs *a)
{
    ir_sb_puts(b, ", control-predecessors={");
    for (int32_t i = 0; i < a->x->control_predecessors.n; i++) {
        int64_t k = a->x->control_predecessors.v[i];
        if (i)
            ir_sb_puts(b, ", ");
        put_name(b, c && k >= 0 && k < c->ninstr ? c->instr[k].name : "?");
    }
    ir_sb_puts(b, "}");
}

static void put_backend(IrStrBuf *b, const char *cfg)
{
    ir_sb_puts(b, ", backend_config=");
    if (cfg[0] == '{' || cfg[0] == '"')
        put_verbatim(b, cfg);
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
    case A_CONTROL: return a->x->control_predecessors.n > 0;
    case A_BACKEND: return a->x->backend_config != NULL;
    case A_WINDOW: return a->x->window.rank > 0;
    case A_DIM_LABELS: return a->x->conv.present;
    case A_PRECISION: return a->precision_config && *a->precision_config;
    case A_ALGORITHM: return (ins->op == OP_RNG_BIT_GENERATOR ? a->x->rng_algorithm : a->x->algorithm) != NULL;
    case A_CMP_TYPE: return a->cmp_type != CMPT_DEFAULT;
    case A_SLICE_SIZES: return ins->op == OP_GATHER || a->x->permute_slice_sizes != NULL;
    case A_OPERAND_LAYOUTS: return a->x->noperand_layouts > 0 || a->x->operand_layout_constraints;
    case A_OUTFEED_SHAPE: return a->x->has_outfeed_shape;
    case A_ASYNC_THREAD: return a->x->async_execution_thread != NULL;
    default: return true;
    }
}

/* The value of SPECIAL attribute `id`, with its ", name=". `c` names the
 * control predecessors. */
static void put_special(IrStrBuf *b, const IrComputation *c, const IrInstr *ins, IrAttrId id)
{
    const IrAttrs *a = &ins->a;
    switch (id) {
    case A_SHARDING: put_sharding(b, ins->sharding); break;
    case A_FRONTEND: put_frontend(b, a); break;
    case A_CONTROL: put_control(b, c, a); break;
    case A_BACKEND: put_backend(b, a->x->backend_config); break;
    case A_SLICE: put_slice(b, a); break;
    case A_PADDING: put_padding(b, a); break;
    case A_WINDOW: put_window(b, &a->x->window); break;
    case A_DIM_LABELS: put_dim_labels(b, &a->x->conv); break;
    case A_PRECISION: put_precision(b, a->precision_config); break;
    case A_ALGORITHM:
        ir_sb_printf(b, ", algorithm=%s", ins->op == OP_RNG_BIT_GENERATOR ? a->x->rng_algorithm : a->x->algorithm);
        break;
    case A_DIRECTION: ir_sb_printf(b, ", direction=%s", cmp_dir_name(a->direction)); break;
    case A_CMP_TYPE: ir_sb_printf(b, ", type=%s", cmp_type_name(a->cmp_type)); break;
    case A_INDEX_VECTOR_DIM:
        ir_sb_printf(b, ", index_vector_dim=%lld",
             (long long)(ins->op == OP_GATHER ? a->x->gather.index_vector_dim : a->x->scatter.index_vector_dim));
        break;
    case A_SLICE_SIZES:
        if (ins->op == OP_GATHER)
            put_attr_list(b, "slice_sizes", &a->x->slice_sizes);
        else /* collective-permute's in-place form, raw */
            ir_sb_printf(b, ", slice_sizes=%s", a->x->permute_slice_sizes);
        break;
    case A_REPLICA_GROUPS: put_replica_groups(b, &a->x->replica_groups); break;
    case A_SOURCE_TARGET: put_pairs(b, a); break;
    case A_OPERAND_LAYOUTS: put_layouts(b, a); break;
    case A_OUTFEED_SHAPE:
        ir_sb_puts(b, ", outfeed_shape=");
        put_shape(b, &a->x->outfeed_shape, true);
        break;
    case A_ASYNC_THREAD: ir_sb_printf(b, ", async_execution_thread=%s", a->x->async_execution_thread); break;
    /* %.9g: enough digits that the float reads back to the same value */
    case A_EPSILON: ir_sb_printf(b, ", epsilon=%.9g", (double)a->x->epsilon); break;
    default: break;
    }
}

/* Is attribute `id` of ins set, for a use printed only then? A HAS flag
 * decides when there is one (a list is also set when non-empty, except for
 * an N use). Callees and kept attributes are printed elsewhere. */
static bool attr_set(const IrInstr *ins, IrAttrId id, IrAttrMode mode)
{
    const IrAttrInfo *ai = ir_attr_info(id);
    const void *f = ir_attr_member(&ins->a, ai);
    bool has = ai->has_flag && ir_attr_has(&ins->a, ai);
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
static void put_attr(IrStrBuf *b, const IrComputation *c, const IrInstr *ins, IrAttrId id)
{
    const IrAttrInfo *ai = ir_attr_info(id);
    const void *f = ir_attr_member(&ins->a, ai);
    const char *s = NULL;
    switch (ai->form) {
    case IR_AF_INT: case IR_AF_COUNT:
        ir_sb_printf(b, ", %s=", ai->name);
        put_i64(b, *(const int64_t *)f);
        break;
    case IR_AF_INTS: put_attr_list(b, ai->name, f); break;
    case IR_AF_BOOL: put_bool_attr(b, ai->name, *(const bool *)f); break;
    case IR_AF_STR:
        s = *(const char *const *)f;
        ir_sb_printf(b, ", %s=", ai->name);
        put_quoted(b, s ? s : "");
        break;
    case IR_AF_WORD: /* an unset word printed always: the first, XLA's default */
        s = *(const char *const *)f;
        ir_sb_printf(b, ", %s=%s", ai->name, s ? s : ai->words->w[0]);
        break;
    case IR_AF_RAW: case IR_AF_INNER: put_raw_braced(b, ai->name, *(const char *const *)f); break;
    case IR_AF_SPECIAL: put_special(b, c, ins, id); break;
    default: break;
    }
}

/* The attributes of a use list (ir_op_attrs, ir_attr_generic) in order. */
static void put_uses(IrStrBuf *b, const IrComputation *c, const IrInstr *ins, const IrAttrUse *u)
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
static void put_op_attrs(IrStrBuf *b, const IrComputation *c, const IrInstr *ins)
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

static void put_called_list(IrStrBuf *b, const IrModule *m, const IrInstr *ins, const char *key)
{
    ir_sb_printf(b, ", %s={", key);
    for (int32_t k = 0; k < ins->ncalled; k++) {
        if (k)
            ir_sb_puts(b, ", ");
        put_name(b, comp_name(m, ins->called[k]));
    }
    ir_sb_puts(b, "}");
}

static bool pred_selector(const IrComputation *c, const IrInstr *ins)
{
    if (ins->nopnd < 1 || ins->opnd[0] < 0 || ins->opnd[0] >= c->ninstr)
        return false;
    return c->instr[ins->opnd[0]].shape.type == IR_PRED;
}

static void put_callees(IrStrBuf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins);

/* A sugared `OP-start` prints the attributes and callees of the op its
 * computation wraps (the computation itself is not printed). */
static void put_wrapped(IrStrBuf *b, const IrModule *m, const IrInstr *ins)
{
    if (ins->ncalled != 1 || ins->called[0] < 0 || ins->called[0] >= m->ncomp)
        return;
    const IrComputation *w = m->comp[ins->called[0]];
    if (!w->async_wrapper || w->root < 0 || w->root >= w->ninstr)
        return;
    put_op_attrs(b, w, &w->instr[w->root]);
    put_callees(b, m, w, &w->instr[w->root]);
}

static void put_callees(IrStrBuf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (ins->ncalled == 0)
        return;
    switch (ins->op) {
    case OP_WHILE:
        ir_sb_puts(b, ", condition=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->ncalled > 1) {
            ir_sb_puts(b, ", body=");
            put_name(b, comp_name(m, ins->called[1]));
        }
        break;
    case OP_SELECT_AND_SCATTER:
        ir_sb_puts(b, ", select=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->ncalled > 1) {
            ir_sb_puts(b, ", scatter=");
            put_name(b, comp_name(m, ins->called[1]));
        }
        break;
    case OP_CONDITIONAL:
        /* XLA's parser wants the true/false form for a pred selector. */
        if (ins->ncalled == 2 && (ins->cond_pred_form || pred_selector(c, ins))) {
            ir_sb_puts(b, ", true_computation=");
            put_name(b, comp_name(m, ins->called[0]));
            ir_sb_puts(b, ", false_computation=");
            put_name(b, comp_name(m, ins->called[1]));
        } else {
            put_called_list(b, m, ins, "branch_computations");
        }
        break;
    case OP_CUSTOM_CALL:
        if (ins->custom_to_apply && ins->ncalled == 1) {
            ir_sb_puts(b, ", to_apply=");
            put_name(b, comp_name(m, ins->called[0]));
        } else {
            put_called_list(b, m, ins, "called_computations");
        }
        break;
    case OP_ASYNC_START: case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
        if (ins->a.x->async_sugar) /* the wrapped op's callees, as XLA prints them */
            put_wrapped(b, m, ins);
        else
            ir_sb_puts(b, ", calls="), put_name(b, comp_name(m, ins->called[0]));
        break;
    case OP_FUSION:
        ir_sb_puts(b, ", calls=");
        put_name(b, comp_name(m, ins->called[0]));
        if (ins->a.x->output_to_operand_aliasing)
            ir_sb_printf(b, ", output_to_operand_aliasing=%s", ins->a.x->output_to_operand_aliasing);
        break;
    default:
        ir_sb_puts(b, ", to_apply=");
        put_name(b, comp_name(m, ins->called[0]));
        break;
    }
}

/* sharding, frontend_attributes, statistics, control-predecessors,
 * metadata, backend_config, origin (the generic uses), then the kept
 * attributes as they were written. */
static void put_generic_attrs(IrStrBuf *b, const IrComputation *c, const IrInstr *ins)
{
    const IrAttrs *a = &ins->a;
    put_uses(b, c, ins, ir_attr_generic());
    for (int32_t i = 0; i < a->x->nkept; i++) {
        ir_sb_printf(b, ", %s=", a->x->kept[i].key);
        put_verbatim(b, a->x->kept[i].value);
    }
}

/* ------------------------------------------------------------------ */
/* instructions, computations, the module                              */
/* ------------------------------------------------------------------ */

static void put_operands(IrStrBuf *b, const IrComputation *c, const IrInstr *ins)
{
    ir_sb_puts(b, "(");
    if (ins->op == OP_PARAMETER) {
        put_i64(b, ins->a.parameter_number);
    } else if (ins->op == OP_CONSTANT) {
        char *lit = ir_literal_str(&ins->shape, ins->a.literal);
        if (!lit) {
            b->oom = true;
            return;
        }
        ir_sb_puts(b, lit);
        ts_free(lit);
    } else {
        for (int32_t i = 0; i < ins->nopnd; i++) {
            if (i)
                ir_sb_puts(b, ", ");
            int32_t k = ins->opnd[i];
            put_name(b, k >= 0 && k < c->ninstr ? c->instr[k].name : "?");
        }
    }
    ir_sb_puts(b, ")");
}

static void put_instr(IrStrBuf *b, const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    if (c->root >= 0 && c->root < c->ninstr && &c->instr[c->root] == ins)
        ir_sb_puts(b, "ROOT ");
    put_name(b, ins->name);
    ir_sb_puts(b, " = ");
    put_shape(b, &ins->shape, true);
    ir_sb_puts(b, " ");
    ir_sb_puts(b, ir_op_name(ins->a.x->async_sugar ? ins->a.x->async_wrapped_op : ins->op));
    if (ins->a.x->async_sugar)
        ir_sb_puts(b, ins->op == OP_ASYNC_START ? "-start" : ins->op == OP_ASYNC_UPDATE ? "-update" : "-done");
    put_operands(b, c, ins);
    put_op_attrs(b, c, ins);
    put_callees(b, m, c, ins);
    put_generic_attrs(b, c, ins);
}

/* One instruction line of c (with ROOT when it is c's root), without
 * indentation or newline: a ts_malloc string, or NULL on OOM. */
char *ir_print_instr(const IrModule *m, const IrComputation *c, const IrInstr *ins)
{
    IrStrBuf b = {0};
    put_instr(&b, m, c, ins);
    return ir_sb_take(&b);
}

/* "name (p0: f32[2], p1: s32[]) -> f32[2]" when the computation was given
 * a signature. */
static void put_signature(IrStrBuf *b, const IrComputation *c)
{
    ir_sb_puts(b, " (");
    for (int32_t i = 0, k = 0; i < c->nparam; i++) {
        int32_t pi = c->param[i];
        if (pi < 0 || pi >= c->ninstr)
            continue;
        if (k++)
            ir_sb_puts(b, ", ");
        put_name(b, c->instr[pi].name);
        ir_sb_puts(b, ": ");
        put_shape(b, &c->instr[pi].shape, false);
    }
    ir_sb_puts(b, ") -> ");
    if (c->root >= 0 && c->root < c->ninstr)
        put_shape(b, &c->instr[c->root].shape, false);
    else
        ir_sb_puts(b, "()");
}

static void put_computation(IrStrBuf *b, const IrModule *m, const IrComputation *c, bool entry)
{
    if (entry)
        ir_sb_puts(b, "ENTRY ");
    put_name(b, c->name);
    if (c->has_signature)
        put_signature(b, c);
    ir_sb_puts(b, " {\n");
    int32_t *order = NULL;
    IrDiag d = {0};
    if (ir_topo_order(m, c, &order, &d) == IR_ENOMEM)
        b->oom = true;
    ir_diag_clear(&d);
    for (int32_t i = 0; i < c->ninstr && !b->oom; i++) {
        ir_sb_puts(b, "  ");
        put_instr(b, m, c, &c->instr[order ? order[i] : i]);
        ir_sb_puts(b, "\n");
    }
    ts_free(order);
    ir_sb_puts(b, "}");
    if (c->execution_thread) {
        ir_sb_puts(b, ", execution_thread=");
        put_quoted(b, c->execution_thread);
    }
    ir_sb_puts(b, "\n");
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

static void put_shape_index(IrStrBuf *b, const IrShapeIndex *ix)
{
    put_list(b, ix);
}

/* input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, must-alias) } */
static void put_aliases(IrStrBuf *b, const IrModule *m)
{
    ir_sb_puts(b, ", input_output_alias={ ");
    for (int32_t i = 0; i < m->nalias; i++) {
        const IrAlias *al = &m->alias[i];
        if (i)
            ir_sb_puts(b, ", ");
        put_shape_index(b, &al->output_index);
        ir_sb_printf(b, ": (%lld, ", (long long)al->param_number);
        put_shape_index(b, &al->param_index);
        ir_sb_puts(b, al->must_alias ? ", must-alias)" : ", may-alias)"); /* XLA always names the kind */
    }
    ir_sb_puts(b, " }");
}

/* buffer_donor={ (0, {}), (1, {}) } */
static void put_donors(IrStrBuf *b, const IrModule *m)
{
    ir_sb_puts(b, ", buffer_donor={ ");
    for (int32_t i = 0; i < m->ndonor; i++) {
        ir_sb_printf(b, "%s(%lld, ", i ? ", " : "", (long long)m->donor[i].param_number);
        put_shape_index(b, &m->donor[i].param_index);
        ir_sb_puts(b, ")");
    }
    ir_sb_puts(b, " }");
}

static void put_header(IrStrBuf *b, const IrModule *m)
{
    ir_sb_puts(b, "HloModule ");
    put_name(b, m->name);
    if (m->is_scheduled)
        ir_sb_puts(b, ", is_scheduled=true");
    if (m->nalias > 0)
        put_aliases(b, m);
    if (m->ndonor > 0)
        put_donors(b, m);
    if (m->entry_computation_layout) {
        ir_sb_puts(b, ", entry_computation_layout={");
        ir_sb_puts(b, m->entry_computation_layout);
        ir_sb_puts(b, "}");
    }
    if (m->replica_count > 0)
        ir_sb_printf(b, ", replica_count=%lld", (long long)m->replica_count);
    if (m->num_partitions > 0)
        ir_sb_printf(b, ", num_partitions=%lld", (long long)m->num_partitions);
    for (int32_t i = 0; i < m->nheader_attr; i++)
        ir_sb_printf(b, ", %s=%s", m->header_attr[i].key,
             m->header_attr[i].value ? m->header_attr[i].value : "");
    ir_sb_puts(b, "\n");
    if (m->stack_frames) {
        ir_sb_puts(b, "\n");
        ir_sb_puts(b, m->stack_frames);
        ir_sb_puts(b, "\n");
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
static void reserve_text(IrStrBuf *b, const IrModule *m, size_t tail)
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
    IrStrBuf b = {0};
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
        ir_sb_puts(&b, "\n");
        put_computation(&b, m, c, m->entry >= 0 ? order[i] == m->entry : c->is_entry);
    }
    ts_free(order);
    if (tail)
        ir_sb_puts(&b, tail);
    return ir_sb_take(&b);
}

char *ir_print_module(const IrModule *m)
{
    return ir_print_module_then(m, NULL);
}
