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
 *   {"format": "tessel-checkpoint", "version": 2, "step": 100,
 *    "steps": 400, "digest": "<SHA-256 of the plan file>",
 *    "outputs_sha256": "<outputs.json's manifest_sha256>",
 *    "aliases": [{"output": 0, "parameter": 1}]}
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* DIR/step-S/checkpoint.json read and checked against this plan: its
 * step, or -1. *other set when it belongs to another program; *why (when
 * not NULL) says why a checkpoint of this program is not used. */
static int64_t read_manifest(const char *dir, const char *name, const char *digest, bool *other, char *why,
                             size_t nwhy)
{
    char path[4200], sdir[4096];
    snprintf(sdir, sizeof sdir, "%s/%s", dir, name);
    snprintf(path, sizeof path, "%s/checkpoint.json", sdir);
    *why = 0;
    int64_t named = step_of_name(name);
    if (named < 0)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, nwhy, "no readable checkpoint.json");
        return -1;
    }
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char step[32], dg[80], fmt[40], ver[16], osha[80];
    if (!json_field(text, "format", fmt, sizeof fmt) || strcmp(fmt, "tessel-checkpoint") ||
        !json_field(text, "step", step, sizeof step) || !json_field(text, "digest", dg, sizeof dg)) {
        snprintf(why, nwhy, "checkpoint.json is not one tessel wrote (its \"format\", \"step\" or \"digest\" is "
                            "missing or other): edited or corrupted");
        return -1;
    }
    if (strcmp(dg, digest)) {
        *other = true;
        return -1;
    }
    char *end;
    long long s = strtoll(step, &end, 10);
    TsDiag d = {0};
    char got[65];
    if (!json_field(text, "version", ver, sizeof ver) || strcmp(ver, "2") ||
        !json_field(text, "outputs_sha256", osha, sizeof osha))
        snprintf(why, nwhy, "checkpoint.json is not version 2 with the outputs' digest (an older tessel's, or "
                            "edited)");
    else if (*end || s != named)
        snprintf(why, nwhy, "checkpoint.json says step %s, its directory step %lld: edited or corrupted", step,
                 (long long)named);
    else if (ts_outputs_verify(sdir, got, &d) != TS_OK)
        snprintf(why, nwhy, "%s%s%s", d.file ? d.file : "", d.file ? ": " : "", d.msg ? d.msg : "out of memory");
    else if (strcmp(got, osha))
        snprintf(why, nwhy, "its outputs.json is not the one checkpoint.json names (outputs_sha256)");
    ts_diag_clear(&d);
    return *why ? -1 : s;
}

/* The last complete checkpoint of this program in dir (c->done, c->last)
 * that verifies; those that do not are named in a warning. */
static int find_last(CliCkpt *c, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return ckpt_error("--resume %s: %s", dir, strerror(errno));
    struct dirent *e;
    bool other = false;
    int nbad = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "step-", 5))
            continue;
        bool bad = false;
        char why[1024];
        int64_t s = read_manifest(dir, e->d_name, c->digest, &bad, why, sizeof why);
        other = other || bad;
        if (*why) {
            fprintf(stderr, "tessel: warning: --resume: %s/%s is not used: %s\n", dir, e->d_name, why);
            nbad++;
        }
        if (s > c->done) {
            c->done = s;
            snprintf(c->last, sizeof c->last, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    if (c->done == 0)
        return ckpt_error(nbad  ? "--resume %s: no checkpoint there verifies (warnings above)%s"
                          : other ? "--resume %s: its checkpoints belong to another program (another model, "
                                    "options or layout: their digest is not this plan's)%s"
                                  : "--resume %s: no complete checkpoint there%s",
                          dir, "");
    if (nbad)
        fprintf(stderr, "tessel: warning: --resume: resuming from %s, the last checkpoint that verifies\n", c->last);
    if (c->done > c->steps) {
        char s[32], k[32];
        snprintf(s, sizeof s, "%lld", (long long)c->done);
        snprintf(k, sizeof k, "%lld", (long long)c->steps);
        return ckpt_error("--resume: the last checkpoint is at step %s, past --steps %s", s, k);
    }
    return CLI_OK;
}

int cli_ckpt_setup(const CliOptions *o, const TsPlan *p, CliCkpt *c)
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
    c->nalias = n;
    c->leaf = calloc((size_t)(n > 0 ? n : 1), sizeof *c->leaf);
    c->param = calloc((size_t)(n > 0 ? n : 1), sizeof *c->param);
    c->paths = calloc((size_t)(n > 0 ? n : 1), sizeof *c->paths);
    if (!c->leaf || !c->param || !c->paths) {
        fputs("tessel: error: out of memory\n", stderr);
        return CLI_FAIL;
    }
    for (int32_t k = 0; k < n; k++) {
        TsStatus st = ts_plan_alias(p, k, &c->leaf[k], &c->param[k], &d);
        if (st != TS_OK)
            return cli_report(st, &d);
    }
    if (n == 0)
        return cli_usage_error(&cli_cmd_run, "checkpoints keep the state steps carry (input_output_alias), and "
                               "this module aliases no output to a parameter");
    TsStatus st = ts_plan_digest(p, c->digest, &d);
    if (st != TS_OK)
        return cli_report(st, &d);
    if (o->resume)
        return find_last(c, o->resume);
    return CLI_OK;
}

void cli_ckpt_free(CliCkpt *c)
{
    free(c->leaf);
    free(c->param);
    for (int32_t k = 0; c->paths && k < c->nalias; k++)
        free(c->paths[k]);
    free(c->paths);
    for (int32_t k = 0; k < c->ninputs; k++)
        free((void *)c->inputs[k].key);
    free(c->inputs);
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

/* Is key a binding of parameter `param` (its index or, for plans whose
 * leaves are their parameters, its name)? */
static bool binds(const TsPlan *p, const char *key, int32_t param)
{
    char idx[16];
    snprintf(idx, sizeof idx, "%d", (int)param);
    if (strcmp(key, idx) == 0)
        return true;
    TsArrayInfo info;
    TsDiag d = {0};
    bool named = ts_plan_input_info(p, param, &info, &d) == TS_OK && info.name && strcmp(info.name, key) == 0;
    ts_diag_clear(&d);
    return named;
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
        bool state = false;
        for (int32_t k = 0; k < c->nalias && !state; k++)
            state = binds(p, o->inputs[i].key, c->param[k]);
        if (!state) {
            c->inputs[c->ninputs] = o->inputs[i];
            c->inputs[c->ninputs++].key = strdup(o->inputs[i].key);
        }
    }
    for (int32_t k = 0; k < c->nalias; k++) {
        char key[16];
        snprintf(key, sizeof key, "%d", (int)c->param[k]);
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
    return c->dir && c->every && c->done % c->every == 0;
}

int cli_ckpt_write(CliCkpt *c, const TsOutputs *out)
{
    double t0 = cli_now();
    if (mkdir(c->dir, 0777) != 0 && errno != EEXIST)
        return ckpt_error("--checkpoint-dir %s: %s", c->dir, strerror(errno));
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.step-%lld.XXXXXX", c->dir, (long long)c->done);
    snprintf(final, sizeof final, "%s/step-%lld", c->dir, (long long)c->done);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "tessel: error: checkpoint in %s: %s\n", c->dir, strerror(errno));
        return CLI_FAIL;
    }
    TsDiag d = {0};
    TsStatus st = ts_outputs_write(out, tmp, &d);
    char *json = NULL, osha[65] = "";
    if (st == TS_OK) /* read back: what a resume will check */
        st = ts_outputs_verify(tmp, osha, &d);
    if (st == TS_OK) {
        size_t n = 360 + (size_t)c->nalias * 48;
        json = malloc(n);
        size_t used = json ? (size_t)snprintf(json, n,
                                              "{\"format\": \"tessel-checkpoint\", \"version\": 2, \"step\": %lld, "
                                              "\"steps\": %lld, \"digest\": \"%s\", \"outputs_sha256\": \"%s\", "
                                              "\"aliases\": [",
                                              (long long)c->done, (long long)c->steps, c->digest, osha)
                             : 0;
        for (int32_t k = 0; json && k < c->nalias; k++)
            used += (size_t)snprintf(json + used, n - used, "%s{\"output\": %d, \"parameter\": %d}", k ? ", " : "",
                                     (int)c->leaf[k], (int)c->param[k]);
        if (json)
            snprintf(json + used, n - used, "]}\n");
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/checkpoint.json", tmp);
        st = json ? ts_write_text(mpath, json, &d) : TS_ENOMEM;
    }
    free(json);
    if (st == TS_OK && rename(tmp, final) != 0) {
        fprintf(stderr, "tessel: error: checkpoint %s: %s\n", final, strerror(errno));
        st = TS_ERUNTIME;
    }
    if (st != TS_OK) {
        /* Nothing half-written stays: the temporary directory goes. */
        ts_outputs_remove(out, tmp);
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/checkpoint.json", tmp);
        unlink(mpath);
        rmdir(tmp);
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
