/*
 * runtime.h: layer `runtime/`: everything that runs a compiled or reference
 * program and moves tensors in and out of it: .npy files, deterministic
 * random inputs, binding user inputs to entry parameters, writing outputs,
 * the host program and compiled programs. Every collective is coll/'s
 * (coll/coll.h); runtime/ calls it from its device threads (local.c) with
 * the transport its caller gives (coll/'s MPI transport under mpirun, none
 * in one process). runtime/ never calls MPI itself: the ranks' agreement
 * and the gathers of outputs go through coll/coll.h's coll_mpi_*.
 *
 * Files of this layer (the header reads as a table of contents; each file
 * has its own section below, or in the private header named):
 *   npy.c       NumPy .npy read/write (v1.0-3.0), whole files and boxes
 *   npy_disk.c  how bf16, f8/f4, sub-byte ints travel on disk (as f32, i8, u8)
 *   array_in.c  inputs from the caller's memory (TsArray), held to .npy's rules
 *   feed.c      --infeed files for infeed/recv, outfeed/send values kept
 *   random.c    the deterministic random inputs of DESIGN.md (splitmix64)
 *   inputs.c    bind --input/--random-inputs to entry parameters, run the
 *               reference executor, summarise outputs
 *   input_names.c  which parameter an input key names; the error listing the
 *               names that work (run_internal.h)
 *   local_data.c  a host's part of a sharded input or output, as
 *               jax.make_array_from_process_local_data lays it out (run_internal.h)
 *   signature.c a compiled program's logical parameters as a module
 *   shards.c    cutting a value into shards and putting them together
 *   shard_io.c  per-host input reads: only the boxes of the host's devices
 *   compare.c   the oracle's comparison of two results
 *   replay_inputs.c  each device's inputs when an SPMD program is replayed
 *   host_program.c   running the host program of a compiled program: its
 *               instructions, the cluster calls (program.h)
 *   local.c     the devices of one host as threads: the world (barrier,
 *               abort), the device threads, steps; collectives go to coll/
 *   mpi_agree.c the ranks agree on what they run, before any step
 *   mpi_gather.c  the outputs of every host to rank 0
 *   (run_internal.h: what local.c, inputs.c, input_names.c, local_data.c
 *   and shard_io.c share with each other and with api/)
 *
 * Library code: never prints, never exits; every function returns an
 * IrStatus and records the first error in an IrDiag (IR_EINPUT for bad
 * user input, exit status 2 in the command line).
 */
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H

#include "../coll/coll.h"
#include "../device/device.h"

#include <pthread.h>
#include "../ir/ir.h"
#include "../partition/partition.h"

/* ------------------------------------------------------------------ */
/* npy.c                                                               */
/* ------------------------------------------------------------------ */

/* The largest .npy header accepted on read (numpy's own default limit is
 * 10000 bytes; a longer header is either hostile or not a tensor we make). */
#define RT_NPY_MAX_HEADER 65536

/* What a .npy header says. `type` is the tessel element type of the dtype
 * on disk (IR_F32 for <f4; there is no bf16 on disk). `descr` is the dtype
 * text as written ("<f4"), for messages. */
typedef struct RtNpyHeader {
    int major, minor;          /* format version, 1.0 .. 3.0 */
    IrType type;
    char descr[16];
    int32_t rank;
    int64_t dims[IR_MAX_RANK];
    int64_t data_offset;       /* bytes before the array data */
    int64_t data_bytes;        /* elements * element size */
} RtNpyHeader;

/* The dtype text numpy uses for elements of type t as they travel on disk
 * ("<f4"; bf16, f8 and f4 travel as "<f4", s4/s2 as "|i1", u4/u2 as
 * "|u1", c64 is "<c8"); NULL for types .npy cannot hold (token, opaque,
 * tuple). */
const char *rt_npy_descr(IrType t);

/* Parse the first `len` bytes of a .npy file (magic, version, header
 * length, the header dict). `file` names it in messages. On success fills
 * *h; on error IR_EINPUT (IR_EUNSUPPORTED for a valid but unsupported
 * dtype) with a message saying what is wrong. Never reads past len: when
 * the header is longer than len, IR_EINPUT "truncated header". */
IrStatus rt_npy_parse_header(const uint8_t *buf, size_t len, const char *file, RtNpyHeader *h,
                             IrDiag *d);

/* What a file of this st_mode is, for messages ("a FIFO", "a socket", "a
 * character device", ...). Static string. */
const char *rt_file_kind(unsigned mode);
/* Read a whole .npy file into `out`, which holds the array `expect` (an
 * array shape; bf16 is converted from the <f4 on disk, rounding to nearest
 * even) in the in-memory form of IrAttrs.literal: ir_shape_bytes(expect)
 * bytes. `what` names the destination in messages ("parameter 0"; NULL:
 * "the expected array"). Dtype, order, shape, truncated data and trailing
 * bytes are checked before anything is read; errors are IR_EINPUT and
 * name the file and the reason (e.g. "x.npy: dtype <f8 does not match
 * parameter 0 f32[4,16] (expected <f4)"); I/O errors are IR_ERUNTIME. */
IrStatus rt_npy_read(const char *path, const IrShape *expect, const char *what, void *out,
                     IrDiag *d);

/* Read only the box [lo[i], hi[i]) of each dimension of the array in
 * `path` (whose whole shape must be `expect`) into `out`, packed row-major
 * with dims hi-lo. Reads by seeking: only the box's bytes are read, so a
 * host can read its shard alone. lo/hi are checked (0 <= lo <= hi <= dim),
 * a bad box is IR_EINPUT. Same checks and errors as rt_npy_read. */
IrStatus rt_npy_read_box(const char *path, const IrShape *expect, const char *what,
                         const int64_t *lo, const int64_t *hi, void *out, IrDiag *d);

/* The checks of rt_npy_read (header, dtype and shape against `expect`,
 * the file's size against the data the header declares) without reading
 * any data: a caller that allocates for the array checks first, so a
 * header that lies about its size is refused, not allocated for. */
IrStatus rt_npy_check(const char *path, const IrShape *expect, const char *what, IrDiag *d);

/* Write an array of `shape` from `data` (in-memory form as above) as a
 * .npy v1.0 file (v2.0 when the header needs it) at exactly `path`,
 * creating or truncating it. On failure the file at `path` is removed
 * (unless it is not a regular file: a device or a pipe).
 * IR_ERUNTIME on I/O errors, IR_EUNSUPPORTED for complex/token types. */
IrStatus rt_npy_write_file(const char *path, const IrShape *shape, const void *data, IrDiag *d);
/* The same into the open file descriptor fd (borrowed: written through a
 * duplicate, left open at the end of the data); `path` names it in
 * errors. IR_ERUNTIME on a write error. */
IrStatus rt_npy_write_fd(int fd, const char *path, const IrShape *shape, const void *data, IrDiag *d);


/* ------------------------------------------------------------------ */
/* npy_disk.c: types that travel on disk as another                    */
/* ------------------------------------------------------------------ */

/* The type whose elements represent t in a .npy file: IR_F32 for bf16,
 * the f8 and f4 kinds; IR_S8 for s4/s2; IR_U8 for u4/u2; t itself else. */
IrType rt_npy_disk_type(IrType t);
/* Convert n elements from disk type to memory type t (rounding to nearest
 * even for floats). A value t cannot hold is IR_EINPUT naming `path` and
 * the element (its index: `first` + position). */
IrStatus rt_npy_from_disk(IrType t, const void *disk, int64_t n, void *out, int64_t first,
                          const char *path, IrDiag *d);
/* Convert n elements of type t to its disk type (exact: every value of t
 * is a value of its disk type). Can't fail. */
void rt_npy_to_disk(IrType t, const void *mem, int64_t n, void *disk);

/* ------------------------------------------------------------------ */
/* feed.c: host transfers of a run                                      */
/* ------------------------------------------------------------------ */

/* The host side of infeed/outfeed and send/recv with is_host_transfer:
 * `hooks` (pass it as DevExecOptions.host) reads files[next++] for each
 * array leaf an infeed or recv asks for, and keeps each array leaf an
 * outfeed or send gives (kept[0..nkept), in program order). Safe to call
 * from several executor threads (one lock). */
typedef struct RtFeed {
    int32_t nfiles, next;
    const char *const *files;   /* borrowed */
    int32_t nkept, cap;
    DevValue **kept;            /* owned references */
    pthread_mutex_t mu;
    DevHostTransfers hooks;
} RtFeed;

void rt_feed_init(RtFeed *f, int32_t nfiles, const char *const *files);
void rt_feed_free(RtFeed *f);
/* The kept values as one tuple (api/outdir.c writes them as
 * DIR/outfeed_<i>.npy); NULL on OOM. */
DevValue *rt_feed_outfeeds(const RtFeed *f);

/* ------------------------------------------------------------------ */
/* random.c                                                            */
/* ------------------------------------------------------------------ */

/* splitmix64 as DESIGN.md "Deterministic random inputs" defines it.
 * rt_splitmix64(0) == 0xe220a8397b1dcdaf. */
uint64_t rt_splitmix64(uint64_t x);


/* Store the value for bits `h` as element `j` of `out` (type t):
 * floats rounded to nearest even in the type from the double above,
 * signed ints (h mod 17) - 8, unsigned ints h mod 17, pred h & 1.
 * IR_EUNSUPPORTED for complex, token and tuple types. */
IrStatus rt_random_store(IrType t, uint64_t h, void *out, int64_t j);

/* Fill the whole array `shape` (leaf `leaf`) into `out`
 * (ir_shape_bytes(shape) bytes). IR_EUNSUPPORTED for types without a
 * rule; IR_EINPUT when the shape is not an array or its size overflows. */
IrStatus rt_random_fill(uint64_t seed, uint64_t leaf, const IrShape *shape, void *out,
                        IrDiag *d);

/* Fill only the box [lo[i], hi[i]) of the leaf's logical shape `shape`
 * into `out`, packed row-major with dims hi-lo; element index i is the
 * row-major index in the whole shape, so the union of the boxes of all
 * shards equals rt_random_fill. IR_EINPUT for a bad box. */
IrStatus rt_random_fill_box(uint64_t seed, uint64_t leaf, const IrShape *shape,
                            const int64_t *lo, const int64_t *hi, void *out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* inputs.c                                                            */
/* ------------------------------------------------------------------ */

/* One user input: `key` is INDEX, INDEX.LEAF, NAME or NAME.LEAF (a
 * parameter instruction name of the entry computation, or the name JAX
 * records for it; input_names.c), `path` a .npy file. */
typedef struct RtArray RtArray;
typedef struct RtInput {
    const char *key;
    const char *path;          /* a .npy file, or NULL when `array` is set */
    const RtArray *array;      /* an array in memory (array_in.c), or NULL */
} RtInput;

/* ------------------------------------------------------------------ */
/* array_in.c: inputs from memory                                      */
/* ------------------------------------------------------------------ */

/* An array in the caller's memory, C order, its elements as a .npy file
 * would hold them: `dtype` is the NumPy type string (rt_npy_descr of the
 * parameter's type: bf16 and the f8 kinds as "<f4", ...). */
struct RtArray {
    const char *dtype;
    int32_t rank;
    const int64_t *dims;
    const void *data;
    size_t nbytes;
};

/* Copy the box [lo, hi) of array `a`, which must hold exactly `expect`
 * (dtype, dims and byte count are checked: IR_EINPUT naming `what`), into
 * `out` in the in-memory form of `expect`, packed with dims hi - lo, with
 * the .npy reader's conversions (rt_npy_from_disk). */
IrStatus rt_array_read_box(const RtArray *a, const IrShape *expect, const char *what, const int64_t *lo,
                           const int64_t *hi, void *out, IrDiag *d);
/* "(4, 16)", "(5,)": dims as NumPy prints a shape, for messages (cut to
 * fit cap bytes). */
void rt_dims_text(char *buf, size_t cap, int32_t rank, const int64_t *dims);

/* How to bind the entry parameters. */
typedef struct RtBindOptions {
    int32_t ninputs;
    const RtInput *inputs;
    bool random;               /* fill unbound leaves with random inputs */
    uint64_t seed;             /* for random */
    /* Unbound leaves of the parameters marked as optimizer state
     * (frontend_attributes={tessel_state="zeros"}, written by `tessel grad
     * --adam`) start at zero, before `random` fills the rest. */
    bool zero_state;
    /* Arrays hold this host's part of their input, not the whole
     * (rt_local_layout; rt_read_shards only). */
    bool process_local;
} RtBindOptions;

/* The bound arguments of the entry computation: args[p] is a new reference
 * to the value of parameter p (a tuple value for tuple parameters). */
/* Called after each step of a run (progress lines): step s (1-based) of
 * `steps`, the seconds it took, and the root value it gave (on a device
 * run, device 0's shard of it; borrowed for the call). Only the process
 * that holds device 0 calls it (rank 0 under MPI), from the thread that
 * runs device 0. */
typedef struct RtStepHook {
    void (*fn)(void *ctx, int64_t step, int64_t steps, double seconds, const DevValue *result);
    void *ctx;
} RtStepHook;

typedef struct RtArgs {
    int32_t nargs;
    DevValue **args;
    /* Where tessel_save keeps the values it names (set by the caller
     * after binding; NULL: not kept). */
    struct RtSaves *saves;
} RtArgs;

/* The values tessel_save named in a run: NAME -> the last value saved
 * under it, written with the run's outputs as DIR/NAME.npy (never during
 * the run: a failed run leaves none). Zero-initialise; rt_saves_free. */
typedef struct RtSaves {
    int32_t n, cap;
    char **names;            /* owned */
    DevValue **values;       /* owned references */
} RtSaves;
void rt_saves_free(RtSaves *s);
/* Is `name` one a model may give tessel_save? NULL when it is, else why
 * not (static text): a name is a file name inside the output directory,
 * never a path, and never one of the run's own files. */
const char *rt_save_name_problem(const char *name, size_t len);

/* Number of leaves of the entry parameters (the k of random inputs runs
 * over 0..count-1); -1 if the module has no entry. */
int64_t rt_entry_leaf_count(const IrModule *m);

/* Bind inputs to the entry parameters of `m`: every leaf of every
 * parameter gets a file (checked against its shape and type), a random
 * fill (when opt->random) or, for token leaves, an empty token. Errors
 * (IR_EINPUT): an unknown key, a leaf bound twice, leaves left unbound
 * (the message names them all), and every .npy error. On success *out
 * owns the references (rt_args_free); on failure *out is empty. */
IrStatus rt_bind_inputs(const IrModule *m, const RtBindOptions *opt, RtArgs *out, IrDiag *d);
void rt_args_free(RtArgs *a);

/* The reference runs a module on one device: a module that declares
 * several devices (num_partitions x replica_count > 1) and holds a
 * collective exchanging data between them (groups absent, empty or of
 * more than one member; a collective-permute between two devices) would
 * give another answer than its devices: IR_EUNSUPPORTED at the collective.
 * rt_run_reference_steps checks it first. */
IrStatus rt_check_reference(const IrModule *m, IrDiag *d);

/* A one-line summary of array value `v` for people:
 * "f32[4,8] min -1.2 max 3.4 mean 0.5 first [0.1, 0.2, 0.3, 0.4, ...]".
 * Heap string (ts_free) or NULL on OOM. */
char *rt_value_summary(const DevValue *v);

/* ------------------------------------------------------------------ */
/* replay_inputs.c: each device's inputs of a replayed SPMD program    */
/* ------------------------------------------------------------------ */

/* The seed device `device` draws its random inputs from when every
 * device gets its own (--per-device): splitmix64(seed ^
 * splitmix64(device)). Leaf k of the device's parameters then holds the
 * deterministic random inputs of DESIGN.md for that seed. */
uint64_t rt_device_seed(uint64_t seed, int64_t device);

/* The bind options of device `device` of `ndev` in a replay, from the
 * run's: an input keyed KEY@D binds KEY on device D only, one keyed KEY
 * on every device (KEY@D wins there); random inputs as the run's, from
 * rt_device_seed when `per_device`. IR_EINPUT for a device number that
 * is not one of the ndev. On success *out holds its own keys
 * (rt_device_bind_free). */
IrStatus rt_device_bind_options(const RtBindOptions *all, int64_t device, int64_t ndev, bool per_device,
                                RtBindOptions *out, IrDiag *d);
void rt_device_bind_free(RtBindOptions *o);

/* ------------------------------------------------------------------ */
/* signature.c: the logical inputs of a compiled program               */
/* ------------------------------------------------------------------ */

/* A module whose entry has the program's logical parameters (names and
 * shapes of the inputs), so rt_bind_inputs can bind user inputs to a
 * compiled program or a loaded plan. NULL on OOM. */
IrModule *rt_signature_module(const PlanCluster *c);

/* ------------------------------------------------------------------ */
/* shards.c: cutting full values into shards and putting them back     */
/* ------------------------------------------------------------------ */

/* The box of array shape `full` that partition `p` holds under `s`
 * (array sharding; not tiled: the whole array): along dim i it starts at
 * off[i] and has ext[i] valid elements of a shard of size[i] (the rest is
 * padding). Example: f32[5] in 2 tiles: p 0 off 0 ext 3 size 3, p 1 off 3
 * ext 2 size 3. */
void rt_shard_box(const IrShape *full, const IrSharding *s, int64_t p, int64_t *off, int64_t *ext,
                  int64_t *size);
/* The shard of `full` that partition `p` holds under `s` (padded with
 * zeros at the end of uneven dims), leaf by leaf for tuples. */
IrStatus rt_shard_value(const DevValue *full, const IrSharding *s, int64_t p, DevValue **out,
                        IrDiag *d);
/* Rebuild the full value of shape `full` from the shards shard[p] of
 * partitions p = 0..n-1 under `s` (padding dropped). shard[p] may be NULL
 * where needed[p] of rt_unshard_needed is false. */
/* needed[p] = true (n entries, set, never cleared) for the partitions
 * rt_unshard_value reads: the first holder of each tile of some leaf (the
 * other holders have copies). IR_ENOMEM only. */
IrStatus rt_unshard_needed(const IrShape *full, const IrSharding *s, int64_t n, bool *needed);
IrStatus rt_unshard_value(const IrShape *full, const IrSharding *s, int64_t n,
                          DevValue *const *shard, DevValue **out, IrDiag *d);

/* ------------------------------------------------------------------ */
/* compare.c: the oracle's comparison                                  */
/* ------------------------------------------------------------------ */

/* Compare a partitioned run's result with the reference (DESIGN.md, "The
 * oracle"): same shapes; integers and pred bit-equal; floats (and each
 * component of complex values) within rt_float_tolerance of the type times
 * the largest magnitude of the reference leaf, NaN where the reference has
 * NaN, and equal infinities. On mismatch returns false and writes a
 * description of the first difference into `why` (a heap string, ts_free)
 * when non-NULL. */
bool rt_values_match(const DevValue *ref, const DevValue *got, char **why);
/* The oracle's relative tolerance for a floating type: 1e-5 (f64), 1e-4
 * (f32), 2e-3 (f16), 2e-2 (bf16, the f8 and f4 kinds). */
double rt_float_tolerance(IrType t);

/* ------------------------------------------------------------------ */
/* mpi_agree.c: the ranks agree on what they run                      */
/* ------------------------------------------------------------------ */

/* The ranks' agreement before work: a fixed record of at
 * most RT_AGREE_FIELDS named fields, each a short text or a SHA-256. */
enum { RT_AGREE_FIELDS = 40, RT_AGREE_VALUE = 40 };
enum { RT_AGREE_UNUSED, RT_AGREE_TEXT, RT_AGREE_DIGEST, RT_AGREE_UNKNOWN };
typedef struct RtAgreeField {
    const char *what;        /* for messages: "the random inputs' seed" */
    uint8_t kind;            /* RT_AGREE_*: UNKNOWN when this rank could not work it out */
    char value[RT_AGREE_VALUE]; /* TEXT: NUL-padded; DIGEST: 32 bytes */
} RtAgreeField;
/* Every rank passes its n fields (n <= RT_AGREE_FIELDS; the same names in
 * the same order on every rank); one all-gather, then every rank compares
 * every rank's record with rank 0's. IR_OK when all are equal; else the
 * same IR_EINPUT on every rank naming the first field that differs, the
 * lowest rank that differs and both values ("rank 1's random inputs'
 * seed is \"8\", rank 0's is \"7\"") -- a field UNKNOWN on some rank
 * fails too. IR_ENOMEM / IR_ERUNTIME when this rank cannot take part (end
 * the job: the others may be in the gather). */
IrStatus rt_mpi_agree_fields(CollMpi *t, const RtAgreeField *f, int n, IrDiag *d);
/* ------------------------------------------------------------------ */
/* mpi_gather.c: the outputs of every host to rank 0                  */
/* ------------------------------------------------------------------ */

/* Gather the roots of this host's nlocal devices to rank 0, where all[g]
 * receives device g's (nlocal x ranks entries, new references; all is
 * not touched elsewhere). Every device's root has one shape. With
 * `wanted` (every rank passes the same), only devices g with wanted[g]
 * travel (all[g] stays NULL for the others): a replicated output crosses
 * the network once, not once per device. */
IrStatus rt_mpi_gather_devices(CollMpi *t, int64_t nlocal, DevValue **local, const bool *wanted, DevValue **all,
                               IrDiag *d);
/* Gather the root shards of this host's nlocal devices to rank 0, where
 * *out receives the full output (NULL elsewhere). */
IrStatus rt_mpi_gather_results(CollMpi *t, const PlanCluster *c, int64_t nlocal, DevValue **local,
                               DevValue **out, IrDiag *d);

#endif /* TESSEL_RUNTIME_H */
