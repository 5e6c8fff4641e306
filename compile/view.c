/*
 * view.c: the plan views (what `tessel plan` prints): the compiled
 * program's device layout for people (text), for programs (JSON, written
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

static int64_t leaf_run(const PlanTree *t, int64_t k);

static json_t *jleaf(const PlanTree *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "leaf", json_true());
    /* every device: "all", not the list (a replicated value of a
     * 65,536-device plan would repeat them all) */
    json_object_set_new(o, "devices", t->ndevices == 0 ? json_string("all") : ji64s(t->ndevices, t->devices));
    json_object_set_new(o, "offset", ji64s(t->rank, t->offset));
    json_object_set_new(o, "shape", ji64s(t->rank, t->extent));
    return o;
}

/* The compact tree of docs/plan.md: leaves as they are, except that a run
 * of three or more sibling leaves stepping evenly (leaf_run: the text
 * dump collapses the same runs) is one {"leaves": n, ...} object, so that
 * a tree of a regular tiling has O(1) entries, not one per tile. */
static json_t *jtree(const PlanTree *t)
{
    if (!t)
        return json_null();
    if (t->leaf)
        return jleaf(t);
    json_t *o = json_object();
    json_object_set_new(o, "dim", json_integer(t->dim));
    json_object_set_new(o, "pieces", json_integer(t->pieces));
    json_t *ch = json_array();
    for (int64_t k = 0; k < t->pieces;) {
        int64_t e = leaf_run(t, k);
        if (e - k < 3) {
            json_array_append_new(ch, jtree(&t->child[k]));
            k++;
            continue;
        }
        const PlanTree *a = &t->child[k], *b = &t->child[k + 1];
        json_t *r = jleaf(a);
        json_object_del(r, "leaf");
        json_object_set_new(r, "leaves", json_integer(e - k));
        json_object_set_new(r, "devices_step", json_integer(a->ndevices ? b->devices[0] - a->devices[0] : 0));
        json_t *step = json_array();
        for (int32_t i = 0; i < a->rank; i++)
            json_array_append_new(step, json_integer(b->offset[i] - a->offset[i]));
        json_object_set_new(r, "offset_step", step);
        json_array_append_new(ch, r);
        k = e;
    }
    json_object_set_new(o, "children", ch);
    return o;
}

static json_t *jvalue(const PlanValue *v, bool input)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(v->index));
    if (input)
        json_object_set_new(o, "name", json_string(v->name ? v->name : ""));
    json_object_set_new(o, "shape", jshape(&v->shape));
    json_object_set_new(o, "sharding", jsharding(v->sharding));
    json_object_set_new(o, "device_shape", jshape(&v->device_shape));
    IrArena *ta = ir_arena_new();
    json_object_set_new(o, input ? "split_tree" : "concat_tree",
                        jtree(ta ? plan_split_tree(ta, &v->shape, v->sharding) : NULL));
    ir_arena_free(ta);
    return o;
}

/* Where a collective or reshard sits: null when unknown (loaded plans). */
static json_t *jsite(const SpmdSite *s)
{
    if (!s->source)
        return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "computation", s->comp ? json_string(s->comp) : json_null());
    json_object_set_new(o, "instruction", json_string(s->source));
    json_object_set_new(o, "operand", s->operand ? json_string(s->operand) : json_null());
    json_object_set_new(o, "output", json_boolean(s->output));
    return o;
}

/* A collective's reason (docs/plan.md): kind, the instruction that asked
 * and its position in the model, the conflict in words, the way out. */
static json_t *jwhy(const SpmdCollective *c, const char *file)
{
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(spmd_why_kind_name(c->why.kind)));
    json_object_set_new(o, "instruction", c->site.source ? json_string(c->site.source) : json_null());
    json_object_set_new(o, "file", file ? json_string(file) : json_null());
    json_object_set_new(o, "line", c->site.pos.line > 0 ? json_integer(c->site.pos.line) : json_null());
    json_object_set_new(o, "column", c->site.pos.line > 0 ? json_integer(c->site.pos.col) : json_null());
    json_object_set_new(o, "text", c->why.text ? json_string(c->why.text) : json_null());
    json_object_set_new(o, "avoid", c->why.avoid ? json_string(c->why.avoid) : json_null());
    return o;
}

/* The memory estimate's breakdown (docs/plan.md "Memory"). */
static json_t *jmemory(const PlanMemory *pm)
{
    json_t *mem = json_object();
    json_object_set_new(mem, "peak_bytes_per_device", json_integer(pm->peak));
    json_object_set_new(mem, "peak_instruction", pm->peak_instr ? json_string(pm->peak_instr) : json_null());
    json_object_set_new(mem, "peak_step", json_integer(pm->peak_step));
    json_t *by = json_object();
    for (int k = 0; k < 4; k++)
        json_object_set_new(by, mem_kind_name((MemKind)k), json_integer(pm->by_kind[k]));
    json_object_set_new(by, "called_computation", json_integer(pm->callee));
    json_object_set_new(mem, "at_peak", by);
    json_t *vs = json_array();
    for (int32_t k = 0; k < pm->nvalues; k++) {
        json_t *v = json_object();
        json_object_set_new(v, "name", json_string(pm->values[k].name));
        json_object_set_new(v, "opcode", json_string(pm->values[k].opcode));
        json_object_set_new(v, "bytes", json_integer(pm->values[k].bytes));
        json_object_set_new(v, "kind", json_string(mem_kind_name(pm->values[k].kind)));
        json_array_append_new(vs, v);
    }
    json_object_set_new(mem, "live_at_peak", vs);
    json_t *steps = json_array();
    for (int32_t k = 0; k < pm->nsteps; k++)
        json_array_append_new(steps, json_integer(pm->live[k]));
    json_object_set_new(mem, "live_bytes_by_step", steps);
    json_t *ds = json_array();
    for (int32_t k = 0; k < pm->ndonations; k++) {
        const PlanDonation *pd = &pm->donations[k];
        json_t *v = json_object();
        json_object_set_new(v, "parameter", json_integer(pd->param));
        json_object_set_new(v, "parameter_name", pd->param_name ? json_string(pd->param_name) : json_null());
        json_object_set_new(v, "parameter_index", pd->leaf ? json_string(pd->leaf) : json_null());
        json_object_set_new(v, "output", json_integer(pd->output));
        json_object_set_new(v, "inferred", json_boolean(pd->inferred));
        json_object_set_new(v, "buffer_donor", json_boolean(pd->from_donor));
        json_object_set_new(v, "last_read", pd->last_read ? json_string(pd->last_read) : json_null());
        json_object_set_new(v, "read_step", json_integer(pd->read_step));
        json_object_set_new(v, "written", pd->written ? json_string(pd->written) : json_null());
        json_object_set_new(v, "write_step", json_integer(pd->write_step));
        json_array_append_new(ds, v);
    }
    json_object_set_new(mem, "donations", ds);
    if (pm->undonated_peak > 0) {
        json_object_set_new(mem, "undonated_peak", json_integer(pm->undonated_peak));
        json_t *b = json_object();
        char why[640];
        plan_donation_why(pm, why, sizeof why);
        json_object_set_new(b, "donated_bytes", json_integer(pm->donated_bytes));
        json_object_set_new(b, "first_read_step", json_integer(pm->first_read_step));
        json_object_set_new(b, "held_before_first_read", json_integer(pm->held_before_first_read));
        json_object_set_new(b, "held_before_step", json_integer(pm->held_before_step));
        json_object_set_new(b, "why", json_string(why));
        json_object_set_new(mem, "donation_bound", b);
    }
    return mem;
}

static json_t *jcluster(const DeviceLayout *p)
{
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(p->cluster));
    json_t *im = json_array(), *xs = json_array(), *ins = json_array(), *outs = json_array();
    for (int32_t k = 0; k < p->ninputs; k++) {
        json_array_append_new(im, json_integer(p->inputs[k].index));
        json_array_append_new(xs, jshape(&p->inputs[k].shape));
        json_array_append_new(ins, jvalue(&p->inputs[k], true));
    }
    IrShape *leaves = ts_calloc((size_t)(p->noutputs > 0 ? p->noutputs : 1), sizeof(IrShape));
    for (int32_t k = 0; k < p->noutputs; k++) {
        json_array_append_new(outs, jvalue(&p->outputs[k], false));
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
        json_object_set_new(o, "site", jsite(&sc->site));
        json_object_set_new(o, "why", jwhy(sc, p->report->file));
        json_array_append_new(cs, o);
    }
    json_object_set_new(c, "collectives", cs);
    json_t *rs = json_array();
    for (int32_t k = 0; p->report && k < p->report->nreshard; k++) {
        const SpmdReshard *r = &p->report->reshard[k];
        json_t *o = json_object();
        json_object_set_new(o, "site", jsite(&r->site));
        json_object_set_new(o, "from", json_string(r->from));
        json_object_set_new(o, "to", json_string(r->to));
        json_array_append_new(rs, o);
    }
    json_object_set_new(c, "reshards", rs);
    json_object_set_new(c, "memory", jmemory(&p->memory));
    return c;
}

/* Cluster k's buffer donors no output took (partition/donate.c), each
 * with its parameter's name and why: memory.unpaired_donors (JSON) or
 * lines of text. */
static const char *donor_name(const PlanCluster *c, const IrDonor *dn)
{
    const IrComputation *e = ir_entry(c->spmd);
    int64_t p = dn->param_number;
    return e && p >= 0 && p < e->nparam && e->param[p] >= 0 ? e->instr[e->param[p]].name : "?";
}

/* The host program's buffer donors no cluster takes (clu_donor_held):
 * JSON host_unpaired_donors, or text lines. */
static json_t *jhost_donors(const IrModule *host)
{
    json_t *ds = json_array();
    const IrComputation *e = ir_entry(host);
    for (int32_t j = 0; e && j < host->ndonor; j++) {
        const IrDonor *dn = &host->donor[j];
        const char *why = clu_donor_held(host, dn);
        if (!why)
            continue;
        json_t *v = json_object();
        json_object_set_new(v, "parameter", json_integer(dn->param_number));
        json_object_set_new(v, "parameter_name", json_string(e->instr[e->param[dn->param_number]].name));
        json_object_set_new(v, "why", json_string(why));
        json_array_append_new(ds, v);
    }
    return ds;
}

static void out_host_donors(IrStrBuf *o, const IrModule *host)
{
    const IrComputation *e = ir_entry(host);
    bool first = true;
    for (int32_t j = 0; e && j < host->ndonor; j++) {
        const char *why = clu_donor_held(host, &host->donor[j]);
        if (!why)
            continue;
        if (first)
            ir_sb_printf(o, "buffer donors the host program keeps (no cluster may write over them):\n");
        first = false;
        ir_sb_printf(o, "  parameter %lld (%s): %s\n", (long long)host->donor[j].param_number,
                     e->instr[e->param[host->donor[j].param_number]].name, why);
    }
}

/* The clusters' pairs (paired donors, --donate auto's) the host program
 * does not carry (clu_host_pair_why: --steps cannot feed them; each call
 * still writes in place): JSON host_uncarried_pairs, or text lines. */
static const char *spmd_param_name(const IrModule *spmd, int64_t p)
{
    const IrComputation *e = ir_entry(spmd);
    return e && p >= 0 && p < e->nparam && e->param[p] >= 0 ? e->instr[e->param[p]].name : "?";
}

/* The next pair the host does not carry after cluster *k's pair *j (start
 * at *k = 0, *j = -1), with why; NULL when there is none left. */
static const IrAlias *next_uncarried(const PlanProgram *prog, int32_t *k, int32_t *j, const char **why)
{
    for (; *k < prog->ncluster; (*k)++, *j = -1) {
        const IrModule *spmd = prog->cluster[*k].spmd;
        while (++*j < spmd->nalias)
            if ((*why = clu_host_pair_why(prog->host, spmd->name, &spmd->alias[*j])))
                return &spmd->alias[*j];
    }
    return NULL;
}

static json_t *jhost_uncarried(const PlanProgram *prog)
{
    json_t *ps = json_array();
    const char *why;
    const IrAlias *al;
    for (int32_t k = 0, j = -1; (al = next_uncarried(prog, &k, &j, &why));) {
        const IrModule *spmd = prog->cluster[k].spmd;
        json_t *v = json_object();
        json_object_set_new(v, "cluster", json_string(spmd->name));
        json_object_set_new(v, "parameter", json_integer(al->param_number));
        json_object_set_new(v, "parameter_name", json_string(spmd_param_name(spmd, al->param_number)));
        json_object_set_new(v, "output", json_integer(al->output_index.n ? al->output_index.v[0] : 0));
        json_object_set_new(v, "why", json_string(why));
        json_array_append_new(ps, v);
    }
    return ps;
}

static void out_host_uncarried(IrStrBuf *o, const PlanProgram *prog)
{
    const char *why;
    const IrAlias *al;
    for (int32_t k = 0, j = -1, n = 0; (al = next_uncarried(prog, &k, &j, &why)); n++) {
        const IrModule *spmd = prog->cluster[k].spmd;
        if (n == 0)
            ir_sb_printf(o, "cluster pairs the host program does not carry (each call writes in place; "
                            "--steps does not feed them back):\n");
        ir_sb_printf(o, "  %s parameter %lld (%s) -> output %lld: %s\n", spmd->name, (long long)al->param_number,
                     spmd_param_name(spmd, al->param_number),
                     (long long)(al->output_index.n ? al->output_index.v[0] : 0), why);
    }
}

static void jcluster_donors(json_t *mem, const CompileResult *r, int32_t k)
{
    const PlanCluster *c = &r->prog.cluster[k];
    json_t *ds = json_array();
    for (int32_t j = 0; mem && j < c->spmd->ndonor; j++) {
        const IrDonor *dn = &c->spmd->donor[j];
        char why[256];
        plan_donor_unpaired(c, dn, why, sizeof why);
        json_t *v = json_object();
        json_object_set_new(v, "parameter", json_integer(dn->param_number));
        json_object_set_new(v, "parameter_name", json_string(donor_name(c, dn)));
        json_object_set_new(v, "why", json_string(why));
        json_array_append_new(ds, v);
    }
    if (mem)
        json_object_set_new(mem, "unpaired_donors", ds);
    else
        json_decref(ds);
}

static void out_donors(IrStrBuf *o, const CompileResult *r, int32_t k)
{
    const PlanCluster *c = &r->prog.cluster[k];
    if (c->spmd->ndonor > 0)
        ir_sb_printf(o, "  buffer donors left unpaired (the caller keeps each to the end):\n");
    for (int32_t j = 0; j < c->spmd->ndonor; j++) {
        char why[256];
        plan_donor_unpaired(c, &c->spmd->donor[j], why, sizeof why);
        ir_sb_printf(o, "    parameter %lld (%s): %s\n", (long long)c->spmd->donor[j].param_number,
                     donor_name(c, &c->spmd->donor[j]), why);
    }
}

/* The memory fit of cluster k (docs/plan.md): memory.fit, when the
 * cluster was fitted to a limit or its order is scheduled. */
static void jcluster_fit(json_t *mem, const CompileResult *r, int32_t k)
{
    const IrModule *spmd = r->prog.cluster[k].spmd;
    const CompileFit *f = r->fit ? &r->fit[k] : NULL;
    int32_t n = compile_remat_list(spmd, NULL, 0);
    if (!mem || (!spmd->is_scheduled && n == 0 && !f))
        return;
    json_t *fit = json_object(), *rs = json_array();
    if (f) {
        json_object_set_new(fit, "limit_bytes", json_integer(f->limit));
        json_object_set_new(fit, "peak_before", json_integer(f->before));
        json_object_set_new(fit, "peak_after", json_integer(f->after));
        if (f->bound > 0) { /* the proof: no order or recomputation goes below it */
            json_t *b = json_object(), *vs = json_array();
            json_object_set_new(b, "bytes", json_integer(f->bound));
            json_object_set_new(b, "at", f->bound_at ? json_string(f->bound_at) : json_null());
            for (int32_t j = 0; j < f->nbound; j++) {
                json_t *e = json_object();
                json_object_set_new(e, "name", json_string(f->bound_v[j].name));
                json_object_set_new(e, "bytes", json_integer(f->bound_v[j].bytes));
                json_object_set_new(e, "why", json_string(f->bound_v[j].why));
                json_array_append_new(vs, e);
            }
            json_object_set_new(b, "values", vs);
            json_object_set_new(fit, "bound", b);
        }
    }
    json_object_set_new(fit, "scheduled", json_boolean(spmd->is_scheduled));
    CompileRemat *v = ts_malloc((size_t)(n ? n : 1) * sizeof *v);
    int64_t flops = 0;
    for (int32_t j = 0; v && j < compile_remat_list(spmd, v, n); j++) {
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(v[j].name));
        json_object_set_new(e, "of", json_string(v[j].of));
        json_object_set_new(e, "bytes", json_integer(v[j].bytes));
        json_object_set_new(e, "flops", json_integer(v[j].flops));
        json_array_append_new(rs, e);
        flops += v[j].flops;
    }
    ts_free(v);
    json_object_set_new(fit, "recomputed", rs);
    json_object_set_new(fit, "extra_flops", json_integer(flops));
    json_object_set_new(mem, "fit", fit);
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

static char *plans_json(DeviceLayout *const *layouts, int32_t nlayouts, const CluResult *res, const CompileResult *cr)
{
    const DeviceLayout *p = layouts[0];
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
    for (int32_t k = 0; k < nlayouts; k++) {
        json_t *c = jcluster(layouts[k]);
        jcluster_fit(json_object_get(c, "memory"), cr, k);
        jcluster_donors(json_object_get(c, "memory"), cr, k);
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
    if (cr && cr->prog.host) {
        /* What the host program holds between its clusters: --limit
         * memory counts it on top of the largest cluster's peak. */
        json_object_set_new(o, "host_peak_bytes", json_integer(plan_peak_bytes(cr->prog.host)));
        json_object_set_new(o, "host_unpaired_donors", jhost_donors(cr->prog.host));
        json_object_set_new(o, "host_uncarried_pairs", jhost_uncarried(&cr->prog));
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


void compile_tree_leaf(IrStrBuf *o, const PlanTree *t)
{
    ir_sb_printf(o, "leaf devices {");
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
    ir_sb_printf(o, "]");
}

/* The end of the run of leaf children from child k on whose devices and
 * offsets step by the same amount from one to the next (all devices by
 * one step, shapes equal); k + 1 when child k is no leaf. */
static int64_t leaf_run(const PlanTree *t, int64_t k)
{
    const PlanTree *a = &t->child[k];
    if (!a->leaf || k + 1 >= t->pieces)
        return k + 1;
    const PlanTree *b = &t->child[k + 1];
    int64_t e = k + 1;
    for (; e < t->pieces; e++) {
        const PlanTree *c = &t->child[e], *p = &t->child[e - 1];
        bool same = c->leaf && c->ndevices == a->ndevices && c->rank == a->rank;
        for (int32_t i = 0; same && i < a->ndevices; i++)
            same = c->devices[i] - p->devices[i] == b->devices[0] - a->devices[0];
        for (int32_t i = 0; same && i < a->rank; i++)
            same = c->extent[i] == a->extent[i] && c->offset[i] - p->offset[i] == b->offset[i] - a->offset[i];
        if (!same)
            break;
    }
    return e;
}

static void out_tree(IrStrBuf *o, const PlanTree *t, int depth)
{
    if (!t)
        return;
    if (t->leaf) {
        ir_sb_printf(o, "%*s", depth * 2, "");
        compile_tree_leaf(o, t);
        ir_sb_printf(o, "\n");
        return;
    }
    ir_sb_printf(o, "%*ssplit dim %d into %lld\n", depth * 2, "", (int)t->dim, (long long)t->pieces);
    for (int64_t k = 0; k < t->pieces;) {
        int64_t e = leaf_run(t, k);
        if (e - k < 3) {
            out_tree(o, &t->child[k], depth + 1);
            k++;
            continue;
        }
        /* A run of leaves that differ by a fixed step: one line, leaf j
         * of the run (j from 0) at the first one's devices and offset
         * plus j steps. */
        const PlanTree *a = &t->child[k], *b = &t->child[k + 1];
        ir_sb_printf(o, "%*s%lld leaves, j = 0..%lld: devices {", (depth + 1) * 2, "", (long long)(e - k),
                     (long long)(e - k - 1));
        for (int32_t i = 0; i < a->ndevices; i++)
            ir_sb_printf(o, i ? ",%lld" : "%lld", (long long)a->devices[i]);
        ir_sb_printf(o, "}+%lld*j offset [", (long long)(a->ndevices ? b->devices[0] - a->devices[0] : 0));
        for (int32_t i = 0; i < a->rank; i++)
            ir_sb_printf(o, i ? ",%lld" : "%lld", (long long)a->offset[i]);
        ir_sb_printf(o, "]+[");
        for (int32_t i = 0; i < a->rank; i++)
            ir_sb_printf(o, i ? ",%lld" : "%lld", (long long)(b->offset[i] - a->offset[i]));
        ir_sb_printf(o, "]*j shape [");
        for (int32_t i = 0; i < a->rank; i++)
            ir_sb_printf(o, i ? ",%lld" : "%lld", (long long)a->extent[i]);
        ir_sb_printf(o, "]\n");
        k = e;
    }
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
    IrArena *ta = ir_arena_new();
    out_tree(o, ta ? plan_split_tree(ta, &v->shape, v->sharding) : NULL, 2);
    ir_arena_free(ta);
}

static void out_header(IrStrBuf *o, const DeviceLayout *p)
{
    ir_sb_printf(o, "module %s: %lld partitions x %lld replicas on %lld hosts x %lld local devices\n", p->module,
         (long long)p->num_partitions, (long long)p->num_replicas, (long long)p->hosts,
         (long long)p->local_devices);
    /* Runs of consecutive partitions on consecutive devices of one host
     * collapse into one line (a 4096-device plan reads in a few lines). */
    ir_sb_printf(o, "device assignment (replica x partition -> device -> host):\n");
    for (int64_t r = 0; r < p->num_replicas; r++)
        for (int64_t q = 0; q < p->num_partitions;) {
            const int64_t *row = &p->device_assignment[r * p->num_partitions];
            int64_t dev = row[q], host = dev / p->local_devices, e = q + 1;
            while (e < p->num_partitions && row[e] == dev + (e - q) && row[e] / p->local_devices == host)
                e++;
            if (e - q == 1)
                ir_sb_printf(o, "  replica %lld partition %lld -> device %lld -> host %lld\n", (long long)r,
                             (long long)q, (long long)dev, (long long)host);
            else
                ir_sb_printf(o, "  replica %lld partitions %lld-%lld -> devices %lld-%lld -> host %lld\n",
                             (long long)r, (long long)q, (long long)(e - 1), (long long)dev,
                             (long long)(dev + e - 1 - q), (long long)host);
            q = e;
        }
    ir_sb_printf(o, "islands:\n");
    for (int32_t k = 0; k < p->nislands; k++) {
        ir_sb_printf(o, "  host %lld replica %lld: devices", (long long)p->islands[k].host,
             (long long)p->islands[k].replica);
        const int64_t *dv = p->islands[k].devices;
        for (int32_t j = 0; j < p->islands[k].ndevices;) {
            int32_t e = j + 1;
            while (e < p->islands[k].ndevices && dv[e] == dv[j] + (e - j))
                e++;
            if (e - j > 2)
                ir_sb_printf(o, " %lld-%lld", (long long)dv[j], (long long)dv[e - 1]);
            else
                for (int32_t i = j; i < e; i++)
                    ir_sb_printf(o, " %lld", (long long)dv[i]);
            j = e;
        }
        ir_sb_printf(o, "\n");
    }
}

/* At most this many values live at the peak are listed in the text. */
#define MEM_LISTED 12

static void out_memory(IrStrBuf *o, const PlanMemory *pm)
{
    ir_sb_printf(o, "  peak memory per device: %lld bytes", (long long)pm->peak);
    if (pm->peak_instr)
        ir_sb_printf(o, ", at step %d of %d (%s)\n", (int)pm->peak_step + 1, (int)pm->nsteps, pm->peak_instr);
    else
        ir_sb_printf(o, ", before the first step (the parameters)\n");
    ir_sb_printf(o, "    at the peak: parameters %lld, outputs %lld, collective buffers %lld, temporaries %lld",
                 (long long)pm->by_kind[MEM_PARAMETER], (long long)pm->by_kind[MEM_OUTPUT],
                 (long long)pm->by_kind[MEM_COLLECTIVE], (long long)pm->by_kind[MEM_TEMPORARY]);
    if (pm->callee)
        ir_sb_printf(o, ", inside the called computation %lld", (long long)pm->callee);
    ir_sb_printf(o, " bytes\n    live at the peak, largest first:\n");
    for (int32_t k = 0; k < pm->nvalues && k < MEM_LISTED; k++)
        ir_sb_printf(o, "      %-24s %-20s %12lld bytes  %s\n", pm->values[k].name, pm->values[k].opcode,
                     (long long)pm->values[k].bytes, mem_kind_name(pm->values[k].kind));
    if (pm->nvalues > MEM_LISTED)
        ir_sb_printf(o, "      ... and %d more (--format json lists all)\n", (int)(pm->nvalues - MEM_LISTED));
    if (pm->ndonations == 0)
        return;
    ir_sb_printf(o, "  donated (input_output_alias; the run frees each parameter at its last read):\n");
    if (pm->undonated_peak > 0) {
        char why[640];
        plan_donation_why(pm, why, sizeof why);
        ir_sb_printf(o, "    the pairs lower the peak by %lld bytes (%lld with nothing donated)%s\n",
                     (long long)(pm->undonated_peak - pm->peak), (long long)pm->undonated_peak, why[0] ? ":" : "");
        if (why[0])
            ir_sb_printf(o, "      %s\n", why);
    }
    for (int32_t k = 0; k < pm->ndonations; k++) {
        const PlanDonation *pd = &pm->donations[k];
        ir_sb_printf(o, "    parameter %lld (%s)%s%s -> output %lld, %s: ", (long long)pd->param,
                     pd->param_name ? pd->param_name : "?", pd->leaf ? " " : "", pd->leaf ? pd->leaf : "",
                     (long long)pd->output, compile_donation_source(pd));
        if (pd->last_read)
            ir_sb_printf(o, "last read at step %d (%s)", (int)pd->read_step + 1, pd->last_read);
        else
            ir_sb_printf(o, "never read");
        if (pd->written)
            ir_sb_printf(o, ", output written at step %d (%s)%s\n", (int)pd->write_step + 1, pd->written,
                         pd->read_step <= pd->write_step ? "" : " (read after: the run keeps a copy)");
        else
            ir_sb_printf(o, "\n");
    }
}

static void out_cluster(IrStrBuf *o, const DeviceLayout *p)
{
    ir_sb_printf(o, "cluster %s:\n", p->cluster);
    char *cr = device_layout_compile_result(p);
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
        ir_sb_printf(o, "    %-24s %-20s groups %s, %lld bytes per device", c->name, ir_op_name(c->op),
             c->replica_groups, (long long)c->bytes_per_device);
        if (c->site.source && c->site.operand)
            ir_sb_printf(o, ", on %s -> %s", c->site.operand, c->site.source);
        else if (c->site.source)
            ir_sb_printf(o, c->site.output ? ", on %s -> result" : ", on %s's value", c->site.source);
        if (c->site.comp && p->cluster && strcmp(c->site.comp, p->cluster) != 0)
            ir_sb_printf(o, " (in %s)", c->site.comp);
        ir_sb_puts(o, "\n");
        compile_why_lines(o, c, p->report->file, "      ");
    }
    if (!p->report || p->report->ncoll == 0)
        ir_sb_printf(o, "    (none)\n");
    out_memory(o, &p->memory);
}

static char *plans_text(DeviceLayout *const *layouts, int32_t nlayouts, const CluResult *res, const CompileResult *cr)
{
    IrStrBuf o = {0};
    out_header(&o, layouts[0]);
    for (int32_t k = 0; k < nlayouts; k++) {
        if (res && k < res->nclusters) {
            const CluCluster *c = &res->clusters[k];
            ir_sb_printf(&o, "cluster %s (called by %s; %d instructions, %d values in, %d out):\n", c->name, c->call,
                 (int)c->ninstrs, (int)c->ninputs, (int)c->noutputs);
            ir_sb_printf(&o, "  source instructions:");
            for (int32_t j = 0; j < c->ninstrs; j++)
                ir_sb_printf(&o, " %s", c->instrs[j]);
            ir_sb_printf(&o, "\n");
        }
        out_cluster(&o, layouts[k]);
        out_donors(&o, cr, k);
        compile_fit_describe(&o, cr, k, "  ");
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
    if (cr && cr->prog.host) {
        out_host_donors(&o, cr->prog.host);
        out_host_uncarried(&o, &cr->prog);
    }
    return ir_sb_take(&o);
}


/* ---- DOT ---- */

/* Text inside a DOT "..." string: quotes and backslashes escaped. */
static void dot_str(IrStrBuf *o, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            ir_sb_putn(o, "\\", 1);
        if (*s == '\n')
            ir_sb_puts(o, "\\n");
        else
            ir_sb_putn(o, s, 1);
    }
}

/* Called computations drawn inside their caller's node unless expanded:
 * control flow, fusions, async wrappers (reducers of a reduce stay
 * part of their op). */
static bool folds(const IrInstr *ins)
{
    IrOpFamily f = ir_op_family(ins->op);
    return ins->ncalled > 0 && (f == FAM_CONTROL || f == FAM_FUSION || f == FAM_ASYNC);
}

static bool expanded(const PlanView *v, const char *name)
{
    for (int32_t k = 0; v && k < v->nexpand; k++)
        if (strcmp(v->expand[k], name) == 0)
            return true;
    return false;
}

/* Is computation `c` called, directly or further down, by instruction ins
 * of module m? (depth-bounded: modules are small where it matters). */
static bool calls_comp(const IrModule *m, const IrInstr *ins, int32_t c, int depth)
{
    for (int32_t k = 0; k < ins->ncalled; k++) {
        int32_t cc = ins->called[k];
        if (cc == c)
            return true;
        if (depth < 8 && cc >= 0 && cc < m->ncomp)
            for (int32_t i = 0; i < m->comp[cc]->ninstr; i++)
                if (calls_comp(m, &m->comp[cc]->instr[i], c, depth + 1))
                    return true;
    }
    return false;
}

/* What the graph of one cluster's plan needs. */
typedef struct DotCtx {
    IrStrBuf *o;
    const DeviceLayout *p;
    const IrModule *src;     /* the logical cluster (compiled plans) */
    const SpmdReport *rep;
    const PlanView *v;
    const PlanColours *colours;
    int32_t k;               /* cluster number: node ids n-K-..., c-K-... */
} DotCtx;

static void dot_collective_node(DotCtx *x, int32_t j, const char *indent)
{
    const SpmdCollective *c = &x->rep->coll[j];
    ir_sb_printf(x->o, "%sc_%d_%d [id=\"c-%d-%d\", label=\"", indent, (int)x->k, (int)j, (int)x->k, (int)j);
    dot_str(x->o, ir_op_name(c->op));
    ir_sb_puts(x->o, "\\ngroups ");
    dot_str(x->o, c->replica_groups);
    ir_sb_printf(x->o, "\\n%lld bytes per device\", shape=octagon, fillcolor=\"#ff6666\"",
                 (long long)c->bytes_per_device);
    if (c->why.text) {
        /* the reason, shown on hover in Graphviz's SVG */
        IrStrBuf w = {0};
        compile_why_lines(&w, c, x->rep->file, "");
        char *t = ir_sb_take(&w);
        ir_sb_puts(x->o, ", tooltip=\"");
        dot_str(x->o, t);
        ir_sb_puts(x->o, "\"");
        ts_free(t);
    }
    ir_sb_puts(x->o, "];\n");
}

/* The collectives of computation `comp` sited on (source, operand): an
 * operand's edge, or (operand NULL) source's own value, in emission
 * order, as a chain "-> c_K_a -> c_K_b". */
static bool site_is(const SpmdSite *s, const char *comp, const char *source, const char *operand, bool output)
{
    if (!s->comp || !s->source || strcmp(s->comp, comp) || strcmp(s->source, source) || s->output != output)
        return false;
    return operand ? s->operand && strcmp(s->operand, operand) == 0 : !s->operand;
}

static bool dot_chain(DotCtx *x, const char *comp, const char *source, const char *operand, bool output,
                      char *tail, size_t ntail, const char *indent, const char *style)
{
    bool any = false;
    for (int32_t j = 0; x->rep && j < x->rep->ncoll; j++) {
        if (!site_is(&x->rep->coll[j].site, comp, source, operand, output))
            continue;
        ir_sb_printf(x->o, "%s%s -> c_%d_%d%s;\n", indent, tail, (int)x->k, (int)j, any ? "" : style);
        snprintf(tail, ntail, "c_%d_%d", (int)x->k, (int)j);
        any = true;
    }
    return any;
}

/* The last collective on source's own value (its users read that one),
 * else source's node: into tail. */
static void value_tail(DotCtx *x, const char *comp, int32_t ci, int32_t i, const char *source, char *tail,
                       size_t n)
{
    snprintf(tail, n, "n_%d_%d_%d", (int)x->k, (int)ci, (int)i);
    for (int32_t j = 0; x->rep && j < x->rep->ncoll; j++)
        if (site_is(&x->rep->coll[j].site, comp, source, NULL, false))
            snprintf(tail, n, "c_%d_%d", (int)x->k, (int)j);
}

/* The reshard of edge operand -> source in comp, as an edge style. */
static void reshard_style(DotCtx *x, const char *comp, const char *source, const char *operand, char *buf,
                          size_t n)
{
    buf[0] = 0;
    for (int32_t j = 0; x->rep && j < x->rep->nreshard; j++) {
        const SpmdReshard *r = &x->rep->reshard[j];
        if (!site_is(&r->site, comp, source, operand, false))
            continue;
        IrStrBuf l = {0};
        dot_str(&l, r->from);
        ir_sb_puts(&l, " -> ");
        dot_str(&l, r->to);
        char *t = ir_sb_take(&l);
        snprintf(buf, n, " [color=\"#e6550d\", penwidth=2, style=dashed, label=\"reshard %s\", fontcolor=\"#e6550d\"]",
                 t ? t : "");
        ts_free(t);
        return;
    }
}

/* One node per instruction of computation ci of x->src (the entry: with
 * the plan's per-device shapes), collectives on their edges; expanded
 * callees drawn as boxes of their own. */
static void dot_src_computation(DotCtx *x, int32_t ci, const char *indent, int depth)
{
    const IrModule *m = x->src;
    const IrComputation *c = m->comp[ci];
    bool entry = ci == m->entry;
    char id[64];
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        const PlanInstr *pi = entry && i < x->p->ninstrs ? &x->p->instrs[i] : NULL;
        char *sd = ins->sharding ? ir_sharding_str(ins->sharding) : NULL;
        char *sh = ir_shape_str(&ins->shape, false);
        char *ds = pi ? ir_shape_str(&pi->device_shape, false) : NULL;
        if (entry)
            snprintf(id, sizeof id, "n-%d-%d", (int)x->k, (int)i);
        else
            snprintf(id, sizeof id, "n-%d-%d-%d", (int)x->k, (int)ci, (int)i);
        ir_sb_printf(x->o, "%sn_%d_%d_%d [id=\"%s\", label=\"", indent, (int)x->k, (int)ci, (int)i, id);
        dot_str(x->o, ins->name);
        ir_sb_puts(x->o, "\\n");
        dot_str(x->o, ir_op_name(ins->op));
        ir_sb_puts(x->o, " ");
        dot_str(x->o, sh);
        if (ds) {
            ir_sb_puts(x->o, "\\nper device ");
            dot_str(x->o, ds);
        }
        ir_sb_puts(x->o, "\\n");
        dot_str(x->o, sd ? sd : "");
        bool fb = pi && pi->fallback;
        if (fb)
            ir_sb_puts(x->o, "\\n[fallback: replicated]");
        if (folds(ins)) {
            /* What the folded node holds: its computations and the
             * collectives partitioning put inside them. */
            int32_t ncoll = 0, ninstr = 0;
            for (int32_t k = 0; k < ins->ncalled; k++)
                ninstr += m->comp[ins->called[k]]->ninstr;
            for (int32_t j = 0; x->rep && j < x->rep->ncoll; j++) {
                int32_t sc = x->rep->coll[j].site.comp ? ir_find_computation(m, x->rep->coll[j].site.comp) : -1;
                ncoll += sc >= 0 && sc != ci && calls_comp(m, ins, sc, 0);
            }
            ir_sb_printf(x->o, "\\ncalls");
            for (int32_t k = 0; k < ins->ncalled; k++) {
                ir_sb_puts(x->o, k ? ", " : " ");
                dot_str(x->o, m->comp[ins->called[k]]->name);
            }
            ir_sb_printf(x->o, " (%d instructions", (int)ninstr);
            if (ncoll)
                ir_sb_printf(x->o, ", %d collectives", (int)ncoll);
            ir_sb_puts(x->o, ")");
        }
        ir_sb_printf(x->o, "\", fillcolor=\"%s\"%s%s];\n", plan_colour(x->colours, ins->sharding), fb ? ", color=red, penwidth=3" : "",
                     folds(ins) ? ", shape=box3d" : "");
        ts_free(sd);
        ts_free(sh);
        ts_free(ds);
    }
    /* Collectives of this computation, as nodes. */
    for (int32_t j = 0; x->rep && j < x->rep->ncoll; j++)
        if (x->rep->coll[j].site.comp && strcmp(x->rep->coll[j].site.comp, c->name) == 0)
            dot_collective_node(x, j, indent);
    /* Edges: operand (and the collectives on its own value) -> the
     * collectives on the edge -> user. */
    char tail[64], style[512];
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        /* the value's own collectives hang off its node, once */
        snprintf(tail, sizeof tail, "n_%d_%d_%d", (int)x->k, (int)ci, (int)i);
        dot_chain(x, c->name, ins->name, NULL, false, tail, sizeof tail, indent, "");
        for (int32_t k = 0; k < ins->nopnd; k++) {
            const IrInstr *op = &c->instr[ins->opnd[k]];
            bool again = false;
            for (int32_t q = 0; q < k; q++)
                again = again || ins->opnd[q] == ins->opnd[k];
            value_tail(x, c->name, ci, ins->opnd[k], op->name, tail, sizeof tail);
            reshard_style(x, c->name, ins->name, op->name, style, sizeof style);
            bool chained = !again && dot_chain(x, c->name, ins->name, op->name, false, tail, sizeof tail, indent, style);
            ir_sb_printf(x->o, "%s%s -> n_%d_%d_%d%s;\n", indent, tail, (int)x->k, (int)ci, (int)i,
                         chained || again ? "" : style);
        }
    }
    /* The computation's result leaves through its root (and the reshard
     * to the result sharding). */
    value_tail(x, c->name, ci, c->root, c->instr[c->root].name, tail, sizeof tail);
    dot_chain(x, c->name, c->instr[c->root].name, NULL, true, tail, sizeof tail, indent, "");
    if (entry) {
        char *rs = x->p->noutputs ? ir_sharding_str(x->p->outputs[0].sharding) : NULL;
        ir_sb_printf(x->o, "%sout_%d [id=\"out-%d\", label=\"result", indent, (int)x->k, (int)x->k);
        if (x->p->noutputs == 1 && rs) {
            ir_sb_puts(x->o, "\\n");
            dot_str(x->o, rs);
        }
        ir_sb_puts(x->o, "\", shape=plaintext, style=\"\"];\n");
        ir_sb_printf(x->o, "%s%s -> out_%d;\n", indent, tail, (int)x->k);
        ts_free(rs);
    }
    /* Expanded callees: a box each, reached by a dashed edge. */
    for (int32_t i = 0; depth < 8 && i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        if (!folds(ins))
            continue;
        for (int32_t k = 0; k < ins->ncalled; k++) {
            const IrComputation *cc = m->comp[ins->called[k]];
            if (!expanded(x->v, ins->name) && !expanded(x->v, cc->name))
                continue;
            ir_sb_printf(x->o, "%ssubgraph \"cluster_%d_%d_%d\" {\n%s  label=\"", indent, (int)x->k, (int)ci, (int)k,
                         indent);
            dot_str(x->o, cc->name);
            ir_sb_puts(x->o, " (called by ");
            dot_str(x->o, ins->name);
            ir_sb_printf(x->o, ")\";\n%s  style=dashed;\n", indent);
            /* indents stay short: depth is bounded by 8 */
            char in2[64];
            size_t ni = strlen(indent) < sizeof in2 - 3 ? strlen(indent) : sizeof in2 - 3;
            memcpy(in2, indent, ni);
            memcpy(in2 + ni, "  ", 3);
            dot_src_computation(x, ins->called[k], in2, depth + 1);
            ir_sb_printf(x->o, "%s}\n", indent);
            ir_sb_printf(x->o, "%sn_%d_%d_%d -> n_%d_%d_%d [style=dashed, arrowhead=none, label=\"calls\"];\n", indent,
                         (int)x->k, (int)ci, (int)i, (int)x->k, (int)ins->called[k], (int)cc->root);
        }
    }
}

/* A loaded plan keeps no logical graph: its SPMD program is drawn, where
 * the collectives are instructions on their edges already. */
static void dot_spmd_computation(DotCtx *x, const IrModule *spmd, const char *indent)
{
    const IrComputation *c = ir_entry(spmd);
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        char *sh = ir_shape_str(&ins->shape, false);
        bool coll = ir_op_family(ins->op) == FAM_COLLECTIVE;
        ir_sb_printf(x->o, "%sn_%d_%d_%d [id=\"n-%d-%d\", label=\"", indent, (int)x->k, (int)spmd->entry, (int)i,
                     (int)x->k, (int)i);
        dot_str(x->o, ins->name);
        ir_sb_puts(x->o, "\\n");
        dot_str(x->o, ir_op_name(ins->op));
        ir_sb_puts(x->o, "\\nper device ");
        dot_str(x->o, sh);
        for (int32_t j = 0; coll && x->rep && j < x->rep->ncoll; j++)
            if (strcmp(x->rep->coll[j].name, ins->name) == 0) {
                ir_sb_puts(x->o, "\\ngroups ");
                dot_str(x->o, x->rep->coll[j].replica_groups);
                ir_sb_printf(x->o, "\\n%lld bytes per device", (long long)x->rep->coll[j].bytes_per_device);
            }
        ir_sb_printf(x->o, "\"%s];\n", coll ? ", shape=octagon, fillcolor=\"#ff6666\"" : ", fillcolor=\"#eeeeee\"");
        ts_free(sh);
    }
    for (int32_t i = 0; i < c->ninstr; i++)
        for (int32_t k = 0; k < c->instr[i].nopnd; k++)
            ir_sb_printf(x->o, "%sn_%d_%d_%d -> n_%d_%d_%d;\n", indent, (int)x->k, (int)spmd->entry,
                         (int)c->instr[i].opnd[k], (int)x->k, (int)spmd->entry, (int)i);
}

static void dot_cluster(IrStrBuf *o, const CompileResult *r, int32_t k, const PlanView *v, const PlanColours *pc)
{
    const PlanCluster *c = &r->prog.cluster[k];
    const DeviceLayout *p = r->layouts[k];
    DotCtx x = {.o = o, .p = p, .src = c->src, .rep = &c->report, .v = v, .colours = pc, .k = k};
    ir_sb_printf(o, "  subgraph \"cluster_%d\" {\n    label=\"", (int)k);
    dot_str(o, p->cluster);
    ir_sb_printf(o, " (%lld partitions x %lld replicas, peak %lld bytes per device)\";\n",
                 (long long)p->num_partitions, (long long)p->num_replicas, (long long)p->peak_bytes_per_device);
    if (c->src)
        dot_src_computation(&x, c->src->entry, "    ", 0);
    else
        dot_spmd_computation(&x, c->spmd, "    ");
    ir_sb_printf(o, "  }\n");
}

/* The host program's entry, boxed; each call of a cluster points at the
 * box of that cluster. */
static void dot_host(IrStrBuf *o, const CompileResult *r)
{
    const IrModule *h = r->prog.host;
    const IrComputation *e = ir_entry(h);
    ir_sb_printf(o, "  subgraph \"cluster_host\" {\n    label=\"host program\";\n    style=rounded;\n");
    for (int32_t i = 0; i < e->ninstr; i++) {
        const IrInstr *ins = &e->instr[i];
        char *sh = ir_shape_str(&ins->shape, false);
        ir_sb_printf(o, "    h_%d [id=\"h-%d\", label=\"", (int)i, (int)i);
        dot_str(o, ins->name);
        ir_sb_puts(o, "\\n");
        dot_str(o, ir_op_name(ins->op));
        ir_sb_puts(o, " ");
        dot_str(o, sh);
        ir_sb_puts(o, "\", fillcolor=\"#ffffff\", shape=ellipse];\n");
        ts_free(sh);
    }
    for (int32_t i = 0; i < e->ninstr; i++)
        for (int32_t k = 0; k < e->instr[i].nopnd; k++)
            ir_sb_printf(o, "    h_%d -> h_%d;\n", (int)e->instr[i].opnd[k], (int)i);
    ir_sb_printf(o, "  }\n");
    for (int32_t i = 0; i < e->ninstr; i++)
        for (int32_t k = 0; k < r->res.nclusters && k < r->prog.ncluster; k++) {
            const CluCluster *cc = &r->res.clusters[k];
            const PlanCluster *pc = &r->prog.cluster[k];
            if (!cc->call || strcmp(cc->call, e->instr[i].name) != 0 || !pc->src)
                continue;
            ir_sb_printf(o, "  h_%d -> n_%d_%d_%d [style=dashed, label=\"runs cluster %d\"];\n", (int)i, (int)k,
                         (int)pc->src->entry, (int)ir_entry(pc->src)->root, (int)k);
        }
}

/* What each colour means: one box per distinct sharding, in words and
 * in its canonical text. */
static void dot_legend(IrStrBuf *o, const PlanColours *pc)
{
    if (pc->n == 0)
        return;
    ir_sb_puts(o, "  subgraph \"cluster_legend\" {\n    label=\"colours: shardings by meaning\";\n    style=dashed;\n");
    for (int32_t j = 0; j < pc->n; j++) {
        ir_sb_printf(o, "    legend_%d [id=\"legend-%d\", label=\"", (int)j, (int)j);
        dot_str(o, pc->e[j].words);
        ir_sb_puts(o, "\\n");
        dot_str(o, pc->e[j].key);
        ir_sb_printf(o, "\", fillcolor=\"%s\"];\n", pc->e[j].colour);
    }
    ir_sb_puts(o, "  }\n");
}

/* ---- the dumps of a compiled program ---- */

char *compile_plan_text(const CompileResult *r)
{
    return plans_text(r->layouts, r->prog.ncluster, r->prog.host ? &r->res : NULL, r);
}

char *compile_plan_json(const CompileResult *r)
{
    return plans_json(r->layouts, r->prog.ncluster, r->prog.host ? &r->res : NULL, r);
}

char *compile_plan_dot(const CompileResult *r, const PlanView *v)
{
    IrStrBuf o = {0};
    const char *name = r->prog.ncluster ? r->layouts[0]->module : "plan";
    ir_sb_puts(&o, "digraph \"");
    dot_str(&o, name);
    ir_sb_puts(&o, "\" {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"monospace\", fontsize=10];\n"
                   "  edge [fontname=\"monospace\", fontsize=9];\n");
    if (r->prog.host)
        dot_host(&o, r);
    PlanColours pc;
    if (!plan_colours_build(r, &pc)) {
        ir_sb_free(&o);
        return NULL;
    }
    for (int32_t k = 0; k < r->prog.ncluster; k++)
        dot_cluster(&o, r, k, v, &pc);
    dot_legend(&o, &pc);
    plan_colours_free(&pc);
    ir_sb_puts(&o, "}\n");
    return ir_sb_take(&o);
}
