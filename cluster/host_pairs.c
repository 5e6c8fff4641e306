/*
 * host_pairs.c: the pairs a cluster's SPMD program made for itself (a
 * buffer_donor paired, --donate auto's: partition/donate.c) carried up to
 * the host program that calls it, so that `tessel run --steps` feeds the
 * host's output back into the host's parameter as it feeds a declared
 * input_output_alias (runtime/inputs.c rt_feed_aliases): without them a
 * step with host work ran every step on the first step's weights.
 *
 * A cluster pair (parameter j -> output k) is the host's pair (parameter
 * p -> output o) when the cluster's call in the host entry hands it entry
 * parameter p whole as operand j, and the host's result leaf o is
 * get-tuple-element(call), index=k as it came out. Example, a JAX SGD step
 * whose loss is scaled on the host:
 *
 *   cluster_0.call = (...) call(w1.1, x.1, b1.1, ...), to_apply=cluster_0
 *   sub.8 = f32[16,32] get-tuple-element(cluster_0.call), index=0
 *   ROOT tuple.1 = (...) tuple(sub.8, ...)
 *
 * the cluster's pair 0 -> 0 (w1.1 is its parameter 0) is the host's 0 -> 0,
 * and b1.1, the cluster's parameter 2 -> output 1, is the host's 1 -> 1.
 * A host parameter or output a pair already names is left alone; a donor
 * the pair comes from leaves the host's buffer_donor (a parameter is
 * aliased or a donor, not both: ir/parse_header.c). A pair that is not
 * carried (a cluster called inside host control flow, a leaf of a tuple,
 * an operand the host computes, an output the host changes or does not
 * return) stays the cluster's: the call still writes in place, but
 * `--steps` cannot feed it, and the plan says why (clu_host_pair_why).
 */
#include "cluster.h"

#include <string.h>

/* The host entry's output that is cluster output k of call `call`: its
 * root tuple's element (or the root itself) reading it as it came out.
 * -1 when none; *whole: the root itself (an empty output index). */
static int32_t host_output(const IrComputation *e, int32_t call, int64_t k, bool cluster_tuple, bool *whole)
{
    const IrInstr *root = &e->instr[e->root];
    bool tuple = root->op == OP_TUPLE;
    int32_t n = tuple ? root->nopnd : 1;
    for (int32_t o = 0; o < n; o++) {
        int32_t v = tuple ? root->opnd[o] : e->root;
        const IrInstr *x = &e->instr[v];
        bool hit = cluster_tuple ? x->op == OP_GET_TUPLE_ELEMENT && x->nopnd == 1 && x->opnd[0] == call &&
                                       x->a.tuple_index == k
                                 : v == call;
        if (hit) {
            *whole = !tuple;
            return o;
        }
    }
    return -1;
}

/* Is host parameter p or output o (the root itself: whole) paired? */
static bool host_names(const IrModule *h, int64_t p, int32_t o, bool whole)
{
    for (int32_t j = 0; j < h->nalias; j++) {
        const IrShapeIndex *oi = &h->alias[j].output_index;
        if (h->alias[j].param_number == p || (whole ? oi->n == 0 : oi->n >= 1 && oi->v[0] == o))
            return true;
    }
    return false;
}

/* Is p -> o (whole: the root) one of the host's pairs? */
static bool host_has(const IrModule *h, int64_t p, int32_t o, bool whole)
{
    for (int32_t j = 0; j < h->nalias; j++) {
        const IrAlias *al = &h->alias[j];
        if (al->param_number == p && al->param_index.n == 0 &&
            (whole ? al->output_index.n == 0 : al->output_index.n == 1 && al->output_index.v[0] == o))
            return true;
    }
    return false;
}

/* Why cluster pair al, of the cluster called by instruction `call` of
 * host computation `comp`, is not the host's pair, in words; NULL when it
 * is (*p -> *o, *whole: the root), or is already. */
static const char *carry(const IrModule *host, int32_t comp, int32_t call, const IrAlias *al, int64_t *p,
                         int32_t *o, bool *whole)
{
    const IrComputation *e = ir_entry(host);
    if (!e || e->root < 0)
        return "the host program has no entry";
    if (comp != host->entry)
        return "the cluster is called inside host control flow (not by the host program's entry): its outputs are "
               "not the step's";
    const IrInstr *ci = &e->instr[call];
    bool cluster_tuple = ci->shape.type == IR_TUPLE;
    if (al->param_index.n != 0 || al->output_index.n > 1 || (al->output_index.n == 1) != cluster_tuple)
        return "a leaf inside a tuple: --steps feeds whole parameters";
    if (al->param_number < 0 || al->param_number >= ci->nopnd)
        return "no operand of the cluster's call";
    const IrInstr *op = &e->instr[ci->opnd[al->param_number]];
    if (op->op != OP_PARAMETER)
        return op->op == OP_GET_TUPLE_ELEMENT ? "the host program hands the cluster a leaf of a tuple (not a whole "
                                                "entry parameter): --steps feeds whole parameters"
                                              : "the host program computes what it hands the cluster (not an entry "
                                                "parameter): no parameter of the step to feed";
    *p = op->a.parameter_number;
    *o = host_output(e, call, al->output_index.n ? al->output_index.v[0] : 0, cluster_tuple, whole);
    if (*o < 0)
        return "the host program does not return the cluster's output as it came out (host work changes it, or "
               "it is no output of the step)";
    if (host_has(host, *p, *o, *whole))
        return NULL;
    if (host_names(host, *p, *o, *whole))
        return "the host program pairs the parameter or the output otherwise";
    if (!ir_shape_equal(&op->shape, &e->instr[*whole ? e->root : e->instr[e->root].opnd[*o]].shape))
        return "the host's output is not the parameter's shape";
    return NULL;
}

/* The call of cluster computation `name` in host, and the computation
 * holding it (-1: none). */
static int32_t find_call(const IrModule *host, const char *name, int32_t *comp)
{
    for (int32_t c = 0; c < host->ncomp; c++) {
        const IrComputation *hc = host->comp[c];
        for (int32_t i = 0; hc && i < hc->ninstr; i++) {
            const IrInstr *ins = &hc->instr[i];
            if (ins->op == OP_CALL && ins->ncalled == 1 && ir_frontend_attr(ins, "_tessel_cluster") &&
                ins->called[0] >= 0 && ins->called[0] < host->ncomp && strcmp(host->comp[ins->called[0]]->name, name) == 0) {
                *comp = c;
                return i;
            }
        }
    }
    return -1;
}

const char *clu_host_pair_why(const IrModule *host, const char *cluster, const IrAlias *al)
{
    int32_t comp = -1, call = host && cluster ? find_call(host, cluster, &comp) : -1;
    int64_t p = -1;
    int32_t o = -1;
    bool whole = false;
    if (!(al->from_donor || al->inferred))
        return NULL; /* the cluster's own declared pair: not tessel's to carry */
    if (call < 0)
        return "the host program does not call the cluster";
    return carry(host, comp, call, al, &p, &o, &whole);
}

IrStatus clu_host_pairs(IrModule *host, const CluCluster *cl, const IrModule *spmd)
{
    const IrComputation *e = ir_entry(host);
    int32_t call = e && e->root >= 0 && cl->host_comp == host->entry && cl->call ? ir_find_instr(e, cl->call) : -1;
    if (call < 0)
        return IR_OK;
    for (int32_t j = 0; j < spmd->nalias; j++) {
        const IrAlias *al = &spmd->alias[j];
        int64_t p = -1;
        int32_t o = -1;
        bool whole = false;
        if (!(al->from_donor || al->inferred) || carry(host, host->entry, call, al, &p, &o, &whole) ||
            host_has(host, p, o, whole))
            continue;
        if (ir_add_alias(host, p, whole ? -1 : o, al->inferred, al->from_donor) != IR_OK)
            return IR_ENOMEM;
        /* The donor is a pair now: out of the host's buffer_donor. */
        int32_t n = 0;
        for (int32_t k = 0; k < host->ndonor; k++)
            if (host->donor[k].param_number != p || host->donor[k].param_index.n != 0)
                host->donor[n++] = host->donor[k];
        host->ndonor = n;
    }
    return IR_OK;
}
