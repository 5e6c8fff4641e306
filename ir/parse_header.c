/*
 * parse_header.c: the module header in the HLO text parser (see parse.c):
 * 'HloModule' name (',' header_attr)*, with input_output_alias,
 * buffer_donor (checked against the entry once it is parsed:
 * prs_check_donors), the attributes kept raw for printing, and the stack frame tables newer XLA
 * prints after it.
 */
#include "parse_internal.h"

#include <string.h>

/* ---- the module header ---- */

/* input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {0}, must-alias) } */
static bool parse_aliases(Parser *P)
{
    Lexer *L = &P->L;
    IrAlias *v = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start input_output_alias");
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (n >= INT32_MAX / 4) {
            ok = lx_fail(L, L->tok.pos, "too many aliases");
            break;
        }
        if (!IR_GROW(v, cap, n + 1)) {
            ok = lx_nomem(L);
            break;
        }
        IrAlias *al = &v[n++];
        memset(al, 0, sizeof *al);
        al->pos = L->tok.pos;
        ok = lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &al->output_index, "output shape index") &&
             lx_expect(L, LX_COLON, "':' after the output index") &&
             lx_expect(L, LX_LPAREN, "'(' to start the aliased parameter") &&
             lx_int(L, &al->param_number, "parameter number") &&
             lx_expect(L, LX_COMMA, "',' after the parameter number") &&
             lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &al->param_index, "parameter shape index");
        if (ok && lx_eat(L, LX_COMMA)) {
            if (lx_is_word(L, "must-alias") || lx_is_word(L, "may-alias")) {
                al->must_alias = lx_is_word(L, "must-alias");
                lx_next(L);
            } else {
                static const char *const kinds[] = {"may-alias", "must-alias", NULL};
                ok = lx_expected_word(L, "may-alias or must-alias", kinds);
            }
        }
        ok = ok && lx_expect(L, LX_RPAREN, "')' to end the alias");
        if (ok && !lx_eat(L, LX_COMMA))
            break;
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end input_output_alias");
    if (ok && n > 0) {
        P->m->alias = ir_alloc_array(P->m->arena, (size_t)n, sizeof(IrAlias));
        if (!P->m->alias)
            ok = lx_nomem(L);
        else
            memcpy(P->m->alias, v, (size_t)n * sizeof(IrAlias));
        P->m->nalias = n;
    }
    ts_free(v);
    return ok;
}

/* buffer_donor={ (0, {}), (1, {0}) }: each entry a parameter number and
 * a shape index inside it, kept with its position; prs_check_donors checks
 * them against the entry once it is parsed. */
static bool parse_donors(Parser *P)
{
    Lexer *L = &P->L;
    IrDonor *v = NULL;
    int32_t n = 0;
    int64_t cap = 0;
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start buffer_donor");
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (n >= INT32_MAX / 4) {
            ok = lx_fail(L, L->tok.pos, "too many buffer donors");
            break;
        }
        if (!IR_GROW(v, cap, n + 1)) {
            ok = lx_nomem(L);
            break;
        }
        IrDonor *dn = &v[n++];
        memset(dn, 0, sizeof *dn);
        dn->pos = L->tok.pos;
        ok = lx_expect(L, LX_LPAREN, "'(' to start a buffer donor (parameter, {index})") &&
             lx_int(L, &dn->param_number, "parameter number") &&
             lx_expect(L, LX_COMMA, "',' after the parameter number") &&
             lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &dn->param_index, "parameter shape index") &&
             lx_expect(L, LX_RPAREN, "')' to end the buffer donor");
        if (ok && !lx_eat(L, LX_COMMA))
            break;
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end buffer_donor");
    if (ok && n > 0) {
        P->m->donor = ir_alloc_array(P->m->arena, (size_t)n, sizeof(IrDonor));
        if (!P->m->donor)
            ok = lx_nomem(L);
        else
            memcpy(P->m->donor, v, (size_t)n * sizeof(IrDonor));
        P->m->ndonor = n;
    }
    ts_free(v);
    return ok;
}

static bool same_index(const IrShapeIndex *a, const IrShapeIndex *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->v, b->v, (size_t)a->n * sizeof *a->v) == 0);
}

/* Each buffer donor names a parameter of the entry and an index inside
 * its shape, once, and is not also one of input_output_alias's parameters
 * (XLA's verifier refuses both: the alias already says where it goes). */
bool prs_check_donors(Parser *P)
{
    Lexer *L = &P->L;
    const IrModule *m = P->m;
    const IrComputation *e = ir_entry(m);
    for (int32_t k = 0; e && k < m->ndonor; k++) {
        const IrDonor *dn = &m->donor[k];
        int64_t p = dn->param_number;
        if (p < 0 || p >= e->nparam || e->param[p] < 0)
            return lx_fail(L, dn->pos, "buffer_donor: the entry computation %s has no parameter %lld (it has %d)",
                           e->name, (long long)p, (int)e->nparam);
        const IrShape *s = &e->instr[e->param[p]].shape;
        for (int32_t j = 0; j < dn->param_index.n; j++) {
            int64_t i = dn->param_index.v[j];
            if (s->type != IR_TUPLE || i < 0 || i >= s->ntuple)
                return lx_fail(L, dn->pos, "buffer_donor: parameter %lld has no leaf at index %lld of its "
                               "shape index", (long long)p, (long long)i);
            s = &s->tuple[i];
        }
        for (int32_t j = 0; j < k; j++)
            if (m->donor[j].param_number == p && same_index(&m->donor[j].param_index, &dn->param_index))
                return lx_fail(L, dn->pos, "buffer_donor: parameter %lld is named twice", (long long)p);
        for (int32_t j = 0; j < m->nalias; j++)
            if (m->alias[j].param_number == p && same_index(&m->alias[j].param_index, &dn->param_index))
                return lx_fail(L, dn->pos, "buffer_donor: parameter %lld is also in input_output_alias (a "
                               "parameter is aliased or donated, not both)", (long long)p);
    }
    return true;
}

/* Module attributes that do not change meaning, kept raw for printing. */
static const char *const kept_header_attrs[] = {
    "alias_passthrough_params", "frontend_attributes",
    "allow_spmd_sharding_propagation_to_parameters", "allow_spmd_sharding_propagation_to_output",
    "origin_recovery_table", "debug_attributes", NULL,
};

static bool parse_header_attr(Parser *P, uint32_t *seen, int *nseen_kept)
{
    Lexer *L = &P->L;
    IrModule *m = P->m;
    char buf[80];
    if (!lx_is_attr(L))
        return lx_expected(L, "module attribute name=value");
    IrPos pos = L->tok.pos;
    static const char *const known[] = {"is_scheduled", "replica_count", "num_partitions",
                                        "entry_computation_layout", "input_output_alias", "buffer_donor", NULL};
    int k = -1;
    for (int i = 0; known[i]; i++)
        if (lx_is_word(L, known[i]))
            k = i;
    int kept = -1;
    for (int i = 0; k < 0 && kept_header_attrs[i]; i++)
        if (lx_is_word(L, kept_header_attrs[i]))
            kept = i;
    if (k < 0 && kept < 0) {
        const char *all[16];
        int na = 0;
        for (int i = 0; known[i]; i++)
            all[na++] = known[i];
        for (int i = 0; kept_header_attrs[i] && na < 15; i++)
            all[na++] = kept_header_attrs[i];
        all[na] = NULL;
        const char *near = lx_near(L, all);
        return lx_fail(L, pos, "unknown module attribute %s%s%s%s", lx_describe(L, buf, sizeof buf),
                       near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    }
    uint32_t bit = k >= 0 ? 1u << k : 1u << (8 + kept);
    if (*seen & bit)
        return lx_fail(L, pos, "duplicate module attribute %s", lx_describe(L, buf, sizeof buf));
    *seen |= bit;
    size_t name_start = L->tok.start, name_end = L->tok.end;
    lx_next(L);
    lx_next(L);
    IrPos vpos = L->tok.pos;
    switch (k) {
    case 0:
        return lx_bool(L, &m->is_scheduled, "true or false after is_scheduled=");
    case 1:
    case 2: {
        int64_t v = 0;
        if (!lx_int(L, &v, "integer"))
            return false;
        if (v < 1)
            return lx_fail(L, vpos, "%s must be >= 1, found %lld", known[k], (long long)v);
        *(k == 1 ? &m->replica_count : &m->num_partitions) = v;
        return true;
    }
    case 3:
        return prs_raw_braces(P, &m->entry_computation_layout, true, "'{' after entry_computation_layout=");
    case 4:
        return parse_aliases(P);
    case 5:
        return parse_donors(P);
    default:
        break;
    }
    size_t s, e;
    IrKeyValue kv = {0};
    if (!lx_raw_value(L, &s, &e) || !(kv.key = lx_dup(L, name_start, name_end)) ||
        !(kv.value = lx_dup(L, s, e)) || !prs_push_kv(P, kv))
        return false;
    (*nseen_kept)++;
    return true;
}

/* FileNames / FunctionNames / FileLocations / StackFrames tables that newer
 * XLA prints after the header: checked for their form (NAME, then `ID
 * "string"` or `ID {...}` rows) and kept raw for printing; they only feed
 * metadata, so nothing reads them. */
bool prs_skip_stack_frames(Parser *P)
{
    Lexer *L = &P->L;
    static const char *const sections[] = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"};
    size_t start = L->tok.start, end = L->tok.end;
    for (int i = 0; i < 4; i++) {
        if (!lx_is_word(L, sections[i])) {
            const char *const one[] = {sections[i], NULL};
            return lx_expected_word(L, sections[i], one);
        }
        end = L->tok.end;
        lx_next(L);
        while (lx_is(L, LX_INT)) {
            lx_next(L);
            size_t s, e;
            if (lx_is(L, LX_STRING)) {
                end = L->tok.end;
                lx_next(L);
            } else if (!lx_raw_group(L, &s, &e)) {
                return false;
            } else {
                end = e;
            }
        }
    }
    return (P->m->stack_frames = lx_dup(L, start, end)) != NULL;
}

bool prs_parse_header(Parser *P)
{
    Lexer *L = &P->L;
    lx_next(L);
    Span name = {0};
    /* HloModule without its name: the next line's ENTRY was taken for it,
     * the module read without an ENTRY */
    if (lx_is_word(L, "ENTRY"))
        return lx_expected(L, "the module name after HloModule");
    if (!prs_take_name(P, &name, "module name"))
        return false;
    char *n = prs_span_dup(P, name);
    if (!n)
        return false;
    P->m->name = n;
    uint32_t seen = 0;
    int nkept = 0;
    P->kvs.n = 0;
    while (lx_eat(L, LX_COMMA))
        if (!parse_header_attr(P, &seen, &nkept))
            return false;
    if (!prs_take_kvs(P, &P->m->header_attr, &P->m->nheader_attr))
        return false;
    int64_t np = P->m->num_partitions > 0 ? P->m->num_partitions : 1;
    int64_t rc = P->m->replica_count > 0 ? P->m->replica_count : 1;
    if (np > INT64_MAX / rc)
        return lx_fail(L, name.pos, "num_partitions * replica_count overflows");
    /* Shardings name partitions; every replica runs the same program. */
    if (P->m->num_partitions > 0)
        P->num_devices = np;
    return true;
}
