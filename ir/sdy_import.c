/*
 * sdy_import.c: a parsed module's Shardy round-trip attributes (what JAX
 * writes by default) made into its shardings, right after parsing, so that
 * every later pass sees GSPMD's forms only. What XLA's round-trip import
 * (xla/service/spmd/shardy/stablehlo_round_trip) reads, read the same way:
 *
 *   module    frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<...>}}
 *   any value frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [...]>"}
 *             (or _per_value for tuples): its sharding; where it also has a
 *             sharding= the two must map the same devices to the same tiles
 *   xla.sdy.FuncResultSharding  carries the result's sharding like any value
 *   xla.sdy.ShardingGroup(v), xla.sdy.sharding_group_id="N": v joins
 *             shard_as group N (its members share one sharding); the
 *             custom-call itself is removed (Shardy gives it no users)
 *   shard_map:
 *     g = (local...) custom-call(x...), custom_call_target="xla.sdy.GlobalToLocalShape",
 *           xla.sdy.in_shardings=..., xla.sdy.manual_axes=...
 *     a_i = get-tuple-element(g), index=i
 *     r = call(a...), to_apply=xla.sdy.manual_computation_body.N
 *     o = custom-call(r...), custom_call_target="xla.sdy.LocalToGlobalShape",
 *           xla.sdy.out_shardings=..., xla.sdy.manual_axes=...
 *   becomes GSPMD's manual region:
 *     s_i = custom-call(x_i), custom_call_target="Sharding", sharding=IN_i
 *     a_i = custom-call(s_i), custom_call_target="SPMDFullToShardShape", sharding=IN_i
 *           with the manual axes as a manual subgroup ({manual} when all are)
 *     the body's instructions, inlined (sharding {manual} where a fully
 *           manual body gives none), its root standing for r
 *     m_i = custom-call(r_i), custom_call_target="Sharding", sharding=OUT_i with the manual axes
 *     o_i = custom-call(m_i), custom_call_target="SPMDShardToFullShape", sharding=OUT_i
 *
 * The xla.sdy.* attributes read are removed from the instructions (the
 * module prints as the GSPMD module it now is); the meshes stay.
 */
#include "lex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BODY_PREFIX "xla.sdy.manual_computation_body"

/* ---- where an attribute's text is in the source ---- */

/* Byte offset of (line, col) in src. */
static size_t src_offset(const char *src, IrPos pos)
{
    size_t off = 0;
    for (int32_t l = 1; l < pos.line && src[off]; off++)
        if (src[off] == '\n')
            l++;
    return off + (size_t)(pos.col > 0 ? pos.col - 1 : 0);
}

static IrPos pos_of_offset(const char *src, size_t off)
{
    IrPos p = {1, 1};
    for (size_t i = 0; i < off && src[i]; i++) {
        if (src[i] == '\n') {
            p.line++;
            p.col = 1;
        } else {
            p.col++;
        }
    }
    return p;
}

/* The source position of byte `k` of attribute `key`'s value, searching
 * from `from` (the instruction, or the start for the header): a quoted
 * value counts each escape as one byte of the value. */
static IrPos value_pos(const IrModule *m, IrPos from, const char *key, int32_t k)
{
    if (!m->src)
        return from;
    size_t start = from.line > 0 ? src_offset(m->src, from) : 0;
    char pat[96];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *p = strstr(m->src + start, pat);
    if (!p)
        return from;
    p += strlen(pat);
    bool quoted = *p == '"';
    if (quoted)
        p++;
    for (int32_t i = 0; i < k && *p; i++)
        p += quoted && *p == '\\' && p[1] ? 2 : 1;
    return pos_of_offset(m->src, (size_t)(p - m->src));
}

/* An error of sdy.c (positioned in the value) re-made at its place in the
 * module's source. */
static IrStatus place(const IrModule *m, IrPos from, const char *key, IrDiag *tmp, IrDiag *d)
{
    IrPos pos = tmp->pos.col > 0 ? value_pos(m, from, key, tmp->pos.col - 1) : from;
    IrStatus st = ir_error(d, tmp->status, m->file, m->src, pos, "in %s: %s", key, tmp->msg ? tmp->msg : "?");
    ir_diag_clear(tmp);
    return st;
}

/* ---- frontend attributes ---- */

static bool is_target(const IrInstr *x, const char *t)
{
    return x->op == OP_CUSTOM_CALL && x->a.x->custom_call_target && strcmp(x->a.x->custom_call_target, t) == 0;
}

/* Drop frontend attribute `key` (the array is copied: it may be shared). */
static bool drop_attr(IrArena *a, IrInstr *x, const char *key)
{
    int32_t n = x->a.nfrontend, k = 0;
    if (!ir_frontend_attr(x, key))
        return true;
    IrKeyValue *v = n > 1 ? ir_alloc_array(a, (size_t)n - 1, sizeof *v) : NULL;
    if (n > 1 && !v)
        return false;
    for (int32_t i = 0; i < n; i++)
        if (strcmp(x->a.frontend[i].key, key) != 0)
            v[k++] = x->a.frontend[i];
    x->a.frontend = v;
    x->a.nfrontend = k;
    return true;
}

/* The xla.sdy.meshes entry of the header's frontend_attributes (kept raw:
 * `{xla.sdy.meshes={...}, ...}`, the meshes in braces or in a string). */
static IrStatus header_meshes(IrModule *m, IrSdyMeshes *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    const char *raw = NULL;
    for (int32_t i = 0; i < m->nheader_attr; i++)
        if (strcmp(m->header_attr[i].key, "frontend_attributes") == 0)
            raw = m->header_attr[i].value;
    const char *p = raw ? strstr(raw, "xla.sdy.meshes") : NULL;
    /* a slip of the key (xla.sdy.meshs) left the module without meshes:
     * every @mesh was then "not defined (xla.sdy.meshes is missing)" */
    for (const char *q = raw ? strstr(raw, "xla.sdy.") : NULL; !p && q; q = strstr(q + 1, "xla.sdy.")) {
        size_t n = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.");
        if (ir_edit_distance(q, n, "xla.sdy.meshes", 14) <= 2 && m->src) {
            const char *at = strstr(m->src, "xla.sdy.");
            while (at && strncmp(at, q, n) != 0)
                at = strstr(at + 1, "xla.sdy.");
            IrPos pos = at ? pos_of_offset(m->src, (size_t)(at - m->src)) : (IrPos){0, 0};
            return ir_error(d, IR_EINPUT, m->file, m->src, pos,
                            "the module's frontend attribute %.*s is not read; did you mean xla.sdy.meshes?", (int)n, q);
        }
    }
    if (!p)
        return IR_OK;
    p += strlen("xla.sdy.meshes");
    while (*p == ' ')
        p++;
    if (*p++ != '=')
        return ir_error(d, IR_EINPUT, m->file, m->src, value_pos(m, (IrPos){0, 0}, "xla.sdy.meshes", 0),
                        "xla.sdy.meshes has no value");
    while (*p == ' ')
        p++;
    char *text = NULL;
    if (*p == '"') { /* a string: unescape \" and \\ */
        size_t n = strlen(p);
        if (!(text = ir_alloc(m->arena, n + 1)))
            return ir_oom(d, NULL);
        size_t k = 0;
        for (p++; *p && *p != '"'; p++)
            text[k++] = *p == '\\' && p[1] ? *++p : *p;
        text[k] = 0;
    } else { /* a braced group, strings respected */
        int depth = 0;
        const char *q = p;
        bool str = false;
        for (; *q; q++) {
            if (str) {
                if (*q == '\\' && q[1])
                    q++;
                else if (*q == '"')
                    str = false;
            } else if (*q == '"') {
                str = true;
            } else if (*q == '{') {
                depth++;
            } else if (*q == '}' && --depth == 0) {
                q++;
                break;
            }
        }
        if (!(text = ir_strndup(m->arena, p, (size_t)(q - p))))
            return ir_oom(d, NULL);
    }
    IrDiag tmp = {0};
    IrStatus st = ir_sdy_parse_meshes(m->arena, text, out, &tmp);
    return st == IR_OK ? IR_OK : place(m, (IrPos){0, 0}, "xla.sdy.meshes", &tmp, d);
}

/* ---- shardings compared by what they mean ---- */

/* One leaf sharding seen as (tile dims, subgroup types, devices), with
 * size-1 subgroup dims dropped and a single tile read as replicated or
 * manual. */
typedef struct View {
    IrShardingKind kind;
    int32_t ntile, nsub;
    int64_t tile[IR_MAX_RANK + 4];
    IrSubgroupType sub[4];
    const int64_t *devices;
    int64_t ndevices, device;
} View;

static void view_of(const IrSharding *s, View *v)
{
    memset(v, 0, sizeof *v);
    v->kind = s->kind;
    v->device = s->device;
    if (s->kind != SHD_TILED)
        return;
    int32_t rank = ir_sharding_data_rank(s);
    int64_t tiles = 1;
    bool manual = false, rep = false;
    for (int32_t i = 0; i < rank && i < IR_MAX_RANK; i++) {
        v->tile[v->ntile++] = s->tile[i];
        tiles *= s->tile[i];
    }
    for (int32_t i = 0; i < s->nsubgroup && v->nsub < 4; i++) {
        if (s->tile[rank + i] == 1)
            continue;
        v->tile[v->ntile++] = s->tile[rank + i];
        v->sub[v->nsub++] = s->subgroup[i];
        manual |= s->subgroup[i] == SUBGROUP_MANUAL;
        rep |= s->subgroup[i] == SUBGROUP_REPLICATED;
    }
    v->devices = s->devices;
    v->ndevices = s->ndevices;
    if (tiles == 1 && !(manual && rep))
        v->kind = manual ? SHD_MANUAL : SHD_REPLICATED;
}

static bool same_leaf(const IrSharding *a, const IrSharding *b)
{
    View x, y;
    view_of(a, &x);
    view_of(b, &y);
    if (x.kind != y.kind)
        return false;
    if (x.kind == SHD_MAXIMAL)
        return x.device == y.device;
    if (x.kind != SHD_TILED)
        return true;
    if (x.ntile != y.ntile || x.nsub != y.nsub || x.ndevices != y.ndevices)
        return false;
    for (int32_t i = 0; i < x.ntile; i++)
        if (x.tile[i] != y.tile[i])
            return false;
    for (int32_t i = 0; i < x.nsub; i++)
        if (x.sub[i] != y.sub[i])
            return false;
    for (int64_t i = 0; x.devices != y.devices && i < x.ndevices; i++)
        if (x.devices[i] != y.devices[i])
            return false;
    return true;
}

/* Leaf l of a sharding for `shape` (a single sharding serves every leaf). */
static const IrSharding *leaf_of(const IrSharding *s, int32_t l)
{
    return s->kind == SHD_TUPLE ? (l < s->ntuple ? &s->tuple[l] : NULL) : s;
}

static bool same_sharding(const IrSharding *a, const IrSharding *b, const IrShape *shape)
{
    int32_t n = shape->type == IR_TUPLE ? ir_shape_leaf_count(shape) : 1;
    if (n == 0)
        return true;
    for (int32_t l = 0; l < n; l++) {
        const IrSharding *x = leaf_of(a, l), *y = leaf_of(b, l);
        if (!x || !y || !same_leaf(x, y))
            return false;
    }
    return true;
}

/* A per-value sharding (one per result) laid over `shape`: one value, a
 * non-tuple shape -> that sharding; a tuple shape -> one per leaf, each
 * result's sharding repeated over its leaves. NULL with *why set when the
 * counts differ. */
static IrSharding *fit(IrArena *a, IrSharding *s, const IrShape *shape, const char **why)
{
    if (s->kind != SHD_TUPLE)
        return s;
    if (shape->type != IR_TUPLE) {
        *why = "one sharding per result, and this instruction has one result";
        return s->ntuple == 1 ? &s->tuple[0] : NULL;
    }
    if (shape->ntuple == 0 && s->ntuple <= 1)
        return s; /* XLA: a maximal sharding on a result-less custom-call */
    if (s->ntuple != shape->ntuple) {
        *why = "one sharding per element of the instruction's tuple";
        return NULL;
    }
    int32_t nl = ir_shape_leaf_count(shape);
    IrSharding *t = ir_alloc(a, sizeof *t);
    IrSharding *leaves = ir_alloc_array(a, (size_t)(nl ? nl : 1), sizeof *leaves);
    if (!t || !leaves)
        return NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < shape->ntuple; i++) {
        int32_t el = shape->tuple[i].type == IR_TUPLE ? ir_shape_leaf_count(&shape->tuple[i]) : 1;
        for (int32_t j = 0; j < el; j++)
            leaves[k++] = s->tuple[i];
    }
    *t = (IrSharding){.kind = SHD_TUPLE, .ntuple = nl, .tuple = leaves};
    return t;
}

/* ---- the walk ---- */

typedef struct Import {
    IrModule *m;
    IrSdyMeshes meshes;
    IrDiag *d;
    /* per computation: the manual axes of a shard_map body (n == 0: none) */
    IrSdyManual *manual;
    int64_t budget; /* device-list entries the module's shardings may still allocate */
} Import;

/* Parse attribute `key` of x as a sharding (manual axes of its context). */
static IrStatus attr_sharding(Import *im, const IrInstr *x, const char *key, const IrSdyManual *man,
                              const IrShape *shape, IrSharding *out)
{
    IrDiag tmp = {0};
    IrStatus st = ir_sdy_parse_sharding(im->m->arena, &im->meshes, man && man->n ? man : NULL,
                                        ir_frontend_attr(x, key), shape, &im->budget, out, &tmp);
    return st == IR_OK ? IR_OK : place(im->m, x->pos, key, &tmp, im->d);
}

/* xla.sdy.sharding of one instruction. */
static IrStatus value_sharding(Import *im, IrInstr *x, const IrSdyManual *man)
{
    IrModule *m = im->m;
    IrSharding s;
    IrStatus st = attr_sharding(im, x, "xla.sdy.sharding", man, &x->shape, &s);
    if (st != IR_OK)
        return st;
    const char *why = "";
    IrSharding *tmp = ir_alloc(m->arena, sizeof *tmp);
    if (!tmp)
        return ir_oom(im->d, NULL);
    *tmp = s;
    IrSharding *f = fit(m->arena, tmp, &x->shape, &why);
    if (!f)
        return ir_error(im->d, IR_EINPUT, m->file, m->src, value_pos(m, x->pos, "xla.sdy.sharding", 0),
                        "xla.sdy.sharding of '%s' gives %d shardings: %s", x->name,
                        tmp->kind == SHD_TUPLE ? (int)tmp->ntuple : 1, why);
    /* In a shard_map body the sharding= XLA's export writes leaves the
     * manual axes out; either reading agrees, the manual one is kept. */
    bool agree = x->sharding && same_sharding(x->sharding, f, &x->shape);
    if (x->sharding && !agree && man && man->n) {
        IrSharding plain;
        if ((st = attr_sharding(im, x, "xla.sdy.sharding", NULL, &x->shape, &plain)) != IR_OK)
            return st;
        IrSharding *pt = ir_alloc(m->arena, sizeof *pt);
        if (!pt)
            return ir_oom(im->d, NULL);
        *pt = plain;
        const IrSharding *pf = fit(m->arena, pt, &x->shape, &why);
        agree = pf && same_sharding(x->sharding, pf, &x->shape);
    }
    if (x->sharding && !agree) {
        char *a = ir_sharding_str(x->sharding), *b = ir_sharding_str(f);
        st = ir_error(im->d, IR_EINPUT, m->file, m->src, value_pos(m, x->pos, "xla.sdy.sharding", 0),
                      "the shardings of '%s' disagree: sharding=%s, but xla.sdy.sharding means %s", x->name,
                      a ? a : "?", b ? b : "?");
        ts_free(a);
        ts_free(b);
        return st;
    }
    x->sharding = f;
    return drop_attr(m->arena, x, "xla.sdy.sharding") ? IR_OK : ir_oom(im->d, NULL);
}

/* xla.sdy.ShardingGroup(v): v joins shard_as group N. */
static IrStatus sharding_group(Import *im, IrComputation *c, IrInstr *x)
{
    IrModule *m = im->m;
    const char *v = ir_frontend_attr(x, "xla.sdy.sharding_group_id");
    char *end = NULL;
    long long id = v ? strtoll(v, &end, 10) : -1;
    if (!v || end == v || id < 0 || x->nopnd != 1)
        return ir_error(im->d, IR_EINPUT, m->file, m->src, x->pos,
                        "xla.sdy.ShardingGroup '%s' needs one operand and xla.sdy.sharding_group_id=\"N\"",
                        x->name);
    IrInstr *o = &c->instr[x->opnd[0]];
    IrSharding *s = ir_alloc(m->arena, sizeof *s);
    if (!s)
        return ir_oom(im->d, NULL);
    if (o->sharding)
        *s = *o->sharding;
    else
        *s = (IrSharding){.kind = SHD_REPLICATED, .unknown = true};
    s->shard_group = 1;
    s->shard_group_id = id;
    o->sharding = s;
    return IR_OK;
}

static bool same_manual(const IrSdyManual *a, const IrSdyManual *b)
{
    if (a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n; i++)
        if (strcmp(a->axis[i], b->axis[i]) != 0)
            return false;
    return true;
}

/* Each manual axis is an axis of one of the module's meshes: an error at
 * the axis in the attribute (it was reported in the in_shardings of the
 * other end, at a sharding that names no such axis). */
static IrStatus manual_axes_known(Import *im, const IrInstr *x, const char *text, const IrSdyManual *man)
{
    for (int32_t i = 0; i < man->n; i++) {
        bool found = false;
        for (int32_t k = 0; k < im->meshes.n && !found; k++)
            for (int32_t a = 0; a < im->meshes.mesh[k].naxis && !found; a++)
                found = strcmp(im->meshes.mesh[k].axis[a], man->axis[i]) == 0;
        if (found || im->meshes.n == 0)
            continue;
        char q[80];
        snprintf(q, sizeof q, "\"%.60s\"", man->axis[i]);
        const char *at = strstr(text, q);
        return ir_error(im->d, IR_EINPUT, im->m->file, im->m->src,
                        value_pos(im->m, x->pos, "xla.sdy.manual_axes", at ? (int32_t)(at - text) : 0),
                        "in xla.sdy.manual_axes: manual axis \"%s\" is in none of the module's meshes", man->axis[i]);
    }
    return IR_OK;
}

/* The manual axes of every shard_map body, from its call's
 * GlobalToLocalShape (or LocalToGlobalShape). */
static IrStatus body_contexts(Import *im)
{
    IrModule *m = im->m;
    for (int32_t ci = 0; ci < m->ncomp; ci++) {
        IrComputation *c = m->comp[ci];
        for (int32_t i = 0; i < c->ninstr; i++) {
            IrInstr *x = &c->instr[i];
            if (!(is_target(x, "xla.sdy.GlobalToLocalShape") || is_target(x, "xla.sdy.LocalToGlobalShape")))
                continue;
            const char *t = ir_frontend_attr(x, "xla.sdy.manual_axes");
            if (!t)
                return ir_error(im->d, IR_EINPUT, m->file, m->src, x->pos, "%s '%s' has no xla.sdy.manual_axes",
                                x->a.x->custom_call_target, x->name);
            IrSdyManual man;
            IrDiag tmp = {0};
            if (ir_sdy_parse_manual_axes(m->arena, t, &man, &tmp) != IR_OK)
                return place(m, x->pos, "xla.sdy.manual_axes", &tmp, im->d);
            IrStatus st = manual_axes_known(im, x, t, &man);
            if (st != IR_OK)
                return st;
            /* the body: the call among x's users (G) or operands (L) */
            for (int32_t j = 0; j < c->ninstr; j++) {
                IrInstr *call = &c->instr[j];
                if (call->op != OP_CALL || call->ncalled != 1 ||
                    strncmp(m->comp[call->called[0]]->name, BODY_PREFIX, strlen(BODY_PREFIX)) != 0)
                    continue;
                bool linked = false;
                for (int32_t k = 0; k < call->nopnd && !linked; k++) {
                    const IrInstr *o = &c->instr[call->opnd[k]];
                    linked = call->opnd[k] == i || (o->op == OP_GET_TUPLE_ELEMENT && o->opnd[0] == i);
                }
                for (int32_t k = 0; k < x->nopnd && !linked; k++) {
                    const IrInstr *o = &c->instr[x->opnd[k]];
                    linked = x->opnd[k] == j || (o->op == OP_GET_TUPLE_ELEMENT && o->opnd[0] == j);
                }
                if (!linked)
                    continue;
                /* both ends of one shard_map name one set of axes (the
                 * last read was taken, whatever the first said) */
                const IrSdyManual *had = &im->manual[call->called[0]];
                if (had->n > 0 && !same_manual(had, &man))
                    return ir_error(im->d, IR_EINPUT, m->file, m->src, value_pos(m, x->pos, "xla.sdy.manual_axes", 0),
                                    "the manual axes of %s '%s' are not those of the other end of its shard_map "
                                    "(the call of %s): both name the same axes",
                                    x->a.x->custom_call_target, x->name, m->comp[call->called[0]]->name);
                im->manual[call->called[0]] = man;
            }
        }
    }
    return IR_OK;
}

/* The Shardy attributes of a value tessel reads, and the others XLA's
 * round trip writes that it passes over (they steer Shardy only). */
static const char *const read_keys[] = {"xla.sdy.sharding", "xla.sdy.sharding_group_id", "xla.sdy.manual_axes",
                                        "xla.sdy.in_shardings", "xla.sdy.out_shardings", "xla.sdy.allowed_direction"};
static const char *const other_keys[] = {
    "xla.sdy.sharding_rule", "xla.sdy.propagation_edges", "xla.sdy.block_arg_propagation_edges",
    "xla.sdy.result_propagation_edges", "xla.sdy.frontend_attributes", "xla.sdy.use_tuple_args",
    "xla.sdy.import_mhlo_shardings", "xla.sdy.has_unreduced_axes", "xla.sdy.tuple_sharding", NULL};

static const char *read_key_at(void *ctx, int32_t i)
{
    (void)ctx;
    return read_keys[i];
}

/* A frontend attribute xla.sdy.K that is a slip of one tessel reads
 * (xla.sdy.shardng): an error naming it. It was passed over like the keys
 * tessel does not read, and the value ran unsharded without a word. Keys
 * far from every read one are let be (XLA writes others). */
static IrStatus slipped_key(Import *im, const IrInstr *x)
{
    for (int32_t k = 0; k < x->a.nfrontend; k++) {
        const char *key = x->a.frontend[k].key;
        if (strncmp(key, "xla.sdy.", 8) != 0 || ir_str_index(key, other_keys) >= 0)
            continue;
        int32_t nread = (int32_t)(sizeof read_keys / sizeof read_keys[0]);
        bool known = false;
        for (int32_t r = 0; r < nread; r++)
            known |= strcmp(key, read_keys[r]) == 0;
        const char *near = known ? NULL : ir_nearest(key, strlen(key), nread, read_key_at, NULL);
        if (!near || ir_edit_distance(key, strlen(key), near, strlen(near)) > 2)
            continue;
        IrPos at = value_pos(im->m, x->pos, key, 0); /* the value's; the key stands before its '=' */
        if (at.col > (int32_t)strlen(key) + 1)
            at.col -= (int32_t)strlen(key) + 1;
        return ir_error(im->d, IR_EINPUT, im->m->file, im->m->src, at,
                        "'%s' has the frontend attribute %s, which tessel does not read; did you mean %s?", x->name,
                        key, near);
    }
    return IR_OK;
}

static IrStatus read_values(Import *im)
{
    IrModule *m = im->m;
    for (int32_t ci = 0; ci < m->ncomp; ci++) {
        IrComputation *c = m->comp[ci];
        for (int32_t i = 0; i < c->ninstr; i++) {
            IrInstr *x = &c->instr[i];
            IrStatus st = slipped_key(im, x);
            if (st != IR_OK)
                return st;
            /* XLA's own tests put xla.sdy.sharding beside sharding= in
             * modules without meshes: there sharding= is all there is. */
            if (ir_frontend_attr(x, "xla.sdy.sharding") && (im->meshes.n > 0 || !x->sharding))
                st = value_sharding(im, x, &im->manual[ci]);
            if (st == IR_OK && is_target(x, "xla.sdy.ShardingGroup"))
                st = sharding_group(im, c, x);
            if (st != IR_OK)
                return st;
        }
    }
    return IR_OK;
}

/* ---- shard_map into GSPMD's manual region ---- */

/* A computation being rewritten: value map (old index -> the index that
 * stands for it) and instructions to remove. */
typedef struct Rewrite {
    int32_t *map;
    bool *dead;
    int32_t n, cap;
} Rewrite;

static bool rw_grow(Rewrite *r, int32_t n)
{
    if (n <= r->cap)
        return true;
    int32_t cap = n * 2 + 8;
    int32_t *map = ts_realloc(r->map, (size_t)cap * sizeof *map);
    if (map)
        r->map = map;
    bool *dead = map ? ts_realloc(r->dead, (size_t)cap * sizeof *dead) : NULL;
    if (!map || !dead)
        return false;
    r->dead = dead;
    for (int32_t i = r->cap; i < cap; i++) {
        r->map[i] = i;
        r->dead[i] = false;
    }
    r->cap = cap;
    return true;
}

static int32_t resolve(const Rewrite *r, int32_t i)
{
    for (int32_t k = 0; k < r->cap && i < r->cap && r->map[i] != i; k++)
        i = r->map[i];
    return i;
}

/* Add a custom-call `target`(opnd) of `shape` with sharding s; -1 on OOM. */
static int32_t add_marker(IrModule *m, IrComputation *c, const char *target, int32_t opnd, const IrShape *shape,
                          const IrSharding *s, IrPos pos)
{
    IrAttrsX *ax = ir_alloc(m->arena, sizeof *ax);
    IrSharding *sc = ir_alloc(m->arena, sizeof *sc);
    if (!ax || !sc)
        return -1;
    *sc = *s;
    ax->custom_call_target = target;
    ax->feature_group_count = ax->batch_group_count = 1;
    IrInstr ins = {.op = OP_CUSTOM_CALL, .sharding = sc, .pos = pos};
    ins.a.x = ax;
    ins.name = ir_unique_name(m, "shard_map");
    ins.nopnd = 1;
    ins.opnd = ir_alloc_array(m->arena, 1, sizeof(int32_t));
    if (!ins.name || !ins.opnd || ir_shape_copy(m->arena, &ins.shape, shape) != IR_OK)
        return -1;
    ins.opnd[0] = opnd;
    return ir_add_instr(m, c, &ins);
}

static const IrShape *element(const IrShape *s, int32_t i)
{
    return s->type == IR_TUPLE ? &s->tuple[i] : s;
}

/* Inline body b of call `k` of c (its parameters standing for the call's
 * operands); returns the index of what stands for the root, -1 on OOM, -2
 * when a parameter has no operand to stand for it. */
static int32_t inline_body(IrModule *m, IrComputation *c, int32_t k, const IrComputation *b, bool full_manual,
                           Rewrite *rw)
{
    int32_t *bm = ts_malloc((size_t)(b->ninstr ? b->ninstr : 1) * sizeof *bm);
    IrSharding *man = ir_alloc(m->arena, sizeof *man);
    if (!bm || !man) {
        ts_free(bm);
        return -1;
    }
    man->kind = SHD_MANUAL;
    for (int32_t i = 0; i < b->ninstr; i++)
        bm[i] = -1;
    int32_t root = -1;
    for (int32_t i = 0; i < b->ninstr; i++) {
        const IrInstr *src = &b->instr[i];
        if (src->op == OP_PARAMETER) {
            int64_t p = src->a.parameter_number;
            bm[i] = p >= 0 && p < c->instr[k].nopnd ? c->instr[k].opnd[p] : -1;
        }
    }
    /* In definition order operands may come later: copy all, then fix. */
    int32_t first = c->ninstr;
    for (int32_t i = 0; i < b->ninstr; i++) {
        const IrInstr *src = &b->instr[i];
        if (src->op == OP_PARAMETER)
            continue;
        IrInstr ins = *src;
        ins.name = ir_unique_name(m, src->name);
        ins.opnd = ins.nopnd ? ir_alloc_array(m->arena, (size_t)ins.nopnd, sizeof(int32_t)) : NULL;
        if (!ins.name || (ins.nopnd && !ins.opnd)) {
            ts_free(bm);
            return -1;
        }
        if (ins.nopnd)
            memcpy(ins.opnd, src->opnd, (size_t)ins.nopnd * sizeof(int32_t));
        if (!ins.sharding && full_manual)
            ins.sharding = man;
        if (ins.a.x->control_predecessors.n > 0) {
            IrAttrsX *ax = ir_attrs_x_edit(m->arena, &ins.a);
            if (!ax) {
                ts_free(bm);
                return -1;
            }
            ax->control_predecessors = (IrI64List){0};
        }
        int32_t at = ir_add_instr(m, c, &ins);
        if (at < 0 || !rw_grow(rw, c->ninstr)) {
            ts_free(bm);
            return -1;
        }
        bm[i] = at;
    }
    for (int32_t at = first; at < c->ninstr; at++)
        for (int32_t o = 0; o < c->instr[at].nopnd; o++) {
            int32_t v = c->instr[at].opnd[o];
            if (v < 0 || v >= b->ninstr || bm[v] < 0) {
                ts_free(bm);
                return -2;
            }
            c->instr[at].opnd[o] = bm[v];
        }
    root = b->root >= 0 ? bm[b->root] : -2;
    ts_free(bm);
    return root;
}

/* The GlobalToLocalShape an operand of the body call comes from. */
static int32_t source_g(const IrComputation *c, int32_t o)
{
    const IrInstr *x = &c->instr[o];
    if (x->op == OP_GET_TUPLE_ELEMENT)
        x = &c->instr[o = x->opnd[0]];
    return is_target(x, "xla.sdy.GlobalToLocalShape") ? o : -1;
}

/* The LocalToGlobalShape that takes the call's results. */
static int32_t find_l(const IrComputation *c, int32_t k)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *x = &c->instr[i];
        if (!is_target(x, "xla.sdy.LocalToGlobalShape"))
            continue;
        for (int32_t j = 0; j < x->nopnd; j++) {
            const IrInstr *o = &c->instr[x->opnd[j]];
            if (x->opnd[j] == k || (o->op == OP_GET_TUPLE_ELEMENT && o->opnd[0] == k))
                return i;
        }
    }
    return -1;
}

/* Map every user of tuple element i of instruction `from` (a
 * get-tuple-element), or `from` itself when it is not a tuple, to `to`. */
static IrStatus stand_for(Import *im, const IrComputation *c, int32_t from, int32_t i, int32_t to, Rewrite *rw)
{
    for (int32_t u = 0; u < c->ninstr; u++) {
        const IrInstr *ux = &c->instr[u];
        if (ux->op == OP_GET_TUPLE_ELEMENT && ux->opnd[0] == from && ux->a.tuple_index == i) {
            /* the element's shape, as the verifier would have checked
             * had the get-tuple-element stayed (it goes with the rewrite:
             * a local shape written wrong was dropped without a word) */
            if (!ir_shape_compatible(&ux->shape, &c->instr[to].shape)) {
                char *a = ir_shape_str(&ux->shape, false), *b = ir_shape_str(&c->instr[to].shape, false);
                IrStatus st = ir_error(im->d, IR_EINPUT, im->m->file, im->m->src, ux->pos,
                                       "%s: declared shape %s does not match element %d of '%s', %s", ux->name,
                                       a ? a : "?", (int)i, c->instr[from].name, b ? b : "?");
                ts_free(a);
                ts_free(b);
                return st;
            }
            rw->map[u] = to;
            rw->dead[u] = true;
        }
    }
    if (c->instr[from].shape.type != IR_TUPLE)
        rw->map[from] = to;
    return IR_OK;
}

/* A per-value attribute of x with one sharding per operand, read with the
 * manual axes `man` (NULL: none). */
static IrStatus per_operand(Import *im, const IrComputation *c, const IrInstr *x, const char *key,
                            const IrSdyManual *man, IrSharding *out)
{
    IrModule *m = im->m;
    if (!ir_frontend_attr(x, key))
        return ir_error(im->d, IR_EINPUT, m->file, m->src, x->pos, "'%s' has no %s", x->name, key);
    /* one sharding per operand, each naming its operand's dimensions */
    IrShape *el = ts_malloc((size_t)(x->nopnd > 0 ? x->nopnd : 1) * sizeof *el);
    if (!el)
        return ir_oom(im->d, NULL);
    for (int32_t i = 0; i < x->nopnd; i++)
        el[i] = c->instr[x->opnd[i]].shape;
    IrShape opnds = {.type = IR_TUPLE, .ntuple = x->nopnd, .tuple = el};
    IrStatus st = attr_sharding(im, x, key, man, &opnds, out);
    ts_free(el);
    if (st == IR_OK && (out->kind != SHD_TUPLE || out->ntuple != x->nopnd))
        st = ir_error(im->d, IR_EINPUT, m->file, m->src, value_pos(m, x->pos, key, 0),
                      "%s of '%s' gives %d shardings for %d operands", key, x->name,
                      out->kind == SHD_TUPLE ? (int)out->ntuple : 1, (int)x->nopnd);
    return st;
}

/* GlobalToLocalShape g: per operand x_i, Sharding(x_i) with its
 * in-sharding, then SPMDFullToShardShape (manual) standing for element i. */
static IrStatus shard_map_inputs(Import *im, IrComputation *c, int32_t g, const IrSdyManual *man, Rewrite *rw)
{
    IrModule *m = im->m;
    IrSharding in, inm;
    IrStatus st = per_operand(im, c, &c->instr[g], "xla.sdy.in_shardings", NULL, &in);
    if (st == IR_OK)
        st = per_operand(im, c, &c->instr[g], "xla.sdy.in_shardings", man, &inm);
    for (int32_t i = 0; st == IR_OK && i < c->instr[g].nopnd; i++) {
        const IrInstr *gx = &c->instr[g];
        IrShape local = *element(&gx->shape, i), full = c->instr[gx->opnd[i]].shape;
        IrPos pos = gx->pos;
        int32_t s = add_marker(m, c, "Sharding", gx->opnd[i], &full, &in.tuple[i], pos);
        int32_t f = s < 0 ? -1 : add_marker(m, c, "SPMDFullToShardShape", s, &local, &inm.tuple[i], pos);
        if (f < 0 || !rw_grow(rw, c->ninstr))
            return ir_oom(im->d, NULL);
        st = stand_for(im, c, g, i, f, rw);
    }
    rw->dead[g] = true;
    return st;
}

/* LocalToGlobalShape l: per operand v_i (a body result), Sharding(v_i)
 * with its manual out-sharding `outm`, then SPMDShardToFullShape with the
 * full one, standing for element i; a tuple-shaped l becomes the tuple of
 * them (it may be used whole). */
static IrStatus shard_map_outputs(Import *im, IrComputation *c, int32_t l, const IrSharding *outm, Rewrite *rw)
{
    IrModule *m = im->m;
    IrSharding out;
    IrStatus st = per_operand(im, c, &c->instr[l], "xla.sdy.out_shardings", NULL, &out);
    if (st != IR_OK)
        return st;
    int32_t nout = c->instr[l].nopnd;
    int32_t *t = ts_malloc((size_t)(nout ? nout : 1) * sizeof *t);
    if (!t)
        return ir_oom(im->d, NULL);
    for (int32_t i = 0; i < nout; i++) {
        const IrInstr *lx = &c->instr[l];
        int32_t v = lx->opnd[i];
        IrShape shape = *element(&lx->shape, i), local = c->instr[v].shape;
        IrPos pos = lx->pos;
        int32_t mk = add_marker(m, c, "Sharding", v, &local, &outm->tuple[i], pos);
        t[i] = mk < 0 ? -1 : add_marker(m, c, "SPMDShardToFullShape", mk, &shape, &out.tuple[i], pos);
        if (t[i] < 0 || !rw_grow(rw, c->ninstr)) {
            ts_free(t);
            return ir_oom(im->d, NULL);
        }
        if ((st = stand_for(im, c, l, i, t[i], rw)) != IR_OK) {
            ts_free(t);
            return st;
        }
    }
    IrInstr *lt = &c->instr[l];
    if (lt->shape.type != IR_TUPLE) {
        rw->dead[l] = true;
    } else {
        memcpy(lt->opnd, t, (size_t)nout * sizeof *t);
        lt->op = OP_TUPLE;
        lt->a = (IrAttrs){.x = &ir_no_attrs_x};
        lt->sharding = NULL;
    }
    ts_free(t);
    return IR_OK;
}

/* One shard_map: the call `k` of a manual_computation_body in computation
 * ci, between its GlobalToLocalShape and LocalToGlobalShape. */
static IrStatus shard_map(Import *im, int32_t ci, int32_t k, Rewrite *rw)
{
    IrModule *m = im->m;
    IrComputation *c = m->comp[ci];
    int32_t bi = c->instr[k].called[0];
    const IrSdyManual *man = &im->manual[bi];
    int32_t g = -1;
    for (int32_t j = 0; j < c->instr[k].nopnd && g < 0; j++)
        g = source_g(c, c->instr[k].opnd[j]);
    int32_t l = find_l(c, k);
    if ((c->instr[k].nopnd > 0 && g < 0) || l < 0)
        return ir_error(im->d, IR_EINPUT, m->file, m->src, c->instr[k].pos,
                        "the call of %s '%s' is not between xla.sdy.GlobalToLocalShape and "
                        "xla.sdy.LocalToGlobalShape",
                        m->comp[bi]->name, c->instr[k].name);
    IrStatus st = g >= 0 ? shard_map_inputs(im, c, g, man, rw) : IR_OK;
    /* Fully manual when the out shardings read with the manual axes are
     * {manual} (every mesh axis is manual): the body's values without a
     * sharding of their own are {manual}. */
    IrSharding outm;
    if (st == IR_OK)
        st = per_operand(im, c, &c->instr[l], "xla.sdy.out_shardings", man, &outm);
    if (st != IR_OK)
        return st;
    bool full = outm.ntuple > 0 && outm.tuple[0].kind == SHD_MANUAL;
    for (int32_t j = 0; j < c->instr[k].nopnd; j++)
        c->instr[k].opnd[j] = resolve(rw, c->instr[k].opnd[j]);
    int32_t r = inline_body(m, c, k, m->comp[bi], full, rw);
    if (r == -2)
        return ir_error(im->d, IR_EINPUT, m->file, m->src, c->instr[k].pos,
                        "%s has parameters that the call '%s' gives no operand for", m->comp[bi]->name,
                        c->instr[k].name);
    if (r < 0 || !rw_grow(rw, c->ninstr))
        return ir_oom(im->d, NULL);
    rw->map[k] = r;
    rw->dead[k] = true;
    return shard_map_outputs(im, c, l, &outm, rw);
}

/* Apply the value map to every operand and the root, then drop the dead
 * instructions (indices renumbered). */
static IrStatus compact(IrModule *m, IrComputation *c, Rewrite *rw, IrDiag *d)
{
    int32_t n = c->ninstr;
    if (!rw_grow(rw, n))
        return ir_oom(d, NULL);
    for (int32_t i = 0; i < n; i++)
        for (int32_t o = 0; o < c->instr[i].nopnd; o++)
            c->instr[i].opnd[o] = resolve(rw, c->instr[i].opnd[o]);
    int32_t *renum = ts_malloc((size_t)(n ? n : 1) * sizeof *renum);
    if (!renum)
        return ir_oom(d, NULL);
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++) {
        renum[i] = rw->dead[i] ? -1 : w;
        if (!rw->dead[i])
            c->instr[w++] = c->instr[i];
    }
    c->ninstr = w;
    for (int32_t i = 0; i < w; i++) {
        IrInstr *x = &c->instr[i];
        for (int32_t o = 0; o < x->nopnd; o++)
            x->opnd[o] = renum[x->opnd[o]];
        if (x->a.x->control_predecessors.n > 0) {
            IrAttrsX *ax = ir_attrs_x_edit(m->arena, &x->a);
            if (!ax) {
                ts_free(renum);
                return ir_oom(d, NULL);
            }
            IrI64List *cp = &ax->control_predecessors;
            int64_t *v = ir_alloc_array(m->arena, (size_t)cp->n, sizeof(int64_t));
            if (!v) {
                ts_free(renum);
                return ir_oom(d, NULL);
            }
            int32_t k = 0;
            for (int32_t j = 0; j < cp->n; j++)
                if (renum[cp->v[j]] >= 0)
                    v[k++] = renum[cp->v[j]];
            cp->v = v;
            cp->n = k;
        }
    }
    if (c->root >= 0)
        c->root = renum[resolve(rw, c->root)];
    for (int32_t p = 0; p < c->nparam; p++)
        if (c->param[p] >= 0)
            c->param[p] = renum[c->param[p]];
    ts_free(renum);
    return IR_OK;
}

/* Rewrite every shard_map of computation ci; remove ShardingGroups. */
static IrStatus rewrite_computation(Import *im, int32_t ci)
{
    IrModule *m = im->m;
    IrComputation *c = m->comp[ci];
    bool any = false;
    for (int32_t i = 0; i < c->ninstr && !any; i++)
        any = is_target(&c->instr[i], "xla.sdy.ShardingGroup") ||
              (c->instr[i].op == OP_CALL && c->instr[i].ncalled == 1 &&
               strncmp(m->comp[c->instr[i].called[0]]->name, BODY_PREFIX, strlen(BODY_PREFIX)) == 0);
    if (!any)
        return IR_OK;
    Rewrite rw = {0};
    IrStatus st = rw_grow(&rw, c->ninstr) ? IR_OK : ir_oom(im->d, NULL);
    int32_t n0 = c->ninstr;
    for (int32_t i = 0; st == IR_OK && i < n0; i++) {
        IrInstr *x = &c->instr[i];
        if (is_target(x, "xla.sdy.ShardingGroup"))
            rw.dead[i] = true;
        else if (x->op == OP_CALL && x->ncalled == 1 &&
                 strncmp(m->comp[x->called[0]]->name, BODY_PREFIX, strlen(BODY_PREFIX)) == 0)
            st = shard_map(im, ci, i, &rw);
    }
    if (st == IR_OK)
        st = compact(m, c, &rw, im->d);
    ts_free(rw.map);
    ts_free(rw.dead);
    return st;
}

/* The attributes read, off every instruction. */
static IrStatus strip(Import *im)
{
    static const char *const keys[] = {"xla.sdy.in_shardings", "xla.sdy.out_shardings", "xla.sdy.manual_axes",
                                       "xla.sdy.sharding_group_id"};
    IrModule *m = im->m;
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        for (int32_t i = 0; i < m->comp[ci]->ninstr; i++)
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
                if (!drop_attr(m->arena, &m->comp[ci]->instr[i], keys[k]))
                    return ir_oom(im->d, NULL);
    return IR_OK;
}

/* Where mesh `name` is defined in the source: the first `name` after
 * "xla.sdy.meshes" that is followed by '=' (where xla.sdy.meshes is, when
 * not found). */
static IrPos mesh_pos(const IrModule *m, const char *name)
{
    const char *text = strstr(m->src, "xla.sdy.meshes");
    if (!text)
        return (IrPos){0, 0};
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        const char *q = p + n;
        while (*q == ' ' || *q == '"' || *q == '\\')
            q++;
        bool starts = p[-1] == '{' || p[-1] == ' ' || p[-1] == ',' || p[-1] == '"';
        if (starts && *q == '=')
            return pos_of_offset(m->src, (size_t)(p - m->src));
    }
    return pos_of_offset(m->src, (size_t)(text - m->src));
}

IrStatus ir_sdy_check_mesh_fits(const IrModule *m, int64_t ndev, int64_t used, bool from_header, IrDiag *d)
{
    if (used <= ndev || !m->src)
        return IR_OK;
    IrModule *mm = (IrModule *)m; /* header_meshes only allocates in the arena */
    IrSdyMeshes ms;
    IrDiag tmp = {0};
    if (header_meshes(mm, &ms, &tmp) != IR_OK) {
        ir_diag_clear(&tmp);
        return IR_OK;
    }
    /* the mesh as wide as the sharding (its largest device id + 1) */
    const IrSdyMesh *pick = NULL;
    for (int32_t i = 0; i < ms.n && !pick; i++) {
        const IrSdyMesh *x = &ms.mesh[i];
        int64_t w = x->ndevice;
        for (int64_t k = 0; x->device_ids && k < x->ndevice; k++)
            w = x->device_ids[k] + 1 > w ? x->device_ids[k] + 1 : w;
        if (w == used)
            pick = x;
    }
    if (!pick)
        return IR_OK;
    const char *where = from_header ? "num_partitions=" : "--num-partitions ";
    if (pick->ndevice != used) /* device_ids beyond its count: a maximal mesh <[], device_ids=[5]> */
        return ir_error(d, IR_EINPUT, m->file, m->src, mesh_pos(m, pick->name),
                        "mesh @%s names device %lld but this run has %lld partitions (%s%lld%s), devices 0 to %lld: "
                        "%s%lld%s, or give the mesh device ids below %lld",
                        pick->name, (long long)used - 1, (long long)ndev, where, (long long)ndev,
                        from_header ? " in the module header" : "", (long long)ndev - 1,
                        from_header ? "write num_partitions=" : "pass --num-partitions ", (long long)used,
                        from_header ? " in the header" : "", (long long)ndev);
    return ir_error(d, IR_EINPUT, m->file, m->src, mesh_pos(m, pick->name),
                    "mesh @%s has %lld devices but this run has %lld partitions (%s%lld%s): a sharding over the mesh "
                    "puts a piece on each of its devices; %s%lld%s, or give the mesh %lld devices",
                    pick->name, (long long)used, (long long)ndev, where,
                    (long long)ndev, from_header ? " in the module header" : "",
                    from_header ? "write num_partitions=" : "pass --num-partitions ", (long long)used,
                    from_header ? " in the header" : "", (long long)ndev);
}

static bool has_sdy(const IrModule *m)
{
    for (int32_t ci = 0; ci < m->ncomp; ci++)
        for (int32_t i = 0; i < m->comp[ci]->ninstr; i++) {
            const IrInstr *x = &m->comp[ci]->instr[i];
            if (x->op == OP_CUSTOM_CALL && x->a.x->custom_call_target &&
                strncmp(x->a.x->custom_call_target, "xla.sdy.", 8) == 0)
                return true;
            for (int32_t k = 0; k < x->a.nfrontend; k++)
                if (strncmp(x->a.frontend[k].key, "xla.sdy.", 8) == 0)
                    return true;
        }
    return false;
}

IrStatus ir_sdy_import(IrModule *m, IrDiag *d)
{
    if (!has_sdy(m))
        return IR_OK;
    Import im = {.m = m, .d = d, .budget = LX_IOTA_BUDGET};
    IrStatus st = header_meshes(m, &im.meshes, d);
    if (st != IR_OK)
        return st;
    im.manual = ir_alloc_array(m->arena, (size_t)(m->ncomp ? m->ncomp : 1), sizeof *im.manual);
    if (!im.manual)
        return ir_oom(d, NULL);
    st = body_contexts(&im);
    if (st == IR_OK)
        st = read_values(&im);
    for (int32_t ci = 0; st == IR_OK && ci < m->ncomp; ci++)
        st = rewrite_computation(&im, ci);
    if (st == IR_OK)
        st = strip(&im);
    return st;
}
