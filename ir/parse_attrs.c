/*
 * parse_attrs.c: instruction attributes in the HLO text parser (see
 * parse.c): the table of attribute names, which ops take which
 * (XLA's hlo_parser.cc), the ones an op requires, and parse_attr_value,
 * which stores each value in the instruction (the syntax of the larger
 * values is in parse_values.c).
 */
#include "parse_internal.h"

#include <string.h>

/* ---- attributes ---- */

static const struct {
    const char *name;
    AttrId id;
} attr_names[] = {
    {"sharding", A_SHARDING}, {"frontend_attributes", A_FRONTEND}, {"metadata", A_METADATA},
    {"backend_config", A_BACKEND}, {"statistics", A_STATISTICS}, {"statistics_viz", A_STATISTICS},
    {"origin", A_ORIGIN}, {"control-predecessors", A_CONTROL}, {"dimensions", A_DIMENSIONS},
    {"index", A_INDEX}, {"iota_dimension", A_IOTA_DIM}, {"slice", A_SLICE},
    {"dynamic_slice_sizes", A_DS_SIZES}, {"padding", A_PADDING}, {"window", A_WINDOW},
    {"dim_labels", A_DIM_LABELS}, {"feature_group_count", A_FGC}, {"batch_group_count", A_BGC},
    {"lhs_batch_dims", A_LHS_BATCH}, {"rhs_batch_dims", A_RHS_BATCH},
    {"lhs_contracting_dims", A_LHS_CONTRACT}, {"rhs_contracting_dims", A_RHS_CONTRACT},
    {"operand_precision", A_PRECISION}, {"algorithm", A_ALGORITHM}, {"direction", A_DIRECTION},
    {"type", A_CMP_TYPE}, {"order", A_CMP_ORDER}, {"offset_dims", A_OFFSET_DIMS},
    {"collapsed_slice_dims", A_COLLAPSED}, {"start_index_map", A_START_INDEX_MAP},
    {"operand_batching_dims", A_OPERAND_BATCHING},
    {"start_indices_batching_dims", A_START_INDICES_BATCHING},
    {"index_vector_dim", A_INDEX_VECTOR_DIM}, {"slice_sizes", A_SLICE_SIZES},
    {"indices_are_sorted", A_SORTED}, {"update_window_dims", A_UPDATE_WINDOW},
    {"inserted_window_dims", A_INSERTED_WINDOW},
    {"scatter_dims_to_operand_dims", A_SCATTER_TO_OPERAND},
    {"input_batching_dims", A_INPUT_BATCHING},
    {"scatter_indices_batching_dims", A_SCATTER_INDICES_BATCHING},
    {"unique_indices", A_UNIQUE}, {"is_stable", A_IS_STABLE}, {"to_apply", A_TO_APPLY},
    {"condition", A_CONDITION}, {"body", A_BODY}, {"branch_computations", A_BRANCHES},
    {"true_computation", A_TRUE}, {"false_computation", A_FALSE}, {"select", A_SELECT},
    {"scatter", A_SCATTER}, {"called_computations", A_CALLED},
    {"replica_groups", A_REPLICA_GROUPS}, {"channel_id", A_CHANNEL_ID},
    {"use_global_device_ids", A_GLOBAL_IDS}, {"constrain_layout", A_CONSTRAIN_LAYOUT},
    {"source_target_pairs", A_SOURCE_TARGET}, {"custom_call_target", A_TARGET},
    {"api_version", A_API_VERSION}, {"custom_call_has_side_effect", A_SIDE_EFFECT},
    {"operand_layout_constraints", A_OPERAND_LAYOUTS}, {"distribution", A_DISTRIBUTION},
    {"fft_type", A_FFT_TYPE}, {"fft_length", A_FFT_LENGTH}, {"infeed_config", A_INFEED_CONFIG},
    {"outfeed_config", A_OUTFEED_CONFIG}, {"outfeed_shape", A_OUTFEED_SHAPE},
    {"exponent_bits", A_EXPONENT_BITS}, {"mantissa_bits", A_MANTISSA_BITS},
    {"parameter_replication", A_PARAM_REPL}, {"inferred_dimension", A_INFERRED_DIM},
    {"schedule", A_SCHEDULE}, {"output_to_operand_aliasing", A_OUTPUT_ALIASING},
    {"padding_type", A_PADDING_TYPE}, {"is_composite", A_IS_COMPOSITE}, {"mode", A_MODE},
    {"convolution_kind", A_CONV_KIND}, {"result_accuracy", A_RESULT_ACCURACY},
    {"literal", A_CC_LITERAL}, {"kind", A_KIND}, {"calls", A_CALLS},
    {"async_execution_thread", A_ASYNC_THREAD}, {"is_host_transfer", A_HOST_TRANSFER},
    {"cross_program_prefetch_index", A_PREFETCH_INDEX}, {"domain", A_DOMAIN}, {"k", A_TOPK_K},
    {"largest", A_LARGEST}, {"lhs_ragged_dims", A_LHS_RAGGED}, {"rhs_group_dims", A_RHS_GROUP},
    {"left_side", A_LEFT_SIDE}, {"lower", A_LOWER}, {"unit_diagonal", A_UNIT_DIAGONAL},
    {"transpose_a", A_TRANSPOSE_A}, {"epsilon", A_EPSILON}, {"feature_index", A_FEATURE_INDEX},
    {"delta", A_DELTA}, {"num_carries", A_NUM_CARRIES}, {"is_reverse", A_IS_REVERSE},
    {"is_associative", A_IS_ASSOCIATIVE},
    {"custom_call_schedule", A_CC_SCHEDULE},
};

static bool op_in(IrOpcode op, const IrOpcode *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == op)
            return true;
    return false;
}

#define IN(...) op_in(op, (const IrOpcode[]){__VA_ARGS__}, sizeof((const IrOpcode[]){__VA_ARGS__}) / sizeof(IrOpcode))

/* Op groups that share attributes. The -start/-done pairs carry the
 * attributes of their base op (XLA builds them with the same fields). */
#define ALL_REDUCE_OPS OP_ALL_REDUCE, OP_ALL_REDUCE_START
#define ALL_GATHER_OPS OP_ALL_GATHER, OP_ALL_GATHER_START
#define PERMUTE_OPS OP_COLLECTIVE_PERMUTE, OP_COLLECTIVE_PERMUTE_START
#define ASYNC_OPS OP_ASYNC_START, OP_ASYNC_UPDATE, OP_ASYNC_DONE
#define P2P_OPS OP_SEND, OP_RECV, OP_SEND_DONE, OP_RECV_DONE
#define GROUPED_OPS ALL_REDUCE_OPS, ALL_GATHER_OPS, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, \
    OP_COLLECTIVE_BROADCAST, OP_COLLECTIVE_REDUCE, OP_RAGGED_ALL_TO_ALL

/* Which ops take which attribute (XLA's hlo_parser.cc CreateInstruction). */
static bool attr_applies(AttrId id, IrOpcode op)
{
    switch (id) {
    case A_SHARDING: case A_FRONTEND: case A_METADATA: case A_BACKEND: case A_STATISTICS:
    case A_ORIGIN: case A_CONTROL:
        return true;
    case A_PARAM_REPL:
        return op == OP_PARAMETER;
    case A_DIMENSIONS:
        return IN(OP_BROADCAST, OP_TRANSPOSE, OP_REDUCE, OP_REVERSE, OP_CONCATENATE, OP_SORT,
                  ALL_GATHER_OPS, OP_REDUCE_SCATTER, OP_ALL_TO_ALL, OP_MAP, OP_GET_DIMENSION_SIZE,
                  OP_SET_DIMENSION_SIZE, OP_SCAN);
    case A_INDEX:
        return op == OP_GET_TUPLE_ELEMENT;
    case A_IOTA_DIM:
        return op == OP_IOTA;
    case A_SLICE:
        return op == OP_SLICE;
    case A_DS_SIZES:
        return op == OP_DYNAMIC_SLICE;
    case A_PADDING:
        return op == OP_PAD;
    case A_WINDOW:
        return IN(OP_CONVOLUTION, OP_REDUCE_WINDOW, OP_SELECT_AND_SCATTER, OP_CUSTOM_CALL);
    case A_DIM_LABELS: case A_FGC: case A_BGC:
        return IN(OP_CONVOLUTION, OP_CUSTOM_CALL);
    case A_LHS_BATCH: case A_RHS_BATCH: case A_LHS_CONTRACT: case A_RHS_CONTRACT:
        return IN(OP_DOT, OP_RAGGED_DOT, OP_SCALED_DOT);
    case A_LHS_RAGGED: case A_RHS_GROUP:
        return op == OP_RAGGED_DOT;
    case A_PRECISION:
        return IN(OP_DOT, OP_CONVOLUTION, OP_CUSTOM_CALL, OP_RAGGED_DOT, OP_SCALED_DOT);
    case A_ALGORITHM:
        return IN(OP_DOT, OP_CONVOLUTION, OP_RNG_BIT_GENERATOR);
    case A_DIRECTION: case A_CMP_TYPE: case A_CMP_ORDER:
        return op == OP_COMPARE;
    case A_OFFSET_DIMS: case A_COLLAPSED: case A_START_INDEX_MAP: case A_OPERAND_BATCHING:
    case A_START_INDICES_BATCHING:
        return op == OP_GATHER;
    case A_SLICE_SIZES:
        return IN(OP_GATHER, PERMUTE_OPS);
    case A_INDEX_VECTOR_DIM: case A_SORTED:
        return IN(OP_GATHER, OP_SCATTER);
    case A_UPDATE_WINDOW: case A_INSERTED_WINDOW: case A_SCATTER_TO_OPERAND: case A_INPUT_BATCHING:
    case A_SCATTER_INDICES_BATCHING: case A_UNIQUE:
        return op == OP_SCATTER;
    case A_IS_STABLE:
        return op == OP_SORT;
    case A_TO_APPLY:
        return IN(OP_REDUCE, OP_REDUCE_WINDOW, OP_MAP, ALL_REDUCE_OPS, OP_REDUCE_SCATTER, OP_SCATTER,
                  OP_SORT, OP_CALL, OP_CUSTOM_CALL, OP_SCAN, OP_COLLECTIVE_REDUCE);
    case A_CONDITION: case A_BODY:
        return op == OP_WHILE;
    case A_BRANCHES: case A_TRUE: case A_FALSE:
        return op == OP_CONDITIONAL;
    case A_SELECT: case A_SCATTER:
        return op == OP_SELECT_AND_SCATTER;
    case A_CALLED: case A_TARGET: case A_API_VERSION: case A_SIDE_EFFECT: case A_OPERAND_LAYOUTS:
    case A_SCHEDULE: case A_PADDING_TYPE: case A_CC_LITERAL: case A_CC_SCHEDULE:
        return op == OP_CUSTOM_CALL;
    case A_OUTPUT_ALIASING:
        return IN(OP_CUSTOM_CALL, OP_FUSION);
    case A_KIND:
        return op == OP_FUSION;
    case A_CALLS:
        return IN(OP_FUSION, ASYNC_OPS);
    case A_ASYNC_THREAD:
        return IN(ASYNC_OPS);
    case A_REPLICA_GROUPS:
        return IN(GROUPED_OPS);
    case A_CONSTRAIN_LAYOUT:
        return IN(ALL_REDUCE_OPS, ALL_GATHER_OPS, OP_REDUCE_SCATTER, OP_ALL_TO_ALL,
                  OP_COLLECTIVE_BROADCAST, OP_RAGGED_ALL_TO_ALL);
    case A_CHANNEL_ID:
        return IN(GROUPED_OPS, PERMUTE_OPS, P2P_OPS);
    case A_GLOBAL_IDS:
        return IN(ALL_REDUCE_OPS, ALL_GATHER_OPS, OP_REDUCE_SCATTER);
    case A_SOURCE_TARGET:
        return IN(PERMUTE_OPS);
    case A_HOST_TRANSFER:
        return IN(P2P_OPS);
    case A_PREFETCH_INDEX:
        return op == OP_COPY_START;
    case A_DOMAIN:
        return op == OP_DOMAIN;
    case A_TOPK_K: case A_LARGEST:
        return op == OP_TOPK;
    case A_LEFT_SIDE: case A_UNIT_DIAGONAL: case A_TRANSPOSE_A:
        return op == OP_TRIANGULAR_SOLVE;
    case A_LOWER:
        return IN(OP_TRIANGULAR_SOLVE, OP_CHOLESKY);
    case A_EPSILON: case A_FEATURE_INDEX:
        return IN(OP_BATCH_NORM_TRAINING, OP_BATCH_NORM_INFERENCE, OP_BATCH_NORM_GRAD);
    case A_DELTA:
        return op == OP_RNG_GET_AND_UPDATE_STATE;
    case A_NUM_CARRIES: case A_IS_REVERSE: case A_IS_ASSOCIATIVE:
        return op == OP_SCAN;
    case A_DISTRIBUTION:
        return op == OP_RNG;
    case A_FFT_TYPE: case A_FFT_LENGTH:
        return op == OP_FFT;
    case A_INFEED_CONFIG:
        return op == OP_INFEED;
    case A_OUTFEED_CONFIG: case A_OUTFEED_SHAPE:
        return op == OP_OUTFEED;
    case A_EXPONENT_BITS: case A_MANTISSA_BITS:
        return op == OP_REDUCE_PRECISION;
    case A_INFERRED_DIM:
        return op == OP_RESHAPE;
    case A_IS_COMPOSITE:
        return op == OP_CALL;
    case A_MODE:
        return IN(ALL_REDUCE_OPS, OP_REDUCE_SCATTER);
    case A_CONV_KIND:
        return op == OP_CONVOLUTION;
    case A_RESULT_ACCURACY:
        return IN(OP_EXP, OP_EXPM1, OP_LOG, OP_LOG1P, OP_LOGISTIC, OP_SQRT, OP_CBRT, OP_RSQRT,
                  OP_TANH, OP_ERF, OP_SINE, OP_COSINE, OP_TAN);
    case A_COUNT:
        break;
    }
    return false;
}

/* The attribute applies to the instruction being parsed: a sugared
 * `OP-start` takes the attributes of the op it wraps, besides its own. */
static bool attr_applies_to(AttrId id, const IrInstr *ins)
{
    if (attr_applies(id, ins->op) && !(ins->a.async_sugar && id == A_CALLS))
        return true;
    return ins->a.async_sugar && ins->op == OP_ASYNC_START && attr_applies(id, ins->a.async_wrapped_op);
}

const char *prs_attr_name(AttrId id)
{
    for (size_t i = 0; i < sizeof attr_names / sizeof *attr_names; i++)
        if (attr_names[i].id == id)
            return attr_names[i].name;
    return "?";
}

static const char *const directions[] = {"EQ", "NE", "LT", "LE", "GT", "GE", NULL};
static const char *const cmp_types[] = {"FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED", NULL};
static const char *const cmp_orders[] = {"TOTALORDER", "PARTIALORDER", NULL};
static const char *const rng_dists[] = {"rng_uniform", "rng_normal", NULL};
static const char *const rng_algs[] = {"rng_default", "rng_three_fry", "rng_philox", NULL};
static const char *const fft_types[] = {"FFT", "IFFT", "RFFT", "IRFFT", NULL};
static const char *const api_versions[] = {"API_VERSION_UNSPECIFIED", "API_VERSION_ORIGINAL",
                                           "API_VERSION_STATUS_RETURNING",
                                           "API_VERSION_STATUS_RETURNING_UNIFIED",
                                           "API_VERSION_TYPED_FFI", NULL};

static const char *const fusion_kinds[] = {"kLoop", "kInput", "kOutput", "kCustom", NULL};
static const char *const transposes[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT", NULL};
static const char *const schedules[] = {"SCHEDULE_NONE", "SCHEDULE_LATEST", "SCHEDULE_EARLIEST", NULL};

static int word_index(const char *const *words, const char *w)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(words[i], w) == 0)
            return i;
    return -1;
}

/* The value of attribute `id` for the instruction being built. */
static bool parse_attr_value(Parser *P, InstrCtx *x, AttrId id, IrPos apos)
{
    Lexer *L = &P->L;
    IrAttrs *a = &x->ins.a;
    const char *w = NULL;
    size_t s, e;
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
    case A_METADATA:
        return prs_raw_braces(P, &a->metadata, true, "'{' after metadata=");
    case A_BACKEND:
        if (lx_is(L, LX_STRING)) {
            a->backend_config = lx_dup(L, L->tok.start, L->tok.end);
            lx_next(L);
            return a->backend_config != NULL;
        }
        return prs_raw_braces(P, &a->backend_config, false, "string or {...} after backend_config=");
    case A_STATISTICS:
        return prs_raw_braces(P, &a->statistics_viz, false, "'{' after statistics=");
    case A_ORIGIN:
        return prs_raw_braces(P, &a->origin, false, "'{' after origin=");
    case A_CONTROL:
        return prs_parse_control(P, x);
    case A_DIMENSIONS:
        a->has_dimensions = true;
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dimensions, "dimensions");
    case A_INDEX:
        return lx_int(L, &a->tuple_index, "integer after index=");
    case A_IOTA_DIM:
        return lx_int(L, &a->iota_dimension, "integer after iota_dimension=");
    case A_SLICE:
        return prs_parse_slice(P, a);
    case A_DS_SIZES:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dynamic_slice_sizes, "dynamic_slice_sizes");
    case A_PADDING:
        return prs_parse_pads(P, true, &a->pad_lo, &a->pad_hi, &a->pad_interior, "padding");
    case A_WINDOW:
        return prs_parse_window(P, &a->window);
    case A_DIM_LABELS:
        return prs_parse_dim_labels(P, &a->conv);
    case A_FGC:
        return lx_int(L, &a->feature_group_count, "integer after feature_group_count=");
    case A_BGC:
        return lx_int(L, &a->batch_group_count, "integer after batch_group_count=");
    case A_LHS_BATCH:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dot.lhs_batch, "lhs_batch_dims");
    case A_RHS_BATCH:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dot.rhs_batch, "rhs_batch_dims");
    case A_LHS_CONTRACT:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dot.lhs_contracting, "lhs_contracting_dims");
    case A_RHS_CONTRACT:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dot.rhs_contracting, "rhs_contracting_dims");
    case A_PRECISION:
        return prs_raw_braces(P, &a->precision_config, false, "'{' after operand_precision=");
    case A_ALGORITHM:
        if (x->ins.op == OP_RNG_BIT_GENERATOR)
            return prs_parse_word(P, rng_algs, &a->rng_algorithm, "rng_default, rng_three_fry or rng_philox");
        if (!lx_is(L, LX_NAME))
            return lx_expected(L, "algorithm name");
        a->algorithm = lx_dup(L, L->tok.start, L->tok.end);
        lx_next(L);
        return a->algorithm != NULL;
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
    case A_OFFSET_DIMS:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->gather.offset_dims, "offset_dims");
    case A_COLLAPSED:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->gather.collapsed_slice_dims, "collapsed_slice_dims");
    case A_START_INDEX_MAP:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->gather.start_index_map, "start_index_map");
    case A_OPERAND_BATCHING:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->gather.operand_batching_dims, "operand_batching_dims");
    case A_START_INDICES_BATCHING:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->gather.start_indices_batching_dims,
                           "start_indices_batching_dims");
    case A_INDEX_VECTOR_DIM:
        return lx_int(L, x->ins.op == OP_GATHER ? &a->gather.index_vector_dim : &a->scatter.index_vector_dim,
                      "integer after index_vector_dim=");
    case A_SORTED:
        return lx_bool(L, &a->indices_are_sorted, "true or false");
    case A_UPDATE_WINDOW:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->scatter.update_window_dims, "update_window_dims");
    case A_INSERTED_WINDOW:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->scatter.inserted_window_dims, "inserted_window_dims");
    case A_SCATTER_TO_OPERAND:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->scatter.scatter_dims_to_operand_dims,
                           "scatter_dims_to_operand_dims");
    case A_INPUT_BATCHING:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->scatter.input_batching_dims, "input_batching_dims");
    case A_SCATTER_INDICES_BATCHING:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->scatter.scatter_indices_batching_dims,
                           "scatter_indices_batching_dims");
    case A_UNIQUE:
        return lx_bool(L, &a->unique_indices, "true or false");
    case A_IS_STABLE:
        return lx_bool(L, &a->is_stable, "true or false");
    case A_TO_APPLY: case A_CONDITION: case A_BODY: case A_TRUE: case A_FALSE: case A_SELECT:
    case A_SCATTER:
        return prs_parse_callee(P, x, id);
    case A_BRANCHES:
    case A_CALLED:
        return prs_parse_callee_list(P, x, id);
    case A_REPLICA_GROUPS:
        return prs_parse_replica_groups(P, &a->replica_groups);
    case A_CHANNEL_ID:
        return lx_int(L, &a->channel_id, "integer after channel_id=");
    case A_GLOBAL_IDS:
        return lx_bool(L, &a->use_global_device_ids, "true or false");
    case A_CONSTRAIN_LAYOUT:
        return lx_bool(L, &a->constrain_layout, "true or false");
    case A_SOURCE_TARGET:
        return prs_parse_pairs(P, &a->source_target_pairs);
    case A_TARGET:
        return prs_parse_string_attr(P, &a->custom_call_target);
    case A_API_VERSION:
        return prs_parse_word(P, api_versions, &a->api_version, "custom-call API version (API_VERSION_...)");
    case A_SIDE_EFFECT:
        return lx_bool(L, &a->custom_call_has_side_effect, "true or false");
    case A_OPERAND_LAYOUTS:
        return prs_parse_shape_list(P, a);
    case A_DISTRIBUTION:
        return prs_parse_word(P, rng_dists, &a->distribution, "rng_uniform or rng_normal");
    case A_FFT_TYPE:
        return prs_parse_word(P, fft_types, &a->fft_type, "FFT, IFFT, RFFT or IRFFT");
    case A_FFT_LENGTH:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->fft_length, "fft_length");
    case A_INFEED_CONFIG:
        return prs_parse_string_attr(P, &a->infeed_config);
    case A_OUTFEED_CONFIG:
        return prs_parse_string_attr(P, &a->outfeed_config);
    case A_OUTFEED_SHAPE:
        a->has_outfeed_shape = true;
        return prs_parse_shape(P, &a->outfeed_shape);
    case A_EXPONENT_BITS:
        return lx_int(L, &a->exponent_bits, "integer after exponent_bits=");
    case A_MANTISSA_BITS:
        return lx_int(L, &a->mantissa_bits, "integer after mantissa_bits=");
    case A_SLICE_SIZES:
        if (x->ins.op != OP_GATHER) /* collective-permute's in-place form: {{...},...} */
            return prs_raw_braces(P, &a->permute_slice_sizes, false, "'{' after slice_sizes=");
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->slice_sizes, "slice_sizes");
    case A_KIND:
        return prs_parse_word(P, fusion_kinds, &a->fusion_kind, "fusion kind kLoop, kInput, kOutput or kCustom");
    case A_CALLS:
        return prs_parse_callee(P, x, id);
    case A_OUTPUT_ALIASING:
        return prs_raw_braces(P, &a->output_to_operand_aliasing, false, "'{' after output_to_operand_aliasing=");
    case A_ASYNC_THREAD:
        if (!lx_is(L, LX_STRING))
            return lx_expected(L, "string after async_execution_thread=");
        a->async_execution_thread = lx_dup(L, L->tok.start, L->tok.end); /* quotes kept */
        lx_next(L);
        return a->async_execution_thread != NULL;
    case A_HOST_TRANSFER:
        return lx_bool(L, &a->is_host_transfer, "true or false");
    case A_PREFETCH_INDEX:
        a->has_cross_program_prefetch = true;
        return lx_int(L, &a->cross_program_prefetch_index, "integer after cross_program_prefetch_index=");
    case A_DOMAIN:
        return prs_raw_braces(P, &a->domain, false, "'{' after domain=");
    case A_TOPK_K:
        return lx_int(L, &a->topk_k, "integer after k=");
    case A_LARGEST:
        a->has_topk_largest = true;
        return lx_bool(L, &a->topk_largest, "true or false");
    case A_LHS_RAGGED:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->lhs_ragged_dims, "lhs_ragged_dims");
    case A_RHS_GROUP:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->rhs_group_dims, "rhs_group_dims");
    case A_LEFT_SIDE:
        return lx_bool(L, &a->left_side, "true or false");
    case A_LOWER:
        return lx_bool(L, &a->lower, "true or false");
    case A_UNIT_DIAGONAL:
        return lx_bool(L, &a->unit_diagonal, "true or false");
    case A_TRANSPOSE_A:
        return prs_parse_word(P, transposes, &a->transpose_a, "NO_TRANSPOSE, TRANSPOSE or ADJOINT");
    case A_EPSILON:
        return prs_parse_epsilon(P, &a->epsilon);
    case A_FEATURE_INDEX:
        return lx_int(L, &a->feature_index, "integer after feature_index=");
    case A_DELTA:
        return lx_int(L, &a->rng_delta, "integer after delta=");
    case A_NUM_CARRIES:
        return lx_int(L, &a->num_carries, "integer after num_carries=");
    case A_IS_REVERSE:
        a->has_is_reverse = true;
        return lx_bool(L, &a->is_reverse, "true or false");
    case A_IS_ASSOCIATIVE:
        a->has_is_associative = true;
        return lx_bool(L, &a->is_associative, "true or false");
    case A_CC_SCHEDULE:
        return prs_parse_word(P, schedules, &a->custom_call_schedule,
                          "SCHEDULE_NONE, SCHEDULE_LATEST or SCHEDULE_EARLIEST");
    case A_PARAM_REPL: case A_INFERRED_DIM: case A_SCHEDULE: case A_PADDING_TYPE:
    case A_IS_COMPOSITE: case A_MODE: case A_CONV_KIND: case A_RESULT_ACCURACY: case A_CC_LITERAL:
        return lx_raw_value(L, &s, &e) && prs_keep_attr(P, a, prs_attr_name(id), s, e);
    case A_COUNT:
        break;
    }
    return lx_fail(L, apos, "internal: unhandled attribute");
}

/* attribute ::= name '=' value, checked against the op. */
/* The attribute named by the current token, A_COUNT if none (a %name is
 * not an attribute name). The first byte rejects most entries without a
 * string compare: this runs for every attribute of every instruction. */
static AttrId attr_lookup(const Lexer *L)
{
    if (L->tok.kind != LX_NAME || (L->tok.start > 0 && L->text[L->tok.start - 1] == '%'))
        return A_COUNT;
    const char *t = lx_text(L);
    size_t n = lx_tlen(L);
    for (size_t i = 0; i < sizeof attr_names / sizeof *attr_names; i++) {
        const char *name = attr_names[i].name;
        if (name[0] == t[0] && strncmp(name, t, n) == 0 && name[n] == 0)
            return attr_names[i].id;
    }
    return A_COUNT;
}

bool prs_parse_attribute(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    char buf[80];
    if (!lx_is_attr(L))
        return lx_expected(L, "attribute name=value");
    IrPos apos = L->tok.pos;
    AttrId id = attr_lookup(L);
    char opbuf[64];
    const char *op = op_text(&x->ins, opbuf, sizeof opbuf);
    if (id == A_COUNT)
        return lx_fail(L, apos, "unknown attribute %s for %s", lx_describe(L, buf, sizeof buf), op);
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
    static const struct {
        IrOpcode op;
        AttrId need[6];
    } req[] = {
        {OP_IOTA, {A_IOTA_DIM}},
        {OP_GET_TUPLE_ELEMENT, {A_INDEX}},
        {OP_COMPARE, {A_DIRECTION}},
        {OP_TRANSPOSE, {A_DIMENSIONS}},
        {OP_REVERSE, {A_DIMENSIONS}},
        {OP_CONCATENATE, {A_DIMENSIONS}},
        {OP_GET_DIMENSION_SIZE, {A_DIMENSIONS}},
        {OP_REDUCE, {A_DIMENSIONS, A_TO_APPLY}},
        {OP_SORT, {A_DIMENSIONS, A_TO_APPLY}},
        {OP_ALL_GATHER, {A_DIMENSIONS}},
        {OP_REDUCE_SCATTER, {A_DIMENSIONS, A_TO_APPLY}},
        {OP_ALL_REDUCE, {A_TO_APPLY}},
        {OP_REDUCE_WINDOW, {A_TO_APPLY}},
        {OP_MAP, {A_TO_APPLY}},
        {OP_CALL, {A_TO_APPLY}},
        {OP_SCATTER, {A_UPDATE_WINDOW, A_INSERTED_WINDOW, A_SCATTER_TO_OPERAND, A_INDEX_VECTOR_DIM, A_TO_APPLY}},
        {OP_GATHER, {A_OFFSET_DIMS, A_COLLAPSED, A_START_INDEX_MAP, A_INDEX_VECTOR_DIM, A_SLICE_SIZES}},
        {OP_WHILE, {A_CONDITION, A_BODY}},
        {OP_SELECT_AND_SCATTER, {A_SELECT, A_SCATTER}},
        {OP_SLICE, {A_SLICE}},
        {OP_DYNAMIC_SLICE, {A_DS_SIZES}},
        {OP_PAD, {A_PADDING}},
        {OP_CONVOLUTION, {A_DIM_LABELS}},
        {OP_COLLECTIVE_PERMUTE, {A_SOURCE_TARGET}},
        {OP_CUSTOM_CALL, {A_TARGET}},
        {OP_RNG, {A_DISTRIBUTION}},
        {OP_RNG_BIT_GENERATOR, {A_ALGORITHM}},
        {OP_FFT, {A_FFT_TYPE, A_FFT_LENGTH}},
        {OP_REDUCE_PRECISION, {A_EXPONENT_BITS, A_MANTISSA_BITS}},
        {OP_FUSION, {A_KIND, A_CALLS}},
        {OP_ALL_REDUCE_START, {A_TO_APPLY}},
        {OP_ALL_GATHER_START, {A_DIMENSIONS}},
        {OP_COLLECTIVE_PERMUTE_START, {A_SOURCE_TARGET}},
        {OP_COLLECTIVE_REDUCE, {A_TO_APPLY}},
        {OP_DOMAIN, {A_DOMAIN}},
        {OP_TOPK, {A_TOPK_K}},
        {OP_RNG_GET_AND_UPDATE_STATE, {A_DELTA}},
        {OP_BATCH_NORM_TRAINING, {A_EPSILON, A_FEATURE_INDEX}},
        {OP_BATCH_NORM_INFERENCE, {A_EPSILON, A_FEATURE_INDEX}},
        {OP_BATCH_NORM_GRAD, {A_EPSILON, A_FEATURE_INDEX}},
        {OP_SET_DIMENSION_SIZE, {A_DIMENSIONS}},
        {OP_SCAN, {A_DIMENSIONS, A_TO_APPLY, A_NUM_CARRIES}},
        {OP_RAGGED_DOT, {A_LHS_CONTRACT, A_RHS_CONTRACT, A_LHS_RAGGED}},
    };
    char opbuf[64];
    /* A sugared OP-start needs what OP needs; async-start itself, calls=. */
    IrOpcode op = x->ins.op;
    if (x->ins.a.async_sugar)
        op = op == OP_ASYNC_START ? x->ins.a.async_wrapped_op : OP_COUNT;
    else if (op == OP_ASYNC_START && !x->seen[A_CALLS])
        return lx_fail(&P->L, x->ins.pos, "missing attribute 'calls' for async-start");
    for (size_t i = 0; i < sizeof req / sizeof *req; i++) {
        if (req[i].op != op)
            continue;
        for (size_t k = 0; k < 6 && req[i].need[k] != A_SHARDING; k++)
            if (!x->seen[req[i].need[k]])
                return lx_fail(&P->L, x->ins.pos, "missing attribute '%s' for %s", prs_attr_name(req[i].need[k]),
                               op_text(&x->ins, opbuf, sizeof opbuf));
    }
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
