/*
 * agree.c: what the ranks of ts_plan_run_mpi must share, as the fields of
 * the runtime's agreement (runtime/mpi_agree.c): each a short text kept
 * as it is (so a message can show both ranks' values: a seed, a step
 * count) or the SHA-256 of a longer one (the plan, the inputs).
 *
 * The fields, in the order they are compared (the first that differs is
 * the one named):
 *   tessel's build         the library's version and the GNU build id of
 *                          the ELF object it is linked into (the linker's
 *                          hash of its code): a host running another
 *                          build (an upgrade on some hosts only) computes
 *                          with other kernels, so it is named before its
 *                          other compile is (build_id)
 *   the compiled program   SHA-256 of its plan text but the model's path
 *                          (a model compiled on each rank with other
 *                          options, or another model, or a plan edited on
 *                          one host differs here)
 *   the model              SHA-256 of the model's or plan file's text, so
 *                          an output manifest's model_sha256 is every
 *                          rank's model
 *   the layout             hosts x local devices
 *   the random inputs      "off" or the seed (and per-device); whether
 *                          optimizer state starts at zero (zero_state)
 *   the inputs             in the order of what each binds (parameter,
 *                          leaf; not its key's text nor the order given),
 *                          what it binds and its source: a file by the
 *                          SHA-256 of its content (up to 64 MiB read
 *                          whole once on every rank, before its shards
 *                          are: two hosts' files of one path and size
 *                          but other bytes differ here; larger ones by a
 *                          1 MiB sample, hash_file), an array by its type, shape and
 *                          bytes (by type alone when process-local: each
 *                          rank's part is its own); the first eight
 *                          two fields each, its dtype and shape as text
 *                          ("<f8 (8, 4)": the message shows both ranks')
 *                          then its content (a difference names the
 *                          parameter), the count and the rest one more
 *   steps, the f32 GEMM library asked for (--sgemm), statistics,
 *   process-local outputs, the output device, the watched output, the
 *   limits (trips, memory): the options that change what runs, its
 *   results' bits or which collectives are made
 *   the caller's own       TsRunOptions.agree, e.g. the command line's
 *                          --output-dir and checkpoint options
 * The tuning is not compared (but the f32 GEMM library, above):
 * coll_mpi_tune made it rank 0's on every rank.
 *
 * ts_input_sha256 gives one input's value digest whatever its source (a
 * checkpoint records the inputs it was taken with by it: a resume may give
 * a file where the first run gave the array), ts_sha256 any bytes'.
 */
#include "api_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <link.h>
#include <nettle/sha2.h>

typedef struct Fields {
    RtAgreeField f[RT_AGREE_FIELDS];
    int n;
} Fields;

/* A field from len bytes: the text itself when it fits, else its SHA-256
 * (a text never passes for a digest: the kinds differ). */
static void add_bytes(Fields *fs, const char *what, const void *bytes, size_t len)
{
    if (fs->n >= RT_AGREE_FIELDS)
        return;
    RtAgreeField *f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    f->what = what;
    if (len <= RT_AGREE_VALUE && !memchr(bytes, 0, len)) {
        f->kind = RT_AGREE_TEXT;
        memcpy(f->value, bytes, len);
        return;
    }
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, len, bytes);
    f->kind = RT_AGREE_DIGEST;
    sha256_digest(&c, SHA256_DIGEST_SIZE, (uint8_t *)f->value);
}

/* A field that is the SHA-256 dg (32 bytes). */
static void add_digest(Fields *fs, const char *what, const uint8_t *dg)
{
    if (fs->n >= RT_AGREE_FIELDS)
        return;
    RtAgreeField *f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    f->what = what;
    f->kind = RT_AGREE_DIGEST;
    memcpy(f->value, dg, SHA256_DIGEST_SIZE);
}

/* 64 hex digits to 32 bytes; false when hex is not that ("" unknown). */
static bool unhex(const char *hex, uint8_t *out)
{
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = hex[2 * i + k];
            int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (x < 0)
                return false;
            v = v * 16 + x;
        }
        out[i] = (uint8_t)v;
    }
    return true;
}

static void add_text(Fields *fs, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add_text(Fields *fs, const char *what, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    add_bytes(fs, what, buf, n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A field this rank could not work out: every rank's agreement fails on
 * it (this rank's own error is said first by the caller). */
static void add_unknown(Fields *fs, const char *what)
{
    if (fs->n >= RT_AGREE_FIELDS)
        return;
    RtAgreeField *f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    f->what = what;
    f->kind = RT_AGREE_UNKNOWN;
}

/* Inputs with a field of their own (the first ones given); the others
 * share one. */
enum { OWN_INPUTS = 8, NAME = 96 };

/* Files up to this size are hashed whole; larger ones by a sample. */
#define WHOLE_BYTES ((int64_t)64 << 20)
enum { SAMPLES = 64, SAMPLE_BYTES = 16 << 10 };

/* dtype and shape as text into out ("<f4 (8, 4)"; rank < 0: the dtype
 * alone), so that ranks given inputs of other dtypes or shapes are told so
 * with both values, not by two digests. */
static void type_text(char *out, size_t n, const char *descr, int32_t rank, const int64_t *dims)
{
    size_t k = (size_t)snprintf(out, n, "%s", descr);
    if (rank >= 0 && k < n)
        k += (size_t)snprintf(out + k, n - k, " (");
    for (int32_t i = 0; rank > 0 && dims && i < rank && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (rank >= 0 && k < n)
        snprintf(out + k, n - k, rank == 1 ? ",)" : ")");
}

/* The type text of a .npy file from its first got bytes (the hash's first
 * read: the file is read once), "not a .npy file" when no header parses
 * there (the reader names the problem where the run binds it). */
static void npy_type(const uint8_t *head, size_t got, const char *path, char *out, size_t n)
{
    RtNpyHeader h;
    IrDiag d = {0};
    if (rt_npy_parse_header(head, got, path, &h, &d) == IR_OK)
        type_text(out, n, h.descr, h.rank, h.dims);
    else
        snprintf(out, n, "not a .npy file");
    ir_diag_clear(&d);
}

/* The SHA-256 of a large file's sample into c: its size, SAMPLES blocks
 * of SAMPLE_BYTES evenly spaced from its first byte to its last (1 MiB
 * read, whatever the size). false on a read error. */
static bool hash_sample(struct sha256_ctx *c, int fd, int64_t size, const char *path, char *type, size_t ntype)
{
    uint8_t buf[SAMPLE_BYTES];
    sha256_update(c, sizeof size, (const uint8_t *)&size);
    for (int k = 0; k < SAMPLES; k++) {
        int64_t off = (size - SAMPLE_BYTES) / (SAMPLES - 1) * k;
        for (size_t got = 0; got < sizeof buf;) {
            ssize_t r = pread(fd, buf + got, sizeof buf - got, (off_t)(off + (int64_t)got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return false;
            got += (size_t)r;
        }
        sha256_update(c, sizeof buf, buf);
        if (k == 0 && type)
            npy_type(buf, sizeof buf, path, type, ntype);
    }
    return true;
}

/* The SHA-256 of the whole file into hex (read once, 64 KiB at a time),
 * its type text from the first read. false on a read error. */
static bool hash_whole(int fd, const char *path, char hex[65], char *type, size_t ntype)
{
    struct sha256_ctx c;
    sha256_init(&c);
    uint8_t *buf = malloc((size_t)1 << 16);
    bool ok = buf != NULL;
    for (off_t off = 0; ok;) {
        ssize_t r = pread(fd, buf, (size_t)1 << 16, off);
        if (r < 0 && errno == EINTR)
            continue;
        ok = r >= 0;
        if (r <= 0)
            break;
        if (off == 0 && type)
            npy_type(buf, (size_t)r, path, type, ntype);
        sha256_update(&c, (size_t)r, buf);
        off += r;
    }
    free(buf);
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_digest(&c, sizeof dg, dg);
    if (ok)
        compile_digest_hex(dg, hex);
    return ok;
}

/* A file's content into c: the SHA-256 of the whole file up to
 * WHOLE_BYTES (hash_whole; the rank's own shard reads then come
 * from the page cache), of a 1 MiB sample above (hash_sample: a sharded
 * input of gigabytes is not read whole on every host, so two large files
 * that differ only between the sampled blocks pass), or what it is when
 * it cannot be read (missing, not a regular file: a FIFO is never waited
 * on): the reader says why on the ranks where it fails. */
static void hash_file(struct sha256_ctx *c, const char *path, char *type, size_t ntype)
{
    char line[96] = "a missing or unreadable file";
    if (type)
        snprintf(type, ntype, "not a .npy file");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        snprintf(line, sizeof line, "not a regular file");
    } else if (fd >= 0 && (int64_t)sb.st_size > WHOLE_BYTES) {
        struct sha256_ctx sc;
        sha256_init(&sc);
        if (hash_sample(&sc, fd, (int64_t)sb.st_size, path, type, ntype)) {
            memcpy(line, "sampled ", 8);
            sha256_digest(&sc, SHA256_DIGEST_SIZE, (uint8_t *)line + 8);
            sha256_update(c, 8 + SHA256_DIGEST_SIZE, (const uint8_t *)line);
            close(fd);
            return;
        }
    } else if (fd >= 0 && hash_whole(fd, path, line + 5, type, ntype)) {
        memcpy(line, "file ", 5);
    }
    if (fd >= 0)
        close(fd);
    sha256_update(c, strlen(line), (const uint8_t *)line);
}

/* One input into c: the parameter (and leaf) it binds, then a file's
 * content or an array's type, shape and bytes (its type alone when
 * process-local: each rank's part is its own). The key's text is not
 * hashed: "0" and the parameter's name bind the same thing. */
static void hash_input(struct sha256_ctx *c, const TsInput *in, int32_t param, int32_t leaf, bool process_local,
                       char *type, size_t ntype)
{
    int32_t bound[2] = {param, leaf};
    sha256_update(c, sizeof bound, (const uint8_t *)bound);
    if (param == INT32_MAX) /* a key nothing answers to: its text (the run refuses it) */
        sha256_update(c, strlen(in->key) + 1, (const uint8_t *)in->key);
    if (!in->array) {
        hash_file(c, in->path, type, ntype);
        return;
    }
    const TsArray *a = in->array;
    if (type)
        type_text(type, ntype, a->dtype ? a->dtype : "?", process_local ? -1 : a->rank, a->dims);
    char line[160];
    int n = snprintf(line, sizeof line, "array %s rank %d:", a->dtype ? a->dtype : "?", (int)a->rank);
    sha256_update(c, (size_t)n, (const uint8_t *)line);
    if (process_local)
        return;
    for (int32_t k = 0; a->dims && k < a->rank; k++)
        sha256_update(c, sizeof a->dims[k], (const uint8_t *)&a->dims[k]);
    if (a->data && a->nbytes)
        sha256_update(c, a->nbytes, a->data);
}

/* An input and what it binds (ts_plan_input_key; INT32_MAX and its
 * position where nothing answers to the key). */
typedef struct Bound {
    int32_t param, leaf, i;
} Bound;

static int bound_order(const void *a, const void *b)
{
    const Bound *x = a, *y = b;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    if (x->leaf != y->leaf)
        return x->leaf < y->leaf ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* The inputs in the order of what they bind (parameter, leaf), so two
 * ranks that give the same bindings in another order, or by another key
 * ("0" and "x"), agree. The first OWN_INPUTS a field each, named by what
 * they bind ("input of parameter 0"), so a difference names the
 * input in the same words on every rank; the count and the rest in one
 * more field. */
static void add_inputs(Fields *fs, const TsPlan *p, const TsRunOptions *o, char (*names)[NAME], char (*types)[NAME])
{
    uint8_t dg[SHA256_DIGEST_SIZE];
    struct sha256_ctx c;
    Bound *b = o->ninputs > 0 ? malloc((size_t)o->ninputs * sizeof *b) : NULL;
    if (o->ninputs > 0 && !b) {
        add_unknown(fs, "the inputs");
        return;
    }
    for (int32_t i = 0; i < o->ninputs; i++) {
        TsDiag d = {0};
        b[i].i = i;
        if (ts_plan_input_key(p, o->inputs[i].key, &b[i].param, &b[i].leaf, &d) != TS_OK) {
            b[i].param = INT32_MAX;
            b[i].leaf = i;
        }
        ts_diag_clear(&d);
    }
    if (o->ninputs > 1)
        qsort(b, (size_t)o->ninputs, sizeof *b, bound_order);
    for (int32_t j = 0; j < o->ninputs && j < OWN_INPUTS; j++) {
        const TsInput *in = &o->inputs[b[j].i];
        char what[80];
        if (b[j].param == INT32_MAX)
            snprintf(what, sizeof what, "input given as '%.40s' (which binds nothing)", in->key);
        else if (b[j].leaf >= 0)
            snprintf(what, sizeof what, "input of parameter %d, leaf %d", (int)b[j].param, (int)b[j].leaf);
        else
            snprintf(what, sizeof what, "input of parameter %d", (int)b[j].param);
        snprintf(names[j], NAME, "%.70s (by content)", what);
        snprintf(types[j], NAME, "%.70s (dtype and shape)", what);
        struct stat sb;
        if (!in->array && (stat(in->path, &sb) != 0 || !S_ISREG(sb.st_mode))) {
            /* Said as such, so that the message shows which rank lacks the
             * file (a --checkpoint-dir the hosts do not share, a path only
             * one host has) rather than two digests. */
            add_text(fs, types[j], "no regular file"); /* (short: a path would not fit as text) */
            add_text(fs, names[j], "no regular file at %.200s", in->path);
            continue;
        }
        char type[200];
        sha256_init(&c);
        hash_input(&c, in, b[j].param, b[j].leaf, o->process_local, type, sizeof type);
        sha256_digest(&c, sizeof dg, dg);
        /* the dtype and shape first: a difference there is named with both */
        add_text(fs, types[j], "%s", type);
        add_digest(fs, names[j], dg);
    }
    sha256_init(&c);
    char count[32];
    int n = snprintf(count, sizeof count, "%d inputs", (int)o->ninputs);
    sha256_update(&c, (size_t)n, (const uint8_t *)count);
    for (int32_t j = OWN_INPUTS; j < o->ninputs; j++)
        hash_input(&c, &o->inputs[b[j].i], b[j].param, b[j].leaf, o->process_local, NULL, 0);
    sha256_digest(&c, sizeof dg, dg);
    add_digest(fs, "the number of inputs and those after the eighth (what they bind and their content)", dg);
    free(b);
}

/* An input's value into c, whatever its source: the dtype text, the dims
 * and the array bytes, of a .npy file (its header parsed, the data read
 * whole) or of a TsArray alike, so a file and the same array saved with
 * numpy.save give one digest. A file that cannot be read as a .npy array
 * gives what it is (its reader names the problem when the run binds it). */
static void hash_value(struct sha256_ctx *c, const TsInput *in)
{
    char line[160];
    if (in->array) {
        const TsArray *a = in->array;
        int n = snprintf(line, sizeof line, "%s %d:", a->dtype ? a->dtype : "?", (int)a->rank);
        sha256_update(c, (size_t)n, (const uint8_t *)line);
        for (int32_t k = 0; a->dims && k < a->rank; k++)
            sha256_update(c, sizeof a->dims[k], (const uint8_t *)&a->dims[k]);
        if (a->data && a->nbytes)
            sha256_update(c, a->nbytes, a->data);
        return;
    }
    int fd = open(in->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    uint8_t *head = malloc(RT_NPY_MAX_HEADER);
    RtNpyHeader h;
    IrDiag d = {0};
    ssize_t got = head && fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? pread(fd, head, RT_NPY_MAX_HEADER, 0)
                                                                                : -1;
    bool ok = got > 0 && rt_npy_parse_header(head, (size_t)got, in->path, &h, &d) == IR_OK &&
              h.data_offset + h.data_bytes == (int64_t)sb.st_size;
    ir_diag_clear(&d);
    free(head);
    if (ok) {
        int n = snprintf(line, sizeof line, "%s %d:", h.descr, (int)h.rank);
        sha256_update(c, (size_t)n, (const uint8_t *)line);
        for (int32_t k = 0; k < h.rank; k++)
            sha256_update(c, sizeof h.dims[k], (const uint8_t *)&h.dims[k]);
        uint8_t buf[1 << 16];
        for (int64_t off = 0; ok && off < h.data_bytes;) {
            size_t want = (size_t)(h.data_bytes - off < (int64_t)sizeof buf ? h.data_bytes - off : (int64_t)sizeof buf);
            ssize_t r = pread(fd, buf, want, (off_t)(h.data_offset + off));
            if (r < 0 && errno == EINTR)
                continue;
            ok = r > 0;
            if (ok) {
                sha256_update(c, (size_t)r, buf);
                off += r;
            }
        }
    }
    if (fd >= 0)
        close(fd);
    if (!ok) {
        const char *what = "a missing, unreadable or not a .npy file";
        sha256_update(c, strlen(what), (const uint8_t *)what);
    }
}

TsStatus ts_input_sha256(const TsInput *in, char out[65], TsDiag *d)
{
    if (out)
        out[0] = 0;
    API_NEED(in, d);
    API_NEED(in->key, d);
    API_NEED(out, d);
    if (!in->array && !in->path)
        return api_null(d, __func__, "in->path (and in->array)");
    struct sha256_ctx c;
    uint8_t dg[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    hash_value(&c, in);
    sha256_digest(&c, sizeof dg, dg);
    compile_digest_hex(dg, out);
    return TS_OK;
}

TsStatus ts_sha256(const void *bytes, size_t n, char out[65], TsDiag *d)
{
    if (out)
        out[0] = 0;
    API_NEED(out, d);
    if (n > 0)
        API_NEED(bytes, d);
    compile_sha256_hex(n ? bytes : "", n, out);
    return TS_OK;
}

/* ---- tessel's build ---- */

/* The ELF object holding this file's code (the tessel binary, or
 * libtessel.so under Python) and, found there, its build id's first bytes
 * in hex ("" when the object has none: linked without --build-id). */
typedef struct BuildId {
    uintptr_t addr;          /* an address inside the object */
    char hex[2 * 12 + 1];
} BuildId;

static const char build_anchor = 0;

/* The notes of one PT_NOTE segment: the NT_GNU_BUILD_ID one into b. */
static void note_build_id(const uint8_t *p, const uint8_t *end, size_t align, BuildId *b)
{
    static const char hex[] = "0123456789abcdef";
    while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
        const ElfW(Nhdr) *n = (const void *)p;
        size_t name = (n->n_namesz + align - 1) & ~(align - 1), desc = (n->n_descsz + align - 1) & ~(align - 1);
        const uint8_t *nm = p + sizeof *n;
        if ((size_t)(end - nm) < name || (size_t)(end - nm) - name < desc)
            return;
        const uint8_t *ds = nm + name;
        if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(nm, "GNU", 4) == 0) {
            size_t k = 0;
            for (; k < n->n_descsz && 2 * k + 2 < sizeof b->hex; k++) {
                b->hex[2 * k] = hex[ds[k] >> 4];
                b->hex[2 * k + 1] = hex[ds[k] & 15];
            }
            b->hex[2 * k] = 0;
            return;
        }
        p = ds + desc;
    }
}

static int find_build_id(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    BuildId *b = data;
    bool mine = false;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && b->addr >= lo && b->addr - lo < ph->p_memsz;
    }
    if (!mine)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && !b->hex[0]; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *at = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        note_build_id(at, at + ph->p_memsz, ph->p_align == 8 ? 8 : 4, b);
    }
    return 1;
}

/* "0.2.0 build 0123456789abcdef01234567", or "0.2.0, no build id". */
static void build_id(char *out, size_t n)
{
    BuildId b = {.addr = (uintptr_t)&build_anchor, .hex = ""};
    dl_iterate_phdr(find_build_id, &b);
    if (b.hex[0])
        snprintf(out, n, "%s build %s", TS_VERSION, b.hex);
    else
        snprintf(out, n, "%s, no build id", TS_VERSION);
}

IrStatus api_agree(const TsPlan *p, const TsRunOptions *o, CollMpi *t, IrDiag *d)
{
    Fields fs = {.n = 0};
    char build[64];
    build_id(build, sizeof build);
    add_text(&fs, "tessel build (version and GNU build id)", "%s", build);
    char names[OWN_INPUTS][NAME], types[OWN_INPUTS][NAME];
    char *text = ts_plan_file_text(p);
    if (text) {
        /* The model's path as this rank spelled it (`// TesselWhyFile`,
         * for the reasons' positions) is not the program, nor are the
         * digest and signature lines that cover it: hosts that name one
         * model by other paths agree (the model's content is the next
         * field). */
        static const char *const skip[] = {"\n// TesselWhyFile ", "\n// TesselDigest ", "\n// TesselSignature "};
        for (size_t k = 0; k < sizeof skip / sizeof skip[0]; k++) {
            char *at = strstr(text, skip[k]);
            if (at) {
                char *end = strchr(at + 1, '\n');
                size_t rest = end ? strlen(end) : 0;
                memmove(at, end ? end : at, rest + 1);
                if (!end)
                    *at = 0;
            }
        }
        add_bytes(&fs, "compiled program (plan text)", text, strlen(text) + 1);
    }
    else
        add_unknown(&fs, "compiled program (plan text)");
    ts_free(text);
    uint8_t model[SHA256_DIGEST_SIZE];
    if (unhex(p->sha256, model))
        add_digest(&fs, "model (its file's SHA-256)", model);
    else
        add_text(&fs, "model (its file's SHA-256)", "unknown");
    add_text(&fs, "layout", "%lld hosts x %lld local devices", (long long)ts_plan_hosts(p),
             (long long)ts_plan_local_devices(p));
    if (o->random)
        add_text(&fs, "random inputs' seed", "%llu%s", (unsigned long long)o->seed, o->per_device ? " per device" : "");
    else
        add_text(&fs, "random inputs' seed", "none (no random inputs)");
    add_inputs(&fs, p, o, names, types);
    add_text(&fs, "optimizer state (zero_state)", "%s", o->zero_state ? "zeros" : "bound like any input");
    add_text(&fs, "steps", "%lld", (long long)(o->steps > 0 ? o->steps : 1));
    /* The library of the f32 dots as asked: each gives its own last bits on
     * a large dot (amx-bf16x3 not f32's at all), so ranks asking for
     * different ones would join shards of different computations. */
    static const char *const sgemm[] = {"probe", "openblas", "blis", "onednn", "amx-bf16x3", "avx512"};
    int32_t lib = o->tuning.sgemm;
    add_text(&fs, "f32 GEMM library (--sgemm, TESSEL_SGEMM)", "%s",
             lib >= 0 && lib < (int32_t)(sizeof sgemm / sizeof sgemm[0]) ? sgemm[lib] : "unknown");
    /* ops: every rank's tables are gathered after the run (run_mpi.c),
     * so a rank with them and one without would not meet there. */
    add_text(&fs, "statistics (stats)", "%s", !o->stats ? "off" : o->stats_ops > 0 ? "ops" : "on");
    add_text(&fs, "process-local inputs and outputs", "%s", o->process_local ? "on" : "off");
    if (o->one_device)
        add_text(&fs, "output device", "%lld", (long long)o->output_device);
    else
        add_text(&fs, "output device", "every device");
    add_text(&fs, "watched output", "%s", o->watch ? o->watch : "none");
    add_text(&fs, "limit on loop trips", "%lld", (long long)api_max_trips(o));
    add_text(&fs, "limit on memory", "%lld", (long long)(o->limits ? o->limits->memory_bytes : 0));
    for (int32_t k = 0; k < o->nagree; k++)
        add_bytes(&fs, o->agree[k].what, o->agree[k].value, strlen(o->agree[k].value));
    return rt_mpi_agree_fields(t, fs.f, fs.n, d);
}
