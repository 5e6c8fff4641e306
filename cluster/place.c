/*
 * place.c: which instructions run on the host and which on the devices.
 *
 * A host op is what the user or the runtime says must run on the host: an
 * instruction with frontend_attributes={_xla_compute_type="host"}, or a
 * custom-call to a target the runtime runs on the host (tessel_print,
 * tessel_save, or the list the caller gives). Everything else is device
 * work, except:
 *
 *   - host control flow: a call, while or conditional whose callees contain
 *     host ops (directly or further down) runs on the host; its callees are
 *     then clustered in turn. One without host ops inside is ordinary
 *     device work and stays whole inside a cluster;
 *   - glue: parameters belong to the host program; a get-tuple-element of a
 *     host value, a tuple of host values, the root tuple, and a tuple only
 *     host ops or host control flow read are host glue (taking a tuple
 *     apart or building one costs nothing on the host, and sending it to a
 *     device and back would);
 *   - small constants are placed nowhere: the outliner clones them into
 *     every cluster (and the host program) that reads them, so they never
 *     travel. A constant with control edges is ordinary device work.
 *
 *   Example: p = parameter(0); a = add(p, p); q = custom-call(a),
 *   custom_call_target="tessel_print"; ROOT t = tuple(a, q)
 *   places p: glue, a: device, q: host op, t: glue (the root tuple).
 */
#include "cluster.h"

#include <string.h>

const char *const clu_default_host_targets[] = {"tessel_print", "tessel_save", NULL};

bool clu_is_host_instr(const IrInstr *ins, const char *const *host_targets)
{
    const char *ct = ir_frontend_attr(ins, "_xla_compute_type");
    if (ct && strcmp(ct, "host") == 0)
        return true;
    if (ins->op != OP_CUSTOM_CALL || !ins->a.x->custom_call_target)
        return false;
    return ir_str_index(ins->a.x->custom_call_target, host_targets ? host_targets : clu_default_host_targets) >= 0;
}

/* One iterative depth-first walk of the call graph: a computation is done
 * (colour 2) after every computation it calls, and has host work when one
 * of its instructions is a host op or calls a computation that has. A
 * computation met again while on the walk (recursion, which the verifier
 * rejects) is skipped rather than looped on. */
IrStatus clu_host_computations(const IrModule *m, const char *const *host_targets,
                               bool *has_host, IrDiag *d)
{
    int32_t n = m->ncomp;
    size_t k = n > 0 ? (size_t)n : 1;
    uint8_t *colour = ts_calloc(k, 1);
    int32_t *fc = ts_malloc(k * sizeof *fc), *fi = ts_malloc(k * sizeof *fi);
    int32_t *fk = ts_malloc(k * sizeof *fk);
    IrStatus st = IR_OK;
    if (!colour || !fc || !fi || !fk) {
        st = ir_oom(d, NULL);
        goto done;
    }
    for (int32_t c = 0; c < n; c++)
        has_host[c] = false;
    for (int32_t s = 0; s < n; s++) {
        if (colour[s])
            continue;
        int32_t top = 0;
        fc[0] = s;
        fi[0] = fk[0] = 0;
        colour[s] = 1;
        while (top >= 0) {
            const IrComputation *c = m->comp[fc[top]];
            if (fi[top] >= c->ninstr) {
                colour[fc[top]] = 2;
                bool h = has_host[fc[top--]];
                if (top >= 0 && h)
                    has_host[fc[top]] = true;
                continue;
            }
            const IrInstr *ins = &c->instr[fi[top]];
            if (fk[top] == 0 && clu_is_host_instr(ins, host_targets))
                has_host[fc[top]] = true;
            if (fk[top] >= ins->ncalled) {
                fi[top]++;
                fk[top] = 0;
                continue;
            }
            int32_t t = ins->called[fk[top]++];
            if (t < 0 || t >= n || colour[t] == 1)
                continue;
            if (colour[t] == 2) {
                if (has_host[t])
                    has_host[fc[top]] = true;
                continue;
            }
            colour[t] = 1;
            top++;
            fc[top] = t;
            fi[top] = fk[top] = 0;
        }
    }
done:
    ts_free(colour);
    ts_free(fc);
    ts_free(fi);
    ts_free(fk);
    return st;
}

static bool calls_host(const IrInstr *ins, const bool *has_host, int32_t ncomp, int32_t *which)
{
    for (int32_t k = 0; k < ins->ncalled; k++) {
        int32_t t = ins->called[k];
        if (t >= 0 && t < ncomp && has_host[t]) {
            *which = t;
            return true;
        }
    }
    return false;
}

static bool is_host(CluPlace p)
{
    return p == CLU_HOST_OP || p == CLU_HOST_FLOW || p == CLU_HOST_GLUE;
}

static int64_t const_elements(const IrShape *s)
{
    int64_t total = 0;
    int32_t leaves = ir_shape_leaf_count(s);
    for (int32_t i = 0; i < leaves; i++) {
        int64_t e = ir_shape_elements(ir_shape_leaf(s, i));
        if (e < 0 || total > INT64_MAX - e)
            return -1;
        total += e;
    }
    return total;
}

/* Per-instruction facts the rules need before the walk: intrinsic host
 * placement (host ops and host control flow), how many users each value
 * has and how many of them are intrinsically host, and whether it has
 * control edges. */
typedef struct Facts {
    CluPlace *intrinsic;     /* CLU_HOST_OP / CLU_HOST_FLOW, else CLU_DEVICE */
    int32_t *nuse, *nhostuse;
    uint8_t *ctrl;
} Facts;

static IrStatus gather_facts(const IrModule *m, const IrComputation *c, const bool *has_host,
                             const char *const *targets, Facts *f, IrDiag *d)
{
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        int32_t callee;
        if (clu_is_host_instr(ins, targets))
            f->intrinsic[i] = CLU_HOST_OP;
        else if (calls_host(ins, has_host, m->ncomp, &callee)) {
            if (ins->op != OP_CALL && ins->op != OP_WHILE && ins->op != OP_CONDITIONAL)
                return ir_error(d, IR_EUNSUPPORTED, m->file, m->src, ins->pos,
                                "%s: %s calls computation %s, which contains host ops; only "
                                "call, while and conditional may run host work inside",
                                ins->name, ir_op_name(ins->op), m->comp[callee]->name);
            f->intrinsic[i] = CLU_HOST_FLOW;
        } else
            f->intrinsic[i] = CLU_DEVICE;
    }
    for (int32_t i = 0; i < c->ninstr; i++) {
        const IrInstr *ins = &c->instr[i];
        for (int32_t k = 0; k < ins->nopnd; k++) {
            int32_t u = ins->opnd[k];
            if (u < 0 || u >= c->ninstr)
                continue;
            f->nuse[u]++;
            f->nhostuse[u] += f->intrinsic[i] != CLU_DEVICE;
        }
        const IrI64List *cp = &ins->a.x->control_predecessors;
        if (cp->n > 0)
            f->ctrl[i] = 1;
        for (int32_t k = 0; k < cp->n; k++)
            if (cp->v[k] >= 0 && cp->v[k] < c->ninstr)
                f->ctrl[cp->v[k]] = 1;
    }
    return IR_OK;
}

static CluPlace place_one(const IrComputation *c, int32_t i, const Facts *f, const CluPlace *place,
                          int64_t max_const)
{
    const IrInstr *ins = &c->instr[i];
    if (f->intrinsic[i] != CLU_DEVICE)
        return f->intrinsic[i];
    switch (ins->op) {
    case OP_PARAMETER:
        return CLU_HOST_GLUE;
    case OP_CONSTANT: {
        int64_t e = const_elements(&ins->shape);
        return max_const >= 0 && e >= 0 && e <= max_const && !f->ctrl[i] ? CLU_CONST : CLU_DEVICE;
    }
    case OP_GET_TUPLE_ELEMENT:
        return ins->nopnd == 1 && is_host(place[ins->opnd[0]]) ? CLU_HOST_GLUE : CLU_DEVICE;
    case OP_TUPLE: {
        if (i == c->root || (f->nuse[i] > 0 && f->nhostuse[i] == f->nuse[i]))
            return CLU_HOST_GLUE;
        for (int32_t k = 0; k < ins->nopnd; k++) {
            CluPlace p = place[ins->opnd[k]];
            if (!is_host(p) && p != CLU_CONST)
                return CLU_DEVICE;
        }
        return CLU_HOST_GLUE;
    }
    default:
        return CLU_DEVICE;
    }
}

IrStatus clu_place(const IrModule *m, int32_t ci, const bool *has_host,
                   const char *const *host_targets, int64_t max_const_elements, CluPlace *place,
                   IrDiag *d)
{
    const IrComputation *c = m->comp[ci];
    size_t n = c->ninstr > 0 ? (size_t)c->ninstr : 1;
    Facts f = {ts_calloc(n, sizeof(CluPlace)), ts_calloc(n, sizeof(int32_t)),
               ts_calloc(n, sizeof(int32_t)), ts_calloc(n, 1)};
    int32_t *order = NULL;
    IrStatus st;
    if (!f.intrinsic || !f.nuse || !f.nhostuse || !f.ctrl) {
        st = ir_oom(d, NULL);
        goto done;
    }
    if ((st = gather_facts(m, c, has_host, host_targets, &f, d)) != IR_OK ||
        (st = ir_topo_order(m, c, &order, d)) != IR_OK)
        goto done;
    for (int32_t p = 0; p < c->ninstr; p++)
        place[order[p]] = place_one(c, order[p], &f, place, max_const_elements);
done:
    ts_free(f.intrinsic);
    ts_free(f.nuse);
    ts_free(f.nhostuse);
    ts_free(f.ctrl);
    ts_free(order);
    return st;
}
