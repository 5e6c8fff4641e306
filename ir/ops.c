/*
 * ops.c: the opcode tables, all generated from hlo_ops.def and its
 * semantics beside it (hlo_op_sem.def), the attribute tables, generated
 * from hlo_attrs.def, and the custom-call targets that are annotations
 * (identities on a whole value).
 */
#include "ir.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

static const struct {
    const char *name;
    size_t len;            /* strlen(name), so lookups compare lengths first */
    int arity;
    IrOpKind kind;
    IrOpFamily family;
} op_info[OP_COUNT] = {
#define OP(e, name, arity, kind, fam) [OP_##e] = {name, sizeof(name) - 1, arity, kind, fam},
#include "hlo_ops.def"
#undef OP
};

bool ir_annotation_target(const char *target)
{
    static const char *const names[] = {
        "Sharding", "annotate_device_placement", "MoveToHost", "MoveToDevice", "PinToDevice",
        "PinToDeviceSram", "Pin", "Unpin", "ShardBarrierFrom", "ShardBarrierTo", "SetBound",
        "xla.sdy.FuncResultSharding", "xla.sdy.PropagationBarrier",
    };
    for (size_t i = 0; target && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], target) == 0)
            return true;
    return false;
}

bool ir_python_callback(const char *target)
{
    static const char *const names[] = {
        "xla_ffi_python_cpu_callback", "xla_python_cpu_callback", "xla_ffi_partitioned_python_cpu_callback",
    };
    for (size_t i = 0; target && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], target) == 0)
            return true;
    return false;
}

/* Nothing but tokens: the empty tuple, token[], or tuples of them. */
static bool only_tokens(const IrShape *s)
{
    if (s->type == IR_TOKEN)
        return true;
    if (s->type != IR_TUPLE)
        return false;
    for (int32_t i = 0; i < s->ntuple; i++)
        if (!only_tokens(&s->tuple[i]))
            return false;
    return true;
}

bool ir_resultless_callback(const IrInstr *ins)
{
    return ins->op == OP_CUSTOM_CALL && ir_python_callback(ins->a.x->custom_call_target) &&
           only_tokens(&ins->shape);
}

const char *ir_op_name(IrOpcode op)
{
    return op < OP_COUNT ? op_info[op].name : "invalid";
}

int ir_op_arity(IrOpcode op)
{
    return op_info[op].arity;
}

IrOpKind ir_op_kind(IrOpcode op)
{
    return op_info[op].kind;
}

IrOpFamily ir_op_family(IrOpcode op)
{
    return op_info[op].family;
}

bool ir_op_is_elementwise(IrOpcode op)
{
    return op_info[op].kind != IR_K_OTHER;
}

/* ---- semantics, generated from hlo_op_sem.def ---- */

static const struct {
    int8_t min_arity, ncalled;
    bool host, vector;
    IrIdentity identity;
    IrMpiOp mpi;
} op_sem[OP_COUNT] = {
#define SEM(e, min, ncalled, host, id, mpi, vec) [OP_##e] = {min, ncalled, host, vec, id, mpi},
#include "hlo_op_sem.def"
#undef SEM
};

int ir_op_min_arity(IrOpcode op)
{
    assert(op < OP_COUNT);
    return op_info[op].arity >= 0 ? op_info[op].arity : op_sem[op].min_arity;
}

int ir_op_ncalled(IrOpcode op)
{
    assert(op < OP_COUNT);
    return op_sem[op].ncalled;
}

bool ir_op_talks_to_host(IrOpcode op)
{
    return op < OP_COUNT && op_sem[op].host;
}

IrIdentity ir_op_identity(IrOpcode op)
{
    return op < OP_COUNT ? op_sem[op].identity : IR_ID_NONE;
}

bool ir_op_is_reducer(IrOpcode op)
{
    return ir_op_identity(op) != IR_ID_NONE;
}

IrMpiOp ir_op_mpi(IrOpcode op)
{
    return op < OP_COUNT ? op_sem[op].mpi : IR_MPI_NONE;
}

bool ir_op_vector(IrOpcode op)
{
    return op < OP_COUNT && op_sem[op].vector;
}

/* A linear scan of the names, behind a small direct-mapped cache of the
 * last opcode found at each slot (ir_name_slot): a parsed module names a
 * few dozen distinct opcodes thousands of times each, so almost every
 * lookup is one memcmp. A cached entry is only a guess, checked like any
 * entry, so a racing store from another thread is harmless (relaxed
 * atomics: no torn values). */
static _Atomic int16_t op_cache[IR_NAME_SLOTS];

static bool op_is(int op, const char *s, size_t n)
{
    return op_info[op].len == n && op_info[op].name[0] == s[0] && memcmp(op_info[op].name, s, n) == 0;
}

IrOpcode ir_op_from_name(const char *s, size_t n)
{
    if (n == 0)
        return OP_COUNT;
    uint32_t slot = ir_name_slot(s, n);
    int guess = atomic_load_explicit(&op_cache[slot], memory_order_relaxed) - 1;
    if (guess >= 0 && op_is(guess, s, n))
        return (IrOpcode)guess;
    for (int op = 0; op < OP_COUNT; op++)
        if (op_is(op, s, n)) {
            atomic_store_explicit(&op_cache[slot], (int16_t)(op + 1), memory_order_relaxed);
            return (IrOpcode)op;
        }
    return OP_COUNT;
}

/* ---- attributes, generated from hlo_attrs.def ---- */

/* The member each generic form reads and prints has the C type the form
 * expects: checked here, once, so the offsets below are safe to cast. */
#define FIELD_TYPE_INT(f) int64_t
#define FIELD_TYPE_COUNT(f) int64_t
#define FIELD_TYPE_INTS(f) IrI64List
#define FIELD_TYPE_BOOL(f) bool
#define FIELD_TYPE_STR(f) const char *
#define FIELD_TYPE_WORD(f) const char *
#define FIELD_TYPE_RAW(f) const char *
#define FIELD_TYPE_INNER(f) const char *
/* Both parts of the attributes side by side, so that a member's offset is
 * taken by its name alone: those past the first cold member are IrAttrsX's
 * (the same member lists as the two structs, so the same layout). */
typedef struct IrAttrsFlat {
    struct {
        IR_ATTRS_HOT_MEMBERS
    };
    struct {
        IR_ATTRS_COLD_MEMBERS
    };
} IrAttrsFlat;
#define COLD_BASE offsetof(IrAttrsFlat, slice_start)
_Static_assert(offsetof(IrAttrsFlat, slice_start) > offsetof(IrAttrsFlat, literal_elided),
               "slice_start is the first cold member");
_Static_assert(offsetof(IrAttrsFlat, is_stable) - COLD_BASE == offsetof(IrAttrsX, is_stable) &&
                   offsetof(IrAttrsFlat, window) - COLD_BASE == offsetof(IrAttrsX, window) &&
                   offsetof(IrAttrsFlat, has_dimensions) == offsetof(IrAttrs, has_dimensions),
               "IrAttrsFlat lays the members out as IrAttrs and IrAttrsX do");
#define CHECK_FIELD(form, f)                                                                       \
    _Static_assert(_Generic(((IrAttrsFlat *)0)->f, FIELD_TYPE_##form(f): 1, default: 0),           \
                   "IrAttrs." #f " does not have the type of form " #form);
#define CHECK_INT(f) CHECK_FIELD(INT, f)
#define CHECK_COUNT(f) CHECK_FIELD(COUNT, f)
#define CHECK_INTS(f) CHECK_FIELD(INTS, f)
#define CHECK_BOOL(f) CHECK_FIELD(BOOL, f)
#define CHECK_STR(f) CHECK_FIELD(STR, f)
#define CHECK_WORD(f) CHECK_FIELD(WORD, f)
#define CHECK_RAW(f) CHECK_FIELD(RAW, f)
#define CHECK_INNER(f) CHECK_FIELD(INNER, f)
#define CHECK_KEEP(f)
#define CHECK_CALLEE(f)
#define CHECK_CALLEES(f)
#define CHECK_SPECIAL(f)
#define ATTR(id, name, form, field, extra) CHECK_##form(field)
#include "hlo_attrs.def"

#define WORDLIST(list, expected, ...)                                                              \
    static const char *const words_##list##_w[] = {__VA_ARGS__, NULL};                           \
    static const IrAttrWords words_##list = {expected, words_##list##_w};
#include "hlo_attrs.def"

#define FLAT(f) offsetof(IrAttrsFlat, f)
#define PART_OFF(off) ((off) >= COLD_BASE ? (off) - COLD_BASE : (off))
#define OFF_INT(f) FLAT(f)
#define OFF_COUNT(f) FLAT(f)
#define OFF_INTS(f) FLAT(f)
#define OFF_BOOL(f) FLAT(f)
#define OFF_STR(f) FLAT(f)
#define OFF_WORD(f) FLAT(f)
#define OFF_RAW(f) FLAT(f)
#define OFF_INNER(f) FLAT(f)
#define OFF_KEEP(f) 0
#define OFF_CALLEE(f) 0
#define OFF_CALLEES(f) 0
#define OFF_SPECIAL(f) 0
#define HAS(f) .has_flag = true, .has = PART_OFF(FLAT(f)), .has_cold = FLAT(f) >= COLD_BASE
#define WORDS(list) .words = &words_##list
static const IrAttrInfo attr_info[A_COUNT] = {
#define ATTR(id, nm, fm, f, extra)                                                                 \
    [A_##id] = {.name = nm, .form = IR_AF_##fm, .field = PART_OFF(OFF_##fm(f)),                    \
                .cold = OFF_##fm(f) >= COLD_BASE && IR_AF_##fm <= IR_AF_INNER, extra},
#include "hlo_attrs.def"
};
#undef HAS
#undef WORDS

static const struct {
    const char *name;
    IrAttrId id;
} attr_aliases[] = {
#define ATTR_ALIAS(nm, id) {nm, A_##id},
#include "hlo_attrs.def"
};

#define P(id) {A_##id, IR_AM_ALWAYS}
#define S(id) {A_##id, IR_AM_SET}
#define N(id) {A_##id, IR_AM_NONEMPTY}
#define R(id) {A_##id, IR_AM_READ}
#define GENERIC_ATTRS(...) static const IrAttrUse generic_uses[] = {__VA_ARGS__, {A_COUNT, IR_AM_READ}};
#define OPATTRS(op, ...) static const IrAttrUse uses_##op[] = {__VA_ARGS__, {A_COUNT, IR_AM_READ}};
#include "hlo_attrs.def"
#undef P
#undef S
#undef N
#undef R

static const IrAttrUse no_uses[] = {{A_COUNT, IR_AM_READ}};

static const IrAttrUse *const op_uses[OP_COUNT] = {
#define OPATTRS(op, ...) [OP_##op] = uses_##op,
#include "hlo_attrs.def"
};

const IrAttrInfo *ir_attr_info(IrAttrId id)
{
    return &attr_info[id];
}

/* A linear scan behind a cache like ir_op_from_name's: it runs for every
 * attribute of every parsed instruction. */
static _Atomic int16_t attr_cache[IR_NAME_SLOTS];

static bool attr_is(const char *name, const char *s, size_t n)
{
    return name[0] == s[0] && strncmp(name, s, n) == 0 && name[n] == 0;
}

IrAttrId ir_attr_from_name(const char *s, size_t n)
{
    if (n == 0)
        return A_COUNT;
    uint32_t slot = ir_name_slot(s, n);
    int guess = atomic_load_explicit(&attr_cache[slot], memory_order_relaxed) - 1;
    if (guess >= 0 && attr_is(attr_info[guess].name, s, n))
        return (IrAttrId)guess;
    for (int id = 0; id < A_COUNT; id++) {
        if (attr_is(attr_info[id].name, s, n)) {
            atomic_store_explicit(&attr_cache[slot], (int16_t)(id + 1), memory_order_relaxed);
            return (IrAttrId)id;
        }
    }
    for (size_t i = 0; i < sizeof attr_aliases / sizeof *attr_aliases; i++)
        if (strncmp(attr_aliases[i].name, s, n) == 0 && attr_aliases[i].name[n] == 0)
            return attr_aliases[i].id;
    return A_COUNT;
}

const IrAttrUse *ir_op_attrs(IrOpcode op)
{
    return op < OP_COUNT && op_uses[op] ? op_uses[op] : no_uses;
}

const IrAttrUse *ir_attr_generic(void)
{
    return generic_uses;
}

static bool uses_attr(const IrAttrUse *u, IrAttrId id)
{
    for (; u->id != A_COUNT; u++)
        if (u->id == id)
            return true;
    return false;
}

bool ir_attr_applies(IrAttrId id, IrOpcode op)
{
    return uses_attr(generic_uses, id) || uses_attr(ir_op_attrs(op), id);
}

/* ---- reducer identities ---- */

/* ---- reducer identities: the IDENTITY column in each domain ---- */

double ir_identity_float(IrOpcode op)
{
    switch (ir_op_identity(op)) {
    case IR_ID_ONE: return 1;
    case IR_ID_LOWEST: return -INFINITY;
    case IR_ID_HIGHEST: return INFINITY;
    default: return 0;
    }
}

int64_t ir_identity_signed(IrOpcode op, int bits)
{
    assert(bits >= 1 && bits <= 64);
    switch (ir_op_identity(op)) {
    case IR_ID_ONE: return 1;
    case IR_ID_LOWEST: return bits >= 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
    case IR_ID_HIGHEST: return bits >= 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    case IR_ID_ALL_ONES: return -1;
    default: return 0;
    }
}

uint64_t ir_identity_unsigned(IrOpcode op, int bits)
{
    assert(bits >= 1 && bits <= 64);
    switch (ir_op_identity(op)) {
    case IR_ID_ONE: return 1;
    case IR_ID_HIGHEST: case IR_ID_ALL_ONES: return bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
    default: return 0; /* zero, and the lowest unsigned */
    }
}
