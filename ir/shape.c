/*
 * shape.c: array and tuple shapes: element counts with overflow checks,
 * equality, copies, and text as XLA prints it.
 */
#include "ir.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

IrLimits ir_default_limits(void)
{
    IrLimits l = {
        .max_elements = (int64_t)1 << 34,
        .max_rank = IR_MAX_RANK,
        .max_tuple = 1 << 16,
        .max_depth = 64,
        .max_name = 4096,
        .max_call_depth = 64,
        .max_instructions = (int64_t)1 << 22,
    };
    return l;
}

int64_t ir_shape_elements(const IrShape *s)
{
    int64_t n = 1;
    for (int32_t i = 0; i < s->rank; i++) {
        int64_t d = s->dims[i];
        if (d < 0)
            return -1;
        if (d != 0 && n > INT64_MAX / d)
            return -1;
        n *= d;
    }
    return n;
}

int64_t ir_shape_bytes(const IrShape *s)
{
    if (s->type == IR_TUPLE) {
        int64_t total = 0;
        for (int32_t i = 0; i < s->ntuple; i++) {
            int64_t b = ir_shape_bytes(&s->tuple[i]);
            if (b < 0 || total > INT64_MAX - b)
                return -1;
            total += b;
        }
        return total;
    }
    int64_t n = ir_shape_elements(s);
    int64_t size = (int64_t)ir_type_size(s->type);
    if (n < 0 || (size && n > INT64_MAX / size))
        return -1;
    return n * size;
}

bool ir_shape_is_array(const IrShape *s)
{
    return ir_type_is_array(s->type);
}

bool ir_dims_equal(const int64_t *a, const int64_t *b, int32_t rank)
{
    for (int32_t i = 0; i < rank; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

bool ir_shape_same_dims(const IrShape *a, const IrShape *b)
{
    return a->rank == b->rank && ir_dims_equal(a->dims, b->dims, a->rank);
}

bool ir_shape_dim_dynamic(const IrShape *s, int32_t i)
{
    return s->dynamic && i >= 0 && i < s->rank && s->dynamic[i];
}

bool ir_shape_is_dynamic(const IrShape *s)
{
    if (s->type == IR_TUPLE) {
        for (int32_t i = 0; i < s->ntuple; i++)
            if (ir_shape_is_dynamic(&s->tuple[i]))
                return true;
        return false;
    }
    for (int32_t i = 0; i < s->rank; i++)
        if (ir_shape_dim_dynamic(s, i))
            return true;
    return false;
}

/* Type, dims and tuple structure; the dynamic flags too when `dynamic`. */
static bool shapes_match(const IrShape *a, const IrShape *b, bool dynamic)
{
    if (a->type != b->type)
        return false;
    if (a->type == IR_TUPLE) {
        if (a->ntuple != b->ntuple)
            return false;
        for (int32_t i = 0; i < a->ntuple; i++)
            if (!shapes_match(&a->tuple[i], &b->tuple[i], dynamic))
                return false;
        return true;
    }
    if (a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i] ||
            (dynamic && ir_shape_dim_dynamic(a, i) != ir_shape_dim_dynamic(b, i)))
            return false;
    return true;
}

bool ir_shape_equal(const IrShape *a, const IrShape *b)
{
    return shapes_match(a, b, true);
}

bool ir_shape_compatible(const IrShape *a, const IrShape *b)
{
    return shapes_match(a, b, false);
}

IrStatus ir_shape_copy(IrArena *a, IrShape *dst, const IrShape *src)
{
    IrShape s = *src;
    if (src->rank > 0) {
        s.dims = ir_alloc_array(a, (size_t)src->rank, sizeof(int64_t));
        if (!s.dims)
            return IR_ENOMEM;
        memcpy(s.dims, src->dims, (size_t)src->rank * sizeof(int64_t));
        if (src->dynamic) {
            s.dynamic = ir_alloc_array(a, (size_t)src->rank, sizeof(bool));
            if (!s.dynamic)
                return IR_ENOMEM;
            memcpy(s.dynamic, src->dynamic, (size_t)src->rank * sizeof(bool));
        }
        if (src->has_layout && src->minor_to_major) {
            s.minor_to_major = ir_alloc_array(a, (size_t)src->rank, sizeof(int32_t));
            if (!s.minor_to_major)
                return IR_ENOMEM;
            memcpy(s.minor_to_major, src->minor_to_major, (size_t)src->rank * sizeof(int32_t));
        }
    }
    if (src->layout_tail && !(s.layout_tail = ir_strdup(a, src->layout_tail)))
        return IR_ENOMEM;
    if (src->type == IR_TUPLE && src->ntuple > 0) {
        s.tuple = ir_alloc_array(a, (size_t)src->ntuple, sizeof(IrShape));
        if (!s.tuple)
            return IR_ENOMEM;
        for (int32_t i = 0; i < src->ntuple; i++)
            if (ir_shape_copy(a, &s.tuple[i], &src->tuple[i]) != IR_OK)
                return IR_ENOMEM;
    }
    *dst = s;
    return IR_OK;
}

IrStatus ir_shape_make(IrArena *a, IrShape *dst, IrType t, int32_t rank, const int64_t *dims)
{
    memset(dst, 0, sizeof *dst);
    dst->type = t;
    dst->rank = rank;
    if (rank > 0) {
        dst->dims = ir_alloc_array(a, (size_t)rank, sizeof(int64_t));
        if (!dst->dims)
            return IR_ENOMEM;
        memcpy(dst->dims, dims, (size_t)rank * sizeof(int64_t));
    }
    return IR_OK;
}

IrStatus ir_shape_make_tuple(IrArena *a, IrShape *dst, int32_t n, const IrShape *elems)
{
    memset(dst, 0, sizeof *dst);
    dst->type = IR_TUPLE;
    dst->ntuple = n;
    if (n > 0) {
        dst->tuple = ir_alloc_array(a, (size_t)n, sizeof(IrShape));
        if (!dst->tuple)
            return IR_ENOMEM;
        for (int32_t i = 0; i < n; i++)
            if (ir_shape_copy(a, &dst->tuple[i], &elems[i]) != IR_OK)
                return IR_ENOMEM;
    }
    return IR_OK;
}

static void shape_to_buf(IrStrBuf *b, const IrShape *s, bool with_layout)
{
    char num[32];
    if (s->type == IR_TUPLE) {
        ir_sb_puts(b, "(");
        for (int32_t i = 0; i < s->ntuple; i++) {
            if (i)
                ir_sb_puts(b, ", ");
            shape_to_buf(b, &s->tuple[i], with_layout);
        }
        ir_sb_puts(b, ")");
        return;
    }
    if (s->buffer)
        ir_sb_puts(b, "b(");
    ir_sb_puts(b, ir_type_name(s->type));
    ir_sb_puts(b, "[");
    for (int32_t i = 0; i < s->rank; i++) {
        if (i)
            ir_sb_puts(b, ",");
        if (ir_shape_dim_dynamic(s, i) && s->dims[i] == IR_DIM_UNBOUNDED) {
            ir_sb_puts(b, "?");
            continue;
        }
        snprintf(num, sizeof num, ir_shape_dim_dynamic(s, i) ? "<=%lld" : "%lld", (long long)s->dims[i]);
        ir_sb_puts(b, num);
    }
    ir_sb_puts(b, "]");
    if (with_layout && s->has_layout && s->type != IR_TOKEN) {
        ir_sb_puts(b, "{");
        for (int32_t i = 0; i < s->rank && s->minor_to_major; i++) {
            snprintf(num, sizeof num, i ? ",%d" : "%d", (int)s->minor_to_major[i]);
            ir_sb_puts(b, num);
        }
        if (s->layout_tail) {
            ir_sb_puts(b, ":");
            ir_sb_puts(b, s->layout_tail);
        }
        ir_sb_puts(b, "}");
    }
    if (s->buffer)
        ir_sb_puts(b, ")");
}

char *ir_shape_str(const IrShape *s, bool with_layout)
{
    IrStrBuf b = {0};
    shape_to_buf(&b, s, with_layout);
    return ir_sb_take(&b);
}

int32_t ir_shape_leaf_count(const IrShape *s)
{
    if (s->type != IR_TUPLE)
        return 1;
    int32_t n = 0;
    for (int32_t i = 0; i < s->ntuple; i++)
        n += ir_shape_leaf_count(&s->tuple[i]);
    return n;
}

const IrShape *ir_shape_leaf(const IrShape *s, int32_t leaf)
{
    if (s->type != IR_TUPLE)
        return leaf == 0 ? s : NULL;
    for (int32_t i = 0; i < s->ntuple; i++) {
        int32_t n = ir_shape_leaf_count(&s->tuple[i]);
        if (leaf < n)
            return ir_shape_leaf(&s->tuple[i], leaf);
        leaf -= n;
    }
    return NULL;
}

int32_t ir_shape_leaves(const IrShape *s, const IrShape **out)
{
    if (s->type != IR_TUPLE) {
        out[0] = s;
        return 1;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < s->ntuple; i++)
        n += ir_shape_leaves(&s->tuple[i], out + n);
    return n;
}

void ir_shape_strides(const IrShape *s, int64_t *strides)
{
    assert(s->type != IR_TUPLE && s->rank >= 0 && s->rank <= IR_MAX_RANK);
    int64_t st = 1;
    for (int32_t i = s->rank - 1; i >= 0; i--) {
        strides[i] = st;
        st *= s->dims[i];
    }
}
