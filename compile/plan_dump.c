/*
 * plan_dump.c: the plan for people (text), for programs (JSON, written
 * with jansson) and for Graphviz (DOT, the graph coloured by sharding,
 * collectives and fallbacks marked).
 */
#include "compile.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ---- JSON ---- */

static json_t *jstr_owned(char *s)
{
    json_t *j = s ? json_string(s) : json_null();
    ts_free(s);
    return j;
}

static json_t *jshape(const IrShape *s)
{
    return jstr_owned(ir_shape_str(s, false));
}

static json_t *jsharding(const IrSharding *s)
{
    return jstr_owned(ir_sharding_str(s));
}

static json_t *ji64s(int32_t n, const int64_t *v)
{
    json_t *a = json_array();
    for (int32_t k = 0; k < n; k++)
        json_array_append_new(a, json_integer(v[k]));
    return a;
}

static json_t *jtree(const PlanTree *t, int64_t ndev)
{
    if (!t)
        return json_null();
    json_t *o = json_object();
    if (t->leaf) {
        json_object_set_new(o, "leaf", json_true());
        if (t->ndevices == 0) {
            json_t *all = json_array();
            for (int64_t k = 0; k < ndev; k++)
                json_array_append_new(all, json_integer(k));
            json_object_set_new(o, "devices", all);
        } else {
            json_object_set_new(o, "devices", ji64s(t->ndevices, t->devices));
        }
        json_object_set_new(o, "offset", ji64s(t->rank, t->offset));
        json_object_set_new(o, "shape", ji64s(t->rank, t->extent));
        return o;
    }
    json_object_set_new(o, "dim", json_integer(t->dim));
    json_object_set_new(o, "pieces", json_integer(t->pieces));
    json_t *ch = json_array();
    for (int64_t k = 0; k < t->pieces; k++)
        json_array_append_new(ch, jtree(&t->child[k], ndev));
    json_object_set_new(o, "children", ch);
    return o;
}

static json_t *jvalue(const PlanValue *v, bool input, int64_t ndev)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(v->index));
    if (input)
        json_object_set_new(o, "name", json_string(v->name ? v->name : ""));
    json_object_set_new(o, "shape", jshape(&v->shape));
    json_object_set_new(o, "sharding", jsharding(v->sharding));
    json_object_set_new(o, "device_shape", jshape(&v->device_shape));
    json_object_set_new(o, input ? "split_tree" : "concat_tree", jtree(v->tree, ndev));
    return o;
}

static json_t *jcluster(const Plan *p)
{
    json_t *c = json_object();
    int64_t ndev = p->num_partitions;
    json_object_set_new(c, "name", json_string(p->cluster));
    json_t *im = json_array(), *xs = json_array(), *ins = json_array(), *outs = json_array();
    for (int32_t k = 0; k < p->ninputs; k++) {
        json_array_append_new(im, json_integer(p->inputs[k].index));
        json_array_append_new(xs, jshape(&p->inputs[k].shape));
        json_array_append_new(ins, jvalue(&p->inputs[k], true, ndev));
    }
    IrShape *leaves = ts_calloc((size_t)(p->noutputs > 0 ? p->noutputs : 1), sizeof(IrShape));
    for (int32_t k = 0; k < p->noutputs; k++) {
        json_array_append_new(outs, jvalue(&p->outputs[k], false, ndev));
        if (leaves)
            leaves[k] = p->outputs[k].shape;
    }
    IrShape tuple = {.type = IR_TUPLE, .ntuple = p->noutputs, .tuple = leaves};
    json_object_set_new(c, "input_mapping", im);
    json_object_set_new(c, "xla_input_shapes", xs);
    json_object_set_new(c, "xla_output_shape", leaves ? jshape(&tuple) : json_null());
    ts_free(leaves);
    json_object_set_new(c, "inputs", ins);
    json_object_set_new(c, "outputs", outs);
    json_t *is = json_array();
    for (int32_t k = 0; k < p->ninstrs; k++) {
        const PlanInstr *pi = &p->instrs[k];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(pi->name));
        json_object_set_new(o, "opcode", json_string(pi->opcode));
        json_object_set_new(o, "shape", jshape(&pi->shape));
        json_object_set_new(o, "sharding", jsharding(pi->sharding));
        json_object_set_new(o, "device_shape", jshape(&pi->device_shape));
        json_object_set_new(o, "fallback", json_boolean(pi->fallback));
        json_array_append_new(is, o);
    }
    json_object_set_new(c, "instructions", is);
    json_t *cs = json_array();
    for (int32_t k = 0; p->report && k < p->report->ncoll; k++) {
        const SpmdCollective *sc = &p->report->coll[k];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(sc->name));
        json_object_set_new(o, "opcode", json_string(ir_op_name(sc->op)));
        json_object_set_new(o, "replica_groups", json_string(sc->replica_groups));
        json_object_set_new(o, "bytes_per_device", json_integer(sc->bytes_per_device));
        json_array_append_new(cs, o);
    }
    json_object_set_new(c, "collectives", cs);
    json_t *mem = json_object();
    json_object_set_new(mem, "peak_bytes_per_device", json_integer(p->peak_bytes_per_device));
    json_object_set_new(c, "memory", mem);
    return c;
}

static json_t *jstrings(int32_t n, const char *const *v)
{
    json_t *a = json_array();
    for (int32_t k = 0; k < n; k++)
        json_array_append_new(a, json_string(v[k]));
    return a;
}

/* What cluster/ decided about a cluster, added to its plan entry. */
static void jcluster_source(json_t *c, const CluCluster *cc)
{
    json_object_set_new(c, "source_instructions", jstrings(cc->ninstrs, cc->instrs));
    json_object_set_new(c, "cloned_constants", jstrings(cc->nconsts, cc->consts));
    json_object_set_new(c, "call", json_string(cc->call));
    json_t *in = json_array();
    for (int32_t k = 0; k < cc->ninputs; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "value", json_string(cc->inputs[k].value));
        json_object_set_new(o, "operand", json_integer(cc->inputs[k].operand));
        json_object_set_new(o, "from_cluster", json_integer(cc->inputs[k].from_cluster));
        json_object_set_new(o, "bytes", json_integer(cc->inputs[k].bytes));
        json_array_append_new(in, o);
    }
    json_object_set_new(c, "values_in", in);
    json_t *out = json_array();
    for (int32_t k = 0; k < cc->noutputs; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "value", json_string(cc->outputs[k].value));
        json_object_set_new(o, "index", json_integer(cc->outputs[k].index));
        json_object_set_new(o, "bytes", json_integer(cc->outputs[k].bytes));
        json_array_append_new(out, o);
    }
    json_object_set_new(c, "values_out", out);
}

static char *plans_json(Plan *const *plans, int32_t nplans, const CluResult *res)
{
    const Plan *p = plans[0];
    json_t *o = json_object();
    json_object_set_new(o, "module", json_string(p->module));
    json_object_set_new(o, "num_partitions", json_integer(p->num_partitions));
    json_object_set_new(o, "num_replicas", json_integer(p->num_replicas));
    json_object_set_new(o, "hosts", json_integer(p->hosts));
    json_object_set_new(o, "local_devices", json_integer(p->local_devices));
    json_t *da = json_array();
    for (int64_t r = 0; r < p->num_replicas; r++)
        json_array_append_new(da, ji64s((int32_t)p->num_partitions, p->device_assignment + r * p->num_partitions));
    json_object_set_new(o, "device_assignment", da);
    json_t *is = json_array();
    for (int32_t k = 0; k < p->nislands; k++) {
        json_t *i = json_object();
        json_object_set_new(i, "host", json_integer(p->islands[k].host));
        json_object_set_new(i, "replica", json_integer(p->islands[k].replica));
        json_object_set_new(i, "devices", ji64s(p->islands[k].ndevices, p->islands[k].devices));
        json_array_append_new(is, i);
    }
    json_object_set_new(o, "islands", is);
    json_t *cl = json_array();
    for (int32_t k = 0; k < nplans; k++) {
        json_t *c = jcluster(plans[k]);
        if (res && k < res->nclusters)
            jcluster_source(c, &res->clusters[k]);
        json_array_append_new(cl, c);
    }
    json_object_set_new(o, "clusters", cl);
    if (res) {
        json_t *h = json_array(), *cuts = json_array();
        for (int32_t k = 0; k < res->nhost; k++) {
            json_t *e = json_object();
            json_object_set_new(e, "computation", json_string(res->host[k].comp));
            json_object_set_new(e, "name", json_string(res->host[k].name));
            json_object_set_new(e, "kind", json_string(compile_place_name(res->host[k].place)));
            json_array_append_new(h, e);
        }
        for (int32_t k = 0; k < res->ncuts; k++) {
            json_t *e = json_object();
            json_object_set_new(e, "computation", json_string(res->cuts[k].comp));
            json_object_set_new(e, "value", json_string(res->cuts[k].value));
            json_object_set_new(e, "from", json_integer(res->cuts[k].from));
            json_object_set_new(e, "to", json_integer(res->cuts[k].to));
            json_object_set_new(e, "bytes", json_integer(res->cuts[k].bytes));
            json_array_append_new(cuts, e);
        }
        json_object_set_new(o, "host_instructions", h);
        json_object_set_new(o, "cuts", cuts);
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s)
        return NULL;
    /* jansson allocates with malloc: hand back a ts_ string. */
    size_t n = strlen(s);
    char *r = ts_malloc(n + 2);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\n';
        r[n + 1] = 0;
    }
    free(s);
    return r;
}


/* ---- text ---- */


static void out_tree(IrStrBuf *o, const PlanTree *t, int depth)
{
    if (!t)
        return;
    if (t->leaf) {
        ir_sb_printf(o, "%*sleaf devices {", depth * 2, "");
        for (int32_t k = 0; k < t->ndevices; k++)
            ir_sb_printf(o, k ? ",%lld" : "%lld", (long long)t->devices[k]);
        if (t->ndevices == 0)
            ir_sb_printf(o, "all");
        ir_sb_printf(o, "} offset [");
        for (int32_t k = 0; k < t->rank; k++)
            ir_sb_printf(o, k ? ",%lld" : "%lld", (long long)t->offset[k]);
        ir_sb_printf(o, "] shape [");
        for (int32_t k = 0; k < t->rank; k++)
            ir_sb_printf(o, k ? ",%lld" : "%lld", (long long)t->extent[k]);
        ir_sb_printf(o, "]\n");
        return;
    }
    ir_sb_printf(o, "%*ssplit dim %d into %lld\n", depth * 2, "", (int)t->dim, (long long)t->pieces);
    for (int64_t k = 0; k < t->pieces; k++)
        out_tree(o, &t->child[k], depth + 1);
}

static void out_value(IrStrBuf *o, const PlanValue *v, bool input)
{
    char *sh = ir_shape_str(&v->shape, false), *ds = ir_shape_str(&v->device_shape, false);
    char *sd = ir_sharding_str(v->sharding);
    ir_sb_printf(o, "  %s %d%s%s: %s %s, per device %s\n", input ? "input" : "output", (int)v->index,
         input ? " " : "", input && v->name ? v->name : "", sh ? sh : "?", sd ? sd : "?", ds ? ds : "?");
    ts_free(sh);
    ts_free(ds);
    ts_free(sd);
    out_tree(o, v->tree, 2);
}

static void out_header(IrStrBuf *o, const Plan *p)
{
    ir_sb_printf(o, "module %s: %lld partitions x %lld replicas on %lld hosts x %lld local devices\n", p->module,
         (long long)p->num_partitions, (long long)p->num_replicas, (long long)p->hosts,
         (long long)p->local_devices);
    ir_sb_printf(o, "device assignment (replica x partition -> device -> host):\n");
    for (int64_t r = 0; r < p->num_replicas; r++)
        for (int64_t q = 0; q < p->num_partitions; q++) {
            int64_t dev = p->device_assignment[r * p->num_partitions + q];
            ir_sb_printf(o, "  replica %lld partition %lld -> device %lld -> host %lld\n", (long long)r, (long long)q,
                 (long long)dev, (long long)(dev / p->local_devices));
        }
    ir_sb_printf(o, "islands:\n");
    for (int32_t k = 0; k < p->nislands; k++) {
        ir_sb_printf(o, "  host %lld replica %lld: devices", (long long)p->islands[k].host,
             (long long)p->islands[k].replica);
        for (int32_t j = 0; j < p->islands[k].ndevices; j++)
            ir_sb_printf(o, " %lld", (long long)p->islands[k].devices[j]);
        ir_sb_printf(o, "\n");
    }
}

static void out_cluster(IrStrBuf *o, const Plan *p)
{
    ir_sb_printf(o, "cluster %s:\n", p->cluster);
    char *cr = plan_compile_result(p);
    if (cr) {
        for (char *line = cr; *line;) {
            char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line) : strlen(line);
            if (len > 3) /* drop the leading "// " */
                ir_sb_printf(o, "  %.*s\n", (int)(len - 3), line + 3);
            line += len + (nl ? 1 : 0);
        }
        ts_free(cr);
    }
    for (int32_t k = 0; k < p->ninputs; k++)
        out_value(o, &p->inputs[k], true);
    for (int32_t k = 0; k < p->noutputs; k++)
        out_value(o, &p->outputs[k], false);
    ir_sb_printf(o, "  instructions:\n");
    for (int32_t k = 0; k < p->ninstrs; k++) {
        const PlanInstr *pi = &p->instrs[k];
        char *sh = ir_shape_str(&pi->shape, false), *ds = ir_shape_str(&pi->device_shape, false);
        char *sd = ir_sharding_str(pi->sharding);
        ir_sb_printf(o, "    %-24s %-20s %-20s %-36s per device %s%s\n", pi->name, pi->opcode, sh ? sh : "?",
             sd ? sd : "?", ds ? ds : "?", pi->fallback ? "  [fallback]" : "");
        ts_free(sh);
        ts_free(ds);
        ts_free(sd);
    }
    ir_sb_printf(o, "  collectives:\n");
    for (int32_t k = 0; p->report && k < p->report->ncoll; k++) {
        const SpmdCollective *c = &p->report->coll[k];
        ir_sb_printf(o, "    %-24s %-20s groups %s, %lld bytes per device\n", c->name, ir_op_name(c->op),
             c->replica_groups, (long long)c->bytes_per_device);
    }
    if (!p->report || p->report->ncoll == 0)
        ir_sb_printf(o, "    (none)\n");
    ir_sb_printf(o, "  peak memory per device: %lld bytes\n", (long long)p->peak_bytes_per_device);
}

static char *plans_text(Plan *const *plans, int32_t nplans, const CluResult *res)
{
    IrStrBuf o = {0};
    out_header(&o, plans[0]);
    for (int32_t k = 0; k < nplans; k++) {
        if (res && k < res->nclusters) {
            const CluCluster *c = &res->clusters[k];
            ir_sb_printf(&o, "cluster %s (called by %s; %d instructions, %d values in, %d out):\n", c->name, c->call,
                 (int)c->ninstrs, (int)c->ninputs, (int)c->noutputs);
            ir_sb_printf(&o, "  source instructions:");
            for (int32_t j = 0; j < c->ninstrs; j++)
                ir_sb_printf(&o, " %s", c->instrs[j]);
            ir_sb_printf(&o, "\n");
        }
        out_cluster(&o, plans[k]);
    }
    if (res) {
        ir_sb_printf(&o, "host instructions:\n");
        for (int32_t k = 0; k < res->nhost; k++)
            ir_sb_printf(&o, "  %s/%s %s\n", res->host[k].comp, res->host[k].name, compile_place_name(res->host[k].place));
        ir_sb_printf(&o, "values cut between host and devices:\n");
        for (int32_t k = 0; k < res->ncuts; k++) {
            char from[32], to[32];
            snprintf(from, sizeof from, res->cuts[k].from < 0 ? "host" : "cluster %d", (int)res->cuts[k].from);
            snprintf(to, sizeof to, res->cuts[k].to < 0 ? "host" : "cluster %d", (int)res->cuts[k].to);
            ir_sb_printf(&o, "  %s/%s: %s -> %s, %lld bytes\n", res->cuts[k].comp, res->cuts[k].value, from, to,
                 (long long)res->cuts[k].bytes);
        }
    }
    return ir_sb_take(&o);
}


/* ---- DOT ---- */

/* A colour per distinct sharding text, stable for equal texts. */
static const char *colour_for(const char *s)
{
    static const char *palette[] = {"#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6",
                                    "#ffff99", "#1f78b4", "#33a02c", "#e31a1c", "#ff7f00"};
    if (!s || strcmp(s, "{replicated}") == 0)
        return "#eeeeee";
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return palette[h % (sizeof palette / sizeof *palette)];
}

/* One computation's instructions as DOT nodes and edges, ids prefixed. */
static void dot_computation(IrStrBuf *o, const IrComputation *c, const char *prefix, const char *indent)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        char *sd = ins->sharding ? ir_sharding_str(ins->sharding) : NULL;
        bool host = clu_is_host_instr(ins, NULL);
        ir_sb_printf(o, "%s%s%d [label=\"%s\\n%s\\n%s\", fillcolor=\"%s\"%s];\n", indent, prefix, (int)i, ins->name,
             ir_op_name(ins->op), sd ? sd : "", host ? "#ffffff" : colour_for(sd), host ? ", shape=ellipse" : "");
        ts_free(sd);
    }
    for (int32_t i = 0; i < c->ninstr; i++)
        for (int32_t k = 0; k < c->instr[i].nopnd; k++)
            ir_sb_printf(o, "%s%s%d -> %s%d;\n", indent, prefix, (int)c->instr[i].opnd[k], prefix, (int)i);
}

static char *program_dot(const PlanProgram *prog, const CluResult *res)
{
    IrStrBuf o = {0};
    const IrModule *h = prog->host;
    ir_sb_printf(&o, "digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\"];\n",
         h->name);
    ir_sb_printf(&o, "  subgraph \"host\" {\n    label=\"host program\";\n");
    dot_computation(&o, ir_entry(h), "h", "    ");
    ir_sb_printf(&o, "  }\n");
    for (int32_t k = 0; k < res->nclusters; k++) {
        const CluCluster *c = &res->clusters[k];
        char prefix[32];
        snprintf(prefix, sizeof prefix, "c%d_", (int)k);
        ir_sb_printf(&o, "  subgraph \"cluster_%d\" {\n    label=\"%s (%lld partitions)\";\n", (int)k, c->name,
             (long long)prog->num_partitions);
        dot_computation(&o, h->comp[c->comp], prefix, "    ");
        ir_sb_printf(&o, "  }\n");
    }
    ir_sb_printf(&o, "}\n");
    return ir_sb_take(&o);
}

static char *plan_dot(const Plan *p, const IrModule *src, const IrModule *spmd)
{
    IrStrBuf o = {0};
    ir_sb_printf(&o, "digraph \"%s\" {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\"];\n",
         p->module);
    const IrComputation *e = ir_entry(src ? src : spmd);
    ir_sb_printf(&o, "  subgraph \"cluster_%s\" {\n    label=\"%s (%lld partitions)\";\n", p->cluster, p->cluster,
         (long long)p->num_partitions);
    for (int32_t i = 0; i < e->ninstr && i < p->ninstrs; i++) {
        const PlanInstr *pi = &p->instrs[i];
        char *sd = ir_sharding_str(pi->sharding);
        char *sh = ir_shape_str(&pi->shape, false);
        ir_sb_printf(&o, "    n%d [label=\"%s\\n%s %s\\n%s\", fillcolor=\"%s\"%s];\n", (int)i, pi->name, pi->opcode,
             sh ? sh : "", sd ? sd : "", colour_for(sd), pi->fallback ? ", color=red, penwidth=3" : "");
        ts_free(sd);
        ts_free(sh);
    }
    for (int32_t i = 0; i < e->ninstr; i++)
        for (int32_t k = 0; k < e->instr[i].nopnd; k++)
            ir_sb_printf(&o, "    n%d -> n%d;\n", (int)e->instr[i].opnd[k], (int)i);
    ir_sb_printf(&o, "  }\n");
    /* Collectives the partitioner inserted, as marked nodes of their own. */
    const IrComputation *pe = ir_entry(spmd);
    for (int32_t i = 0; pe && i < pe->ninstr; i++) {
        const IrInstr *ins = &pe->instr[i];
        if (ir_op_family(ins->op) != FAM_COLLECTIVE)
            continue;
        ir_sb_printf(&o, "  c%d [label=\"%s\\n%s\", shape=octagon, fillcolor=\"#ff6666\"];\n", (int)i, ins->name,
             ir_op_name(ins->op));
    }
    ir_sb_printf(&o, "}\n");
    return ir_sb_take(&o);
}

/* ---- the dumps of a compiled program ---- */

char *compile_plan_text(const CompileResult *r)
{
    return plans_text(r->plans, r->prog.ncluster, r->prog.host ? &r->res : NULL);
}

char *compile_plan_json(const CompileResult *r)
{
    return plans_json(r->plans, r->prog.ncluster, r->prog.host ? &r->res : NULL);
}

char *compile_plan_dot(const CompileResult *r)
{
    if (r->prog.host)
        return program_dot(&r->prog, &r->res);
    const PlanCluster *c = &r->prog.cluster[0];
    return plan_dot(r->plans[0], c->src, c->spmd);
}
