/*
 * view_why.c: why each collective of a plan is there, for people: the
 * lines the text dump prints under each collective, and `tessel plan
 * --why NAME`, the collectives that produce or consume one value. The
 * reasons themselves are the partitioner's (partition/spmd_why.c); a
 * plan file keeps them (plan_file.c), an older plan file has none.
 *
 *   all-reduce.7   all-reduce   groups {{0,1}}, 1024 bytes per device, on dot.2's value
 *     why: asked for by dot.2 at mlp.hlo:9:3: dot dot.2 contracts dim 1 of h, which is
 *          tiled over 2 devices: partial sums are all-reduced
 *     avoid: ...
 */
#include "compile.h"

#include <string.h>

void compile_site_pos(IrStrBuf *o, const SpmdSite *s, const char *file)
{
    if (s->pos.line <= 0) {
        ir_sb_puts(o, "an unknown position");
        return;
    }
    if (file)
        ir_sb_printf(o, "%s:", file);
    ir_sb_printf(o, "%d:%d", (int)s->pos.line, (int)s->pos.col);
}

void compile_why_lines(IrStrBuf *o, const SpmdCollective *c, const char *file, const char *indent)
{
    if (c->why.kind == SPMD_WHY_UNKNOWN && !c->why.text) {
        ir_sb_printf(o, "%swhy: not recorded (a plan file written before tessel kept reasons)\n", indent);
        return;
    }
    ir_sb_printf(o, "%swhy: ", indent);
    if (c->site.source) {
        ir_sb_printf(o, "asked for by %s at ", c->site.source);
        compile_site_pos(o, &c->site, file);
        ir_sb_puts(o, ": ");
    }
    ir_sb_printf(o, "%s\n", c->why.text ? c->why.text : spmd_why_kind_name(c->why.kind));
    if (c->why.avoid)
        ir_sb_printf(o, "%savoid: %s\n", indent, c->why.avoid);
}

/* Does c produce or consume `name` (or is it `name`)? */
static bool concerns(const SpmdCollective *c, const char *name)
{
    return (c->name && strcmp(c->name, name) == 0) || (c->site.source && strcmp(c->site.source, name) == 0) ||
           (c->site.operand && strcmp(c->site.operand, name) == 0);
}

/* Is `name` an instruction of any computation of m? */
static bool has_instr(const IrModule *m, const char *name)
{
    for (int32_t c = 0; m && c < m->ncomp; c++)
        for (int32_t i = 0; i < m->comp[c]->ninstr; i++)
            if (strcmp(m->comp[c]->instr[i].name, name) == 0)
                return true;
    return false;
}

typedef struct Names {
    const char **v;
    int32_t n, cap;
} Names;

static const char *names_at(void *ctx, int32_t i)
{
    return ((Names *)ctx)->v[i];
}

static void names_add(Names *ns, const char *s)
{
    if (!s || ns->n == ns->cap) {
        int32_t cap = ns->cap ? ns->cap * 2 : 64;
        const char **v = s ? ts_realloc(ns->v, (size_t)cap * sizeof *v) : NULL;
        if (!v)
            return; /* a hint left out, not an error */
        ns->v = v;
        ns->cap = cap;
    }
    ns->v[ns->n++] = s;
}

const char *compile_plan_nearest_name(const CompileResult *r, const char *name, bool computations)
{
    Names ns = {0};
    for (int32_t k = 0; k < r->prog.ncluster; k++) {
        const PlanCluster *pc = &r->prog.cluster[k];
        for (int32_t c = 0; pc->src && c < pc->src->ncomp; c++) {
            if (computations)
                names_add(&ns, pc->src->comp[c]->name);
            for (int32_t i = 0; i < pc->src->comp[c]->ninstr; i++)
                names_add(&ns, pc->src->comp[c]->instr[i].name);
        }
        for (int32_t j = 0; j < pc->report.ncoll; j++)
            names_add(&ns, pc->report.coll[j].name);
    }
    const char *near = ir_nearest(name, strlen(name), ns.n, names_at, &ns);
    ts_free(ns.v);
    return near;
}

char *compile_plan_why(const CompileResult *r, const char *name, IrDiag *d)
{
    bool known = false;
    int32_t n = 0;
    IrStrBuf o = {0}, body = {0};
    for (int32_t k = 0; k < r->prog.ncluster; k++) {
        const PlanCluster *pc = &r->prog.cluster[k];
        const SpmdReport *rep = &pc->report;
        known |= has_instr(pc->src, name) || has_instr(pc->spmd, name);
        for (int32_t j = 0; j < rep->ncoll; j++) {
            const SpmdCollective *c = &rep->coll[j];
            if (!concerns(c, name))
                continue;
            known = true;
            n++;
            ir_sb_printf(&body, "  %s (%s, %lld bytes per device, groups %s)", c->name, ir_op_name(c->op),
                         (long long)c->bytes_per_device, c->replica_groups ? c->replica_groups : "?");
            if (c->site.source && c->site.operand)
                ir_sb_printf(&body, " on %s -> %s", c->site.operand, c->site.source);
            else if (c->site.source)
                ir_sb_printf(&body, c->site.output ? " on %s -> result" : " on %s's value", c->site.source);
            if (r->prog.ncluster > 1)
                ir_sb_printf(&body, " in cluster %d", (int)k);
            ir_sb_puts(&body, "\n");
            compile_why_lines(&body, c, rep->file, "    ");
        }
    }
    if (!known) {
        ir_sb_free(&body);
        const char *near = compile_plan_nearest_name(r, name, false);
        ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                 "--why %s: no instruction or collective of that name in the plan%s%s%s", name,
                 near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
        return NULL;
    }
    if (n == 0)
        ir_sb_printf(&o, "%s: no collective produces or consumes it (it stays on its devices)\n", name);
    else
        ir_sb_printf(&o, "%s: %d %s\n", name, (int)n,
                     n == 1 ? "collective produces or consumes it" : "collectives produce or consume it");
    char *b = ir_sb_take(&body);
    ir_sb_put_owned(&o, b);
    char *t = ir_sb_take(&o);
    if (!t)
        ir_oom(d, NULL);
    return t;
}
