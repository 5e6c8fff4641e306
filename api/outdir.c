/*
 * outdir.c: the output directory of a run, all or nothing, never mixed
 * with another run's.
 *
 *   DIR/.tessel.lock   flock()ed for the whole run (ts_output_dir_open to
 *                      ts_output_dir_close): a second run into DIR fails at
 *                      once, naming the first one's pid; the kernel drops
 *                      the lock when a process dies, so none goes stale.
 *                      The pid is written once the lock is held and cleared
 *                      before it is let go, so the file names its holder
 *                      only while a tessel run holds it; another program
 *                      holding the lock (flock(1)), or a pid a killed run
 *                      left that no live process has, is "another process"
 *   DIR/.tessel-tmp-*  each file of the run, created O_CREAT|O_EXCL|
 *                      O_NOFOLLOW under an unpredictable name (a link
 *                      planted anywhere is never followed)
 *   DIR/output_<i>.npy, DIR/outfeed_<i>.npy, DIR/NAME.npy (tessel_save)
 *                      the temporaries renamed once every one is complete
 *   DIR/outputs.json   the manifest, renamed last: the run's id, the
 *                      model's SHA-256, each file with its kind, dtype,
 *                      shape and SHA-256, and "manifest_sha256": the
 *                      SHA-256 of the manifest itself (the JSON without
 *                      that key, compact with sorted keys)
 *
 * The temporaries are on the disk before the renames (syncfs) and the
 * renames after them (DIR fsync()ed), so a crash of the machine (not only
 * of tessel) leaves whole files under the names.
 *
 * Then what an earlier run left and this one did not rewrite is removed:
 * the files the earlier manifest lists (unchanged) and temporaries of
 * runs that died. Other files in DIR are never touched, also those under
 * tessel's output names that no trusted manifest lists unchanged (a
 * user's edited output_1.npy, their own output_7.npy). An earlier manifest is
 * believed only when it is tessel's (format, version and its own digest
 * right), and a file it lists is removed only when it is a regular .npy
 * file whose bytes still have the SHA-256 the manifest gives, is not the
 * model this run ran (by content) and is not a file this run read
 * (TsOutputs.reads: its --input and --infeed files). A run whose file
 * would replace (rename over) the model it ran, or a file it read that
 * tessel did not write, is refused before anything is written
 * (TS_EINPUT naming the file). A failure at any
 * step removes this run's temporaries (and the files it renamed), so the
 * directory keeps the earlier run's complete set. ts_outputs_verify
 * checks a directory against its manifest (a checkpoint before a resume).
 */
#include "api_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct TsOutputDir {
    char *dir;
    int lock_fd;
    bool made;               /* DIR did not exist: made here */
    dev_t dev;               /* DIR's identity when it was locked */
    ino_t ino;
    bool (*cancelled)(void *ctx); /* asked before the renames (ts_output_dir_on_cancel) */
    void *cancel_ctx;
};

static const char LOCK[] = ".tessel.lock";
static const char MANIFEST[] = "outputs.json";
static const char TMP[] = ".tessel-tmp-";
static const char FORMAT[] = "tessel-outputs";
static const char SELF[] = "manifest_sha256";
enum { MANIFEST_VERSION = 2 };

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ts_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static TsStatus fail_errno(IrStatus st, const char *path, const char *what, int err, TsDiag *d)
{
    IrDiag id = {0};
    return api_give(ir_error(&id, st, path, NULL, (IrPos){0, 0}, "%s: %s", what, strerror(err)), &id, d);
}

/* The pid a tessel run holding the lock wrote into it, when it is one and
 * a live process has it; else 0 (the holder is another program, or the
 * run that wrote it was killed before it could clear it). */
static long holder_pid(int fd)
{
    char buf[32] = "";
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    buf[r > 0 ? r : 0] = 0;
    char *end = NULL;
    long pid = strtol(buf, &end, 10);
    if (end == buf || *end != '\n' || pid <= 0 || pid == (long)getpid())
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM ? pid : 0;
}

/* Create DIR if it is missing (od->made) and lock DIR/.tessel.lock. */
static TsStatus lock_dir(TsOutputDir *od, TsDiag *d)
{
    IrDiag id = {0};
    const char *dir = od->dir;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return api_give(ir_error(&id, IR_EINPUT, dir, NULL, (IrPos){0, 0}, "not a directory"), &id, d);
    } else if (mkdir(dir, 0777) == 0) {
        od->made = true;
    } else if (errno != EEXIST) {
        return fail_errno(IR_ERUNTIME, dir, "cannot create the output directory", errno, d);
    }
    if (stat(dir, &sb) != 0)
        return fail_errno(IR_ERUNTIME, dir, "cannot use the output directory", errno, d);
    od->dev = sb.st_dev;
    od->ino = sb.st_ino;
    char *lp = join(dir, LOCK);
    if (!lp)
        return api_give(ir_oom(&id, NULL), &id, d);
    int fd = open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    int err = errno;
    TsStatus st = TS_OK;
    if (fd < 0) {
        st = fail_errno(IR_ERUNTIME, lp, "cannot create the output directory's lock", err, d);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        err = errno;
        long pid = err == EWOULDBLOCK ? holder_pid(fd) : 0;
        char who[64] = "another process";
        if (pid > 0)
            snprintf(who, sizeof who, "another tessel run (pid %ld)", pid);
        st = err == EWOULDBLOCK
                 ? api_give(ir_error(&id, IR_ERUNTIME, dir, NULL, (IrPos){0, 0},
                                     "%s is writing into this directory (%s is locked); two runs into one "
                                     "directory would mix their files: give another directory or let the "
                                     "first finish",
                                     who, LOCK),
                            &id, d)
                 : fail_errno(IR_ERUNTIME, lp, "cannot lock", err, d);
        close(fd);
    } else {
        /* The holder's pid, for the message of a run that finds it locked. */
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        bool said = ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n;
        (void)said;
        od->lock_fd = fd;
    }
    ts_free(lp);
    return st;
}

/* Could DIR, missing (stat's errno err), be made when the outputs come?
 * Its parent must be a directory this process may write into: a path
 * that cannot be made (its parent missing, a file or read-only; a loop of
 * links) is the run's error before it runs, not after all its steps
 * (where lock_dir would say the same). */
static TsStatus can_make(const char *dir, int err, TsDiag *d)
{
    if (err != ENOENT)
        return fail_errno(IR_ERUNTIME, dir, "cannot use the output directory", err, d);
    char parent[PATH_MAX];
    struct stat sb;
    err = !api_parent(dir, parent, sizeof parent) ? errno
          : stat(parent, &sb) != 0              ? errno
          : !S_ISDIR(sb.st_mode)                ? ENOTDIR
          : access(parent, W_OK | X_OK) != 0    ? errno
                                                : 0;
    return err ? fail_errno(IR_ERUNTIME, dir, "cannot create the output directory", err, d) : TS_OK;
}

/* ts_output_dir_open (make: false) and ts_output_dir_make (true). */
static TsStatus open_dir(const char *dir, bool make, TsOutputDir **out, TsDiag *d)
{
    IrDiag id = {0};
    *out = NULL;
    TsOutputDir *od = ts_calloc(1, sizeof *od);
    if (od)
        od->dir = ts_strdup(dir);
    if (!od || !od->dir) {
        ts_free(od);
        return api_give(ir_oom(&id, NULL), &id, d);
    }
    od->lock_fd = -1;
    /* A directory that exists is locked now, for the whole run. One that
     * does not is made and locked when the outputs are written: a run
     * that fails (or is killed) before leaves no directory behind, and a
     * run that made it in the meantime holds its lock or has finished. */
    struct stat sb;
    TsStatus st = make || stat(dir, &sb) == 0 ? lock_dir(od, d) : can_make(dir, errno, d);
    if (st != TS_OK) {
        ts_output_dir_close(od);
        return st;
    }
    *out = od;
    return TS_OK;
}

TsStatus ts_output_dir_open(const char *dir, TsOutputDir **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(dir, d);
    API_NEED(out, d);
    return open_dir(dir, false, out, d);
}

TsStatus ts_output_dir_make(const char *dir, TsOutputDir **out, TsDiag *d)
{
    API_CLEAR(out);
    API_NEED(dir, d);
    API_NEED(out, d);
    return open_dir(dir, true, out, d);
}

void ts_output_dir_on_cancel(TsOutputDir *od, bool (*cancelled)(void *ctx), void *ctx)
{
    if (!od)
        return;
    od->cancelled = cancelled;
    od->cancel_ctx = ctx;
}

void ts_output_dir_close(TsOutputDir *od)
{
    if (!od)
        return;
    if (od->made) {
        /* A directory this run made and left empty (a failed run) goes
         * again; one with outputs keeps its lock file. */
        DIR *dd = opendir(od->dir);
        bool empty = true;
        for (struct dirent *e; dd && (e = readdir(dd));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK))
                empty = false;
        if (dd)
            closedir(dd);
        char *lp = empty ? join(od->dir, LOCK) : NULL;
        if (lp && unlink(lp) == 0)
            rmdir(od->dir);
        ts_free(lp);
    }
    if (od->lock_fd >= 0) {
        /* Cleared while still held: a run that finds the lock taken after
         * this reads no pid of a run that is over. */
        if (ftruncate(od->lock_fd, 0) != 0) {
            /* the file keeps the pid; holder_pid finds it dead */
        }
        close(od->lock_fd);
    }
    ts_free(od->dir);
    ts_free(od);
}

/* ---- the files of a run ---- */

typedef struct Entry {
    char *name;              /* in DIR */
    const char *kind;        /* "output", "outfeed", "save" */
    DevValue *value;         /* owned reference (trimmed) */
    char *tmp;               /* the temporary, once created */
    bool renamed;
    char sha256[65];
} Entry;

typedef struct Set {
    int32_t n;
    Entry *e;
    const char **sorted;     /* the names, sorted (in_set: a binary search) */
} Set;

static void set_free(Set *s)
{
    for (int32_t i = 0; i < s->n; i++) {
        ts_free(s->e[i].name);
        ts_free(s->e[i].tmp);
        dev_value_unref(s->e[i].value);
    }
    ts_free(s->e);
    ts_free(s->sorted);
    memset(s, 0, sizeof *s);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A directory of 65,536 outputs is checked against 65,536 names: sorted
 * once, searched in log time. */
static bool sort_set(Set *s)
{
    s->sorted = ts_malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof *s->sorted);
    if (!s->sorted)
        return false;
    for (int32_t i = 0; i < s->n; i++)
        s->sorted[i] = s->e[i].name;
    qsort(s->sorted, (size_t)s->n, sizeof *s->sorted, cmp_name);
    return true;
}

static bool add(Set *s, int32_t cap, char *name, const char *kind, DevValue *v)
{
    DevValue *w = v ? dev_value_trimmed(v) : NULL; /* a bounded dynamic leaf at its run-time size */
    if (!name || !w || s->n >= cap) {
        ts_free(name);
        dev_value_unref(w);
        return false;
    }
    s->e[s->n++] = (Entry){.name = name, .kind = kind, .value = w};
    return true;
}

static char *fmt_name(const char *fmt, int a, int b)
{
    char buf[96];
    snprintf(buf, sizeof buf, fmt, a, b);
    return ts_strdup(buf);
}

/* Every file of o: output leaves (per device in a replay of every
 * device), outfeeds, saves. Token leaves have no file. */
static IrStatus build_set(const TsOutputs *o, Set *s, IrDiag *d)
{
    int32_t nout = ir_shape_leaf_count(&o->result->shape);
    int32_t nfeed = o->outfeeds ? ir_shape_leaf_count(&o->outfeeds->shape) : 0;
    int32_t cap = nout + nfeed + o->saves.n;
    int32_t per = o->ndevices > 0 ? (int32_t)(nout / o->ndevices) : 0;
    memset(s, 0, sizeof *s);
    s->e = ts_calloc((size_t)(cap > 0 ? cap : 1), sizeof *s->e);
    DevValue **leaves = ts_malloc((size_t)(nout + nfeed + 1) * sizeof *leaves);
    bool ok = s->e && leaves;
    if (ok) {
        dev_value_leaves(o->result, leaves);
        if (o->outfeeds)
            dev_value_leaves(o->outfeeds, leaves + nout);
    }
    for (int32_t i = 0; ok && i < nout; i++) {
        DevValue *v = leaves[i];
        if (v->shape.type == IR_TOKEN)
            continue;
        char *name = per > 0 ? fmt_name("output_%d.device_%d.npy", i % per, i / per) : fmt_name("output_%d.npy", i, 0);
        ok = add(s, cap, name, "output", v);
    }
    for (int32_t i = 0; ok && i < nfeed; i++) {
        DevValue *v = leaves[nout + i];
        if (v->shape.type != IR_TOKEN)
            ok = add(s, cap, fmt_name("outfeed_%d.npy", i, 0), "outfeed", v);
    }
    for (int32_t i = 0; ok && i < o->saves.n; i++) {
        const char *nm = o->saves.names[i];
        const char *why = rt_save_name_problem(nm, strlen(nm));
        if (why) {
            ts_free(leaves);
            set_free(s);
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "tessel_save name '%s': %s", nm, why);
        }
        size_t n = strlen(nm) + 5;
        char *name = ts_malloc(n);
        if (name)
            snprintf(name, n, "%s.npy", nm);
        ok = add(s, cap, name, "save", o->saves.values[i]);
    }
    ts_free(leaves);
    ok = ok && sort_set(s);
    if (!ok) {
        set_free(s);
        return ir_oom(d, NULL);
    }
    return IR_OK;
}

static bool in_set(const Set *s, const char *name)
{
    return bsearch(&name, s->sorted, (size_t)s->n, sizeof *s->sorted, cmp_name) != NULL;
}

/* Random hex digits (getrandom; the clock and pid if it fails). */
static void random_hex(char *out, size_t ndigits)
{
    uint8_t b[32] = {0};
    size_t nb = (ndigits + 1) / 2 < sizeof b ? (ndigits + 1) / 2 : sizeof b;
    if (getrandom(b, nb, 0) != (ssize_t)nb) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)ts.tv_sec << 40);
        for (size_t i = 0; i < nb; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            b[i] ^= (uint8_t)(x >> 56);
        }
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < ndigits; i++)
        out[i] = hex[(b[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[ndigits] = 0;
}

/* A new temporary in DIR, created exclusively (O_EXCL: nothing planted
 * under its name is followed or reused). *tmp: its path. */
static int create_temp(const char *dir, char **tmp)
{
    *tmp = NULL;
    for (int tries = 0; tries < 64; tries++) {
        char name[sizeof TMP + 24];
        char r[17];
        random_hex(r, 16);
        snprintf(name, sizeof name, "%s%s", TMP, r);
        char *p = join(dir, name);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0) {
            *tmp = p;
            return fd;
        }
        int err = errno;
        ts_free(p);
        if (err != EEXIST) {
            errno = err;
            return -1;
        }
    }
    errno = EEXIST;
    return -1;
}

/* Write entry e to a temporary and hash it. */
static IrStatus write_entry(const char *dir, Entry *e, IrDiag *d)
{
    int fd = create_temp(dir, &e->tmp);
    if (fd < 0)
        return ir_error(d, IR_ERUNTIME, dir, NULL, (IrPos){0, 0}, "cannot create a file for %s: %s", e->name,
                        strerror(errno));
    char *fin = join(dir, e->name);
    IrStatus st = fin ? rt_npy_write_fd(fd, fin, &e->value->shape, e->value->data, d)
                      : ir_oom(d, NULL);
    if (st == IR_OK && !compile_sha256_fd(fd, e->sha256))
        st = ir_error(d, IR_ERUNTIME, fin, NULL, (IrPos){0, 0}, "cannot read back: %s", strerror(errno));
    if (close(fd) != 0 && st == IR_OK)
        st = ir_error(d, IR_ERUNTIME, fin, NULL, (IrPos){0, 0}, "write error: %s", strerror(errno));
    ts_free(fin);
    return st;
}

/* The manifest's own digest: the SHA-256 of m without its SELF key,
 * dumped compact with sorted keys (the same bytes whatever the file's
 * layout). False when out of memory. */
static bool manifest_digest(const json_t *m, char out[65])
{
    json_t *c = json_copy((json_t *)m);
    if (c)
        json_object_del(c, SELF);
    char *t = c ? json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(c);
    if (!t)
        return false;
    compile_sha256_hex(t, strlen(t), out);
    free(t);
    return true;
}

/* The manifest's text (docs/cli.md, "Outputs"). */
static char *manifest_text(const TsOutputs *o, const Set *s)
{
    char run_id[33];
    random_hex(run_id, 32);
    json_t *files = json_array();
    for (int32_t i = 0; files && i < s->n; i++) {
        const Entry *e = &s->e[i];
        json_t *shape = json_array();
        for (int32_t k = 0; shape && k < e->value->shape.rank; k++)
            json_array_append_new(shape, json_integer(e->value->shape.dims[k]));
        const char *descr = rt_npy_descr(e->value->shape.type);
        json_array_append_new(files, json_pack("{s:s, s:s, s:s, s:o, s:s}", "name", e->name, "kind", e->kind,
                                               "dtype", descr ? descr : "", "shape", shape ? shape : json_null(),
                                               "sha256", e->sha256));
    }
    json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:o}", "format", FORMAT, "version", MANIFEST_VERSION,
                          "run_id", run_id, "tessel", ts_version(), "model_sha256", o->model_sha256,
                          "files", files ? files : json_null());
    char self[65];
    if (m && (!manifest_digest(m, self) || json_object_set_new(m, SELF, json_string(self)) != 0)) {
        json_decref(m);
        m = NULL;
    }
    char *t = m ? json_dumps(m, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(m);
    if (!t)
        return NULL;
    char *r = ts_malloc(strlen(t) + 2);
    if (r)
        snprintf(r, strlen(t) + 2, "%s\n", t);
    free(t);
    return r;
}

/* Write the manifest text to a temporary; *tmp its path. */
static IrStatus write_manifest(const char *dir, const char *text, char **tmp, IrDiag *d)
{
    int fd = create_temp(dir, tmp);
    size_t n = strlen(text);
    bool ok = fd >= 0;
    for (size_t k = 0; ok && k < n;) {
        ssize_t w = write(fd, text + k, n - k);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        k += ok ? (size_t)w : 0;
    }
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    return ok ? IR_OK
              : ir_error(d, IR_ERUNTIME, dir, NULL, (IrPos){0, 0}, "cannot write %s: %s", MANIFEST, strerror(err));
}

/* Is `name` a temporary of a run that died (.tessel-tmp-*, or
 * NAME.npy.tmp.<pid> of older versions)? Output names (output_<i>.npy,
 * outfeed_<i>.npy) are not enough: a file under one that no trusted
 * manifest lists unchanged may be the user's (one they edited, or their
 * own output_7.npy), and is never removed. */
static bool temp_name(const char *name)
{
    if (strncmp(name, TMP, strlen(TMP)) == 0)
        return true;
    const char *t = strstr(name, ".npy.tmp.");
    return t && t[9] && strspn(t + 9, "0123456789") == strlen(t + 9);
}

/* DIR's manifest when tessel wrote it: a regular file (no link
 * followed) of at most 64 MiB whose format, version and own digest are
 * right, else NULL with *why saying what is wrong. */
static json_t *trusted_manifest(const char *dir, const char **why)
{
    char *mp = join(dir, MANIFEST);
    struct stat sb;
    json_t *m = NULL;
    if (!mp)
        *why = "out of memory";
    else if (lstat(mp, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size >= (1 << 26))
        *why = "missing, not a regular file or larger than 64 MiB";
    else if (!(m = json_load_file(mp, 0, NULL)))
        *why = "not JSON";
    ts_free(mp);
    if (!m)
        return NULL;
    const char *format = json_string_value(json_object_get(m, "format"));
    const char *self = json_string_value(json_object_get(m, SELF));
    char dg[65];
    if (!format || strcmp(format, FORMAT))
        *why = "its \"format\" is not \"tessel-outputs\": tessel did not write it";
    else if (json_integer_value(json_object_get(m, "version")) != MANIFEST_VERSION)
        *why = "its \"version\" is not one this tessel writes";
    else if (!json_is_array(json_object_get(m, "files")))
        *why = "it lists no \"files\"";
    else if (!self || !manifest_digest(m, dg) || strcmp(self, dg))
        *why = "its \"manifest_sha256\" is not the SHA-256 of its content: it was edited or corrupted";
    else
        return m;
    json_decref(m);
    return NULL;
}

static bool read_by_run(const TsOutputs *o, const struct stat *sb)
{
    for (int32_t i = 0; i < o->nreads; i++)
        if (o->reads[i].dev == (uint64_t)sb->st_dev && o->reads[i].ino == (uint64_t)sb->st_ino)
            return true;
    return false;
}

/* The SHA-256 of the regular file `path` (no link followed) into out;
 * *sb its status. False when it is not one or cannot be read. */
static bool file_sha256(const char *path, struct stat *sb, char out[65])
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    bool ok = fd >= 0 && fstat(fd, sb) == 0 && S_ISREG(sb->st_mode) && compile_sha256_fd(fd, out);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* May cleanup remove DIR/name, a file listed with SHA-256 `sha`? Only a
 * plain .npy name whose file's bytes are still those, and neither the
 * model this run ran nor a file it read. */
static bool removable_listed(const TsOutputs *o, const char *path, const char *name, const char *sha)
{
    size_t n = strlen(name);
    if (n < 5 || strcmp(name + n - 4, ".npy") || strchr(name, '/') || name[0] == '.' || strstr(name, "..") ||
        !sha || strlen(sha) != 64)
        return false;
    struct stat sb;
    char dg[65];
    return file_sha256(path, &sb, dg) && strcmp(dg, sha) == 0 && strcmp(dg, o->model_sha256) != 0 &&
           !read_by_run(o, &sb);
}

/* Remove what an earlier run left that this set does not rewrite. */
static void remove_stale(const TsOutputs *o, const char *dir, const Set *s, json_t *earlier)
{
    json_t *files = json_object_get(earlier, "files");
    for (size_t i = 0; json_is_array(files) && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || in_set(s, n))
            continue;
        char *p = join(dir, n);
        if (p && removable_listed(o, p, n, json_string_value(json_object_get(f, "sha256"))))
            unlink(p);
        ts_free(p);
    }
    DIR *dd = opendir(dir);
    for (struct dirent *e; dd && (e = readdir(dd));) {
        if (!temp_name(e->d_name) || in_set(s, e->d_name))
            continue;
        char *p = join(dir, e->d_name);
        struct stat sb;
        if (p && lstat(p, &sb) == 0 && !read_by_run(o, &sb))
            unlink(p);
        ts_free(p);
    }
    if (dd)
        closedir(dd);
}

/* Does the regular file `path` begin as a .npy file does? (A model or
 * plan never does, so only other files need their SHA-256 compared.) */
static bool npy_magic(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    char m[6] = {0};
    bool yes = fd >= 0 && read(fd, m, sizeof m) == (ssize_t)sizeof m && memcmp(m, "\x93NUMPY", 6) == 0;
    if (fd >= 0)
        close(fd);
    return yes;
}

/* Does the trusted earlier manifest list DIR/name with the SHA-256 its
 * bytes still have (a file tessel wrote, unchanged)? */
static bool listed_unchanged(const json_t *earlier, const char *path, const char *name)
{
    json_t *files = json_object_get(earlier, "files");
    for (size_t i = 0; json_is_array(files) && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *n = json_string_value(json_object_get(f, "name"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        struct stat sb;
        char dg[65];
        if (n && sha && !strcmp(n, name))
            return file_sha256(path, &sb, dg) && !strcmp(dg, sha);
    }
    return false;
}

/* A file of the set would replace, by its rename, the model this run ran
 * (by content) or a file it read (an --input or --infeed: by device and
 * inode) that tessel did not write (no trusted earlier manifest lists it
 * unchanged: feeding an output back into the next run into the same
 * directory stays possible): refused before anything is written, so the
 * user's file stays. */
static IrStatus check_replace(const TsOutputs *o, const char *dir, const Set *s, const json_t *earlier, IrDiag *d)
{
    for (int32_t i = 0; i < s->n; i++) {
        char *p = join(dir, s->e[i].name);
        if (!p)
            return ir_oom(d, NULL);
        struct stat sb, sb2;
        char dg[65];
        const char *what = NULL;
        if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (read_by_run(o, &sb) && !listed_unchanged(earlier, p, s->e[i].name))
                what = "a file this run reads (an --input or --infeed) that tessel did not write";
            else if (o->model_sha256[0] && !npy_magic(p) && file_sha256(p, &sb2, dg) && !strcmp(dg, o->model_sha256))
                what = "the model this run ran";
        }
        if (what) {
            IrStatus st = ir_error(d, IR_EINPUT, p, NULL, (IrPos){0, 0},
                                   "is %s; writing the %s %s would replace it: give another output directory", what,
                                   s->e[i].kind, s->e[i].name);
            ts_free(p);
            return st;
        }
        ts_free(p);
    }
    return IR_OK;
}

static void undo(const char *dir, Set *s, char *mtmp)
{
    for (int32_t i = 0; i < s->n; i++) {
        if (s->e[i].tmp)
            unlink(s->e[i].tmp);
        if (s->e[i].renamed) {
            char *p = join(dir, s->e[i].name);
            if (p)
                unlink(p);
            ts_free(p);
        }
    }
    if (mtmp)
        unlink(mtmp);
}

/* DIR is still the directory this run locked (ts_output_dir_open may have
 * locked it long before the outputs come): one removed, moved away or
 * replaced by another at the same path meanwhile is not written into, since
 * that one was never locked nor checked (check_replace), and may be a
 * user's; the run fails naming it (status 1), nothing written. */
static TsStatus same_dir(const TsOutputDir *od, TsDiag *d)
{
    struct stat sb;
    if (stat(od->dir, &sb) == 0 && sb.st_dev == od->dev && sb.st_ino == od->ino)
        return TS_OK;
    IrDiag id = {0};
    return api_give(ir_error(&id, IR_ERUNTIME, od->dir, NULL, (IrPos){0, 0},
                             "the output directory was removed, moved or replaced during the run (it is not "
                             "the directory this run locked); no output written"),
                    &id, d);
}

TsStatus ts_outputs_write_to(const TsOutputs *o, TsOutputDir *od, TsDiag *d)
{
    API_NEED(o, d);
    API_NEED(od, d);
    TsStatus ls = od->lock_fd < 0 ? lock_dir(od, d) : same_dir(od, d);
    if (ls != TS_OK)
        return ls;
    IrDiag id = {0};
    Set s;
    const char *why = NULL;
    json_t *earlier = trusted_manifest(od->dir, &why);
    IrStatus st = build_set(o, &s, &id);
    if (st == IR_OK)
        st = check_replace(o, od->dir, &s, earlier, &id);
    for (int32_t i = 0; st == IR_OK && i < s.n; i++)
        st = write_entry(od->dir, &s.e[i], &id);
    char *mtext = st == IR_OK ? manifest_text(o, &s) : NULL, *mtmp = NULL;
    if (st == IR_OK && !mtext)
        st = ir_oom(&id, NULL);
    if (st == IR_OK)
        st = write_manifest(od->dir, mtext, &mtmp, &id);
    ts_free(mtext);
    /* Every temporary on the disk before the renames make them the
     * outputs: a machine that crashes after them keeps whole files under
     * the names, not empty ones the page cache never wrote out. One
     * syncfs() for the set: an fsync() each commits the file system's
     * journal each time (5.6 ms a file on this project's machines: 0.4 s
     * for 64 outputs; 65,536 outputs are 4.5 s of writing out either way) */
    if (st == IR_OK && !api_sync_fs(od->dir))
        st = ir_error(&id, IR_ERUNTIME, od->dir, NULL, (IrPos){0, 0}, "cannot sync the outputs to the disk: %s",
                      strerror(errno));
    /* The last moment to give up with DIR as it was: after the first
     * rename an earlier run's file is replaced. */
    if (st == IR_OK && od->cancelled && od->cancelled(od->cancel_ctx))
        st = ir_error(&id, IR_ERUNTIME, od->dir, NULL, (IrPos){0, 0},
                      "the write was cancelled before the outputs were renamed into place; the directory is as it "
                      "was");
    /* Every file is complete: rename them, the manifest last. */
    for (int32_t i = 0; st == IR_OK && i < s.n; i++) {
        char *fin = join(od->dir, s.e[i].name);
        if (!fin || rename(s.e[i].tmp, fin) != 0)
            st = ir_error(&id, IR_ERUNTIME, fin ? fin : od->dir, NULL, (IrPos){0, 0}, "cannot rename: %s",
                          strerror(fin ? errno : ENOMEM));
        else {
            s.e[i].renamed = true;
            ts_free(s.e[i].tmp);
            s.e[i].tmp = NULL;
        }
        ts_free(fin);
    }
    char *mfin = st == IR_OK ? join(od->dir, MANIFEST) : NULL;
    if (st == IR_OK && (!mfin || rename(mtmp, mfin) != 0))
        st = ir_error(&id, IR_ERUNTIME, od->dir, NULL, (IrPos){0, 0}, "cannot rename %s: %s", MANIFEST,
                      strerror(mfin ? errno : ENOMEM));
    ts_free(mfin);
    /* The renames on the disk too, before the run says it is done. */
    if (st == IR_OK && !api_sync_dir(od->dir))
        st = ir_error(&id, IR_ERUNTIME, od->dir, NULL, (IrPos){0, 0}, "cannot sync the output directory: %s",
                      strerror(errno));
    if (st == IR_OK) {
        remove_stale(o, od->dir, &s, earlier);
    } else if (s.e) {
        undo(od->dir, &s, mtmp);
    }
    json_decref(earlier);
    ts_free(mtmp);
    set_free(&s);
    return api_give(st, &id, d);
}

TsStatus ts_outputs_write(const TsOutputs *o, const char *dir, TsDiag *d)
{
    API_NEED(o, d);
    API_NEED(dir, d);
    TsOutputDir *od = NULL;
    TsStatus st = ts_output_dir_open(dir, &od, d);
    if (st == TS_OK)
        st = ts_outputs_write_to(o, od, d);
    ts_output_dir_close(od);
    return st;
}

void ts_outputs_remove(const TsOutputs *o, const char *dir)
{
    if (!o || !dir)
        return ;
    IrDiag id = {0};
    Set s;
    if (build_set(o, &s, &id) != IR_OK) {
        ir_diag_clear(&id);
        return;
    }
    for (int32_t i = 0; i < s.n; i++)
        s.e[i].renamed = true;
    undo(dir, &s, NULL);
    char *mp = join(dir, MANIFEST);
    if (mp)
        unlink(mp);
    ts_free(mp);
    set_free(&s);
}

TsStatus ts_outputs_verify(const char *dir, char manifest_sha256[65], TsDiag *d)
{
    IrDiag id = {0};
    if (manifest_sha256)
        manifest_sha256[0] = 0;
    if (!dir)
        return api_give(ir_error(&id, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "ts_outputs_verify: dir is NULL"), &id, d);
    const char *why = NULL;
    json_t *m = trusted_manifest(dir, &why);
    char *mp = join(dir, MANIFEST);
    IrStatus st = !mp  ? ir_oom(&id, NULL)
                  : !m ? ir_error(&id, IR_EINPUT, mp, NULL, (IrPos){0, 0}, "not a manifest tessel wrote: %s", why)
                       : IR_OK;
    json_t *files = json_object_get(m, "files");
    for (size_t i = 0; st == IR_OK && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *n = json_string_value(json_object_get(f, "name"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        if (!n || !*n || strchr(n, '/') || n[0] == '.' || !sha) {
            st = ir_error(&id, IR_EINPUT, mp, NULL, (IrPos){0, 0}, "file %zu has no plain name and SHA-256", i);
            break;
        }
        char *p = join(dir, n), dg[65];
        struct stat sb;
        if (!p)
            st = ir_oom(&id, NULL);
        else if (!file_sha256(p, &sb, dg))
            st = ir_error(&id, IR_EINPUT, p, NULL, (IrPos){0, 0},
                          "missing or not a regular file, though %s lists it", MANIFEST);
        else if (strcmp(dg, sha))
            st = ir_error(&id, IR_EINPUT, p, NULL, (IrPos){0, 0},
                          "its SHA-256 is %s, not the %s that %s gives: the file was changed or corrupted", dg, sha,
                          MANIFEST);
        ts_free(p);
    }
    if (st == IR_OK && manifest_sha256)
        snprintf(manifest_sha256, 65, "%s", json_string_value(json_object_get(m, SELF)));
    json_decref(m);
    ts_free(mp);
    return api_give(st, &id, d);
}
