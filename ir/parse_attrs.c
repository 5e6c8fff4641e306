/*
 * parse_attrs.c: instruction attributes in the HLO text parser (see
 * parse.c). Which attributes an op takes and how each value is read come
 * from the tables of hlo_attrs.def (ops.c); here are the readers of the
 * generic forms, the values with a syntax of their own (the larger ones
 * in parse_values.c), and the attributes an op requires.
 */
#include "parse_internal.h"

#include <ctype.h>
#include <string.h>

/* ---- attributes ---- */

/* The attribute applies to the instruction being parsed: a sugared
 * `OP-start` takes the attributes of the op it wraps, besides its own. */
static bool attr_applies_to(AttrId id, const IrInstr *ins)
{
    if (ir_attr_applies(id, ins->op) && !(ins->a.x->async_sugar && id == A_CALLS))
        return true;
    return ins->a.x->async_sugar && ins->op == OP_ASYNC_START && ir_attr_applies(id, ins->a.x->async_wrapped_op);
}

const char *prs_attr_name(AttrId id)
{
    return id < A_COUNT ? ir_attr_info(id)->name : "?";
}

/* The words of the SPECIAL attributes that store something else than the
 * word (an enum) or depend on the op; the WORD attributes' lists are in
 * hlo_attrs.def. */
static const char *const directions[] = {"EQ", "NE", "LT", "LE", "GT", "GE", NULL};
static const char *const cmp_types[] = {"FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED", NULL};
static const char *const cmp_orders[] = {"TOTALORDER", "PARTIALORDER", NULL};
static const char *const rng_algs[] = {"rng_default", "rng_three_fry", "rng_philox", NULL};

static int word_index(const char *const *words, const char *w)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(words[i], w) == 0)
            return i;
    return -1;
}

static const char *word_of(void *ctx, int32_t i)
{
    return ((const char *const *)ctx)[i];
}

/* operand_precision={highest,default}: each entry one of XLA's precisions,
 * in any case (XLA prints lower case): a slip ("higest") was kept raw and
 * read as not "highest", so the dot silently ran inexact. `text` is the
 * braces' text as written, starting at `pos`. */
static bool check_precisions(Lexer *L, IrPos pos, const char *text)
{
    static const char *const precisions[] = {"default", "high", "highest", "packed_nibble", NULL};
    size_t i = 1, n = strlen(text);
    while (i + 1 < n) {
        while (i + 1 < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == ','))
            i++;
        size_t s = i;
        while (i + 1 < n && text[i] != ',' && text[i] != ' ' && text[i] != '\t' && text[i] != '\n')
            i++;
        if (i == s)
            break;
        char low[32];
        size_t len = i - s < sizeof low ? i - s : sizeof low - 1;
        for (size_t k = 0; k < len; k++)
            low[k] = (char)tolower((unsigned char)text[s + k]);
        low[len] = 0;
        if (word_index(precisions, low) >= 0 && i - s == len)
            continue;
        IrPos at = pos;
        for (size_t k = 0; k < s; k++)
            at = text[k] == '\n' ? (IrPos){at.line + 1, 1} : (IrPos){at.line, at.col + 1};
        const char *near = ir_nearest(low, len, 4, word_of, (void *)precisions);
        return lx_fail(L, at, "unknown operand precision '%.*s' (expected default, high, highest or packed_nibble)%s%s%s",
                       (int)(i - s > 40 ? 40 : i - s), text + s, near ? "; did you mean " : "", near ? near : "",
                       near ? "?" : "");
    }
    return true;
}

/* The member of a generic form, in the instruction's attributes or in its
 * writable IrAttrsX (ops.c checks its type). */
static void *field(InstrCtx *x, const IrAttrInfo *ai)
{
    return ai->cold ? (char *)prs_x(x) + ai->field : (char *)&x->ins.a + ai->field;
}

/* The value of a generic-form attribute, read as its FORM says
 * (hlo_attrs.def); the diagnostic texts name the attribute. */
static bool parse_generic_value(Parser *P, InstrCtx *x, AttrId id, const IrAttrInfo *ai)
{
    Lexer *L = &P->L;
    IrAttrs *a = &x->ins.a;
    char what[80];
    size_t s, e;
    if (ai->has_flag)
        *(bool *)((ai->has_cold ? (char *)prs_x(x) : (char *)a) + ai->has) = true;
    switch (ai->form) {
    case IR_AF_INT:
    case IR_AF_COUNT:
        snprintf(what, sizeof what, "integer after %s=", ai->name);
        return lx_int(L, field(x, ai), what);
    case IR_AF_INTS:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, field(x, ai), ai->name);
    case IR_AF_BOOL:
        return lx_bool(L, field(x, ai), "true or false");
    case IR_AF_STR:
        return prs_parse_string_attr(P, field(x, ai));
    case IR_AF_WORD:
        return prs_parse_word(P, ai->words->w, field(x, ai), ai->words->expected);
    case IR_AF_RAW:
    case IR_AF_INNER:
        snprintf(what, sizeof what, "'{' after %s=", ai->name);
        return prs_raw_braces(P, field(x, ai), ai->form == IR_AF_INNER, what);
    case IR_AF_KEEP:
        return lx_raw_value(L, &s, &e) && prs_keep_attr(P, prs_x(x), ai->name, s, e);
    case IR_AF_CALLEE:
        return prs_parse_callee(P, x, id);
    case IR_AF_CALLEES:
        return prs_parse_callee_list(P, x, id);
    case IR_AF_SPECIAL:
        break;
    }
    return lx_fail(L, L->tok.pos, "internal: unhandled attribute form");
}

/* The value of attribute `id` for the instruction being built: the generic
 * forms by the table, the SPECIAL ones here. */
static bool parse_attr_value(Parser *P, InstrCtx *x, AttrId id, IrPos apos)
{
    Lexer *L = &P->L;
    IrAttrs *a = &x->ins.a;
    const IrAttrInfo *ai = ir_attr_info(id);
    const char *w = NULL;
    if (ai->form != IR_AF_SPECIAL)
        return parse_generic_value(P, x, id, ai);
    switch (id) {
    case A_SHARDING: {
        IrSharding *sh = ir_alloc(P->m->arena, sizeof *sh);
        if (!sh)
            return lx_nomem(L);
        if (!ir_shd_parse_lx(L, sh))
            return false;
        x->ins.sharding = sh;
        x->sharding_pos = apos;
        if (x->no_shape)
            return true; /* validated once the shape is inferred */
        IrStatus st = ir_sharding_validate(sh, &x->ins.shape, P->num_devices, L->d, L->file, L->src, apos);
        if (st != IR_OK) {
            L->st = st;
            return false;
        }
        return true;
    }
    case A_FRONTEND:
        return prs_parse_frontend(P, &a->frontend, &a->nfrontend);
    case A_BACKEND:
        if (lx_is(L, LX_STRING)) {
            prs_x(x)->backend_config = lx_dup(L, L->tok.start, L->tok.end);
            lx_next(L);
            return prs_x(x)->backend_config != NULL;
        }
        return prs_raw_braces(P, &prs_x(x)->backend_config, false, "string or {...} after backend_config=");
    case A_CONTROL:
        return prs_parse_control(P, x);
    case A_SLICE:
        return prs_parse_slice(P, prs_x(x));
    case A_PADDING:
        return prs_parse_pads(P, true, &prs_x(x)->pad_lo, &prs_x(x)->pad_hi, &prs_x(x)->pad_interior, "padding");
    case A_WINDOW:
        return prs_parse_window(P, &prs_x(x)->window);
    case A_DIM_LABELS:
        return prs_parse_dim_labels(P, &prs_x(x)->conv);
    case A_PRECISION: {
        IrPos ppos = L->tok.pos;
        return prs_raw_braces(P, &a->precision_config, false, "'{' after operand_precision=") &&
               check_precisions(L, ppos, a->precision_config);
    }
    case A_ALGORITHM:
        if (x->ins.op == OP_RNG_BIT_GENERATOR)
            return prs_parse_word(P, rng_algs, &prs_x(x)->rng_algorithm, "rng_default, rng_three_fry or rng_philox");
        if (!lx_is(L, LX_NAME))
            return lx_expected(L, "algorithm name");
        prs_x(x)->algorithm = lx_dup(L, L->tok.start, L->tok.end);
        lx_next(L);
        return prs_x(x)->algorithm != NULL;
    case A_DIRECTION:
        if (!prs_parse_word(P, directions, &w, "comparison direction EQ, NE, LT, LE, GT or GE"))
            return false;
        a->direction = (IrCmpDir)(CMP_EQ + word_index(directions, w));
        return true;
    case A_CMP_TYPE:
    case A_CMP_ORDER:
        if (id == A_CMP_TYPE ? !prs_parse_word(P, cmp_types, &w, "comparison type FLOAT, TOTALORDER, SIGNED or UNSIGNED")
                             : !prs_parse_word(P, cmp_orders, &w, "comparison order TOTALORDER or PARTIALORDER"))
            return false;
        if (x->seen[id == A_CMP_TYPE ? A_CMP_ORDER : A_CMP_TYPE])
            return lx_fail(L, apos, "compare cannot have both type= and order=");
        a->cmp_type = strcmp(w, "FLOAT") == 0 || strcmp(w, "PARTIALORDER") == 0 ? CMPT_FLOAT
                      : strcmp(w, "TOTALORDER") == 0                              ? CMPT_TOTALORDER
                      : strcmp(w, "SIGNED") == 0                                  ? CMPT_SIGNED
                                                                                  : CMPT_UNSIGNED;
        return true;
    case A_INDEX_VECTOR_DIM:
        return lx_int(L, x->ins.op == OP_GATHER ? &prs_x(x)->gather.index_vector_dim : &prs_x(x)->scatter.index_vector_dim,
                      "integer after index_vector_dim=");
    case A_SLICE_SIZES:
        if (x->ins.op != OP_GATHER) /* collective-permute's in-place form: {{...},...} */
            return prs_raw_braces(P, &prs_x(x)->permute_slice_sizes, false, "'{' after slice_sizes=");
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &prs_x(x)->slice_sizes, "slice_sizes");
    case A_REPLICA_GROUPS:
        return prs_parse_replica_groups(P, &prs_x(x)->replica_groups);
    case A_SOURCE_TARGET:
        return prs_parse_pairs(P, &prs_x(x)->source_target_pairs);
    case A_OPERAND_LAYOUTS:
        return prs_parse_shape_list(P, prs_x(x));
    case A_OUTFEED_SHAPE:
        prs_x(x)->has_outfeed_shape = true;
        return prs_parse_shape(P, &prs_x(x)->outfeed_shape);
    case A_ASYNC_THREAD:
        if (!lx_is(L, LX_STRING))
            return lx_expected(L, "string after async_execution_thread=");
        prs_x(x)->async_execution_thread = lx_dup(L, L->tok.start, L->tok.end); /* quotes kept */
        lx_next(L);
        return prs_x(x)->async_execution_thread != NULL;
    case A_EPSILON:
        return prs_parse_epsilon(P, &prs_x(x)->epsilon);
    default:
        break;
    }
    return lx_fail(L, apos, "internal: unhandled attribute");
}

/* attribute ::= name '=' value, checked against the op. */
/* The attribute named by the current token, A_COUNT if none (a %name is
 * not an attribute name). */
static AttrId attr_lookup(const Lexer *L)
{
    if (L->tok.kind != LX_NAME || (L->tok.start > 0 && L->text[L->tok.start - 1] == '%'))
        return A_COUNT;
    return ir_attr_from_name(lx_text(L), lx_tlen(L));
}

/* The attributes instruction ctx takes, by index: for ir_nearest. */
static const char *attr_of(void *ctx, int32_t i)
{
    const IrInstr *ins = ctx;
    return i < A_COUNT && attr_applies_to((AttrId)i, ins) ? ir_attr_info((AttrId)i)->name : NULL;
}

bool prs_parse_attribute(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    char buf[80];
    if (!lx_is_attr(L)) {
        /* a known attribute without its '=' (dimensions {1}) */
        if (attr_lookup(L) != A_COUNT)
            return lx_fail(L, lx_peek(L).pos, "expected '=' after attribute %s", lx_describe(L, buf, sizeof buf));
        return lx_expected(L, "attribute name=value");
    }
    IrPos apos = L->tok.pos;
    AttrId id = attr_lookup(L);
    char opbuf[64];
    const char *op = op_text(&x->ins, opbuf, sizeof opbuf);
    if (id == A_COUNT) {
        const char *near = ir_nearest(lx_text(L), lx_tlen(L), A_COUNT, attr_of, &x->ins);
        return lx_fail(L, apos, "unknown attribute %s for %s%s%s%s", lx_describe(L, buf, sizeof buf), op,
                       near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    }
    if (!attr_applies_to(id, &x->ins))
        return lx_fail(L, apos, "attribute %s does not apply to %s", lx_describe(L, buf, sizeof buf), op);
    if (x->seen[id])
        return lx_fail(L, apos, "duplicate attribute %s", lx_describe(L, buf, sizeof buf));
    x->seen[id] = true;
    lx_next(L);
    lx_next(L); /* '=' */
    return parse_attr_value(P, x, id, apos);
}

/* Attributes an op cannot do without (XLA's required=true). */
bool prs_check_required(Parser *P, InstrCtx *x)
{
    /* What each opcode needs, by opcode (A_SHARDING, zero, ends a list:
     * sharding= is never required). */
    static const AttrId req[OP_COUNT][6] = {
        [OP_IOTA] = {A_IOTA_DIM},
        [OP_GET_TUPLE_ELEMENT] = {A_INDEX},
        [OP_COMPARE] = {A_DIRECTION},
        [OP_TRANSPOSE] = {A_DIMENSIONS},
        [OP_REVERSE] = {A_DIMENSIONS},
        [OP_CONCATENATE] = {A_DIMENSIONS},
        [OP_GET_DIMENSION_SIZE] = {A_DIMENSIONS},
        [OP_REDUCE] = {A_DIMENSIONS, A_TO_APPLY},
        [OP_SORT] = {A_DIMENSIONS, A_TO_APPLY},
        [OP_ALL_GATHER] = {A_DIMENSIONS},
        [OP_REDUCE_SCATTER] = {A_DIMENSIONS, A_TO_APPLY},
        [OP_ALL_REDUCE] = {A_TO_APPLY},
        [OP_REDUCE_WINDOW] = {A_TO_APPLY},
        [OP_MAP] = {A_TO_APPLY},
        [OP_CALL] = {A_TO_APPLY},
        [OP_SCATTER] = {A_UPDATE_WINDOW, A_INSERTED_WINDOW, A_SCATTER_TO_OPERAND, A_INDEX_VECTOR_DIM, A_TO_APPLY},
        [OP_GATHER] = {A_OFFSET_DIMS, A_COLLAPSED, A_START_INDEX_MAP, A_INDEX_VECTOR_DIM, A_SLICE_SIZES},
        [OP_WHILE] = {A_CONDITION, A_BODY},
        [OP_SELECT_AND_SCATTER] = {A_SELECT, A_SCATTER},
        [OP_SLICE] = {A_SLICE},
        [OP_DYNAMIC_SLICE] = {A_DS_SIZES},
        [OP_PAD] = {A_PADDING},
        [OP_CONVOLUTION] = {A_DIM_LABELS},
        [OP_COLLECTIVE_PERMUTE] = {A_SOURCE_TARGET},
        [OP_CUSTOM_CALL] = {A_TARGET},
        [OP_RNG] = {A_DISTRIBUTION},
        [OP_RNG_BIT_GENERATOR] = {A_ALGORITHM},
        [OP_FFT] = {A_FFT_TYPE, A_FFT_LENGTH},
        [OP_REDUCE_PRECISION] = {A_EXPONENT_BITS, A_MANTISSA_BITS},
        [OP_FUSION] = {A_KIND, A_CALLS},
        [OP_ALL_REDUCE_START] = {A_TO_APPLY},
        [OP_ALL_GATHER_START] = {A_DIMENSIONS},
        [OP_COLLECTIVE_PERMUTE_START] = {A_SOURCE_TARGET},
        [OP_COLLECTIVE_REDUCE] = {A_TO_APPLY},
        [OP_DOMAIN] = {A_DOMAIN},
        [OP_TOPK] = {A_TOPK_K},
        [OP_RNG_GET_AND_UPDATE_STATE] = {A_DELTA},
        [OP_BATCH_NORM_TRAINING] = {A_EPSILON, A_FEATURE_INDEX},
        [OP_BATCH_NORM_INFERENCE] = {A_EPSILON, A_FEATURE_INDEX},
        [OP_BATCH_NORM_GRAD] = {A_EPSILON, A_FEATURE_INDEX},
        [OP_SET_DIMENSION_SIZE] = {A_DIMENSIONS},
        [OP_SCAN] = {A_DIMENSIONS, A_TO_APPLY, A_NUM_CARRIES},
        [OP_RAGGED_DOT] = {A_LHS_CONTRACT, A_RHS_CONTRACT, A_LHS_RAGGED},
    };
    char opbuf[64];
    /* A sugared OP-start needs what OP needs; async-start itself, calls=. */
    IrOpcode op = x->ins.op;
    if (x->ins.a.x->async_sugar)
        op = op == OP_ASYNC_START ? x->ins.a.x->async_wrapped_op : OP_COUNT;
    else if (op == OP_ASYNC_START && !x->seen[A_CALLS])
        return lx_fail(&P->L, x->ins.pos, "missing attribute 'calls' for async-start");
    _Static_assert(A_SHARDING == 0, "req's lists end at a zero");
    for (size_t k = 0; op >= 0 && op < OP_COUNT && k < 6 && req[op][k] != A_SHARDING; k++)
        if (!x->seen[req[op][k]])
            return lx_fail(&P->L, x->ins.pos, "missing attribute '%s' for %s", prs_attr_name(req[op][k]),
                           op_text(&x->ins, opbuf, sizeof opbuf));
    if (op == OP_CONDITIONAL) {
        bool pred = x->seen[A_TRUE] || x->seen[A_FALSE];
        if (pred && x->seen[A_BRANCHES])
            return lx_fail(&P->L, x->ins.pos, "conditional has both branch_computations and true/false_computation");
        if (pred && !(x->seen[A_TRUE] && x->seen[A_FALSE]))
            return lx_fail(&P->L, x->ins.pos, "missing attribute '%s' for conditional",
                           x->seen[A_TRUE] ? "false_computation" : "true_computation");
        if (!pred && !x->seen[A_BRANCHES])
            return lx_fail(&P->L, x->ins.pos, "missing attribute 'branch_computations' for conditional");
    }
    if (op == OP_CUSTOM_CALL && x->seen[A_TO_APPLY] && x->seen[A_CALLED])
        return lx_fail(&P->L, x->ins.pos, "custom-call cannot have both to_apply and called_computations");
    return true;
}
