/*
 * input_names.c: which entry parameter an input key names (--input KEY=,
 * TsInput.key, the keys of Python's run()). One rule for every client
 * (docs/cli.md, "Input names"); the first reading that matches wins:
 *
 *   1. the parameter instruction's HLO name, exactly   x.1, param.1, Arg_0.1
 *   2. INDEX or INDEX.LEAF                              0, 1.2
 *   3. the name JAX records for it:                     x, w1, params['w1']
 *      - the op_name of its metadata (compiled modules: metadata={op_name="w1"});
 *      - its HLO name without the ".N" XLA's name uniquer appends (x.1 -> x);
 *      - the key spelt as XLA spells a JAX argument name (every byte but
 *        A-Z a-z 0-9 _ - becomes _: params['w1'] -> params__w1__, t.a -> t_a)
 *        equal to that stem (params__w1__.1);
 *   4. NAME.LEAF, NAME read as in 1 or 3, for a leaf of a tuple parameter
 *      (an array is its own leaf 0: x.0 is x, x.2 names nothing).
 *
 * A reading that names two parameters (JAX spells p['a.b'] and p['a b']
 * both p__a_b__) is an error naming both. A key no reading accepts is an
 * error listing the names that work, nearest first (Levenshtein distance,
 * ir/nearest.c), so a typo shows its correction first, named in a "did
 * you mean" when it is a slip away.
 */
#include "run_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const IrInstr *param_instr(const IrComputation *c, int32_t p)
{
    return c->param[p] >= 0 && c->param[p] < c->ninstr ? &c->instr[c->param[p]] : NULL;
}

/* The op_name of metadata text (`op_name="params[\'w1\']" source_file=..`),
 * unescaped, into a heap string; NULL when absent (or on OOM). */
static char *metadata_op_name(const char *md)
{
    static const char tag[] = "op_name=\"";
    for (const char *s = md ? strstr(md, tag) : NULL; s; s = strstr(s + 1, tag)) {
        if (s != md && s[-1] != ' ' && s[-1] != ',' && s[-1] != '{')
            continue; /* e.g. deduplicated_op_name= */
        const char *v = s + sizeof tag - 1;
        char *out = ts_malloc(strlen(v) + 1), *o = out;
        if (!out)
            return NULL;
        for (; *v && *v != '"'; v++)
            *o++ = *v == '\\' && v[1] ? *++v : *v;
        *o = 0;
        return out;
    }
    return NULL;
}

/* The length of `name` without a trailing ".N" (N decimal digits), or
 * its whole length when it has none. */
static size_t stem_len(const char *name)
{
    size_t n = strlen(name), k = n;
    while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9')
        k--;
    return k < n && k > 1 && name[k - 1] == '.' ? k - 1 : n;
}

static bool jax_byte(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '-';
}

/* Whether key[0..n) spelt as XLA spells a JAX argument name (bytes
 * outside jax_byte as '_') is stem[0..m). */
static bool jax_spelling_is(const char *key, size_t n, const char *stem, size_t m)
{
    if (n != m)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((jax_byte((unsigned char)key[i]) ? key[i] : '_') != stem[i])
            return false;
    return true;
}

/* Whether key[0..n) is the name JAX records for parameter p (reading 3). */
static bool jax_name_is(const IrInstr *ins, const char *key, size_t n)
{
    const char *name = ins->name ? ins->name : "";
    size_t m = stem_len(name);
    if ((m == n && memcmp(name, key, n) == 0) || (m < strlen(name) && jax_spelling_is(key, n, name, m)))
        return true;
    char *op = metadata_op_name(ins->a.metadata);
    bool hit = op && strlen(op) == n && memcmp(op, key, n) == 0;
    ts_free(op);
    return hit;
}

/* The parameters key[0..n) names by its HLO name (exact) or, when none
 * has that name, by JAX's name: the first match in *p, their count
 * returned (0: none), the second in *other. */
/* The parameter whose HLO name is key[0..n), or -1. */
static int32_t exact_name(const IrComputation *c, const char *key, size_t n)
{
    for (int32_t q = 0; q < c->nparam; q++) {
        const IrInstr *ins = param_instr(c, q);
        if (ins && ins->name && strlen(ins->name) == n && memcmp(ins->name, key, n) == 0)
            return q;
    }
    return -1;
}

static int name_matches(const IrComputation *c, const char *key, size_t n, int32_t *p, int32_t *other)
{
    if ((*p = exact_name(c, key, n)) >= 0)
        return 1;
    int count = 0;
    for (int32_t q = 0; q < c->nparam; q++) {
        const IrInstr *ins = param_instr(c, q);
        if (!ins || !jax_name_is(ins, key, n))
            continue;
        if (count == 0)
            *p = q;
        else if (count == 1)
            *other = q;
        count++;
    }
    return count;
}

/* Parse "N" or "N.L" (decimal, no sign) into p and leaf (-1 if absent). */
static bool parse_index(const char *s, int64_t *p, int64_t *leaf)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    *p = strtoll(s, &end, 10);
    *leaf = -1;
    if (errno)
        return false;
    if (*end == '.') {
        if (end[1] < '0' || end[1] > '9')
            return false;
        *leaf = strtoll(end + 1, &end, 10);
        if (errno)
            return false;
    }
    return *end == 0;
}

/* ---- the error for a key nothing accepts ---- */

/* A name a parameter answers to, for the list in the error. */
typedef struct Cand {
    char *name;              /* heap */
    int32_t param;
    int dist;
    int32_t order;           /* op_name, stem, HLO name: ties keep it */
} Cand;

static int cand_cmp(const void *x, const void *y)
{
    const Cand *a = x, *b = y;
    if (a->dist != b->dist)
        return a->dist < b->dist ? -1 : 1;
    if (a->param != b->param)
        return a->param < b->param ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* name[0..m) as a heap string; NULL on OOM. */
static char *strndup_ts(const char *name, size_t m)
{
    char *s = ts_malloc(m + 1);
    if (s) {
        memcpy(s, name, m);
        s[m] = 0;
    }
    return s;
}

/* Append `name` (a heap string, taken; NULL is OOM) as parameter p's,
 * unless p has it already. */
static bool cand_add(Cand *v, int32_t *n, char *name, int32_t p, const char *key)
{
    if (!name)
        return false;
    for (int32_t i = 0; i < *n; i++)
        if (v[i].param == p && strcmp(v[i].name, name) == 0) {
            ts_free(name);
            return true;
        }
    v[*n] = (Cand){name, p, ir_edit_distance(key, strlen(key), name, strlen(name)), *n};
    (*n)++;
    return true;
}

/* Whether `name` selects parameter p alone (a stem another parameter
 * has as its HLO name does not: param.1's stem "param" is parameter
 * 0's name). */
static bool selects(const IrComputation *c, const char *name, int32_t p)
{
    int32_t q = -1, other = -1;
    return name_matches(c, name, strlen(name), &q, &other) == 1 && q == p;
}

/* Every name of every parameter (its HLO name, op_name and stem), sorted
 * nearest to `key` first; *n entries. NULL on OOM. */
static Cand *candidates(const IrComputation *c, const char *key, int32_t *n)
{
    Cand *v = ts_calloc((size_t)c->nparam * 3 + 1, sizeof *v);
    bool ok = v != NULL;
    *n = 0;
    for (int32_t p = 0; ok && p < c->nparam; p++) {
        const IrInstr *ins = param_instr(c, p);
        if (!ins || !ins->name)
            continue;
        char *op = metadata_op_name(ins->a.metadata);
        size_t m = stem_len(ins->name);
        /* JAX's names first where distances tie */
        ok = (!op || cand_add(v, n, op, p, key)) &&
             (m == strlen(ins->name) || cand_add(v, n, strndup_ts(ins->name, m), p, key)) &&
             cand_add(v, n, ts_strdup(ins->name), p, key);
    }
    if (!ok) {
        for (int32_t i = 0; v && i < *n; i++)
            ts_free(v[i].name);
        ts_free(v);
        return NULL;
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < *n; i++) {
        if (selects(c, v[i].name, v[i].param))
            v[kept++] = v[i];
        else
            ts_free(v[i].name);
    }
    *n = kept;
    qsort(v, (size_t)*n, sizeof *v, cand_cmp);
    return v;
}

/* How many names the error lists at most. */
enum { NAMES_SHOWN = 12 };

static const char *cand_name(void *ctx, int32_t i)
{
    return ((const Cand *)ctx)[i].name;
}

static IrStatus unknown_key(const IrComputation *c, const char *key, IrDiag *d)
{
    int32_t n = 0;
    Cand *v = candidates(c, key, &n);
    if (!v)
        return ir_oom(d, NULL);
    IrStrBuf b = {0};
    const char *near = ir_nearest(key, strlen(key), n, cand_name, v);
    if (near)
        ir_sb_printf(&b, "did you mean %s? ", near);
    /* the name it means leads the list (a tie of distance is broken for
     * it by ir_nearest's rules: 'w' means w1 before x) */
    for (int32_t j = 1; near && j < n; j++)
        if (v[j].name == near) {
            Cand t = v[j];
            memmove(v + 1, v, (size_t)j * sizeof *v);
            v[0] = t;
            break;
        }
    ir_sb_puts(&b, "the names that work, nearest first: ");
    for (int32_t i = 0; i < n && i < NAMES_SHOWN; i++) {
        const IrInstr *ins = param_instr(c, v[i].param);
        ir_sb_printf(&b, "%s%s%s (parameter %d)", i ? ", " : "", v[i].name, ins->shape.type == IR_TUPLE ? ".LEAF" : "",
                     (int)v[i].param);
    }
    if (n > NAMES_SHOWN)
        ir_sb_printf(&b, ", and %d more", (int)(n - NAMES_SHOWN));
    for (int32_t i = 0; i < n; i++)
        ts_free(v[i].name);
    ts_free(v);
    char *names = ir_sb_take(&b);
    if (!names)
        return ir_oom(d, NULL);
    IrStatus st = c->nparam == 0 ? ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "input %s: the entry computation has no parameters", key)
                                 : ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "input %s: no entry parameter has this name or index; %s; "
                                        "or an index 0..%d",
                                        key, names, (int)c->nparam - 1);
    ts_free(names);
    return st;
}

static IrStatus ambiguous(const IrComputation *c, const char *key, int32_t p, int32_t q, int count, IrDiag *d)
{
    return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0}, "input %s: ambiguous: it is the name JAX records for parameter %d (%s) and "
                "parameter %d (%s)%s; bind it by index or by HLO name", key, (int)p, param_instr(c, p)->name,
                (int)q, param_instr(c, q)->name, count > 2 ? " and more" : "");
}

IrStatus rt_input_key_resolve(const IrComputation *c, const char *key, int64_t *param, int64_t *leaf, IrDiag *d)
{
    int32_t p = exact_name(c, key, strlen(key)), q = -1;
    *leaf = -1;
    if (p >= 0) {
        /* A parameter named like an index ("1", "0.1") that reads as
         * another parameter's index (or a leaf of it): --input 0=a
         * --input 1=b would swap them silently, so it is refused. */
        int64_t ip, il;
        if (parse_index(key, &ip, &il) && ip < c->nparam && (ip != p || il >= 0) &&
            (il < 0 || param_instr(c, (int32_t)ip)->shape.type == IR_TUPLE))
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "input %s: ambiguous: it is the HLO name of parameter %d and the index of parameter "
                            "%lld%s (--input 0=A --input 1=B would bind them crosswise); rename the parameter in the "
                            "module, or bind it by another name it answers to",
                            key, (int)p, (long long)ip, il >= 0 ? "'s leaf" : "");
        *param = p;
        return IR_OK;
    }
    if (parse_index(key, param, leaf)) /* before JAX's names: cheap, and binds every input of Python's lists */
        return IR_OK;
    int count = name_matches(c, key, strlen(key), &p, &q);
    if (count > 1)
        return ambiguous(c, key, p, q, count, d);
    if (count == 1) {
        *param = p;
        return IR_OK;
    }
    const char *dot = strrchr(key, '.');
    int64_t lf = -1, none;
    if (dot && parse_index(dot + 1, &lf, &none) && none < 0) {
        count = name_matches(c, key, (size_t)(dot - key), &p, &q);
        if (count > 1)
            return ambiguous(c, key, p, q, count, d);
        if (count == 1 && (param_instr(c, p)->shape.type == IR_TUPLE || lf == 0)) {
            *param = p;
            *leaf = lf;
            return IR_OK;
        }
    }
    return unknown_key(c, key, d);
}
