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
 *   // TesselDonation 0 buffer_donor          (input_output_alias pair 0 is a paired buffer_donor;
 *                                                `inferred`: --donate auto's; declared pairs have none;
 *                                                a host program's, clu_host_pairs, in its host lines)
 *   // TesselCollective all-reduce all-reduce 256 {{0,1}}
 *   // TesselWhy partial 9 8 0 main y - dot y contracts dim 1 of a, which is ...: partial sums are all-reduced
 *   // TesselExplain auto-shard of mlp over mesh x=2: ...     (--auto-shard: one per line of the text)
 *   // TesselExplainJson {"tessel_auto_shard": 1, ...}         (--auto-shard: the JSON on one line)
 *   // TesselEnd
 *
 * A host program's plan holds several modules (each starts at a line
 * beginning with "HloModule "): the host program with its // TesselHost
 * lines (what cluster/ decided, CluResult), then each cluster's SPMD module
 * with the lines above and // TesselClusterPlan K NAME (docs/plan.md).
 *
 * Loading trusts nothing: every module is parsed and verified; every line
 * is checked, every list against its count; the per-device shape of each
 * input and output under its sharding must be exactly what the SPMD
 * module's parameters and root say; each cluster call of the host program
 * must fit its cluster's plan; a missing TesselEnd or TesselHostEnd, or
 * fewer cluster modules than the TesselHost line says, means a truncated
 * file. Diagnostics name the lines of the whole file.
 */
#include "compile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_VERSION 1       /* a cluster's lines; a plan without host work */
#define HOST_PLAN_VERSION 2  /* the lines of a host program */

/* ---- writing ---- */

/* Words of a line, each preceded by a space. */
static void put_words(IrStrBuf *b, int n, const char *const *w)
{
    for (int k = 0; k < n; k++) {
        ir_sb_puts(b, " ");
        ir_sb_puts(b, w[k]);
    }
}

/* Text that fits the rest of one line (no newline). */
static bool one_line(const char *s)
{
    return s && !strchr(s, '\n') && !strchr(s, '\r');
}

/* The reason of collective c (the line before): `// TesselWhy KIND LINE
 * COL OUTPUT COMP SOURCE OPERAND|- TEXT`, then `// TesselAvoid TEXT` where
 * there is a way out. Nothing for a reason without a site or text. */
static void put_why(IrStrBuf *b, const SpmdCollective *c)
{
    const SpmdSite *s = &c->site;
    if (!one_line(c->why.text) || !s->comp || !s->source || strchr(s->comp, ' ') || strchr(s->source, ' ') ||
        (s->operand && strchr(s->operand, ' ')))
        return;
    ir_sb_printf(b, "// TesselWhy %s %d %d %d ", spmd_why_kind_name(c->why.kind), (int)s->pos.line,
                 (int)s->pos.col, s->output ? 1 : 0);
    ir_sb_puts(b, s->comp);
    ir_sb_puts(b, " ");
    ir_sb_puts(b, s->source);
    ir_sb_puts(b, " ");
    ir_sb_puts(b, s->operand ? s->operand : "-");
    ir_sb_puts(b, " ");
    ir_sb_puts(b, c->why.text);
    ir_sb_puts(b, "\n");
    if (one_line(c->why.avoid)) {
        ir_sb_puts(b, "// TesselAvoid ");
        ir_sb_puts(b, c->why.avoid);
        ir_sb_puts(b, "\n");
    }
}

/* What the partitioner reported: the dumps show it, so a loaded plan
 * carries it. Groups last: they are the rest of the line. */
static void put_report(IrStrBuf *b, const SpmdReport *r)
{
    if (r->ncoll > 0 && one_line(r->file) && *r->file) {
        ir_sb_puts(b, "// TesselWhyFile ");
        ir_sb_puts(b, r->file);
        ir_sb_puts(b, "\n");
    }
    for (int32_t k = 0; k < r->nfallback; k++) {
        ir_sb_puts(b, "// TesselFallback ");
        ir_sb_puts(b, r->fallback[k]);
        ir_sb_puts(b, "\n");
    }
    for (int32_t k = 0; k < r->ncoll; k++) {
        const SpmdCollective *c = &r->coll[k];
        ir_sb_puts(b, "// TesselCollective ");
        ir_sb_puts(b, c->name);
        ir_sb_printf(b, " %s %lld ", ir_op_name(c->op), (long long)c->bytes_per_device);
        ir_sb_puts(b, c->replica_groups ? c->replica_groups : "");
        ir_sb_puts(b, "\n");
        put_why(b, c);
    }
}

/* Why --auto-shard chose: each line of the text, then the JSON on one
 * line (its newlines are between tokens). A plan without host work has
 * them in its cluster's lines; a host program's plan in the host lines,
 * since auto-shard chose over the whole module before it was cut into
 * clusters. */
static void put_explain(IrStrBuf *b, const AutoReport *ar)
{
    if (!ar || !ar->explain || !ar->explain_json)
        return;
    for (const char *s = ar->explain; *s;) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        ir_sb_puts(b, "// TesselExplain ");
        ir_sb_printf(b, "%.*s\n", (int)n, s);
        s += n + (nl ? 1 : 0);
    }
    ir_sb_puts(b, "// TesselExplainJson ");
    for (const char *s = ar->explain_json; *s; s++)
        if (*s != '\n')
            ir_sb_printf(b, "%c", *s);
    ir_sb_puts(b, "\n");
}

/* The SPMD module of c and its lines. Cluster `k` of a host program
 * (named `name`) says which it is; k < 0 is a plan without host work, which
 * carries its source module. */
/* The pairs tessel made (plan_donate's in a cluster, clu_host_pairs's in
 * the host program) are printed with the module's own in
 * input_output_alias; these lines keep them apart for the dumps and say
 * where each comes from. */
static void put_donations(IrStrBuf *b, const IrModule *m)
{
    for (int32_t j = 0; j < m->nalias; j++)
        if (m->alias[j].from_donor || m->alias[j].inferred)
            ir_sb_printf(b, "// TesselDonation %d %s\n", (int)j, m->alias[j].from_donor ? "buffer_donor" : "inferred");
}

static char *cluster_plan_text(const PlanCluster *c, const DeviceLayout *p, int32_t k, const char *name,
                               const AutoReport *ar)
{
    IrStrBuf b = {0};
    /* The `//` lines first, then the module printed with them as its tail:
     * the megabytes of module text are written once into a buffer that
     * never moves. */
    ir_sb_put_owned(&b, device_layout_compile_result(p));
    int32_t nout = ir_shape_leaf_count(&c->out_shape);
    ir_sb_printf(&b,
         "// TesselPlan version=%d partitions=%lld replicas=%lld hosts=%lld local_devices=%lld inputs=%d "
         "outputs=%d\n",
         PLAN_VERSION, (long long)c->num_partitions, (long long)c->num_replicas, (long long)p->hosts,
         (long long)p->local_devices, (int)c->nparam, (int)nout);
    if (k >= 0) {
        ir_sb_printf(&b, "// TesselClusterPlan %d ", (int)k);
        ir_sb_puts(&b, name);
        ir_sb_puts(&b, "\n");
    }
    for (int32_t j = 0; j < c->nparam; j++) {
        ir_sb_printf(&b, "// TesselInputSharding %d ", (int)j);
        ir_sb_put_owned(&b, ir_sharding_str(c->param_sharding[j]));
        ir_sb_puts(&b, "\n");
    }
    for (int32_t j = 0; j < nout; j++) {
        ir_sb_printf(&b, "// TesselOutputSharding %d ", (int)j);
        ir_sb_put_owned(&b, ir_sharding_str(shd_leaf(c->out_sharding, &c->out_shape, j)));
        ir_sb_puts(&b, "\n");
    }
    put_donations(&b, c->spmd);
    put_report(&b, &c->report);
    put_explain(&b, ar);
    ir_sb_puts(&b, "// TesselEnd\n");
    char *lines = ir_sb_take(&b);
    char *text = lines ? ir_print_module_then(c->spmd, lines) : NULL;
    ts_free(lines);
    return text;
}

static const char *const place_names[] = {
    [CLU_DEVICE] = "device",   [CLU_HOST_OP] = "host-op",   [CLU_HOST_FLOW] = "host-control-flow",
    [CLU_HOST_GLUE] = "host-glue", [CLU_CONST] = "constant",
};

const char *compile_place_name(CluPlace p)
{
    return (unsigned)p < sizeof place_names / sizeof *place_names ? place_names[p] : "device";
}

/* The lines of the host program: what cluster/ decided (CluResult), every
 * list with its count in the line that opens it. */
static void put_host_lines(IrStrBuf *b, const CompileResult *r)
{
    const CluResult *res = &r->res;
    const IrModule *h = r->prog.host;
    /* Without clusters no plan fixed the devices per host. */
    int64_t hosts = r->prog.hosts > 0 ? r->prog.hosts : 1;
    int64_t local = r->prog.local_devices > 0 ? r->prog.local_devices
                                              : r->prog.num_partitions * r->prog.num_replicas / hosts;
    ir_sb_printf(b,
         "// TesselHost version=%d clusters=%d partitions=%lld replicas=%lld hosts=%lld local_devices=%lld "
         "host_instrs=%d cuts=%d\n",
         HOST_PLAN_VERSION, (int)r->prog.ncluster, (long long)r->prog.num_partitions,
         (long long)r->prog.num_replicas, (long long)hosts, (long long)local, (int)res->nhost, (int)res->ncuts);
    for (int32_t k = 0; k < res->nhost; k++) {
        const char *w[] = {res->host[k].comp, res->host[k].name, compile_place_name(res->host[k].place)};
        ir_sb_puts(b, "// TesselHostInstr");
        put_words(b, 3, w);
        ir_sb_puts(b, "\n");
    }
    for (int32_t k = 0; k < res->ncuts; k++) {
        const CluCut *c = &res->cuts[k];
        const char *w[] = {c->comp, c->value};
        ir_sb_puts(b, "// TesselCut");
        put_words(b, 2, w);
        ir_sb_printf(b, " %d %d %lld\n", (int)c->from, (int)c->to, (long long)c->bytes);
    }
    for (int32_t k = 0; k < res->nclusters; k++) {
        const CluCluster *c = &res->clusters[k];
        const char *w[] = {c->name, c->call, h->comp[c->host_comp]->name, c->source_comp};
        ir_sb_printf(b, "// TesselHostCluster %d", (int)k);
        put_words(b, 4, w);
        ir_sb_printf(b, " %d %d %d %d\n", (int)c->ninstrs, (int)c->nconsts, (int)c->ninputs, (int)c->noutputs);
        for (int32_t j = 0; j < c->ninstrs; j++) {
            ir_sb_printf(b, "// TesselClusterInstr %d ", (int)k);
            ir_sb_puts(b, c->instrs[j]);
            ir_sb_puts(b, "\n");
        }
        for (int32_t j = 0; j < c->nconsts; j++) {
            ir_sb_printf(b, "// TesselClusterConst %d ", (int)k);
            ir_sb_puts(b, c->consts[j]);
            ir_sb_puts(b, "\n");
        }
        for (int32_t j = 0; j < c->ninputs; j++) {
            const CluInput *in = &c->inputs[j];
            ir_sb_printf(b, "// TesselClusterIn %d ", (int)k);
            ir_sb_puts(b, in->value);
            ir_sb_printf(b, " %d %d %d %lld %lld\n", (int)in->operand, (int)in->from_cluster, (int)in->from_output,
                 (long long)in->host_param, (long long)in->bytes);
        }
        for (int32_t j = 0; j < c->noutputs; j++) {
            const CluOutput *o = &c->outputs[j];
            ir_sb_printf(b, "// TesselClusterOut %d ", (int)k);
            ir_sb_puts(b, o->value);
            ir_sb_printf(b, " %d ", (int)o->index);
            ir_sb_puts(b, o->host_name);
            ir_sb_printf(b, " %lld\n", (long long)o->bytes);
        }
    }
    put_donations(b, h);
    put_explain(b, &r->autoshard);
    ir_sb_puts(b, "// TesselHostEnd\n");
}

/* A host program's plan: the host module and its lines, then each
 * cluster's SPMD module and lines. */
static char *host_plan_text(const CompileResult *r)
{
    IrStrBuf lines = {0}, b = {0};
    put_host_lines(&lines, r);
    char *ls = ir_sb_take(&lines);
    if (!ls)
        return NULL;
    ir_sb_put_owned(&b, ir_print_module_then(r->prog.host, ls));
    ts_free(ls);
    for (int32_t k = 0; k < r->prog.ncluster; k++)
        ir_sb_put_owned(&b, cluster_plan_text(&r->prog.cluster[k], r->layouts[k], k, r->res.clusters[k].name, NULL));
    return ir_sb_take(&b);
}

/* ---- reading ---- */

/* The TesselHost line: what every cluster of a host program's plan must
 * agree with. */
typedef struct HostHdr {
    long long ncl, np, nr, hosts, local, nhost, ncuts;
} HostHdr;

typedef struct Loader {
    const char *file, *text;
    size_t len;
    IrDiag *d;
    IrArena *a;
    int32_t line;            /* current line number */
    bool oom;                /* an allocation failed: report IR_ENOMEM, not bad input */
    /* A cluster of a host program: its number and name, and the host's
     * line; host NULL for a plan without host work. */
    const HostHdr *host;
    int32_t k;
    const char *kname;
    int32_t plan_line;       /* the TesselPlan line, for checks after the loop */
    const IrModule *largest_of; /* largest_value of this module, computed once */
    int64_t largest;
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
            errno = 0;
            *v = strtoll(s + k + 1, &e, 10);
            return e != s + k + 1 && !errno;
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

/* The next word of [*p, le): words are separated by one space. False
 * when there is none. */
static bool word(const char **p, const char *le, const char **w, size_t *n)
{
    const char *s = *p;
    if (s >= le)
        return false;
    const char *e = memchr(s, ' ', (size_t)(le - s));
    if (!e)
        e = le;
    if (e == s)
        return false;
    *w = s;
    *n = (size_t)(e - s);
    *p = e < le ? e + 1 : le;
    return true;
}

/* The next word as an integer in [lo, hi]. */
static bool word_num(const char **p, const char *le, long long lo, long long hi, long long *v)
{
    const char *w;
    size_t n;
    if (!word(p, le, &w, &n) || !((w[0] >= '0' && w[0] <= '9') || w[0] == '-'))
        return false;
    char *e;
    errno = 0;
    long long x = strtoll(w, &e, 10);
    if (errno || e != w + n || x < lo || x > hi) /* 999...9 is not INT64_MAX */
        return false;
    *v = x;
    return true;
}

/* The next word, copied into the loader's arena; NULL when there is none
 * (or on OOM, which sets L->oom). */
static const char *word_str(Loader *L, const char **p, const char *le)
{
    const char *w;
    size_t n;
    if (!word(p, le, &w, &n))
        return NULL;
    char *c = ir_strndup(L->a, w, n);
    L->oom |= !c;
    return c;
}

static bool starts(const char *s, const char *le, const char *key)
{
    size_t k = strlen(key);
    return (size_t)(le - s) >= k && memcmp(s, key, k) == 0;
}

/* The bytes of the largest value of m: a collective of m moves at most
 * twice that per device. */
static int64_t largest_value(const IrModule *m)
{
    int64_t most = 0;
    for (int32_t k = 0; m && k < m->ncomp; k++)
        for (int32_t i = 0; i < m->comp[k]->ninstr; i++) {
            int64_t b = ir_shape_bytes(&m->comp[k]->instr[i].shape);
            most = b > most ? b : most;
        }
    return most;
}

/* `// InputMapping {0, 1, ...}`: the entry's parameters 0 to n-1 in order,
 * as tessel writes it (t: after "// "). */
static IrStatus check_input_mapping(Loader *L, const char *t, const char *le, int32_t n)
{
    const char *p = t + 13;
    bool ok = p < le && *p++ == '{';
    int32_t k = 0;
    while (ok && p < le && *p != '}') {
        if (k > 0)
            ok = le - p >= 2 && p[0] == ',' && p[1] == ' ' && (p += 2);
        long long v;
        const char *w = p;
        while (ok && p < le && *p >= '0' && *p <= '9' && p - w < 12)
            p++;
        ok = ok && p > w && p - w < 12 && sscanf(w, "%lld", &v) == 1 && v == k;
        k++;
    }
    if (!ok || p >= le || *p != '}' || p + 1 != le || k != n)
        return bad(L, 4, "InputMapping must list the entry's %d parameters in order, {0, 1, ..., %d}", (int)n,
                   (int)n - 1);
    return IR_OK;
}

/* The rest of the line from p, copied (NULL and L->oom on OOM). */
static const char *rest_str(Loader *L, const char *p, const char *le)
{
    char *c = ir_strndup(L->a, p, (size_t)(le - p));
    L->oom |= !c;
    return c;
}

/* `// TesselWhyFile PATH`, `// TesselWhy KIND LINE COL OUTPUT COMP
 * SOURCE OPERAND|- TEXT` and `// TesselAvoid TEXT`: the reasons of the
 * collective of the line before (put_why). Plans written before these
 * lines existed load without reasons. */
static IrStatus load_why_line(Loader *L, SpmdReport *r, const char *t, const char *le)
{
    if (starts(t, le, "TesselWhyFile ")) {
        if (le - t <= 14 || !(r->file = rest_str(L, t + 14, le)))
            return L->oom ? nomem(L) : bad(L, 18, "expected '// TesselWhyFile PATH'");
        return IR_OK;
    }
    if (r->ncoll == 0)
        return bad(L, 4, "a reason line before any '// TesselCollective' line");
    SpmdCollective *c = &r->coll[r->ncoll - 1];
    if (starts(t, le, "TesselAvoid ")) {
        if (!c->why.text || c->why.avoid || le - t <= 12 || !(c->why.avoid = rest_str(L, t + 12, le)))
            return L->oom ? nomem(L) : bad(L, 16, "expected '// TesselAvoid TEXT' once, after its TesselWhy line");
        return IR_OK;
    }
    const char *p = t + 10, *kind, *comp, *source, *operand;
    size_t nkind;
    long long line, col, output;
    SpmdWhyKind k;
    if (!starts(t, le, "TesselWhy ") || c->why.text || !word(&p, le, &kind, &nkind) ||
        !spmd_why_kind_from_name(kind, nkind, &k) || !word_num(&p, le, 0, INT32_MAX, &line) ||
        !word_num(&p, le, 0, INT32_MAX, &col) || !word_num(&p, le, 0, 1, &output) ||
        !(comp = word_str(L, &p, le)) || !(source = word_str(L, &p, le)) || !(operand = word_str(L, &p, le)) ||
        p >= le)
        return L->oom ? nomem(L)
                      : bad(L, 14, "expected '// TesselWhy KIND LINE COL OUTPUT COMP SOURCE OPERAND TEXT' once, "
                                   "after its TesselCollective line");
    c->site = (SpmdSite){.comp = comp, .source = source, .operand = strcmp(operand, "-") ? operand : NULL,
                         .output = output == 1, .pos = {(int32_t)line, (int32_t)col}};
    c->why = (SpmdWhy){.kind = k, .text = rest_str(L, p, le)};
    return c->why.text ? IR_OK : nomem(L);
}

/* `// TesselFallback NAME` and `// TesselCollective NAME OPCODE BYTES
 * GROUPS`: the report of the partitioner, kept in c->arena. */
static IrStatus load_report_line(Loader *L, PlanCluster *c, const char *t, const char *le, int64_t *capfb)
{
    SpmdReport *r = &c->report;
    if (starts(t, le, "TesselFallback ")) {
        const char *p = t + 15, *name = word_str(L, &p, le);
        if (!name || p != le)
            return L->oom ? nomem(L) : bad(L, 19, "expected '// TesselFallback NAME'");
        if (!IR_ARENA_GROW(L->a, r->fallback, *capfb, r->nfallback, r->nfallback + 1))
            return nomem(L);
        r->fallback[r->nfallback++] = name;
        return IR_OK;
    }
    if (starts(t, le, "TesselWhy") || starts(t, le, "TesselAvoid "))
        return load_why_line(L, r, t, le);
    const char *p = t + 17, *name = word_str(L, &p, le), *op;
    size_t nop;
    long long bytes;
    if (!name || !word(&p, le, &op, &nop) || !word_num(&p, le, 0, INT64_MAX, &bytes))
        return L->oom ? nomem(L) : bad(L, 23, "expected '// TesselCollective NAME OPCODE BYTES GROUPS'");
    IrOpcode o = ir_op_from_name(op, nop);
    if (o == OP_COUNT || ir_op_family(o) != FAM_COLLECTIVE)
        return bad(L, (int32_t)(op - t + 4), "not a collective opcode");
    if (L->largest_of != c->spmd) { /* once a module: the lines may be many */
        L->largest = largest_value(c->spmd);
        L->largest_of = c->spmd;
    }
    int64_t most = L->largest;
    if (bytes / 2 > most) /* an all-reduce moves 2(n-1)/n of its value */
        return bad(L, 23, "a collective moving %lld bytes per device, more than twice any value of the program",
                    bytes);
    char *groups = ir_strndup(L->a, p, (size_t)(le - p));
    if (!groups || !IR_ARENA_GROW(L->a, r->coll, r->capcoll, r->ncoll, r->ncoll + 1))
        return nomem(L);
    r->coll[r->ncoll++] = (SpmdCollective){.name = name, .op = o, .replica_groups = groups, .bytes_per_device = bytes};
    return IR_OK;
}

/* The logical module `m` (a plan's source, or a host program's cluster)
 * must have c's inputs and outputs: shapes and shardings. */
static IrStatus check_logical(Loader *L, const IrModule *m, const PlanCluster *c)
{
    static const IrSharding repl = {.kind = SHD_REPLICATED};
    const IrComputation *e = ir_entry(m);
    L->line = L->plan_line;
    if (!e || e->nparam != c->nparam)
        return bad(L, 1, "the source module has %d parameters, the plan %d inputs", e ? (int)e->nparam : -1,
                   (int)c->nparam);
    for (int32_t k = 0; k < c->nparam; k++) {
        const IrInstr *pi = &e->instr[e->param[k]];
        if (!ir_shape_equal(&pi->shape, &c->param_shape[k]) ||
            !ir_sharding_equal(pi->sharding ? pi->sharding : &repl, plan_param_sharding(c, k)))
            return bad(L, 1, "input %d: the source module's parameter has another shape or sharding", (int)k);
    }
    const IrInstr *root = &e->instr[e->root];
    if (!ir_shape_equal(&root->shape, &c->out_shape))
        return bad(L, 1, "the source module's root has another shape than the plan's outputs");
    for (int32_t k = 0, nl = ir_shape_leaf_count(&c->out_shape); root->sharding && k < nl; k++)
        if (!ir_sharding_equal(shd_leaf(root->sharding, &root->shape, k), shd_leaf(c->out_sharding, &c->out_shape, k)))
            return bad(L, 1, "output %d: the source module's root has another sharding", (int)k);
    return IR_OK;
}

/* The sharding text after q (one space, then the rest of the line up to
 * le), parsed into the arena; the line starts at s (for the column). */
static IrStatus sharding_after(Loader *L, const char *q, const char *le, const char *s, IrSharding **out)
{
    IrSharding *sh = ir_alloc(L->a, sizeof *sh);
    char *txt = ir_strndup(L->a, q + 1, (size_t)(le - q - 1));
    IrDiag sd = {0};
    if (!sh || !txt || ir_sharding_parse(L->a, txt, sh, &sd) != IR_OK) {
        L->oom |= !sh || !txt || sd.status == IR_ENOMEM;
        ir_diag_clear(&sd);
        return bad(L, (int32_t)(q + 2 - s), "bad sharding");
    }
    *out = sh;
    return IR_OK;
}

/* The parameter number that output leaf o of e's root is (the root, or
 * element o of a root tuple of arrays, being an array parameter), or -1. */
static int32_t root_param(const IrComputation *e, bool tuple_root, int32_t o)
{
    const IrInstr *r = &e->instr[e->root];
    if (tuple_root) {
        if (r->op != OP_TUPLE || o >= r->nopnd || r->opnd[o] < 0)
            return -1;
        r = &e->instr[r->opnd[o]];
    }
    if (r->op != OP_PARAMETER || r->shape.type == IR_TUPLE)
        return -1;
    for (int32_t k = 0; k < e->nparam; k++)
        if (&e->instr[e->param[k]] == r)
            return k;
    return -1;
}

/* `// TesselDonation K buffer_donor|inferred` (t after "// ", s the line's
 * start): pair K of m's input_output_alias is tessel's (put_donations). */
static IrStatus load_donation(Loader *L, IrModule *m, const char *t, const char *le, const char *s)
{
    const char *p = t + 15, *w;
    size_t n;
    long long k;
    if (!word_num(&p, le, 0, INT32_MAX, &k) || !word(&p, le, &w, &n) || p != le)
        return bad(L, 4, "expected '// TesselDonation K buffer_donor|inferred'");
    if (k >= m->nalias)
        return bad(L, 19, "TesselDonation %lld: the module's input_output_alias has %d pairs", k, (int)m->nalias);
    IrAlias *al = &m->alias[k];
    bool donor = n == 12 && memcmp(w, "buffer_donor", 12) == 0;
    if (!donor && !(n == 8 && memcmp(w, "inferred", 8) == 0))
        return bad(L, (int32_t)(w - s) + 1, "TesselDonation: expected buffer_donor or inferred");
    if (al->from_donor || al->inferred)
        return bad(L, 19, "a second TesselDonation line for pair %lld", k);
    al->from_donor = donor;
    al->inferred = !donor;
    return IR_OK;
}

static IrStatus load_lines(Loader *L, PlanCluster *c)
{
    const IrComputation *e = ir_entry(c->spmd);
    int32_t nin = -1, nout = -1, nshape = 0, nin_shd = 0, nout_shd = 0, have_mapping = 0;
    int64_t capfb = 0;
    bool have_plan = false, have_end = false, have_out_shape = false, have_cluster = false;
    IrShape *in_shape = NULL;
    IrShape out_shape = {0};
    const char *s = L->text, *end = L->text + L->len;
    L->line = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        L->line++;
        /* Line 1 may be the frame's header, checked before loading. */
        if (L->line == 1 && starts(s, le, "// TesselPlanFile ")) {
            s = nl ? nl + 1 : end;
            continue;
        }
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
                if (np < 1 || nr < 1 || np > IR_MAX_DEVICES || nr > IR_MAX_DEVICES || np * nr > IR_MAX_DEVICES)
                    return bad(L, 4, "at most %d devices (partitions x replicas)", IR_MAX_DEVICES);
                if (h < 1 || ld < 1 || h > IR_MAX_DEVICES || ld > IR_MAX_DEVICES || h * ld != np * nr)
                    return bad(L, 4, "hosts x local_devices must equal partitions x replicas");
                if (ni != e->nparam || ni > 1 << 20)
                    return bad(L, 4, "inputs=%lld but the module's entry has %d parameters", ni, (int)e->nparam);
                if (no < 0 || no > 1 << 20)
                    return bad(L, 4, "outputs=%lld is out of range [0, %d]", no, 1 << 20);
                if (have_plan)
                    return bad(L, 4, "a second TesselPlan line");
                if (L->host && (np != L->host->np || nr != L->host->nr || h != L->host->hosts ||
                                ld != L->host->local))
                    return bad(L, 4, "partitions, replicas, hosts or local_devices differ from the TesselHost line");
                L->plan_line = L->line;
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
            } else if (starts(t, le, "InputMapping ")) {
                if (have_mapping++ || have_plan)
                    return bad(L, 4, "a second InputMapping line, or one after TesselPlan");
                IrStatus st = check_input_mapping(L, t, le, e->nparam);
                if (st != IR_OK)
                    return st;
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
                IrSharding *sh = NULL;
                IrStatus sst = sharding_after(L, q, le, s, &sh);
                if (sst != IR_OK)
                    return sst;
                c->param_sharding[nin_shd++] = sh;
            } else if (le - t > 21 && memcmp(t, "TesselOutputSharding ", 21) == 0) {
                char *q;
                long k = strtol(t + 21, &q, 10);
                if (!have_plan || q == t + 21 || k != nout_shd || k >= nout || *q != ' ')
                    return bad(L, 25, "TesselOutputSharding %d expected", (int)nout_shd);
                IrSharding *sh = NULL;
                IrStatus sst = sharding_after(L, q, le, s, &sh);
                if (sst != IR_OK)
                    return sst;
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
            } else if (starts(t, le, "TesselClusterPlan ")) {
                const char *p = t + 18, *name;
                long long k;
                if (!L->host)
                    return bad(L, 4, "a TesselClusterPlan line in a plan without a host program");
                if (!have_plan || have_cluster || !word_num(&p, le, 0, INT32_MAX, &k) || !(name = word_str(L, &p, le)) ||
                    p != le)
                    return L->oom ? nomem(L) : bad(L, 22, "expected '// TesselClusterPlan K NAME' after TesselPlan");
                if (k != L->k || strcmp(name, L->kname) != 0)
                    return bad(L, 22, "expected cluster %d (%s) here", (int)L->k, L->kname);
                have_cluster = true;
            } else if (starts(t, le, "TesselDonation ")) {
                if (!have_plan)
                    return bad(L, 4, "a TesselDonation line before TesselPlan");
                IrStatus st = load_donation(L, c->spmd, t, le, s);
                if (st != IR_OK)
                    return st;
            } else if (starts(t, le, "TesselFallback ") || starts(t, le, "TesselCollective ") ||
                       starts(t, le, "TesselWhy") || starts(t, le, "TesselAvoid ")) {
                if (!have_plan)
                    return bad(L, 4, "report line before TesselPlan");
                IrStatus st = load_report_line(L, c, t, le, &capfb);
                if (st != IR_OK)
                    return st;
            } else if (starts(t, le, "TesselExplain ") || starts(t, le, "TesselExplainJson ")) {
                /* Read by load_explain; checked there. */
                if (!have_plan || L->host)
                    return bad(L, 4, "a TesselExplain line %s", L->host ? "in a plan with a host program"
                                                                        : "before TesselPlan");
            } else if (starts(t, le, "TesselEnd") && (le - t == 9 || (le - t == 10 && t[9] == '\r'))) {
                have_end = true;
            } else if (starts(t, le, "Tessel")) {
                return bad(L, 4, "unknown plan line");
            }
        }
        s = nl ? nl + 1 : end;
    }
    if (!have_plan || !have_end)
        return bad(L, 1, "not a complete tessel plan (missing %s): truncated?",
                   !have_plan ? "the TesselPlan line" : "the TesselEnd line");
    if (L->host && !have_cluster)
        return bad(L, 1, "cluster %d of the host program has no TesselClusterPlan line", (int)L->k);
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
        /* An output that is an (array) entry parameter as it came in is
         * laid out as that input: another sharding with shards of the
         * same shape would put its pieces together in another order. */
        int32_t src = root_param(e, tuple_root, o);
        if (src >= 0 && !ir_sharding_equal(plan_param_sharding(c, src), shd_leaf(c->out_sharding, &c->out_shape, o)))
            return bad(L, 1, "output %d is input %d as it came in, but TesselOutputSharding %d is not its "
                       "TesselInputSharding %d", (int)o, (int)src, (int)o, (int)src);
    }
    /* The collectives' groups and pairs within the plan's devices, as
     * `check` and a compile check a model's: a plan edited (and signed
     * again) to name device 5 of 2 is refused when loaded, not on each
     * device when it runs. */
    return ir_verify_groups(c->spmd, c->num_partitions, c->num_replicas, L->d);
}

/* The modules of a plan are checked against the default limits, with
 * room for what compiling added to a model within them: outlining puts the
 * clusters one call level deeper (a host program calls them), and the
 * partitioner adds instructions (reshards, collectives). */
static IrParseOptions plan_parse_options(const IrLimits *lim)
{
    IrParseOptions opt = ir_default_parse_options();
    if (lim)
        opt.limits = *lim;
    opt.limits.max_call_depth += 2;
    opt.limits.max_instructions *= 4;
    return opt;
}

/* One SPMD module and its lines: text[0, len) is the segment, which
 * starts at line `pad + 1` of the file (diagnostics name the file's
 * lines); `host` NULL for a plan without host work, else cluster k (named
 * kname) of a host program's plan. */
static IrStatus cluster_plan_load(const char *path, const char *text, size_t len, int32_t pad, const HostHdr *host,
                                  int32_t k, const char *kname, const IrLimits *lim, PlanCluster *out, IrDiag *d)
{
    memset(out, 0, sizeof *out);
    out->arena = ir_arena_new();
    /* A NUL-terminated copy after `pad` empty lines: ir_parse and the line
     * checks count the file's lines, and never read past `len`. */
    char *copy = out->arena ? ir_alloc(out->arena, (size_t)pad + len + 1) : NULL;
    if (!copy) {
        plan_cluster_free(out);
        return ir_oom(d, NULL);
    }
    memset(copy, '\n', (size_t)pad);
    memcpy(copy + pad, text, len);
    len += (size_t)pad;
    IrParseOptions opt = plan_parse_options(lim);
    IrStatus st = ir_parse(path, copy, len, &opt, &out->spmd, d);
    if (st != IR_OK) {
        plan_cluster_free(out);
        return st;
    }
    if (out->spmd->num_partitions < 1) {
        plan_cluster_free(out);
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){pad + 1, 1}, "plan module has no num_partitions");
    }
    Loader L = {.file = path, .text = copy, .len = len, .d = d, .a = out->arena, .host = host, .k = k, .kname = kname};
    st = load_lines(&L, out);
    if (st != IR_OK)
        plan_cluster_free(out);
    return st;
}

/* ---- a host program's plan ---- */

static bool place_from_name(const char *w, size_t n, CluPlace *p)
{
    for (size_t k = 0; k < sizeof place_names / sizeof *place_names; k++)
        if (place_names[k] && strlen(place_names[k]) == n && memcmp(place_names[k], w, n) == 0 &&
            k != CLU_DEVICE) {
            *p = (CluPlace)k;
            return true;
        }
    return false;
}

static int32_t count_lines(const char *s, size_t len)
{
    int32_t n = 0;
    for (const char *p = s, *end = s + len; p < end; n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    return n;
}

/* The TesselHost line. */
static IrStatus load_host_header(Loader *L, const IrModule *h, const char *t, const char *le, int32_t nlines,
                                 HostHdr *hh)
{
    long long ver;
    if (!kv(t, le, "version", &ver) || ver != HOST_PLAN_VERSION)
        return bad(L, 4, "unsupported host plan version (this tessel reads version %d)", HOST_PLAN_VERSION);
    if (!kv(t, le, "clusters", &hh->ncl) || !kv(t, le, "partitions", &hh->np) || !kv(t, le, "replicas", &hh->nr) ||
        !kv(t, le, "hosts", &hh->hosts) || !kv(t, le, "local_devices", &hh->local) ||
        !kv(t, le, "host_instrs", &hh->nhost) || !kv(t, le, "cuts", &hh->ncuts))
        return bad(L, 4, "expected clusters=, partitions=, replicas=, hosts=, local_devices=, host_instrs=, cuts=");
    /* Bounded before multiplying or allocating: the numbers are the
     * file's, and every entry of a list needs a line of its own. */
    if (hh->np < 1 || hh->nr < 1 || hh->np > IR_MAX_DEVICES || hh->nr > IR_MAX_DEVICES || hh->np * hh->nr > IR_MAX_DEVICES)
        return bad(L, 4, "at most %d devices (partitions x replicas)", IR_MAX_DEVICES);
    if (hh->hosts < 1 || hh->local < 1 || hh->hosts > IR_MAX_DEVICES || hh->local > IR_MAX_DEVICES ||
        hh->hosts * hh->local != hh->np * hh->nr)
        return bad(L, 4, "hosts x local_devices must equal partitions x replicas");
    if (hh->ncl < 0 || hh->ncl > nlines || hh->nhost < 0 || hh->nhost > nlines || hh->ncuts < 0 ||
        hh->ncuts > nlines)
        return bad(L, 4, "clusters=, host_instrs= or cuts= out of range");
    if (hh->np != h->num_partitions || hh->nr != (h->replica_count > 0 ? h->replica_count : 1))
        return bad(L, 4, "partitions/replicas do not match the host module's header");
    return IR_OK;
}

/* `// TesselHostCluster K NAME CALL HOST_COMP SOURCE_COMP NINSTRS NCONSTS
 * NINPUTS NOUTPUTS`: opens cluster K's lists. */
static IrStatus load_host_cluster(Loader *L, const IrModule *h, const char *t, const char *le, int32_t k,
                                  int32_t nlines, CluCluster *c)
{
    const char *p = t + 18;
    long long kk, ni, nc, nin, nout;
    if (!word_num(&p, le, 0, INT32_MAX, &kk) || !(c->name = word_str(L, &p, le)) || !(c->call = word_str(L, &p, le)))
        return L->oom ? nomem(L) : bad(L, 22, "expected '// TesselHostCluster K NAME CALL HOST_COMP SOURCE_COMP ...'");
    const char *hc = word_str(L, &p, le);
    if (!hc || !(c->source_comp = word_str(L, &p, le)) || !word_num(&p, le, 0, nlines, &ni) ||
        !word_num(&p, le, 0, nlines, &nc) || !word_num(&p, le, 0, nlines, &nin) || !word_num(&p, le, 0, nlines, &nout) ||
        p != le)
        return L->oom ? nomem(L) : bad(L, 22, "expected '// TesselHostCluster K NAME CALL HOST_COMP SOURCE_COMP "
                                       "NINSTRS NCONSTS NINPUTS NOUTPUTS'");
    if (kk != k)
        return bad(L, 22, "TesselHostCluster %d expected", (int)k);
    c->number = k;
    c->comp = ir_find_computation(h, c->name);
    c->host_comp = ir_find_computation(h, hc);
    if (c->comp < 0 || c->comp == h->entry)
        return bad(L, 22, "cluster %d: the host module has no computation %s", (int)k, c->name);
    if (c->host_comp < 0)
        return bad(L, 22, "cluster %d: the host module has no computation %s", (int)k, hc);
    c->ninstrs = (int32_t)ni;
    c->nconsts = (int32_t)nc;
    c->ninputs = (int32_t)nin;
    c->noutputs = (int32_t)nout;
    c->instrs = ir_alloc_array(L->a, (size_t)(ni ? ni : 1), sizeof *c->instrs);
    c->consts = ir_alloc_array(L->a, (size_t)(nc ? nc : 1), sizeof *c->consts);
    c->inputs = ir_alloc_array(L->a, (size_t)(nin ? nin : 1), sizeof *c->inputs);
    c->outputs = ir_alloc_array(L->a, (size_t)(nout ? nout : 1), sizeof *c->outputs);
    return c->instrs && c->consts && c->inputs && c->outputs ? IR_OK : nomem(L);
}

/* How far the lists of the cluster being read are filled. */
typedef struct Fill {
    int32_t instrs, consts, inputs, outputs;
} Fill;

static IrStatus fill_done(Loader *L, const CluCluster *c, const Fill *f)
{
    if (f->instrs != c->ninstrs || f->consts != c->nconsts || f->inputs != c->ninputs || f->outputs != c->noutputs)
        return bad(L, 1, "cluster %d lists %d/%d instructions, %d/%d constants, %d/%d inputs, %d/%d outputs",
                   (int)c->number, (int)f->instrs, (int)c->ninstrs, (int)f->consts, (int)c->nconsts, (int)f->inputs,
                   (int)c->ninputs, (int)f->outputs, (int)c->noutputs);
    return IR_OK;
}

/* One line of a cluster's lists (Instr, Const, In, Out) for the cluster
 * opened last (number cur). */
static IrStatus load_cluster_item(Loader *L, const char *t, const char *le, int32_t cur, long long ncl, CluCluster *c,
                                  Fill *f)
{
    bool instr = starts(t, le, "TesselClusterInstr "), cnst = starts(t, le, "TesselClusterConst ");
    bool in = starts(t, le, "TesselClusterIn ");
    if (!instr && !cnst && !in && !starts(t, le, "TesselClusterOut "))
        return bad(L, 4, "unknown host plan line");
    const char *p = t + (instr || cnst ? 19 : in ? 16 : 17);
    long long k;
    if (!word_num(&p, le, 0, INT32_MAX, &k) || k != cur || !c)
        return bad(L, 4, "a cluster line of cluster %d expected", (int)cur);
    const char *name = word_str(L, &p, le);
    if (!name)
        return L->oom ? nomem(L) : bad(L, 4, "a name expected");
    if (instr || cnst) {
        if (p != le || (instr ? f->instrs >= c->ninstrs : f->consts >= c->nconsts))
            return bad(L, 4, "extra or bad cluster %s line", instr ? "instruction" : "constant");
        if (instr)
            c->instrs[f->instrs++] = name;
        else
            c->consts[f->consts++] = name;
        return IR_OK;
    }
    if (in) {
        long long opnd, from, fout, hp, bytes;
        if (f->inputs >= c->ninputs || !word_num(&p, le, 0, c->ninputs - 1, &opnd) ||
            !word_num(&p, le, -1, ncl - 1, &from) || !word_num(&p, le, -1, INT32_MAX, &fout) ||
            !word_num(&p, le, -1, INT64_MAX, &hp) || !word_num(&p, le, 0, INT64_MAX, &bytes) || p != le)
            return bad(L, 4, "expected '// TesselClusterIn K VALUE OPERAND FROM_CLUSTER FROM_OUTPUT HOST_PARAM BYTES'");
        c->inputs[f->inputs++] = (CluInput){name, (int32_t)opnd, (int32_t)from, (int32_t)fout, hp, bytes};
        return IR_OK;
    }
    long long idx, bytes;
    const char *hn;
    if (f->outputs >= c->noutputs || !word_num(&p, le, 0, c->noutputs - 1, &idx) || !(hn = word_str(L, &p, le)) ||
        !word_num(&p, le, 0, INT64_MAX, &bytes) || p != le)
        return L->oom ? nomem(L) : bad(L, 4, "expected '// TesselClusterOut K VALUE INDEX HOST_NAME BYTES'");
    c->outputs[f->outputs++] = (CluOutput){name, (int32_t)idx, hn, bytes};
    return IR_OK;
}

/* `// TesselHostInstr COMP NAME KIND` and `// TesselCut COMP VALUE FROM TO
 * BYTES`. */
static IrStatus load_host_item(Loader *L, const char *t, const char *le, const HostHdr *hh, CluResult *res)
{
    bool cut = starts(t, le, "TesselCut ");
    const char *p = t + (cut ? 10 : 16), *comp = word_str(L, &p, le), *name = comp ? word_str(L, &p, le) : NULL;
    if (!name)
        return L->oom ? nomem(L) : bad(L, 4, "a computation and a name expected");
    if (!cut) {
        const char *w;
        size_t n;
        CluPlace pl;
        if (res->nhost >= hh->nhost || !word(&p, le, &w, &n) || !place_from_name(w, n, &pl) || p != le)
            return bad(L, 4, "extra or bad '// TesselHostInstr COMP NAME KIND' (host_instrs=%lld)", hh->nhost);
        res->host[res->nhost++] = (CluHostInstr){comp, name, pl};
        return IR_OK;
    }
    long long from, to, bytes;
    if (res->ncuts >= hh->ncuts || !word_num(&p, le, -1, hh->ncl - 1, &from) || !word_num(&p, le, -1, hh->ncl - 1, &to) ||
        !word_num(&p, le, 0, INT64_MAX, &bytes) || p != le)
        return bad(L, 4, "extra or bad '// TesselCut COMP VALUE FROM TO BYTES' (cuts=%lld)", hh->ncuts);
    res->cuts[res->ncuts++] = (CluCut){comp, name, (int32_t)from, (int32_t)to, bytes};
    return IR_OK;
}

/* The host program's lines: the header, then what cluster/ decided,
 * rebuilt into res (its strings in res->arena). */
static IrStatus load_host_lines(Loader *L, IrModule *h, CluResult *res, HostHdr *hh)
{
    int32_t nlines = count_lines(L->text, L->len);
    bool have_hdr = false, have_end = false;
    Fill f = {0};
    IrStatus st = IR_OK;
    L->line = 0;
    for (const char *s = L->text, *end = L->text + L->len; st == IR_OK && s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end, *t = s + 3;
        L->line++;
        s = nl ? nl + 1 : end;
        if (!starts(t - 3, le, "// ") || (L->line == 1 && starts(t - 3, le, "// TesselPlanFile ")))
            continue; /* not a plan line, or the frame's header (checked before loading) */
        CluCluster *cur = res->nclusters > 0 ? &res->clusters[res->nclusters - 1] : NULL;
        if (have_end)
            st = bad(L, 1, "text after '// TesselHostEnd'");
        else if (starts(t, le, "TesselHost ")) {
            if (have_hdr)
                return bad(L, 4, "a second TesselHost line");
            if ((st = load_host_header(L, h, t, le, nlines, hh)) != IR_OK)
                return st;
            have_hdr = true;
            res->host = ir_alloc_array(L->a, (size_t)(hh->nhost ? hh->nhost : 1), sizeof *res->host);
            res->cuts = ir_alloc_array(L->a, (size_t)(hh->ncuts ? hh->ncuts : 1), sizeof *res->cuts);
            res->clusters = ir_alloc_array(L->a, (size_t)(hh->ncl ? hh->ncl : 1), sizeof *res->clusters);
            if (!res->host || !res->cuts || !res->clusters)
                return nomem(L);
        } else if (!have_hdr) {
            st = bad(L, 4, "the TesselHost line must come first");
        } else if (starts(t, le, "TesselHostInstr ") || starts(t, le, "TesselCut ")) {
            st = res->nclusters ? bad(L, 4, "host instructions and cuts come before the clusters")
                                : load_host_item(L, t, le, hh, res);
        } else if (starts(t, le, "TesselHostCluster ")) {
            if (cur && (st = fill_done(L, cur, &f)) != IR_OK)
                return st;
            if (res->nclusters >= hh->ncl)
                return bad(L, 4, "more clusters than clusters=%lld", hh->ncl);
            f = (Fill){0};
            st = load_host_cluster(L, h, t, le, res->nclusters, nlines, &res->clusters[res->nclusters]);
            res->nclusters++;
        } else if (starts(t, le, "TesselCluster")) {
            st = load_cluster_item(L, t, le, res->nclusters - 1, hh->ncl, cur, &f);
        } else if (starts(t, le, "TesselExplain ") || starts(t, le, "TesselExplainJson ")) {
            /* Read by load_explain; checked there. */
        } else if (starts(t, le, "TesselDonation ")) {
            st = load_donation(L, h, t, le, t - 3);
        } else if (starts(t, le, "TesselHostEnd") && (le - t == 13 || (le - t == 14 && t[13] == '\r'))) {
            have_end = true;
        } else {
            st = bad(L, 4, "unknown host plan line");
        }
    }
    if (st != IR_OK)
        return st;
    if (!have_hdr || !have_end)
        return bad(L, 1, "not a complete host program plan (missing %s): truncated?",
                   !have_hdr ? "the TesselHost line" : "the TesselHostEnd line");
    if (res->nclusters && (st = fill_done(L, &res->clusters[res->nclusters - 1], &f)) != IR_OK)
        return st;
    if (res->nhost != hh->nhost || res->ncuts != hh->ncuts || res->nclusters != hh->ncl)
        return bad(L, 1, "the host lines list %d host instructions, %d cuts and %d clusters, the TesselHost line "
                   "%lld, %lld and %lld", (int)res->nhost, (int)res->ncuts, (int)res->nclusters, hh->nhost, hh->ncuts,
                   hh->ncl);
    return IR_OK;
}

/* The cluster number of a call's _tessel_cluster attribute ("K", quoted
 * or bare), -1 when it is not one. */
static long long cluster_number(const char *v)
{
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    long long k = 0;
    if (n == 0 || n > 9)
        return -1;
    for (size_t j = 0; j < n; j++) {
        if (v[j] < '0' || v[j] > '9')
            return -1;
        k = k * 10 + (v[j] - '0');
    }
    return k;
}

/* Every cluster call of the host program names an existing cluster, runs
 * its computation, and has its inputs and outputs: operand and result
 * shapes equal the cluster's logical ones; each cluster's call exists. */
static IrStatus check_calls(const char *path, const PlanProgram *p, const CluResult *res, IrDiag *d)
{
    const IrModule *h = p->host;
    for (int32_t ci = 0; ci < h->ncomp; ci++)
        for (int32_t i = 0; i < h->comp[ci]->ninstr; i++) {
            const IrComputation *comp = h->comp[ci];
            const IrInstr *ins = &comp->instr[i];
            const char *v = ir_frontend_attr(ins, "_tessel_cluster");
            if (!v)
                continue;
            long long k = cluster_number(v);
            if (k < 0 || k >= p->ncluster || ins->op != OP_CALL || ins->ncalled != 1 ||
                ins->called[0] != res->clusters[k].comp)
                return ir_error(d, IR_EINPUT, path, h->src, ins->pos,
                                "%s: _tessel_cluster=%s is not a call of a cluster of the plan", ins->name, v);
            const PlanCluster *c = &p->cluster[k];
            bool same = ins->nopnd == c->nparam && ir_shape_equal(&ins->shape, &c->out_shape);
            for (int32_t j = 0; same && j < ins->nopnd; j++)
                same = ir_shape_equal(&comp->instr[ins->opnd[j]].shape, &c->param_shape[j]);
            if (!same)
                return ir_error(d, IR_EINPUT, path, h->src, ins->pos,
                                "%s: the call's operand or result shapes are not those of cluster %lld's plan",
                                ins->name, k);
        }
    for (int32_t k = 0; k < res->nclusters; k++) {
        const CluCluster *c = &res->clusters[k];
        const IrComputation *hc = h->comp[c->host_comp];
        bool found = false;
        for (int32_t i = 0; i < hc->ninstr && !found; i++) {
            const char *v = ir_frontend_attr(&hc->instr[i], "_tessel_cluster");
            found = v && strcmp(hc->instr[i].name, c->call) == 0 && cluster_number(v) == k;
        }
        if (!found || c->ninputs != p->cluster[k].nparam)
            return ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                            "cluster %d: %s", (int)k, !found ? "its call is not in the host computation the plan names"
                                                             : "its values in are not its inputs");
    }
    return IR_OK;
}

/* A host program's plan: segment 0 is the host module and its lines,
 * segment k+1 cluster k's SPMD module and lines. seg[j] is where segment j
 * starts (offset, 0-based line), seg[nseg] the end of the text. */
typedef struct Seg {
    size_t off;
    int32_t line;
} Seg;

/* The explanation of --auto-shard (TesselExplain lines, their text; one
 * TesselExplainJson line, an object that starts with its format's key)
 * into ar; none: ar stays empty. */
static IrStatus load_explain(const char *path, const char *text, size_t len, AutoReport *ar, IrDiag *d)
{
    IrStrBuf tx = {0}, js = {0};
    int32_t line = 0, njson = 0, ntext = 0;
    IrStatus st = IR_OK;
    for (const char *s = text, *end = text + len; st == IR_OK && s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        line++;
        if (le > s && le[-1] == '\r')
            le--;
        if (starts(s, le, "// TesselExplainJson ")) {
            const char *j = s + 21;
            static const char KEY[] = "{\"tessel_auto_shard\": 1,";
            if (njson++ || (size_t)(le - j) < sizeof KEY || memcmp(j, KEY, sizeof KEY - 1) || le[-1] != '}')
                st = ir_error(d, IR_EINPUT, path, NULL, (IrPos){line, 4},
                              "expected one '// TesselExplainJson {\"tessel_auto_shard\": 1, ...}'");
            else
                ir_sb_printf(&js, "%.*s\n", (int)(le - j), j);
        } else if (starts(s, le, "// TesselExplain ")) {
            ntext++;
            ir_sb_printf(&tx, "%.*s\n", (int)(le - s - 17), s + 17);
        }
        s = nl ? nl + 1 : end;
    }
    if (st == IR_OK && (ntext > 0) != (njson > 0))
        st = ir_error(d, IR_EINPUT, path, NULL, (IrPos){0, 0},
                      "a plan with TesselExplain lines has one TesselExplainJson line, and the other way round");
    if (st == IR_OK && njson) {
        ar->explain = ir_sb_take(&tx);
        ar->explain_json = ir_sb_take(&js);
        if (!ar->explain || !ar->explain_json)
            st = ir_oom(d, NULL);
    }
    ir_sb_free(&tx);
    ir_sb_free(&js);
    return st;
}

static IrStatus host_plan_load(const char *path, const char *text, const Seg *seg, int32_t nseg, const IrLimits *lim,
                               CompileResult *out, IrDiag *d)
{
    PlanProgram *p = &out->prog;
    CluResult *res = &out->res;
    size_t n0 = seg[1].off;
    char *copy = ts_malloc(n0 + 1);
    res->arena = ir_arena_new();
    if (!copy || !res->arena) {
        ts_free(copy);
        return ir_oom(d, NULL);
    }
    memcpy(copy, text, n0);
    copy[n0] = 0;
    IrParseOptions opt = plan_parse_options(lim);
    IrStatus st = ir_parse(path, copy, n0, &opt, &p->host, d);
    HostHdr hh = {0};
    Loader L = {.file = path, .text = copy, .len = n0, .d = d, .a = res->arena};
    if (st == IR_OK)
        st = load_host_lines(&L, p->host, res, &hh);
    if (st == IR_OK)
        st = load_explain(path, copy, n0, &out->autoshard, d);
    ts_free(copy);
    if (st != IR_OK)
        return st;
    p->num_partitions = hh.np;
    p->num_replicas = hh.nr;
    p->hosts = hh.hosts;
    p->local_devices = hh.local;
    if (nseg - 1 != hh.ncl)
        return ir_error(d, IR_EINPUT, path, NULL, (IrPos){seg[nseg].line, 1},
                        "the TesselHost line says clusters=%lld but the plan holds %d cluster modules: truncated?",
                        hh.ncl, (int)(nseg - 1));
    p->cluster = ts_calloc((size_t)(hh.ncl ? hh.ncl : 1), sizeof *p->cluster);
    if (!p->cluster)
        return ir_oom(d, NULL);
    for (int32_t k = 0; st == IR_OK && k < hh.ncl; k++) {
        st = cluster_plan_load(path, text + seg[k + 1].off, seg[k + 2].off - seg[k + 1].off, seg[k + 1].line, &hh, k,
                               res->clusters[k].name, lim, &p->cluster[k], d);
        if (st == IR_OK)
            p->ncluster = k + 1;
    }
    if (st == IR_OK)
        st = check_calls(path, p, res, d);
    /* Each cluster's source module is the host program's computation for
     * it, with the shardings its plan lines give. */
    for (int32_t k = 0; st == IR_OK && k < p->ncluster; k++) {
        PlanCluster *c = &p->cluster[k];
        st = clu_cluster_module(p->host, res, k, &c->src, d);
        if (st == IR_OK) {
            Loader CL = {.file = path, .d = d, .plan_line = seg[k + 1].line + 1};
            st = check_logical(&CL, c->src, c);
        }
    }
    return st;
}

/* ---- the plan of a compiled program ---- */

char *compile_plan_file_text(const CompileResult *r)
{
    return compile_plan_file_text_signed(r, NULL, 0);
}

char *compile_plan_file_text_signed(const CompileResult *r, const void *key, size_t keylen)
{
    char *body = r->prog.host ? host_plan_text(r) : cluster_plan_text(&r->prog.cluster[0], r->layouts[0], -1, NULL, &r->autoshard);
    char *t = body ? compile_plan_frame_signed(body, key, keylen) : NULL;
    ts_free(body);
    return t;
}

/* Where each module of the text starts: at a line beginning with
 * "HloModule " (the first one at offset 0, with what precedes it). *host:
 * the first segment has a TesselHost line. */
static IrStatus split_segments(const char *text, size_t len, Seg **out, int32_t *nseg, bool *host, IrDiag *d)
{
    int32_t n = 0, cap = 0, line = 0, nmod = 0;
    Seg *seg = NULL;
    *host = false;
    for (const char *s = text, *end = text + len;; line++) {
        bool at_end = s >= end;
        const char *nl = at_end ? NULL : memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        bool mod = !at_end && starts(s, le, "HloModule ");
        nmod += mod;
        if (at_end || n == 0 || (mod && nmod > 1)) {
            if (n + 1 >= cap) {
                cap = cap ? cap * 2 : 8;
                Seg *ns = ts_realloc(seg, (size_t)cap * sizeof *ns);
                if (!ns) {
                    ts_free(seg);
                    return ir_oom(d, NULL);
                }
                seg = ns;
            }
            seg[n] = (Seg){(size_t)(s - text), line};
            n++;
        }
        if (at_end)
            break;
        if (nmod <= 1 && starts(s, le, "// TesselHost "))
            *host = true;
        s = nl ? nl + 1 : end;
    }
    *out = seg;
    *nseg = n - 1; /* the last entry is the end */
    return IR_OK;
}

IrStatus compile_plan_load(const char *path, const char *text, size_t len, const IrLimits *lim, CompileResult *out,
                           IrDiag *d)
{
    memset(out, 0, sizeof *out);
    out->from_plan = true;
    PlanProgram *p = &out->prog;
    Seg *seg = NULL;
    int32_t nseg = 0;
    bool host = false;
    /* The frame first: a plan that was cut, edited or damaged anywhere is
     * refused here, before a byte of it is parsed; the rest reads the
     * body (the digest line is not part of the program). */
    IrStatus st = compile_plan_check_frame(path, text, len, &len, d);
    if (st == IR_OK)
        st = split_segments(text, len, &seg, &nseg, &host, d);
    if (st == IR_OK && host && nseg < 1)
        st = ir_error(d, IR_EINPUT, path, NULL, (IrPos){1, 1}, "not a plan");
    if (st == IR_OK && host) {
        st = host_plan_load(path, text, seg, nseg, lim, out, d);
    } else if (st == IR_OK) {
        /* No host work: one module, the program is cluster 0. */
        p->cluster = ts_calloc(1, sizeof *p->cluster);
        st = p->cluster ? cluster_plan_load(path, text, len, 0, NULL, -1, NULL, lim, &p->cluster[0], d)
                        : ir_oom(d, NULL);
        if (st == IR_OK) {
            p->ncluster = 1; /* owned by out from here, freed with it on failure */
            p->num_partitions = p->cluster[0].num_partitions;
            p->num_replicas = p->cluster[0].num_replicas;
            p->hosts = p->cluster[0].hosts;
            p->local_devices = p->cluster[0].local_devices;
            st = load_explain(path, text, len, &out->autoshard, d);
        }
    }
    ts_free(seg);
    if (st == IR_OK)
        st = compile_replan(out, p->hosts, p->local_devices, d);
    if (st != IR_OK)
        compile_result_free(out);
    return st;
}
