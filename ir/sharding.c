/*
 * sharding.c: XLA shardings (HloSharding) in tessel: parsing every text
 * form XLA prints, printing them back in XLA's exact syntax, validation
 * against a shape and a device count, and small queries.
 *
 * Forms (XLA's hlo_parser.cc ParseSharding / HloSharding::Print):
 *   {replicated}  {manual}  {unknown}  {unreduced}  {maximal device=3}
 *   {devices=[2,1]0,1}                              explicit tile assignment
 *   {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate} partial replication
 *   {devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}
 *   {devices=[4,2]<=[2,2,2]T(1,0,2)}                iota tile assignment
 *   {{replicated}, {devices=[2]0,1}}                tuple: one per leaf, flat
 *   {@mesh<x=2,y=2>, [{x}, {}]}                     XLA's named (V3) form, read
 *                                                   by sdy.c into the forms above
 * each optionally followed by ` shard_as N` / ` shard_like N` and
 * ` metadata={...}` (kept raw). Iota forms are expanded into `devices` and
 * also kept so they print back as written.
 */
#include "lex.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Iota expansions larger than this are refused before allocating. */
#define SHD_MAX_DEVICES ((int64_t)1 << 24)

/* ---- queries ---- */

int32_t ir_sharding_data_rank(const IrSharding *s)
{
    return s->kind == SHD_TILED ? s->ntile - s->nsubgroup : 0;
}

int64_t ir_sharding_replication(const IrSharding *s)
{
    if (s->kind != SHD_TILED)
        return 1;
    int64_t r = 1;
    for (int32_t i = s->ntile - s->nsubgroup; i < s->ntile; i++)
        r *= s->tile[i];
    return r;
}

int64_t ir_sharding_num_tiles(const IrSharding *s)
{
    if (s->kind != SHD_TILED)
        return 1;
    int64_t r = 1;
    for (int32_t i = 0; i < s->ntile - s->nsubgroup; i++)
        r *= s->tile[i];
    return r;
}

/* Semantic equality: the same devices hold the same tiles. Spelling
 * (iota vs explicit list, last_tile_dim_replicate vs last_tile_dims) and
 * metadata do not matter. */
static int64_t iota_table[IR_MAX_DEVICES];
static pthread_once_t iota_once = PTHREAD_ONCE_INIT;

static void iota_fill(void)
{
    for (int64_t i = 0; i < IR_MAX_DEVICES; i++)
        iota_table[i] = i;
}

const int64_t *ir_iota_table(int64_t n)
{
    if (n < 0 || n > IR_MAX_DEVICES)
        return NULL;
    pthread_once(&iota_once, iota_fill);
    return iota_table;
}

bool ir_devices_are_iota(const int64_t *devices)
{
    return devices == iota_table;
}

bool ir_sharding_equal(const IrSharding *a, const IrSharding *b)
{
    if (a->kind != b->kind || a->unknown != b->unknown || a->unreduced != b->unreduced || a->shard_group != b->shard_group ||
        (a->shard_group && a->shard_group_id != b->shard_group_id))
        return false;
    switch (a->kind) {
    case SHD_REPLICATED:
    case SHD_MANUAL:
        return true;
    case SHD_MAXIMAL:
        return a->device == b->device;
    case SHD_TUPLE:
        if (a->ntuple != b->ntuple)
            return false;
        for (int32_t i = 0; i < a->ntuple; i++)
            if (!ir_sharding_equal(&a->tuple[i], &b->tuple[i]))
                return false;
        return true;
    case SHD_TILED:
        if (a->ntile != b->ntile || a->ndevices != b->ndevices || a->nsubgroup != b->nsubgroup)
            return false;
        for (int32_t i = 0; i < a->ntile; i++)
            if (a->tile[i] != b->tile[i])
                return false;
        for (int64_t i = 0; a->devices != b->devices && i < a->ndevices; i++)
            if (a->devices[i] != b->devices[i])
                return false;
        for (int32_t i = 0; i < a->nsubgroup; i++)
            if (a->subgroup[i] != b->subgroup[i])
                return false;
        return true;
    }
    return false;
}

/* ---- copy ---- */

static bool copy_mem(IrArena *a, void **dst, const void *src, size_t n)
{
    *dst = NULL;
    if (!src || n == 0)
        return true;
    *dst = ir_alloc(a, n);
    if (!*dst)
        return false;
    memcpy(*dst, src, n);
    return true;
}

IrStatus ir_sharding_copy(IrArena *a, IrSharding *dst, const IrSharding *src)
{
    IrSharding s = *src;
    if (!copy_mem(a, (void **)&s.tile, src->tile, (size_t)src->ntile * sizeof(int64_t)) ||
        (!ir_devices_are_iota(src->devices) &&
         !copy_mem(a, (void **)&s.devices, src->devices, (size_t)src->ndevices * sizeof(int64_t))) ||
        !copy_mem(a, (void **)&s.subgroup, src->subgroup,
                  (size_t)src->nsubgroup * sizeof(IrSubgroupType)) ||
        !copy_mem(a, (void **)&s.iota_dims, src->iota_dims, (size_t)src->niota * sizeof(int64_t)) ||
        !copy_mem(a, (void **)&s.iota_perm, src->iota_perm, (size_t)src->niota * sizeof(int32_t)))
        return IR_ENOMEM;
    if (src->metadata && !(s.metadata = ir_strdup(a, src->metadata)))
        return IR_ENOMEM;
    if (src->kind == SHD_TUPLE && src->ntuple > 0) {
        s.tuple = ir_alloc_array(a, (size_t)src->ntuple, sizeof(IrSharding));
        if (!s.tuple)
            return IR_ENOMEM;
        for (int32_t i = 0; i < src->ntuple; i++)
            if (ir_sharding_copy(a, &s.tuple[i], &src->tuple[i]) != IR_OK)
                return IR_ENOMEM;
    }
    *dst = s;
    return IR_OK;
}

/* ---- printing ---- */

static void sb_i64s(IrStrBuf *b, const int64_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        ir_sb_printf(b, i ? ",%lld" : "%lld", (long long)v[i]);
}

static void print_single(IrStrBuf *b, const IrSharding *s)
{
    switch (s->kind) {
    case SHD_REPLICATED:
        ir_sb_puts(b, s->unknown ? "{unknown" : "{replicated");
        break;
    case SHD_MANUAL:
        ir_sb_puts(b, s->unreduced ? "{unreduced" : "{manual");
        break;
    case SHD_MAXIMAL:
        ir_sb_printf(b, "{maximal device=%lld", (long long)s->device);
        break;
    case SHD_TILED:
        ir_sb_puts(b, "{devices=[");
        sb_i64s(b, s->tile, s->ntile);
        ir_sb_puts(b, "]");
        if (s->iota) {
            ir_sb_puts(b, "<=[");
            sb_i64s(b, s->iota_dims, s->niota);
            ir_sb_puts(b, "]");
            /* XLA's parser wants T(...) whenever the iota has more than one
             * dimension: the identity is spelled out when none was given. */
            if (s->iota_perm || s->niota > 1) {
                ir_sb_puts(b, "T(");
                for (int32_t i = 0; i < s->niota; i++)
                    ir_sb_printf(b, i ? ",%d" : "%d", s->iota_perm ? (int)s->iota_perm[i] : (int)i);
                ir_sb_puts(b, ")");
            }
        } else {
            sb_i64s(b, s->devices, s->ndevices);
        }
        if (s->last_tile_dim_replicate) {
            ir_sb_puts(b, " last_tile_dim_replicate");
        } else if (s->nsubgroup > 0) {
            ir_sb_puts(b, " last_tile_dims={");
            for (int32_t i = 0; i < s->nsubgroup; i++) {
                if (i)
                    ir_sb_puts(b, ", ");
                ir_sb_puts(b, s->subgroup[i] == SUBGROUP_MANUAL ? "manual" : "replicated");
            }
            ir_sb_puts(b, "}");
        }
        break;
    case SHD_TUPLE:
        break;
    }
    if (s->shard_group)
        ir_sb_printf(b, " %s %lld", s->shard_group == 1 ? "shard_as" : "shard_like",
                  (long long)s->shard_group_id);
    if (s->metadata) {
        ir_sb_puts(b, " metadata={");
        ir_sb_puts(b, s->metadata);
        ir_sb_puts(b, "}");
    }
    ir_sb_puts(b, "}");
}

/* A tuple prints its elements flat, with XLA's index comment before
 * every fifth element: `{A, B, C, D, E, <index=5 comment> F}`. */
static void print_sharding(IrStrBuf *b, const IrSharding *s)
{
    if (s->kind != SHD_TUPLE) {
        print_single(b, s);
        return;
    }
    ir_sb_puts(b, "{");
    for (int32_t i = 0; i < s->ntuple; i++) {
        if (i > 0 && i % 5 == 0)
            ir_sb_printf(b, ", /*index=%d*/", (int)i);
        else if (i > 0)
            ir_sb_puts(b, ", ");
        print_sharding(b, &s->tuple[i]);
    }
    ir_sb_puts(b, "}");
}

char *ir_sharding_str(const IrSharding *s)
{
    IrStrBuf b = {0};
    print_sharding(&b, s);
    return ir_sb_take(&b);
}

/* ---- validation ---- */

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* Report with the sharding's text when it can be printed. */
static IrStatus vfail(IrDiag *d, const char *file, const char *src, IrPos pos, const IrSharding *s,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static IrStatus vfail(IrDiag *d, const char *file, const char *src, IrPos pos, const IrSharding *s,
                      const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *text = ir_sharding_str(s);
    if (text && strlen(text) > 120)
        strcpy(text + 110, "...}");
    ir_error(d, IR_EINPUT, file, src, pos, "sharding %s: %s", text ? text : "", msg);
    ts_free(text);
    return IR_EINPUT;
}

/* Device ids in range and each used once. A tile assignment of n devices
 * normally lists 0..n-1 (the iota form always does): then a bitmap of n
 * bits finds a repeat in O(n). Ids beyond n (a sharding of some of the
 * module's devices) are checked by sorting a copy, so that no table is
 * ever sized by the largest id. */
static IrStatus check_devices(const IrSharding *s, int64_t nd, IrDiag *d, const char *file,
                              const char *src, IrPos pos)
{
    int64_t n = s->ndevices;
    if (ir_devices_are_iota(s->devices))
        return nd > 0 && n > nd ? vfail(d, file, src, pos, s, "device %lld is out of range [0, %lld)",
                                        (long long)nd, (long long)nd)
                                : IR_OK;
    bool dense = true;
    for (int64_t i = 0; i < n; i++) {
        int64_t dev = s->devices[i];
        if (dev < 0 || (nd > 0 && dev >= nd))
            return nd > 0 ? vfail(d, file, src, pos, s, "device %lld is out of range [0, %lld)",
                                  (long long)dev, (long long)nd)
                          : vfail(d, file, src, pos, s, "device %lld is negative", (long long)dev);
        dense = dense && dev < n;
    }
    int64_t dup = -1;
    if (dense) {
        uint64_t *seen = ts_calloc((size_t)(n / 64 + 1), sizeof(uint64_t));
        if (!seen)
            return ir_error(d, IR_ENOMEM, file, NULL, pos, "out of memory");
        for (int64_t i = 0; i < n; i++) {
            int64_t dev = s->devices[i];
            uint64_t bit = UINT64_C(1) << (dev % 64);
            if ((seen[dev / 64] & bit) && (dup < 0 || dev < dup))
                dup = dev; /* the smallest repeat, as the sorted path names */
            seen[dev / 64] |= bit;
        }
        ts_free(seen);
    } else {
        int64_t *sorted = ts_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
        if (!sorted)
            return ir_error(d, IR_ENOMEM, file, NULL, pos, "out of memory");
        memcpy(sorted, s->devices, (size_t)n * sizeof(int64_t));
        qsort(sorted, (size_t)n, sizeof(int64_t), cmp_i64);
        for (int64_t i = 1; i < n && dup < 0; i++)
            if (sorted[i] == sorted[i - 1])
                dup = sorted[i];
        ts_free(sorted);
    }
    if (dup >= 0)
        return vfail(d, file, src, pos, s, "device %lld appears more than once", (long long)dup);
    return IR_OK;
}

static IrStatus validate_leaf(const IrSharding *s, const IrShape *shape, int64_t nd, IrDiag *d,
                              const char *file, const char *src, IrPos pos)
{
    if (shape->type == IR_TOKEN)
        return IR_OK; /* XLA: any sharding of a token is fine */
    switch (s->kind) {
    case SHD_REPLICATED:
    case SHD_MANUAL:
        return IR_OK;
    case SHD_TUPLE:
        return vfail(d, file, src, pos, s, "nested tuple sharding");
    case SHD_MAXIMAL:
        if (s->device < 0 || (nd > 0 && s->device >= nd))
            return vfail(d, file, src, pos, s, "device %lld is out of range [0, %lld)",
                         (long long)s->device, (long long)nd);
        return IR_OK;
    case SHD_TILED:
        break;
    }
    int64_t product = 1;
    for (int32_t i = 0; i < s->ntile; i++) {
        if (s->tile[i] < 1)
            return vfail(d, file, src, pos, s, "tile dimension %d is %lld; it must be >= 1", (int)i,
                         (long long)s->tile[i]);
        if (product > INT64_MAX / s->tile[i])
            return vfail(d, file, src, pos, s, "tile assignment size overflows");
        product *= s->tile[i];
    }
    if (product != s->ndevices)
        return vfail(d, file, src, pos, s, "tile assignment lists %lld devices but its dimensions hold %lld",
                     (long long)s->ndevices, (long long)product);
    if (s->nsubgroup < 0 || s->nsubgroup > s->ntile)
        return vfail(d, file, src, pos, s, "%d subgroup dimensions but only %d tile dimensions",
                     (int)s->nsubgroup, (int)s->ntile);
    IrStatus st = check_devices(s, nd, d, file, src, pos);
    if (st != IR_OK)
        return st;
    char *shape_text = NULL;
    if (ir_sharding_data_rank(s) != shape->rank) {
        shape_text = ir_shape_str(shape, false);
        /* With subgroups, say where the data's dimensions went: of
         * [2,2] last_tile_dims={replicated, manual}, none is left. */
        if (s->nsubgroup > 0)
            st = vfail(d, file, src, pos, s,
                       "its %d tile dimensions less %d subgroup dimension%s (last_tile_dims or "
                       "last_tile_dim_replicate) tile %d dimension%s of the data, but shape %s has rank %d",
                       (int)s->ntile, (int)s->nsubgroup, s->nsubgroup == 1 ? "" : "s", (int)ir_sharding_data_rank(s),
                       ir_sharding_data_rank(s) == 1 ? "" : "s", shape_text ? shape_text : "", (int)shape->rank);
        else
            st = vfail(d, file, src, pos, s, "tiles %d dimensions but shape %s has rank %d",
                       (int)ir_sharding_data_rank(s), shape_text ? shape_text : "", (int)shape->rank);
        ts_free(shape_text);
        return st;
    }
    if (nd > 0 && s->ndevices != nd)
        return vfail(d, file, src, pos, s, "uses %lld devices but there are %lld", (long long)s->ndevices,
                     (long long)nd);
    if (s->ndevices == 1)
        return vfail(d, file, src, pos, s,
                     "a tile assignment of a single device; write {maximal device=N} or {replicated}");
    return IR_OK;
}

/* Each leaf of a tuple shape against its sharding (s itself, or element i
 * of a tuple sharding): the leaves listed in one walk, since looking each
 * up by index is quadratic in a wide tuple. */
static IrStatus validate_leaves(const IrSharding *s, const IrShape *shape, int32_t leaves, int64_t nd, IrDiag *d,
                                const char *file, const char *src, IrPos pos)
{
    const IrShape **leaf = ts_malloc((size_t)(leaves > 0 ? leaves : 1) * sizeof *leaf);
    if (!leaf)
        return ir_error(d, IR_ENOMEM, file, src, pos, "out of memory");
    ir_shape_leaves(shape, leaf);
    IrStatus st = IR_OK;
    for (int32_t i = 0; i < leaves && st == IR_OK; i++)
        st = validate_leaf(s->kind == SHD_TUPLE ? &s->tuple[i] : s, leaf[i], nd, d, file, src, pos);
    ts_free(leaf);
    return st;
}

int64_t ir_sharding_width(const IrSharding *s)
{
    int64_t n = 0;
    if (!s)
        return 0;
    if (s->kind == SHD_MAXIMAL)
        return s->device + 1;
    if (s->kind == SHD_TUPLE) {
        for (int32_t i = 0; i < s->ntuple; i++) {
            int64_t t = ir_sharding_width(&s->tuple[i]);
            n = t > n ? t : n;
        }
        return n;
    }
    for (int64_t i = 0; s->kind == SHD_TILED && s->devices && i < s->ndevices; i++)
        n = s->devices[i] + 1 > n ? s->devices[i] + 1 : n;
    return s->kind == SHD_TILED && !s->devices ? s->ndevices : n;
}

IrStatus ir_sharding_validate(const IrSharding *s, const IrShape *shape, int64_t num_devices,
                              IrDiag *d, const char *file, const char *src, IrPos pos)
{
    if (shape->type == IR_TOKEN)
        return IR_OK;
    int64_t nd = num_devices > 0 ? num_devices : 0;
    if (s->kind == SHD_TUPLE) {
        if (shape->type != IR_TUPLE)
            return vfail(d, file, src, pos, s, "a tuple sharding for a non-tuple shape");
        int32_t leaves = ir_shape_leaf_count(shape);
        if (leaves == 0 && s->ntuple <= 1)
            return IR_OK; /* XLA allows {} or one sharding for an empty tuple */
        if (s->ntuple != leaves)
            return vfail(d, file, src, pos, s, "%d elements for a shape with %d leaves", (int)s->ntuple,
                         (int)leaves);
        return validate_leaves(s, shape, leaves, nd, d, file, src, pos);
    }
    if (shape->type == IR_TUPLE) /* XLA normalizes a single sharding on a tuple to one per leaf */
        return validate_leaves(s, shape, ir_shape_leaf_count(shape), nd, d, file, src, pos);
    return validate_leaf(s, shape, nd, d, file, src, pos);
}

/* ---- parsing ---- */

/* Everything one `{...}` single sharding can say, gathered before the
 * combination is checked. */
typedef struct Single {
    bool replicated, maximal, manual, unknown, unreduced, last_tile_dim_replicate;
    bool has_device, has_tile, has_iota, has_perm, has_ltd;
    int64_t device;
    I64Vec tile, devices, iota, perm, ltd; /* ltd: subgroup types */
    int8_t shard_group;
    int64_t shard_group_id;
    const char *metadata;
} Single;

static void single_free(Single *x)
{
    vec_free(&x->tile);
    vec_free(&x->devices);
    vec_free(&x->iota);
    vec_free(&x->perm);
    vec_free(&x->ltd);
}

/* Product of dims with overflow and size checks; -1 after an error. */
static int64_t dims_product(Lexer *L, const I64Vec *v, IrPos pos, const char *what)
{
    int64_t p = 1;
    for (int32_t i = 0; i < v->n; i++) {
        if (v->v[i] < 1) {
            lx_fail(L, pos, "%s dimension %lld must be >= 1", what, (long long)v->v[i]);
            return -1;
        }
        if (p > SHD_MAX_DEVICES / v->v[i]) {
            lx_fail(L, pos, "%s has more than %lld devices", what, (long long)SHD_MAX_DEVICES);
            return -1;
        }
        p *= v->v[i];
    }
    return p;
}

/* '[' int (',' int)* ']' into a vector (non-empty). */
static bool bracket_ints(Lexer *L, I64Vec *v, const char *what)
{
    if (!lx_expectf(L, LX_LSQUARE, "'[' to start %s", what))
        return false;
    do {
        int64_t x = 0;
        if (!lx_intf(L, &x, "integer in %s", what) || !vec_push(L, v, x))
            return false;
    } while (lx_eat(L, LX_COMMA));
    return lx_expectf(L, LX_RSQUARE, "']' to end %s", what);
}

/* devices=[d0,d1,...] then either `<=[r0,...]` (`T(p0,...)`)? or a
 * device list `i,j,k,...`. */
static bool parse_tile_assignment(Lexer *L, Single *x, IrPos pos)
{
    if (x->has_tile)
        return lx_fail(L, pos, "duplicate devices= in sharding");
    x->has_tile = true;
    if (!bracket_ints(L, &x->tile, "tile assignment dimensions"))
        return false;
    if (lx_eat(L, LX_LEQ)) {
        x->has_iota = true;
        if (!bracket_ints(L, &x->iota, "iota dimensions"))
            return false;
        if (lx_is_word(L, "T")) {
            lx_next(L);
            x->has_perm = true;
            if (!lx_expect(L, LX_LPAREN, "'(' after T"))
                return false;
            do {
                int64_t p = 0;
                if (!lx_int(L, &p, "integer in T(...)") || !vec_push(L, &x->perm, p))
                    return false;
            } while (lx_eat(L, LX_COMMA));
            return lx_expect(L, LX_RPAREN, "')' to end T(...)");
        }
        return true;
    }
    do {
        int64_t dev = 0;
        if (!lx_int(L, &dev, "device id") || !vec_push(L, &x->devices, dev))
            return false;
    } while (lx_eat(L, LX_COMMA));
    return true;
}

/* last_tile_dims={manual, replicated} */
static bool parse_subgroups(Lexer *L, Single *x)
{
    x->has_ltd = true;
    if (!lx_expect(L, LX_LBRACE, "'{' after last_tile_dims="))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            int64_t t = 0;
            if (lx_is_word(L, "manual"))
                t = SUBGROUP_MANUAL;
            else if (lx_is_word(L, "replicated"))
                t = SUBGROUP_REPLICATED;
            else
                return lx_expected_word(L, "'manual' or 'replicated' in last_tile_dims",
                                        (const char *const[]){"manual", "replicated", NULL});
            lx_next(L);
            if (!vec_push(L, &x->ltd, t))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    return lx_expect(L, LX_RBRACE, "'}' to end last_tile_dims");
}

/* The words a single sharding holds: name=value ones, then plain ones. */
static const char *const single_words[] = {"device",  "devices", "last_tile_dims", "metadata",
                                           "replicated", "maximal", "manual", "unknown", "unreduced",
                                           "last_tile_dim_replicate", "shard_as", "shard_like", NULL};
enum { NSINGLE_ATTRS = 4 };

/* "unknown WHAT 'x' in sharding", with "did you mean" among single_words. */
static bool unknown_single(Lexer *L, IrPos pos, const char *what)
{
    char buf[64];
    const char *near = lx_near(L, single_words);
    return lx_fail(L, pos, "unknown %s %s in sharding%s%s%s", what, lx_describe(L, buf, sizeof buf),
                   near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
}

/* One `name=value` inside a single sharding. */
static bool parse_single_attr(Lexer *L, Single *x)
{
    IrPos pos = L->tok.pos;
    if (lx_is_word(L, "device")) {
        lx_next(L);
        lx_next(L);
        x->has_device = true;
        return lx_int(L, &x->device, "integer after device=");
    }
    if (lx_is_word(L, "devices")) {
        lx_next(L);
        lx_next(L);
        return parse_tile_assignment(L, x, pos);
    }
    if (lx_is_word(L, "last_tile_dims")) {
        lx_next(L);
        lx_next(L);
        return parse_subgroups(L, x);
    }
    if (lx_is_word(L, "metadata")) {
        lx_next(L);
        lx_next(L);
        size_t s, e;
        if (!lx_is(L, LX_LBRACE))
            return lx_expected(L, "'{' after metadata=");
        if (!lx_raw_group(L, &s, &e))
            return false;
        return (x->metadata = lx_dup(L, s + 1, e - 1)) != NULL;
    }
    return unknown_single(L, pos, "attribute");
}

/* One word inside a single sharding. */
static bool parse_single_word(Lexer *L, Single *x)
{
    char buf[64];
    IrPos pos = L->tok.pos;
    bool *flag = NULL;
    if (lx_is_word(L, "replicated"))
        flag = &x->replicated;
    else if (lx_is_word(L, "maximal"))
        flag = &x->maximal;
    else if (lx_is_word(L, "manual"))
        flag = &x->manual;
    else if (lx_is_word(L, "unknown"))
        flag = &x->unknown;
    else if (lx_is_word(L, "unreduced"))
        flag = &x->unreduced;
    else if (lx_is_word(L, "last_tile_dim_replicate"))
        flag = &x->last_tile_dim_replicate;
    if (flag) {
        *flag = true;
        lx_next(L);
        return true;
    }
    if (lx_is_word(L, "shard_as") || lx_is_word(L, "shard_like")) {
        if (x->shard_group)
            return lx_fail(L, pos, "more than one shard group in sharding");
        x->shard_group = lx_is_word(L, "shard_as") ? 1 : 2;
        lx_next(L);
        return lx_int(L, &x->shard_group_id, "shard group id");
    }
    if (lx_is_word(L, "maximal_mesh"))
        return lx_fail(L, pos, "%s shardings are not supported", lx_describe(L, buf, sizeof buf));
    for (int i = 0; i < NSINGLE_ATTRS; i++)
        if (lx_is_word(L, single_words[i]))
            return lx_fail(L, lx_peek(L).pos, "expected '=' after %s in sharding (%s=...)", single_words[i],
                           single_words[i]);
    return unknown_single(L, pos, "word");
}

static bool copy_i64(Lexer *L, const I64Vec *v, int64_t **out)
{
    IrI64List l = {0};
    if (!vec_to_list(L, v, &l))
        return false;
    *out = l.v;
    return true;
}

/* Expand an iota tile assignment: the devices are iota(n) reshaped to
 * `dims`, transposed by `perm`, read row-major. Output element at index
 * (j0..jk) of the transposed array is the row-major offset of i with
 * i[perm[t]] = j[t].
 * Example: [2,2,2] T(1,0,2): j=(0,1,0) -> i=(1,0,0) -> 4; in all
 * 0,1,4,5,2,3,6,7. */
static bool expand_iota(Lexer *L, const int64_t *dims, const int32_t *perm, int32_t k, int64_t n,
                        int64_t *out)
{
    int64_t *stride = ts_malloc((size_t)k * sizeof(int64_t) * 3);
    if (!stride)
        return lx_nomem(L);
    int64_t *tdim = stride + k, *idx = stride + 2 * k;
    int64_t st = 1;
    for (int32_t t = k - 1; t >= 0; t--) {
        stride[t] = st;
        st *= dims[t];
    }
    for (int32_t t = 0; t < k; t++) {
        tdim[t] = dims[perm ? perm[t] : t];
        idx[t] = 0;
    }
    for (int64_t e = 0; e < n; e++) {
        int64_t v = 0;
        for (int32_t t = 0; t < k; t++)
            v += idx[t] * stride[perm ? perm[t] : t];
        out[e] = v;
        for (int32_t t = k - 1; t >= 0; t--) {
            if (++idx[t] < tdim[t])
                break;
            idx[t] = 0;
        }
    }
    ts_free(stride);
    return true;
}

/* Whether iota(dims) transposed by perm (NULL: none) lists 0..n-1 in
 * order: the dims of size > 1 keep their order. */
static bool iota_in_order(const I64Vec *iota, const int32_t *perm)
{
    int32_t last = -1;
    for (int32_t t = 0; perm && t < iota->n; t++)
        if (iota->v[perm[t]] > 1) {
            if (perm[t] < last)
                return false;
            last = perm[t];
        }
    return true;
}

/* Iota parts, shared with replica groups (parse.c): checks sizes and the
 * permutation, expands into *devices (arena, n entries), or with
 * shared_ok points it at ir_iota_table when that is the order (a
 * sharding's devices; replica groups are made into other arrays). */
bool lx_iota_devices(Lexer *L, IrPos pos, const I64Vec *iota, const I64Vec *perm, bool has_perm,
                     int64_t n, bool shared_ok, int64_t **dims_out, int32_t **perm_out, int64_t **devices)
{
    int64_t in = dims_product(L, iota, pos, "iota");
    if (in < 0)
        return false;
    if (in != n)
        return lx_fail(L, pos, "iota size %lld does not match the tile assignment size %lld",
                       (long long)in, (long long)n);
    if (n > L->iota_left)
        return lx_fail(L, pos, "iota device lists expand to more than %lld entries in all",
                       (long long)LX_IOTA_BUDGET);
    L->iota_left -= n;
    int32_t k = iota->n;
    if (k > L->lim.max_rank)
        return lx_fail(L, pos, "iota has %d dimensions, more than the limit of %d", (int)k, (int)L->lim.max_rank);
    int32_t *p = NULL;
    if (has_perm) {
        if (perm->n != k)
            return lx_fail(L, pos, "T(...) has %d entries but the iota has %d dimensions", (int)perm->n,
                           (int)k);
        p = ir_alloc_array(L->arena, (size_t)k, sizeof(int32_t));
        if (!p)
            return lx_nomem(L);
        for (int32_t t = 0; t < k; t++) {
            if (perm->v[t] < 0 || perm->v[t] >= k)
                return lx_fail(L, pos, "T(...) entry %lld is out of range [0, %d)", (long long)perm->v[t],
                               (int)k);
            for (int32_t u = 0; u < t; u++)
                if (p[u] == perm->v[t])
                    return lx_fail(L, pos, "T(...) is not a permutation (%lld repeats)",
                                   (long long)perm->v[t]);
            p[t] = (int32_t)perm->v[t];
        }
    }
    if (!copy_i64(L, iota, dims_out))
        return false;
    *perm_out = p;
    if (shared_ok && iota_in_order(iota, p) && ir_iota_table(n)) {
        *devices = (int64_t *)ir_iota_table(n); /* never written: see ir.h */
        return true;
    }
    *devices = ir_alloc_array(L->arena, (size_t)(n > 0 ? n : 1), sizeof(int64_t));
    if (!*devices)
        return lx_nomem(L);
    return expand_iota(L, *dims_out, p, k, n, *devices);
}

/* Turn the gathered parts into a tiled sharding. */
static bool build_tiled(Lexer *L, IrPos pos, Single *x, IrSharding *s)
{
    if (x->has_device)
        return lx_fail(L, pos, "device= is only valid with maximal");
    if (!x->has_tile)
        return lx_fail(L, pos, "sharding needs devices=[...] or one of replicated, maximal, manual");
    if (x->last_tile_dim_replicate && x->has_ltd)
        return lx_fail(L, pos, "both last_tile_dim_replicate and last_tile_dims");
    if (x->tile.n > L->lim.max_rank + 2)
        return lx_fail(L, pos, "tile assignment has %d dimensions, more than the limit of %d", (int)x->tile.n,
                       (int)L->lim.max_rank + 2);
    int64_t n = dims_product(L, &x->tile, pos, "tile assignment");
    if (n < 0)
        return false;
    s->kind = SHD_TILED;
    s->ntile = x->tile.n;
    s->ndevices = n;
    if (!copy_i64(L, &x->tile, &s->tile))
        return false;
    if (x->has_iota) {
        s->iota = true;
        s->niota = x->iota.n;
        if (!lx_iota_devices(L, pos, &x->iota, &x->perm, x->has_perm, n, true, &s->iota_dims, &s->iota_perm,
                             &s->devices))
            return false;
    } else {
        if (x->devices.n != n)
            return lx_fail(L, pos, "sharding lists %d devices but the tile assignment holds %lld",
                           (int)x->devices.n, (long long)n);
        if (!copy_i64(L, &x->devices, &s->devices))
            return false;
    }
    int32_t nsub = x->last_tile_dim_replicate ? 1 : x->ltd.n;
    if (nsub > s->ntile)
        return lx_fail(L, pos, "%d subgroup dimensions but only %d tile dimensions", (int)nsub,
                       (int)s->ntile);
    s->nsubgroup = nsub;
    s->last_tile_dim_replicate = x->last_tile_dim_replicate;
    if (nsub > 0) {
        s->subgroup = ir_alloc_array(L->arena, (size_t)nsub, sizeof(IrSubgroupType));
        if (!s->subgroup)
            return lx_nomem(L);
        for (int32_t i = 0; i < nsub; i++)
            s->subgroup[i] = x->last_tile_dim_replicate ? SUBGROUP_REPLICATED : (IrSubgroupType)x->ltd.v[i];
    }
    return true;
}

static bool build_single(Lexer *L, IrPos pos, Single *x, IrSharding *s)
{
    int kinds = x->replicated + x->maximal + x->manual + x->unknown + x->unreduced;
    if (kinds > 1)
        return lx_fail(L, pos, "conflicting sharding kinds (replicated, maximal, manual, unknown, unreduced)");
    bool tiled_parts = x->has_tile || x->last_tile_dim_replicate || x->has_ltd;
    if (kinds == 1 && tiled_parts)
        return lx_fail(L, pos, "%s shardings should not have any devices assigned",
                       x->replicated ? "replicated" : x->maximal ? "maximal" : x->manual ? "manual"
                       : x->unknown ? "unknown" : "unreduced");
    if (x->replicated || x->unknown || x->manual || x->unreduced) {
        if (x->has_device)
            return lx_fail(L, pos, "device= is only valid with maximal");
        s->kind = x->manual || x->unreduced ? SHD_MANUAL : SHD_REPLICATED;
        s->unknown = x->unknown;
        s->unreduced = x->unreduced;
    } else if (x->maximal) {
        if (!x->has_device)
            return lx_fail(L, pos, "maximal shardings need device=N");
        s->kind = SHD_MAXIMAL;
        s->device = x->device;
    } else if (!build_tiled(L, pos, x, s)) {
        return false;
    }
    s->shard_group = x->shard_group;
    s->shard_group_id = x->shard_group_id;
    s->metadata = x->metadata;
    return true;
}

/* XLA's named (V3) form starts `{@mesh<` or `{mesh[`. */
static bool is_v3(const Lexer *L)
{
    if (L->tok.kind == LX_OTHER && L->text[L->tok.start] == '@')
        return true;
    return lx_is_word(L, "mesh") && lx_peek(L).kind == LX_LSQUARE;
}

/* v3 (',' metadata={...})? '}' (sdy.c reads the sharding itself). */
static bool parse_v3(Lexer *L, IrSharding *s)
{
    if (!ir_sdy_v3_parse_lx(L, s))
        return false;
    if (lx_is_attr(L) && lx_is_word(L, "metadata")) {
        lx_next(L);
        lx_next(L);
        size_t st, e;
        if (!lx_is(L, LX_LBRACE))
            return lx_expected(L, "'{' after metadata=");
        if (!lx_raw_group(L, &st, &e) || !(s->metadata = lx_dup(L, st + 1, e - 1)))
            return false;
    }
    return lx_expect(L, LX_RBRACE, "'}' to end sharding");
}

/* single ::= '{' (word | name '=' value)* '}' ; the '{' may be consumed. */
/* Is the current word one a single sharding may hold (parse_single_attr's
 * and parse_single_word's)? */
static bool single_word_known(const Lexer *L)
{
    for (size_t k = 0; single_words[k]; k++)
        if (lx_is_word(L, single_words[k]))
            return true;
    return lx_is_word(L, "maximal_mesh");
}

static bool parse_single(Lexer *L, IrSharding *s, bool brace_consumed, IrPos pos)
{
    memset(s, 0, sizeof *s);
    if (!brace_consumed) {
        pos = L->tok.pos;
        if (!lx_expect(L, LX_LBRACE, "'{' to start sharding"))
            return false;
    }
    if (is_v3(L))
        return parse_v3(L, s);
    Single x = {0};
    bool ok = true;
    while (ok && !lx_is(L, LX_RBRACE)) {
        /* A word the sharding cannot hold on a later line than its '{' is
         * the next instruction (`x = ...`, `ROOT ...`): the '}' was left
         * out, and the error belongs at the sharding, not at that line's
         * name as an attribute of it. */
        if (L->tok.pos.line > pos.line && (lx_is_attr(L) || lx_is_word(L, "ROOT")) && !single_word_known(L)) {
            char buf[64];
            ok = lx_fail(L, pos, "expected '}' to end this sharding on its line, found %s on line %d",
                         lx_describe(L, buf, sizeof buf), (int)L->tok.pos.line);
            break;
        }
        if (lx_is_attr(L))
            ok = parse_single_attr(L, &x);
        else if (lx_is(L, LX_NAME))
            ok = parse_single_word(L, &x);
        else
            ok = lx_expected(L, "'}' to end sharding");
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end sharding") && build_single(L, pos, &x, s);
    single_free(&x);
    return ok;
}

/* sharding ::= '{' '}' | '{' single (',' single)* '}' | single */
bool ir_shd_parse_lx(Lexer *L, IrSharding *out)
{
    memset(out, 0, sizeof *out);
    IrPos pos = L->tok.pos;
    if (!lx_expect(L, LX_LBRACE, "'{' to start sharding"))
        return false;
    if (!lx_is(L, LX_LBRACE) && !lx_is(L, LX_RBRACE))
        return parse_single(L, out, true, pos);
    IrSharding *elems = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = true;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            if (n >= L->lim.max_tuple) {
                ok = lx_fail(L, L->tok.pos, "tuple sharding has more than %d elements",
                             (int)L->lim.max_tuple);
                break;
            }
            if (!IR_GROW(elems, cap, n + 1)) {
                ok = lx_nomem(L);
                break;
            }
            ok = parse_single(L, &elems[n], false, pos);
            n++;
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end tuple sharding");
    if (ok) {
        out->kind = SHD_TUPLE;
        out->ntuple = n;
        if (n > 0) {
            out->tuple = ir_alloc_array(L->arena, (size_t)n, sizeof(IrSharding));
            if (!out->tuple)
                ok = lx_nomem(L);
            else
                memcpy(out->tuple, elems, (size_t)n * sizeof(IrSharding));
        }
    }
    ts_free(elems);
    return ok;
}

IrStatus ir_sharding_parse(IrArena *a, const char *text, IrSharding *out, IrDiag *d)
{
    Lexer L;
    size_t len = text ? strlen(text) : 0;
    lx_init(&L, NULL, text, len, text, a, d, NULL);
    if (!ir_shd_parse_lx(&L, out))
        return L.st;
    if (!lx_is(&L, LX_EOF)) {
        lx_expected(&L, "end of sharding");
        return L.st;
    }
    return IR_OK;
}
