/*
 * parse_values.c: the syntax of attribute values in the HLO text parser
 * (see parse.c; parse_attr_value in parse_attrs.c says which attribute
 * takes which): raw {...} groups, words, windows, paddings, dim labels,
 * slices, replica groups, source-target pairs, frontend attributes, callee
 * lists, control predecessors, shape lists, strings, epsilon, and the raw
 * text of attributes kept only for printing.
 */
#include "parse_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- attribute values ---- */

static bool push_span(Parser *P, Span s)
{
    SpanVec *v = &P->spans;
    if (v->n == v->cap && v->cap > INT32_MAX / 4)
        return lx_fail(&P->L, s.pos, "list too long");
    if (!IR_GROW(v->v, v->cap, v->n + 1))
        return lx_nomem(&P->L);
    v->v[v->n++] = s;
    return true;
}

/* Keep the raw text of a `{...}` group: inside the braces, or all of it. */
bool prs_raw_braces(Parser *P, const char **out, bool inside, const char *what)
{
    Lexer *L = &P->L;
    size_t s, e;
    if (!lx_is(L, LX_LBRACE))
        return lx_expected(L, what);
    if (!lx_raw_group(L, &s, &e))
        return false;
    *out = inside ? lx_dup(L, s + 1, e - 1) : lx_dup(L, s, e);
    return *out != NULL;
}

/* Match the current NAME against a set of words; store an arena copy. */
bool prs_parse_word(Parser *P, const char *const *words, const char **out, const char *what)
{
    Lexer *L = &P->L;
    if (lx_is(L, LX_NAME)) {
        for (size_t i = 0; words[i]; i++) {
            if (lx_is_word(L, words[i])) {
                *out = words[i];
                lx_next(L);
                return true;
            }
        }
    }
    return lx_expected_word(L, what, words);
}

static bool dxd_char(char c)
{
    return (c >= '0' && c <= '9') || c == 'x';
}

static bool pad_char(char c)
{
    return (c >= '0' && c <= '9') || c == 'x' || c == '_' || c == '-';
}

static bool label_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '_' || c == '-' || c == '>' ||
           c == '?';
}

/* Split text[s,e) at `sep` into integers: "3x3" -> {3, 3}; "-1_2" at '_'
 * -> {-1, 2}. Each part must be a (signed, if allowed) integer. */
static bool split_ints(Parser *P, size_t s, size_t e, char sep, bool allow_neg, I64Vec *out,
                       IrPos pos, const char *what)
{
    Lexer *L = &P->L;
    size_t p = s;
    for (;;) {
        size_t q = p;
        while (q < e && L->text[q] != sep)
            q++;
        bool neg = false;
        uint64_t mag = 0;
        if (!lx_parse_uint(L->text + p, q - p, &neg, &mag) || (neg && !allow_neg) ||
            mag > (uint64_t)INT64_MAX)
            return lx_fail(L, pos, "malformed %s '%.*s'", what, (int)(e - s), L->text + s);
        if (out->n >= L->lim.max_rank)
            return lx_fail(L, pos, "%s has more than %d entries", what, (int)L->lim.max_rank);
        if (!vec_push(L, out, neg ? -(int64_t)mag : (int64_t)mag))
            return false;
        if (q >= e)
            return true;
        p = q + 1;
    }
}

/* size=3x3 style: a raw run of digits and 'x'. */
static bool parse_dxd(Parser *P, I64Vec *out, const char *what)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    size_t s, e;
    char msg[64];
    snprintf(msg, sizeof msg, "%s value like 3x3", what);
    if (out->n > 0)
        return lx_fail(L, pos, "duplicate window %s=", what);
    return lx_raw_run(L, dxd_char, &s, &e, msg) && split_ints(P, s, e, 'x', false, out, pos, what);
}

/* Padding-like "lo_hi[_interior]x..." into up to three lists; `parts` is 2
 * (window pad) or 2..3 (pad op). Example "0_0_0x1_1" -> lo {0,1}, hi {0,1},
 * interior {0,0}. */
bool prs_parse_pads(Parser *P, bool allow_interior, IrI64List *lo, IrI64List *hi,
                       IrI64List *interior, const char *what)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    size_t s, e;
    char msg[80];
    snprintf(msg, sizeof msg, "%s like 0_0x1_1", what);
    if (!lx_raw_run(L, pad_char, &s, &e, msg))
        return false;
    I64Vec a = {0}, b = {0}, c = {0}, part = {0};
    bool ok = true;
    size_t p = s;
    while (ok) {
        size_t q = p;
        while (q < e && L->text[q] != 'x')
            q++;
        part.n = 0;
        ok = split_ints(P, p, q, '_', true, &part, pos, what);
        if (ok && (part.n < 2 || part.n > (allow_interior ? 3 : 2)))
            ok = lx_fail(L, pos, "malformed %s '%.*s': each dimension is lo_hi%s", what, (int)(e - s),
                         L->text + s, allow_interior ? " or lo_hi_interior" : "");
        ok = ok && vec_push(L, &a, part.v[0]) && vec_push(L, &b, part.v[1]) &&
             vec_push(L, &c, part.n == 3 ? part.v[2] : 0);
        if (ok && a.n > L->lim.max_rank)
            ok = lx_fail(L, pos, "%s has more than %d dimensions", what, (int)L->lim.max_rank);
        if (q >= e)
            break;
        p = q + 1;
    }
    ok = ok && vec_to_list(L, &a, lo) && vec_to_list(L, &b, hi) &&
         (!interior || vec_to_list(L, &c, interior));
    vec_free(&a);
    vec_free(&b);
    vec_free(&c);
    vec_free(&part);
    return ok;
}

/* window ::= '{' (sub '=' value)* '}' with sub in size stride pad
 * lhs_dilate rhs_dilate rhs_reversal; all lists as long as size. */
bool prs_parse_window(Parser *P, IrWindow *w)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    if (!lx_expect(L, LX_LBRACE, "'{' to start the window"))
        return false;
    I64Vec size = {0}, stride = {0}, lhs = {0}, rhs = {0}, rev = {0};
    IrI64List plo = {0}, phi = {0};
    bool has_pad = false, ok = true;
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (!lx_is_attr(L)) {
            ok = lx_expected(L, "window field (size=, stride=, pad=, lhs_dilate=, rhs_dilate=, rhs_reversal=) or '}'");
            break;
        }
        IrPos fpos = L->tok.pos;
        bool is_size = lx_is_word(L, "size"), is_stride = lx_is_word(L, "stride");
        bool is_pad = lx_is_word(L, "pad"), is_lhs = lx_is_word(L, "lhs_dilate");
        bool is_rhs = lx_is_word(L, "rhs_dilate"), is_rev = lx_is_word(L, "rhs_reversal");
        char buf[64];
        if (!(is_size || is_stride || is_pad || is_lhs || is_rhs || is_rev)) {
            static const char *const fields[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate",
                                                 "rhs_reversal", NULL};
            const char *near = lx_near(L, fields);
            ok = lx_fail(L, fpos, "unknown window field %s%s%s%s", lx_describe(L, buf, sizeof buf),
                         near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
            break;
        }
        lx_next(L);
        lx_next(L);
        if (is_pad) {
            if (has_pad)
                ok = lx_fail(L, fpos, "duplicate window pad=");
            has_pad = true;
            ok = ok && prs_parse_pads(P, false, &plo, &phi, NULL, "window pad");
        } else {
            ok = parse_dxd(P, is_size ? &size : is_stride ? &stride : is_lhs ? &lhs : is_rhs ? &rhs : &rev,
                           is_size ? "size" : is_stride ? "stride" : is_lhs ? "lhs_dilate" : is_rhs ? "rhs_dilate" : "rhs_reversal");
        }
        lx_eat(L, LX_COMMA);
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end the window");
    int32_t r = size.n;
    const struct { int32_t n; const char *name; } parts[] = {
        {stride.n, "stride"}, {lhs.n, "lhs_dilate"}, {rhs.n, "rhs_dilate"}, {rev.n, "rhs_reversal"},
        {plo.n, "pad"},
    };
    for (size_t i = 0; ok && i < sizeof parts / sizeof *parts; i++)
        if (parts[i].n != 0 && parts[i].n != r)
            ok = lx_fail(L, pos, "window %s= has %d entries but size= has %d", parts[i].name,
                         (int)parts[i].n, (int)r);
    if (ok && r > 0) {
        w->rank = r;
        w->dim = ir_alloc_array(P->m->arena, (size_t)r, sizeof(IrWindowDim));
        if (!w->dim)
            ok = lx_nomem(L);
        for (int32_t i = 0; ok && i < r; i++) {
            IrWindowDim *d = &w->dim[i];
            d->size = size.v[i];
            d->stride = stride.n ? stride.v[i] : 1;
            d->pad_lo = plo.n ? plo.v[i] : 0;
            d->pad_hi = phi.n ? phi.v[i] : 0;
            d->lhs_dilate = lhs.n ? lhs.v[i] : 1;
            d->rhs_dilate = rhs.n ? rhs.v[i] : 1;
            if (rev.n && rev.v[i] != 0 && rev.v[i] != 1)
                ok = lx_fail(L, pos, "window rhs_reversal= entries must be 0 or 1");
            d->reversal = rev.n && rev.v[i] == 1;
        }
    }
    vec_free(&size);
    vec_free(&stride);
    vec_free(&lhs);
    vec_free(&rhs);
    vec_free(&rev);
    return ok;
}

/* One side of dim_labels: letters `a` and `b` name the two non-spatial
 * dims, digits name spatial dims in order, '?' is skipped.
 * Example "b01f": a(b)=0, spatial {1, 2}, b(f)=3. */
static bool parse_label_side(Parser *P, IrPos pos, const char *all, size_t alln, const char *side,
                             const char *s, size_t n, char ca, char cb, int64_t *a, int64_t *b,
                             int64_t **spatial, int32_t *nspatial)
{
    Lexer *L = &P->L;
    int32_t ns = 0;
    bool has_a = false, has_b = false;
    for (size_t i = 0; i < n; i++)
        if (s[i] != ca && s[i] != cb && s[i] != '?')
            ns++;
    int64_t *sp = ir_alloc_array(P->m->arena, (size_t)(ns > 0 ? ns : 1), sizeof(int64_t));
    if (!sp)
        return lx_nomem(L);
    for (int32_t i = 0; i < ns; i++)
        sp[i] = -1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '?')
            continue;
        if ((c == ca && has_a) || (c == cb && has_b))
            return lx_fail(L, pos, "dim_labels '%.*s' names '%c' twice in the %s", (int)alln, all, c, side);
        if (c == ca) {
            *a = (int64_t)i;
            has_a = true;
        } else if (c == cb) {
            *b = (int64_t)i;
            has_b = true;
        } else if (c >= '0' && c - '0' < ns) {
            if (sp[c - '0'] >= 0)
                return lx_fail(L, pos, "dim_labels '%.*s' names '%c' twice in the %s", (int)alln, all, c, side);
            sp[c - '0'] = (int64_t)i;
        } else {
            return lx_fail(L, pos, "dim_labels '%.*s': '%c' is not a label of the %s (%c, %c, 0-%d, ?)", (int)alln,
                           all, c, side, ca, cb, ns - 1);
        }
    }
    if (!has_a || !has_b)
        return lx_fail(L, pos, "dim_labels '%.*s': the %s must name both '%c' and '%c'", (int)alln, all, side, ca,
                       cb);
    *spatial = sp;
    *nspatial = ns;
    return true;
}

/* dim_labels=LHS_RHS->OUT, e.g. b01f_01io->b01f. */
bool prs_parse_dim_labels(Parser *P, IrConvDnums *c)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    size_t s, e;
    if (!lx_raw_run(L, label_char, &s, &e, "dim labels like b01f_01io->b01f"))
        return false;
    const char *t = L->text + s;
    size_t n = e - s, us = n, ar = n;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '_' && us == n)
            us = i;
        if (t[i] == '-' && i + 1 < n && t[i + 1] == '>' && ar == n)
            ar = i;
    }
    if (us == n || ar == n || ar < us)
        return lx_fail(L, pos, "malformed dim_labels '%.*s': expected lhs_rhs->out", (int)n, t);
    int32_t n1, n2, n3;
    if (!parse_label_side(P, pos, t, n, "input", t, us, 'b', 'f', &c->in_batch, &c->in_feature, &c->in_spatial,
                          &n1) ||
        !parse_label_side(P, pos, t, n, "kernel", t + us + 1, ar - us - 1, 'i', 'o', &c->k_in_feature,
                          &c->k_out_feature, &c->k_spatial, &n2) ||
        !parse_label_side(P, pos, t, n, "output", t + ar + 2, n - ar - 2, 'b', 'f', &c->out_batch,
                          &c->out_feature, &c->out_spatial, &n3))
        return false;
    if (n1 != n2 || n1 != n3)
        return lx_fail(L, pos, "dim_labels '%.*s': input, kernel and output have %d, %d, %d spatial dimensions",
                       (int)n, t, (int)n1, (int)n2, (int)n3);
    c->nspatial = n1;
    c->present = true;
    return true;
}

/* slice ::= '{' ('[' start ':' limit (':' stride)? ']' (',' ...)*)? '}' */
bool prs_parse_slice(Parser *P, IrAttrsX *ax)
{
    Lexer *L = &P->L;
    I64Vec st = {0}, li = {0}, sd = {0};
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start slice");
    if (ok && !lx_is(L, LX_RBRACE)) {
        do {
            IrI64List r = {0};
            IrPos pos = L->tok.pos;
            ok = lx_int_list(L, LX_LSQUARE, LX_RSQUARE, LX_COLON, &r, "slice range");
            if (ok && r.n != 2 && r.n != 3)
                ok = lx_fail(L, pos, "expected [start:limit] or [start:limit:stride], found %d numbers", (int)r.n);
            if (ok && st.n >= L->lim.max_rank)
                ok = lx_fail(L, pos, "slice has more than %d dimensions", (int)L->lim.max_rank);
            ok = ok && vec_push(L, &st, r.v[0]) && vec_push(L, &li, r.v[1]) &&
                 vec_push(L, &sd, r.n == 3 ? r.v[2] : 1);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end slice") && vec_to_list(L, &st, &ax->slice_start) &&
         vec_to_list(L, &li, &ax->slice_limit) && vec_to_list(L, &sd, &ax->slice_stride);
    vec_free(&st);
    vec_free(&li);
    vec_free(&sd);
    return ok;
}

/* Replica groups given as lists: {{0,1},{2,3}} or {}. */
static bool parse_groups_list(Parser *P, IrReplicaGroups *g)
{
    Lexer *L = &P->L;
    IrArena *A = P->m->arena;
    lx_next(L);
    IrI64List *groups = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = true;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            if (n >= INT32_MAX / 4) {
                ok = lx_fail(L, L->tok.pos, "too many replica groups");
                break;
            }
            if (!IR_GROW(groups, cap, n + 1)) {
                ok = lx_nomem(L);
                break;
            }
            ok = lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &groups[n++], "replica group");
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end replica_groups");
    if (ok && n > 0) {
        g->ngroups = n;
        g->group_size = ir_alloc_array(A, (size_t)n, sizeof(int32_t));
        g->groups = ir_alloc_array(A, (size_t)n, sizeof(int64_t *));
        if (!g->group_size || !g->groups)
            ok = lx_nomem(L);
        for (int32_t i = 0; ok && i < n; i++) {
            g->group_size[i] = groups[i].n;
            g->groups[i] = groups[i].v;
        }
    }
    ts_free(groups);
    return ok;
}

/* open int (',' int)* close into a vector. */
bool prs_ints_between(Lexer *L, LxKind open, LxKind close, I64Vec *v, const char *what)
{
    if (!lx_expectf(L, open, "'%c' to start %s", open == LX_LSQUARE ? '[' : '(', what))
        return false;
    do {
        int64_t x = 0;
        if (!lx_intf(L, &x, "integer in %s", what) || !vec_push(L, v, x))
            return false;
    } while (lx_eat(L, LX_COMMA));
    return lx_expectf(L, close, "'%c' to end %s", close == LX_RSQUARE ? ']' : ')', what);
}

/* Iota replica groups [groups,size]<=[dims]T(perm): the devices of
 * iota(groups*size) reshaped to dims and transposed by perm, read
 * row-major and cut into `groups` rows of `size`.
 * Example [2,2]<=[2,2]T(1,0): 0,2,1,3 -> {0,2},{1,3}. */
static bool parse_groups_iota(Parser *P, IrReplicaGroups *g)
{
    Lexer *L = &P->L;
    IrArena *A = P->m->arena;
    IrPos pos = L->tok.pos;
    I64Vec shape = {0}, dims = {0}, perm = {0};
    bool has_perm = false;
    bool ok = prs_ints_between(L, LX_LSQUARE, LX_RSQUARE, &shape, "the replica group shape") &&
              lx_expect(L, LX_LEQ, "'<=' in iota replica groups") &&
              prs_ints_between(L, LX_LSQUARE, LX_RSQUARE, &dims, "the iota dimensions");
    if (ok && lx_is_word(L, "T")) {
        lx_next(L);
        has_perm = true;
        ok = prs_ints_between(L, LX_LPAREN, LX_RPAREN, &perm, "T(...)");
    }
    if (ok && shape.n != 2)
        ok = lx_fail(L, pos, "iota replica groups need [groups,size], found %d numbers", (int)shape.n);
    if (ok && (shape.v[0] < 0 || shape.v[1] < 0 || shape.v[0] > INT32_MAX || shape.v[1] > INT32_MAX ||
               (shape.v[1] > 0 && shape.v[0] > ((int64_t)1 << 24) / shape.v[1])))
        ok = lx_fail(L, pos, "iota replica groups [%lld,%lld] are too large", (long long)shape.v[0],
                     (long long)shape.v[1]);
    int64_t *devices = NULL, *iota_dims = NULL;
    int32_t *iota_perm = NULL;
    int64_t n = ok ? shape.v[0] * shape.v[1] : 0;
    ok = ok && lx_iota_devices(L, pos, &dims, &perm, has_perm, n, false, &iota_dims, &iota_perm, &devices) &&
         vec_to_list(L, &shape, &g->iota_shape);
    if (ok) {
        g->iota = true;
        g->ngroups = (int32_t)shape.v[0];
        g->iota_reshape.n = dims.n;
        g->iota_reshape.v = iota_dims;
        g->iota_perm = iota_perm;
        g->niota_perm = iota_perm ? dims.n : 0;
    }
    if (ok && g->ngroups > 0) {
        g->group_size = ir_alloc_array(A, (size_t)g->ngroups, sizeof(int32_t));
        g->groups = ir_alloc_array(A, (size_t)g->ngroups, sizeof(int64_t *));
        if (!g->group_size || !g->groups)
            ok = lx_nomem(L);
        for (int32_t i = 0; ok && i < g->ngroups; i++) {
            g->group_size[i] = (int32_t)shape.v[1];
            g->groups[i] = devices + (int64_t)i * shape.v[1];
        }
    }
    vec_free(&shape);
    vec_free(&dims);
    vec_free(&perm);
    return ok;
}

/* replica_groups ::= '{' ('{' ints '}' (',' ...)*)? '}' | iota form | mesh-axes form */
bool prs_parse_replica_groups(Parser *P, IrReplicaGroups *g)
{
    g->present = true;
    if (lx_is(&P->L, LX_LBRACE))
        return parse_groups_list(P, g);
    if (lx_is_word(&P->L, "mesh"))
        return prs_parse_mesh_groups(P, g);
    if (!lx_is(&P->L, LX_LSQUARE))
        return lx_expected(&P->L, "'{', '[' or mesh[...] to start replica_groups");
    return parse_groups_iota(P, g);
}

/* source_target_pairs={{0,1},{1,0}} -> flattened {0,1,1,0}. */
bool prs_parse_pairs(Parser *P, IrI64List *out)
{
    Lexer *L = &P->L;
    I64Vec v = {0};
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start source_target_pairs");
    if (ok && !lx_is(L, LX_RBRACE)) {
        do {
            IrPos pos = L->tok.pos;
            IrI64List pair = {0};
            ok = lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &pair, "source-target pair");
            if (ok && pair.n != 2)
                ok = lx_fail(L, pos, "a source-target pair has 2 entries, found %d", (int)pair.n);
            ok = ok && vec_push(L, &v, pair.v[0]) && vec_push(L, &v, pair.v[1]);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end source_target_pairs") && vec_to_list(L, &v, out);
    vec_free(&v);
    return ok;
}

/* frontend_attributes={k="v", k2={json}} into key/value pairs. */
bool prs_parse_frontend(Parser *P, IrKeyValue **out, int32_t *n)
{
    Lexer *L = &P->L;
    P->kvs.n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start frontend_attributes"))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            if (!lx_is_attr(L) && !(lx_is(L, LX_STRING) && lx_peek(L).kind == LX_EQUAL))
                return lx_expected(L, "frontend attribute name=value");
            IrKeyValue kv = {0};
            char *key;
            if (lx_is(L, LX_STRING)) {
                if (!lx_string(L, &key, "key"))
                    return false;
            } else {
                if (!(key = lx_dup(L, L->tok.start, L->tok.end)))
                    return false;
                lx_next(L);
            }
            lx_next(L); /* '=' */
            kv.key = key;
            if (lx_is(L, LX_STRING)) {
                char *v;
                if (!lx_string(L, &v, "value"))
                    return false;
                kv.value = v;
            } else if (!prs_raw_braces(P, &kv.value, false, "string or {...} value")) {
                return false;
            }
            if (!prs_push_kv(P, kv))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    return lx_expect(L, LX_RBRACE, "'}' to end frontend_attributes") && prs_take_kvs(P, out, n);
}

/* A computation name or an inline computation (callee attribute). */
bool prs_parse_callee(Parser *P, InstrCtx *x, AttrId id)
{
    if (lx_is(&P->L, LX_LBRACE))
        return prs_inline_callee(P, x, id, -1, &x->callee[id]);
    return prs_take_name(P, &x->callee[id], "computation name");
}

/* '{' callee (',' callee)* '}' into x->list. */
bool prs_parse_callee_list(Parser *P, InstrCtx *x, AttrId id)
{
    Lexer *L = &P->L;
    P->spans.n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start the computation list"))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            Span s = {0};
            bool ok = lx_is(L, LX_LBRACE) ? prs_inline_callee(P, x, id, P->spans.n, &s)
                                          : prs_take_name(P, &s, "computation name");
            if (!ok || !push_span(P, s))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end the computation list"))
        return false;
    x->nlist = P->spans.n;
    x->list = ir_alloc_array(P->m->arena, (size_t)(x->nlist > 0 ? x->nlist : 1), sizeof(Span));
    if (!x->list)
        return lx_nomem(L);
    memcpy(x->list, P->spans.v, (size_t)x->nlist * sizeof(Span));
    return true;
}

/* control-predecessors={a, b}: resolved with the operands. */
bool prs_parse_control(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    int32_t k = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start control-predecessors"))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            Span s = {0};
            if (!prs_take_name(P, &s, "instruction name") ||
                !prs_push_ref(P, &P->local, (Ref){x->comp, x->index, k++, REF_CONTROL, s, NULL}))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end control-predecessors"))
        return false;
    IrI64List *cp = &prs_x(x)->control_predecessors;
    cp->n = k;
    if (k > 0) {
        cp->v = ir_alloc_array(P->m->arena, (size_t)k, sizeof(int64_t));
        if (!cp->v)
            return lx_nomem(L);
        for (int32_t i = 0; i < k; i++)
            cp->v[i] = -1;
    }
    return true;
}

/* '{' shape (',' shape)* '}' */
bool prs_parse_shape_list(Parser *P, IrAttrsX *ax)
{
    Lexer *L = &P->L;
    IrShape *v = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start the shape list");
    if (ok && !lx_is(L, LX_RBRACE)) {
        do {
            if (n >= L->lim.max_tuple) {
                ok = lx_fail(L, L->tok.pos, "more than %d shapes", (int)L->lim.max_tuple);
                break;
            }
            if (!IR_GROW(v, cap, n + 1)) {
                ok = lx_nomem(L);
                break;
            }
            ok = prs_parse_shape(P, &v[n++]);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end the shape list");
    if (ok) {
        ax->noperand_layouts = n;
        ax->operand_layout_constraints = ir_alloc_array(P->m->arena, (size_t)(n > 0 ? n : 1), sizeof(IrShape));
        if (!ax->operand_layout_constraints)
            ok = lx_nomem(L);
        else
            memcpy(ax->operand_layout_constraints, v, (size_t)n * sizeof(IrShape));
    }
    ts_free(v);
    return ok;
}

bool prs_parse_string_attr(Parser *P, const char **out)
{
    Lexer *L = &P->L;
    char *s;
    /* a bare word where a string goes (custom_call_target=Sharding) */
    if (lx_is(L, LX_NAME)) {
        char buf[64];
        return lx_fail(L, L->tok.pos, "expected a string in quotes, found %s: write \"%.*s\"",
                       lx_describe(L, buf, sizeof buf), (int)(lx_word_end(L) - L->tok.start), lx_text(L));
    }
    if (!lx_string(L, &s, "string"))
        return false;
    *out = s;
    return true;
}

/* epsilon=1e-05: a float, as batch-norm keeps it. */
bool prs_parse_epsilon(Parser *P, float *out)
{
    Lexer *L = &P->L;
    if (!lx_is(L, LX_FLOAT) && !lx_is(L, LX_INT))
        return lx_expected(L, "number after epsilon=");
    char buf[64];
    size_t n = lx_tlen(L);
    if (n >= sizeof buf)
        return lx_fail(L, L->tok.pos, "epsilon is too long");
    memcpy(buf, lx_text(L), n);
    buf[n] = 0;
    char *end;
    *out = strtof(buf, &end);
    if (*end != 0)
        return lx_expected(L, "number after epsilon=");
    lx_next(L);
    return true;
}

/* Append name=TEXT[s,e) to the instruction's kept attributes. Rare (a few
 * per module), so the list grows by one copy in the arena each time. */
bool prs_keep_attr(Parser *P, IrAttrsX *ax, const char *name, size_t s, size_t e)
{
    IrKeyValue *kv = ir_alloc_array(P->m->arena, (size_t)ax->nkept + 1, sizeof *kv);
    char *v = lx_dup(&P->L, s, e);
    if (!kv || !v)
        return lx_nomem(&P->L);
    if (ax->nkept > 0)
        memcpy(kv, ax->kept, (size_t)ax->nkept * sizeof *kv);
    kv[ax->nkept].key = name;
    kv[ax->nkept].value = v;
    ax->kept = kv;
    ax->nkept++;
    return true;
}
