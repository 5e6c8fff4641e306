/*
 * ir.h: tessel's HLO intermediate representation, layer `ir/`.
 *
 * An HloModule as XLA has it: computations of instructions, each instruction
 * with an opcode, a shape, operands, attributes and an optional sharding.
 * Everything a module owns lives in one arena and is freed by ir_module_free.
 * Values are referred to by index, not by pointer (QBE's Ref): an operand is
 * the index of an instruction in its computation's `instr` array, a called
 * computation is an index in the module's `comp` array. Cloning, outlining and
 * renumbering are array copies.
 *
 * Files of this layer (the header reads as a table of contents):
 *   arena.c     bump allocator, string interning helpers
 *   strbuf.c    the growable heap string (printers, dumps)
 *   nearest.c   "did you mean": edit distance, the nearest of a list of names
 *   grow.c      growable heap arrays; membership in lists; name slots
 *   heap.c      a binary min-heap of int64 keys (the topological walks' ready sets)
 *   diag.c      error records with FILE:LINE:COL, the source line and a caret
 *   types.c     primitive types: names, sizes, classes
 *   lowp.c      exact codecs of the f8 and f4 kinds (one byte a value)
 *   shape.c     shapes: element counts with overflow checks, equality, text
 *   module.c    building modules: computations, instructions, lookup
 *   reducer_select.c  reducers that compare and pick (argmax, argmin) as a
 *               table from the operands' relations to the parameter picked
 *   ops.c       opcode and attribute tables generated from hlo_ops.def, the
 *               op semantics beside it (hlo_op_sem.def: minimum arity,
 *               called computations, host, reducer identity, MPI operation,
 *               vector path) and hlo_attrs.def (which ops take which
 *               attribute, in print order); the annotation custom-call
 *               targets
 *   lex.c       the HLO text lexer (its interface, private to ir/: lex.h)
 *   parse.c     the HLO text parser: modules, computations, instructions,
 *               operands, the entry points; its parts (parse_internal.h):
 *   parse_shape.c   shapes, layouts, signatures; shapes the text omits
 *   parse_attrs.c   attribute names, which ops take which, their values
 *   parse_values.c  attribute value syntax (windows, replica groups, ...)
 *   parse_mesh_groups.c  replica groups in XLA's mesh-axes form (mesh[...] {...})
 *   stack_frames.c  an instruction's source (FILE:LINE) from the stack frame tables
 *   parse_inline.c  inline computations, nested operand instructions
 *   parse_async.c   the sugared OP-start forms and their wrappers
 *   parse_header.c  the module header (HloModule name, attributes)
 *   parse_split.c   a large computation read by two threads (pthreads)
 *   literal.c   parsing and printing of constant literals
 *   sharding.c  XLA shardings: parse, print, validate, query
 *   sdy.c       Shardy's sharding text (#sdy.mesh, #sdy.sharding, ...) and
 *               XLA's named (V3) sharding text, read into IrSharding
 *   sdy_import.c  a parsed module's Shardy attributes made its shardings
 *               (xla.sdy.sharding, FuncResultSharding, ShardingGroup, shard_map)
 *   lapack_calls.c  JAX's LAPACK custom-calls: potrf, trsm made cholesky
 *               and triangular-solve, geqrf/orgqr XLA's Qr; getrf, syevd,
 *               gesdd checked
 *   print.c     the HLO text printer (XLA's syntax; round trips)
 *   infer.c     shape inference: helpers, operand counts, the dispatcher
 *   infer_elementwise.c  rules of unary, binary, select, clamp, converts
 *   infer_data.c         rules of broadcast, reshape, slices, pad, gather...
 *   infer_reduce.c       rules of reduce, reduce-window, sort, map, scan...
 *   infer_contract.c     rules of dot, convolution, fft, linalg, top-k...
 *   infer_collective.c   rules of collectives, their -start, send/recv
 *   infer_control.c      rules of values, tuples, control flow, async...
 *   infer_internal.h     what the infer*.c files share (private)
 *   verify.c    the verifier (operands, attributes, callees, cycles, limits)
 *   topo.c      topological order of a computation
 *   exec_order.c  the executor's order of a computation (device/exec.c runs it)
 *   schedule_overlap.c  that order with each asynchronous -start issued early
 *               and its -done late, as a run with collectives takes it
 *   fusion_find.c the groups the executor runs fused (elementwise chains, row
 *               groups, multi-output groups, dot-transpose pairs): device/
 *               runs them, the memory estimate counts only what they make
 *   causal.c    is a dot's result read only below a causal mask's diagonal
 *               (its tiles above are not computed)
 *   sort_keys.c which instructions of a sort's comparator are per-element
 *               keys: device/k_sort.c's native path runs on them, the memory
 *               estimate counts them
 *   allreduce_add.c  the all-reduces that take in the add reading their
 *               result (device/exec.c runs each pair as one collective)
 *   prefault.c  a thread that faults in fresh memory ahead of its writer
 *
 * Depends on libc and POSIX: pthreads (parse_split.c, prefault.c, and the
 * once-only tables of sharding.c and verify.c), madvise (arena.c,
 * prefault.c).
 */
#ifndef TESSEL_IR_H
#define TESSEL_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* arena.c                                                             */
/* ------------------------------------------------------------------ */

/* A bump allocator: blocks of memory freed all at once by ir_arena_free.
 * Allocation through ir_alloc never returns NULL: it returns NULL only when
 * the system (or the failure-injection hook) refuses memory, and every caller
 * propagates that as IR_ENOMEM. Memory is zeroed. */
typedef struct IrArena IrArena;

IrArena *ir_arena_new(void);
void ir_arena_free(IrArena *a);
void *ir_alloc(IrArena *a, size_t size);                   /* zeroed, 16-aligned */
void *ir_alloc_array(IrArena *a, size_t n, size_t elem);   /* overflow-checked */
char *ir_strdup(IrArena *a, const char *s);
char *ir_strndup(IrArena *a, const char *s, size_t n);
char *ir_sprintf(IrArena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
size_t ir_arena_bytes(const IrArena *a);                   /* bytes reserved */
/* Forget everything allocated from a (pointers into it become invalid) but
 * keep its newest block for reuse: for scratch arenas. Cannot fail. */
void ir_arena_reset(IrArena *a);
/* Ask for transparent huge pages for a large heap block [p, p+n) that is
 * written front to back and lives long (arena blocks, instruction arrays):
 * one page fault per 2 MiB instead of per 4 KiB. A hint: does nothing for
 * blocks under 2 MiB or where the kernel has no huge pages; cannot fail. */
void ir_hint_huge(void *p, size_t n);
/* A heap block of n bytes for a large array that is written once and lives
 * long: from 2 MiB up it starts at a 2 MiB boundary and is advised for
 * huge pages (every page of it can be huge); any block starts on a 64-byte
 * line. Free it with ir_big_free, not ts_free. NULL on OOM (failure
 * injection counts it as one allocation). */
void *ir_big_alloc(size_t n);
void ir_big_free(void *p);   /* NULL is fine */
/* Under AddressSanitizer, mark [p, p+n) unaddressable (memory an
 * allocator keeps but nobody may use: a use is reported) or addressable
 * again; nothing in other builds. */
void ir_poison(const void *p, size_t n);
void ir_unpoison(const void *p, size_t n);

/* A thread that populates fresh memory ahead of the one that will write it
 * (ir/prefault.c): for a builder that knows how much it is about to write
 * (the parser, which counts a computation's lines first). A hint: start
 * gives NULL where it cannot (no threads, an older kernel), and every call
 * takes NULL; populating changes no byte, so a range may be written, freed
 * or reused before the thread reaches it. Stop waits for the thread (one
 * 2 MiB step at most) and frees it. */
typedef struct IrPrefault IrPrefault;
IrPrefault *ir_prefault_start(void);
void ir_prefault(IrPrefault *f, void *p, size_t n);
void ir_prefault_stop(IrPrefault *f);
/* While f is set (NULL clears it), every new arena block of 2 MiB and more
 * of a is handed to f as it is made. */
void ir_arena_set_prefault(IrArena *a, IrPrefault *f);
/* Move every block of `from` into `to` (what was allocated from `from`
 * lives as long as `to` now); `from` is left empty and still usable. */
void ir_arena_adopt(IrArena *to, IrArena *from);

/* The allocation policy. Every heap allocation of the project goes
 * through ts_malloc (so a test can make the Nth one fail), in one of four
 * kinds, each freed only by its own call:
 *   ts_malloc, ts_calloc, ts_realloc,
 *   ts_malloc_aligned, ts_strdup      -> ts_free      small or short-lived memory
 *   ir_arena_* (arena.c)              -> ir_arena_free, all at once: the IR
 *   ir_big_alloc (arena.c)            -> ir_big_free  large arrays that live long
 *   dev_alloc (device/alloc.c)        -> dev_alloc_free  a device's tensors, on
 *                                        its NUMA node (large freed ones kept
 *                                        for the device's reuse)
 * ir_big_free and dev_alloc_free check a magic word in front of the block
 * and trap on a pointer of another kind (or a double free). Huge pages are
 * decided in one place, ir_hint_huge (blocks of 2 MiB and more); the
 * others call it. ts_malloc(0) returns a unique non-NULL pointer. */
void *ts_malloc(size_t n);
void *ts_calloc(size_t n, size_t elem);
void *ts_realloc(void *p, size_t n);
void ts_free(void *p);
/* n bytes at a multiple of `align` (a power of two, at least
 * sizeof(void *)), freed with ts_free; NULL on OOM. */
void *ts_malloc_aligned(size_t align, size_t n);
char *ts_strdup(const char *s);
/* Fail the Nth allocation from now on (1 = the next one); 0 disables. */
void ts_fail_alloc_after(long n);
long ts_alloc_count(void);

/* ------------------------------------------------------------------ */
/* nearest.c                                                           */
/* ------------------------------------------------------------------ */

/* The edit distance of a[0..n) and b[0..m): inserts, deletes, substitutions
 * and swaps of neighbouring bytes, each one edit (optimal string alignment;
 * bytes; 255 when either is longer than 254). */
int ir_edit_distance(const char *a, size_t n, const char *b, size_t m);
/* "Did you mean": of the names name(ctx, 0..count) (NULL ones skipped),
 * the one nearest to key[0..n) when it is a slip away (at most a third of
 * the key's characters, at least 1, and not the key itself; a non-ASCII
 * character of the key counts as one; the name in other case is nearest
 * of all); else NULL. Of equally near names the one starting as the key
 * does wins, then the one as long as the key, then of names of one length
 * the one ending as the key does, then the first. */
const char *ir_nearest(const char *key, size_t n, int32_t count, const char *(*name)(void *ctx, int32_t i),
                       void *ctx);

/* ------------------------------------------------------------------ */
/* strbuf.c                                                            */
/* ------------------------------------------------------------------ */

/* A growable heap string; start from (IrStrBuf){0}. s is NUL-terminated
 * once anything was appended. The first refused allocation sets oom, and
 * every later append does nothing, so a printer checks once at the end. */
typedef struct IrStrBuf {
    char *s;
    size_t n, cap;
    bool oom;
} IrStrBuf;

void ir_sb_putn(IrStrBuf *b, const char *s, size_t k);  /* k bytes of s */
void ir_sb_puts(IrStrBuf *b, const char *s);
void ir_sb_printf(IrStrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_sb_vprintf(IrStrBuf *b, const char *fmt, va_list ap);
/* Append a heap string and ts_free it; NULL (its maker ran out of memory)
 * sets oom. */
void ir_sb_put_owned(IrStrBuf *b, char *s);
/* The string (the caller ts_frees it; "" when nothing was appended), or
 * NULL after an OOM. Either way b is empty again. */
char *ir_sb_take(IrStrBuf *b);
void ir_sb_free(IrStrBuf *b);

/* ------------------------------------------------------------------ */
/* heap.c                                                              */
/* ------------------------------------------------------------------ */

/* A binary min-heap of int64 keys in k[0 .. n), over an array the caller
 * allocates (as many entries as keys it will hold at once) and frees. Pop
 * only when n > 0. */
typedef struct IrHeap {
    int64_t *k;
    int32_t n;
} IrHeap;
void ir_heap_push(IrHeap *h, int64_t key);
int64_t ir_heap_pop(IrHeap *h);

/* ------------------------------------------------------------------ */
/* grow.c                                                              */
/* ------------------------------------------------------------------ */

/* Make the heap array *slot (a T *, of *cap elements of elem bytes) hold
 * at least need elements: doubles its capacity (from 8) with ts_realloc.
 * False on OOM or size overflow, with *slot and *cap unchanged (the caller
 * still owns and frees the old array). Use IR_GROW, which checks types. */
bool ir_grow_(void *slot, int64_t *cap, int64_t need, size_t elem);
/* IR_GROW(p, cap, need): p any T *, cap an int64_t lvalue. The comparison
 * of &cap with an int64_t * makes the compiler reject another type of cap. */
#define IR_GROW(p, cap, need) \
    ((void)sizeof(&(cap) == (int64_t *)0), ir_grow_(&(p), &(cap), (need), sizeof *(p)))

/* The same for an array in arena a: a new block, the first n elements
 * copied, the old block left behind until the arena goes. */
bool ir_arena_grow_(IrArena *a, void *slot, int64_t *cap, int64_t n, int64_t need, size_t elem);
#define IR_ARENA_GROW(a, p, cap, n, need) \
    ((void)sizeof(&(cap) == (int64_t *)0), ir_arena_grow_((a), &(p), &(cap), (n), (need), sizeof *(p)))

/* A slot in [0, IR_NAME_SLOTS) for the name s[0, n) (n >= 1): the key of
 * the lookup caches of the name tables (opcodes, attributes). */
#define IR_NAME_SLOTS 512
uint32_t ir_name_slot(const char *s, size_t n);

/* Index of s in a NULL-terminated list of strings, -1 if absent or s NULL. */
int32_t ir_str_index(const char *s, const char *const *list);

/* ------------------------------------------------------------------ */
/* diag.c                                                              */
/* ------------------------------------------------------------------ */

typedef enum IrStatus {
    IR_OK = 0,
    IR_EINPUT,    /* bad input: syntax, semantics, limits (exit status 2) */
    IR_ENOMEM,    /* out of memory */
    IR_EUNSUPPORTED, /* valid HLO that this part of tessel cannot handle */
    IR_EINTERNAL, /* a bug: an invariant that should have held did not */
    IR_ERUNTIME,  /* a failure while running (I/O, a peer, a kernel) */
} IrStatus;

/* A position in a source text. line and col count from 1; 0 means unknown. */
typedef struct IrPos {
    int32_t line;
    int32_t col;
} IrPos;

/* The first error of an operation. Library code fills one and returns its
 * status; only tools/ prints it. `msg` and `line_text` are heap strings owned
 * by the diag (ir_diag_clear frees them). */
typedef struct IrDiag {
    IrStatus status;
    char *file;       /* NULL when not about a file */
    IrPos pos;
    char *line_text;  /* the source line, without newline, or NULL */
    char *msg;
} IrDiag;

/* Record an error (only the first one is kept) and return its status.
 * `src` is the whole source text (may be NULL) used to extract the line. */
IrStatus ir_error(IrDiag *d, IrStatus st, const char *file, const char *src,
                  IrPos pos, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
IrStatus ir_verror(IrDiag *d, IrStatus st, const char *file, const char *src,
                   IrPos pos, const char *fmt, va_list ap);
/* The library's one out-of-memory error: records "out of memory" (or "out
 * of memory DURING", e.g. during = "while partitioning") without a
 * position and returns IR_ENOMEM. Can't fail: when even the message cannot
 * be allocated the status alone is kept (ir_diag_format then says "out of
 * memory"). */
IrStatus ir_oom(IrDiag *d, const char *during);
/* Format as `tessel: FILE:LINE:COL: error: MSG\n  LINE\n  ^` into a heap string. */
char *ir_diag_format(const IrDiag *d, const char *prog);
void ir_diag_clear(IrDiag *d);

/* ------------------------------------------------------------------ */
/* types.c                                                             */
/* ------------------------------------------------------------------ */

typedef enum IrType {
    IR_INVALID = 0,
    IR_PRED, IR_S8, IR_S16, IR_S32, IR_S64,
    IR_U8, IR_U16, IR_U32, IR_U64,
    IR_F16, IR_BF16, IR_F32, IR_F64,
    IR_C64, IR_C128,
    /* Sub-byte integers: one element per byte in memory (sign- or zero-
     * extended), as XLA's CPU backend holds them unpacked. */
    IR_S2, IR_S4, IR_U2, IR_U4,
    /* 8- and 4-bit floating kinds, one element per byte (the f4 code in the
     * low nibble). Names as XLA prints them. */
    IR_F8E5M2, IR_F8E4M3, IR_F8E4M3FN, IR_F8E4M3B11FNUZ, IR_F8E5M2FNUZ,
    IR_F8E4M3FNUZ, IR_F8E3M4, IR_F8E8M0FNU, IR_F4E2M1FN,
    IR_TOKEN,
    IR_OPAQUE,    /* opaque[]: a handle XLA passes through; no elements */
    IR_TUPLE,
    IR_NTYPES
} IrType;

const char *ir_type_name(IrType t);             /* "f32", "(tuple)" */
IrType ir_type_from_name(const char *s, size_t n); /* IR_INVALID if unknown */
size_t ir_type_size(IrType t);                  /* bytes per element; pred = 1; 0 for token/tuple */
bool ir_type_is_float(IrType t);                /* f16 bf16 f32 f64, the f8 and f4 kinds */
bool ir_type_is_lowp_float(IrType t);           /* the f8 and f4 kinds */
bool ir_type_is_complex(IrType t);
bool ir_type_is_signed_int(IrType t);
bool ir_type_is_unsigned_int(IrType t);
bool ir_type_is_int(IrType t);                  /* signed or unsigned, not pred */
bool ir_type_is_array(IrType t);                /* not token, opaque or tuple */
int ir_type_bits(IrType t);

/* ------------------------------------------------------------------ */
/* lowp.c                                                              */
/* ------------------------------------------------------------------ */

/* The value of the one-byte code of an f8 or f4 kind (f4: the low nibble;
 * the high one is ignored). NaN codes give NaN, inf codes +-inf. Any other
 * type gives NaN. Cannot fail. */
double ir_lowp_to_double(IrType t, uint8_t code);
/* The same value as f32 (every code's value is one), built from its bits
 * where it is an f32 subnormal (f8e8m0fnu's 2^-127), so that it holds
 * whatever the thread's floating-point mode: a (float) cast of the double
 * gives 0 there while subnormals are flushed (device/fpmode.c), where XLA
 * decodes the code to its f32 bits. Cannot fail. */
float ir_lowp_to_float(IrType t, uint8_t code);
/* The code of x in an f8 or f4 kind, rounded to nearest even, with the
 * type's overflow, NaN and signed-zero rules as ml_dtypes and XLA's convert
 * define them (lowp.c says which). f4 codes are in the low nibble. Any other
 * type gives 0. Cannot fail. */
uint8_t ir_lowp_from_double(IrType t, double x);
/* The same from an f32, read from its bits (an f32 subnormal is its value
 * whatever the thread's floating-point mode, as XLA's bit-level convert
 * reads it: 1e-39f gives f8e8m0fnu's 0x00, not the NaN of zero). */
uint8_t ir_lowp_from_float(IrType t, float x);
bool ir_lowp_is_nan(IrType t, uint8_t code);

/* ------------------------------------------------------------------ */
/* shape.c                                                             */
/* ------------------------------------------------------------------ */

#define IR_MAX_RANK 64
/* The most devices (partitions x replicas) a module, a plan or a run may
 * have: the ceiling of --limit devices (whose default is lower,
 * COMPILE_DEFAULT_MAX_DEVICES). */
#define IR_MAX_DEVICES 65536

/* An array shape (type, dims, optional layout) or a tuple of shapes, or
 * token[]. Arrays are stored in row-major (logical) order at run time
 * whatever the layout says; the layout is kept so printing round trips. */
typedef struct IrShape {
    IrType type;
    int32_t rank;
    int64_t *dims;           /* rank entries */
    bool has_layout;         /* a `{...}` layout was given */
    int32_t *minor_to_major; /* rank entries when has_layout */
    const char *layout_tail; /* text after ':' inside the layout, e.g. "T(8,128)"; NULL if none */
    int32_t ntuple;          /* for IR_TUPLE */
    struct IrShape *tuple;
    /* Bounded dynamic dimensions (`f32[<=8,4]`): NULL when every dimension is
     * static, else rank entries, true where dims[i] is the bound of a
     * dimension whose size is known only at run time. */
    bool *dynamic;
    /* XLA's buffer shape `b(f32[2,4])` (custom-calls Pin, Unpin,
     * CreateBuffer): the array it holds, computed as that array; kept, like
     * the layout, for printing, and ignored by shape equality. */
    bool buffer;
} IrShape;

/* dims[i] of an unbounded dynamic dimension (`f32[?,784]`): no bound, so the
 * shape has no element count (ir_shape_elements gives -1) and cannot run. */
#define IR_DIM_UNBOUNDED (-1)
/* Is dimension i of an array shape dynamic (`<=N` or `?`)? */
bool ir_shape_dim_dynamic(const IrShape *s, int32_t i);
bool ir_shape_is_dynamic(const IrShape *s);   /* any dimension of any leaf */

/* Shape limits, checked before anything is allocated. */
typedef struct IrLimits {
    int64_t max_elements;    /* per array; default 1<<34 */
    int32_t max_rank;        /* default IR_MAX_RANK */
    int32_t max_tuple;       /* tuple width; default 1<<16 */
    int32_t max_depth;       /* nesting of tuples, literals, braces; default 64 */
    int64_t max_name;        /* name length; default 4096 */
    /* Levels of computation calls (entry = 1, each computation it calls
     * one more); default max_depth. The passes and the executor walk call
     * nesting recursively, so this bounds their stack. */
    int32_t max_call_depth;
    int64_t max_instructions; /* instructions of the module; default 1 << 22 */
} IrLimits;
IrLimits ir_default_limits(void);

/* Element count of an array shape; -1 on overflow of int64. 1 for rank 0. */
int64_t ir_shape_elements(const IrShape *s);
/* Bytes of an array shape (elements * type size), -1 on overflow; for a tuple, sum of leaves. */
int64_t ir_shape_bytes(const IrShape *s);
bool ir_shape_is_array(const IrShape *s);
/* Same type and dims (and tuple structure), and the same dimensions
 * dynamic (XLA's ShapeUtil::Equal without layouts); layouts ignored. */
bool ir_shape_equal(const IrShape *a, const IrShape *b);
/* Same rank and dimensions, whatever the element types (arrays). */
bool ir_shape_same_dims(const IrShape *a, const IrShape *b);
/* The first `rank` entries of a and b are equal. */
bool ir_dims_equal(const int64_t *a, const int64_t *b, int32_t rank);
/* Equal ignoring layouts and which dimensions are dynamic (XLA's
 * ShapeUtil::Compatible): f32[<=8] is compatible with f32[8]. */
bool ir_shape_compatible(const IrShape *a, const IrShape *b);
/* Deep copy into an arena. Returns IR_ENOMEM status through NULL check of dst fields. */
IrStatus ir_shape_copy(IrArena *a, IrShape *dst, const IrShape *src);
/* Make an array shape with the given dims (no layout). */
IrStatus ir_shape_make(IrArena *a, IrShape *dst, IrType t, int32_t rank, const int64_t *dims);
/* Make a tuple shape of n element shapes (deep-copied). */
IrStatus ir_shape_make_tuple(IrArena *a, IrShape *dst, int32_t n, const IrShape *elems);
/* Text as XLA prints it: "f32[8,16]{1,0}" (with_layout) or "f32[8,16]"; tuples "(f32[2], s32[])";
 * dynamic dimensions "f32[<=8,?]".
 * Returns a heap string (ts_malloc) or NULL on OOM. */
char *ir_shape_str(const IrShape *s, bool with_layout);
/* Leaf count (1 for an array), leaves depth first. */
int32_t ir_shape_leaf_count(const IrShape *s);
const IrShape *ir_shape_leaf(const IrShape *s, int32_t leaf);
/* Every leaf of s, depth first, into out[0 .. ir_shape_leaf_count(s)):
 * one walk, where ir_shape_leaf per leaf would be quadratic in a wide
 * tuple. Returns the count. */
int32_t ir_shape_leaves(const IrShape *s, const IrShape **out);
/* Row-major strides in elements for an array shape; strides has rank entries. */
void ir_shape_strides(const IrShape *s, int64_t *strides);

/* ------------------------------------------------------------------ */
/* ops.c: opcodes, generated from hlo_ops.def and hlo_op_sem.def      */
/* ------------------------------------------------------------------ */

typedef enum IrOpKind { IR_K_UNARY, IR_K_BINARY, IR_K_TERNARY, IR_K_OTHER } IrOpKind;

/* Partitioner handler families (the FAMILY column of hlo_ops.def). */
typedef enum IrOpFamily {
    FAM_ELEMENTWISE, FAM_PARAMETER, FAM_CONSTANT, FAM_IOTA, FAM_TUPLE,
    FAM_CONTROL, FAM_BROADCAST, FAM_RESHAPE, FAM_TRANSPOSE, FAM_SLICE,
    FAM_DYNAMIC_SLICE, FAM_PAD, FAM_CONCATENATE, FAM_REVERSE, FAM_GATHER,
    FAM_SCATTER, FAM_SORT, FAM_DOT, FAM_CONVOLUTION, FAM_REDUCE,
    FAM_REDUCE_WINDOW, FAM_COLLECTIVE, FAM_CUSTOM_CALL, FAM_FFT, FAM_TOPK,
    FAM_LINALG, FAM_BATCH_NORM, FAM_RNG_BIT_GENERATOR, FAM_RAGGED_DOT,
    FAM_FUSION, FAM_ASYNC, FAM_SCAN, FAM_BITCAST_CONVERT, FAM_FALLBACK,
} IrOpFamily;

typedef enum IrOpcode {
#define OP(e, name, arity, kind, fam) OP_##e,
#include "hlo_ops.def"
#undef OP
    OP_COUNT
} IrOpcode;

const char *ir_op_name(IrOpcode op);
int ir_op_arity(IrOpcode op);          /* -1 variadic */
IrOpKind ir_op_kind(IrOpcode op);
IrOpFamily ir_op_family(IrOpcode op);
/* The identity of the simple reducer `op` (add, multiply, maximum,
 * minimum, and, or, xor) on values of each kind: floats 0, 1, -inf, +inf;
 * signed integers of `bits` 0, 1, the smallest, the largest, -1 (and);
 * unsigned ones 0, 1, 0, all ones (minimum, and). The one table the
 * kernels, the collectives and the partitioner's identity fills share. */
double ir_identity_float(IrOpcode op);
int64_t ir_identity_signed(IrOpcode op, int bits);
uint64_t ir_identity_unsigned(IrOpcode op, int bits);
bool ir_op_is_elementwise(IrOpcode op); /* unary/binary/ternary kinds */

/* The semantics columns of hlo_op_sem.def (see there for each). */
typedef enum IrIdentity {
    IR_ID_NONE, IR_ID_ZERO, IR_ID_ONE, IR_ID_LOWEST, IR_ID_HIGHEST, IR_ID_ALL_ONES,
} IrIdentity;
/* The MPI reduction of a simple reducer; the MPI side maps each to its
 * MPI_Op (IR_MPI_SUM -> MPI_SUM, ...). ir/ never includes mpi.h. */
typedef enum IrMpiOp {
    IR_MPI_NONE, IR_MPI_SUM, IR_MPI_PROD, IR_MPI_MAX, IR_MPI_MIN, IR_MPI_BAND, IR_MPI_BOR, IR_MPI_BXOR,
} IrMpiOp;
/* Fewest operands: the arity of a fixed-arity op, else the MIN_ARITY column. */
int ir_op_min_arity(IrOpcode op);
/* Called computations the op takes; -1 when any number may be. */
int ir_op_ncalled(IrOpcode op);
/* Does the op talk to the host (infeed, outfeed)? */
bool ir_op_talks_to_host(IrOpcode op);
/* The identity of simple reducer `op`; IR_ID_NONE for any other op. */
IrIdentity ir_op_identity(IrOpcode op);
/* Is `op` one of the simple reducers (add, multiply, maximum, minimum,
 * and, or, xor): commutative, associative, with an identity and an MPI
 * operation? */
bool ir_op_is_reducer(IrOpcode op);
IrMpiOp ir_op_mpi(IrOpcode op);
/* Does the fused AVX-512 register path compute `op` (f32)? */
bool ir_op_vector(IrOpcode op);
/* True for the custom-call targets that are annotations returning their
 * one operand unchanged, whole (a value's sharding, placement or a
 * barrier, for XLA's compiler only): Sharding, annotate_device_placement,
 * MoveToHost, MoveToDevice, PinToDevice, PinToDeviceSram, Pin, Unpin,
 * ShardBarrierFrom, ShardBarrierTo, SetBound, and Shardy's
 * xla.sdy.FuncResultSharding and xla.sdy.PropagationBarrier. (Not
 * SPMDFullToShardShape / SPMDShardToFullShape, which change the shape in
 * a partitioned program.) `target` may be NULL (false). */
bool ir_annotation_target(const char *target);
/* True for the targets of JAX's Python callbacks (jax.debug.print,
 * jax.debug.callback, jax.pure_callback, io_callback):
 * xla_ffi_python_cpu_callback, xla_python_cpu_callback and
 * xla_ffi_partitioned_python_cpu_callback. `target` may be NULL (false). */
bool ir_python_callback(const char *target);
/* Lookup by text name; returns OP_COUNT if unknown. */
IrOpcode ir_op_from_name(const char *s, size_t n);

/* Attributes, generated from hlo_attrs.def (see there for the forms and
 * the uses). The parser reads which ops take which and how to read each
 * value from these tables, the printer which to print, in which order. */
typedef enum IrAttrId {
#define ATTR(id, name, form, field, extra) A_##id,
#include "hlo_attrs.def"
    A_COUNT,
    A_FIRST_KEPT = A_PARAM_REPL /* the KEEP attributes: A_FIRST_KEPT and every id after it */
} IrAttrId;

typedef enum IrAttrForm {
    IR_AF_INT, IR_AF_COUNT, IR_AF_INTS, IR_AF_BOOL, IR_AF_STR, IR_AF_WORD, IR_AF_RAW, IR_AF_INNER,
    IR_AF_KEEP, IR_AF_CALLEE, IR_AF_CALLEES, IR_AF_SPECIAL,
} IrAttrForm;

/* The words a WORD attribute takes, NULL-terminated; `expected` is the
 * diagnostic text when another is written. */
typedef struct IrAttrWords {
    const char *expected;
    const char *const *w;
} IrAttrWords;

typedef struct IrAttrInfo {
    const char *name;
    IrAttrForm form;
    /* The member of the generic forms: its offset in IrAttrs or, where
     * `cold`, in IrAttrsX (ir_attr_member). */
    size_t field;
    bool cold;
    bool has_flag;              /* `has` is the member (a bool) set when written */
    bool has_cold;
    size_t has;
    const IrAttrWords *words;   /* IR_AF_WORD */
} IrAttrInfo;

/* How an op uses an attribute (P, S, N, R in hlo_attrs.def). */
typedef enum IrAttrMode {
    IR_AM_ALWAYS,   /* printed always */
    IR_AM_SET,      /* printed when set */
    IR_AM_NONEMPTY, /* printed when the list is non-empty */
    IR_AM_READ,     /* read; printed elsewhere or not at all */
} IrAttrMode;

typedef struct IrAttrUse {
    IrAttrId id;
    IrAttrMode mode;
} IrAttrUse;

/* The row of attribute `id` (< A_COUNT). */
const IrAttrInfo *ir_attr_info(IrAttrId id);
/* Lookup by text name, aliases included; A_COUNT if unknown. */
IrAttrId ir_attr_from_name(const char *s, size_t n);
/* The attributes of `op` in printing order, then {A_COUNT}; the generic
 * attributes every op takes are not in it (ir_attr_generic). */
const IrAttrUse *ir_op_attrs(IrOpcode op);
/* The attributes every op takes, in printing order, then {A_COUNT}. */
const IrAttrUse *ir_attr_generic(void);
/* Does `op` take attribute `id` (a generic one or one of its own)? */
bool ir_attr_applies(IrAttrId id, IrOpcode op);

/* ------------------------------------------------------------------ */
/* sharding.c                                                          */
/* ------------------------------------------------------------------ */

typedef enum IrShardingKind {
    SHD_REPLICATED, SHD_MAXIMAL, SHD_MANUAL, SHD_TILED, SHD_TUPLE,
} IrShardingKind;

/* The meaning of a trailing tile-assignment dimension (last_tile_dims). */
typedef enum IrSubgroupType { SUBGROUP_REPLICATED, SUBGROUP_MANUAL } IrSubgroupType;

/* An XLA HloSharding. For SHD_TILED, the tile assignment is an array of
 * dims `tile[0..ntile)` whose first `ntile - nsubgroup` entries tile the data
 * dimensions and whose last `nsubgroup` entries are subgroups (replication or
 * manual), and `devices` holds its entries in row-major order (iota forms are
 * expanded on parse). `last_tile_dim_replicate` is the older spelling of one
 * REPLICATED subgroup and is remembered only so printing round trips. */
typedef struct IrSharding {
    IrShardingKind kind;
    int64_t device;             /* SHD_MAXIMAL */
    int32_t ntile;
    int64_t *tile;              /* tile assignment dims */
    int64_t ndevices;           /* product of tile */
    int64_t *devices;           /* row-major tile assignment */
    int32_t nsubgroup;          /* trailing subgroup dims */
    IrSubgroupType *subgroup;   /* nsubgroup entries */
    bool last_tile_dim_replicate;
    /* Iota form, printed back as such: devices=[tile]<=[iota_dims]T(perm). */
    bool iota;
    int32_t niota;
    int64_t *iota_dims;
    int32_t *iota_perm;         /* NULL when no T(...) */
    int32_t ntuple;             /* SHD_TUPLE */
    struct IrSharding *tuple;
    const char *metadata;       /* raw text of metadata={...} inside, or NULL */
    /* XLA's `{unknown}` placeholder (propagation may refine it): kind is
     * SHD_REPLICATED, which is always a correct reading of it. */
    bool unknown;
    /* XLA's shard groups: ` shard_as ID` (1) or ` shard_like ID` (2); 0 none. */
    int8_t shard_group;
    int64_t shard_group_id;
    /* XLA's `{unreduced}`: every device holds a full-shape partial value
     * that a later reshard sums. kind is SHD_MANUAL (each device keeps its
     * own value, nothing moves); the sum on resharding is not implemented. */
    bool unreduced;
} IrSharding;

/* Data rank a tiled sharding applies to (ntile - nsubgroup). */
int32_t ir_sharding_data_rank(const IrSharding *s);
/* Devices that hold one tile (product of subgroup dims). */
int64_t ir_sharding_replication(const IrSharding *s);
/* Number of distinct tiles (product of data tile dims). */
int64_t ir_sharding_num_tiles(const IrSharding *s);
bool ir_sharding_equal(const IrSharding *a, const IrSharding *b);
/* The devices s names: its largest device id + 1 (0 for NULL, replicated
 * or manual; a tuple's widest leaf). */
int64_t ir_sharding_width(const IrSharding *s);
/* 0, 1, ..., n-1 as one table shared by every sharding whose devices are
 * in that order (the iota form without a transpose, and what projections
 * of it keep): a sharding's device array is never written after it is
 * made, so at 65,536 devices they cost no memory and no copies, and
 * comparing or checking one is a pointer test. NULL beyond
 * IR_MAX_DEVICES. */
const int64_t *ir_iota_table(int64_t n);
bool ir_devices_are_iota(const int64_t *devices);
/* Check against a shape and a device count; on error fill d with `pos`.
 * num_devices <= 0 skips the device-range check. */
IrStatus ir_sharding_validate(const IrSharding *s, const IrShape *shape, int64_t num_devices,
                              IrDiag *d, const char *file, const char *src, IrPos pos);
/* XLA text, e.g. "{devices=[2,1]0,1}"; heap string or NULL on OOM. */
char *ir_sharding_str(const IrSharding *s);
IrStatus ir_sharding_copy(IrArena *a, IrSharding *dst, const IrSharding *src);
/* Parse XLA sharding text (the part starting with '{'). Used by the parser
 * and by tools. On error fills d; positions are relative to `text`. */
IrStatus ir_sharding_parse(IrArena *a, const char *text, IrSharding *out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* sdy.c                                                               */
/* ------------------------------------------------------------------ */

/* A Shardy mesh: named axes (major to minor) over `ndevice` devices,
 * listed by device_ids (NULL: 0..ndevice-1 in order). A maximal mesh has
 * no axes and one device id; the empty mesh has neither (replicated). */
typedef struct IrSdyMesh {
    const char *name;
    int32_t naxis;
    const char **axis;
    int64_t *size;
    int64_t ndevice;
    int64_t *device_ids;
} IrSdyMesh;

/* A module's meshes (its xla.sdy.meshes frontend attribute). */
typedef struct IrSdyMeshes {
    int32_t n;
    IrSdyMesh *mesh;
} IrSdyMeshes;

/* The manual axes of a shard_map region (#sdy<manual_axes{"x"}>). */
typedef struct IrSdyManual {
    int32_t n;
    const char **axis;
} IrSdyManual;

/* Each parses one attribute's (unescaped) text into the arena. Errors are
 * IR_EINPUT with d->pos relative to `text` (line 1, column = byte offset +
 * 1) and no file: the caller places them in its source. */
/* `{mesh = #sdy.mesh<["x"=2]>, ...}` */
IrStatus ir_sdy_parse_meshes(IrArena *a, const char *text, IrSdyMeshes *out, IrDiag *d);
/* `#sdy.sharding<@mesh, [...]>` gives one sharding; `#sdy.sharding_per_value
 * <[...]>` a SHD_TUPLE of one per value (even one). `shape` (NULL: none)
 * is the value's: each sharding that names dimensions must name one per
 * dimension of its value. `manual` (NULL: none)
 * names axes that are manual (a shard_map body): they become a manual
 * subgroup, or {manual} when they are all of the mesh's axes. `budget`
 * (NULL: the parser's own) counts down the device-list entries that may
 * still be allocated, across calls: one module's attributes share one. */
IrStatus ir_sdy_parse_sharding(IrArena *a, const IrSdyMeshes *meshes, const IrSdyManual *manual, const char *text,
                               const IrShape *shape, int64_t *budget, IrSharding *out, IrDiag *d);
/* `#sdy<manual_axes{"x", "y"}>` */
IrStatus ir_sdy_parse_manual_axes(IrArena *a, const char *text, IrSdyManual *out, IrDiag *d);


/* ------------------------------------------------------------------ */
/* module.c: the IR                                                    */
/* ------------------------------------------------------------------ */

typedef struct IrI64List {
    int32_t n;
    int64_t *v;
} IrI64List;

/* grow.c: the position of x in l (-1 if absent), and whether it is there. */
int32_t ir_list_index(const IrI64List *l, int64_t x);
bool ir_list_has(const IrI64List *l, int64_t x);

typedef struct IrWindowDim {
    int64_t size, stride, pad_lo, pad_hi, lhs_dilate, rhs_dilate;
    bool reversal;
} IrWindowDim;

typedef struct IrWindow {
    int32_t rank;          /* 0: no window attribute */
    IrWindowDim *dim;
} IrWindow;

/* dim_labels=b01f_01io->b01f, spatial dims in order of their digit. */
typedef struct IrConvDnums {
    int64_t in_batch, in_feature;
    int64_t k_in_feature, k_out_feature;
    int64_t out_batch, out_feature;
    int32_t nspatial;
    bool present;          /* beside nspatial: no padding */
    int64_t *in_spatial, *k_spatial, *out_spatial;
} IrConvDnums;

typedef struct IrDotDnums {
    IrI64List lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
} IrDotDnums;

typedef struct IrGatherDnums {
    IrI64List offset_dims, collapsed_slice_dims, start_index_map;
    IrI64List operand_batching_dims, start_indices_batching_dims;
    int64_t index_vector_dim;
} IrGatherDnums;

typedef struct IrScatterDnums {
    IrI64List update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
    IrI64List input_batching_dims, scatter_indices_batching_dims;
    int64_t index_vector_dim;
} IrScatterDnums;

/* replica_groups={{0,1},{2,3}}, the iota form [2,2]<=[4] or the mesh-axes
 * form mesh['a'=2,'b'=4] {'b'} (both expanded on parse). */
typedef struct IrReplicaGroups {
    bool present;
    bool iota;             /* iota form kept for printing (iota_* below) */
    const char *mesh;      /* mesh-axes form as XLA prints it, or NULL */
    int32_t ngroups;
    int32_t *group_size;   /* ngroups entries */
    int64_t **groups;
    IrI64List iota_shape, iota_reshape;
    int32_t *iota_perm;
    int32_t niota_perm;
} IrReplicaGroups;

typedef enum IrCmpDir { CMP_NONE, CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE } IrCmpDir;
/* type= attribute of compare; CMPT_DEFAULT means "derived from the operand type". */
typedef enum IrCmpType { CMPT_DEFAULT, CMPT_FLOAT, CMPT_TOTALORDER, CMPT_SIGNED, CMPT_UNSIGNED } IrCmpType;

typedef struct IrKeyValue {
    const char *key, *value;
} IrKeyValue;

/* Output/parameter index path into a tuple, e.g. {1, 0}. */
typedef IrI64List IrShapeIndex;

/* Attributes of an instruction. Only those of its opcode are meaningful; a
 * member's zero value means "absent" unless noted.
 *
 * They come in two parts, because every pass reads and copies IrInstrs and
 * a 64k-instruction module's instructions were 75 MB when all of them sat
 * in each instruction (first-touching that memory was half of `tessel
 * check`'s time): the members most instructions use (IrAttrs, inside the
 * instruction) and the rest (IrAttrsX, out of line behind IrAttrs.x, shared
 * read-only: ir_no_attrs_x when the instruction has none of them).
 *
 * The members are written as lists so that ir/ops.c can lay both parts out
 * side by side in one struct and take any member's offset by name. */
#define IR_ATTRS_HOT_MEMBERS                                                                       \
    int64_t parameter_number;                                                                      \
    int64_t tuple_index;                /* get-tuple-element index= */                             \
    int64_t iota_dimension;                                                                        \
    int64_t channel_id;                 /* 0 = none */                                             \
    IrI64List dimensions;               /* broadcast, transpose, reduce, reverse, concatenate, ... */ \
    IrDotDnums dot;                                                                                \
    const char *precision_config;       /* raw text of operand_precision={...}, or NULL; as        \
                                         * written, braces included: "{default,high}" */           \
    /* Constant literal: leaves depth first, each row-major in its element                        \
     * type's in-memory form (pred as uint8 0/1, f16/bf16 as raw uint16). */                       \
    uint8_t *literal;                                                                              \
    int64_t literal_bytes;                                                                         \
    const char *metadata;               /* raw text inside metadata={...} */                       \
    IrKeyValue *frontend;               /* frontend_attributes={k="v",...} */                      \
    int32_t nfrontend;                  /* entries of frontend */                                  \
    IrCmpDir direction;                                                                            \
    IrCmpType cmp_type;                                                                            \
    bool has_dimensions;                                                                           \
    bool use_global_device_ids;                                                                    \
    /* constant({...}): the literal was elided in the text (XLA prints                            \
     * large constants so); literal is NULL and the values are unknown. */                         \
    bool literal_elided;

#define IR_ATTRS_COLD_MEMBERS                                                                      \
    IrI64List slice_start, slice_limit, slice_stride;                                              \
    IrI64List dynamic_slice_sizes;                                                                 \
    IrI64List pad_lo, pad_hi, pad_interior;   /* padding=lo_hi_interior x ... */                   \
    IrWindow window;                                                                               \
    IrConvDnums conv;                                                                              \
    int64_t feature_group_count;        /* default 1 */                                            \
    int64_t batch_group_count;          /* default 1 */                                            \
    const char *algorithm;              /* dot algorithm=, raw */                                  \
    IrGatherDnums gather;                                                                          \
    IrI64List slice_sizes;              /* gather */                                               \
    IrScatterDnums scatter;                                                                        \
    IrReplicaGroups replica_groups;                                                                \
    IrI64List source_target_pairs;      /* flattened {s,t} pairs: 2n entries */                    \
    const char *custom_call_target;                                                                \
    const char *backend_config;         /* raw text (string or {...}), or NULL; as written,        \
                                         * quotes or braces included: "\"x\"" or "{...}" */        \
    const char *api_version;                                                                       \
    IrShape *operand_layout_constraints;                                                           \
    const char *distribution;           /* rng: rng_uniform / rng_normal */                        \
    const char *rng_algorithm;          /* rng-bit-generator */                                    \
    const char *fft_type;                                                                          \
    IrI64List fft_length;                                                                          \
    const char *infeed_config, *outfeed_config;                                                    \
    IrShape outfeed_shape;                                                                         \
    int64_t exponent_bits, mantissa_bits; /* reduce-precision */                                   \
    const char *statistics_viz, *origin; /* raw, kept for printing: the {...} values as            \
                                          * written, braces included (statistics=, origin=) */     \
    IrI64List control_predecessors;     /* instruction indices */                                  \
    /* fusion, async and scheduling */                                                             \
    const char *fusion_kind;            /* kind=kLoop|kInput|kOutput|kCustom, NULL if absent */    \
    const char *output_to_operand_aliasing; /* raw {...} text, braces included */                  \
    const char *async_execution_thread; /* raw string value, quotes included */                    \
    const char *custom_call_schedule;   /* SCHEDULE_NONE, SCHEDULE_LATEST, ... */                  \
    int64_t cross_program_prefetch_index;  /* copy-start */                                        \
    const char *domain;                 /* raw {...} of domain=, braces included */                \
    int64_t topk_k;                                                                                \
    /* ragged-dot: lhs_ragged_dims, rhs_group_dims (dot dims in `dot`) */                          \
    IrI64List lhs_ragged_dims, rhs_group_dims;                                                     \
    /* triangular-solve and cholesky */                                                            \
    const char *transpose_a;            /* NO_TRANSPOSE, TRANSPOSE, ADJOINT; NULL = NO_TRANSPOSE */ \
    int64_t feature_index;              /* batch-norm-training / -inference / -grad */             \
    int64_t rng_delta;                  /* rng-get-and-update-state */                             \
    int64_t num_carries;                /* scan */                                                 \
    /* collective-permute's in-place form: slice_sizes={{...},...}, raw */                         \
    const char *permute_slice_sizes;                                                               \
    /* Attributes that change nothing tessel computes but that XLA prints                         \
     * (parameter_replication, inferred_dimension, result_accuracy, ...):                         \
     * kept as name and raw value text so printing gives them back                                \
     * (nkept entries). */                                                                         \
    IrKeyValue *kept;                                                                              \
    int32_t noperand_layouts;           /* entries of operand_layout_constraints */                \
    int32_t nkept;                      /* entries of kept */                                      \
    float epsilon;                      /* batch-norm-training / -inference / -grad */             \
    /* Sugared async forms `OP-start`/`OP-update`/`OP-done` (XLA prints an                        \
     * async op whose computation wraps one instruction that way): set on the                     \
     * async-start/-update/-done, with the wrapped opcode, so printing gives                      \
     * back the form that was read. */                                                             \
    IrOpcode async_wrapped_op;                                                                     \
    bool async_sugar;                                                                              \
    bool indices_are_sorted, unique_indices;  /* gather, scatter */                                \
    bool is_stable;                     /* sort */                                                 \
    bool constrain_layout;                                                                         \
    bool custom_call_has_side_effect;                                                              \
    bool has_outfeed_shape;                                                                        \
    bool is_host_transfer;              /* send, recv, send-done, recv-done */                     \
    bool has_cross_program_prefetch;                                                               \
    bool topk_largest;                  /* XLA's default is true */                                \
    bool has_topk_largest;                                                                         \
    bool left_side, lower, unit_diagonal; /* triangular-solve and cholesky */                      \
    bool is_reverse, has_is_reverse;    /* scan */                                                 \
    bool is_associative, has_is_associative; /* scan: a hint; the result is the same */

/* The attributes few instructions have. Immutable once an instruction
 * points at them (several instructions may share one): to change one, take
 * a fresh copy with ir_attrs_x_edit. */
typedef struct IrAttrsX {
    IR_ATTRS_COLD_MEMBERS
} IrAttrsX;

typedef struct IrAttrs {
    IR_ATTRS_HOT_MEMBERS
    /* Never NULL in an instruction of a module (ir_add_instr and the parser
     * see to it), nor in one a builder starts from `{.x = &ir_no_attrs_x}`. */
    const IrAttrsX *x;
} IrAttrs;

/* All zero: the IrAttrsX of an instruction that has none of them. */
extern const IrAttrsX ir_no_attrs_x;

/* a->x, or ir_no_attrs_x where a builder left it NULL. */
static inline const IrAttrsX *ir_attrs_x(const IrAttrs *a)
{
    return a->x ? a->x : &ir_no_attrs_x;
}

/* The member that attribute table entry `ai` names, in a or in its IrAttrsX
 * (ir/ops.c checks its type against the entry's form). */
static inline const void *ir_attr_member(const IrAttrs *a, const IrAttrInfo *ai)
{
    return ai->cold ? (const void *)((const char *)ir_attrs_x(a) + ai->field)
                    : (const void *)((const char *)a + ai->field);
}

/* The HAS flag of table entry `ai` (which has_flag says it has). */
static inline bool ir_attr_has(const IrAttrs *a, const IrAttrInfo *ai)
{
    const char *base = ai->has_cold ? (const char *)ir_attrs_x(a) : (const char *)a;
    return *(const bool *)(base + ai->has);
}

/* Roles of called computations, in `called[]` order per opcode:
 *   reduce, reduce-window, map, all-reduce, reduce-scatter, scatter, sort,
 *   call, custom-call(to_apply): [to_apply]
 *   while: [condition, body]
 *   conditional: branches in order; the pred form is [true, false]
 *   select-and-scatter: [select, scatter]
 *   custom-call with called_computations={...}: those, in order
 *   fusion, async-start (and async-update/-done when written with calls=),
 *   scan: [calls] ([to_apply] for scan); a sugared OP-start calls the
 *   wrapper computation the parser built (IrComputation.async_wrapper),
 *   whose root is OP with OP's attributes and callees */
typedef struct IrInstr {
    /* What every pass reads of every instruction comes first, in the first
     * cache lines; the attributes (about 1 KiB) last. */
    IrOpcode op;
    int32_t nopnd;
    int32_t ncalled;
    bool cond_pred_form;   /* conditional printed as true_computation=/false_computation= */
    bool custom_to_apply;  /* custom-call names its callee with to_apply= */
    const char *name;
    int32_t *opnd;         /* indices into the computation's instr[] */
    int32_t *called;       /* indices into the module's comp[] */
    IrSharding *sharding;  /* NULL when not annotated */
    IrPos pos;             /* where the instruction's name starts */
    IrShape shape;
    IrAttrs a;
} IrInstr;

typedef struct IrComputation {
    const char *name;
    int32_t ninstr, cap;
    IrInstr *instr;        /* in parse (definition) order; see ir_topo_order */
    int32_t root;          /* index of ROOT; -1 until set */
    int32_t nparam;
    int32_t *param;        /* instruction index of parameter(i), or -1 if absent */
    int32_t capparam;      /* allocated entries of param (module.c grows it by doubling) */
    bool is_entry;
    bool has_signature;    /* printed with (p: f32[2]) -> f32[2] */
    IrPos pos;
    /* Made by the parser for a sugared `OP-start`: the computation XLA's
     * parser builds around the wrapped op. Printed inside that instruction,
     * never on its own. */
    bool async_wrapper;
    /* `}, execution_thread="host"` after the body (async computations on
     * another thread); NULL for the main thread. Kept for printing. */
    const char *execution_thread;
} IrComputation;

typedef struct IrAlias {
    IrShapeIndex output_index;
    int64_t param_number;
    IrShapeIndex param_index;
    bool must_alias;
    bool inferred;          /* added by --donate auto (partition/donate.c), not the module's */
    bool from_donor;        /* a buffer_donor parameter paired by partition/donate.c */
    IrPos pos;              /* its output index's '{' in the header, for errors ({0, 0}: made by a pass) */
} IrAlias;

/* buffer_donor={ (0, {}), (1, {}) }: a parameter (or a leaf of a tuple
 * parameter) the caller gives up without naming the output that may take
 * its buffer, as JAX writes donate_argnums where it leaves the output
 * shardings to the compiler; partition/donate.c pairs it with one. */
typedef struct IrDonor {
    int64_t param_number;
    IrShapeIndex param_index;
    IrPos pos;              /* its '(' in the header, for errors */
} IrDonor;

typedef struct IrModule {
    IrArena *arena;
    const char *name;
    int32_t ncomp;
    int64_t capcomp;
    IrComputation **comp;  /* pointers are stable; order = print order */
    int32_t entry;         /* index of the ENTRY computation, -1 until set */
    int64_t num_partitions;  /* 0 when the header does not say */
    int64_t replica_count;   /* 0 when the header does not say */
    bool is_scheduled;
    const char *entry_computation_layout; /* raw text inside {...} */
    int32_t nalias;
    IrAlias *alias;
    int32_t ndonor;
    IrDonor *donor;          /* buffer_donor, each (param, index) once, none also aliased */
    int32_t nheader_attr;
    IrKeyValue *header_attr; /* other accepted header attributes, kept raw */
    const char *file;        /* source file name for diagnostics, may be NULL */
    const char *src;         /* source text (arena copy) for diagnostics, may be NULL */
    char *src_owned;         /* src when it is a block the module took (ir_parse_take) */
    struct IrNameSet *names; /* every name in use, built on demand (module.c) */
    int64_t next_name_id;    /* suffix counter for ir_unique_name */
    /* The FileNames/FunctionNames/FileLocations/StackFrames sections newer
     * XLA prints after the header, kept raw (they only feed metadata's
     * stack_frame_id) and printed back after the header; NULL if none. */
    const char *stack_frames;
} IrModule;

/* stack_frames.c: where ins comes from in the program that wrote the
 * module, "FILE:LINE:COL in FUNCTION", through its metadata's
 * stack_frame_id and the module's stack frame tables, into buf (n bytes,
 * truncated). False (buf empty) when there is no such frame. Can't fail
 * otherwise; reads the tables each call (for diagnostics). */
bool ir_instr_origin(const IrModule *m, const IrInstr *ins, char *buf, size_t n);

IrModule *ir_module_new(const char *name);   /* NULL on OOM */
void ir_module_free(IrModule *m);
/* Add an empty computation; returns its index or -1 on OOM. */
int32_t ir_add_computation(IrModule *m, const char *name);
/* Remove the computations with drop[k] set (never the entry), their
 * instructions freed, the others kept in order and renumbered in every
 * instruction that calls them and in m->entry. The caller makes sure
 * nothing left calls a dropped one. Without memory for the renumbering,
 * nothing is removed. */
void ir_drop_computations(IrModule *m, const bool *drop);
/* Append an instruction (copied shallowly: pointed-to arrays must live in
 * the module's arena); returns its index or -1 on OOM. */
int32_t ir_add_instr(IrModule *m, IrComputation *c, const IrInstr *ins);
/* Make room for n instructions in c in all (a hint for builders that know
 * or can estimate the count: one allocation instead of a doubling series).
 * IR_OK, or IR_ENOMEM leaving c unchanged. */
IrStatus ir_reserve_instrs(IrComputation *c, int32_t n);
/* Convenience builders; name NULL gives a fresh unique name "op.N". */
int32_t ir_add_simple(IrModule *m, IrComputation *c, IrOpcode op, const IrShape *shape,
                      int32_t nopnd, const int32_t *opnd, const char *name);
int32_t ir_find_computation(const IrModule *m, const char *name);  /* -1 if absent */
int32_t ir_find_instr(const IrComputation *c, const char *name);   /* -1 if absent */
IrComputation *ir_entry(const IrModule *m);
/* donated[p] (nparam entries) = whether m's input_output_alias names entry
 * parameter p, whole or a leaf of it ({0}: (0, {1})): what a run hands
 * over to the executor (DevExecOptions.donated) and the memory estimate
 * frees at its last use. A tuple with a leaf paired is handed over whole:
 * the executor holds each leaf only while its get-tuple-elements live, so
 * the paired leaf's output may take its buffer (the executor writes in
 * place only over a value it holds alone), and the leaves no pair names
 * are freed at their last reads too, which a single step never misses
 * (`--steps` refuses leaf pairs: runtime/inputs.c). Can't fail. */
void ir_alias_donated(const IrModule *m, bool *donated, int32_t nparam);
/* Append to m's input_output_alias the pair of whole entry parameter
 * `param` and root tuple element `output` (-1: the whole result), may-alias,
 * flagged as given (tessel's pairs: partition/donate.c, cluster/host_pairs.c).
 * IR_ENOMEM leaves m's list as it was. */
IrStatus ir_add_alias(IrModule *m, int64_t param, int64_t output, bool inferred, bool from_donor);
/* The same for any pair: leaf `param_index` of entry parameter `param`
 * (NULL or empty: the whole parameter) and the output at `output_index`
 * (NULL or empty: the whole result; {0,1}: element 1 of the root's
 * element 0), both copied into m's arena (partition/donate.c's tuple
 * leaves). IR_ENOMEM leaves m's list as it was. */
IrStatus ir_add_alias_at(IrModule *m, int64_t param, const IrShapeIndex *param_index,
                         const IrShapeIndex *output_index, bool inferred, bool from_donor);
/* m's buffer_donor becomes a copy of v[0..n) (in m's arena; n = 0: none).
 * IR_ENOMEM leaves m's list as it was. */
IrStatus ir_set_donors(IrModule *m, const IrDonor *v, int32_t n);
/* A name not used in the module, derived from `base` ("add" -> "add.7"). */
const char *ir_unique_name(IrModule *m, const char *base);
/* `name` itself when the module does not use it yet ("x.1" stays "x.1",
 * where ir_unique_name renumbers it), else ir_unique_name(m, name): for
 * names a user binds by, such as entry parameters'. NULL on OOM. */
const char *ir_keep_name(IrModule *m, const char *name);
/* Deep-copy computation `ci` of `src` into `dst` (and, recursively, the
 * computations it calls, reusing ones already copied through `map`, an array
 * of src->ncomp entries initialised to -1). Returns the new index or -1. */
int32_t ir_clone_computation(IrModule *dst, const IrModule *src, int32_t ci, int32_t *map);
/* Deep copy of attributes (every array and string) into arena a. */
IrStatus ir_attrs_copy(IrArena *a, IrAttrs *dst, const IrAttrs *src);
/* A writable copy of a's IrAttrsX, allocated in `ar`, that a->x now points
 * at (NULL when out of memory). The one way to change an IrAttrsX: the old
 * one may be shared with other instructions (copies of an IrInstr share it). */
IrAttrsX *ir_attrs_x_edit(IrArena *ar, IrAttrs *a);
/* Deep copy of a whole module. */
IrModule *ir_module_clone(const IrModule *m);
/* Recognise a reducer computation `ROOT op(p0, p1)` over two scalar
 * parameters (in either order), the root perhaps wrapped in annotation
 * custom-calls (ir_annotation_target: JAX's shard_map psum roots its
 * reducer in a Sharding marker): returns OP_ADD, OP_MULTIPLY, OP_MAXIMUM,
 * OP_MINIMUM, OP_AND, OP_OR or OP_XOR, else OP_COUNT. */
IrOpcode ir_simple_reducer(const IrModule *m, int32_t comp);
/* Is ins a topk: the topk op, or XLA's TopK custom-call of one operand and
 * a (values, indices) result, which the executor runs alike
 * (device/k_topk.c) and the partitioner too (partition/spmd_local.c)? */
bool ir_is_topk(const IrInstr *ins);
/* A Python callback (ir_python_callback) that gives nothing back: its
 * result is the empty tuple, or only tokens (an ordered one threads a
 * token: jax.debug.print(..., ordered=True)) (jax.debug.print,
 * jax.debug.callback, an io_callback without results). Its effect is the Python process's alone
 * and no value depends on it, so tessel, which runs no Python, runs it
 * as a no-op (and the compile says so). */
bool ir_resultless_callback(const IrInstr *ins);
/* The batch dims of a custom-call that treats every index of its leading
 * dims alone (the matrix factorizations: Qr,
 * ProductOfElementaryHouseholderReflectors, lapack_?getrf_ffi,
 * lapack_?syevd_ffi / heevd_ffi, lapack_?gesdd_ffi / gesvd_ffi,
 * lapack_?geev_ffi, over
 * [..., m, n]; tessel_lu_permutation over [..., p]): how many leading dims
 * all its operands and results share as a batch, or -1 for any other
 * instruction (partition/prop_custom.c, spmd_local.c). */
int32_t ir_batch_custom_call(const IrInstr *ins);
/* Does the executor run reduce `ins` blockwise (device/reduce_columns.c):
 * IR_REDUCER_MIN_OUTPUTS outputs or more (fewer cost little one call of the
 * reducer an element, and the block's arrays would outweigh the reduce), a
 * reducer of exact scalar operations only (compares, selects, logic,
 * + - * /, max, min, negate, abs, convert, clamp; parameters, constants)
 * whose 2n scalar parameters are typed like types[] (the n inputs' then
 * the n inits' types, as the kernel receives them), its root the n new
 * accumulators? k_reduce.c's fast path (one input, a simple reducer) is
 * tried before it. */
bool ir_reduce_is_blockwise(const IrModule *m, const IrInstr *ins, const IrType *types);
/* The bytes such a reduce holds at once beside its operands and results:
 * the accumulators and inputs of a block of IR_REDUCER_BLOCK outputs (or
 * all of them, when fewer) and every value of the reducer over it (its
 * constants splatted), each an array of the block. */
int64_t ir_reduce_block_bytes(const IrModule *m, const IrInstr *ins, const IrType *types);
/* Is computation comp scalar elementwise work only: parameters,
 * constants, copies and ops of the elementwise kernel (not map,
 * bitcast-convert, rng, stochastic-convert), each a scalar of at most 16
 * bytes, the root one of them or a tuple of them? The executor runs such
 * a reducer (or select, or scatter) without the interpreter, nothing
 * allocated a call (device/reducer_scalar.c). */
bool ir_scalar_computation(const IrModule *m, int32_t comp);
#define IR_REDUCER_BLOCK 1024      /* outputs a block: the reducer's arrays stay in the caches */
#define IR_REDUCER_MIN_OUTPUTS 64

/* ---- reducer_select.c: reducers that compare and pick (argmax, argmin) ---- */
#define IR_SELECT_REDUCER_MAX 3      /* operands (value, index, valid) */
#define IR_SELECT_REDUCER_INSTRS 64  /* instructions of a computation at most */
#define IR_SELECT_REDUCER_COMBS 128  /* combinations of relations at most */
/* A reducer of n operands whose every result is one of its parameters,
 * chosen by compares of each accumulator with its own input (and with
 * itself: NaN tests) and logic on pred operands only, perhaps through
 * calls (the partitioner's lifted reducer). For each combination of the
 * slots' relations (a the accumulator, b the input of slot s: 0 a<b,
 * 1 a==b, 2 a>b, and for floats 3 a NaN, 4 b NaN, 5 both NaN; for preds
 * 2a + b; combination = rel_0 + nrel_0 * (rel_1 + nrel_1 * ...)),
 * pick[comb][j] is the parameter (0..n-1 the accumulators, n..2n-1 the
 * inputs) result j takes. */
typedef struct IrSelectReducer {
    int32_t n, ncomb;
    IrType type[IR_SELECT_REDUCER_MAX];
    int32_t nrel[IR_SELECT_REDUCER_MAX];
    uint8_t pick[IR_SELECT_REDUCER_COMBS][IR_SELECT_REDUCER_MAX];
} IrSelectReducer;
/* Is computation comp, reducing n operands typed types[0..2n) (the n
 * inputs', then the n inits', as the kernel receives them), such a
 * reducer? Fills *r when it is. JAX's argmax and argmin (NaN-aware, ties
 * to the smaller index), a select-based NaN-propagating max, and either
 * lifted with a "valid" flag (partition/spmd_reduce.c) are. */
bool ir_select_reducer(const IrModule *m, int32_t comp, int32_t n, const IrType *types, IrSelectReducer *r);
/* Is `transpose` (an instruction of c) a transpose of a dot that swaps the
 * dot's lhs and rhs free dims, keeping its batch dims in front
 * ([batch, lhs free, rhs free] -> [batch, rhs free, lhs free])? The
 * executor runs such a pair as one dot writing its result transposed
 * (device/fusion.c), and the memory estimate counts it so. */
bool ir_dot_transpose_swaps(const IrComputation *c, const IrInstr *transpose);

/* Whose ids a collective's replica_groups (or source_target_pairs) list,
 * as XLA's CollectiveOpGroupMode says (infer_collective.c):
 *   no channel_id                       replica ids, within a partition;
 *   channel_id, use_global_device_ids   global ids (replica * N + partition);
 *   channel_id, all-to-all, ragged-all-to-all, collective-permute,
 *   collective-broadcast, send/recv (ops XLA gives no use_global_device_ids)
 *                                       partition ids, within a replica;
 *   channel_id, otherwise               replica ids, each group spanning every
 *                                       partition of its replicas. */
typedef enum IrGroupMode {
    IR_GROUPS_REPLICA,
    IR_GROUPS_PARTITION,
    IR_GROUPS_REPLICA_AND_PARTITION,
    IR_GROUPS_GLOBAL,
} IrGroupMode;
IrGroupMode ir_group_mode(const IrInstr *ins);
/* How many take part in each of a collective's groups in a world of n
 * partitions x r replicas, as XLA's verifier counts them (GetSubgroupSize):
 * the first group's size, else (empty groups: everyone) r, n, n x r or
 * r x n by ir_group_mode, times n in replica-and-partition mode; 0 when a
 * count it needs is 0 (not known yet). */
int64_t ir_group_size(const IrInstr *ins, int64_t n, int64_t r);
/* Look up a frontend attribute; NULL if absent. */
const char *ir_frontend_attr(const IrInstr *ins, const char *key);
/* The source-target pairs of a send or recv between devices, as XLA
 * writes them in frontend_attributes={_xla_send_recv_source_target_pairs=
 * "{{0,1},{1,2}}"}: v[2k] sends to v[2k+1] (ids as collective-permute's,
 * ir_group_mode). *n is the count of numbers (2 per pair); false when the
 * attribute is absent, is not a list of pairs of ids >= 0, or holds more
 * than cap numbers. */
bool ir_send_recv_pairs(const IrInstr *ins, int64_t *v, int32_t cap, int32_t *n);

/* ------------------------------------------------------------------ */
/* parse.c / lex.c / literal.c                                         */
/* ------------------------------------------------------------------ */

typedef struct IrParseOptions {
    IrLimits limits;
    bool verify;             /* run ir_verify after parsing (default in ir_parse_file) */
    /* A written computation of at least this many lines is read by two
     * threads (ir/parse_split.c; the result is the same): 0 the default
     * (8192), -1 never. Tests lower it to split small modules. */
    int32_t split_lines;
} IrParseOptions;
IrParseOptions ir_default_parse_options(void);

/* Parse HLO text. `file` names it in diagnostics. On success *out owns a new
 * module; on failure *out is NULL, d says why (FILE:LINE:COL), nothing leaks. */
IrStatus ir_parse(const char *file, const char *text, size_t len,
                  const IrParseOptions *opt, IrModule **out, IrDiag *d);
/* ir_parse of a text the module takes instead of copying: an ir_big_alloc
 * block of at least len + 1 bytes (a NUL is written at text[len]), freed
 * with the module, or at once on failure. For a large text (a model file
 * read whole), the copy and its fresh pages are a few percent of the
 * parse. */
IrStatus ir_parse_take(const char *file, char *text, size_t len, const IrParseOptions *opt, IrModule **out,
                       IrDiag *d);
/* Read a file and parse it (and verify, when opt->verify). */
IrStatus ir_parse_file(const char *path, const IrParseOptions *opt, IrModule **out, IrDiag *d);

/* sdy_import.c: make the Shardy attributes of a parsed module its
 * shardings (docs/hlo-text.md, "Shardy"): each xla.sdy.sharding becomes
 * the instruction's sharding, or must agree with the sharding= it has
 * (compared by device mapping); xla.sdy.ShardingGroup puts its operand in
 * a shard_as group; every shard_map (GlobalToLocalShape, a call of
 * xla.sdy.manual_computation_body.N, LocalToGlobalShape) is rewritten into
 * GSPMD's manual region (Sharding, SPMDFullToShardShape, the body inlined,
 * SPMDShardToFullShape). A module without Shardy attributes is left as it
 * is. Errors (IR_EINPUT) point into the attribute's text in m->src. */
IrStatus ir_sdy_import(IrModule *m, IrDiag *d);
/* A sharding of m names `used` devices, more than the `ndev` partitions a
 * run has (from the module header's num_partitions, else from the command
 * line's --num-partitions): when one of m's Shardy meshes is that wide (the
 * one the sharding was made from, as far as its device count tells), an
 * input error at the mesh in the header saying so and what to do; IR_OK
 * otherwise (no mesh to blame: the caller's own error stands). */
IrStatus ir_sdy_check_mesh_fits(const IrModule *m, int64_t ndev, int64_t used, bool from_header, IrDiag *d);

/* lapack_calls.c: JAX's CPU LAPACK custom-calls of a parsed module,
 * lapack_?potrf_ffi and lapack_?trsm_ffi (? = s, d, c, z), made tessel's
 * cholesky (in a tuple with LAPACK's info) and triangular-solve, their
 * backend_config read (docs/cli.md, custom-call targets); geqrf and orgqr
 * made XLA's Qr and Householder product; getrf, syevd/heevd and
 * gesdd/gesvd checked and kept for their kernels. Other LAPACK targets
 * stay custom-calls. Errors (IR_EINPUT) name the target.
 * ir_lapack_char: the character code a LAPACK call's backend_config gives
 * `key` ("uplo", "side", "trans_x", "diag", "mode"), or -1 where it gives
 * none or does not parse (the kernels read mode and uplo with it; the
 * import has checked them). */
IrStatus ir_lapack_import(IrModule *m, IrDiag *d);
int ir_lapack_char(const char *backend_config, const char *key);

/* Parse a literal `text` for `shape` into bytes (the IrAttrs.literal form). */
IrStatus ir_literal_parse(IrArena *a, const IrShape *shape, const char *text, size_t len,
                          uint8_t **data, int64_t *nbytes, IrDiag *d);

/* ------------------------------------------------------------------ */
/* print.c                                                             */
/* ------------------------------------------------------------------ */

/* Print a module as HLO text that XLA and tessel read back to the same
 * module. Returns a heap string (ts_malloc) or NULL on OOM. */
char *ir_print_module(const IrModule *m);
/* ir_print_module with `tail` (may be NULL) appended: a text that follows
 * the module (a plan file's // lines) in the same buffer, never copied or
 * moved. Heap string (ts_malloc) or NULL on OOM. */
char *ir_print_module_then(const IrModule *m, const char *tail);
/* Print one instruction line (without indentation or newline). */
char *ir_print_instr(const IrModule *m, const IrComputation *c, const IrInstr *ins);
/* Print a literal of `shape` from bytes as XLA does ("{1, 2, 3}"). */
char *ir_literal_str(const IrShape *shape, const uint8_t *data);

/* ------------------------------------------------------------------ */
/* infer.c / verify.c / topo.c                                         */
/* ------------------------------------------------------------------ */

/* Infer the result shape of `ins` from its operands and attributes into
 * *out (arena-allocated). IR_EINPUT with a message naming the problem. */
IrStatus ir_infer_shape(const IrModule *m, const IrComputation *c, const IrInstr *ins,
                        IrShape *out, IrArena *a, IrDiag *d);

/* Verify a whole module: operand counts and types, attributes, inferred
 * shapes against declared ones, callees and their signatures, cycles,
 * duplicate names, undefined names, parameters, shardings against shapes and
 * num_partitions*replica_count, limits. The first error is reported at the
 * instruction's position. */
IrStatus ir_verify(const IrModule *m, const IrLimits *lim, IrDiag *d);
/* Every id a collective's replica_groups or a collective-permute's pairs
 * name is within a world of n partitions x r replicas (by ir_group_mode;
 * a count of 0 is not known: what it numbers is not checked), and an
 * all-gather's, reduce-scatter's or all-to-all's shapes agree with the size
 * of its groups there (ir_group_size; inference read a size the header did
 * not give off the declared shape): the compile driver checks the module it is given before anything else,
 * `tessel check` (ts_module_check_devices) the same, with the same error at
 * the instruction (the run found it on the first device). */
IrStatus ir_verify_groups(const IrModule *m, int64_t n, int64_t r, IrDiag *d);
/* ir_verify for a module whose names are known to be unique in their
 * scopes (`names_unique`: the parser's tables refuse a duplicate as it is
 * read): the duplicate-name hashing, a cache miss per instruction, is
 * skipped; the rest, name lengths included, is checked as by ir_verify. */
IrStatus ir_verify_names_unique(const IrModule *m, const IrLimits *lim, IrDiag *d, bool names_unique);

/* Instruction indices of `c` in an order where operands (and control
 * predecessors) come before users; every instruction appears once (also
 * ones the root does not reach). *order is heap-allocated (ts_malloc). Fails
 * with IR_EINPUT naming an instruction on a cycle. */
IrStatus ir_topo_order(const IrModule *m, const IrComputation *c, int32_t **order, IrDiag *d);

/* ---- exec_order.c: the executor's order of one computation ---- */

/* Does an instruction of this opcode have an effect besides its value
 * (custom-call, infeed/outfeed, send/recv and their -done, rng state)?
 * The executor runs every such instruction, used or not. */
bool ir_op_has_side_effect(IrOpcode op);
/* Where ir_exec_order stopped: instruction `at`'s predecessor number k
 * (operands first, then control predecessors) is `other`, an instruction
 * on the current path (a cycle), or -1 when out of range. */
typedef struct IrExecOrderError {
    int32_t at, k, other;
} IrExecOrderError;
/* The order device/exec.c runs c in: a depth-first post-order over
 * operands and control predecessors from each side-effect instruction (in
 * definition order), then from the root. order has room for c->ninstr
 * entries; *n is set to the number of instructions that run (unreached
 * ones are left out). IR_EINPUT with *err on a cycle or an out-of-range
 * edge; IR_ENOMEM. Writes no diagnostic (the caller words it). */
IrStatus ir_exec_order(const IrComputation *c, int32_t *order, int32_t *n, IrExecOrderError *err);
/* ir_exec_order of c, a computation of m (NULL: unscheduled); when m is
 * marked is_scheduled=true, the same instructions in the order the
 * module lists them (the stable topological order, ir_topo_order), as XLA
 * runs a scheduled module. In both, each parameter's get-tuple-elements
 * come right after the parameter (the tuple dies at once; exec_order.c).
 * The order the executor and the memory estimate take. */
IrStatus ir_exec_order_of(const IrModule *m, const IrComputation *c, int32_t *order, int32_t *n,
                          IrExecOrderError *err);

/* ---- schedule_overlap.c: asynchronous pairs overlapping other work ---- */
/* -start ops (all-reduce-start, all-gather-start, collective-permute-start,
 * async-start) and their -done side (with async-update). */
bool ir_async_start_op(IrOpcode op);
bool ir_async_done_op(IrOpcode op);
/* Reorder order[0..n) (a topological order of c's instructions, operands
 * first) so that each -start runs as soon as it can and each -done as late
 * as it can: the work between them overlaps the collective. The executor
 * runs an unscheduled computation with collectives in this order
 * (device/exec.c), and the memory estimate follows it (partition/memory.c).
 * Unchanged when there is no -start. Deterministic (every device of a
 * program gets one order). Fails only for memory (IR_ENOMEM, order
 * unchanged). */
IrStatus ir_schedule_overlap(const IrComputation *c, int32_t *order, int32_t n);

/* ------------------------------------------------------------------ */
/* fusion_find.c: the groups device/exec.c runs fused                  */

/* Smaller arrays run unfused: the loop's set-up would cost more than the
 * memory traffic it saves (and reducers, which run per element, stay on
 * the cheapest path). */
#define IR_FUSION_MIN_ELEMENTS 1024
/* Nodes per group, bounding scratch memory and set-up. */
#define IR_FUSION_MAX_NODES 64
/* Row groups: the row length (elements) bounds the scratch (one row per
 * node, at most IR_FUSION_MAX_NODES * 8 * IR_FUSION_ROW_MAX bytes);
 * shorter rows than IR_FUSION_ROW_MIN cost more in per-row set-up than
 * fusion saves (unless small, for tests). */
#define IR_FUSION_ROW_MAX 16384
#define IR_FUSION_ROW_MIN 128
/* Transposes join a group only with an operand this small (elements): it
 * is read through strides, in cache. */
#define IR_FUSION_TRANSPOSE_MAX (1 << 16)

typedef struct IrFusionGroup {
    int32_t root;        /* instruction whose value the group produces */
    int32_t nnodes;
    int32_t *nodes;      /* instruction indices, operands first, root last */
    int32_t nleaves;
    int32_t *leaves;     /* distinct instructions read from outside the group */
    int32_t *leaf_refs;  /* operand references to each leaf from the nodes */
    bool *leaf_direct;   /* every reference reads it element for element (not a
                          * broadcast's source, not a scalar operand): its
                          * buffer may take the result */
    int32_t nouter;      /* a row group: the number of outer dims of its
                          * shape (the dims of `space`); -1 otherwise */
    int32_t space;       /* a row group: an instruction of shape S */
    bool dot_transposed; /* nodes {dot, transpose}: the dot writes its result
                          * transposed */
    int32_t nextra;
    int32_t *extra;      /* a multi-output group (merge_outputs): the nodes
                          * besides the root whose values are read outside
                          * the group too, made whole when the group runs */
    int32_t dot;         /* the node that is a dot (a dot-transpose pair's, or
                          * one reading transposes in place), else -1 */
    bool dot_lower;      /* the dot's result is read only on and below the
                          * diagonal of its last two dims (a causal mask's
                          * scores, ir_dot_reads_lower): the rest is not
                          * computed */
    int32_t dot_scale;   /* a dot epilogue (fusion_find.c): the divide or
                          * multiply by a broadcast scalar applied to the
                          * dot's result, or -1 */
    int32_t dot_select;  /* the select (or the call of a select) of the
                          * (scaled) dot's result against a broadcast scalar
                          * under a broadcast pred [M,N]: the root, or -1 */
    bool columns;        /* a column group: the root is a reduce over major
                          * dims (ir_fusion_column_reduce) of the elementwise
                          * tree below it, whose values never exist whole */
    int32_t dot_softmax; /* the divide of a softmax over the last dim of the
                          * dot_select's value (ir_fusion_softmax): then the
                          * root, and dot_select an interior node; or -1 */
    int32_t dot_then;    /* attention's P.V: the node (the root, a dot) that
                          * is the one reader of the softmax's probabilities
                          * (dot_softmax, then an interior node), as its lhs
                          * contracted over their last dim: P is made a block
                          * of rows at a time, never whole; or -1. `dot` is
                          * then the scores' dot */
    int32_t dot_feeds;   /* elementwise consumers in the dot's epilogue
                          * (fusion_find.c's dot_consumers): the value, the
                          * dot or its dot-transpose pair's transpose, that
                          * the group's other nodes (an elementwise tree,
                          * the root f32) read element for element, each
                          * block of it as the GEMM finishes it; or -1 */
} IrFusionGroup;

typedef struct IrFusion {
    int32_t ngroups;
    IrFusionGroup *groups;
    int32_t *group_of;   /* per instruction of the computation: its group, or -1
                          * (a broadcast run inside several groups: the first) */
} IrFusion;

typedef struct IrFusionOptions {
    bool off;   /* no groups */
    bool small; /* arrays and rows of any size fuse (tests) */
} IrFusionOptions;

/* The groups of computation c (of m). order/norder: the instructions that
 * run, operands first (every user of an instruction is among them). With
 * opt NULL or opt->off, or when nothing fuses, *out is empty (group_of
 * NULL). Fails only on OOM (IR_ENOMEM, recorded in d). */
IrStatus ir_fusion_find(const IrModule *m, const IrComputation *c, const int32_t *order, int32_t norder,
                        const IrFusionOptions *opt, IrFusion *out, IrDiag *d);
void ir_fusion_free(IrFusion *f);
/* Positions of an instruction among g's leaves and nodes, -1 when absent. */
int32_t ir_fusion_leaf_index(const IrFusionGroup *g, int32_t instr);
int32_t ir_fusion_node_index(const IrFusionGroup *g, int32_t instr);
/* Has array shape t the outer dims of S (its first nouter), up to dims of
 * size 1 (f32[4,1] and f32[4] for S f32[4,32] and nouter 1)? Such a value
 * holds one element a row, in row order. */
bool ir_fusion_is_outer(const IrShape *S, int32_t nouter, const IrShape *t);
/* Does node ins read its operand (a leaf) through strides (a broadcast or
 * a transpose)? */
bool ir_fusion_strided(const IrInstr *ins);
/* Does the reduce kernel's fast path fold values of type t with simple
 * reducer op (ir_simple_reducer) in one accumulator domain: float, signed,
 * unsigned or pred, and no bitwise reducer on floats? */
bool ir_reducer_folds(IrType t, IrOpcode op);
/* Is ins a reduce the executor runs as the root of a column group: one
 * input of c, a scalar init, a simple reducer that folds (ir_reducer_folds),
 * and, its dims of size 1 dropped and neighbours of a kind merged, the
 * innermost dim kept and some dim reduced (batch norm's sums over N, H, W
 * of NHWC; a bias gradient's over the batch), so that the reduce kernel
 * folds whole rows of kept elements into their accumulators in the input's
 * order (k_reduce.c's column folds)? */
bool ir_fusion_column_reduce(const IrModule *m, const IrComputation *c, const IrInstr *ins);
/* Is call's callee a select of its parameter `operand` against a
 * broadcast scalar parameter under a broadcast pred [M,N] parameter (JAX's
 * `_where`), as a dot epilogue takes it in? */
bool ir_fusion_epilogue_call(const IrModule *m, const IrInstr *call, int32_t operand);
/* A softmax over the last dim of x, as JAX writes it: p = e / spread(z),
 * z = reduce(e, add), e = exp(x - spread(m)), m = reduce(x, maximum),
 * optionally maximum'ed with a broadcast scalar (in either operand
 * order); each spread a broadcast of the outer value over the rows, after
 * reshapes and broadcasts that keep its elements in order. All f32. */
typedef struct IrSoftmax {
    int32_t x, sub, exp, div;  /* the value, x - m, e, the divide (p) */
    int32_t rmax, rsum;        /* the reduces (their inits: operand 1) */
    int32_t clamp;             /* maximum(m, broadcast scalar), or -1 */
    bool clamp_first;          /* the scalar is the maximum's operand 0 */
    int32_t clamp_scalar;      /* the rank-0 value the clamp broadcasts */
    int32_t nnodes;
    int32_t nodes[24];         /* every instruction of it but x (and the inits) */
} IrSoftmax;
/* Is instruction div of c (of m) the divide of such a softmax? */
bool ir_fusion_softmax(const IrModule *m, const IrComputation *c, int32_t div, IrSoftmax *s);

/* causal.c: is dot instruction `dot` of c (one free dim each side) read
 * only where its result's last index is at most the one before, every
 * reader a select over a causal mask (compare of iotas) or an elementwise
 * op passing it on, through calls? */
bool ir_dot_reads_lower(const IrModule *m, const IrComputation *c, int32_t dot);
/* The same for many dots of one module: the computations' readers are
 * indexed once (ir_causal_new; NULL where memory ran out). */
typedef struct IrCausal IrCausal;
IrCausal *ir_causal_new(const IrModule *m);
bool ir_causal_dot_reads_lower(IrCausal *k, const IrComputation *c, int32_t dot);
void ir_causal_free(IrCausal *k);

/* sort_keys.c: a sort comparator's per-element keys. Roles of an
 * instruction (bits of IrSortKeys.role): */
enum {
    IR_SORT_REACH = 1, /* the root needs it */
    IR_SORT_NODE = 2,  /* mixed (depends on both sides): evaluated per comparison */
    IR_SORT_LEAF = 4,  /* a one-side operand of a node: a key */
    IR_SORT_LIFT = 8,  /* computed once for the whole operand (a key that is
                        * no parameter, and what it needs) */
};
typedef struct IrSortKeys {
    bool native;      /* the comparator fits the native path (else every role
                       * but IR_SORT_REACH may be partial) */
    int32_t n;        /* the comparator's instructions (0: not classified) */
    int32_t *order;   /* a topological order of them (ir_topo_order) */
    uint8_t *dep;     /* per instruction: sides it depends on (1 lhs: even
                       * parameters, 2 rhs: odd ones, 3 both) */
    uint8_t *role;    /* per instruction: IR_SORT_* bits */
} IrSortKeys;
/* The classification of comparator c of a sort of `noperands` operands
 * (c's parameters lhs, rhs of each), as the sort kernel's native path
 * takes it. IR_OK with out->native false when it takes the general path
 * (out->n 0 when c's parameters do not match); the topological order's
 * error (in d), or IR_ENOMEM (not in d). Free with ir_sort_keys_free. */
IrStatus ir_sort_keys(const IrModule *m, const IrComputation *c, int32_t noperands, IrSortKeys *out, IrDiag *d);
void ir_sort_keys_free(IrSortKeys *k);

/* allreduce_add.c: the all-reduce + add pairs of c the executor runs as
 * one collective (the file's header says which qualify). order/norder:
 * the instructions that run, operands first, a fusion group's interior
 * left out; group_of: each instruction's fusion group or -1 (NULL: none).
 * fold (c->ninstr entries) gets, per all-reduce taking its add in, the
 * add's index, else -1. Returns the number of pairs (0 also when memory
 * ran out: nothing is taken in, which is always correct). */
int32_t ir_allreduce_adds(const IrModule *m, const IrComputation *c, const int32_t *order, int32_t norder,
                          const int32_t *group_of, int32_t *fold);

#endif /* TESSEL_IR_H */
