/*
 * common.c: what every part of the API shares: moving an IrDiag into a
 * TsDiag, formatting and clearing it, the version, "did you mean" for a
 * client's names, limits, reading files, and releasing the process-wide
 * caches.
 */
#include "api_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The public mirrors of internal types: same values, same layout. */
_Static_assert((int)TS_ERUNTIME == (int)IR_ERUNTIME && (int)TS_EINPUT == (int)IR_EINPUT &&
                   (int)TS_EINTERNAL == (int)IR_EINTERNAL && (int)TS_ENOMEM == (int)IR_ENOMEM &&
                   (int)TS_EUNSUPPORTED == (int)IR_EUNSUPPORTED,
               "TsStatus must match IrStatus");
_Static_assert(sizeof(TsInput) == sizeof(RtInput) && offsetof(TsInput, path) == offsetof(RtInput, path) &&
                   offsetof(TsInput, array) == offsetof(RtInput, array),
               "TsInput must match RtInput");
_Static_assert(sizeof(TsArray) == sizeof(RtArray) && offsetof(TsArray, dims) == offsetof(RtArray, dims) &&
                   offsetof(TsArray, data) == offsetof(RtArray, data) &&
                   offsetof(TsArray, nbytes) == offsetof(RtArray, nbytes),
               "TsArray must match RtArray");
_Static_assert(TS_MAX_RANK >= IR_MAX_RANK, "TsArrayInfo.dims holds every rank");

const char *ts_version(void)
{
    return TS_VERSION;
}

static const char *name_at(void *ctx, int32_t i)
{
    return ((const char *const *)ctx)[i];
}

const char *ts_nearest_name(const char *key, const char *const *names, int32_t n)
{
    return key && names && n > 0 ? ir_nearest(key, strlen(key), n, name_at, (void *)names) : NULL;
}

TsStatus api_give(IrStatus st, IrDiag *from, TsDiag *to)
{
    if (from->status == IR_OK && st != IR_OK)
        ir_error(from, st, NULL, NULL, (IrPos){0, 0}, "failed (status %d)", (int)st);
    if (to && to->status == TS_OK && st != IR_OK) {
        to->status = (TsStatus)from->status;
        to->file = from->file;
        to->line = from->pos.line;
        to->col = from->pos.col;
        to->line_text = from->line_text;
        to->msg = from->msg;
        memset(from, 0, sizeof *from);
    }
    ir_diag_clear(from);
    return (TsStatus)st;
}

TsStatus api_null(TsDiag *d, const char *fn, const char *arg)
{
    IrDiag id = {0};
    return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "%s: %s is NULL", fn, arg), &id, d);
}

char *ts_diag_format(const TsDiag *d)
{
    if (!d)
        return NULL;
    IrDiag id = {(IrStatus)d->status, d->file, {d->line, d->col}, d->line_text, d->msg};
    return ir_diag_format(&id, "tessel");
}

void ts_diag_clear(TsDiag *d)
{
    if (!d)
        return ;
    ts_free(d->file);
    ts_free(d->line_text);
    ts_free(d->msg);
    memset(d, 0, sizeof *d);
}

void ts_shutdown(void)
{
    IrDiag d = {0};
    dev_shutdown(&d);
    ir_diag_clear(&d);
}

/* ---- limits ---- */

TsLimits ts_limits_default(void)
{
    IrLimits l = ir_default_limits();
    return (TsLimits){.elements = l.max_elements,
                      .rank = l.max_rank,
                      .tuple = l.max_tuple,
                      .depth = l.max_depth,
                      .name = l.max_name,
                      .devices = COMPILE_DEFAULT_MAX_DEVICES,
                      .trips = 0,
                      .memory_bytes = 0,
                      .instructions = l.max_instructions};
}

IrLimits api_limits(const TsLimits *l, int64_t *max_devices)
{
    IrLimits r = ir_default_limits();
    *max_devices = 0;
    if (!l)
        return r;
    /* Fields set directly (not through ts_limits_set) are clamped to the
     * bounds ts_limits_set allows: depth 200 is what every pass and the
     * executor can recurse (a depth of 10^6 overflowed the stack in
     * spmd_partition_computation); <= 0 is the default. */
    if (l->elements > 0)
        r.max_elements = l->elements;
    if (l->rank > 0)
        r.max_rank = l->rank < IR_MAX_RANK ? l->rank : IR_MAX_RANK;
    if (l->tuple > 0)
        r.max_tuple = l->tuple;
    if (l->depth > 0)
        r.max_depth = r.max_call_depth = l->depth < API_MAX_DEPTH ? l->depth : API_MAX_DEPTH;
    if (l->instructions > 0)
        r.max_instructions = l->instructions < INT32_MAX ? l->instructions : INT32_MAX;
    if (l->name > 0)
        r.max_name = l->name < INT32_MAX ? l->name : INT32_MAX;
    *max_devices = l->devices <= 0 ? 0 : l->devices < IR_MAX_DEVICES ? l->devices : IR_MAX_DEVICES;
    return r;
}

/* What limit_value read. */
typedef enum LimitRead {
    LIMIT_OK,
    LIMIT_BAD,       /* not a whole number >= 1 (with its suffix) */
    LIMIT_TOO_LARGE  /* a whole number, above max (or above what int64 holds) */
} LimitRead;

/* A --limit value: a decimal integer from 1 to max; with `suffixes`
 * (memory) a K, M, G or T after it multiplies by 1024, 1024^2, 1024^3, 1024^4. Too
 * large is told apart (memory=99999999999999999999999 said "needs a
 * number >= 1": strtoll's overflow was read as a bad number). */
static LimitRead limit_value(const char *v, bool suffixes, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    bool overflow = errno == ERANGE && x == LLONG_MAX;
    if ((errno && !overflow) || end == v || x < 1 || *v == '+' || *v == ' ')
        return LIMIT_BAD;
    int shift = 0;
    if (suffixes && *end && !end[1]) {
        const char *units = "KMGT", *u = strchr(units, *end);
        if (!u)
            return LIMIT_BAD;
        shift = 10 * (int)(u - units + 1);
        end++;
    }
    if (*end)
        return LIMIT_BAD;
    if (overflow || x > (max >> shift))
        return LIMIT_TOO_LARGE;
    *out = (int64_t)x << shift;
    return LIMIT_OK;
}

/* NAME=VALUE, the syntax of every --limit: a limit can be lowered or
 * raised, rank only up to IR_MAX_RANK, devices up to IR_MAX_DEVICES,
 * depth up to 200 (the passes and the device executor recurse on call
 * nesting; the executor refuses more than 200 levels, device/exec.c
 * MAX_DEPTH, and 200 fit every stack, also under ASan:
 * tests/e2e/hostile_depth.sh). */
TsStatus ts_limits_set(TsLimits *l, const char *spec, TsDiag *d)
{
    API_NEED(l, d);
    static const struct {
        const char *name;
        int64_t max;
    } names[] = {{"elements", INT64_MAX}, {"rank", IR_MAX_RANK}, {"tuple", INT32_MAX},
                 {"depth", API_MAX_DEPTH}, {"name", INT32_MAX},   {"devices", IR_MAX_DEVICES},
                 {"trips", INT64_MAX},    {"memory", INT64_MAX}, {"instructions", INT32_MAX}};
    enum { NNAMES = sizeof names / sizeof *names, MEMORY = 7 };
    IrDiag id = {0};
    const char *eq = spec ? strchr(spec, '=') : NULL;
    size_t k = 0, n = eq ? (size_t)(eq - spec) : 0;
    while (k < NNAMES && (strlen(names[k].name) != n || strncmp(spec, names[k].name, n)))
        k++;
    if (!eq || k == NNAMES) {
        /* "did you mean" for a slip of NAME (memroy=8G) */
        const char *list[NNAMES], *near = NULL;
        char key[64];
        for (size_t j = 0; j < NNAMES; j++)
            list[j] = names[j].name;
        if (eq && n < sizeof key) {
            memcpy(key, spec, n);
            key[n] = 0;
            near = ts_nearest_name(key, list, NNAMES);
        }
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--limit takes NAME=VALUE with NAME elements, rank, tuple, depth, name, "
                                 "devices, trips, memory or instructions, not '%s'%s%s%s",
                                 spec ? spec : "", near ? "; did you mean " : "", near ? near : "", near ? "?" : ""),
                        &id, d);
    }
    int64_t x = 0;
    LimitRead r = limit_value(eq + 1, k == MEMORY, names[k].max, &x);
    if (r == LIMIT_TOO_LARGE && k == MEMORY)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--limit memory=%s is too large: the largest is %lld bytes (%lldG)", eq + 1,
                                 (long long)names[k].max, (long long)(names[k].max >> 30)),
                        &id, d);
    if (r == LIMIT_TOO_LARGE)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 "--limit %s=%s is too large: the largest is %lld", names[k].name, eq + 1,
                                 (long long)names[k].max),
                        &id, d);
    if (r == LIMIT_BAD)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                 k == MEMORY ? "--limit memory needs a number of bytes >= 1 (K, M, G or T: "
                                               "times 1024, 1024^2, 1024^3, 1024^4), not '%s'"
                                             : "--limit %s needs a whole number from 1 to %lld, not '%s'",
                                 k == MEMORY ? eq + 1 : names[k].name, (long long)names[k].max, eq + 1),
                        &id, d);
    switch (k) {
    case 0: l->elements = x; break;
    case 1: l->rank = (int32_t)x; break;
    case 2: l->tuple = (int32_t)x; break;
    case 3: l->depth = (int32_t)x; break;
    case 4: l->name = x; break;
    case 5: l->devices = x; break;
    case 6: l->trips = x; break;
    case 7: l->memory_bytes = x; break;
    default: l->instructions = x; break;
    }
    return TS_OK;
}

/* ---- files ---- */

/* The file, of at most max bytes, in a block of ts_malloc (big: of
 * ir_big_alloc). */
static char *read_whole(const char *path, size_t *len, IrDiag *d, bool big, size_t max)
{
    /* stat first: a FIFO, a socket or a device is refused before it is
     * opened (opening some devices acts on them). O_NONBLOCK: should the
     * path change into a FIFO in between, opening it must not wait for a
     * writer; the descriptor is checked again below. */
    struct stat pre;
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode)) {
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "not a regular file (%s): tessel reads this from a file",
                 rt_file_kind(pre.st_mode));
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "not a regular file");
        return NULL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0}, "larger than %llu bytes (%lld)", (unsigned long long)max,
                 (long long)st.st_size);
        return NULL;
    }
    size_t n = (size_t)st.st_size + 1;
    char *text = big ? ir_big_alloc(n) : ts_malloc(n);
    size_t got = 0;
    while (text && got < (size_t)st.st_size) {
        ssize_t r = read(fd, text + got, (size_t)st.st_size - got);
        if (r <= 0 && !(r < 0 && errno == EINTR))
            break;
        if (r > 0)
            got += (size_t)r;
    }
    close(fd);
    if (!text || got != (size_t)st.st_size) {
        ir_error(d, text ? IR_EINPUT : IR_ENOMEM, path, NULL, (IrPos){0, 0},
                 text ? "cannot read the file" : "out of memory");
        if (big)
            ir_big_free(text);
        else
            ts_free(text);
        return NULL;
    }
    text[got] = 0;
    *len = got;
    return text;
}

/* Models and plans: at most 4 GiB. */
#define FILE_MAX ((size_t)1 << 32)

char *api_read_file(const char *path, size_t *len, IrDiag *d)
{
    return read_whole(path, len, d, false, FILE_MAX);
}

char *api_read_file_big(const char *path, size_t *len, IrDiag *d)
{
    return read_whole(path, len, d, true, FILE_MAX);
}

TsStatus ts_read_file(const char *path, size_t max_bytes, char **text, size_t *len, TsDiag *d)
{
    if (text)
        *text = NULL;
    if (len)
        *len = 0;
    API_NEED(path, d);
    API_NEED(text, d);
    API_NEED(len, d);
    IrDiag id = {0};
    char *t = read_whole(path, len, &id, false, max_bytes);
    if (!t)
        return api_give(id.status, &id, d);
    *text = t;
    return TS_OK;
}

TsStatus api_parse_file(const char *path, const TsLimits *lim, ApiParse parse, void **out, TsDiag *d)
{
    IrDiag id = {0};
    size_t len = 0;
    char *text = api_read_file(path, &len, &id);
    if (!text)
        return api_give(id.status, &id, d);
    TsStatus st = parse(path, text, len, lim, out, d);
    ts_free(text);
    return st;
}

/* Write all of text to fd; false on an error (errno set). */
static bool write_all(int fd, const char *text, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, text, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        text += w;
        n -= (size_t)w;
    }
    return true;
}

/* fsync (or syncfs, `whole`) through an fd of dir; false with errno set. */
static bool sync_through(const char *dir, bool whole)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = (whole ? syncfs(fd) : fsync(fd)) == 0;
    int err = errno;
    close(fd);
    errno = err;
    return ok;
}

bool api_sync_dir(const char *dir)
{
    return sync_through(dir, false);
}

bool api_sync_fs(const char *dir)
{
    return sync_through(dir, true);
}

bool api_parent(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') /* "a/b/" is b, in a */
        n--;
    size_t k = n;
    while (k > 0 && path[k - 1] != '/')
        k--;
    while (k > 1 && path[k - 1] == '/')
        k--;
    const char *dir = k == 0 ? "." : path;
    size_t len = k == 0 ? 1 : k;
    if (len >= cap) {
        errno = ENAMETOOLONG;
        return false;
    }
    memcpy(out, dir, len);
    out[len] = 0;
    return true;
}

bool api_sync_parent(const char *path)
{
    char dir[PATH_MAX];
    return api_parent(path, dir, sizeof dir) && api_sync_dir(dir);
}

TsStatus ts_write_text(const char *path, const char *text, TsDiag *d)
{
    API_NEED(path, d);
    API_NEED(text, d);
    IrDiag id = {0};
    size_t n = strlen(text);
    struct stat sb;
    /* A device or a pipe is written in place: renaming a temporary over
     * it would replace the node itself. */
    bool special = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode);
    char *tmp = NULL;
    int fd = -1;
    if (special) {
        /* O_NONBLOCK: a FIFO that no process reads fails (ENXIO) instead of
         * waiting for a reader; the writes then block as usual. */
        fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == ENXIO)
            return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                                     "cannot write %s: a FIFO that no process reads", path),
                            &id, d);
        int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    } else if ((tmp = ts_malloc(strlen(path) + 40))) {
        /* An unpredictable name created exclusively (O_EXCL: a link
         * planted there cannot redirect the write), with the mode a new
         * file gets (0666 under the umask), as fopen would give it. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)ts.tv_sec << 40);
        for (int tries = 0; fd < 0 && tries < 64; tries++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            sprintf(tmp, "%s.tmp.%016llx", path, (unsigned long long)r);
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            if (fd < 0 && errno != EEXIST)
                break;
        }
    }
    bool ok = fd >= 0 && write_all(fd, text, n);
    /* On the disk before the rename makes it the file, and the rename
     * itself after it: a crash of the machine leaves the old file or the
     * new one, never an empty or partial one under the name. */
    if (ok && !special)
        ok = fsync(fd) == 0;
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && !special && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
    }
    bool synced = !ok || special || api_sync_parent(path);
    int sync_err = errno;
    if (!ok && !special && fd >= 0)
        unlink(tmp);
    ts_free(tmp);
    if (!ok)
        return api_give(ir_error(&id, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "cannot write %s: %s", path,
                                 strerror(err ? err : ENOMEM)),
                        &id, d);
    if (!synced) /* renamed already: the file is whole, its rename may not be on the disk */
        return api_give(ir_error(&id, IR_ERUNTIME, NULL, NULL, (IrPos){0, 0}, "cannot sync the directory of %s: %s",
                                 path, strerror(sync_err)),
                        &id, d);
    return TS_OK;
}
