/*
 * plan_file.c: plans on disk. A plan is valid HLO text (the partitioned
 * SPMD module) followed by `//` lines: TensorFlow's compile result lines
 * and tessel's own, e.g.
 *
 *   // InputMapping {0, 1}
 *   // XlaInputShape f32[4,16]
 *   // XlaInputShape f32[16,8]
 *   // XlaOutputShape (f32[4,8])
 *   // TesselPlan version=1 partitions=2 replicas=1 hosts=2 local_devices=1 inputs=2 outputs=1
 *   // TesselInputSharding 0 {devices=[2,1]0,1}
 *   // TesselInputSharding 1 {replicated}
 *   // TesselOutputSharding 0 {replicated}
 *   // TesselEnd
 *
 * Loading trusts nothing: the module is parsed and verified; every line is
 * checked; the per-device shape of each input and output under its sharding
 * must be exactly what the SPMD module's parameters and root say; a
 * missing TesselEnd means a truncated file.
 */
#include "compile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_VERSION 1

/* ---- writing ---- */

typedef struct Buf {
    char *s;
    size_t n, cap;
    bool oom;
} Buf;

static void put(Buf *b, const char *t)
{
    size_t k = strlen(t);
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->cap + k + 1) * 2;
        char *ns = ts_realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, k + 1);
    b->n += k;
}

static void put_owned(Buf *b, char *t)
{
    if (!t)
        b->oom = true;
    else
        put(b, t);
    ts_free(t);
}

static char *cluster_plan_text(const PlanCluster *c, const Plan *p)
{
    Buf b = {0};
    char line[256];
    /* The `//` lines first, then the module printed with them as its tail:
     * the megabytes of module text are written once into a buffer that
     * never moves. */
    put_owned(&b, plan_compile_result(p));
    int32_t nout = ir_shape_leaf_count(&c->out_shape);
    snprintf(line, sizeof line,
             "// TesselPlan version=%d partitions=%lld replicas=%lld hosts=%lld local_devices=%lld inputs=%d "
             "outputs=%d\n",
             PLAN_VERSION, (long long)c->num_partitions, (long long)c->num_replicas, (long long)p->hosts,
             (long long)p->local_devices, (int)c->nparam, (int)nout);
    put(&b, line);
    for (int32_t k = 0; k < c->nparam; k++) {
        snprintf(line, sizeof line, "// TesselInputSharding %d ", (int)k);
        put(&b, line);
        put_owned(&b, ir_sharding_str(c->param_sharding[k]));
        put(&b, "\n");
    }
    for (int32_t k = 0; k < nout; k++) {
        snprintf(line, sizeof line, "// TesselOutputSharding %d ", (int)k);
        put(&b, line);
        put_owned(&b, ir_sharding_str(shd_leaf(c->out_sharding, &c->out_shape, k)));
        put(&b, "\n");
    }
    put(&b, "// TesselEnd\n");
    if (b.oom) {
        ts_free(b.s);
        return NULL;
    }
    char *text = ir_print_module_then(c->spmd, b.s);
    ts_free(b.s);
    return text;
}

/* ---- reading ---- */

bool compile_is_plan_text(const char *text, size_t len)
{
    /* memmem over a model of megabytes costs milliseconds; HLO text has
     * few '/' bytes, and memchr skips to them at memory speed. */
    static const char key[] = "// TesselPlan ";
    const size_t k = sizeof key - 1;
    const char *p = text, *end = text + len;
    while (p && (size_t)(end - p) >= k) {
        p = memchr(p, '/', (size_t)(end - p) - (k - 1));
        if (!p)
            return false;
        if (memcmp(p, key, k) == 0)
            return true;
        p++;
    }
    return false;
}

typedef struct Loader {
    const char *file, *text;
    size_t len;
    IrDiag *d;
    IrArena *a;
    int32_t line;            /* current line number */
    bool oom;                /* an allocation failed: report IR_ENOMEM, not bad input */
} Loader;

static IrStatus bad(Loader *L, int32_t col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static IrStatus bad(Loader *L, int32_t col, const char *fmt, ...)
{
    if (L->oom)
        return ir_error(L->d, IR_ENOMEM, L->file, NULL, (IrPos){0, 0}, "out of memory while loading the plan");
    va_list ap;
    va_start(ap, fmt);
    ir_verror(L->d, IR_EINPUT, L->file, L->text, (IrPos){L->line, col}, fmt, ap);
    va_end(ap);
    return IR_EINPUT;
}

static IrStatus nomem(Loader *L)
{
    L->oom = true;
    return bad(L, 1, "out of memory");
}

/* A shape in XLA's text form: `f32[2,3]`, `pred[]`, `(f32[2], s32[])`.
 * Advances *p. Depth-limited. */
static bool parse_shape(Loader *L, const char **p, const char *end, IrShape *out, int depth)
{
    const char *s = *p;
    memset(out, 0, sizeof *out);
    if (depth > 64)
        return false;
    if (s < end && *s == '(') {
        s++;
        IrShape el[256];
        int32_t n = 0;
        while (s < end && *s != ')') {
            if (n == 256 || !parse_shape(L, &s, end, &el[n++], depth + 1))
                return false;
            if (s < end && *s == ',')
                s++;
            while (s < end && *s == ' ')
                s++;
        }
        if (s >= end)
            return false;
        *p = s + 1;
        if (ir_shape_make_tuple(L->a, out, n, el) != IR_OK)
            return !(L->oom = true);
        return true;
    }
    const char *t = s;
    while (s < end && *s >= 'a' && *s <= 'z')
        s++;
    while (s < end && *s >= '0' && *s <= '9')
        s++;
    IrType ty = ir_type_from_name(t, (size_t)(s - t));
    if (ty == IR_INVALID || s >= end || *s != '[')
        return false;
    s++;
    int64_t dims[IR_MAX_RANK];
    int32_t rank = 0;
    while (s < end && *s != ']') {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s || v < 0 || rank == IR_MAX_RANK)
            return false;
        dims[rank++] = v;
        s = e;
        if (s < end && *s == ',')
            s++;
    }
    if (s >= end)
        return false;
    *p = s + 1;
    if (ir_shape_make(L->a, out, ty, rank, dims) != IR_OK)
        return !(L->oom = true);
    return ir_shape_elements(out) >= 0;
}

/* Parse "key=value" integers out of the TesselPlan line. */
static bool kv(const char *line, const char *end, const char *key, long long *v)
{
    size_t k = strlen(key);
    for (const char *s = line; s + k + 1 < end; s++)
        if ((s == line || s[-1] == ' ') && memcmp(s, key, k) == 0 && s[k] == '=') {
            char *e;
            *v = strtoll(s + k + 1, &e, 10);
            return e != s + k + 1;
        }
    return false;
}

/* Check one input/output: its shard shape under the sharding must equal
 * what the SPMD module has for it. */
static IrStatus check_shard(Loader *L, const char *what, int32_t k, const IrShape *logical,
                            const IrSharding *s, const IrShape *device, int64_t n)
{
    IrDiag vd = {0};
    if (ir_sharding_validate(s, logical, n, &vd, NULL, NULL, (IrPos){0, 0}) != IR_OK) {
        L->oom |= vd.status == IR_ENOMEM;
        IrStatus st = bad(L, 1, "%s %d: %s", what, (int)k, vd.msg ? vd.msg : "invalid sharding");
        ir_diag_clear(&vd);
        return st;
    }
    IrShape sh;
    if (shd_shard_shape(L->a, logical, s, &sh) != IR_OK)
        return nomem(L);
    if (!ir_shape_equal(&sh, device)) {
        char *a = ir_shape_str(&sh, false), *b = ir_shape_str(device, false);
        IrStatus st = bad(L, 1, "%s %d: its shard under the sharding is %s but the module's is %s", what, (int)k,
                          a ? a : "?", b ? b : "?");
        ts_free(a);
        ts_free(b);
        return st;
    }
    return IR_OK;
}

/* The shape with the nesting of `like` whose leaves are leaves[*next...]
 * in order. False on OOM. */
static bool nest_like(IrArena *a, const IrShape *like, const IrShape *leaves, int32_t *next, IrShape *out)
{
    if (like->type != IR_TUPLE) {
        *out = leaves[(*next)++];
        return true;
    }
    IrShape *el = ir_alloc_array(a, (size_t)(like->ntuple > 0 ? like->ntuple : 1), sizeof(IrShape));
    if (!el)
        return false;
    for (int32_t k = 0; k < like->ntuple; k++)
        if (!nest_like(a, &like->tuple[k], leaves, next, &el[k]))
            return false;
    return ir_shape_make_tuple(a, out, like->ntuple, el) == IR_OK;
}

static IrStatus load_lines(Loader *L, PlanCluster *c)
{
    const IrComputation *e = ir_entry(c->spmd);
    int32_t nin = -1, nout = -1, nshape = 0, nin_shd = 0, nout_shd = 0;
    bool have_plan = false, have_end = false, have_out_shape = false;
    IrShape *in_shape = NULL;
    IrShape out_shape = {0};
    const char *s = L->text, *end = L->text + L->len;
    L->line = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        L->line++;
        if (le - s >= 3 && memcmp(s, "// ", 3) == 0) {
            const char *t = s + 3;
            if (have_end)
                return bad(L, 1, "text after '// TesselEnd'");
            if (le - t >= 12 && memcmp(t, "TesselPlan ", 11) == 0) {
                long long ver, np, nr, h, ld, ni, no;
                if (!kv(t, le, "version", &ver) || ver != PLAN_VERSION)
                    return bad(L, 4, "unsupported plan version (this tessel reads version %d)", PLAN_VERSION);
                if (!kv(t, le, "partitions", &np) || !kv(t, le, "replicas", &nr) || !kv(t, le, "hosts", &h) ||
                    !kv(t, le, "local_devices", &ld) || !kv(t, le, "inputs", &ni) || !kv(t, le, "outputs", &no))
                    return bad(L, 4, "expected partitions=, replicas=, hosts=, local_devices=, inputs=, outputs=");
                if (np != c->spmd->num_partitions || nr != (c->spmd->replica_count > 0 ? c->spmd->replica_count : 1))
                    return bad(L, 4, "partitions/replicas do not match the module header");
                /* Bounded before multiplying: the numbers are the file's. */
                if (np < 1 || nr < 1 || np > 4096 || nr > 4096 || np * nr > 4096)
                    return bad(L, 4, "at most 4096 devices (partitions x replicas)");
                if (h < 1 || ld < 1 || h > 4096 || ld > 4096 || h * ld != np * nr)
                    return bad(L, 4, "hosts x local_devices must equal partitions x replicas");
                if (ni != e->nparam || ni > 1 << 20 || no < 0 || no > 1 << 20)
                    return bad(L, 4, "inputs=%lld but the module's entry has %d parameters", ni, (int)e->nparam);
                c->num_partitions = np;
                c->num_replicas = nr;
                c->hosts = h;
                c->local_devices = ld;
                nin = (int32_t)ni;
                nout = (int32_t)no;
                have_plan = true;
                c->nparam = nin;
                in_shape = ir_alloc_array(L->a, (size_t)(nin > 0 ? nin : 1), sizeof(IrShape));
                c->param_shape = in_shape;
                c->param_sharding = ir_alloc_array(L->a, (size_t)(nin > 0 ? nin : 1), sizeof(IrSharding *));
                if (!in_shape || !c->param_sharding)
                    return nomem(L);
            } else if (le - t > 15 && memcmp(t, "XlaInputShape ", 14) == 0) {
                const char *p = t + 14;
                IrShape sh;
                if (nshape >= e->nparam || !parse_shape(L, &p, le, &sh, 0) || p != le)
                    return bad(L, 18, "bad or extra XlaInputShape");
                if (in_shape)
                    return bad(L, 1, "XlaInputShape after TesselPlan");
                /* Kept until the TesselPlan line allocates; re-parsed below. */
                nshape++;
            } else if (le - t > 16 && memcmp(t, "XlaOutputShape ", 15) == 0) {
                const char *p = t + 15;
                if (!parse_shape(L, &p, le, &out_shape, 0) || p != le || out_shape.type != IR_TUPLE)
                    return bad(L, 19, "bad XlaOutputShape (expected a tuple of shapes)");
                have_out_shape = true;
            } else if (le - t > 20 && memcmp(t, "TesselInputSharding ", 20) == 0) {
                char *q;
                long k = strtol(t + 20, &q, 10);
                if (!have_plan || q == t + 20 || k != nin_shd || k >= nin || *q != ' ')
                    return bad(L, 24, "TesselInputSharding %d expected", (int)nin_shd);
                IrSharding *sh = ir_alloc(L->a, sizeof *sh);
                char *txt = ir_strndup(L->a, q + 1, (size_t)(le - q - 1));
                IrDiag sd = {0};
                if (!sh || !txt || ir_sharding_parse(L->a, txt, sh, &sd) != IR_OK) {
                    L->oom |= !sh || !txt || sd.status == IR_ENOMEM;
                    ir_diag_clear(&sd);
                    return bad(L, (int32_t)(q + 2 - s), "bad sharding");
                }
                c->param_sharding[nin_shd++] = sh;
            } else if (le - t > 21 && memcmp(t, "TesselOutputSharding ", 21) == 0) {
                char *q;
                long k = strtol(t + 21, &q, 10);
                if (!have_plan || q == t + 21 || k != nout_shd || k >= nout || *q != ' ')
                    return bad(L, 25, "TesselOutputSharding %d expected", (int)nout_shd);
                IrSharding *sh = ir_alloc(L->a, sizeof *sh);
                char *txt = ir_strndup(L->a, q + 1, (size_t)(le - q - 1));
                IrDiag sd = {0};
                if (!sh || !txt || ir_sharding_parse(L->a, txt, sh, &sd) != IR_OK) {
                    L->oom |= !sh || !txt || sd.status == IR_ENOMEM;
                    ir_diag_clear(&sd);
                    return bad(L, (int32_t)(q + 2 - s), "bad sharding");
                }
                if (!c->out_sharding) {
                    c->out_sharding = ir_alloc(L->a, sizeof(IrSharding));
                    if (!c->out_sharding)
                        return nomem(L);
                    c->out_sharding->kind = SHD_TUPLE;
                    c->out_sharding->tuple = ir_alloc_array(L->a, (size_t)(nout > 0 ? nout : 1), sizeof(IrSharding));
                    if (!c->out_sharding->tuple)
                        return nomem(L);
                }
                c->out_sharding->tuple[nout_shd++] = *sh;
                c->out_sharding->ntuple = nout_shd;
            } else if (le - t >= 9 && memcmp(t, "TesselEnd", 9) == 0) {
                have_end = true;
            }
        }
        s = nl ? nl + 1 : end;
    }
    if (!have_plan || !have_end)
        return bad(L, 1, "not a complete tessel plan (missing %s): truncated?",
                   !have_plan ? "the TesselPlan line" : "the TesselEnd line");
    if (nshape != nin || nin_shd != nin || nout_shd != nout || !have_out_shape)
        return bad(L, 1, "plan lists %d input shapes, %d input shardings and %d output shardings for %d inputs "
                   "and %d outputs", (int)nshape, (int)nin_shd, (int)nout_shd, (int)nin, (int)nout);
    /* Second pass for the input shapes, now that there is room. */
    s = L->text;
    int32_t k = 0;
    L->line = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        L->line++;
        if (le - s > 17 && memcmp(s, "// XlaInputShape ", 17) == 0) {
            const char *p = s + 17;
            if (!parse_shape(L, &p, le, &in_shape[k], 0))
                return bad(L, 18, "bad XlaInputShape");
            IrStatus st = check_shard(L, "input", k, &in_shape[k], c->param_sharding[k],
                                      &e->instr[e->param[k]].shape, c->num_partitions);
            if (st != IR_OK)
                return st;
            k++;
        }
        s = nl ? nl + 1 : end;
    }
    if (out_shape.ntuple != nout)
        return bad(L, 1, "XlaOutputShape has %d leaves, the plan %d outputs", (int)out_shape.ntuple, (int)nout);
    const IrShape *root = &e->instr[e->root].shape;
    bool tuple_root = nout != 1 || root->type == IR_TUPLE;
    if (ir_shape_leaf_count(root) != nout)
        return bad(L, 1, "the module's root has %d leaves, the plan %d outputs", (int)ir_shape_leaf_count(root),
                   (int)nout);
    /* XlaOutputShape lists the leaves flat; the logical result has the
     * root's nesting (a tuple inside the result tuple). */
    int32_t next = 0;
    if (tuple_root && !nest_like(L->a, root, out_shape.tuple, &next, &out_shape))
        return nomem(L);
    c->out_shape = tuple_root ? out_shape : out_shape.tuple[0];
    if (!tuple_root)
        c->out_sharding = &c->out_sharding->tuple[0];
    if (ir_shape_leaf_count(root) != nout)
        return bad(L, 1, "the module's root has %d leaves, the plan %d outputs", (int)ir_shape_leaf_count(root),
                   (int)nout);
    for (int32_t o = 0; o < nout; o++) {
        IrStatus st = check_shard(L, "output", o, ir_shape_leaf(&c->out_shape, o),
                                  shd_leaf(c->out_sharding, &c->out_shape, o), ir_shape_leaf(root, o),
                                  c->num_partitions);
        if (st != IR_OK)
            return st;
    }
    return IR_OK;
}

static IrStatus cluster_plan_load(const char *path, const char *text, size_t len, PlanCluster *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    IrParseOptions opt = ir_default_parse_options();
    IrStatus st = ir_parse(path, text, len, &opt, &out->spmd, d);
    if (st != IR_OK)
        return st;
    if (out->spmd->num_partitions < 1) {
        plan_cluster_free(out);
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){1, 1}, "plan module has no num_partitions");
    }
    out->arena = ir_arena_new();
    if (!out->arena) {
        plan_cluster_free(out);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    /* A NUL-terminated copy: the line checks (strtol, diagnostics' line
     * extraction) must never read past `len`. */
    char *copy = ir_strndup(out->arena, text, len);
    if (!copy) {
        plan_cluster_free(out);
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    }
    Loader L = {.file = path, .text = copy, .len = len, .d = d, .a = out->arena};
    st = load_lines(&L, out);
    if (st != IR_OK)
        plan_cluster_free(out);
    return st;
}

/* ---- the plan of a compiled program ---- */

char *compile_plan_file_text(const CompileResult *r)
{
    if (r->prog.host || r->prog.ncluster != 1)
        return NULL; /* host programs in plan files: not yet */
    return cluster_plan_text(&r->prog.cluster[0], r->plans[0]);
}

IrStatus compile_plan_load(const char *path, const char *text, size_t len, int64_t max_devices, CompileResult *out,
                           IrDiag *d)
{
    (void)max_devices;
    memset(out, 0, sizeof *out);
    out->from_plan = true;
    PlanProgram *p = &out->prog;
    p->cluster = ts_calloc(1, sizeof *p->cluster);
    if (!p->cluster)
        return ir_error(d, IR_ENOMEM, NULL, NULL, (IrPos){0, 0}, "out of memory");
    IrStatus st = cluster_plan_load(path, text, len, &p->cluster[0], d);
    if (st == IR_OK) {
        p->ncluster = 1;
        p->num_partitions = p->cluster[0].num_partitions;
        p->num_replicas = p->cluster[0].num_replicas;
        st = compile_replan(out, p->cluster[0].hosts, p->cluster[0].local_devices, d);
    }
    if (st != IR_OK)
        compile_result_free(out);
    return st;
}
