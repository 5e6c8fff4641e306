/*
 * npy.c: NumPy .npy files, the tensors tessel reads as inputs and writes as
 * outputs (DESIGN.md "Tensors on disk").
 *
 * A .npy file is
 *     "\x93NUMPY" MAJOR MINOR HEADER_LEN HEADER DATA
 * with HEADER_LEN a little-endian u16 (version 1.0) or u32 (2.0, 3.0; 3.0
 * allows utf-8 in the header), and HEADER a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (4, 16), }
 * padded with spaces and ended by '\n'. DATA is the array, C order, in
 * the byte order of `descr`. tessel reads and writes little endian, C
 * order, the dtypes of rt_npy_descr; complex64/128 are <c8/<c16; bf16,
 * f8, f4 and the sub-byte integers travel as <f4, |i1 or |u1 (npy_disk.c
 * converts them, exactly or with an error).
 *
 * The header is parsed strictly (never evaluated): exactly the three keys,
 * in any order, once each; spaces anywhere; a trailing comma; `()` for a
 * scalar and `(5,)` for rank 1. Every check on header and file size is
 * done before the data is read, so a bad file costs no allocation of its
 * claimed size. Reading a box seeks to each contiguous run of the box, so
 * a host reads only its shard's bytes.
 */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t NPY_MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Elements converted per step when a type travels as another
 * (npy_disk.c) through a staging buffer. */
enum { CHUNK_ELEMS = 16384 };

const char *rt_npy_descr(IrType t)
{
    switch (t) {
    case IR_PRED: return "|b1";
    case IR_S8: return "|i1";
    case IR_S16: return "<i2";
    case IR_S32: return "<i4";
    case IR_S64: return "<i8";
    case IR_U8: return "|u1";
    case IR_U16: return "<u2";
    case IR_U32: return "<u4";
    case IR_U64: return "<u8";
    case IR_F16: return "<f2";
    case IR_BF16: return "<f4";
    case IR_F32: return "<f4";
    case IR_F64: return "<f8";
    case IR_C64: return "<c8";
    case IR_C128: return "<c16";
    default: break;
    }
    switch (rt_npy_disk_type(t)) {
    case IR_F32: return "<f4";   /* bf16, the f8 and f4 kinds */
    case IR_S8: return "|i1";    /* s4, s2 */
    case IR_U8: return "|u1";    /* u4, u2 */
    default: return NULL;
    }
}

static IrStatus npy_error(IrDiag *d, IrStatus st, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static IrStatus npy_error(IrDiag *d, IrStatus st, const char *file, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ir_verror(d, st, file, NULL, (IrPos){0, 0}, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- the header dict ---- */

/* A cursor over the header text, for the small recursive-descent parser. */
typedef struct Cur {
    const char *p, *end;
    const char *file;
    IrDiag *d;
} Cur;

static void skip_ws(Cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(Cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static IrStatus bad_header(Cur *c, const char *what)
{
    return npy_error(c->d, IR_EINPUT, c->file, "bad .npy header: %s", what);
}

/* string := '\'' chars '\'' | '"' chars '"'   (no escapes; at most cap-1 chars) */
static IrStatus parse_string(Cur *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return bad_header(c, "expected a quoted string");
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap)
            return bad_header(c, "unexpected string");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return bad_header(c, "unterminated string");
    c->p++;
    out[n] = 0;
    return IR_OK;
}

/* bool := 'True' | 'False' */
static IrStatus parse_bool(Cur *c, bool *out)
{
    skip_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = true;
        return IR_OK;
    }
    if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = false;
        return IR_OK;
    }
    return bad_header(c, "fortran_order must be True or False");
}

/* dim := digits   (non-negative, fits in int64) */
static IrStatus parse_dim(Cur *c, int64_t *out)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return bad_header(c, "shape must be a tuple of non-negative integers");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int digit = *c->p++ - '0';
        if (v > (INT64_MAX - digit) / 10)
            return bad_header(c, "a dimension of the shape is too large");
        v = v * 10 + digit;
    }
    *out = v;
    return IR_OK;
}

/* shape := '(' ')' | '(' dim ',' ')' | '(' dim (',' dim)+ [','] ')'
 * `(5)` is the integer 5 in Python, not a tuple: rejected. */
static IrStatus parse_shape(Cur *c, RtNpyHeader *h)
{
    if (!eat(c, '('))
        return bad_header(c, "shape must be a tuple");
    h->rank = 0;
    if (eat(c, ')'))
        return IR_OK;
    bool comma = false;
    for (;;) {
        if (h->rank >= IR_MAX_RANK)
            return bad_header(c, "shape has more than 64 dimensions");
        IrStatus st = parse_dim(c, &h->dims[h->rank++]);
        if (st != IR_OK)
            return st;
        comma = eat(c, ',');
        if (eat(c, ')'))
            break;
        if (!comma)
            return bad_header(c, "expected ',' or ')' in shape");
    }
    if (h->rank == 1 && !comma)
        return bad_header(c, "shape (N) is not a tuple; rank 1 is written (N,)");
    return IR_OK;
}

/* The element type of a descr such as "<f4", or an error naming it. */
static IrStatus parse_descr(Cur *c, const char *s, RtNpyHeader *h)
{
    static const struct {
        const char *code;
        IrType t;
    } codes[] = {
        {"b1", IR_PRED}, {"i1", IR_S8},  {"i2", IR_S16}, {"i4", IR_S32}, {"i8", IR_S64},
        {"u1", IR_U8},   {"u2", IR_U16}, {"u4", IR_U32}, {"u8", IR_U64}, {"f2", IR_F16},
        {"f4", IR_F32},  {"f8", IR_F64}, {"c8", IR_C64}, {"c16", IR_C128},
    };
    snprintf(h->descr, sizeof h->descr, "%s", s);
    char order = s[0];
    const char *code = s + 1;
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return npy_error(c->d, IR_EUNSUPPORTED, c->file, "dtype '%s' is not supported", s);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (strcmp(code, codes[i].code) != 0)
            continue;
        size_t size = ir_type_size(codes[i].t);
        if (size > 1 && order == '>')
            return npy_error(c->d, IR_EINPUT, c->file,
                             "dtype %s is big endian; tessel reads little endian "
                             "(save with arr.astype('<%s'))", s, code);
        if (size > 1 && order == '|')
            return npy_error(c->d, IR_EINPUT, c->file, "dtype %s has no byte order", s);
        h->type = codes[i].t;
        return IR_OK;
    }
    return npy_error(c->d, IR_EUNSUPPORTED, c->file, "dtype %s is not supported", s);
}

/* dict := '{' (key ':' value ',')* [key ':' value] '}'   keys: descr,
 * fortran_order, shape, each exactly once, in any order. */
static IrStatus parse_dict(Cur *c, RtNpyHeader *h, bool *fortran)
{
    bool seen_descr = false, seen_order = false, seen_shape = false;
    char descr[64] = "";
    if (!eat(c, '{'))
        return bad_header(c, "expected '{'");
    while (!eat(c, '}')) {
        char key[32];
        IrStatus st = parse_string(c, key, sizeof key);
        if (st != IR_OK)
            return st;
        if (!eat(c, ':'))
            return bad_header(c, "expected ':' after a key");
        bool *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &seen_descr;
            skip_ws(c);
            if (c->p < c->end && *c->p == '[')
                return npy_error(c->d, IR_EUNSUPPORTED, c->file,
                                 "structured dtypes are not supported");
            st = parse_string(c, descr, sizeof descr);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &seen_order;
            st = parse_bool(c, fortran);
        } else if (strcmp(key, "shape") == 0) {
            seen = &seen_shape;
            st = parse_shape(c, h);
        } else {
            return npy_error(c->d, IR_EINPUT, c->file, "bad .npy header: unknown key '%s'", key);
        }
        if (st != IR_OK)
            return st;
        if (*seen)
            return npy_error(c->d, IR_EINPUT, c->file, "bad .npy header: key '%s' appears twice",
                             key);
        *seen = true;
        if (!eat(c, ',')) {
            if (!eat(c, '}'))
                return bad_header(c, "expected ',' or '}'");
            break;
        }
    }
    skip_ws(c);
    if (c->p != c->end)
        return bad_header(c, "text after the dict");
    if (!seen_descr || !seen_order || !seen_shape)
        return bad_header(c, !seen_descr ? "no 'descr'" : !seen_order ? "no 'fortran_order'"
                                                                       : "no 'shape'");
    return parse_descr(c, descr, h);
}

/* Size of the preamble and header of a file starting with `buf`, or an
 * error when the magic, version or length is wrong. */
static IrStatus preamble(const uint8_t *buf, size_t len, const char *file, RtNpyHeader *h,
                         size_t *pre, size_t *hlen, IrDiag *d)
{
    size_t m = len < sizeof NPY_MAGIC ? len : sizeof NPY_MAGIC;
    if (len == 0)
        return npy_error(d, IR_EINPUT, file, "not a .npy file (empty)");
    if (memcmp(buf, NPY_MAGIC, m) != 0)
        return npy_error(d, IR_EINPUT, file, "not a .npy file (no \\x93NUMPY magic)");
    if (len < 10)
        return npy_error(d, IR_EINPUT, file, "truncated .npy header (%zu bytes)", len);
    h->major = buf[6];
    h->minor = buf[7];
    if (h->major < 1 || h->major > 3 || h->minor != 0)
        return npy_error(d, IR_EINPUT, file, ".npy format version %d.%d is not supported "
                         "(1.0, 2.0, 3.0 are)", h->major, h->minor);
    if (h->major == 1) {
        *pre = 10;
        *hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    } else {
        if (len < 12)
            return npy_error(d, IR_EINPUT, file, "truncated .npy header");
        *pre = 12;
        *hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                (size_t)buf[11] << 24;
    }
    if (*hlen > RT_NPY_MAX_HEADER)
        return npy_error(d, IR_EINPUT, file, ".npy header of %zu bytes is too large (limit %d)",
                         *hlen, RT_NPY_MAX_HEADER);
    return IR_OK;
}

/* Check header bytes: ASCII for 1.0/2.0, and no control bytes but
 * whitespace (3.0 allows utf-8, i.e. bytes >= 0x80). */
static IrStatus check_header_bytes(const uint8_t *p, size_t n, int major, const char *file,
                                   IrDiag *d)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        bool ok = (b >= 0x20 && b < 0x7f) || b == '\n' || b == '\r' || b == '\t' ||
                  (b >= 0x80 && major == 3);
        if (!ok)
            return npy_error(d, IR_EINPUT, file, "bad .npy header: byte 0x%02x at offset %zu",
                             b, i);
    }
    return IR_OK;
}

IrStatus rt_npy_parse_header(const uint8_t *buf, size_t len, const char *file, RtNpyHeader *h,
                             IrDiag *d)
{
    memset(h, 0, sizeof *h);
    size_t pre, hlen;
    IrStatus st = preamble(buf, len, file, h, &pre, &hlen, d);
    if (st != IR_OK)
        return st;
    if (len - pre < hlen)
        return npy_error(d, IR_EINPUT, file, "truncated .npy header (%zu of %zu bytes)",
                         len - pre, hlen);
    st = check_header_bytes(buf + pre, hlen, h->major, file, d);
    if (st != IR_OK)
        return st;
    Cur c = {(const char *)buf + pre, (const char *)buf + pre + hlen, file, d};
    bool fortran = false;
    st = parse_dict(&c, h, &fortran);
    if (st != IR_OK)
        return st;
    if (fortran)
        return npy_error(d, IR_EINPUT, file, "fortran_order is True; tessel reads C order "
                         "only (save with numpy.ascontiguousarray)");
    int64_t n = 1;
    for (int32_t k = 0; k < h->rank; k++) {
        if (h->dims[k] != 0 && n > INT64_MAX / h->dims[k])
            return npy_error(d, IR_EINPUT, file, "shape in .npy header is too large");
        n *= h->dims[k];
    }
    int64_t es = (int64_t)ir_type_size(h->type);
    if (n > INT64_MAX / es)
        return npy_error(d, IR_EINPUT, file, "shape in .npy header is too large");
    h->data_offset = (int64_t)(pre + hlen);
    h->data_bytes = n * es;
    return IR_OK;
}

/* "(4, 16)", "(5,)", "()" as numpy writes a shape, into buf. */
static void shape_tuple_text(char *buf, size_t cap, int32_t rank, const int64_t *dims)
{
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int32_t i = 0; i < rank && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, rank == 1 ? ",)" : ")");
}

/* ---- reading ---- */

const char *rt_file_kind(unsigned mode)
{
    return S_ISFIFO(mode)   ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISREG(mode)  ? "a regular file"
                            : "not a regular file";
}

/* Open `path` and read and parse its header; *fp stays open on success. */
static IrStatus open_npy(const char *path, FILE **fp, RtNpyHeader *h, int64_t *fsize,
                         IrDiag *d)
{
    /* stat before open: opening a FIFO waits for a writer, a device may
     * act on being opened. Then the descriptor is checked again (the path
     * may have changed between the two), and O_NONBLOCK keeps even that
     * open from waiting. */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return npy_error(d, IR_EINPUT, path, "cannot open: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return npy_error(d, IR_EINPUT, path, "not a regular file (%s): inputs are read from .npy files",
                         rt_file_kind(sb.st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return npy_error(d, IR_EINPUT, path, "cannot open: %s", strerror(err));
    }
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return npy_error(d, IR_EINPUT, path, "not a regular file");
    }
    uint8_t pre[12];
    size_t got = fread(pre, 1, sizeof pre, f);
    size_t prelen, hlen;
    IrStatus st = preamble(pre, got, path, h, &prelen, &hlen, d);
    uint8_t *buf = NULL;
    if (st == IR_OK && !(buf = ts_malloc(prelen + hlen)))
        st = npy_error(d, IR_ENOMEM, path, "out of memory");
    if (st == IR_OK) {
        memcpy(buf, pre, prelen);
        size_t more = got > prelen ? got - prelen : 0;
        if (more > hlen)
            more = hlen;
        memcpy(buf + prelen, pre + prelen, more);
        size_t rest = hlen - more;
        size_t n = rest ? fread(buf + prelen + more, 1, rest, f) : 0;
        if (n != rest)
            st = npy_error(d, IR_EINPUT, path, "truncated .npy header (%zu of %zu bytes)",
                           more + n, hlen);
        else
            st = rt_npy_parse_header(buf, prelen + hlen, path, h, d);
    }
    ts_free(buf);
    if (st != IR_OK) {
        fclose(f);
        return st;
    }
    *fp = f;
    *fsize = (int64_t)sb.st_size;
    return IR_OK;
}

/* Check the header against the expected array and the file's size. */
static IrStatus check_match(const char *path, const RtNpyHeader *h, int64_t fsize,
                            const IrShape *expect, const char *what, IrDiag *d)
{
    const char *want = rt_npy_descr(expect->type);
    if (!ir_shape_is_array(expect) || !want)
        return npy_error(d, IR_EUNSUPPORTED, path, "%s has type %s, which .npy cannot hold",
                         what, ir_type_name(expect->type));
    char *es = ir_shape_str(expect, false);
    if (!es)
        return npy_error(d, IR_ENOMEM, path, "out of memory");
    IrStatus st = IR_OK;
    bool same = h->rank == expect->rank;
    for (int32_t k = 0; same && k < h->rank; k++)
        same = h->dims[k] == expect->dims[k];
    if (h->type != rt_npy_disk_type(expect->type)) {
        st = npy_error(d, IR_EINPUT, path, "dtype %s does not match %s %s (expected %s)",
                       h->descr, what, es, want);
    } else if (!same) {
        char got[1024];
        shape_tuple_text(got, sizeof got, h->rank, h->dims);
        st = npy_error(d, IR_EINPUT, path, "shape %s does not match %s %s", got, what, es);
    } else if (fsize - h->data_offset < h->data_bytes) {
        st = npy_error(d, IR_EINPUT, path,
                       "truncated: %lld bytes of data expected, %lld found",
                       (long long)h->data_bytes,
                       (long long)(fsize > h->data_offset ? fsize - h->data_offset : 0));
    } else if (fsize - h->data_offset > h->data_bytes) {
        st = npy_error(d, IR_EINPUT, path, "%lld bytes of trailing data after the array",
                       (long long)(fsize - h->data_offset - h->data_bytes));
    }
    ts_free(es);
    return st;
}

/* Read `n` elements of disk type into `out` of memory type t: directly
 * when the type is itself on disk (pred normalised to 0/1), else through
 * `stage` and npy_disk.c's conversion. `first` is the file element index
 * of the first one (for messages). */
static IrStatus read_elems(FILE *f, const char *path, IrType t, int64_t n, int64_t first,
                           uint8_t *out, void *stage, IrDiag *d)
{
    IrType dt = rt_npy_disk_type(t);
    size_t dsize = ir_type_size(dt), msize = ir_type_size(t);
    if (dt == t) {
        size_t bytes = (size_t)n * msize;
        if (fread(out, 1, bytes, f) != bytes)
            return npy_error(d, IR_ERUNTIME, path, "read error: %s",
                             ferror(f) ? strerror(errno) : "file shrank while reading");
        if (t == IR_PRED)
            for (size_t i = 0; i < bytes; i++)
                out[i] = out[i] != 0;
        return IR_OK;
    }
    while (n > 0) {
        size_t m = n < CHUNK_ELEMS ? (size_t)n : CHUNK_ELEMS;
        if (fread(stage, dsize, m, f) != m)
            return npy_error(d, IR_ERUNTIME, path, "read error: %s",
                             ferror(f) ? strerror(errno) : "file shrank while reading");
        IrStatus st = rt_npy_from_disk(t, stage, (int64_t)m, out, first, path, d);
        if (st != IR_OK)
            return st;
        out += m * msize;
        first += (int64_t)m;
        n -= (int64_t)m;
    }
    return IR_OK;
}

/* Rule: a box is read as contiguous runs. Trailing dimensions the box
 * covers whole merge with the innermost partial one into one run; the
 * outer dimensions are walked like an odometer, one seek per run.
 * Example: f32[4,6,8], box [1,3)x[0,6)x[0,8): dims 1 and 2 are whole, so
 * one run of 2*6*8 elements at offset 1*48; box [0,4)x[2,3)x[0,8): 4 runs
 * of 8 elements at element offsets 16, 64, 112, 160. */
static IrStatus read_runs(FILE *f, const char *path, const RtNpyHeader *h, IrType t,
                          const int64_t *lo, const int64_t *hi, uint8_t *out, IrDiag *d)
{
    int32_t rank = h->rank;
    int64_t stride[IR_MAX_RANK], idx[IR_MAX_RANK];
    int64_t st_ = 1;
    for (int32_t k = rank - 1; k >= 0; k--) {
        stride[k] = st_;
        st_ *= h->dims[k];
    }
    int32_t p = rank - 1; /* innermost dimension the box does not cover whole */
    while (p >= 0 && lo[p] == 0 && hi[p] == h->dims[p])
        p--;
    int64_t run = p < 0 ? st_ : (hi[p] - lo[p]) * stride[p];
    int64_t nruns = 1;
    for (int32_t k = 0; k < p; k++) {
        nruns *= hi[k] - lo[k];
        idx[k] = lo[k];
    }
    int64_t esize = (int64_t)ir_type_size(rt_npy_disk_type(t));
    size_t msize = ir_type_size(t);
    void *stage = NULL;
    if (rt_npy_disk_type(t) != t && !(stage = ts_malloc(CHUNK_ELEMS * (size_t)esize)))
        return npy_error(d, IR_ENOMEM, path, "out of memory");
    IrStatus st = IR_OK;
    int64_t pos = -1; /* file element offset the stream is at, -1 unknown */
    for (int64_t r = 0; r < nruns && st == IR_OK; r++) {
        int64_t off = p >= 0 ? lo[p] * stride[p] : 0;
        for (int32_t k = 0; k < p; k++)
            off += idx[k] * stride[k];
        if (off != pos && fseeko(f, (off_t)(h->data_offset + off * esize), SEEK_SET) != 0)
            st = npy_error(d, IR_ERUNTIME, path, "seek error: %s", strerror(errno));
        if (st == IR_OK)
            st = read_elems(f, path, t, run, off, out, stage, d);
        out += (size_t)run * msize;
        pos = off + run;
        for (int32_t k = p - 1; k >= 0; k--) {
            if (++idx[k] < hi[k])
                break;
            idx[k] = lo[k];
        }
    }
    ts_free(stage);
    return st;
}

IrStatus rt_npy_read_box(const char *path, const IrShape *expect, const char *what,
                         const int64_t *lo, const int64_t *hi, void *out, IrDiag *d)
{
    if (!what)
        what = "the expected array";
    FILE *f = NULL;
    RtNpyHeader h;
    int64_t fsize = 0;
    IrStatus st = open_npy(path, &f, &h, &fsize, d);
    if (st != IR_OK)
        return st;
    st = check_match(path, &h, fsize, expect, what, d);
    bool empty = false;
    for (int32_t k = 0; st == IR_OK && k < h.rank; k++) {
        if (lo[k] < 0 || lo[k] > hi[k] || hi[k] > h.dims[k])
            st = npy_error(d, IR_EINPUT, path, "box [%lld, %lld) is outside dimension %d of "
                           "size %lld", (long long)lo[k], (long long)hi[k], (int)k,
                           (long long)h.dims[k]);
        empty = empty || lo[k] == hi[k];
    }
    if (st == IR_OK && !empty)
        st = read_runs(f, path, &h, expect->type, lo, hi, out, d);
    fclose(f);
    return st;
}

IrStatus rt_npy_check(const char *path, const IrShape *expect, const char *what, IrDiag *d)
{
    FILE *f = NULL;
    RtNpyHeader h;
    int64_t fsize = 0;
    IrStatus st = open_npy(path, &f, &h, &fsize, d);
    if (st != IR_OK)
        return st;
    st = check_match(path, &h, fsize, expect, what ? what : "the expected array", d);
    fclose(f);
    return st;
}

IrStatus rt_npy_read(const char *path, const IrShape *expect, const char *what, void *out,
                     IrDiag *d)
{
    int64_t lo[IR_MAX_RANK] = {0};
    if (!ir_shape_is_array(expect) || expect->rank > IR_MAX_RANK)
        return npy_error(d, IR_EUNSUPPORTED, path, "%s is not an array",
                         what ? what : "the expected value");
    return rt_npy_read_box(path, expect, what, lo, expect->dims, out, d);
}

/* ---- writing ---- */

/* The preamble and header of an array: numpy's layout, padded with spaces
 * so that data starts at a multiple of 64. Heap buffer in *out. */
static IrStatus make_header(const IrShape *shape, uint8_t **out, size_t *len)
{
    char shp[IR_MAX_RANK * 22 + 8];
    shape_tuple_text(shp, sizeof shp, shape->rank, shape->dims);
    char dict[sizeof shp + 96];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     rt_npy_descr(shape->type), shp);
    size_t pre = (size_t)n + 1 + 10 < 65536 ? 10 : 12; /* version 1.0 unless too long */
    size_t total = (pre + (size_t)n + 1 + 63) / 64 * 64;
    size_t hlen = total - pre;
    uint8_t *b = ts_malloc(total);
    if (!b)
        return IR_ENOMEM;
    memcpy(b, NPY_MAGIC, 6);
    b[6] = pre == 10 ? 1 : 2;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + pre, dict, (size_t)n);
    memset(b + pre + n, ' ', hlen - (size_t)n - 1);
    b[total - 1] = '\n';
    *out = b;
    *len = total;
    return IR_OK;
}

/* Write the data of an array, converted to its disk type where that
 * differs (npy_disk.c). False on error. */
static bool write_data(FILE *f, const IrShape *shape, const void *data, int64_t n)
{
    IrType t = shape->type, dt = rt_npy_disk_type(t);
    if (dt == t) {
        size_t bytes = (size_t)n * ir_type_size(t);
        return fwrite(data, 1, bytes, f) == bytes;
    }
    float stage[1024]; /* room for 1024 elements of any disk type used */
    const uint8_t *in = data;
    size_t dsize = ir_type_size(dt), msize = ir_type_size(t);
    while (n > 0) {
        size_t m = n < 1024 ? (size_t)n : 1024;
        rt_npy_to_disk(t, in, (int64_t)m, stage);
        if (fwrite(stage, dsize, m, f) != m)
            return false;
        in += m * msize;
        n -= (int64_t)m;
    }
    return true;
}

/* A path that exists and is not a regular file (a device such as
 * /dev/null, a pipe): written in place, never renamed over or removed. */
static bool special_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode);
}

/* A shape .npy can hold, at most 2^63 elements: IR_OK, else the error. */
static IrStatus check_writable(const char *path, const IrShape *shape, IrDiag *d)
{
    if (!ir_shape_is_array(shape) || !rt_npy_descr(shape->type) || shape->rank > IR_MAX_RANK)
        return npy_error(d, IR_EUNSUPPORTED, path, "a value of type %s cannot be written to "
                         ".npy", ir_type_name(shape->type));
    if (ir_shape_elements(shape) < 0)
        return npy_error(d, IR_EINPUT, path, "array too large");
    return IR_OK;
}

IrStatus rt_npy_write_file(const char *path, const IrShape *shape, const void *data, IrDiag *d)
{
    IrStatus st = check_writable(path, shape, d);
    if (st != IR_OK)
        return st;
    /* O_NOFOLLOW: a symbolic link planted at the name is refused, never
     * followed to overwrite its target (a device or pipe that exists is
     * written in place, as documented). */
    bool special = special_file(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (special ? 0 : O_TRUNC | O_NOFOLLOW), 0666);
    if (fd < 0)
        return npy_error(d, IR_ERUNTIME, path, "cannot create: %s", strerror(errno));
    st = rt_npy_write_fd(fd, path, shape, data, d);
    if (close(fd) != 0 && st == IR_OK)
        st = npy_error(d, IR_ERUNTIME, path, "write error: %s", strerror(errno));
    if (st != IR_OK && !special)
        remove(path);
    return st;
}

IrStatus rt_npy_write_fd(int fd, const char *path, const IrShape *shape, const void *data, IrDiag *d)
{
    IrStatus st = check_writable(path, shape, d);
    if (st != IR_OK)
        return st;
    int64_t n = ir_shape_elements(shape);
    uint8_t *hdr;
    size_t hlen;
    if (make_header(shape, &hdr, &hlen) != IR_OK)
        return npy_error(d, IR_ENOMEM, path, "out of memory");
    /* A stream of its own on a duplicate: the caller keeps fd (to read the
     * file back, to close it). */
    int dfd = dup(fd);
    FILE *f = dfd >= 0 ? fdopen(dfd, "wb") : NULL;
    if (!f && dfd >= 0)
        close(dfd);
    bool ok = f && fwrite(hdr, 1, hlen, f) == hlen && write_data(f, shape, data, n) && fflush(f) == 0;
    int err = errno;
    ts_free(hdr);
    if (f && fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    return ok ? IR_OK : npy_error(d, IR_ERUNTIME, path, "write error: %s", strerror(err));
}

