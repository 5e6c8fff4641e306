/*
 * profile.c: the cost model's rates from a profile file (`tessel profile`
 * writes one; docs/auto-shard.md):
 *
 *   {"tessel_profile": 1, "flops": 2.1e10, "bytes": 5.2e9,
 *    "collectives": {"all-reduce": {"local": {"alpha": 2e-5, "beta": 2.5e-10},
 *                                   "remote": {"alpha": 5e-5, "beta": 8e-10}},
 *                    "all-gather": {...}, "reduce-scatter": {...}, "all-to-all": {...}}}
 *
 * Seconds and seconds per byte; FLOP/s and bytes/s; "host_cores": the
 * cores the measured devices shared (the compile's host_cores, where it
 * gives none). Every field is
 * optional (what was not measured keeps the default); a field of the
 * wrong type or a negative or non-finite number is an error naming it.
 */
#include "api_internal.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *const KIND[AUTO_NCOLL] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"};
static const char *const SCOPE[2] = {"local", "remote"};

static IrStatus bad(const char *path, const char *what, IrDiag *d)
{
    return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                    "profile: %s must be a number > 0 (docs/auto-shard.md gives the format)", what);
}

/* obj[key] into *out when present. */
static IrStatus number(const char *path, json_t *obj, const char *key, const char *what, double *out, IrDiag *d)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return IR_OK;
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (!(x > 0) || !isfinite(x))
        return bad(path, what, d);
    *out = x;
    return IR_OK;
}

IrStatus api_profile_load(const char *path, AutoCost *c, int64_t *host_cores, IrDiag *d)
{
    memset(c, 0, sizeof *c);
    *host_cores = 0;
    /* Read as models are (a FIFO or a device is refused, not waited on). */
    size_t len = 0;
    char *text = api_read_file(path, &len, d);
    if (!text)
        return d->status;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    ts_free(text);
    if (!root)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){je.line > 0 ? je.line : 0, je.column > 0 ? je.column : 0},
                        "profile: %s", je.text);
    IrStatus st = IR_OK;
    if (!json_is_object(root) || !json_is_integer(json_object_get(root, "tessel_profile")))
        st = ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                      "profile: not a tessel profile (an object with \"tessel_profile\": 1)");
    if (st == IR_OK)
        st = number(path, root, "flops", "flops", &c->flops, d);
    if (st == IR_OK)
        st = number(path, root, "bytes", "bytes", &c->bytes, d);
    double cores = 0;
    if (st == IR_OK && (st = number(path, root, "host_cores", "host_cores", &cores, d)) == IR_OK && cores > 0) {
        if (cores != floor(cores) || cores > 1e6)
            st = ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                          "profile: host_cores must be a whole count of cores (docs/auto-shard.md gives the format)");
        *host_cores = (int64_t)cores;
    }
    json_t *coll = st == IR_OK ? json_object_get(root, "collectives") : NULL;
    for (int k = 0; coll && st == IR_OK && k < AUTO_NCOLL; k++) {
        json_t *kind = json_object_get(coll, KIND[k]);
        for (int s = 0; kind && st == IR_OK && s < 2; s++) {
            json_t *sc = json_object_get(kind, SCOPE[s]);
            char what[96];
            snprintf(what, sizeof what, "collectives.%s.%s.alpha", KIND[k], SCOPE[s]);
            if (sc)
                st = number(path, sc, "alpha", what, &c->alpha[k][s], d);
            snprintf(what, sizeof what, "collectives.%s.%s.beta", KIND[k], SCOPE[s]);
            if (sc && st == IR_OK)
                st = number(path, sc, "beta", what, &c->beta[k][s], d);
        }
    }
    json_decref(root);
    return st;
}
