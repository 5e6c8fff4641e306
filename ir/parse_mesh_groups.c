/*
 * parse_mesh_groups.c: the mesh-axes form of replica_groups in the HLO text
 * parser (see parse.c), as XLA prints a MeshAxesReplicaGroupList (JAX's
 * compiled modules carry it since XLA took Shardy's meshes into HLO):
 *
 *   replica_groups=mesh['a'=2,'b'=4] {'b'}
 *   replica_groups=mesh['a'=2,'b'=4], device_ids=(0,2,4,6,1,3,5,7) {'a','b'}
 *   replica_groups=mesh['x'=2,'y'=1,'z'=2], device_ids=([2,2]T(1,0)) {'x'}
 *   replica_groups=mesh['a'=8] {'a':(1)2,'a':(4)2}
 *
 * The mesh is a device array with one dimension per named axis (major to
 * minor), holding 0..n-1 in order, the listed ids, or iota(dims)
 * transposed by T(perm) (read row-major). The braces name the axes the
 * collective runs over; 'a':(p)s is the sub-axis of size s at stride p
 * within a (a = [.., p, s, a/(p*s)] major to minor). A group is the
 * devices along the named axes, in the order named; the groups are in
 * the order of the other axes. Semantics as XLA's
 * MeshAxesReplicaGroupList::flattened_replica_groups: each mesh axis is
 * cut at its sub-axes' boundaries, the array is transposed so the other
 * pieces come first and the named ones last (in the order named), and
 * read row-major in runs of the group size.
 *
 * Worked by hand, mesh['a'=2,'b'=4] (devices a*4+b):
 *   {'b'}          -> {0,1,2,3},{4,5,6,7}
 *   {'a'}          -> {0,4},{1,5},{2,6},{3,7}
 *   {'b','a'}      -> {0,4,1,5,2,6,3,7}
 *   {'b':(2)2}     -> {0,1},{2,3},{4,5},{6,7}    (the minor half of b)
 *   {'b':(1)2}     -> {0,2},{1,3},{4,6},{5,7}    (the major half of b)
 *
 * The checks are XLA's: unique axis names, sizes >= 1, device ids a
 * permutation, sub-axes that divide their axis and neither overlap nor
 * could merge with the one written after them, more than one device in a
 * group. The groups are expanded for every later pass; the form is kept
 * (re-spelled as XLA prints it) for printing back.
 */
#include "parse_internal.h"

#include <string.h>

/* A mesh of replica groups has at most this many axes, and a group names
 * at most this many (sub-)axes: the tables below live on the stack. */
enum { MG_MAX_AXES = 16, MG_MAX_REFS = 16, MG_MAX_DIMS = MG_MAX_AXES + 2 * MG_MAX_REFS };

typedef struct MeshAxis {
    size_t s, e; /* the name, between its quotes in the text */
    int64_t size;
} MeshAxis;

typedef struct Mesh {
    int32_t n;
    MeshAxis ax[MG_MAX_AXES];
    int64_t ndev;
    int64_t *devices; /* row-major over the axes; NULL: 0..ndev-1 */
    I64Vec ids;       /* device_ids=(list) as written */
    I64Vec dims, perm; /* device_ids=([dims]T(perm)) as written */
} Mesh;

/* Axis `axis` whole (pre 0), or its sub-axis of `size` at stride `pre`. */
typedef struct AxisRef {
    int32_t axis;
    int64_t pre, size;
    IrPos pos;
} AxisRef;

static bool quoted_name(Lexer *L, size_t *s, size_t *e)
{
    return lx_raw_quoted(L, s, e, "a quoted axis name ('a')");
}

static bool same_name(const Lexer *L, const MeshAxis *a, size_t s, size_t e)
{
    return a->e - a->s == e - s && memcmp(L->text + a->s, L->text + s, e - s) == 0;
}

/* device_ids=(i,j,...) or device_ids=([dims]T(perm)) after the mesh's ','. */
static bool parse_device_ids(Lexer *L, Mesh *m)
{
    IrPos pos = L->tok.pos;
    if (!lx_is_attr(L) || !lx_is_word(L, "device_ids"))
        return lx_expected(L, "device_ids= after the mesh's ','");
    lx_next(L);
    lx_next(L);
    if (!lx_expect(L, LX_LPAREN, "'(' to start device_ids"))
        return false;
    if (lx_is(L, LX_LSQUARE)) {
        int64_t *dims = NULL;
        int32_t *perm = NULL;
        if (!prs_ints_between(L, LX_LSQUARE, LX_RSQUARE, &m->dims, "the device_ids iota dimensions"))
            return false;
        if (!lx_is_word(L, "T"))
            return lx_expected(L, "T(...) after the device_ids iota dimensions");
        lx_next(L);
        if (!prs_ints_between(L, LX_LPAREN, LX_RPAREN, &m->perm, "T(...)") ||
            !lx_iota_devices(L, pos, &m->dims, &m->perm, true, m->ndev, false, &dims, &perm, &m->devices))
            return false;
    } else {
        do {
            int64_t x = 0;
            if (!lx_int(L, &x, "device id") || !vec_push(L, &m->ids, x))
                return false;
        } while (lx_eat(L, LX_COMMA));
        if (!lx_expect(L, LX_RPAREN, "')' to end device_ids"))
            return false;
        if (m->ids.n != m->ndev)
            return lx_fail(L, pos, "device_ids lists %d devices but the mesh has %lld", (int)m->ids.n,
                           (long long)m->ndev);
        uint8_t *seen = ir_alloc_array(L->arena, (size_t)m->ndev, 1);
        if (!seen)
            return lx_nomem(L);
        for (int32_t i = 0; i < m->ids.n; i++) {
            int64_t v = m->ids.v[i];
            if (v < 0 || v >= m->ndev || seen[v])
                return lx_fail(L, pos, "device_ids must be a permutation of 0..%lld, found %lld",
                               (long long)(m->ndev - 1), (long long)v);
            seen[v] = 1;
        }
        m->devices = m->ids.v;
        return true;
    }
    return lx_expect(L, LX_RPAREN, "')' to end device_ids");
}

/* 'mesh' '[' ('name'=size (',' ...)*) ']' (',' device_ids=(...))? */
static bool parse_mesh(Lexer *L, Mesh *m)
{
    IrPos pos = L->tok.pos;
    lx_next(L);
    if (!lx_expect(L, LX_LSQUARE, "'[' after mesh"))
        return false;
    m->ndev = 1;
    while (!lx_is(L, LX_RSQUARE)) {
        IrPos apos = L->tok.pos;
        if (m->n == MG_MAX_AXES)
            return lx_fail(L, apos, "a mesh of replica groups has at most %d axes", MG_MAX_AXES);
        MeshAxis *a = &m->ax[m->n];
        if (!quoted_name(L, &a->s, &a->e) || !lx_expect(L, LX_EQUAL, "'=' after the axis name") ||
            !lx_int(L, &a->size, "axis size"))
            return false;
        if (a->size < 1 || a->size > IR_MAX_DEVICES / m->ndev)
            return lx_fail(L, apos, "axis '%.*s' of size %lld: a mesh holds 1 to %d devices", (int)(a->e - a->s),
                           L->text + a->s, (long long)a->size, IR_MAX_DEVICES);
        for (int32_t i = 0; i < m->n; i++)
            if (same_name(L, &m->ax[i], a->s, a->e))
                return lx_fail(L, apos, "axis '%.*s' appears twice in the mesh", (int)(a->e - a->s), L->text + a->s);
        m->ndev *= a->size;
        m->n++;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    if (!lx_expect(L, LX_RSQUARE, "']' to end the mesh axes"))
        return false;
    if (m->n == 0)
        return lx_fail(L, pos, "the mesh of replica groups has no axes");
    return !lx_eat(L, LX_COMMA) || parse_device_ids(L, m);
}

/* 'name' or 'name':(pre)size */
static bool parse_ref(Lexer *L, const Mesh *m, AxisRef *r)
{
    size_t s, e;
    r->pos = L->tok.pos;
    if (!quoted_name(L, &s, &e))
        return false;
    r->axis = -1;
    for (int32_t i = 0; i < m->n; i++)
        if (same_name(L, &m->ax[i], s, e))
            r->axis = i;
    if (r->axis < 0)
        return lx_fail(L, r->pos, "the mesh has no axis '%.*s'", (int)(e - s), L->text + s);
    int64_t full = m->ax[r->axis].size;
    r->pre = 0;
    r->size = full;
    if (!lx_eat(L, LX_COLON))
        return true;
    if (!lx_expect(L, LX_LPAREN, "'(' to start the sub-axis pre-size") || !lx_int(L, &r->pre, "pre-size") ||
        !lx_expect(L, LX_RPAREN, "')' after the pre-size") || !lx_int(L, &r->size, "sub-axis size"))
        return false;
    if (r->pre < 1 || r->size < 2 || r->size >= full || r->pre > full / r->size || full % (r->pre * r->size) != 0)
        return lx_fail(L, r->pos,
                       "sub-axis '%.*s':(%lld)%lld does not divide axis '%.*s' of size %lld (pre-size >= 1, "
                       "size > 1 and below the axis's)",
                       (int)(e - s), L->text + s, (long long)r->pre, (long long)r->size, (int)(e - s), L->text + s,
                       (long long)full);
    return true;
}

static int64_t next_pre(const AxisRef *r)
{
    return r->pre * r->size;
}

/* XLA's AxisRef::CanCoexistWithoutOverlap and CanMerge, for each pair. */
static bool check_refs(Lexer *L, const Mesh *m, const AxisRef *r, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = i + 1; j < n; j++) {
            if (r[i].axis != r[j].axis)
                continue;
            const MeshAxis *a = &m->ax[r[i].axis];
            bool ok = r[i].pre > 0 && r[j].pre > 0 && !(next_pre(&r[i]) > r[j].pre && next_pre(&r[j]) > r[i].pre);
            if (ok) {
                int64_t hi = r[i].pre > r[j].pre ? r[i].pre : r[j].pre;
                int64_t lo_next = next_pre(&r[i]) < next_pre(&r[j]) ? next_pre(&r[i]) : next_pre(&r[j]);
                ok = hi % lo_next == 0;
            }
            if (!ok)
                return lx_fail(L, r[j].pos, "axis '%.*s' is named twice in the replica groups and its parts overlap",
                               (int)(a->e - a->s), L->text + a->s);
            if (j == i + 1 && next_pre(&r[i]) == r[j].pre)
                return lx_fail(L, r[j].pos, "sub-axes %lld and %lld of axis '%.*s' follow each other: write them as one",
                               (long long)r[i].size, (long long)r[j].size, (int)(a->e - a->s), L->text + a->s);
        }
    return true;
}

/* The pieces every mesh axis is cut into (dims, major to minor) and, for
 * each ref, the piece it names (piece[k]). A whole axis is one piece; an
 * axis with sub-axes is cut at their boundaries, filler pieces between. */
static int32_t cut_axes(const Mesh *m, const AxisRef *r, int32_t n, int64_t *dims, int32_t *piece)
{
    int32_t nd = 0;
    for (int32_t a = 0; a < m->n; a++) {
        int32_t on[MG_MAX_REFS], k = 0;
        for (int32_t i = 0; i < n; i++)
            if (r[i].axis == a)
                on[k++] = i;
        if (k == 1 && r[on[0]].pre == 0) {
            piece[on[0]] = nd;
            dims[nd++] = m->ax[a].size;
            continue;
        }
        /* By pre-size (insertion sort: k is small). */
        for (int32_t i = 1; i < k; i++)
            for (int32_t j = i; j > 0 && r[on[j - 1]].pre > r[on[j]].pre; j--) {
                int32_t t = on[j];
                on[j] = on[j - 1];
                on[j - 1] = t;
            }
        int64_t prod = 1;
        for (int32_t i = 0; i < k; i++) {
            if (r[on[i]].pre != prod)
                dims[nd++] = r[on[i]].pre / prod;
            piece[on[i]] = nd;
            dims[nd++] = r[on[i]].size;
            prod = next_pre(&r[on[i]]);
        }
        if (prod != m->ax[a].size)
            dims[nd++] = m->ax[a].size / prod;
    }
    return nd;
}

/* The mesh's devices transposed so that the named pieces come last, in
 * the order named, read row-major: g's groups, `gsize` devices each. */
static bool expand(Lexer *L, const Mesh *m, const AxisRef *r, int32_t n, int64_t gsize, IrReplicaGroups *g)
{
    int64_t dims[MG_MAX_DIMS], stride[MG_MAX_DIMS], idx[MG_MAX_DIMS];
    int32_t piece[MG_MAX_REFS] = {0}, perm[MG_MAX_DIMS], np = 0;
    int32_t nd = cut_axes(m, r, n, dims, piece);
    bool named[MG_MAX_DIMS] = {false};
    for (int32_t i = 0; i < n; i++)
        named[piece[i]] = true;
    for (int32_t d = 0; d < nd; d++)
        if (!named[d])
            perm[np++] = d;
    for (int32_t i = 0; i < n; i++)
        perm[np++] = piece[i];
    int64_t s = 1;
    for (int32_t d = nd - 1; d >= 0; d--) {
        stride[d] = s;
        s *= dims[d];
        idx[d] = 0;
    }
    int64_t *flat = ir_alloc_array(L->arena, (size_t)m->ndev, sizeof(int64_t));
    g->ngroups = (int32_t)(m->ndev / gsize);
    g->group_size = ir_alloc_array(L->arena, (size_t)g->ngroups, sizeof(int32_t));
    g->groups = ir_alloc_array(L->arena, (size_t)g->ngroups, sizeof(int64_t *));
    if (!flat || !g->group_size || !g->groups)
        return lx_nomem(L);
    for (int64_t o = 0; o < m->ndev; o++) {
        int64_t src = 0;
        for (int32_t j = 0; j < nd; j++)
            src += idx[perm[j]] * stride[perm[j]];
        flat[o] = m->devices ? m->devices[src] : src;
        for (int32_t j = nd - 1; j >= 0 && ++idx[perm[j]] == dims[perm[j]]; j--)
            idx[perm[j]] = 0;
    }
    for (int32_t i = 0; i < g->ngroups; i++) {
        g->group_size[i] = (int32_t)gsize;
        g->groups[i] = flat + (int64_t)i * gsize;
    }
    return true;
}

static void put_ints(IrStrBuf *b, const I64Vec *v)
{
    for (int32_t i = 0; i < v->n; i++)
        ir_sb_printf(b, i ? ",%lld" : "%lld", (long long)v->v[i]);
}

/* The form as XLA's MeshAxesReplicaGroupList::ToString spells it. */
static bool spell(Lexer *L, const Mesh *m, const AxisRef *r, int32_t n, const char **out)
{
    IrStrBuf b = {0};
    ir_sb_puts(&b, "mesh[");
    for (int32_t i = 0; i < m->n; i++)
        ir_sb_printf(&b, "%s'%.*s'=%lld", i ? "," : "", (int)(m->ax[i].e - m->ax[i].s), L->text + m->ax[i].s,
                     (long long)m->ax[i].size);
    ir_sb_puts(&b, "]");
    if (m->ids.n > 0) {
        ir_sb_puts(&b, ", device_ids=(");
        put_ints(&b, &m->ids);
        ir_sb_puts(&b, ")");
    } else if (m->dims.n > 0) {
        ir_sb_puts(&b, ", device_ids=([");
        put_ints(&b, &m->dims);
        ir_sb_puts(&b, "]T(");
        put_ints(&b, &m->perm);
        ir_sb_puts(&b, "))");
    }
    ir_sb_puts(&b, " {");
    for (int32_t i = 0; i < n; i++) {
        const MeshAxis *a = &m->ax[r[i].axis];
        ir_sb_printf(&b, "%s'%.*s'", i ? "," : "", (int)(a->e - a->s), L->text + a->s);
        if (r[i].pre > 0)
            ir_sb_printf(&b, ":(%lld)%lld", (long long)r[i].pre, (long long)r[i].size);
    }
    ir_sb_puts(&b, "}");
    char *s = ir_sb_take(&b);
    *out = s ? ir_strdup(L->arena, s) : NULL;
    ts_free(s);
    return *out != NULL || lx_nomem(L);
}

/* '{' (ref (',' ref)*)? '}' into r[0, *n), checked. */
static bool parse_refs(Lexer *L, const Mesh *m, AxisRef *r, int32_t *n, int64_t *gsize, IrPos *pos)
{
    *pos = L->tok.pos;
    if (!lx_expect(L, LX_LBRACE, "'{' to start the replica groups' axes"))
        return false;
    *n = 0;
    *gsize = 1;
    while (!lx_is(L, LX_RBRACE)) {
        if (*n == MG_MAX_REFS)
            return lx_fail(L, L->tok.pos, "replica groups name at most %d axes", MG_MAX_REFS);
        if (!parse_ref(L, m, &r[*n]))
            return false;
        *gsize *= r[(*n)++].size;
        if (!lx_eat(L, LX_COMMA))
            break;
    }
    return lx_expect(L, LX_RBRACE, "'}' to end the replica groups' axes") && check_refs(L, m, r, *n);
}

bool prs_parse_mesh_groups(Parser *P, IrReplicaGroups *g)
{
    Lexer *L = &P->L;
    Mesh m;
    memset(&m, 0, sizeof m);
    AxisRef r[MG_MAX_REFS];
    int32_t n = 0;
    int64_t gsize = 1;
    IrPos pos;
    bool ok = parse_mesh(L, &m) && parse_refs(L, &m, r, &n, &gsize, &pos);
    if (ok && gsize < 2)
        ok = lx_fail(L, pos, "mesh-axes replica groups need more than one device per group, found %lld",
                     (long long)gsize);
    if (ok && m.ndev > L->iota_left)
        ok = lx_fail(L, pos, "replica groups expand to more than %lld entries in all", (long long)LX_IOTA_BUDGET);
    if (ok)
        L->iota_left -= m.ndev;
    ok = ok && expand(L, &m, r, n, gsize, g) && spell(L, &m, r, n, &g->mesh);
    vec_free(&m.ids);
    vec_free(&m.dims);
    vec_free(&m.perm);
    return ok;
}
