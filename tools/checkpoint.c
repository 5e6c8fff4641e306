/*
 * checkpoint.c: `tessel run --steps K --checkpoint-every M --checkpoint-dir
 * DIR` and `--resume DIR`. A long run is cut into chunks of M steps; after
 * each chunk the step's outputs, the aliased ones (input_output_alias: the
 * donated parameters, the state a training step carries) among them, are
 * written as a checkpoint, and the next chunk binds those parameters to
 * the checkpoint's files. A resumed run binds them the same way from the
 * last complete checkpoint, so an interrupted run and a whole one feed
 * every step the same bytes: their results are bit-identical.
 *
 * A checkpoint is a directory DIR/step-<S> (S: steps done) holding
 * output_<i>.npy and checkpoint.json:
 *
 *   {"format": "tessel-checkpoint", "version": 3, "step": 100,
 *    "steps": 400, "digest": "<SHA-256 of the plan file>",
 *    "outputs_sha256": "<outputs.json's manifest_sha256>",
 *    "aliases": [{"output": 0, "parameter": 1}, {"output": 1, "parameter": 0, "leaf": 1}],
 *    "random_inputs": "7", "inputs": [{"key": "x", "sha256": "<...>"}],
 *    "init_state": "zeros",
 *    "checkpoint_sha256": "<SHA-256 of the text before this member>"}
 *
 * "aliases" lists every leaf the state is made of: an alias naming a
 * value inside a tuple parameter ({1}: (0, {1})) moves that leaf ("leaf":
 * depth first inside the parameter), a tuple one each of its leaves. The
 * tuple's other leaves are no state: every step is given them again as the
 * run's inputs give them, so the next chunk and a resume bind them from
 * those inputs (their digests are in "inputs", or the seed), and the state
 * leaves, as "P.L", from the checkpoint's outputs.
 *
 * "random_inputs" is the --random-inputs seed ("none" without), "inputs"
 * each --input but the state's (which the checkpoint replaces) by the
 * parameter it binds (its key when none answers) and ts_input_sha256 (its
 * value, from a file or an array alike), "init_state" --init-state ("zeros",
 * or "none" without: the parameters marked tessel_state="zeros" that no
 * alias names are inputs too, zeros with it and random or bound without;
 * a checkpoint without the member, an older tessel's, counts as "none"):
 * a resume whose seed, inputs or --init-state differ is refused, naming
 * the difference (its steps would go on from other data).
 * "checkpoint_sha256" makes an edit of any other member (a "digest" made
 * another program's, so the checkpoint would be passed over unnamed) a
 * checkpoint that does not verify.
 *
 * It is written into a fresh directory DIR/.step-<S>.XXXXXX (mkdtemp:
 * created exclusively, unpredictable, never a symlink followed) and
 * renamed to DIR/step-<S> only when complete, so a run killed at any
 * moment leaves either a whole checkpoint or none (a stale temporary is
 * ignored). The digest names the program: a checkpoint of another model,
 * other options or another layout is refused (exit 2).
 *
 * Nothing of a checkpoint is taken on faith when it is resumed: its step
 * must be the one its directory is named after, its outputs.json must be
 * the manifest tessel wrote (ts_outputs_verify: format and own digest)
 * and the one checkpoint.json names (outputs_sha256), and every file the
 * manifest lists must still have its SHA-256. A checkpoint that fails is
 * named in a warning and passed over: the resume takes the last one that
 * verifies (the earlier checkpoints are the fallback), and none is an
 * error (exit 2).
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* fsync the directory dir (its entries); false with errno set. */
static bool sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = fsync(fd) == 0;
    int err = errno;
    close(fd);
    errno = err;
    return ok;
}

static int ckpt_error(const char *fmt, const char *a, const char *b)
{
    fputs("tessel: error: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return CLI_USAGE;
}

/* The value of "key": in a checkpoint.json we wrote (a number, or a
 * string into buf). */
static bool json_field(const char *text, const char *key, char *buf, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(text, pat);
    if (!p)
        return false;
    p += strlen(pat);
    if (*p == '"')
        p++;
    size_t k = 0;
    while (p[k] && p[k] != '"' && p[k] != ',' && p[k] != '}' && k + 1 < n)
        k++;
    memcpy(buf, p, k);
    buf[k] = 0;
    return k > 0;
}

static const char SELF_KEY[] = ", \"checkpoint_sha256\": \"";

/* key with '"', '\\' and control bytes as \u00XX: a JSON string's content
 * that never holds SELF_KEY. */
static void json_escape(char *out, size_t n, const char *key)
{
    size_t k = 0;
    for (const unsigned char *c = (const unsigned char *)key; *c && k + 7 < n; c++)
        if (*c == '"' || *c == '\\' || *c < 0x20)
            k += (size_t)snprintf(out + k, n - k, "\\u%04x", *c);
        else
            out[k++] = (char)*c;
    out[k] = 0;
}

/* Does key bind a leaf the checkpoint holds (the state)? By the rule of
 * TsInput.key (ts_plan_input_key): "0", "x", "0.1" and "p.1" alike. A key
 * nothing answers to binds none (the run names it). */
static bool binds_state(const TsPlan *p, const CliCkpt *c, const char *key)
{
    int32_t param = -1, leaf = -1;
    TsDiag d = {0};
    TsStatus st = ts_plan_input_key(p, key, &param, &leaf, &d);
    ts_diag_clear(&d);
    for (int32_t k = 0; st == TS_OK && k < c->nalias; k++)
        if (c->param[k] == param && c->pleaf[k] == leaf)
            return true;
    return false;
}

/* The key an input is recorded by (into buf, or key itself): what it
 * binds by the rule of TsInput.key (ts_plan_input_key), "P" for an array
 * parameter and "P.L" for a leaf of a tuple, whatever name bound it ("x"
 * and "1" are one input, in a plan with tuples too); key as given when
 * nothing answers (as python/tessel's _taken_with records it). */
static const char *record_key(const TsPlan *p, const char *key, char *buf, size_t n)
{
    int32_t param = -1, leaf = -1;
    TsDiag d = {0};
    TsStatus st = ts_plan_input_key(p, key, &param, &leaf, &d);
    ts_diag_clear(&d);
    if (st != TS_OK)
        return key;
    if (leaf >= 0)
        snprintf(buf, n, "%d.%d", (int)param, (int)leaf);
    else
        snprintf(buf, n, "%d", (int)param);
    return buf;
}

/* c->taken_with from the options: the seed, each input that does not
 * bind the state, by its key and content, and --init-state. */
static int record_inputs(const CliOptions *o, const TsPlan *p, CliCkpt *c)
{
    size_t n = 128 + (size_t)o->ninputs * (64 + 6 * 256 + 80);
    char *r = malloc(n);
    if (!r) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    size_t used = o->random ? (size_t)snprintf(r, n, "\"random_inputs\": \"%llu\", \"inputs\": [",
                                               (unsigned long long)o->seed)
                            : (size_t)snprintf(r, n, "\"random_inputs\": \"none\", \"inputs\": [");
    int nin = 0;
    for (int32_t i = 0; i < o->ninputs; i++) {
        char sha[65], key[6 * 256 + 1], idx[32];
        TsDiag d = {0};
        if (binds_state(p, c, o->inputs[i].key))
            continue;
        if (ts_input_sha256(&o->inputs[i], sha, &d) != TS_OK) {
            free(r);
            return cli_report(d.status, &d);
        }
        /* by the parameter it binds, so "x" and "0" are one input */
        json_escape(key, sizeof key, record_key(p, o->inputs[i].key, idx, sizeof idx));
        used += (size_t)snprintf(r + used, n - used, "%s{\"key\": \"%s\", \"sha256\": \"%s\"}", nin++ ? ", " : "",
                                 key, sha);
    }
    snprintf(r + used, n - used, "], \"init_state\": \"%s\"", o->zero_state ? "zeros" : "none");
    c->taken_with = r;
    return CLI_OK;
}

/* The S of a directory named step-S (S >= 1, decimal, no sign or
 * leading zero), or -1. */
static int64_t step_of_name(const char *name)
{
    const char *p = name + 5;
    if (strncmp(name, "step-", 5) || *p < '1' || *p > '9' || strspn(p, "0123456789") != strlen(p) ||
        strlen(p) > 18)
        return -1;
    return strtoll(p, NULL, 10);
}

/* Where SELF_KEY (its last occurrence) starts when the text before it has
 * the SHA-256 that follows it and only '"}' and a newline follow that;
 * NULL otherwise (an edit, a cut, a NUL byte). */
static const char *self_digest_at(const char *text, size_t n)
{
    const char *at = NULL;
    for (const char *q = strstr(text, SELF_KEY); q; q = strstr(q + 1, SELF_KEY))
        at = q;
    if (!at || strlen(text) != n)
        return NULL;
    const char *hex = at + strlen(SELF_KEY);
    char want[65];
    TsDiag d = {0};
    if (ts_sha256(text, (size_t)(at - text), want, &d) != TS_OK) {
        ts_diag_clear(&d);
        return NULL;
    }
    return strncmp(hex, want, 64) == 0 && strcmp(hex + 64, "\"}\n") == 0 ? at : NULL;
}

/* The most a checkpoint.json may hold (its inputs' list grows with
 * --input: 1 MiB is thousands). */
#define MANIFEST_MAX ((size_t)1 << 20)

/* What a checkpoint without "init_state" was taken with (keys are
 * escaped: no input's holds the member's name). */
static const char INIT_NONE[] = ", \"init_state\": \"none\"";

/* DIR/step-S/checkpoint.json read and checked against this plan: its
 * step, or -1. *other set when it belongs to another program; *why says
 * why a checkpoint of this program is not used; *taken (heap, when the
 * step is returned) what its inputs were (c->taken_with's form). */
static int64_t read_manifest(const char *dir, const char *name, const char *digest, bool *other, char *why,
                             size_t nwhy, char **taken)
{
    char path[4200], sdir[4096];
    snprintf(sdir, sizeof sdir, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/checkpoint.json", sdir);
    *why = 0;
    *taken = NULL;
    int64_t named = step_of_name(name);
    if (named < 0)
        return -1;
    /* ts_read_file: a FIFO or a device there is refused, not waited on. */
    TsDiag d = {0};
    char *text = NULL;
    size_t n = 0;
    if (ts_read_file(path, MANIFEST_MAX, &text, &n, &d) != TS_OK) {
        snprintf(why, nwhy, "checkpoint.json: %s", d.msg ? d.msg : "cannot be read");
        ts_diag_clear(&d);
        return -1;
    }
    char step[32], dg[80], fmt[40], ver[16], osha[80];
    if (!json_field(text, "format", fmt, sizeof fmt) || strcmp(fmt, "tessel-checkpoint") ||
        !json_field(text, "step", step, sizeof step) || !json_field(text, "digest", dg, sizeof dg)) {
        snprintf(why, nwhy, "checkpoint.json is not one tessel wrote (its \"format\", \"step\" or \"digest\" is "
                            "missing or other): edited or corrupted");
        ts_free(text);
        return -1;
    }
    if (!json_field(text, "version", ver, sizeof ver) || strcmp(ver, "3")) {
        snprintf(why, nwhy, "checkpoint.json is not version 3 (an older tessel's, or edited)");
        ts_free(text);
        return -1;
    }
    /* Its own digest first: an edited "digest" is named, not taken for
     * another program's checkpoint and passed over silently. */
    const char *self = self_digest_at(text, n);
    if (!self) {
        snprintf(why, nwhy, "checkpoint.json's \"checkpoint_sha256\" is not the SHA-256 of its content (its "
                            "\"digest\", \"step\" or another member was edited, or it was cut short)");
        ts_free(text);
        return -1;
    }
    if (strcmp(dg, digest)) {
        *other = true;
        ts_free(text);
        return -1;
    }
    char *end;
    long long s = strtoll(step, &end, 10);
    char got[65];
    const char *rec = strstr(text, "\"random_inputs\": ");
    if (!json_field(text, "outputs_sha256", osha, sizeof osha) || !rec || rec > self)
        snprintf(why, nwhy, "checkpoint.json lacks the outputs' digest or the inputs it was taken with: edited");
    else if (*end || s != named)
        snprintf(why, nwhy, "checkpoint.json says step %s, its directory step %lld: edited or corrupted", step,
                 (long long)named);
    else if (ts_outputs_verify(sdir, got, &d) != TS_OK)
        snprintf(why, nwhy, "%s%s%s", d.file ? d.file : "", d.file ? ": " : "", d.msg ? d.msg : "out of memory");
    else if (strcmp(got, osha))
        snprintf(why, nwhy, "its outputs.json is not the one checkpoint.json names (outputs_sha256)");
    else if (!(*taken = malloc((size_t)(self - rec) + sizeof INIT_NONE)))
        snprintf(why, nwhy, "out of memory");
    else {
        /* an older tessel's checkpoint has no "init_state": not given */
        memcpy(*taken, rec, (size_t)(self - rec));
        (*taken)[self - rec] = 0;
        if (!strstr(*taken, "\"init_state\": "))
            strcat(*taken, INIT_NONE);
    }
    ts_diag_clear(&d);
    ts_free(text);
    return *why ? -1 : s;
}

#define SHA_SEP "\", \"sha256\": \""

/* The item of list (an "inputs" array's text) whose key member is
 * `"key": "K"` as given (K escaped), or NULL. */
static const char *find_item(const char *list, const char *keyed)
{
    for (const char *q = strstr(list, keyed); q; q = strstr(q + 1, keyed))
        if (q > list && q[-1] == '{')
            return q;
    return NULL;
}

/* Name in msg (size n) the first input whose digest differs or that only
 * one of a (the checkpoint's "inputs") and b (this run's) has. */
static void name_input_difference(const char *a, const char *b, char *msg, size_t n)
{
    for (int side = 0; side < 2; side++) {
        const char *from = side ? a : b, *other = side ? b : a;
        for (const char *q = strstr(from, "{\"key\": \""); q; q = strstr(q + 1, "{\"key\": \"")) {
            const char *ke = strstr(q + 9, SHA_SEP);
            if (!ke)
                break;
            /* keys are recorded by parameter number where one answers */
            bool digits = strspn(q + 9, "0123456789") == (size_t)(ke - q - 9);
            char keyed[2048];
            snprintf(keyed, sizeof keyed, "%.*s" SHA_SEP, (int)(ke - q - 1), q + 1);
            const char *o = find_item(other, keyed);
            if (!o) {
                snprintf(msg, n, "%s%.*s%s %s", digits ? "parameter " : "input '", (int)(ke - q - 9), q + 9,
                         digits ? "'s input" : "'",
                         side ? "was given then and is not now" : "is given now and was not then");
                return;
            }
            if (strncmp(o + strlen(keyed), ke + strlen(SHA_SEP), 64)) {
                snprintf(msg, n, "%s%.*s%s has other content (SHA-256 %.12s..., then %.12s...)",
                         digits ? "parameter " : "input '", (int)(ke - q - 9), q + 9, digits ? "'s input" : "'", side ? o + strlen(keyed) : ke + strlen(SHA_SEP), side ? ke + strlen(SHA_SEP) : o + strlen(keyed));
                return;
            }
        }
    }
    snprintf(msg, n, "the inputs are listed otherwise");
}

/* The chosen checkpoint (c->last) was taken with the inputs this run
 * gives (taken: its record), else an error naming the difference: its
 * steps would go on from other data, a result neither run's. */
static int same_inputs(const CliCkpt *c, const char *taken)
{
    if (taken && strcmp(taken, c->taken_with) == 0)
        return CLI_OK;
    char then[32] = "?", now[32] = "?", zthen[16] = "?", znow[16] = "?", msg[2400];
    json_field(taken ? taken : "", "random_inputs", then, sizeof then);
    json_field(c->taken_with, "random_inputs", now, sizeof now);
    json_field(taken ? taken : "", "init_state", zthen, sizeof zthen);
    json_field(c->taken_with, "init_state", znow, sizeof znow);
    if (strcmp(zthen, znow)) /* the unaliased state would start otherwise */
        snprintf(msg, sizeof msg, "it was taken with %s, this run gives %s",
                 strcmp(zthen, "zeros") ? "no --init-state" : "--init-state zeros",
                 strcmp(znow, "zeros") ? "no --init-state" : "--init-state zeros");
    else if (strcmp(then, now))
        snprintf(msg, sizeof msg, "it was taken with %s%s, this run gives %s%s",
                 strcmp(then, "none") ? "--random-inputs " : "no --random-inputs", strcmp(then, "none") ? then : "",
                 strcmp(now, "none") ? "--random-inputs " : "no --random-inputs", strcmp(now, "none") ? now : "");
    else
        name_input_difference(taken ? strstr(taken, "\"inputs\"") : "", strstr(c->taken_with, "\"inputs\""), msg,
                              sizeof msg);
    fprintf(stderr, "tessel: error: --resume %s: %s; resume with the inputs the checkpoint was taken with (the "
                    "state comes from it)\n", c->last, msg);
    return CLI_USAGE;
}

/* The newest checkpoint found so far: its step, directory and record. */
typedef struct Found {
    int64_t step;
    char name[300];
    char *taken;
} Found;

static void found_take(Found *f, int64_t s, const char *name, char **t)
{
    free(f->taken);
    f->step = s;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->taken = *t;
    *t = NULL;
}

/* The last complete checkpoint of this program in dir (c->done, c->last)
 * that verifies; those that do not are named in a warning. One at the
 * run's last step (--steps K: a run killed while it wrote its outputs)
 * holds no more steps to run, and the outputs are not all state: the
 * run goes on from the checkpoint before it (or from the start) and
 * step-K is kept as it is (c->final_step). */
static int find_last(CliCkpt *c, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return ckpt_error("--resume %s: %s", dir, strerror(errno));
    struct dirent *e;
    bool other = false;
    int nbad = 0;
    Found best = {0}, below = {0}; /* the newest, the newest before step K */
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5))
            continue;
        bool bad = false;
        char why[1024], *t = NULL;
        int64_t s = read_manifest(dir, e->d_name, c->digest, &bad, why, sizeof why, &t);
        other = other || bad;
        if (*why) {
            cli_say("tessel: warning: ", "--resume: %s/%s is not used: %s", dir, e->d_name, why);
            nbad++;
        }
        if (s > 0 && s < c->steps && s > below.step) {
            char *copy = t ? strdup(t) : NULL;
            if (copy) /* (out of memory: the one before it stays) */
                found_take(&below, s, e->d_name, &copy);
        }
        if (s > best.step)
            found_take(&best, s, e->d_name, &t);
        free(t);
    }
    closedir(d);
    if (best.step > 0 && best.step == c->steps) {
        c->final_step = best.step;
        if (below.step > 0) {
            free(best.taken);
            best = below;
        } else {
            /* none before it: from the start, with the inputs step-K was taken with */
            best.step = 0;
            free(below.taken);
        }
    } else {
        free(below.taken);
    }
    c->done = best.step;
    if (best.step > 0 || c->final_step) /* (done 0: step-K's, for the messages) */
        snprintf(c->last, sizeof c->last, "%s/%s", dir, best.name);
    if (best.taken) {
        int rc = same_inputs(c, best.taken);
        free(best.taken);
        if (rc != CLI_OK)
            return rc;
    }
    if (c->done == 0 && !c->final_step)
        return ckpt_error(nbad  ? "--resume %s: no checkpoint there verifies (warnings above)%s"
                          : other ? "--resume %s: its checkpoints belong to another program (another model, "
                                    "options or layout: their digest is not this plan's)%s"
                                  : "--resume %s: no complete checkpoint there%s",
                          dir, "");
    if (nbad && c->done > 0)
        cli_say("tessel: warning: ", "--resume: resuming from %s, the last checkpoint that verifies", c->last);
    if (c->done > c->steps) {
        char s[32], k[32];
        snprintf(s, sizeof s, "%lld", (long long)c->done);
        snprintf(k, sizeof k, "%lld", (long long)c->steps);
        return ckpt_error("--resume: the last checkpoint is at step %s, past --steps %s", s, k);
    }
    return CLI_OK;
}

/* c->leaf, c->param, c->pleaf: every leaf the aliases move, an alias of
 * a tuple (or of a sub-tuple of a tuple parameter) leaf by leaf. The
 * other leaves of a tuple parameter are not state: each step gets them
 * again as given (rt_feed_aliases), so the chunks after a checkpoint and
 * a resume bind them from the run's inputs, whose digests checkpoint.json
 * records (record_inputs) like any input's: a checkpoint holds what the
 * steps changed, once. */
static int alias_leaves(const TsPlan *p, CliCkpt *c)
{
    int32_t n = ts_plan_num_aliases(p), total = 0;
    TsDiag d = {0};
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t k = 0; k < n; k++) {
            int32_t out = 0, param = 0, pl = 0, count = 0;
            TsStatus st = ts_plan_alias_leaves(p, k, &out, &param, &pl, &count, &d);
            if (st != TS_OK)
                return cli_report(st, &d);
            for (int32_t j = 0; pass && j < count; j++, c->nalias++) {
                c->leaf[c->nalias] = out + j;
                c->param[c->nalias] = param;
                c->pleaf[c->nalias] = pl < 0 ? -1 : pl + j;
            }
            total += pass ? 0 : count;
        }
        if (pass)
            break;
        size_t m = (size_t)(total > 0 ? total : 1);
        c->leaf = calloc(m, sizeof *c->leaf);
        c->param = calloc(m, sizeof *c->param);
        c->pleaf = calloc(m, sizeof *c->pleaf);
        c->paths = calloc(m, sizeof *c->paths);
        if (!c->leaf || !c->param || !c->pleaf || !c->paths) {
            fputs("tessel: error: out of memory\n", stderr);
            return CLI_FAIL;
        }
    }
    return CLI_OK;
}

/* The absolute path `path` names, whether it exists or only its parent
 * does (an output dir a run will make); false otherwise. */
static bool resolve(const char *path, char out[PATH_MAX])
{
    if (realpath(path, out))
        return true;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    char dir[PATH_MAX];
    if (slash)
        *slash = 0;
    if (!realpath(slash ? (parent[0] ? parent : "/") : ".", dir))
        return false;
    return snprintf(out, PATH_MAX, "%s/%s", strcmp(dir, "/") ? dir : "", base) < PATH_MAX;
}

/* An --output-dir that is, or is inside, a step directory of the
 * checkpoint dir (step-N, or the .step-N.XXXXXX being written) would
 * overwrite that checkpoint's outputs and manifest with the run's own:
 * refused before any step. The checkpoint dir itself may be the output
 * dir (its step directories are apart). */
static int output_in_checkpoint(const char *out, const char *dir)
{
    char ro[PATH_MAX], rd[PATH_MAX];
    if (!out || !dir || !resolve(out, ro) || !realpath(dir, rd))
        return CLI_OK;
    size_t n = strlen(rd);
    if (strncmp(ro, rd, n) != 0 || ro[n] != '/')
        return CLI_OK;
    const char *step = ro + n + 1;
    if (strncmp(step, "step-", 5) != 0 && strncmp(step, ".step-", 6) != 0)
        return CLI_OK;
    return cli_usage_error(&cli_cmd_run, "--output-dir %s is inside the checkpoint %s/%.*s: the run's outputs "
                                         "would replace that checkpoint's; give a directory outside the step "
                                         "directories",
                           out, dir, (int)strcspn(step, "/"), step);
}

int cli_ckpt_check_output(const CliOptions *o)
{
    int rc = output_in_checkpoint(o->output_dir, o->checkpoint_dir);
    if (rc == CLI_OK)
        rc = output_in_checkpoint(o->output_dir, o->resume);
    return rc;
}

/* A step-<S> already in c->dir that this run would write (S a multiple of
 * every, after done, up to steps): refused before any step runs, where
 * the rename of its checkpoint would fail after work ("Directory not
 * empty"). A fresh run into a directory of checkpoints most often meant
 * --resume; a resume meets one it passed over (warned about above). */
static int refuse_written_step(const CliCkpt *c)
{
    DIR *d = opendir(c->dir);
    if (!d) /* missing: made at the first checkpoint; other errors are said there */
        return CLI_OK;
    int64_t first = -1;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of_name(e->d_name);
        if (s > c->done && s <= c->steps && s % c->every == 0 && s != c->final_step && (first < 0 || s < first))
            first = s;
    }
    closedir(d);
    if (first < 0)
        return CLI_OK;
    char what[4200];
    if (c->done == 0)
        snprintf(what, sizeof what,
                 "--checkpoint-dir %s already holds step-%lld, a checkpoint this run would write: go on from "
                 "its checkpoints with --resume %s, or give a --checkpoint-dir without checkpoints",
                 c->dir, (long long)first, c->dir);
    else
        snprintf(what, sizeof what,
                 "%s already holds step-%lld, a checkpoint this run (from step %lld) would write again: move "
                 "it away, or give another --checkpoint-dir",
                 c->dir, (long long)first, (long long)c->done);
    return ckpt_error("%s%s", what, "");
}

/* Is name a checkpoint's temporary directory (cli_ckpt_write's mkdtemp:
 * ".step-<S>.XXXXXX"; Python's tempfile.mkdtemp gives 8 characters)? */
static bool temp_step_name(const char *name)
{
    if (strncmp(name, ".step-", 6))
        return false;
    const char *dot = strchr(name + 6, '.');
    if (!dot || dot == name + 6 || (size_t)(dot - name - 6) != strspn(name + 6, "0123456789"))
        return false;
    const char *x = dot + 1;
    size_t n = strlen(x);
    return n >= 6 && n <= 8 && strspn(x, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

/* Is name a file cli_ckpt_write puts in a checkpoint (its outputs and
 * saves, the manifests, the lock and the temporaries of each)? */
static bool step_file_name(const char *name)
{
    size_t n = strlen(name);
    return !strcmp(name, "checkpoint.json") || !strcmp(name, "outputs.json") || !strcmp(name, ".tessel.lock") ||
           !strncmp(name, ".tessel-tmp-", 12) || !strncmp(name, "checkpoint.json.tmp.", 20) ||
           (n > 4 && !strcmp(name + n - 4, ".npy") && name[0] != '.');
}

/* The temporaries of checkpoints a killed run was writing (.step-S.XXXXXX
 * in dir, which this process now holds, so no run is writing them): their
 * files removed, then the directory; one holding anything else is left
 * (rmdir fails), so nothing tessel did not write goes. */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!temp_step_name(e->d_name))
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *t = fd >= 0 ? fdopendir(fd) : NULL;
        if (!t) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        struct stat sb;
        for (struct dirent *f; (f = readdir(t));)
            if (step_file_name(f->d_name) && fstatat(fd, f->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode))
                unlinkat(fd, f->d_name, 0);
        closedir(t);
        unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

/* Hold c->dir for the writer, if it exists (a missing one is made and held
 * by the first checkpoint), clear the temporaries of runs killed while
 * they wrote a checkpoint there, then refuse the steps it already holds. */
static int hold_dir(CliCkpt *c)
{
    if (!c->in_output_dir) {
        /* A missing one is only checked here (ts_output_dir_open: its
         * parent must let it be made), so a path that cannot be made
         * fails before the first chunk of steps, not after it. */
        struct stat sb;
        bool exists = stat(c->dir, &sb) == 0;
        TsOutputDir *check = NULL;
        TsDiag d = {0};
        TsStatus st = ts_output_dir_open(c->dir, exists ? &c->held : &check, &d);
        ts_output_dir_close(check);
        if (st != TS_OK)
            return cli_report(st, &d);
    }
    if (c->held) /* (an --output-dir is held by cmd_run.c, under mpirun only later) */
        remove_stale_temps(c->dir);
    return refuse_written_step(c);
}

int cli_ckpt_setup(const CliOptions *o, const TsPlan *p, CliCkpt *c, bool writer)
{
    memset(c, 0, sizeof *c);
    c->steps = o->steps > 0 ? o->steps : 1;
    c->every = o->checkpoint_every;
    c->dir = o->checkpoint_dir ? o->checkpoint_dir : o->resume;
    if (!o->resume && !(o->given & (OPT_CHECKPOINT_EVERY | OPT_CHECKPOINT_DIR)))
        return CLI_OK;
    if (!o->resume && (!o->checkpoint_every || !o->checkpoint_dir))
        return cli_usage_error(&cli_cmd_run, "checkpoints need both --checkpoint-every M and --checkpoint-dir DIR");
    if (o->spmd)
        return cli_usage_error(&cli_cmd_run, "a replay (--spmd) keeps every device's outputs: it has no "
                               "checkpoints");
    TsDiag d = {0};
    int32_t n = ts_plan_num_aliases(p);
    int rc = alias_leaves(p, c);
    if (rc != CLI_OK)
        return rc;
    if (n == 0)
        return cli_usage_error(&cli_cmd_run, "checkpoints keep the state steps carry (input_output_alias), and "
                               "this module aliases no output to a parameter");
    TsStatus st = ts_plan_digest(p, c->digest, &d);
    if (st != TS_OK)
        return cli_report(st, &d);
    if ((rc = record_inputs(o, p, c)) != CLI_OK)
        return rc;
    if (o->resume && (rc = find_last(c, o->resume)) != CLI_OK)
        return rc;
    /* The checkpoint dir may be --output-dir itself (docs/cli.md): that
     * one is held for the run already, and a second lock of one file by
     * one process would refuse itself. */
    char ro[PATH_MAX], rd[PATH_MAX];
    c->in_output_dir = o->output_dir && resolve(o->output_dir, ro) && resolve(c->dir, rd) && !strcmp(ro, rd);
    return writer && c->every ? hold_dir(c) : CLI_OK;
}

void cli_ckpt_free(CliCkpt *c)
{
    ts_output_dir_close(c->held);
    free(c->leaf);
    free(c->param);
    free(c->pleaf);
    for (int32_t k = 0; c->paths && k < c->nalias; k++)
        free(c->paths[k]);
    free(c->paths);
    for (int32_t k = 0; k < c->ninputs; k++)
        free((void *)c->inputs[k].key);
    free(c->inputs);
    free(c->taken_with);
    memset(c, 0, sizeof *c);
}

int64_t cli_ckpt_chunk(const CliCkpt *c)
{
    int64_t left = c->steps - c->done;
    if (!c->dir || !c->every)
        return left;
    int64_t to_next = c->every - c->done % c->every;
    return to_next < left ? to_next : left;
}

int cli_ckpt_inputs(const CliOptions *o, const TsPlan *p, CliCkpt *c, TsRunOptions *ro)
{
    ro->ninputs = o->ninputs;
    ro->inputs = o->inputs;
    if (!c->done || !c->nalias)
        return CLI_OK;
    for (int32_t k = 0; k < c->ninputs; k++)
        free((void *)c->inputs[k].key);
    free(c->inputs);
    c->ninputs = 0;
    c->inputs = calloc((size_t)(o->ninputs + c->nalias), sizeof *c->inputs);
    if (!c->inputs) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    /* The user's bindings, but not of the state: that comes from the
     * checkpoint (the keys are copied: they are freed with c). */
    for (int32_t i = 0; i < o->ninputs; i++) {
        if (!binds_state(p, c, o->inputs[i].key)) {
            c->inputs[c->ninputs] = o->inputs[i];
            c->inputs[c->ninputs++].key = strdup(o->inputs[i].key);
        }
    }
    for (int32_t k = 0; k < c->nalias; k++) {
        char key[32]; /* "P" binds an array parameter, "P.L" a leaf of a tuple */
        if (c->pleaf[k] < 0)
            snprintf(key, sizeof key, "%d", (int)c->param[k]);
        else
            snprintf(key, sizeof key, "%d.%d", (int)c->param[k], (int)c->pleaf[k]);
        size_t n = strlen(c->last) + 32;
        free(c->paths[k]);
        if ((c->paths[k] = malloc(n)))
            snprintf(c->paths[k], n, "%s/output_%d.npy", c->last, (int)c->leaf[k]);
        c->inputs[c->ninputs].key = c->paths[k] ? strdup(key) : NULL;
        c->inputs[c->ninputs].path = c->paths[k];
        c->inputs[c->ninputs++].array = NULL;
    }
    for (int32_t k = 0; k < c->ninputs; k++)
        if (!c->inputs[k].key) {
            fputs("tessel: error: out of memory\n", stderr);
            return CLI_FAIL;
        }
    ro->ninputs = c->ninputs;
    ro->inputs = c->inputs;
    return CLI_OK;
}

bool cli_ckpt_due(const CliCkpt *c)
{
    return c->dir && c->every && c->done % c->every == 0 && c->done != c->final_step;
}

/* Release c->dir after a failed first checkpoint (removed if this run
 * made it and it is empty again). */
static void drop_held(CliCkpt *c)
{
    ts_output_dir_close(c->held);
    c->held = NULL;
    if (c->made)
        rmdir(c->dir);
}

int cli_ckpt_write(CliCkpt *c, const TsOutputs *out)
{
    double t0 = cli_now();
    TsDiag d = {0};
    /* A missing --checkpoint-dir is made (and held) at the first
     * checkpoint; if that checkpoint fails it goes again (closing a held
     * directory this run made removes it while it is empty), as a failed
     * run's output directory goes, so a failure leaves no directory. */
    if (c->in_output_dir) {
        c->made = c->made || mkdir(c->dir, 0777) == 0; /* errors: mkdtemp's below */
    } else if (!c->held) {
        TsStatus st = ts_output_dir_make(c->dir, &c->held, &d);
        if (st != TS_OK)
            return cli_report(st, &d);
    }
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%lld.XXXXXX", c->dir, (long long)c->done);
    snprintf(final, sizeof final, "%s/step-%lld", c->dir, (long long)c->done);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "tessel: error: checkpoint in %s: %s\n", c->dir, strerror(errno));
        if (!c->nwritten)
            drop_held(c);
        return CLI_FAIL;
    }
    TsStatus st = ts_outputs_write(out, tmp, &d);
    char *json = NULL, osha[65] = "";
    if (st == TS_OK) /* read back: what a resume will check */
        st = ts_outputs_verify(tmp, osha, &d);
    if (st == TS_OK) {
        size_t n = 460 + (size_t)c->nalias * 64 + strlen(c->taken_with);
        json = malloc(n);
        size_t used = json ? (size_t)snprintf(json, n,
                                              "{\"format\": \"tessel-checkpoint\", \"version\": 3, \"step\": %lld, "
                                              "\"steps\": %lld, \"digest\": \"%s\", \"outputs_sha256\": \"%s\", "
                                              "\"aliases\": [",
                                              (long long)c->done, (long long)c->steps, c->digest, osha)
                             : 0;
        for (int32_t k = 0; json && k < c->nalias; k++) {
            used += (size_t)snprintf(json + used, n - used, "%s{\"output\": %d, \"parameter\": %d", k ? ", " : "",
                                     (int)c->leaf[k], (int)c->param[k]);
            if (c->pleaf[k] >= 0) /* a leaf of a tuple parameter */
                used += (size_t)snprintf(json + used, n - used, ", \"leaf\": %d", (int)c->pleaf[k]);
            used += (size_t)snprintf(json + used, n - used, "}");
        }
        char self[65];
        if (json) {
            used += (size_t)snprintf(json + used, n - used, "], %s", c->taken_with);
            st = ts_sha256(json, used, self, &d);
        }
        if (json && st == TS_OK)
            snprintf(json + used, n - used, "%s%s\"}\n", SELF_KEY, self);
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/checkpoint.json", tmp);
        if (st == TS_OK)
            st = json ? ts_write_text(mpath, json, &d) : TS_ENOMEM;
    }
    free(json);
    if (st == TS_OK && rename(tmp, final) != 0) {
        fprintf(stderr, "tessel: error: checkpoint %s: %s\n", final, strerror(errno));
        st = TS_ERUNTIME;
    }
    /* Its files were synced before their renames (ts_outputs_write,
     * ts_write_text); the step's own rename goes to the disk before the
     * run goes on, so a checkpoint said written survives a crash of the
     * machine. (Renamed already: a failure here leaves it for a resume to
     * verify.) */
    if (st == TS_OK && !sync_dir(c->dir)) {
        fprintf(stderr, "tessel: error: checkpoint %s: cannot sync %s: %s\n", final, c->dir, strerror(errno));
        return CLI_FAIL;
    }
    if (st != TS_OK) {
        /* Nothing half-written stays: the temporary directory goes. */
        ts_outputs_remove(out, tmp);
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/checkpoint.json", tmp);
        unlink(mpath);
        /* the output set's lock (api/outdir.c) goes with the directory */
        snprintf(mpath, sizeof mpath, "%s/.tessel.lock", tmp);
        unlink(mpath);
        rmdir(tmp);
        if (!c->nwritten)
            drop_held(c);
        return d.status != TS_OK ? cli_report(st, &d) : CLI_FAIL;
    }
    snprintf(c->last, sizeof c->last, "%s", final);
    c->nwritten++;
    c->write_seconds += cli_now() - t0;
    return CLI_OK;
}

int cli_ckpt_mark(CliCkpt *c)
{
    snprintf(c->last, sizeof c->last, "%s/step-%lld", c->dir, (long long)c->done);
    return CLI_OK;
}
