/*
 * parse.c: the HLO text parser. Reads modules as XLA prints them
 * (--xla_dump_hlo_as_text) and as XLA's hlo_parser.cc reads them:
 *
 *   module      ::= ('HloModule' name (',' header_attr)*)? stack_frames? computation+
 *   computation ::= 'ENTRY'? name signature? '{' instruction+ '}' (',' 'execution_thread=' string)?
 *   signature   ::= '(' (name ':'? shape (',' ...)*)? ')' '->' shape
 *   instruction ::= 'ROOT'? name '=' shape opcode '(' operands ')' (',' attribute)*
 *   operand     ::= shape? name | shape? opcode operands   (a nested instruction)
 *   attribute   ::= name '=' value          (value syntax depends on the name)
 *   callee      ::= name | '{' instruction+ '}'         (an inline computation)
 *
 * Names may be written with or without '%'. Computations may appear in
 * any order and instructions may refer to later ones: names are recorded
 * as references and resolved through hash tables once their scope (the
 * computation for operands, the module for callees) has been read, so
 * parsing is linear in the input. Without ROOT the last instruction is the
 * root; without ENTRY the last computation is the entry (XLA's rules).
 *
 * Inline computations and nested operand instructions are skipped where
 * they stand (the lexer position is kept) and read once the computation or
 * instruction that holds them is done, because the parser keeps the state
 * of one computation and one instruction at a time; see parse_inline_bodies
 * and parse_nested_ops. Neither can be named by the text, so both get
 * generated names once every written name around them is known.
 *
 * Every error goes through the lexer (lx_fail) with the FILE:LINE:COL of
 * the offending token; attribute-level errors point at the attribute
 * name. On any error the half-built module is freed and *out stays NULL.
 */
#include "lex.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Inputs larger than this are refused (positions are 32-bit). */
#define MAX_INPUT ((size_t)INT32_MAX)

IrParseOptions ir_default_parse_options(void)
{
    IrParseOptions o;
    o.limits = ir_default_limits();
    o.verify = true;
    return o;
}

/* ---- name tables: open addressing over (text, length) keys ---- */

/* 16-byte slots with the key's hash: a probe compares hashes and touches
 * the key text only on a hash match, and growing does not rehash strings.
 * Keys are NUL-terminated strings that outlive the map. */
typedef struct MapSlot {
    const char *key; /* NULL: empty */
    uint32_t hash;
    int32_t val;
} MapSlot;

typedef struct NameMap {
    MapSlot *slot;
    size_t cap, n;
} NameMap;

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Slot key equals text[0, n) (the text has no NUL in it). */
static bool key_is(const MapSlot *sl, uint32_t h, const char *k, size_t n)
{
    return sl->hash == h && strncmp(sl->key, k, n) == 0 && sl->key[n] == 0;
}

static int32_t map_find(const NameMap *m, const char *k, size_t n)
{
    if (m->cap == 0)
        return -1;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    for (size_t i = h & mask; m->slot[i].key; i = (i + 1) & mask)
        if (key_is(&m->slot[i], h, k, n))
            return m->slot[i].val;
    return -1;
}

/* Room for `want` keys at load at most 1/2. */
static bool map_reserve(NameMap *m, size_t want)
{
    if (2 * want <= m->cap)
        return true;
    size_t cap = m->cap ? m->cap : 32;
    while (cap < 2 * want) {
        if (cap > SIZE_MAX / (4 * sizeof(MapSlot)))
            return false;
        cap *= 2;
    }
    MapSlot *slot = ts_calloc(cap, sizeof *slot);
    if (!slot)
        return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i].key)
            continue;
        size_t j = m->slot[i].hash & (cap - 1);
        while (slot[j].key)
            j = (j + 1) & (cap - 1);
        slot[j] = m->slot[i];
    }
    ts_free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return true;
}

/* Insert a key not yet present; `k` (NUL-terminated, n bytes) must outlive
 * the map. */
static bool map_put(NameMap *m, const char *k, size_t n, int32_t val)
{
    if (!map_reserve(m, m->n + 1))
        return false;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    size_t i = h & mask;
    while (m->slot[i].key)
        i = (i + 1) & mask;
    m->slot[i] = (MapSlot){k, h, val};
    m->n++;
    return true;
}

/* The value slot of key text[0, n), or NULL when absent. */
static int32_t *map_ref(NameMap *m, const char *k, size_t n)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    uint32_t h = hash_bytes(k, n);
    for (size_t i = h & mask; m->slot[i].key; i = (i + 1) & mask)
        if (key_is(&m->slot[i], h, k, n))
            return &m->slot[i].val;
    return NULL;
}

static void map_free(NameMap *m)
{
    ts_free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- references resolved after their scope is read ---- */

typedef struct Span {
    size_t start, len;
    IrPos pos;
} Span;

/* A callee Span of length 0 is no name (names are never empty) but an
 * inline computation already added: `start` is its index. */
static Span inline_span(int32_t ci, IrPos pos)
{
    return (Span){(size_t)ci, 0, pos};
}

enum { REF_OPERAND, REF_CONTROL, REF_CALLEE };

typedef struct Ref {
    int32_t comp, instr, slot;
    int32_t kind;
    Span name;
    const IrShape *shape; /* operand shape written before the name, or NULL */
} Ref;

typedef struct RefVec {
    Ref *v;
    size_t n, cap;
} RefVec;

/* ---- attributes ---- */

typedef enum AttrId {
    /* any instruction */
    A_SHARDING, A_FRONTEND, A_METADATA, A_BACKEND, A_STATISTICS, A_ORIGIN, A_CONTROL,
    /* op-specific, kept */
    A_DIMENSIONS, A_INDEX, A_IOTA_DIM, A_SLICE, A_DS_SIZES, A_PADDING, A_WINDOW, A_DIM_LABELS,
    A_FGC, A_BGC, A_LHS_BATCH, A_RHS_BATCH, A_LHS_CONTRACT, A_RHS_CONTRACT, A_PRECISION,
    A_ALGORITHM, A_DIRECTION, A_CMP_TYPE, A_CMP_ORDER, A_OFFSET_DIMS, A_COLLAPSED,
    A_START_INDEX_MAP, A_OPERAND_BATCHING, A_START_INDICES_BATCHING, A_INDEX_VECTOR_DIM,
    A_SLICE_SIZES, A_SORTED, A_UPDATE_WINDOW, A_INSERTED_WINDOW, A_SCATTER_TO_OPERAND,
    A_INPUT_BATCHING, A_SCATTER_INDICES_BATCHING, A_UNIQUE, A_IS_STABLE, A_TO_APPLY,
    A_CONDITION, A_BODY, A_BRANCHES, A_TRUE, A_FALSE, A_SELECT, A_SCATTER, A_CALLED,
    A_REPLICA_GROUPS, A_CHANNEL_ID, A_GLOBAL_IDS, A_CONSTRAIN_LAYOUT, A_SOURCE_TARGET,
    A_TARGET, A_API_VERSION, A_SIDE_EFFECT, A_OPERAND_LAYOUTS, A_DISTRIBUTION, A_FFT_TYPE,
    A_FFT_LENGTH, A_INFEED_CONFIG, A_OUTFEED_CONFIG, A_OUTFEED_SHAPE, A_EXPONENT_BITS,
    A_MANTISSA_BITS, A_KIND, A_CALLS, A_OUTPUT_ALIASING, A_ASYNC_THREAD, A_HOST_TRANSFER,
    A_PREFETCH_INDEX, A_DOMAIN, A_TOPK_K, A_LARGEST, A_LHS_RAGGED, A_RHS_GROUP, A_LEFT_SIDE,
    A_LOWER, A_UNIT_DIAGONAL, A_TRANSPOSE_A, A_EPSILON, A_FEATURE_INDEX, A_DELTA,
    A_NUM_CARRIES, A_IS_REVERSE, A_IS_ASSOCIATIVE, A_CC_SCHEDULE,
    /* kept as raw text and printed back: they do not change what tessel
     * computes (A_FIRST_KEPT and every id after it) */
    A_PARAM_REPL, A_INFERRED_DIM, A_SCHEDULE, A_PADDING_TYPE,
    A_IS_COMPOSITE, A_MODE, A_CONV_KIND, A_RESULT_ACCURACY, A_CC_LITERAL,
    A_COUNT,
    A_FIRST_KEPT = A_PARAM_REPL
} AttrId;

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

static const char *attr_name(AttrId id)
{
    for (size_t i = 0; i < sizeof attr_names / sizeof *attr_names; i++)
        if (attr_names[i].id == id)
            return attr_names[i].name;
    return "?";
}

/* ---- the parser ---- */

typedef struct KvVec {
    IrKeyValue *v;
    int32_t n, cap;
} KvVec;

typedef struct SpanVec {
    Span *v;
    int32_t n, cap;
} SpanVec;

typedef struct Parser {
    Lexer L;
    IrModule *m;
    IrParseOptions opt;
    NameMap comps;       /* computation name -> index */
    NameMap instrs;      /* instruction name -> index, current computation */
    RefVec local;        /* operand and control refs of the current computation */
    RefVec callees;      /* callee refs of the whole module */
    SpanVec spans;       /* scratch: computation lists of one attribute */
    KvVec kvs;           /* scratch: key/value lists */
    int64_t num_devices; /* num_partitions from the header; 0 unknown */
    bool no_layout;      /* shapes here take no layout (a literal follows) */
    struct ParamUse *params; /* parameter(N) of the current computation */
    size_t nparams, capparams;
    struct Deferred *defer;   /* instructions written without a shape */
    size_t ndefer, capdefer;
    struct SigCheck *sigs;    /* computation signatures, checked at the end */
    size_t nsigs, capsigs;
    struct InstrCtx *ictx;    /* the instruction being parsed (reused) */
    int32_t *opv;             /* its operand indices (-1: resolved later) */
    size_t nopv, capopv;
    struct Close *closes;     /* lines that start with '}' (see find_closes) */
    size_t ncloses, nextclose;
    int32_t nasync_sugar;     /* sugared OP-start instructions: wrapped at the end */
    struct InlineBody *bodies; /* inline computations skipped, not read yet */
    size_t nbodies, capbodies;
    int32_t *inl;             /* every inline computation, named at the end */
    size_t ninl, capinl;
    NameMap inl_next;         /* inline base name -> next suffix to try */
    struct NestedOp *nested;  /* nested operand instructions skipped, not read yet */
    size_t nnested, capnested;
    int32_t *unnamed;         /* nested instructions of the current computation */
    size_t nunnamed, capunnamed;
    int32_t *opnext;          /* per opcode: next suffix for a nested instruction's name */
    int32_t top;              /* the top-level computation being read (or one of its inline ones) */
    int32_t last_top;         /* the last top-level computation read: the entry without ENTRY */
} Parser;

/* An inline computation (`to_apply={...}`), added when its '{' was met
 * and read from `at` once the computation around it is done. */
typedef struct InlineBody {
    int32_t comp;
    LxMark at;
} InlineBody;

/* A nested operand instruction (`add(x, s32[] constant(1))`): operand
 * `slot` of instruction `user` in the current computation, read from `at`
 * once the user is added. */
typedef struct NestedOp {
    int32_t user, slot;
    LxMark at;
} NestedOp;

/* A line whose first non-blank byte is '}': where a computation ends in
 * XLA's layout, one instruction per line. */
typedef struct Close {
    size_t off;
    int32_t line;
} Close;

/* An instruction whose shape XLA lets the text omit (`t = tuple(a, b)`):
 * inferred once the whole module is read. */
typedef struct Deferred {
    int32_t comp, instr;
    IrPos sharding_pos;  /* where its sharding= was, line 0 if none */
    int32_t top;         /* the top-level computation comp is (or is inline in) */
} Deferred;

/* A parameter(N) seen in the current computation: the table c->param is
 * built once the computation is read (numbers must be 0..n-1, as XLA's
 * HloComputation requires), so a large N cannot make a large table. */
typedef struct ParamUse {
    int32_t instr;
    int64_t number;
    IrPos pos;
} ParamUse;

/* A computation's written result shape, checked against its root. */
typedef struct SigCheck {
    int32_t comp;
    IrPos pos;
    IrShape result;
} SigCheck;

/* What one instruction has seen while its line is parsed. One lives in the
 * Parser and is cleared per instruction up to `callee`: callee[id] is read
 * only when seen[id] is set, so it need not be cleared. */
typedef struct InstrCtx {
    IrInstr ins;
    int32_t comp, index;   /* where it will be added */
    bool seen[A_COUNT];
    Span *list;            /* branch_computations / called_computations (arena) */
    int32_t nlist;
    bool no_shape;         /* the text omits the shape: infer it later */
    IrPos sharding_pos;
    Span callee[A_COUNT];  /* single-computation attributes by id (not cleared) */
} InstrCtx;

static bool push_ref(Parser *P, RefVec *rv, Ref r)
{
    if (rv->n == rv->cap) {
        size_t cap = rv->cap ? rv->cap * 2 : 64;
        Ref *nv = ts_realloc(rv->v, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        rv->v = nv;
        rv->cap = cap;
    }
    rv->v[rv->n++] = r;
    return true;
}

static bool push_opv(Parser *P, int32_t idx)
{
    if (P->nopv == P->capopv) {
        size_t cap = P->capopv ? P->capopv * 2 : 16;
        int32_t *nv = ts_realloc(P->opv, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        P->opv = nv;
        P->capopv = cap;
    }
    P->opv[P->nopv++] = idx;
    return true;
}

static bool push_i32(Parser *P, int32_t **v, size_t *n, size_t *cap, int32_t x)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        int32_t *nv = ts_realloc(*v, nc * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

static bool push_body(Parser *P, InlineBody b)
{
    if (P->nbodies == P->capbodies) {
        size_t cap = P->capbodies ? P->capbodies * 2 : 8;
        InlineBody *nv = ts_realloc(P->bodies, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        P->bodies = nv;
        P->capbodies = cap;
    }
    P->bodies[P->nbodies++] = b;
    return true;
}

static bool push_nested(Parser *P, NestedOp n)
{
    if (P->nnested == P->capnested) {
        size_t cap = P->capnested ? P->capnested * 2 : 8;
        NestedOp *nv = ts_realloc(P->nested, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        P->nested = nv;
        P->capnested = cap;
    }
    P->nested[P->nnested++] = n;
    return true;
}

static bool push_span(Parser *P, Span s)
{
    SpanVec *v = &P->spans;
    if (v->n == v->cap) {
        if (v->cap > INT32_MAX / 4)
            return lx_fail(&P->L, s.pos, "list too long");
        int32_t cap = v->cap ? v->cap * 2 : 16;
        Span *nv = ts_realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = s;
    return true;
}

static bool push_kv(Parser *P, IrKeyValue kv)
{
    KvVec *v = &P->kvs;
    if (v->n == v->cap) {
        if (v->cap > INT32_MAX / 4)
            return lx_fail(&P->L, P->L.tok.pos, "list too long");
        int32_t cap = v->cap ? v->cap * 2 : 16;
        IrKeyValue *nv = ts_realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = kv;
    return true;
}

/* Copy the scratch key/value list into the arena and clear it. */
static bool take_kvs(Parser *P, IrKeyValue **out, int32_t *n)
{
    *n = P->kvs.n;
    *out = NULL;
    if (P->kvs.n > 0) {
        *out = ir_alloc_array(P->m->arena, (size_t)P->kvs.n, sizeof(IrKeyValue));
        if (!*out)
            return lx_nomem(&P->L);
        memcpy(*out, P->kvs.v, (size_t)P->kvs.n * sizeof(IrKeyValue));
    }
    P->kvs.n = 0;
    return true;
}

/* The current NAME as a span (for later lookup), consuming it. */
static bool take_name(Parser *P, Span *s, const char *what)
{
    Lexer *L = &P->L;
    if (!lx_is(L, LX_NAME))
        return lx_expected(L, what);
    if ((int64_t)lx_tlen(L) > L->lim.max_name)
        return lx_fail(L, L->tok.pos, "name longer than %lld bytes", (long long)L->lim.max_name);
    *s = (Span){L->tok.start, lx_tlen(L), L->tok.pos};
    lx_next(L);
    return true;
}

static char *span_dup(Parser *P, Span s)
{
    return lx_dup(&P->L, s.start, s.start + s.len);
}

/* ---- shapes ---- */

static bool parse_shape(Parser *P, IrShape *out);

/* Is the current token the start of a shape: '(' or a type name then '['? */
static bool at_shape(const Parser *P)
{
    const Lexer *L = &P->L;
    if (lx_is(L, LX_LPAREN))
        return true;
    return lx_is(L, LX_NAME) && ir_type_from_name(lx_text(L), lx_tlen(L)) != IR_INVALID &&
           lx_peek(L).kind == LX_LSQUARE;
}

/* tuple ::= '(' (shape (',' shape)*)? ')' */
static bool parse_tuple_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    if (!lx_enter(L))
        return false;
    lx_next(L);
    IrShape *elems = NULL;
    int32_t n = 0, cap = 0;
    bool ok = true;
    if (!lx_is(L, LX_RPAREN)) {
        do {
            if (n >= L->lim.max_tuple) {
                ok = lx_fail(L, L->tok.pos, "tuple wider than %d elements", (int)L->lim.max_tuple);
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                IrShape *ne = ts_realloc(elems, (size_t)cap * sizeof *ne);
                if (!ne) {
                    ok = lx_nomem(L);
                    break;
                }
                elems = ne;
            }
            ok = parse_shape(P, &elems[n++]);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RPAREN, "')' to end the tuple shape");
    if (ok) {
        memset(out, 0, sizeof *out);
        out->type = IR_TUPLE;
        out->ntuple = n;
        if (n > 0) {
            out->tuple = ir_alloc_array(P->m->arena, (size_t)n, sizeof(IrShape));
            if (!out->tuple)
                ok = lx_nomem(L);
            else
                memcpy(out->tuple, elems, (size_t)n * sizeof(IrShape));
        }
    }
    ts_free(elems);
    lx_leave(L);
    return ok;
}

/* The part of a layout after ':' as XLA's Layout prints it, a sequence of
 *   D(dim level types)  T(tile)(tile)...  L(n)  E(bits)  S(space)
 *   #(index type)  *(pointer type)  SC(split config)  M(bytes)
 * each a name and parenthesised contents (ints, `*` for a combined tile
 * dimension, type names, commas and colons). Kept raw; checked here so
 * that garbage is an error at its position rather than printed back. */
static bool check_layout_tail(Lexer *L, IrPos pos, const char *t, size_t n)
{
    static const char *const parts[] = {"SC", "D", "T", "L", "E", "S", "#", "*", "M", NULL};
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        for (int p = 0; parts[p] && !k; p++)
            if (strncmp(t + i, parts[p], strlen(parts[p])) == 0 && i + strlen(parts[p]) < n &&
                t[i + strlen(parts[p])] == '(')
                k = strlen(parts[p]);
        if (!k)
            return lx_fail(L, (IrPos){pos.line, pos.col + (int32_t)i},
                           "unknown layout part '%.*s' (expected T(...), E(...), S(...), ...)",
                           (int)(n - i > 8 ? 8 : n - i), t + i);
        i += k;
        /* one group, or several for T(8,128)(2,1) */
        while (i < n && t[i] == '(') {
            size_t j = i + 1;
            while (j < n && t[j] != ')' && (isalnum((unsigned char)t[j]) || strchr(",*:_ -", t[j])))
                j++;
            if (j >= n || t[j] != ')')
                return lx_fail(L, (IrPos){pos.line, pos.col + (int32_t)j},
                               "malformed layout part: expected ')'");
            i = j + 1;
        }
    }
    return true;
}

/* layout ::= '{' (int (',' int)*)? (':' tail)? '}' ; tail kept raw,
 * e.g. {1,0:T(8,128)(2,1)} or {:T(256)} for a scalar. */
static bool parse_layout(Parser *P, IrShape *s)
{
    Lexer *L = &P->L;
    IrPos pos = L->tok.pos;
    lx_next(L);
    I64Vec v = {0};
    bool ok = true;
    if (lx_is(L, LX_INT)) {
        do {
            int64_t x = 0;
            ok = lx_int(L, &x, "integer in layout") && vec_push(L, &v, x);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    if (ok && lx_is(L, LX_COLON)) {
        lx_next(L);
        IrPos tpos = L->tok.pos;
        size_t a = L->tok.start, b = L->tok.start;
        if (!lx_is(L, LX_RBRACE))
            ok = lx_raw_value(L, &a, &b);
        while (ok && b > a && (L->text[b - 1] == ' ' || L->text[b - 1] == '\t' || L->text[b - 1] == '\r'))
            b--;
        ok = ok && check_layout_tail(L, tpos, L->text + a, b - a);
        ok = ok && (s->layout_tail = lx_dup(L, a, b)) != NULL;
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end the layout");
    if (ok && v.n != s->rank)
        ok = lx_fail(L, pos, "layout has %d entries but the shape has rank %d", (int)v.n, (int)s->rank);
    if (ok && s->rank > 0) {
        s->minor_to_major = ir_alloc_array(P->m->arena, (size_t)s->rank, sizeof(int32_t));
        if (!s->minor_to_major)
            ok = lx_nomem(L);
        for (int32_t i = 0; ok && i < s->rank; i++) {
            if (v.v[i] < 0 || v.v[i] >= s->rank)
                ok = lx_fail(L, pos, "layout entry %lld is out of range [0, %d)", (long long)v.v[i], (int)s->rank);
            for (int32_t j = 0; ok && j < i; j++)
                if (v.v[j] == v.v[i])
                    ok = lx_fail(L, pos, "layout is not a permutation: %lld repeats", (long long)v.v[i]);
            if (ok)
                s->minor_to_major[i] = (int32_t)v.v[i];
        }
    }
    s->has_layout = ok;
    vec_free(&v);
    return ok;
}

/* Mark dimension `i` of the shape being parsed as dynamic: the flags array
 * is made (all false) at the first dynamic dimension. */
static bool mark_dynamic(Parser *P, IrShape *out, int32_t i)
{
    if (!out->dynamic) {
        out->dynamic = ir_alloc_array(P->m->arena, (size_t)P->L.lim.max_rank, sizeof(bool));
        if (!out->dynamic)
            return lx_nomem(&P->L);
    }
    out->dynamic[i] = true;
    return true;
}

/* dim ::= int | '<=' int | '?'
 * `<=N` is a bounded dynamic dimension (its size is known at run time, at
 * most N: dims[] holds the bound); `?` an unbounded one (IR_DIM_UNBOUNDED),
 * which tessel parses, verifies and prints but cannot run. */
static bool parse_dim(Parser *P, IrShape *out, I64Vec *dims, int32_t *nunbounded)
{
    Lexer *L = &P->L;
    int32_t i = (int32_t)dims->n;
    if (lx_is(L, LX_OTHER) && lx_text(L)[0] == '?') {
        lx_next(L);
        (*nunbounded)++;
        return mark_dynamic(P, out, i) && vec_push(L, dims, IR_DIM_UNBOUNDED);
    }
    if (lx_eat(L, LX_LEQ) && !mark_dynamic(P, out, i))
        return false;
    IrPos dpos = L->tok.pos;
    int64_t d = 0;
    if (!lx_int(L, &d, "dimension size") || !vec_push(L, dims, d))
        return false;
    if (d < 0)
        return lx_fail(L, dpos, "dimension size %lld is negative", (long long)d);
    return true;
}

/* shape ::= tuple | type '[' (dim (',' dim)*)? ']' layout? */
static bool parse_shape(Parser *P, IrShape *out)
{
    Lexer *L = &P->L;
    char buf[64];
    memset(out, 0, sizeof *out);
    if (lx_is(L, LX_LPAREN))
        return parse_tuple_shape(P, out);
    IrType t = lx_is(L, LX_NAME) ? ir_type_from_name(lx_text(L), lx_tlen(L)) : IR_INVALID;
    if (t == IR_INVALID) {
        if (lx_is(L, LX_NAME) && ir_op_from_name(lx_text(L), lx_tlen(L)) != OP_COUNT &&
            lx_peek(L).kind == LX_LPAREN)
            return lx_fail(L, L->tok.pos, "expected a shape before opcode %s",
                           lx_describe(L, buf, sizeof buf));
        return lx_expected(L, "shape");
    }
    IrPos pos = L->tok.pos;
    lx_next(L);
    if (!lx_expect(L, LX_LSQUARE, "'[' after the element type"))
        return false;
    I64Vec dims = {0};
    int32_t nunbounded = 0;
    bool ok = true;
    if (!lx_is(L, LX_RSQUARE)) {
        do {
            if (dims.n >= L->lim.max_rank) {
                ok = lx_fail(L, L->tok.pos, "rank exceeds the limit of %d", (int)L->lim.max_rank);
                break;
            }
            ok = parse_dim(P, out, &dims, &nunbounded);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RSQUARE, "']' after dimensions");
    if (ok) {
        out->type = t;
        out->rank = dims.n;
        out->dims = dims.v; /* temporarily, for the count */
        int64_t n = nunbounded ? 0 : ir_shape_elements(out);
        if (n < 0)
            ok = lx_fail(L, pos, "the element count of this shape overflows 64 bits");
        else if (n > L->lim.max_elements)
            ok = lx_fail(L, pos, "shape has %lld elements, more than the limit of %lld", (long long)n,
                         (long long)L->lim.max_elements);
        else if (t == IR_TOKEN && dims.n > 0)
            ok = lx_fail(L, pos, "token[] takes no dimensions");
        out->dims = NULL;
    }
    if (ok && dims.n > 0) {
        IrI64List l = {0};
        ok = vec_to_list(L, &dims, &l);
        out->dims = l.v;
    }
    vec_free(&dims);
    if (ok && lx_is(L, LX_LBRACE) && !P->no_layout) {
        LxKind next = lx_peek(L).kind;
        if (next == LX_INT || next == LX_COLON || next == LX_RBRACE)
            ok = parse_layout(P, out);
    }
    return ok;
}

/* ---- attribute values ---- */

/* Keep the raw text of a `{...}` group: inside the braces, or all of it. */
static bool raw_braces(Parser *P, const char **out, bool inside, const char *what)
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
static bool parse_word(Parser *P, const char *const *words, const char **out, const char *what)
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
    return lx_expected(L, what);
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
static bool parse_pads(Parser *P, bool allow_interior, IrI64List *lo, IrI64List *hi,
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
static bool parse_window(Parser *P, IrWindow *w)
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
            ok = lx_fail(L, fpos, "unknown window field %s", lx_describe(L, buf, sizeof buf));
            break;
        }
        lx_next(L);
        lx_next(L);
        if (is_pad) {
            if (has_pad)
                ok = lx_fail(L, fpos, "duplicate window pad=");
            has_pad = true;
            ok = ok && parse_pads(P, false, &plo, &phi, NULL, "window pad");
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
static bool parse_dim_labels(Parser *P, IrConvDnums *c)
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
static bool parse_slice(Parser *P, IrAttrs *a)
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
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end slice") && vec_to_list(L, &st, &a->slice_start) &&
         vec_to_list(L, &li, &a->slice_limit) && vec_to_list(L, &sd, &a->slice_stride);
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
    int32_t n = 0, cap = 0;
    bool ok = true;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            if (n == cap) {
                if (n >= INT32_MAX / 4) {
                    ok = lx_fail(L, L->tok.pos, "too many replica groups");
                    break;
                }
                cap = cap ? cap * 2 : 8;
                IrI64List *ng = ts_realloc(groups, (size_t)cap * sizeof *ng);
                if (!ng) {
                    ok = lx_nomem(L);
                    break;
                }
                groups = ng;
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
static bool ints_between(Lexer *L, LxKind open, LxKind close, I64Vec *v, const char *what)
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
    bool ok = ints_between(L, LX_LSQUARE, LX_RSQUARE, &shape, "the replica group shape") &&
              lx_expect(L, LX_LEQ, "'<=' in iota replica groups") &&
              ints_between(L, LX_LSQUARE, LX_RSQUARE, &dims, "the iota dimensions");
    if (ok && lx_is_word(L, "T")) {
        lx_next(L);
        has_perm = true;
        ok = ints_between(L, LX_LPAREN, LX_RPAREN, &perm, "T(...)");
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
    ok = ok && lx_iota_devices(L, pos, &dims, &perm, has_perm, n, &iota_dims, &iota_perm, &devices) &&
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

/* replica_groups ::= '{' ('{' ints '}' (',' ...)*)? '}' | iota form */
static bool parse_replica_groups(Parser *P, IrReplicaGroups *g)
{
    g->present = true;
    if (lx_is(&P->L, LX_LBRACE))
        return parse_groups_list(P, g);
    if (!lx_is(&P->L, LX_LSQUARE))
        return lx_expected(&P->L, "'{' or '[' to start replica_groups");
    return parse_groups_iota(P, g);
}

/* source_target_pairs={{0,1},{1,0}} -> flattened {0,1,1,0}. */
static bool parse_pairs(Parser *P, IrI64List *out)
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
static bool parse_frontend(Parser *P, IrKeyValue **out, int32_t *n)
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
            } else if (!raw_braces(P, &kv.value, false, "string or {...} value")) {
                return false;
            }
            if (!push_kv(P, kv))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    return lx_expect(L, LX_RBRACE, "'}' to end frontend_attributes") && take_kvs(P, out, n);
}

/* An inline computation `{ instruction+ }` at the current '{', the value
 * of attribute id (item k of a list, or -1): skipped now and added with a
 * provisional name, INSTR.ATTR or INSTR.ATTR.K (XLA names them "_" and
 * leaves them to its name uniquifier; a name that says where the
 * computation came from reads better), made unique by name_inline once
 * every written computation name is known. Its body is read by
 * parse_inline_bodies when the computation around it is done. */
static bool inline_callee(Parser *P, InstrCtx *x, AttrId id, int32_t k, Span *out)
{
    Lexer *L = &P->L;
    LxMark at = lx_mark(L);
    size_t s, e;
    if (!lx_raw_group(L, &s, &e))
        return false;
    const char *attr = attr_name(id);
    char *name = k >= 0 ? ir_sprintf(P->m->arena, "%s.%s.%d", x->ins.name, attr, (int)k)
                        : ir_sprintf(P->m->arena, "%s.%s", x->ins.name, attr);
    /* Leave room for a ".N" suffix within the name limit, so the printed
     * text parses again. */
    if (name && (int64_t)strlen(name) + 12 > L->lim.max_name)
        name = k >= 0 ? ir_sprintf(P->m->arena, "%s.%d", attr, (int)k) : ir_sprintf(P->m->arena, "%s", attr);
    if (!name)
        return lx_nomem(L);
    int32_t ci = ir_add_computation(P->m, name);
    if (ci < 0)
        return lx_nomem(L);
    P->m->comp[ci]->pos = at.tok.pos;
    if (!push_i32(P, &P->inl, &P->ninl, &P->capinl, ci) || !push_body(P, (InlineBody){ci, at}))
        return false;
    *out = inline_span(ci, at.tok.pos);
    return true;
}

/* A computation name or an inline computation (callee attribute). */
static bool parse_callee(Parser *P, InstrCtx *x, AttrId id)
{
    if (lx_is(&P->L, LX_LBRACE))
        return inline_callee(P, x, id, -1, &x->callee[id]);
    return take_name(P, &x->callee[id], "computation name");
}

/* '{' callee (',' callee)* '}' into x->list. */
static bool parse_callee_list(Parser *P, InstrCtx *x, AttrId id)
{
    Lexer *L = &P->L;
    P->spans.n = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start the computation list"))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            Span s = {0};
            bool ok = lx_is(L, LX_LBRACE) ? inline_callee(P, x, id, P->spans.n, &s)
                                          : take_name(P, &s, "computation name");
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
static bool parse_control(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    int32_t k = 0;
    if (!lx_expect(L, LX_LBRACE, "'{' to start control-predecessors"))
        return false;
    if (!lx_is(L, LX_RBRACE)) {
        do {
            Span s = {0};
            if (!take_name(P, &s, "instruction name") ||
                !push_ref(P, &P->local, (Ref){x->comp, x->index, k++, REF_CONTROL, s, NULL}))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    if (!lx_expect(L, LX_RBRACE, "'}' to end control-predecessors"))
        return false;
    IrI64List *cp = &x->ins.a.control_predecessors;
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
static bool parse_shape_list(Parser *P, IrAttrs *a)
{
    Lexer *L = &P->L;
    IrShape *v = NULL;
    int32_t n = 0, cap = 0;
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start the shape list");
    if (ok && !lx_is(L, LX_RBRACE)) {
        do {
            if (n >= L->lim.max_tuple) {
                ok = lx_fail(L, L->tok.pos, "more than %d shapes", (int)L->lim.max_tuple);
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                IrShape *nv = ts_realloc(v, (size_t)cap * sizeof *nv);
                if (!nv) {
                    ok = lx_nomem(L);
                    break;
                }
                v = nv;
            }
            ok = parse_shape(P, &v[n++]);
        } while (ok && lx_eat(L, LX_COMMA));
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}' to end the shape list");
    if (ok) {
        a->noperand_layouts = n;
        a->operand_layout_constraints = ir_alloc_array(P->m->arena, (size_t)(n > 0 ? n : 1), sizeof(IrShape));
        if (!a->operand_layout_constraints)
            ok = lx_nomem(L);
        else
            memcpy(a->operand_layout_constraints, v, (size_t)n * sizeof(IrShape));
    }
    ts_free(v);
    return ok;
}

static bool parse_string_attr(Parser *P, const char **out)
{
    char *s;
    if (!lx_string(&P->L, &s, "string"))
        return false;
    *out = s;
    return true;
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

/* epsilon=1e-05: a float, as batch-norm keeps it. */
static bool parse_epsilon(Parser *P, float *out)
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
static bool keep_attr(Parser *P, IrAttrs *a, const char *name, size_t s, size_t e)
{
    IrKeyValue *kv = ir_alloc_array(P->m->arena, (size_t)a->nkept + 1, sizeof *kv);
    char *v = lx_dup(&P->L, s, e);
    if (!kv || !v)
        return lx_nomem(&P->L);
    if (a->nkept > 0)
        memcpy(kv, a->kept, (size_t)a->nkept * sizeof *kv);
    kv[a->nkept].key = name;
    kv[a->nkept].value = v;
    a->kept = kv;
    a->nkept++;
    return true;
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
        return parse_frontend(P, &a->frontend, &a->nfrontend);
    case A_METADATA:
        return raw_braces(P, &a->metadata, true, "'{' after metadata=");
    case A_BACKEND:
        if (lx_is(L, LX_STRING)) {
            a->backend_config = lx_dup(L, L->tok.start, L->tok.end);
            lx_next(L);
            return a->backend_config != NULL;
        }
        return raw_braces(P, &a->backend_config, false, "string or {...} after backend_config=");
    case A_STATISTICS:
        return raw_braces(P, &a->statistics_viz, false, "'{' after statistics=");
    case A_ORIGIN:
        return raw_braces(P, &a->origin, false, "'{' after origin=");
    case A_CONTROL:
        return parse_control(P, x);
    case A_DIMENSIONS:
        a->has_dimensions = true;
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dimensions, "dimensions");
    case A_INDEX:
        return lx_int(L, &a->tuple_index, "integer after index=");
    case A_IOTA_DIM:
        return lx_int(L, &a->iota_dimension, "integer after iota_dimension=");
    case A_SLICE:
        return parse_slice(P, a);
    case A_DS_SIZES:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->dynamic_slice_sizes, "dynamic_slice_sizes");
    case A_PADDING:
        return parse_pads(P, true, &a->pad_lo, &a->pad_hi, &a->pad_interior, "padding");
    case A_WINDOW:
        return parse_window(P, &a->window);
    case A_DIM_LABELS:
        return parse_dim_labels(P, &a->conv);
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
        return raw_braces(P, &a->precision_config, false, "'{' after operand_precision=");
    case A_ALGORITHM:
        if (x->ins.op == OP_RNG_BIT_GENERATOR)
            return parse_word(P, rng_algs, &a->rng_algorithm, "rng_default, rng_three_fry or rng_philox");
        if (!lx_is(L, LX_NAME))
            return lx_expected(L, "algorithm name");
        a->algorithm = lx_dup(L, L->tok.start, L->tok.end);
        lx_next(L);
        return a->algorithm != NULL;
    case A_DIRECTION:
        if (!parse_word(P, directions, &w, "comparison direction EQ, NE, LT, LE, GT or GE"))
            return false;
        a->direction = (IrCmpDir)(CMP_EQ + word_index(directions, w));
        return true;
    case A_CMP_TYPE:
    case A_CMP_ORDER:
        if (id == A_CMP_TYPE ? !parse_word(P, cmp_types, &w, "comparison type FLOAT, TOTALORDER, SIGNED or UNSIGNED")
                             : !parse_word(P, cmp_orders, &w, "comparison order TOTALORDER or PARTIALORDER"))
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
        return parse_callee(P, x, id);
    case A_BRANCHES:
    case A_CALLED:
        return parse_callee_list(P, x, id);
    case A_REPLICA_GROUPS:
        return parse_replica_groups(P, &a->replica_groups);
    case A_CHANNEL_ID:
        return lx_int(L, &a->channel_id, "integer after channel_id=");
    case A_GLOBAL_IDS:
        return lx_bool(L, &a->use_global_device_ids, "true or false");
    case A_CONSTRAIN_LAYOUT:
        return lx_bool(L, &a->constrain_layout, "true or false");
    case A_SOURCE_TARGET:
        return parse_pairs(P, &a->source_target_pairs);
    case A_TARGET:
        return parse_string_attr(P, &a->custom_call_target);
    case A_API_VERSION:
        return parse_word(P, api_versions, &a->api_version, "custom-call API version (API_VERSION_...)");
    case A_SIDE_EFFECT:
        return lx_bool(L, &a->custom_call_has_side_effect, "true or false");
    case A_OPERAND_LAYOUTS:
        return parse_shape_list(P, a);
    case A_DISTRIBUTION:
        return parse_word(P, rng_dists, &a->distribution, "rng_uniform or rng_normal");
    case A_FFT_TYPE:
        return parse_word(P, fft_types, &a->fft_type, "FFT, IFFT, RFFT or IRFFT");
    case A_FFT_LENGTH:
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->fft_length, "fft_length");
    case A_INFEED_CONFIG:
        return parse_string_attr(P, &a->infeed_config);
    case A_OUTFEED_CONFIG:
        return parse_string_attr(P, &a->outfeed_config);
    case A_OUTFEED_SHAPE:
        a->has_outfeed_shape = true;
        return parse_shape(P, &a->outfeed_shape);
    case A_EXPONENT_BITS:
        return lx_int(L, &a->exponent_bits, "integer after exponent_bits=");
    case A_MANTISSA_BITS:
        return lx_int(L, &a->mantissa_bits, "integer after mantissa_bits=");
    case A_SLICE_SIZES:
        if (x->ins.op != OP_GATHER) /* collective-permute's in-place form: {{...},...} */
            return raw_braces(P, &a->permute_slice_sizes, false, "'{' after slice_sizes=");
        return lx_int_list(L, LX_LBRACE, LX_RBRACE, LX_COMMA, &a->slice_sizes, "slice_sizes");
    case A_KIND:
        return parse_word(P, fusion_kinds, &a->fusion_kind, "fusion kind kLoop, kInput, kOutput or kCustom");
    case A_CALLS:
        return parse_callee(P, x, id);
    case A_OUTPUT_ALIASING:
        return raw_braces(P, &a->output_to_operand_aliasing, false, "'{' after output_to_operand_aliasing=");
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
        return raw_braces(P, &a->domain, false, "'{' after domain=");
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
        return parse_word(P, transposes, &a->transpose_a, "NO_TRANSPOSE, TRANSPOSE or ADJOINT");
    case A_EPSILON:
        return parse_epsilon(P, &a->epsilon);
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
        return parse_word(P, schedules, &a->custom_call_schedule,
                          "SCHEDULE_NONE, SCHEDULE_LATEST or SCHEDULE_EARLIEST");
    case A_PARAM_REPL: case A_INFERRED_DIM: case A_SCHEDULE: case A_PADDING_TYPE:
    case A_IS_COMPOSITE: case A_MODE: case A_CONV_KIND: case A_RESULT_ACCURACY: case A_CC_LITERAL:
        return lx_raw_value(L, &s, &e) && keep_attr(P, a, attr_name(id), s, e);
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

/* The opcode as written: "abs-start" for a sugared async-start. */
static const char *op_text(const IrInstr *ins, char *buf, size_t n)
{
    if (!ins->a.async_sugar)
        return ir_op_name(ins->op);
    const char *suffix = ins->op == OP_ASYNC_START ? "start" : ins->op == OP_ASYNC_UPDATE ? "update" : "done";
    snprintf(buf, n, "%s-%s", ir_op_name(ins->a.async_wrapped_op), suffix);
    return buf;
}

static bool parse_attribute(Parser *P, InstrCtx *x)
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

/* ---- instructions ---- */

static bool shape_inferable(IrOpcode op);
static bool push_deferred(Parser *P, Deferred df);
static bool infer_deferred(Parser *P);

/* Attributes an op cannot do without (XLA's required=true). */
static bool check_required(Parser *P, InstrCtx *x)
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
                return lx_fail(&P->L, x->ins.pos, "missing attribute '%s' for %s", attr_name(req[i].need[k]),
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

/* Lay out called[] in the per-op role order of ir.h and queue the names. */
static bool assign_callees(Parser *P, InstrCtx *x)
{
    AttrId order[2];
    int32_t n = 0;
    IrInstr *ins = &x->ins;
    switch (ins->a.async_sugar ? ins->a.async_wrapped_op : ins->op) {
    case OP_WHILE:
        order[n++] = A_CONDITION;
        order[n++] = A_BODY;
        break;
    case OP_SELECT_AND_SCATTER:
        order[n++] = A_SELECT;
        order[n++] = A_SCATTER;
        break;
    case OP_CONDITIONAL:
        if (x->seen[A_TRUE]) {
            order[n++] = A_TRUE;
            order[n++] = A_FALSE;
            ins->cond_pred_form = true;
        }
        break;
    default:
        if (x->seen[A_TO_APPLY])
            order[n++] = A_TO_APPLY;
        else if (x->seen[A_CALLS])
            order[n++] = A_CALLS;
        ins->custom_to_apply = n > 0 && (ins->op == OP_CUSTOM_CALL ||
                                         (ins->a.async_sugar && ins->a.async_wrapped_op == OP_CUSTOM_CALL));
        break;
    }
    int32_t total = n + (n == 0 ? x->nlist : 0);
    if (total == 0)
        return true;
    ins->ncalled = total;
    ins->called = ir_alloc_array(P->m->arena, (size_t)total, sizeof(int32_t));
    if (!ins->called)
        return lx_nomem(&P->L);
    for (int32_t i = 0; i < total; i++) {
        Span s = n > 0 ? x->callee[order[i]] : x->list[i];
        ins->called[i] = s.len == 0 ? (int32_t)s.start : -1; /* inline: known already */
        if (s.len > 0 && !push_ref(P, &P->callees, (Ref){x->comp, x->index, i, REF_CALLEE, s, NULL}))
            return false;
    }
    return true;
}

/* Is the current token followed by '('? Looked up on every operand name,
 * so the byte right after the name (',' or ')' nearly always) decides
 * without lexing the next token unless blanks or a comment intervene. */
static bool paren_follows(const Lexer *L)
{
    size_t e = L->tok.end;
    char ch = e < L->len ? L->text[e] : 0;
    if (ch == '(')
        return true;
    if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n' && ch != '/')
        return false;
    return lx_peek(L).kind == LX_LPAREN;
}

/* A nested operand instruction `shape? opcode(...)` at the current opcode
 * token, operand k of x, whose text started at `at`: skipped now (its
 * operands may nest further) and read by parse_nested_ops once x is
 * added. XLA reads no attributes for a nested instruction (a comma after
 * it would be ambiguous), so its text ends at its ')'. */
static bool skip_nested(Parser *P, InstrCtx *x, int32_t k, LxMark at)
{
    Lexer *L = &P->L;
    size_t s, e;
    lx_next(L); /* the opcode */
    return lx_raw_group(L, &s, &e) && push_nested(P, (NestedOp){x->index, k, at}) && push_opv(P, -1);
}

/* operands ::= '(' (operand (',' operand)*)? ')' ; operand ::= shape? name | shape? opcode operands */
static bool parse_operands(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (L->st != IR_OK)
        return false;
    if (!lx_is(L, LX_LPAREN)) { /* the message is formatted only when needed */
        char msg[96];
        snprintf(msg, sizeof msg, "'(' to start the operands of %s", ir_op_name(x->ins.op));
        return lx_expected(L, msg);
    }
    lx_next(L);
    const IrComputation *c = P->m->comp[x->comp];
    int32_t k = 0;
    P->nopv = 0;
    if (!lx_is(L, LX_RPAREN)) {
        do {
            LxMark at = lx_mark(L);
            IrShape *shape = NULL;
            if (at_shape(P)) {
                shape = ir_alloc(P->m->arena, sizeof *shape);
                if (!shape)
                    return lx_nomem(L);
                if (!parse_shape(P, shape))
                    return false;
            }
            /* A name followed by '(' is no operand name but an opcode: a
             * nested instruction (an unknown opcode is reported when it
             * is read). A %name is never an opcode. */
            if (lx_is(L, LX_NAME) && L->text[L->tok.start - 1] != '%' && paren_follows(L)) {
                if (k == INT32_MAX)
                    return lx_fail(L, L->tok.pos, "too many operands");
                if (!skip_nested(P, x, k, at))
                    return false;
                k++;
                continue;
            }
            Span s = {0};
            if (!take_name(P, &s, "operand name"))
                return false;
            if (k == INT32_MAX)
                return lx_fail(L, s.pos, "too many operands");
            /* An operand defined above (XLA prints in that order) is
             * resolved now, while its name's slot is in the cache; any
             * other (defined below, undefined, or written with a shape
             * that does not match) is resolved, or reported, with the
             * rest of the computation by resolve_local, as before. */
            int32_t idx = map_find(&P->instrs, L->text + s.start, s.len);
            if (idx >= 0 && shape && c->instr[idx].shape.type != IR_INVALID &&
                !ir_shape_compatible(shape, &c->instr[idx].shape))
                idx = -1;
            if (!push_opv(P, idx))
                return false;
            if (idx < 0 && !push_ref(P, &P->local, (Ref){x->comp, x->index, k, REF_OPERAND, s, shape}))
                return false;
            k++;
        } while (lx_eat(L, LX_COMMA));
    }
    if (!lx_expect(L, LX_RPAREN, "',' or ')' after an operand"))
        return false;
    x->ins.nopnd = k;
    if (k > 0) {
        x->ins.opnd = ir_alloc_array(P->m->arena, (size_t)k, sizeof(int32_t));
        if (!x->ins.opnd)
            return lx_nomem(L);
        memcpy(x->ins.opnd, P->opv, (size_t)k * sizeof(int32_t));
    }
    return true;
}

/* parameter(N): recorded in P->params; the instruction is added with
 * parameter_number -1 (so ir_add_instr builds no table) and numbered when
 * the computation ends (finish_params). */
static bool parse_parameter(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (!lx_expect(L, LX_LPAREN, "'(' before the parameter number"))
        return false;
    IrPos pos = L->tok.pos;
    int64_t n = 0;
    if (!lx_int(L, &n, "parameter number") || !lx_expect(L, LX_RPAREN, "')' after the parameter number"))
        return false;
    if (n < 0)
        return lx_fail(L, pos, "parameter number %lld is negative", (long long)n);
    if (P->nparams == P->capparams) {
        size_t cap = P->capparams ? P->capparams * 2 : 16;
        ParamUse *nv = ts_realloc(P->params, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(L);
        P->params = nv;
        P->capparams = cap;
    }
    P->params[P->nparams++] = (ParamUse){x->index, n, pos};
    x->ins.a.parameter_number = -1;
    return true;
}

/* Number the parameters of c: each of 0..n-1 exactly once. */
static bool finish_params(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    size_t n = P->nparams;
    P->nparams = 0;
    if (n == 0)
        return true;
    int32_t *param = ir_alloc_array(P->m->arena, n, sizeof(int32_t));
    if (!param)
        return lx_nomem(L);
    for (size_t i = 0; i < n; i++)
        param[i] = -1;
    for (size_t i = 0; i < n; i++) {
        ParamUse *u = &P->params[i];
        if (u->number >= (int64_t)n)
            return lx_fail(L, u->pos, "parameter number %lld is out of range: computation '%s' has %zu parameters",
                           (long long)u->number, c->name, n);
        if (param[u->number] >= 0)
            return lx_fail(L, u->pos, "parameter number %lld is already used by '%s'", (long long)u->number,
                           c->instr[param[u->number]].name);
        param[u->number] = u->instr;
        c->instr[u->instr].a.parameter_number = u->number;
    }
    c->param = param;
    c->nparam = (int32_t)n;
    return true;
}

/* constant(literal); an old-style shape prefix `constant(f32[2] {1, 2})` is
 * accepted when it matches the instruction's shape (the prefix takes no
 * layout: a brace after it starts the literal). */
static bool parse_constant(Parser *P, InstrCtx *x)
{
    Lexer *L = &P->L;
    if (!lx_expect(L, LX_LPAREN, "'(' before the constant literal"))
        return false;
    if (lx_is(L, LX_NAME) && ir_type_from_name(lx_text(L), lx_tlen(L)) != IR_INVALID &&
        lx_peek(L).kind == LX_LSQUARE) {
        IrPos pos = L->tok.pos;
        IrShape s = {0};
        P->no_layout = true; /* `f32[2] {1, 2}`: the brace starts the literal */
        bool ok = parse_shape(P, &s);
        P->no_layout = false;
        if (!ok)
            return false;
        if (!ir_shape_equal(&s, &x->ins.shape))
            return lx_fail(L, pos, "the literal's shape differs from the instruction's shape");
    }
    if (lx_is(L, LX_LBRACE) && lx_peek(L).kind == LX_DOTS && ir_shape_is_array(&x->ins.shape) &&
        x->ins.shape.rank > 0) {
        /* `constant({...})`: XLA elides large literals when it prints
         * without print_large_constants; its parser takes them. The values
         * are unknown: nothing is stored, and the printer writes {...}. */
        lx_next(L);
        lx_next(L);
        x->ins.a.literal_elided = true;
        return lx_expect(L, LX_RBRACE, "'}' after '{...'") &&
               lx_expect(L, LX_RPAREN, "')' after the constant literal");
    }
    return ir_lit_parse_lx(L, &x->ins.shape, &x->ins.a.literal, &x->ins.a.literal_bytes) &&
           lx_expect(L, LX_RPAREN, "')' after the constant literal");
}

/* XLA's sugared async forms: `OP-start`, `OP-update`, `OP-done` for any op
 * OP that is not itself asynchronous (`abs-start`, `fusion-done`, ...) read
 * as async-start/-update/-done wrapping OP. The dedicated opcodes
 * (all-reduce-start, copy-done, send-done, ...) are found by name before
 * this is tried. False when the name is no such form. */
static bool async_sugar(const char *s, size_t n, IrInstr *ins)
{
    static const struct {
        const char *suffix;
        IrOpcode op;
    } forms[] = {{"-start", OP_ASYNC_START}, {"-update", OP_ASYNC_UPDATE}, {"-done", OP_ASYNC_DONE}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        size_t k = strlen(forms[i].suffix);
        if (n <= k || memcmp(s + n - k, forms[i].suffix, k) != 0)
            continue;
        IrOpcode w = ir_op_from_name(s, n - k);
        if (w == OP_COUNT || w == OP_ASYNC_START || w == OP_ASYNC_UPDATE || w == OP_ASYNC_DONE ||
            w == OP_PARAMETER)
            return false;
        ins->op = forms[i].op;
        ins->a.async_sugar = true;
        ins->a.async_wrapped_op = w;
        return true;
    }
    return false;
}

/* instruction ::= 'ROOT'? name '=' rhs ; rhs ::= shape? opcode operands (',' attribute)*
 * A nested operand instruction (`nested`) is a bare rhs without attributes:
 * it is added with an empty name, given one by name_nested when its
 * computation is done, and is never the root. */
static bool parse_one(Parser *P, int32_t ci, bool nested, bool *saw_root)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[ci];
    char buf[80];
    bool is_root = false;
    IrPos root_pos = L->tok.pos;
    if (!nested && lx_is_word(L, "ROOT") && lx_peek(L).kind == LX_NAME) {
        is_root = true;
        lx_next(L);
    }
    if (!P->ictx && !(P->ictx = ts_malloc(sizeof *P->ictx)))
        return lx_nomem(L);
    InstrCtx *x = P->ictx;
    memset(x, 0, offsetof(InstrCtx, callee));
    x->comp = ci;
    x->index = c->ninstr;
    IrInstr *ins = &x->ins;
    ins->a.feature_group_count = 1;
    ins->a.batch_group_count = 1;
    Span name = {0};
    bool ok = true;
    if (nested) {
        ins->pos = L->tok.pos;
        ins->name = "";
    } else {
        ok = take_name(P, &name, "instruction name or '}'");
        if (ok) {
            ins->pos = name.pos;
            if (map_find(&P->instrs, L->text + name.start, name.len) >= 0)
                ok = lx_fail(L, name.pos, "duplicate instruction name '%.*s'", (int)name.len,
                             L->text + name.start);
        }
        ok = ok && (ins->name = span_dup(P, name)) != NULL;
        ok = ok && lx_expect(L, LX_EQUAL, "'=' after the instruction name");
    }
    if (ok && lx_is(L, LX_NAME) && ir_type_from_name(lx_text(L), lx_tlen(L)) == IR_INVALID &&
        ir_op_from_name(lx_text(L), lx_tlen(L)) != OP_COUNT && lx_peek(L).kind == LX_LPAREN) {
        x->no_shape = true;
        ins->shape.type = IR_INVALID;
        if (!shape_inferable(ir_op_from_name(lx_text(L), lx_tlen(L))))
            ok = lx_fail(L, L->tok.pos, "%s needs an explicit shape", lx_describe(L, buf, sizeof buf));
    } else {
        ok = ok && parse_shape(P, &ins->shape);
    }
    if (ok && (!lx_is(L, LX_NAME) || L->text[L->tok.start - 1] == '%'))
        ok = lx_expected(L, "opcode");
    if (ok) {
        ins->op = ir_op_from_name(lx_text(L), lx_tlen(L));
        if (ins->op == OP_COUNT && !async_sugar(lx_text(L), lx_tlen(L), ins))
            ok = lx_fail(L, L->tok.pos, "unknown opcode %s", lx_describe(L, buf, sizeof buf));
        else
            lx_next(L);
        P->nasync_sugar += ins->a.async_sugar && ins->op == OP_ASYNC_START;
    }
    if (ok) {
        if (ins->op == OP_PARAMETER)
            ok = parse_parameter(P, x);
        else if (ins->op == OP_CONSTANT)
            ok = parse_constant(P, x);
        else
            ok = parse_operands(P, x);
    }
    while (ok && !nested && lx_eat(L, LX_COMMA))
        ok = parse_attribute(P, x);
    ok = ok && check_required(P, x) && assign_callees(P, x);
    if (ok && is_root) {
        if (*saw_root)
            ok = lx_fail(L, root_pos, "computation '%s' has more than one ROOT", c->name);
        *saw_root = true;
        c->root = x->index;
    }
    if (ok && ir_add_instr(P->m, c, ins) != x->index)
        ok = lx_nomem(L);
    if (ok && !nested && !map_put(&P->instrs, ins->name, name.len, x->index))
        ok = lx_nomem(L);
    if (ok && nested)
        ok = push_i32(P, &P->unnamed, &P->nunnamed, &P->capunnamed, x->index);
    if (ok && x->no_shape)
        ok = push_deferred(P, (Deferred){ci, x->index, x->sharding_pos, P->top});
    return ok;
}

/* Read the nested operand instructions skipped while the last instruction
 * was read (and those nested in them: reading one may queue more), each
 * from where its text starts, then continue after that instruction. */
static bool parse_nested_ops(Parser *P, int32_t ci)
{
    Lexer *L = &P->L;
    if (P->nnested == 0)
        return true;
    LxMark back = lx_mark(L);
    bool ok = true;
    /* In text order (a queue), so generated names number left to right. */
    for (size_t head = 0; ok && head < P->nnested; head++) {
        NestedOp n = P->nested[head];
        lx_reset(L, n.at);
        IrComputation *c = P->m->comp[ci];
        int32_t idx = c->ninstr;
        ok = parse_one(P, ci, true, NULL);
        if (ok)
            P->m->comp[ci]->instr[n.user].opnd[n.slot] = idx;
    }
    P->nnested = 0;
    lx_reset(L, back);
    return ok;
}

static bool parse_instruction(Parser *P, int32_t ci, bool *saw_root)
{
    return parse_one(P, ci, false, saw_root) && parse_nested_ops(P, ci);
}

/* Name the nested instructions of computation c after their opcode, as
 * XLA does ("constant", then "constant.1", ...), skipping every name the
 * computation already has; each candidate is tried once per computation. */
static bool name_nested(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    size_t n = P->nunnamed;
    P->nunnamed = 0;
    if (n == 0)
        return true;
    if (!P->opnext && !(P->opnext = ts_malloc((size_t)OP_COUNT * sizeof *P->opnext)))
        return lx_nomem(L);
    for (int32_t i = 0; i < OP_COUNT; i++)
        P->opnext[i] = 0;
    for (size_t i = 0; i < n; i++) {
        IrInstr *ins = &c->instr[P->unnamed[i]];
        char opbuf[64];
        const char *op = op_text(ins, opbuf, sizeof opbuf);
        char *name;
        for (;;) {
            int32_t k = P->opnext[ins->op]++;
            name = k ? ir_sprintf(P->m->arena, "%s.%d", op, (int)k) : ir_sprintf(P->m->arena, "%s", op);
            if (!name)
                return lx_nomem(L);
            if (map_find(&P->instrs, name, strlen(name)) < 0)
                break;
        }
        if (!map_put(&P->instrs, name, strlen(name), P->unnamed[i]))
            return lx_nomem(L);
        ins->name = name;
    }
    return true;
}

/* ---- shapes the text leaves out ---- */

/* Ops whose shape XLA lets the text omit (hlo_parser.cc CanInferShape). */
static bool shape_inferable(IrOpcode op)
{
    switch (op) {
    case OP_PARAMETER: case OP_CONSTANT: case OP_IOTA: case OP_CONVERT: case OP_BITCAST_CONVERT:
    case OP_BITCAST: case OP_RESHAPE: case OP_SLICE: case OP_DYNAMIC_SLICE:
    case OP_DYNAMIC_UPDATE_SLICE: case OP_CUSTOM_CALL: case OP_INFEED: case OP_OUTFEED: case OP_RNG:
    case OP_RNG_BIT_GENERATOR: case OP_REDUCE_PRECISION: case OP_ALL_REDUCE: case OP_ALL_GATHER:
    case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE: case OP_COUNT:
    /* ... and, in tessel, the ops whose result the operands do not fix */
    case OP_FUSION: case OP_ASYNC_START: case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
    case OP_COPY_START: case OP_SEND: case OP_RECV: case OP_RECV_DONE: case OP_ALL_REDUCE_START:
    case OP_ALL_GATHER_START: case OP_COLLECTIVE_PERMUTE_START: case OP_ALL_GATHER_DONE:
    case OP_COLLECTIVE_PERMUTE_DONE: case OP_ALL_REDUCE_DONE: case OP_COPY_DONE:
    case OP_STOCHASTIC_CONVERT: case OP_DYNAMIC_RESHAPE: case OP_SET_DIMENSION_SIZE:
    case OP_RAGGED_DOT: case OP_SCALED_DOT: case OP_RAGGED_ALL_TO_ALL: case OP_COLLECTIVE_BROADCAST:
    case OP_COLLECTIVE_REDUCE: case OP_RNG_GET_AND_UPDATE_STATE: case OP_SCAN: case OP_TOPK:
        return false;
    default:
        return true;
    }
}

static bool push_deferred(Parser *P, Deferred df)
{
    if (P->ndefer == P->capdefer) {
        size_t cap = P->capdefer ? P->capdefer * 2 : 16;
        Deferred *nv = ts_realloc(P->defer, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        P->defer = nv;
        P->capdefer = cap;
    }
    P->defer[P->ndefer++] = df;
    return true;
}

/* The simple rules (elementwise, tuples); everything else goes to
 * ir_infer_shape. Example: compare(f32[4] a, f32[4] b) -> pred[4]. */
static IrStatus infer_one(IrModule *m, IrComputation *c, IrInstr *ins, IrShape *out, IrDiag *d)
{
    IrArena *A = m->arena;
    const IrShape *o0 = ins->nopnd > 0 ? &c->instr[ins->opnd[0]].shape : NULL;
    IrOpKind kind = ir_op_kind(ins->op);
    IrStatus st;
    switch (ins->op) {
    case OP_TUPLE: {
        IrShape *el = ts_malloc((size_t)(ins->nopnd > 0 ? ins->nopnd : 1) * sizeof *el);
        if (!el)
            return IR_ENOMEM;
        for (int32_t i = 0; i < ins->nopnd; i++)
            el[i] = c->instr[ins->opnd[i]].shape;
        st = ir_shape_make_tuple(A, out, ins->nopnd, el);
        ts_free(el);
        return st;
    }
    case OP_GET_TUPLE_ELEMENT:
        if (o0 && o0->type == IR_TUPLE && ins->a.tuple_index >= 0 && ins->a.tuple_index < o0->ntuple)
            return ir_shape_copy(A, out, &o0->tuple[ins->a.tuple_index]);
        break;
    case OP_AFTER_ALL:
        return ir_shape_make(A, out, IR_TOKEN, 0, NULL);
    case OP_PARTITION_ID:
    case OP_REPLICA_ID:
        return ir_shape_make(A, out, IR_U32, 0, NULL);
    case OP_OPTIMIZATION_BARRIER:
    case OP_ADD_DEPENDENCY:
        if (o0)
            return ir_shape_copy(A, out, o0);
        break;
    default:
        if (kind == IR_K_OTHER || !o0 || o0->type == IR_TUPLE)
            break;
        /* select and clamp take their shape from the middle operand */
        if (kind == IR_K_TERNARY && ins->nopnd == 3)
            o0 = &c->instr[ins->opnd[1]].shape;
        if ((st = ir_shape_copy(A, out, o0)) != IR_OK)
            return st;
        if (ins->op == OP_COMPARE || ins->op == OP_IS_FINITE)
            out->type = IR_PRED;
        else if ((ins->op == OP_REAL || ins->op == OP_IMAG) && ir_type_is_complex(o0->type))
            out->type = o0->type == IR_C64 ? IR_F32 : IR_F64;
        else if (ins->op == OP_COMPLEX)
            out->type = o0->type == IR_F64 ? IR_C128 : IR_C64;
        return IR_OK;
    }
    return ir_infer_shape(m, c, ins, out, A, d);
}

/* Infer the omitted shapes of one computation in dependency order (Kahn's
 * algorithm over the deferred instructions only, so it stays linear). */
static bool infer_group(Parser *P, const Deferred *df, size_t n)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[df[0].comp];
    size_t ni = (size_t)c->ninstr;
    int32_t *slot = ts_malloc(ni * sizeof(int32_t));
    int32_t *pending = ts_calloc(n, sizeof(int32_t));
    int32_t *start = ts_calloc(n + 1, sizeof(int32_t));
    int32_t *queue = ts_malloc(n * sizeof(int32_t));
    int32_t *users = NULL;
    bool ok = slot && pending && start && queue;
    size_t nedges = 0;
    if (ok) {
        for (size_t i = 0; i < ni; i++)
            slot[i] = -1;
        for (size_t k = 0; k < n; k++)
            slot[df[k].instr] = (int32_t)k;
        /* edges o -> u for each deferred operand o of deferred u */
        for (size_t k = 0; k < n; k++) {
            IrInstr *u = &c->instr[df[k].instr];
            for (int32_t j = 0; j < u->nopnd; j++) {
                int32_t o = slot[u->opnd[j]];
                if (o >= 0) {
                    pending[k]++;
                    start[o + 1]++;
                    nedges++;
                }
            }
        }
        for (size_t k = 0; k < n; k++)
            start[k + 1] += start[k];
        users = ts_malloc((nedges > 0 ? nedges : 1) * sizeof(int32_t));
        ok = users != NULL;
    }
    if (!ok) {
        ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users);
        return lx_nomem(L);
    }
    int32_t *fill = ts_calloc(n > 0 ? n : 1, sizeof(int32_t));
    if (!fill) {
        ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users);
        return lx_nomem(L);
    }
    for (size_t k = 0; k < n; k++) {
        IrInstr *u = &c->instr[df[k].instr];
        for (int32_t j = 0; j < u->nopnd; j++) {
            int32_t o = slot[u->opnd[j]];
            if (o >= 0)
                users[start[o] + fill[o]++] = (int32_t)k;
        }
    }
    size_t head = 0, tail = 0, done = 0;
    for (size_t k = 0; k < n; k++)
        if (pending[k] == 0)
            queue[tail++] = (int32_t)k;
    while (ok && head < tail) {
        int32_t k = queue[head++];
        IrInstr *ins = &c->instr[df[k].instr];
        IrDiag tmp = {0};
        IrShape shape = {0};
        IrStatus st = infer_one(P->m, c, ins, &shape, &tmp);
        if (st == IR_ENOMEM) {
            ok = lx_nomem(L);
        } else if (st != IR_OK) {
            ok = lx_fail(L, ins->pos, "cannot infer the shape of '%s' (%s): %s; write it explicitly", ins->name,
                         ir_op_name(ins->op), tmp.msg ? tmp.msg : "unsupported");
        } else {
            ins->shape = shape;
            done++;
            if (ins->sharding && df[k].sharding_pos.line > 0) {
                st = ir_sharding_validate(ins->sharding, &ins->shape, P->num_devices, L->d, L->file, L->src,
                                          df[k].sharding_pos);
                if (st != IR_OK) {
                    L->st = st;
                    ok = false;
                }
            }
            for (int32_t e = start[k]; ok && e < start[k + 1]; e++)
                if (--pending[users[e]] == 0)
                    queue[tail++] = users[e];
        }
        ir_diag_clear(&tmp);
    }
    if (ok && done < n) {
        for (size_t k = 0; k < n; k++) {
            if (pending[k] > 0) {
                IrInstr *ins = &c->instr[df[k].instr];
                ok = lx_fail(L, ins->pos, "cannot infer the shape of '%s': its operands form a cycle", ins->name);
                break;
            }
        }
    }
    ts_free(slot), ts_free(pending), ts_free(start), ts_free(queue), ts_free(users), ts_free(fill);
    return ok;
}

/* Deferred entries come grouped by computation, in the order the
 * computations were read: a written computation, then the inline ones in
 * it, each read after the one that holds it. A call's shape is its
 * callee's root shape, so within one written computation's block the
 * groups go last to first: every inline computation before its holder. */
static bool infer_deferred(Parser *P)
{
    size_t i = 0;
    while (i < P->ndefer) {
        size_t j = i;
        while (j < P->ndefer && P->defer[j].top == P->defer[i].top)
            j++;
        for (size_t e = j; e > i;) {
            size_t s = e - 1;
            while (s > i && P->defer[s - 1].comp == P->defer[e - 1].comp)
                s--;
            if (!infer_group(P, P->defer + s, e - s))
                return false;
            e = s;
        }
        i = j;
    }
    return true;
}

/* ---- computations ---- */

/* Resolve operand and control-predecessor names of computation ci. */
static bool resolve_local(Parser *P, IrComputation *c)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->local.n; i++) {
        Ref *r = &P->local.v[i];
        int32_t idx = map_find(&P->instrs, L->text + r->name.start, r->name.len);
        if (idx < 0)
            return lx_fail(L, r->name.pos, "undefined %s '%.*s'",
                           r->kind == REF_OPERAND ? "operand" : "control predecessor", (int)r->name.len,
                           L->text + r->name.start);
        IrInstr *ins = &c->instr[r->instr];
        if (r->kind == REF_CONTROL) {
            ins->a.control_predecessors.v[r->slot] = idx;
            continue;
        }
        ins->opnd[r->slot] = idx;
        if (r->shape && c->instr[idx].shape.type != IR_INVALID &&
            !ir_shape_compatible(r->shape, &c->instr[idx].shape)) {
            char *want = ir_shape_str(r->shape, false), *have = ir_shape_str(&c->instr[idx].shape, false);
            lx_fail(L, r->name.pos, "operand '%.*s' is written as %s but is %s", (int)r->name.len,
                    L->text + r->name.start, want ? want : "?", have ? have : "?");
            ts_free(want);
            ts_free(have);
            return false;
        }
    }
    P->local.n = 0;
    return true;
}

/* signature ::= '(' (name ':'? shape (',' ...)*)? ')' '->' shape ; shapes
 * go to sig[0..n) (heap, caller frees) and *result. */
static bool parse_signature(Parser *P, IrShape **sig, int32_t *nsig, IrShape *result)
{
    Lexer *L = &P->L;
    int32_t cap = 0;
    lx_next(L);
    if (!lx_is(L, LX_RPAREN)) {
        do {
            Span pname = {0};
            if (!take_name(P, &pname, "parameter name"))
                return false;
            lx_eat(L, LX_COLON);
            if (*nsig == cap) {
                if (cap >= (1 << 24))
                    return lx_fail(L, pname.pos, "too many parameters");
                cap = cap ? cap * 2 : 8;
                IrShape *ns = ts_realloc(*sig, (size_t)cap * sizeof *ns);
                if (!ns)
                    return lx_nomem(L);
                *sig = ns;
            }
            if (!parse_shape(P, &(*sig)[(*nsig)++]))
                return false;
        } while (lx_eat(L, LX_COMMA));
    }
    return lx_expect(L, LX_RPAREN, "')' to end the parameter list") &&
           lx_expect(L, LX_ARROW, "'->' before the result shape") && parse_shape(P, result);
}

/* The written result shape must agree with the root (XLA checks only
 * this: parameter shapes in the signature are informative). */
static bool check_signatures(Parser *P)
{
    for (size_t i = 0; i < P->nsigs; i++) {
        SigCheck *sc = &P->sigs[i];
        IrComputation *c = P->m->comp[sc->comp];
        const IrShape *root = &c->instr[c->root].shape;
        if (!ir_shape_compatible(&sc->result, root)) {
            char *want = ir_shape_str(&sc->result, false), *have = ir_shape_str(root, false);
            lx_fail(&P->L, sc->pos, "computation '%s' is declared to return %s but its root '%s' is %s",
                    c->name, want ? want : "?", c->instr[c->root].name, have ? have : "?");
            ts_free(want);
            ts_free(have);
            return false;
        }
    }
    return true;
}

static bool push_sig(Parser *P, SigCheck sc)
{
    if (P->nsigs == P->capsigs) {
        size_t cap = P->capsigs ? P->capsigs * 2 : 8;
        SigCheck *nv = ts_realloc(P->sigs, cap * sizeof *nv);
        if (!nv)
            return lx_nomem(&P->L);
        P->sigs = nv;
        P->capsigs = cap;
    }
    P->sigs[P->nsigs++] = sc;
    return true;
}

/* Record every line that starts (after blanks) with '}', in one pass over
 * the text, so each computation can size its tables before it is read.
 * False on OOM. */
static bool find_closes(Parser *P)
{
    const char *t = P->L.text, *end = t + P->L.len;
    size_t n = 0, cap = 0;
    Close *v = NULL;
    int32_t line = 1;
    for (const char *p = t; p < end; line++) {
        const char *q = p;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < end && *q == '}') {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                Close *nv = ts_realloc(v, nc * sizeof *nv);
                if (!nv) {
                    ts_free(v);
                    return lx_nomem(&P->L);
                }
                v = nv;
                cap = nc;
            }
            v[n++] = (Close){(size_t)(q - t), line};
        }
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        if (!nl || line == INT32_MAX)
            break;
        p = nl + 1;
    }
    P->closes = v;
    P->ncloses = n;
    return true;
}

/* Lines from the current token to the next line starting with '}': the
 * instruction count of a computation laid out one instruction per line
 * (0 when unknown). Computations are read in order, so the search
 * resumes where the last one stopped. At most EST_MAX: a text of blank
 * lines must not reserve gigabytes (a larger computation grows past it). */
enum { EST_MAX = 1 << 18 };
static int32_t estimate_instrs(Parser *P)
{
    const Lexer *L = &P->L;
    while (P->nextclose < P->ncloses && P->closes[P->nextclose].off <= L->tok.start)
        P->nextclose++;
    if (P->nextclose == P->ncloses)
        return 0;
    int64_t k = (int64_t)P->closes[P->nextclose].line - L->tok.pos.line;
    return k <= 0 ? 0 : k < EST_MAX ? (int32_t)k : EST_MAX;
}

/* '{' instruction+ '}' of computation ci, written or inline (`top`: a
 * written computation, read in text order, whose size can be estimated).
 * Errors about the computation as a whole point at `pos`. */
static bool parse_body(Parser *P, int32_t ci, bool top, IrPos pos)
{
    Lexer *L = &P->L;
    IrComputation *c = P->m->comp[ci];
    char msg[64];
    snprintf(msg, sizeof msg, "'{' to start computation '%.20s'", c->name);
    bool ok = lx_expect(L, LX_LBRACE, msg);
    map_free(&P->instrs);
    P->local.n = 0;
    P->nparams = 0;
    P->nunnamed = 0;
    if (ok && top) {
        /* Size the instruction array and the name table once. */
        int32_t est = estimate_instrs(P);
        if (est > 0 && (ir_reserve_instrs(c, est) != IR_OK || !map_reserve(&P->instrs, (size_t)est)))
            ok = lx_nomem(L);
    }
    bool saw_root = false;
    int32_t last = -1; /* the last written instruction: the root without ROOT */
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (lx_is(L, LX_EOF)) {
            ok = lx_fail(L, L->tok.pos, "expected '}' to end computation '%s', found end of input", c->name);
            break;
        }
        last = c->ninstr;
        ok = parse_instruction(P, ci, &saw_root);
    }
    ok = ok && lx_expect(L, LX_RBRACE, "'}'");
    if (ok && c->ninstr == 0)
        ok = lx_fail(L, pos, "computation '%s' has no instructions", c->name);
    ok = ok && name_nested(P, c) && finish_params(P, c) && resolve_local(P, c);
    if (ok && c->root < 0)
        c->root = last;
    return ok;
}

/* Read the inline computations skipped while the last written computation
 * was read (and those inline in them: reading one may queue more), each
 * from its '{', then continue after that computation. Each is read after
 * the computation that holds it, which infer_deferred relies on. */
static bool parse_inline_bodies(Parser *P)
{
    Lexer *L = &P->L;
    if (P->nbodies == 0)
        return true;
    LxMark back = lx_mark(L);
    bool ok = true;
    /* In text order (a queue), as they were added and will be named. */
    for (size_t head = 0; ok && head < P->nbodies; head++) {
        InlineBody b = P->bodies[head];
        lx_reset(L, b.at);
        ok = parse_body(P, b.comp, false, b.at.tok.pos);
    }
    P->nbodies = 0;
    lx_reset(L, back);
    return ok;
}

/* computation ::= 'ENTRY'? name signature? '{' instruction+ '}' ( ',' execution_thread="..." )? */
static bool parse_computation(Parser *P)
{
    Lexer *L = &P->L;
    bool is_entry = lx_is_word(L, "ENTRY");
    IrPos entry_pos = L->tok.pos;
    if (is_entry)
        lx_next(L);
    Span name = {0};
    if (!take_name(P, &name, is_entry ? "computation name after ENTRY" : "computation name or ENTRY"))
        return false;
    if (map_find(&P->comps, L->text + name.start, name.len) >= 0)
        return lx_fail(L, name.pos, "duplicate computation name '%.*s'", (int)name.len, L->text + name.start);
    char *cname = span_dup(P, name);
    if (!cname)
        return false;
    int32_t ci = ir_add_computation(P->m, cname);
    if (ci < 0 || !map_put(&P->comps, P->m->comp[ci]->name, name.len, ci))
        return lx_nomem(L);
    IrComputation *c = P->m->comp[ci];
    c->pos = name.pos;
    P->top = ci;
    IrShape *sig = NULL, result = {0};
    int32_t nsig = 0;
    IrPos sig_pos = L->tok.pos;
    bool ok = true;
    if (lx_is(L, LX_LPAREN)) {
        c->has_signature = true;
        ok = parse_signature(P, &sig, &nsig, &result);
    }
    ok = ok && parse_body(P, ci, true, name.pos);
    if (ok && c->has_signature)
        ok = push_sig(P, (SigCheck){ci, sig_pos, result});
    ts_free(sig);
    if (ok && lx_is(L, LX_COMMA)) {
        lx_next(L);
        char *thread;
        if (!lx_is_attr(L) || !lx_is_word(L, "execution_thread"))
            return lx_expected(L, "execution_thread= after the computation");
        lx_next(L);
        lx_next(L);
        ok = lx_string(L, &thread, "string after execution_thread=");
        c->execution_thread = ok ? thread : NULL;
    }
    if (ok && is_entry) {
        if (P->m->entry >= 0)
            return lx_fail(L, entry_pos, "more than one ENTRY computation ('%s' and '%s')",
                           P->m->comp[P->m->entry]->name, c->name);
        P->m->entry = ci;
    }
    P->last_top = ci;
    return ok && parse_inline_bodies(P);
}

/* ---- the module header ---- */

/* input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {0}, must-alias) } */
static bool parse_aliases(Parser *P)
{
    Lexer *L = &P->L;
    IrAlias *v = NULL;
    int32_t n = 0, cap = 0;
    bool ok = lx_expect(L, LX_LBRACE, "'{' to start input_output_alias");
    while (ok && !lx_is(L, LX_RBRACE)) {
        if (n == cap) {
            if (n >= INT32_MAX / 4) {
                ok = lx_fail(L, L->tok.pos, "too many aliases");
                break;
            }
            cap = cap ? cap * 2 : 8;
            IrAlias *nv = ts_realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                ok = lx_nomem(L);
                break;
            }
            v = nv;
        }
        IrAlias *al = &v[n++];
        memset(al, 0, sizeof *al);
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
                ok = lx_expected(L, "may-alias or must-alias");
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

/* Module attributes that do not change meaning, kept raw for printing. */
static const char *const kept_header_attrs[] = {
    "buffer_donor", "alias_passthrough_params", "frontend_attributes",
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
                                        "entry_computation_layout", "input_output_alias", NULL};
    int k = -1;
    for (int i = 0; known[i]; i++)
        if (lx_is_word(L, known[i]))
            k = i;
    int kept = -1;
    for (int i = 0; k < 0 && kept_header_attrs[i]; i++)
        if (lx_is_word(L, kept_header_attrs[i]))
            kept = i;
    if (k < 0 && kept < 0)
        return lx_fail(L, pos, "unknown module attribute %s", lx_describe(L, buf, sizeof buf));
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
        return raw_braces(P, &m->entry_computation_layout, true, "'{' after entry_computation_layout=");
    case 4:
        return parse_aliases(P);
    default:
        break;
    }
    size_t s, e;
    IrKeyValue kv = {0};
    if (!lx_raw_value(L, &s, &e) || !(kv.key = lx_dup(L, name_start, name_end)) ||
        !(kv.value = lx_dup(L, s, e)) || !push_kv(P, kv))
        return false;
    (*nseen_kept)++;
    return true;
}

/* FileNames / FunctionNames / FileLocations / StackFrames tables that newer
 * XLA prints after the header: checked for their form (NAME, then `ID
 * "string"` or `ID {...}` rows) and kept raw for printing; they only feed
 * metadata, so nothing reads them. */
static bool skip_stack_frames(Parser *P)
{
    Lexer *L = &P->L;
    static const char *const sections[] = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"};
    size_t start = L->tok.start, end = L->tok.end;
    for (int i = 0; i < 4; i++) {
        if (!lx_is_word(L, sections[i]))
            return lx_expected(L, sections[i]);
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

static bool parse_header(Parser *P)
{
    Lexer *L = &P->L;
    lx_next(L);
    Span name = {0};
    if (!take_name(P, &name, "module name"))
        return false;
    char *n = span_dup(P, name);
    if (!n)
        return false;
    P->m->name = n;
    uint32_t seen = 0;
    int nkept = 0;
    P->kvs.n = 0;
    while (lx_eat(L, LX_COMMA))
        if (!parse_header_attr(P, &seen, &nkept))
            return false;
    if (!take_kvs(P, &P->m->header_attr, &P->m->nheader_attr))
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

/* Make the provisional names of the inline computations unique among all
 * computations, now that every written name is known: BASE if free, else
 * BASE.1, BASE.2, ... (inl_next remembers where each base stopped, so a
 * base used many times costs no more than it has uses). */
static bool name_inline(Parser *P)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->ninl; i++) {
        IrComputation *c = P->m->comp[P->inl[i]];
        const char *base = c->name;
        size_t blen = strlen(base);
        int32_t *next = map_ref(&P->inl_next, base, blen);
        int32_t k = next ? *next : 0;
        const char *name = base;
        while (map_find(&P->comps, name, strlen(name)) >= 0)
            if (!(name = ir_sprintf(P->m->arena, "%s.%d", base, (int)++k)))
                return lx_nomem(L);
        if (next)
            *next = k;
        else if (!map_put(&P->inl_next, base, blen, k))
            return lx_nomem(L);
        if (!map_put(&P->comps, name, strlen(name), P->inl[i]))
            return lx_nomem(L);
        c->name = name;
    }
    return true;
}

/* Resolve callee names against all computations, now that all are read. */
static bool resolve_callees(Parser *P)
{
    Lexer *L = &P->L;
    for (size_t i = 0; i < P->callees.n; i++) {
        Ref *r = &P->callees.v[i];
        int32_t ci = map_find(&P->comps, L->text + r->name.start, r->name.len);
        if (ci < 0)
            return lx_fail(L, r->name.pos, "undefined computation '%.*s'", (int)r->name.len,
                           L->text + r->name.start);
        P->m->comp[r->comp]->instr[r->instr].called[r->slot] = ci;
    }
    return true;
}

/* ---- sugared async ops ---- */

/* A fresh computation name "BASE.wrapped", "BASE.wrapped.1", ... */
static char *wrapper_name(Parser *P, const char *base)
{
    for (int k = 0;; k++) {
        char *n = k ? ir_sprintf(P->m->arena, "%s.wrapped.%d", base, k) : ir_sprintf(P->m->arena, "%s.wrapped", base);
        if (!n || map_find(&P->comps, n, strlen(n)) < 0)
            return n;
    }
}

/* The attributes an async op keeps for itself when its op-specific ones
 * move to the wrapped instruction. */
static IrAttrs async_own_attrs(const IrAttrs *a)
{
    IrAttrs g = {0};
    g.feature_group_count = g.batch_group_count = 1;
    g.frontend = a->frontend;
    g.nfrontend = a->nfrontend;
    g.metadata = a->metadata;
    g.backend_config = a->backend_config;
    g.statistics_viz = a->statistics_viz;
    g.origin = a->origin;
    g.control_predecessors = a->control_predecessors;
    g.async_sugar = a->async_sugar;
    g.async_wrapped_op = a->async_wrapped_op;
    g.async_execution_thread = a->async_execution_thread;
    return g;
}

/* Build, as XLA's parser does, the computation a sugared `OP-start` calls:
 * parameters of the operand shapes (element 0 of the start's shape) and a
 * root OP of the result shape (element 1), carrying the op's attributes and
 * callees. The start keeps its generic attributes and calls the wrapper. */
static bool wrap_async_op(Parser *P, int32_t ci, int32_t ii)
{
    IrModule *m = P->m;
    IrInstr *st = &m->comp[ci]->instr[ii];
    const IrShape *sh = &st->shape;
    char opbuf[64];
    if (sh->type != IR_TUPLE || sh->ntuple < 2 || sh->tuple[0].type != IR_TUPLE ||
        sh->tuple[0].ntuple != st->nopnd)
        return lx_fail(&P->L, st->pos, "%s: shape must be ((operand shapes...), result, context...) with %d "
                       "operand shape%s", op_text(st, opbuf, sizeof opbuf), (int)st->nopnd, st->nopnd == 1 ? "" : "s");
    char *name = wrapper_name(P, st->name);
    if (!name)
        return lx_nomem(&P->L);
    int32_t wi = ir_add_computation(m, name);
    if (wi < 0 || !map_put(&P->comps, m->comp[wi]->name, strlen(name), wi))
        return lx_nomem(&P->L);
    IrComputation *w = m->comp[wi];
    st = &m->comp[ci]->instr[ii];
    w->async_wrapper = true;
    w->pos = st->pos;
    int32_t *opnd = ir_alloc_array(m->arena, (size_t)(st->nopnd > 0 ? st->nopnd : 1), sizeof(int32_t));
    int32_t *called = ir_alloc(m->arena, sizeof(int32_t));
    if (!opnd || !called || ir_reserve_instrs(w, st->nopnd + 1) != IR_OK)
        return lx_nomem(&P->L);
    for (int32_t k = 0; k < st->nopnd; k++) {
        IrInstr p = {.op = OP_PARAMETER, .shape = sh->tuple[0].tuple[k], .pos = st->pos};
        p.a.feature_group_count = p.a.batch_group_count = 1;
        p.a.parameter_number = k;
        p.name = ir_sprintf(m->arena, "%s.param.%d", st->name, (int)k);
        if (!p.name || (opnd[k] = ir_add_instr(m, w, &p)) < 0)
            return lx_nomem(&P->L);
    }
    IrInstr op = *st;
    op.op = st->a.async_wrapped_op;
    op.shape = sh->tuple[1];
    op.opnd = opnd;
    op.sharding = NULL;
    op.a.nfrontend = 0;
    op.a.frontend = NULL;
    op.a.metadata = op.a.backend_config = op.a.statistics_viz = op.a.origin = NULL;
    op.a.control_predecessors = (IrI64List){0};
    op.a.async_sugar = false;
    op.a.async_execution_thread = NULL;
    if (!(op.name = ir_sprintf(m->arena, "%s.wrapped_op", st->name)) || (w->root = ir_add_instr(m, w, &op)) < 0)
        return lx_nomem(&P->L);
    st = &m->comp[ci]->instr[ii];
    st->a = async_own_attrs(&st->a);
    called[0] = wi;
    st->called = called;
    st->ncalled = 1;
    st->custom_to_apply = false;
    st->cond_pred_form = false;
    return true;
}

/* Every sugared async-start of the module, once callee names are resolved
 * (the wrapped op takes its callees over) and the entry is known (the
 * wrappers come after every written computation). */
static bool wrap_async_ops(Parser *P)
{
    int32_t n = P->m->ncomp;
    for (int32_t ci = 0; ci < n && P->nasync_sugar > 0; ci++) {
        int32_t ni = P->m->comp[ci]->ninstr;
        for (int32_t i = 0; i < ni; i++) {
            const IrInstr *ins = &P->m->comp[ci]->instr[i];
            if (ins->op == OP_ASYNC_START && ins->a.async_sugar && !wrap_async_op(P, ci, i))
                return false;
        }
    }
    return true;
}

static bool parse_module(Parser *P)
{
    Lexer *L = &P->L;
    bool header = lx_is_word(L, "HloModule");
    if (header && !parse_header(P))
        return false;
    if (lx_is_word(L, "FileNames") && !skip_stack_frames(P))
        return false;
    if (lx_is(L, LX_EOF))
        return lx_expected(L, header ? "a computation after the module header" : "HloModule or a computation");
    while (!lx_is(L, LX_EOF))
        if (!parse_computation(P))
            return false;
    IrModule *m = P->m;
    /* The last written computation, not an inline one read after it. */
    if (m->entry < 0)
        m->entry = P->last_top;
    m->comp[m->entry]->is_entry = true;
    if (!header) {
        /* XLA names a headerless module after its entry computation. */
        char *n = ir_sprintf(m->arena, "module_%s", m->comp[m->entry]->name);
        if (!n)
            return lx_nomem(L);
        m->name = n;
    }
    return name_inline(P) && resolve_callees(P) && wrap_async_ops(P) && infer_deferred(P) && check_signatures(P);
}

/* ---- entry points ---- */

IrStatus ir_parse(const char *file, const char *text, size_t len, const IrParseOptions *opt,
                  IrModule **out, IrDiag *d)
{
    if (!out)
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse: out is NULL");
    *out = NULL;
    if (!text && len > 0)
        return ir_error(d, IR_EINTERNAL, file, NULL, (IrPos){0, 0}, "ir_parse: text is NULL");
    if (len > MAX_INPUT)
        return ir_error(d, IR_EINPUT, file, NULL, (IrPos){0, 0}, "input too large (%zu bytes; the limit is %zu)",
                        len, MAX_INPUT);
    Parser *P = ts_calloc(1, sizeof *P);
    if (!P)
        return ir_error(d, IR_ENOMEM, file, NULL, (IrPos){0, 0}, "out of memory");
    P->opt = opt ? *opt : ir_default_parse_options();
    P->top = P->last_top = -1;
    IrModule *m = P->m = ir_module_new("module");
    char *src = m ? ir_alloc(m->arena, len + 1) : NULL;
    if (!m || !src || (file && !(m->file = ir_strdup(m->arena, file)))) {
        ir_module_free(m);
        ts_free(P);
        return ir_error(d, IR_ENOMEM, file, NULL, (IrPos){0, 0}, "out of memory");
    }
    /* Parse a private NUL-terminated copy: the caller's text need not be
     * terminated, and diagnostics quote lines from it. */
    if (len > 0)
        memcpy(src, text, len);
    src[len] = 0;
    m->src = src;
    lx_init(&P->L, m->file, src, len, src, m->arena, d, &P->opt.limits);
    bool ok = find_closes(P) && parse_module(P);
    IrStatus st = ok ? IR_OK : (P->L.st != IR_OK ? P->L.st : IR_EINTERNAL);
    bool verify = P->opt.verify;
    IrLimits lim = P->opt.limits;
    map_free(&P->comps);
    map_free(&P->instrs);
    ts_free(P->local.v);
    ts_free(P->callees.v);
    ts_free(P->spans.v);
    ts_free(P->kvs.v);
    ts_free(P->defer);
    ts_free(P->sigs);
    ts_free(P->params);
    ts_free(P->ictx);
    ts_free(P->opv);
    ts_free(P->closes);
    ts_free(P->bodies);
    ts_free(P->inl);
    map_free(&P->inl_next);
    ts_free(P->nested);
    ts_free(P->unnamed);
    ts_free(P->opnext);
    ts_free(P);
    if (st == IR_OK && verify)
        st = ir_verify(m, &lim, d);
    if (st != IR_OK) {
        ir_module_free(m);
        return st;
    }
    *out = m;
    return IR_OK;
}

IrStatus ir_parse_file(const char *path, const IrParseOptions *opt, IrModule **out, IrDiag *d)
{
    if (!out)
        return ir_error(d, IR_EINTERNAL, path, NULL, (IrPos){0, 0}, "ir_parse_file: out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > MAX_INPUT) {
        fclose(f);
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "file too large (%lld bytes; the limit is %zu)",
                        (long long)sb.st_size, MAX_INPUT);
    }
    /* Read in chunks (also pipes), never past the limit. */
    size_t cap = S_ISREG(sb.st_mode) && sb.st_size > 0 ? (size_t)sb.st_size + 1 : 65536, n = 0;
    char *buf = ts_malloc(cap);
    if (!buf) {
        fclose(f);
        return ir_error(d, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory");
    }
    for (;;) {
        if (n == cap) {
            if (cap > MAX_INPUT) {
                ts_free(buf);
                fclose(f);
                return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "file too large (the limit is %zu bytes)",
                                MAX_INPUT);
            }
            char *nb = ts_realloc(buf, cap * 2);
            if (!nb) {
                ts_free(buf);
                fclose(f);
                return ir_error(d, IR_ENOMEM, path, NULL, (IrPos){0, 0}, "out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0)
            break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        ts_free(buf);
        return ir_error(d, IR_ERUNTIME, path, NULL, (IrPos){0, 0}, "read error");
    }
    IrStatus st = ir_parse(path, buf, n, opt, out, d);
    ts_free(buf);
    return st;
}
