/*
 * sdy.c: Shardy's sharding text, as JAX (Shardy is its partitioner since
 * 0.7) writes it into HLO through XLA's round-trip export, and XLA's named
 * (V3) sharding text, both read into tessel's IrSharding.
 *
 * Forms (openxla/shardy's attribute syntax; XLA's NamedSharding::ToString):
 *   meshes     {mesh = #sdy.mesh<["x"=2, "y"=4]>, m1 = #sdy.mesh<["a"=2], device_ids=[1,0]>,
 *               maximal = #sdy.mesh<[], device_ids=[3]>}
 *   sharding   #sdy.sharding<@mesh, [{"x"}, {"y", ?}p1, {?}], replicated={"z"}, unreduced={...}>
 *   per value  #sdy.sharding_per_value<[<@mesh, [{"x"}]>, <@mesh, []>]>
 *   mesh given inline instead of @name:  <mesh<["x"=2]>, [{"x"}]>
 *   sub-axis   "x":(2)4   (pre-size 2, size 4: devices along x in steps of 2, 4 of them)
 *   manual     #sdy<manual_axes{"x", "y"}>
 *   V3 (inside an HLO sharding={...}):  {@mesh<x=2,y=4>, [{x}, {y:(2)2, ?}], replicated={z}}
 *               with `device_ids=([4,2]T(1,0))` or `device_ids=(3,2,1,0)` after the mesh, and
 *               XLA's other mesh spelling mesh['x'=2,'y'=4]
 *
 * Conversion (XLA's convertToHloSharding in
 * xla/service/spmd/shardy/stablehlo_round_trip/export_shardings.cc):
 * every mesh axis is cut at the sub-axis boundaries the sharding uses, in
 * mesh order, major to minor ("x"=8 used as "x":(1)2 and "x":(2)4 gives the
 * pieces x(1)2, x(2)4). The device array (the mesh's device_ids, else
 * 0..n-1) is reshaped to those pieces and transposed so that the pieces
 * each dimension is sharded over come first (dimension by dimension, in the
 * order written: major to minor within a dimension), then the manual axes,
 * then every piece the sharding does not use (one replicated subgroup). The
 * tile shape is the product of each dimension's pieces, then the manual
 * product, then the replicated product. Example: mesh x=2, y=2 and
 * [{"y"}, {}]: pieces x, y; perm (y, x); tile [2,1,2] replicated; devices
 * of iota [2,2] transposed: 0,2,1,3 = {devices=[2,1,2]<=[2,2]T(1,0)
 * last_tile_dim_replicate}.
 *
 * Open dimensions and priorities change only how Shardy propagates; the
 * sharding is what is written (as XLA's export does). Replicated axes are
 * checked and add nothing. Unreduced axes are refused: XLA's export turns
 * them into replication, which would drop the partial sums they stand for.
 */
#include "lex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds that keep every table on the stack: axes of a mesh (and of one
 * dimension), and the pieces the mesh's axes are cut into. */
enum { SDY_MAX_AXES = 16, SDY_MAX_PIECES = IR_MAX_RANK };

/* One axis or sub-axis of a mesh: mesh axis `axis`, devices along it in
 * steps of `pre`, `size` of them (a full axis: pre 1, size the axis's). */
typedef struct AxisRef {
    int32_t axis;
    int64_t pre, size;
} AxisRef;

typedef struct DimSharding {
    int32_t n;
    AxisRef *ax;
} DimSharding;

/* What one <mesh, [dims], ...> says, before conversion. */
typedef struct Tensor {
    const IrSdyMesh *mesh;
    int32_t rank;
    DimSharding *dim;
    IrPos pos;
    size_t dims_start, dims_end; /* the text of '[' dims ']', for messages */
    AxisRef rep[SDY_MAX_AXES]; /* replicated={...}: checked against the dims' axes */
    int32_t nrep;
    IrPos rep_pos;
} Tensor;

/* ---- small lexer helpers ---- */

static bool is_byte(const Lexer *L, char c)
{
    return L->tok.kind == LX_OTHER && L->text[L->tok.start] == c;
}

static bool expect_byte(Lexer *L, char c, const char *what)
{
    if (!is_byte(L, c))
        return lx_expected(L, what);
    lx_next(L);
    return true;
}

/* A STRING token or, in the V3 spelling, a NAME (optionally in '...'). */
static bool axis_name(Lexer *L, bool v3, char **out)
{
    if (lx_is(L, LX_STRING))
        return lx_string(L, out, "axis name");
    if (!v3)
        return lx_expected(L, "a quoted axis name");
    bool quoted = is_byte(L, '\'');
    if (quoted)
        lx_next(L);
    if (!lx_is(L, LX_NAME))
        return lx_expected(L, "an axis name");
    if (!(*out = lx_dup(L, L->tok.start, L->tok.end)))
        return false;
    lx_next(L);
    return !quoted || expect_byte(L, '\'', "' to end the axis name");
}

/* ---- meshes ---- */

static int32_t mesh_axis(const IrSdyMesh *m, const char *name)
{
    for (int32_t i = 0; i < m->naxis; i++)
        if (strcmp(m->axis[i], name) == 0)
            return i;
    return -1;
}

/* '[' (name '=' int (',' ...)*)? ']' into m's axes. */
static bool mesh_axes(Lexer *L, bool v3, char close, IrSdyMesh *m)
{
    char *names[SDY_MAX_AXES];
    int64_t sizes[SDY_MAX_AXES];
    int32_t n = 0;
    int64_t total = 1;
    if (!close && !lx_expect(L, LX_LSQUARE, "'[' to start the mesh axes"))
        return false;
    bool end = close ? is_byte(L, close) : lx_is(L, LX_RSQUARE);
    while (!end) {
        IrPos pos = L->tok.pos;
        if (n == SDY_MAX_AXES)
            return lx_fail(L, pos, "a mesh has at most %d axes", SDY_MAX_AXES);
        if (!axis_name(L, v3, &names[n]) || !lx_expect(L, LX_EQUAL, "'=' after the axis name") ||
            !lx_int(L, &sizes[n], "axis size"))
            return false;
        if (sizes[n] < 1 || sizes[n] > IR_MAX_DEVICES || total * sizes[n] > IR_MAX_DEVICES)
            return lx_fail(L, pos, "axis \"%s\" of size %lld: a mesh holds 1 to %d devices", names[n],
                           (long long)sizes[n], IR_MAX_DEVICES);
        for (int32_t i = 0; i < n; i++)
            if (strcmp(names[i], names[n]) == 0)
                return lx_fail(L, pos, "axis \"%s\" appears twice in the mesh", names[n]);
        total *= sizes[n++];
        if (!lx_eat(L, LX_COMMA))
            break;
        end = false;
    }
    if (close ? !expect_byte(L, close, close == '>' ? "'>' to end the mesh" : "']' to end the mesh")
              : !lx_expect(L, LX_RSQUARE, "']' to end the mesh axes"))
        return false;
    m->naxis = n;
    m->ndevice = total;
    m->axis = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(char *));
    m->size = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(int64_t));
    if (!m->axis || !m->size)
        return lx_nomem(L);
    memcpy(m->axis, names, (size_t)n * sizeof(char *));
    memcpy(m->size, sizes, (size_t)n * sizeof(int64_t));
    return true;
}

/* Device ids: distinct, >= 0, as many as the mesh has devices (a maximal
 * mesh: exactly one). */
static bool check_ids(Lexer *L, IrPos pos, IrSdyMesh *m, const I64Vec *v)
{
    int64_t want = m->naxis ? m->ndevice : 1;
    if (v->n != want)
        return lx_fail(L, pos, "device_ids lists %d devices but the mesh has %lld", (int)v->n, (long long)want);
    uint8_t *seen = ts_calloc(IR_MAX_DEVICES / 8, 1);
    if (!seen)
        return lx_nomem(L);
    for (int32_t i = 0; i < v->n; i++) {
        int64_t x = v->v[i];
        bool bad = x < 0 || x >= IR_MAX_DEVICES, twice = !bad && (seen[x / 8] >> (x % 8) & 1);
        if (bad || twice) {
            ts_free(seen);
            return lx_fail(L, pos, bad ? "device id %lld is out of range" : "device id %lld appears twice in device_ids",
                           (long long)x);
        }
        seen[x / 8] |= (uint8_t)(1u << (x % 8));
    }
    ts_free(seen);
    m->ndevice = want;
    IrI64List l = {0};
    if (!vec_to_list(L, v, &l))
        return false;
    m->device_ids = l.v;
    return true;
}

/* device_ids=[i, j, ...] (Shardy). */
static bool mesh_ids(Lexer *L, IrSdyMesh *m)
{
    IrPos pos = L->tok.pos;
    lx_next(L); /* device_ids */
    lx_next(L); /* = */
    I64Vec v = {0};
    bool ok = lx_expect(L, LX_LSQUARE, "'[' to start device_ids");
    while (ok && !lx_is(L, LX_RSQUARE)) {
        int64_t x = 0;
        ok = lx_int(L, &x, "device id") && vec_push(L, &v, x);
        if (ok && !lx_eat(L, LX_COMMA))
            break;
    }
    ok = ok && lx_expect(L, LX_RSQUARE, "']' to end device_ids") && check_ids(L, pos, m, &v);
    vec_free(&v);
    return ok;
}

/* '<' '[' axes ']' (',' device_ids=[...])? '>' after `#sdy.mesh` or `mesh`. */
static bool mesh_body(Lexer *L, IrSdyMesh *m)
{
    if (!expect_byte(L, '<', "'<' to start the mesh") || !mesh_axes(L, false, 0, m))
        return false;
    if (lx_eat(L, LX_COMMA)) {
        if (!lx_is_attr(L) || !lx_is_word(L, "device_ids"))
            return lx_expected_word(L, "device_ids=[...]", (const char *const[]){"device_ids", NULL});
        if (!mesh_ids(L, m))
            return false;
    }
    if (m->naxis == 0 && m->device_ids == NULL)
        m->ndevice = 0; /* the empty mesh: replicated */
    return expect_byte(L, '>', "'>' to end the mesh");
}

/* '#' 'sdy.NAME' at the current token. */
static bool hash_word(Lexer *L, const char *word, const char *what)
{
    if (!is_byte(L, '#'))
        return lx_expected(L, what);
    lx_next(L);
    if (!lx_is_word(L, word))
        return lx_expected_word(L, what, (const char *const[]){word, NULL});
    lx_next(L);
    return true;
}

static bool parse_meshes(Lexer *L, IrSdyMeshes *out)
{
    IrSdyMesh v[64];
    int32_t n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start xla.sdy.meshes"))
        return false;
    while (!lx_is(L, LX_RBRACE)) {
        IrPos pos = L->tok.pos;
        if (n == 64)
            return lx_fail(L, pos, "more than 64 meshes");
        IrSdyMesh *m = &v[n];
        memset(m, 0, sizeof *m);
        char *name = NULL;
        if (lx_is(L, LX_STRING)) {
            if (!lx_string(L, &name, "mesh name"))
                return false;
        } else if (lx_is(L, LX_NAME)) {
            if (!(name = lx_dup(L, L->tok.start, L->tok.end)))
                return false;
            lx_next(L);
        } else {
            return lx_expected(L, "a mesh name");
        }
        for (int32_t i = 0; i < n; i++)
            if (strcmp(v[i].name, name) == 0)
                return lx_fail(L, pos, "mesh @%s is defined twice", name);
        m->name = name;
        if (!lx_expect(L, LX_EQUAL, "'=' after the mesh name") ||
            !hash_word(L, "sdy.mesh", "#sdy.mesh<...>") || !mesh_body(L, m))
            return false;
        n++;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end xla.sdy.meshes"))
        return false;
    out->n = n;
    out->mesh = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(IrSdyMesh));
    if (!out->mesh)
        return lx_nomem(L);
    memcpy(out->mesh, v, (size_t)n * sizeof(IrSdyMesh));
    return true;
}

/* ---- shardings ---- */

static const char *axis_at(void *ctx, int32_t i)
{
    return ((const IrSdyMesh *)ctx)->axis[i];
}

/* "axis "z" is not in mesh @m", naming the mesh's axes (and the one a
 * slip away from a name of 3 or more bytes: every one-letter name is a
 * slip of every other). */
static bool no_such_axis(Lexer *L, IrPos pos, const IrSdyMesh *m, const char *name)
{
    char list[200] = "";
    size_t k = 0;
    for (int32_t i = 0; i < m->naxis && k < sizeof list - 40; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s\"%.30s\"", i ? ", " : "", m->axis[i]);
    const char *near = strlen(name) >= 3 ? ir_nearest(name, strlen(name), m->naxis, axis_at, (void *)m) : NULL;
    return lx_fail(L, pos, "axis \"%s\" is not in %s%s (%s%s)%s%s%s", name, m->name ? "mesh @" : "the sharding's mesh",
                   m->name ? m->name : "", m->naxis ? "its axes: " : "it has no axes", list,
                   near ? "; did you mean \"" : "", near ? near : "", near ? "\"?" : "");
}

/* name (':' '(' pre ')' size)? checked against the mesh. */
static bool axis_ref(Lexer *L, bool v3, const IrSdyMesh *m, AxisRef *r)
{
    IrPos pos = L->tok.pos;
    char *name = NULL;
    if (!axis_name(L, v3, &name))
        return false;
    int32_t a = mesh_axis(m, name);
    if (a < 0)
        return no_such_axis(L, pos, m, name);
    *r = (AxisRef){a, 1, m->size[a]};
    if (!lx_eat(L, LX_COLON))
        return true;
    if (!lx_expect(L, LX_LPAREN, "'(' to start the sub-axis pre-size") || !lx_int(L, &r->pre, "pre-size") ||
        !lx_expect(L, LX_RPAREN, "')' after the pre-size") || !lx_int(L, &r->size, "sub-axis size"))
        return false;
    int64_t full = m->size[a];
    if (r->pre < 1 || r->size < 2 || r->size >= full || full % r->pre != 0 || full % r->size != 0 ||
        r->pre > full / r->size || full % (r->pre * r->size) != 0)
        return lx_fail(L, pos,
                       "sub-axis \"%s\":(%lld)%lld does not fit axis \"%s\" of size %lld (pre-size times size "
                       "must divide it, size between 2 and the axis size)",
                       name, (long long)r->pre, (long long)r->size, name, (long long)full);
    return true;
}

/* '{' (axis (',' axis)* (',' '?')? | '?')? '}' ('p' INT)? */
static bool dim_sharding(Lexer *L, bool v3, const IrSdyMesh *m, DimSharding *d)
{
    AxisRef v[SDY_MAX_AXES];
    int32_t n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start a dimension's axes"))
        return false;
    while (!lx_is(L, LX_RBRACE)) {
        if (is_byte(L, '?')) { /* open: propagation may add axes */
            lx_next(L);
            break;
        }
        if (n == SDY_MAX_AXES)
            return lx_fail(L, L->tok.pos, "more than %d axes in one dimension", SDY_MAX_AXES);
        if (!axis_ref(L, v3, m, &v[n++]))
            return false;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end a dimension's axes"))
        return false;
    /* A priority p0, p1, ...: the order Shardy propagates in. */
    if (!v3 && lx_is(L, LX_NAME) && lx_text(L)[0] == 'p') {
        bool neg = false;
        uint64_t mag = 0;
        if (lx_tlen(L) < 2 || !lx_parse_uint(lx_text(L) + 1, lx_tlen(L) - 1, &neg, &mag) || neg)
            return lx_expected(L, "a priority p<N>");
        lx_next(L);
    }
    d->n = n;
    d->ax = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(AxisRef));
    if (!d->ax)
        return lx_nomem(L);
    memcpy(d->ax, v, (size_t)n * sizeof(AxisRef));
    return true;
}

/* '{' axis (',' axis)* '}' after replicated= or unreduced=: checked,
 * counted, and the first SDY_MAX_AXES kept in out (when not NULL). */
static bool axis_set(Lexer *L, bool v3, const IrSdyMesh *m, int32_t *n, AxisRef *out)
{
    *n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start the axes"))
        return false;
    while (!lx_is(L, LX_RBRACE)) {
        AxisRef r;
        if (!axis_ref(L, v3, m, &r))
            return false;
        if (out && *n < SDY_MAX_AXES)
            out[*n] = r;
        (*n)++;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    return lx_expect(L, LX_RBRACE, "'}' to end the axes");
}

static const IrSdyMesh *find_mesh(const IrSdyMeshes *ms, const char *name)
{
    for (int32_t i = 0; ms && i < ms->n; i++)
        if (strcmp(ms->mesh[i].name, name) == 0)
            return &ms->mesh[i];
    return NULL;
}

static const char *mesh_name_at(void *ctx, int32_t i)
{
    return ((const IrSdyMeshes *)ctx)->mesh[i].name;
}

/* The mesh of a sharding: '@' NAME, or an inline mesh<...>. */
static bool tensor_mesh(Lexer *L, const IrSdyMeshes *ms, Tensor *t)
{
    IrPos pos = L->tok.pos;
    if (is_byte(L, '@')) {
        lx_next(L);
        if (!lx_is(L, LX_NAME))
            return lx_expected(L, "a mesh name after '@'");
        char name[128];
        size_t k = lx_tlen(L) < sizeof name - 1 ? lx_tlen(L) : sizeof name - 1;
        memcpy(name, lx_text(L), k);
        name[k] = 0;
        if (!(t->mesh = find_mesh(ms, name))) {
            const char *near = ms && ms->n ? ir_nearest(name, strlen(name), ms->n, mesh_name_at, (void *)ms) : NULL;
            return lx_fail(L, pos, "mesh @%s is not defined (the module's xla.sdy.meshes %s)%s%s%s", name,
                           ms && ms->n ? "does not name it" : "is missing", near ? "; did you mean @" : "",
                           near ? near : "", near ? "?" : "");
        }
        lx_next(L);
        return true;
    }
    if (lx_is_word(L, "mesh") || is_byte(L, '#')) {
        if (lx_is_word(L, "mesh"))
            lx_next(L);
        else if (!hash_word(L, "sdy.mesh", "#sdy.mesh<...>"))
            return false;
        IrSdyMesh *m = ir_alloc(L->arena, sizeof *m);
        if (!m)
            return lx_nomem(L);
        t->mesh = m;
        return mesh_body(L, m);
    }
    return lx_expected(L, "'@mesh' or an inline mesh<...>");
}

/* '<' mesh ',' '[' dims ']' (',' replicated={..})? (',' unreduced={..})? '>' */
static bool tensor(Lexer *L, const IrSdyMeshes *ms, Tensor *t)
{
    DimSharding dims[IR_MAX_RANK];
    int32_t n = 0, nunreduced = 0, nrep = 0;
    t->pos = L->tok.pos;
    if (!expect_byte(L, '<', "'<' to start a sharding") || !tensor_mesh(L, ms, t) ||
        !lx_expect(L, LX_COMMA, "',' after the mesh"))
        return false;
    t->dims_start = L->tok.start;
    if (!lx_expect(L, LX_LSQUARE, "'[' to start the dimensions"))
        return false;
    while (!lx_is(L, LX_RSQUARE)) {
        if (n == IR_MAX_RANK)
            return lx_fail(L, L->tok.pos, "more than %d dimensions", IR_MAX_RANK);
        if (!dim_sharding(L, false, t->mesh, &dims[n++]))
            return false;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    t->dims_end = L->tok.end;
    /* a word after a dimension's '}' is a priority gone wrong (q1, P1) */
    if (!lx_is(L, LX_RSQUARE) && lx_is(L, LX_NAME) && n > 0 && L->text[L->tok.start - 1] == '}')
        return lx_expected(L, "a priority p<N> after the dimension's '}', then ',' or ']'");
    if (!lx_expect(L, LX_RSQUARE, "',' or ']' after a dimension's sharding"))
        return false;
    IrPos upos = {0, 0};
    while (lx_eat(L, LX_COMMA)) {
        IrPos pos = L->tok.pos;
        if (lx_is_attr(L) && lx_is_word(L, "replicated")) {
            lx_next(L);
            lx_next(L);
            t->rep_pos = pos;
            if (!axis_set(L, false, t->mesh, &nrep, t->rep))
                return false;
            t->nrep = nrep < SDY_MAX_AXES ? nrep : SDY_MAX_AXES;
        } else if (lx_is_attr(L) && lx_is_word(L, "unreduced")) {
            lx_next(L);
            lx_next(L);
            upos = pos;
            if (!axis_set(L, false, t->mesh, &nunreduced, NULL))
                return false;
        } else {
            return lx_expected_word(L, "replicated={...} or unreduced={...}",
                                    (const char *const[]){"replicated", "unreduced", NULL});
        }
    }
    if (nunreduced > 0)
        return lx_fail(L, upos,
                       "unreduced axes are not supported: each device would hold a partial sum that tessel "
                       "does not know how to reduce");
    if (!expect_byte(L, '>', "'>' to end the sharding"))
        return false;
    t->rank = n;
    t->dim = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(DimSharding));
    if (!t->dim)
        return lx_nomem(L);
    memcpy(t->dim, dims, (size_t)n * sizeof(DimSharding));
    return true;
}

/* ---- conversion ---- */

/* The pieces each mesh axis is cut into (mesh order, major to minor); -1
 * past cap. */
static int32_t ordered_pieces(const Tensor *t, AxisRef *out, int32_t cap)
{
    const IrSdyMesh *m = t->mesh;
    int32_t n = 0;
    for (int32_t a = 0; a < m->naxis; a++) {
        int64_t cut[2 * SDY_MAX_PIECES + 2];
        int32_t nc = 0;
        cut[nc++] = 1;
        cut[nc++] = m->size[a];
        for (int32_t d = 0; d < t->rank; d++)
            for (int32_t k = 0; k < t->dim[d].n; k++)
                if (t->dim[d].ax[k].axis == a && t->dim[d].ax[k].size != m->size[a] &&
                    nc + 2 <= (int32_t)(sizeof cut / sizeof cut[0])) {
                    cut[nc++] = t->dim[d].ax[k].pre;
                    cut[nc++] = t->dim[d].ax[k].pre * t->dim[d].ax[k].size;
                }
        /* sort, unique */
        for (int32_t i = 1; i < nc; i++)
            for (int32_t j = i; j > 0 && cut[j - 1] > cut[j]; j--) {
                int64_t x = cut[j];
                cut[j] = cut[j - 1];
                cut[j - 1] = x;
            }
        int32_t u = 0;
        for (int32_t i = 0; i < nc; i++)
            if (u == 0 || cut[u - 1] != cut[i])
                cut[u++] = cut[i];
        if (u == 1) { /* an axis of size 1: one piece of size 1 */
            if (n == cap)
                return -1;
            out[n++] = (AxisRef){a, 1, 1};
        }
        for (int32_t i = 0; i + 1 < u; i++) {
            if (n == cap)
                return -1;
            out[n++] = (AxisRef){a, cut[i], cut[i + 1] / cut[i]};
        }
    }
    return n;
}

/* Drop size-1 dims of an iota's reshape and merge neighbours the
 * permutation keeps together (XLA's canonical iota tile assignment):
 * [2,1,2] T(0,1,2) -> [4]. */
static void canon_iota(int64_t *dims, int32_t *perm, int32_t *k)
{
    int32_t n = *k;
    for (int32_t i = 0; i < n;) {
        if (dims[i] != 1 || n == 1) {
            i++;
            continue;
        }
        for (int32_t j = i; j + 1 < n; j++)
            dims[j] = dims[j + 1];
        int32_t w = 0;
        for (int32_t t = 0; t < n; t++)
            if (perm[t] != i)
                perm[w++] = perm[t] > i ? perm[t] - 1 : perm[t];
        n--;
    }
    bool merged = true;
    while (merged) {
        merged = false;
        for (int32_t t = 0; t + 1 < n; t++)
            if (perm[t + 1] == perm[t] + 1) {
                int32_t a = perm[t];
                dims[a] *= dims[a + 1];
                for (int32_t j = a + 1; j + 1 < n; j++)
                    dims[j] = dims[j + 1];
                for (int32_t j = t + 1; j + 1 < n; j++)
                    perm[j] = perm[j + 1];
                n--;
                for (int32_t j = 0; j < n; j++)
                    if (perm[j] > a)
                        perm[j]--;
                merged = true;
                break;
            }
    }
    *k = n;
}

/* out[e] = base[i], e the row-major index over dims transposed by perm of
 * the element whose row-major index over dims is i. */
static void transpose(const int64_t *base, const int64_t *dims, const int32_t *perm, int32_t k, int64_t n,
                      int64_t *out)
{
    int64_t stride[SDY_MAX_PIECES], idx[SDY_MAX_PIECES];
    int64_t st = 1;
    for (int32_t t = k - 1; t >= 0; t--) {
        stride[t] = st;
        st *= dims[t];
    }
    for (int32_t t = 0; t < k; t++)
        idx[t] = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t v = 0;
        for (int32_t t = 0; t < k; t++)
            v += idx[t] * stride[perm[t]];
        out[e] = base ? base[v] : v;
        for (int32_t t = k - 1; t >= 0; t--) {
            if (++idx[t] < dims[perm[t]])
                break;
            idx[t] = 0;
        }
    }
}

static bool same_ref(AxisRef a, AxisRef b)
{
    return a.axis == b.axis && a.pre == b.pre && a.size == b.size;
}

/* The tiled IrSharding of a tensor sharding, `manual` naming mesh axes
 * (indices, nmanual of them) that are manual (a shard_map body): a manual
 * axis a dimension names is left out of it (the local shape is already
 * cut along it), and the manual axes make the manual subgroup. */
/* Do a and b (axis refs: sub-axis pre:size of one axis) share devices? */
static bool refs_overlap(AxisRef a, AxisRef b)
{
    return a.axis == b.axis && a.pre < b.pre * b.size && b.pre < a.pre * a.size;
}

/* Shardy's rule: an axis is used once in a sharding, so replicated={...}
 * names no axis (or part of one) that a dimension is sharded by, nor one
 * twice. */
static bool check_replicated(Lexer *L, const Tensor *t)
{
    for (int32_t i = 0; i < t->nrep; i++) {
        AxisRef r = t->rep[i];
        bool dup = false;
        for (int32_t j = 0; j < i && !dup; j++)
            dup = refs_overlap(r, t->rep[j]);
        for (int32_t d = 0; d < t->rank && !dup; d++)
            for (int32_t k = 0; k < t->dim[d].n && !dup; k++)
                dup = refs_overlap(r, t->dim[d].ax[k]);
        if (dup)
            return lx_fail(L, t->rep_pos, "duplicate axis ref: \"%s\" (replicated={...} names an axis that a "
                           "dimension is sharded by, or one twice: each axis is used once in a sharding)",
                           t->mesh->axis[r.axis]);
    }
    return true;
}

static bool convert(Lexer *L, const Tensor *t, const int32_t *manual, int32_t nmanual, IrSharding *s)
{
    const IrSdyMesh *m = t->mesh;
    memset(s, 0, sizeof *s);
    if (!check_replicated(L, t))
        return false;
    if (m->naxis == 0 && !m->device_ids && nmanual > 0) {
        /* the empty mesh inside a manual region (a jax.debug.print in a
         * shard_map body): the device's own value, as the region's are */
        s->kind = SHD_MANUAL;
        return true;
    }
    if (m->naxis == 0) { /* maximal mesh, or the empty one */
        s->kind = m->device_ids ? SHD_MAXIMAL : SHD_REPLICATED;
        s->device = m->device_ids ? m->device_ids[0] : 0;
        if (m->device_ids && t->rank > 0)
            for (int32_t d = 0; d < t->rank; d++)
                if (t->dim[d].n > 0)
                    return lx_fail(L, t->pos, "a maximal mesh has no axes to shard over");
        return true;
    }
    if (nmanual == m->naxis) {
        s->kind = SHD_MANUAL;
        return true;
    }
    enum { CAP = SDY_MAX_PIECES };
    AxisRef piece[CAP];
    int32_t np = ordered_pieces(t, piece, CAP), pos_of[CAP];
    if (np < 0)
        return lx_fail(L, t->pos, "the sharding cuts the mesh into more than %d sub-axes", CAP);
    for (int32_t i = 0; i < np; i++)
        pos_of[i] = -1;
    int64_t tile[IR_MAX_RANK + 2];
    int32_t nt = 0, sharded = 0;
    for (int32_t d = 0; d < t->rank; d++) {
        tile[nt] = 1;
        for (int32_t k = 0; k < t->dim[d].n; k++) {
            AxisRef r = t->dim[d].ax[k];
            bool is_manual = false;
            for (int32_t j = 0; j < nmanual; j++)
                is_manual |= manual[j] == r.axis;
            if (is_manual) /* the local shape already took it (a shard_map's in/out shardings) */
                continue;
            int32_t p = 0;
            while (p < np && !same_ref(piece[p], r))
                p++;
            if (p == np || pos_of[p] >= 0)
                return lx_fail(L, t->pos, "axis \"%s\" is used twice or overlaps another use of it",
                               m->axis[r.axis]);
            pos_of[p] = sharded++;
            tile[nt] *= r.size;
        }
        nt++;
    }
    int64_t man = 1, rep = 1;
    for (int32_t j = 0; j < nmanual; j++) {
        int32_t p = 0;
        while (p < np && !same_ref(piece[p], (AxisRef){manual[j], 1, m->size[manual[j]]}))
            p++;
        if (p < np && pos_of[p] < 0) {
            pos_of[p] = sharded++;
            man *= piece[p].size;
        }
    }
    int32_t perm[CAP];
    int64_t rdims[CAP];
    int32_t next = sharded;
    for (int32_t p = 0; p < np; p++) {
        rdims[p] = piece[p].size;
        if (pos_of[p] < 0) {
            pos_of[p] = next++;
            rep *= piece[p].size;
        }
        perm[pos_of[p]] = p;
    }
    IrSubgroupType sub[2];
    int32_t nsub = 0;
    if (man > 1) {
        tile[nt++] = man;
        sub[nsub++] = SUBGROUP_MANUAL;
    }
    if (rep > 1) {
        tile[nt++] = rep;
        sub[nsub++] = SUBGROUP_REPLICATED;
    }
    int64_t ntiles = 1;
    for (int32_t d = 0; d < t->rank; d++)
        ntiles *= tile[d];
    if (ntiles == 1 && !(man > 1 && rep > 1)) {
        s->kind = man > 1 ? SHD_MANUAL : SHD_REPLICATED;
        return true;
    }
    int64_t n = m->ndevice;
    s->kind = SHD_TILED;
    s->ntile = nt;
    s->ndevices = n;
    s->nsubgroup = nsub;
    s->last_tile_dim_replicate = nsub == 1 && sub[0] == SUBGROUP_REPLICATED;
    s->tile = ir_alloc_array(L->arena, (size_t)nt, sizeof(int64_t));
    s->subgroup = nsub ? ir_alloc_array(L->arena, (size_t)nsub, sizeof(IrSubgroupType)) : NULL;
    if (!s->tile || (nsub && !s->subgroup))
        return lx_nomem(L);
    memcpy(s->tile, tile, (size_t)nt * sizeof(int64_t));
    if (nsub)
        memcpy(s->subgroup, sub, (size_t)nsub * sizeof(IrSubgroupType));
    if (!m->device_ids) { /* the iota form, canonical as XLA prints it */
        int32_t k = np;
        canon_iota(rdims, perm, &k);
        bool ident = true;
        for (int32_t i = 0; i < k; i++)
            ident = ident && perm[i] == i;
        s->iota = true;
        s->niota = k;
        s->iota_dims = ir_alloc_array(L->arena, (size_t)k, sizeof(int64_t));
        s->iota_perm = ident ? NULL : ir_alloc_array(L->arena, (size_t)k, sizeof(int32_t));
        if (!s->iota_dims || (!ident && !s->iota_perm))
            return lx_nomem(L);
        memcpy(s->iota_dims, rdims, (size_t)k * sizeof(int64_t));
        if (!ident)
            memcpy(s->iota_perm, perm, (size_t)k * sizeof(int32_t));
        if (ident && ir_iota_table(n)) {
            s->devices = (int64_t *)ir_iota_table(n); /* never written: see ir.h */
            return true;
        }
    }
    if (n > L->iota_left) /* hostile text cannot ask for gigabytes */
        return lx_fail(L, t->pos, "device lists expand to more than %lld entries in all",
                       (long long)LX_IOTA_BUDGET);
    L->iota_left -= n;
    if (!(s->devices = ir_alloc_array(L->arena, (size_t)n, sizeof(int64_t))))
        return lx_nomem(L);
    transpose(m->device_ids, rdims, perm, s->iota ? s->niota : np, n, s->devices);
    return true;
}

/* The manual axes as mesh indices (all must be in m). A mesh without axes
 * (@empty_mesh, a maximal mesh) names none, manual or not: JAX puts a
 * jax.debug.print inside a shard_map body on <@empty_mesh, []>, which
 * convert reads as manual there (maximal meshes as maximal). */
static bool manual_indices(Lexer *L, const IrSdyMesh *m, const IrSdyManual *man, int32_t *idx)
{
    if (m->naxis == 0)
        return true;
    for (int32_t i = 0; man && i < man->n; i++) {
        if ((idx[i] = mesh_axis(m, man->axis[i])) < 0)
            return lx_fail(L, L->tok.pos, "manual axis \"%s\" is not in mesh @%s", man->axis[i],
                           m->name ? m->name : "(inline)");
    }
    return true;
}

/* The shape value v of a sharding is for (NULL: not known, or a tuple
 * that one sharding serves leaf by leaf). */
static const IrShape *value_shape(const IrShape *shape, bool per_value, int32_t v)
{
    if (!shape)
        return NULL;
    const IrShape *s = NULL;
    if (!per_value)
        s = shape;
    else if (shape->type == IR_TUPLE)
        s = v < shape->ntuple ? &shape->tuple[v] : NULL;
    else
        s = v == 0 ? shape : NULL;
    return s && s->type != IR_TUPLE && s->type != IR_TOKEN ? s : NULL;
}

/* One {...} per dimension of the value, as Shardy's verifier requires;
 * an empty [] is let be (a maximal mesh's sharding names none, whatever
 * the rank). Said in the sharding's terms, at its '<'. */
static bool check_rank(Lexer *L, const Tensor *t, const IrShape *shape)
{
    if (!shape || t->rank == 0 || t->rank == shape->rank)
        return true;
    char *s = ir_shape_str(shape, false);
    int len = (int)(t->dims_end - t->dims_start);
    bool ok = lx_fail(L, t->pos, "the sharding gives %d dimension%s (%.*s%s) but the value is %s, of rank %d: "
                      "write one {...} per dimension",
                      (int)t->rank, t->rank == 1 ? "" : "s", len > 80 ? 80 : len, L->text + t->dims_start,
                      len > 80 ? "..." : "", s ? s : "?", (int)shape->rank);
    ts_free(s);
    return ok;
}

/* `#sdy.sharding<...>` (one value) or `#sdy.sharding_per_value<[...]>`
 * (a SHD_TUPLE of one per value). */
static bool parse_sdy_sharding(Lexer *L, const IrSdyMeshes *ms, const IrSdyManual *man, const IrShape *shape,
                               IrSharding *out)
{
    if (!is_byte(L, '#'))
        return lx_expected(L, "#sdy.sharding<...> or #sdy.sharding_per_value<[...]>");
    lx_next(L);
    bool per_value = lx_is_word(L, "sdy.sharding_per_value");
    if (!per_value && !lx_is_word(L, "sdy.sharding"))
        return lx_expected_word(L, "sdy.sharding or sdy.sharding_per_value",
                                (const char *const[]){"sdy.sharding", "sdy.sharding_per_value", NULL});
    lx_next(L);
    int32_t midx[SDY_MAX_AXES];
    if (!per_value) {
        Tensor t = {0};
        return tensor(L, ms, &t) && check_rank(L, &t, value_shape(shape, false, 0)) &&
               manual_indices(L, t.mesh, man, midx) && convert(L, &t, midx, man ? man->n : 0, out);
    }
    IrSharding v[256];
    int32_t n = 0;
    if (!expect_byte(L, '<', "'<' after sdy.sharding_per_value") ||
        !lx_expect(L, LX_LSQUARE, "'[' to start the values"))
        return false;
    while (!lx_is(L, LX_RSQUARE)) {
        if (n == 256)
            return lx_fail(L, L->tok.pos, "more than 256 values");
        Tensor t = {0};
        if (!tensor(L, ms, &t) || !check_rank(L, &t, value_shape(shape, true, n)) ||
            !manual_indices(L, t.mesh, man, midx) ||
            !convert(L, &t, midx, man ? man->n : 0, &v[n++]))
            return false;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    if (!lx_expect(L, LX_RSQUARE, "']' to end the values") || !expect_byte(L, '>', "'>' to end the values"))
        return false;
    memset(out, 0, sizeof *out);
    out->kind = SHD_TUPLE;
    out->ntuple = n;
    out->tuple = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(IrSharding));
    if (!out->tuple)
        return lx_nomem(L);
    memcpy(out->tuple, v, (size_t)n * sizeof(IrSharding));
    return true;
}

/* #sdy<manual_axes{"x", "y"}> */
static bool parse_manual(Lexer *L, IrSdyManual *out)
{
    char *v[SDY_MAX_AXES];
    int32_t n = 0;
    if (!hash_word(L, "sdy", "#sdy<manual_axes{...}>") || !expect_byte(L, '<', "'<' after #sdy") ||
        !lx_is_word(L, "manual_axes"))
        return L->st != IR_OK ? false : lx_expected_word(L, "manual_axes", (const char *const[]){"manual_axes", NULL});
    lx_next(L);
    if (!lx_expect(L, LX_LBRACE, "'{' to start the manual axes"))
        return false;
    while (!lx_is(L, LX_RBRACE)) {
        if (n == SDY_MAX_AXES)
            return lx_fail(L, L->tok.pos, "more than %d manual axes", SDY_MAX_AXES);
        if (!lx_string(L, &v[n++], "a quoted axis name"))
            return false;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end the manual axes") || !expect_byte(L, '>', "'>' to end #sdy<...>"))
        return false;
    out->n = n;
    out->axis = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(char *));
    if (!out->axis)
        return lx_nomem(L);
    memcpy(out->axis, v, (size_t)n * sizeof(char *));
    return true;
}

/* ---- V3: XLA's named sharding inside sharding={...} ---- */

/* device_ids=(...) of a V3 mesh: `[dims]T(perm)` (an iota, as XLA's
 * TileAssignment prints one) or the ids themselves. */
static bool v3_ids(Lexer *L, IrSdyMesh *m)
{
    IrPos pos = L->tok.pos;
    lx_next(L); /* device_ids */
    lx_next(L); /* = */
    if (!lx_expect(L, LX_LPAREN, "'(' to start device_ids"))
        return false;
    I64Vec ids = {0};
    bool ok = true;
    if (lx_is(L, LX_LSQUARE)) {
        IrI64List dims = {0}, perm = {0};
        ok = lx_int_list(L, LX_LSQUARE, LX_RSQUARE, LX_COMMA, &dims, "iota dimensions");
        if (ok && lx_is_word(L, "T")) {
            lx_next(L);
            ok = lx_int_list(L, LX_LPAREN, LX_RPAREN, LX_COMMA, &perm, "T(...) permutation");
        }
        int64_t n = 1;
        int32_t p[IR_MAX_RANK];
        for (int32_t i = 0; ok && i < dims.n; i++) {
            if (dims.v[i] < 1 || dims.n > IR_MAX_RANK || dims.v[i] > IR_MAX_DEVICES / n) /* n*v overflows */
                ok = lx_fail(L, pos, "device_ids=(...) has a bad iota dimension");
            else
                n *= dims.v[i];
        }
        if (ok && (dims.n == 0 || (perm.n && perm.n != dims.n) || n != m->ndevice))
            ok = lx_fail(L, pos, "device_ids=(...) does not list the mesh's %lld devices", (long long)m->ndevice);
        for (int32_t i = 0; ok && i < dims.n; i++) {
            p[i] = perm.n ? (int32_t)perm.v[i] : i;
            bool seen = p[i] < 0 || p[i] >= dims.n;
            for (int32_t j = 0; j < i; j++)
                seen = seen || p[j] == p[i];
            if (seen)
                ok = lx_fail(L, pos, "T(...) is not a permutation of the iota's dimensions");
        }
        if (ok && n > L->iota_left)
            ok = lx_fail(L, pos, "device lists expand to more than %lld entries in all", (long long)LX_IOTA_BUDGET);
        if (ok)
            L->iota_left -= n;
        int64_t *v = ok ? ts_malloc((size_t)n * sizeof(int64_t)) : NULL;
        if (ok && !v)
            ok = lx_nomem(L);
        if (ok)
            transpose(NULL, dims.v, p, dims.n, n, v);
        for (int64_t i = 0; ok && i < n; i++)
            ok = vec_push(L, &ids, v[i]);
        ts_free(v);
    } else {
        do {
            int64_t x = 0;
            ok = lx_int(L, &x, "device id") && vec_push(L, &ids, x);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RPAREN, "')' to end device_ids") && check_ids(L, pos, m, &ids);
    vec_free(&ids);
    return ok && lx_expect(L, LX_COMMA, "',' after device_ids=(...)");
}

bool ir_sdy_v3_parse_lx(Lexer *L, IrSharding *out)
{
    /* At '@' or `mesh` after the sharding's '{'. */
    IrSdyMesh *m = ir_alloc(L->arena, sizeof *m);
    if (!m)
        return lx_nomem(L);
    Tensor t = {.mesh = m, .pos = L->tok.pos};
    if (is_byte(L, '@')) {
        lx_next(L);
        if (!lx_is_word(L, "mesh"))
            return lx_expected_word(L, "@mesh<...>", (const char *const[]){"mesh", NULL});
        lx_next(L);
        if (!expect_byte(L, '<', "'<' after @mesh") || !mesh_axes(L, true, '>', m))
            return false;
    } else {
        lx_next(L); /* mesh */
        if (!mesh_axes(L, true, 0, m))
            return false;
    }
    if (!lx_expect(L, LX_COMMA, "',' after the mesh"))
        return false;
    if (lx_is_attr(L) && lx_is_word(L, "device_ids") && !v3_ids(L, m))
        return false;
    if (lx_is(L, LX_LSQUARE)) {
        DimSharding dims[IR_MAX_RANK];
        int32_t n = 0;
        lx_next(L);
        while (!lx_is(L, LX_RSQUARE)) {
            if (n == IR_MAX_RANK)
                return lx_fail(L, L->tok.pos, "more than %d dimensions", IR_MAX_RANK);
            if (!dim_sharding(L, true, m, &dims[n++]))
                return false;
            if (!lx_eat(L, LX_COMMA))
                break;
        }
        if (!lx_expect(L, LX_RSQUARE, "']' to end the dimensions"))
            return false;
        t.rank = n;
        t.dim = ir_alloc_array(L->arena, (size_t)(n ? n : 1), sizeof(DimSharding));
        if (!t.dim)
            return lx_nomem(L);
        memcpy(t.dim, dims, (size_t)n * sizeof(DimSharding));
    } else {
        return lx_expected(L, "'[' to start the dimensions");
    }
    int32_t manual[SDY_MAX_AXES], nmanual = 0;
    while (lx_eat(L, LX_COMMA)) {
        IrPos pos = L->tok.pos;
        int32_t k = 0;
        if (lx_is_attr(L) && lx_is_word(L, "replicated")) {
            lx_next(L);
            lx_next(L);
            t.rep_pos = pos;
            if (!axis_set(L, true, m, &k, t.rep))
                return false;
            t.nrep = k < SDY_MAX_AXES ? k : SDY_MAX_AXES;
        } else if (lx_is_attr(L) && lx_is_word(L, "unreduced")) {
            lx_next(L);
            lx_next(L);
            if (!axis_set(L, true, m, &k, NULL))
                return false;
            if (k > 0)
                return lx_fail(L, pos,
                               "unreduced axes are not supported: each device would hold a partial sum that "
                               "tessel does not know how to reduce");
        } else if (lx_is_attr(L) && lx_is_word(L, "manual")) {
            lx_next(L);
            lx_next(L);
            if (!lx_expect(L, LX_LBRACE, "'{' to start the manual axes"))
                return false;
            while (!lx_is(L, LX_RBRACE)) {
                AxisRef r;
                IrPos apos = L->tok.pos;
                if (!axis_ref(L, true, m, &r))
                    return false;
                if (r.size != m->size[r.axis])
                    return lx_fail(L, apos, "a manual axis is a whole mesh axis");
                if (nmanual == SDY_MAX_AXES)
                    return lx_fail(L, apos, "too many manual axes");
                manual[nmanual++] = r.axis;
                if (!lx_eat(L, LX_COMMA))
                    break;
            }
            if (!lx_expect(L, LX_RBRACE, "'}' to end the manual axes"))
                return false;
        } else if (lx_is_attr(L) && lx_is_word(L, "metadata")) {
            break; /* the caller reads metadata= */
        } else {
            return lx_expected_word(L, "replicated=, unreduced=, manual= or metadata=",
                                    (const char *const[]){"replicated", "unreduced", "manual", "metadata", NULL});
        }
    }
    return convert(L, &t, manual, nmanual, out);
}

/* ---- entry points ---- */

/* A lexer over `text` whose errors are positioned in it (line 1 col 1 at
 * its first byte), run `fn`, then require the end. */
typedef bool (*ParseFn)(Lexer *L, void *arg);

static IrStatus run(IrArena *a, const char *text, IrDiag *d, int64_t *budget, ParseFn fn, void *arg)
{
    Lexer L;
    size_t len = text ? strlen(text) : 0;
    lx_init(&L, NULL, text, len, text, a, d, NULL);
    if (budget)
        L.iota_left = *budget;
    bool ok = fn(&L, arg);
    if (budget)
        *budget = L.iota_left;
    if (!ok)
        return L.st != IR_OK ? L.st : IR_EINPUT;
    if (!lx_is(&L, LX_EOF)) {
        lx_expected(&L, "the end of the attribute");
        return L.st;
    }
    return IR_OK;
}

static bool meshes_fn(Lexer *L, void *arg)
{
    return parse_meshes(L, arg);
}

IrStatus ir_sdy_parse_meshes(IrArena *a, const char *text, IrSdyMeshes *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    return run(a, text, d, NULL, meshes_fn, out);
}

typedef struct ShdArg {
    const IrSdyMeshes *ms;
    const IrSdyManual *man;
    const IrShape *shape;
    IrSharding *out;
} ShdArg;

static bool sharding_fn(Lexer *L, void *arg)
{
    ShdArg *x = arg;
    return parse_sdy_sharding(L, x->ms, x->man, x->shape, x->out);
}

IrStatus ir_sdy_parse_sharding(IrArena *a, const IrSdyMeshes *meshes, const IrSdyManual *manual, const char *text,
                               const IrShape *shape, int64_t *budget, IrSharding *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    ShdArg x = {meshes, manual, shape, out};
    return run(a, text, d, budget, sharding_fn, &x);
}

static bool manual_fn(Lexer *L, void *arg)
{
    return parse_manual(L, arg);
}

IrStatus ir_sdy_parse_manual_axes(IrArena *a, const char *text, IrSdyManual *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    return run(a, text, d, NULL, manual_fn, out);
}
