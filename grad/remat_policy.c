/*
 * remat_policy.c: checkpoint policies for reverse mode (`tessel grad
 * --remat POLICY`), as jax.checkpoint's: which forward values the backward
 * pass keeps from the forward pass (saved) and which it computes again
 * (recomputed) from saved values and parameters.
 *
 *   dots        jax.checkpoint_policies.dots_saveable: dot outputs are
 *               saved, everything else recomputed;
 *   nothing     nothing_saveable: only the parameters are kept, the
 *               backward recomputes every forward value it reads;
 *   names=A,B   save_only_these_names: the instructions named A, B are
 *               saved (JAX names them with checkpoint_name; here, HLO
 *               instruction names), the rest recomputed.
 *
 * Always kept whatever the policy: parameters, constants, and what must
 * not or cannot run twice (random draws, collectives, instructions with
 * side effects, control flow, calls, fusions, tuples). The recomputation
 * is written into the module: each forward value the backward reads and
 * the policy does not save gets one copy, NAME.remat (frontend attribute
 * _tessel_remat="NAME", as compile/memfit.c marks its own), built from
 * copies of its unsaved operands in turn, and every backward instruction
 * (not the root, which returns the forward outputs) reads the copies.
 * The executor runs a copy when the backward first needs it (depth first
 * from the root), so a recomputed value's forward original dies after
 * its last forward use. Results are bit for bit those without a policy.
 *
 * Example: h = tanh(dot(x, w)), backward reads h (tanh's derivative):
 * with `dots`, the backward reads h.remat = tanh(d) of the saved d =
 * dot(x, w); with `nothing`, d.remat = dot(x, w) and h.remat = tanh(d.remat).
 */
#include "grad.h"

#include <stdio.h>
#include <string.h>

#define REMAT_ATTR "_tessel_remat"

typedef struct Policy {
    enum { SAVE_DOTS, SAVE_NOTHING, SAVE_NAMES } kind;
    const char *names;   /* "a,b" for SAVE_NAMES */
} Policy;

static const char *policy_word(void *ctx, int32_t i)
{
    (void)ctx;
    static const char *const words[] = {"dots", "nothing"};
    return words[i];
}

/* Parse --remat's text; IR_EINPUT naming what is expected. */
static IrStatus parse_policy(const char *text, Policy *p, IrDiag *d)
{
    if (strcmp(text, "dots") == 0)
        *p = (Policy){SAVE_DOTS, NULL};
    else if (strcmp(text, "nothing") == 0)
        *p = (Policy){SAVE_NOTHING, NULL};
    else if (strncmp(text, "names=", 6) == 0 && text[6] && text[6] != ',')
        *p = (Policy){SAVE_NAMES, text + 6};
    else {
        const char *near = ir_nearest(text, strlen(text), 2, policy_word, NULL);
        return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                        "grad: --remat takes dots, nothing or names=A,B (the values the backward keeps), not '%s'%s%s%s",
                        text, near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    }
    return IR_OK;
}

static bool named(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return true;
        s = e ? e + 1 : s + len;
    }
    return false;
}

/* Is ins kept whatever the policy (it cannot or must not run twice, or
 * costs nothing to keep)? */
static bool always_kept(const IrInstr *ins)
{
    if (ins->shape.type == IR_TUPLE || ins->a.x->control_predecessors.n > 0)
        return true;
    switch (ir_op_family(ins->op)) {
    case FAM_PARAMETER: case FAM_CONSTANT: case FAM_TUPLE: case FAM_CONTROL: case FAM_CUSTOM_CALL:
    case FAM_RNG_BIT_GENERATOR: case FAM_FUSION: case FAM_ASYNC: case FAM_SCAN: case FAM_COLLECTIVE:
        return true;
    case FAM_FALLBACK:
        return ins->op != OP_PARTITION_ID && ins->op != OP_REPLICA_ID;
    default:
        return false;
    }
}

static bool saved(const Policy *p, const IrInstr *ins)
{
    if (always_kept(ins))
        return true;
    switch (p->kind) {
    case SAVE_DOTS: return ins->op == OP_DOT || ins->op == OP_CONVOLUTION; /* JAX's dots_saveable: dot_general and conv_general_dilated */
    case SAVE_NAMES: return named(p->names, ins->name);
    default: return false;
    }
}

typedef struct Ckpt {
    Grad *g;
    IrComputation *e;
    Policy pol;
    int32_t *copy;   /* [n_fwd] the copy of a forward value, -1 none yet */
} Ckpt;

/* The value the backward reads for forward instruction v: v itself when
 * saved, else its copy (made once, operands first); -1 on OOM. */
static int32_t recompute(Ckpt *k, int32_t v)
{
    if (saved(&k->pol, &k->e->instr[v]))
        return v;
    if (k->copy[v] >= 0)
        return k->copy[v];
    IrModule *m = k->g->m;
    int32_t n = k->e->instr[v].nopnd;
    int32_t *opnd = ir_alloc_array(m->arena, (size_t)(n ? n : 1), sizeof *opnd);
    if (!opnd)
        return -1;
    for (int32_t j = 0; j < n; j++)
        if ((opnd[j] = recompute(k, k->e->instr[v].opnd[j])) < 0)
            return -1;
    IrInstr ni = k->e->instr[v]; /* valid until the add below moves the array */
    char base[512];
    snprintf(base, sizeof base, "%s.remat", ni.name);
    const char *of = ni.name;
    ni.opnd = opnd;
    ni.name = ir_unique_name(m, base);
    IrKeyValue *kv = ir_alloc_array(m->arena, (size_t)ni.a.nfrontend + 1, sizeof *kv);
    if (!ni.name || !kv)
        return -1;
    if (ni.a.nfrontend > 0)
        memcpy(kv, ni.a.frontend, (size_t)ni.a.nfrontend * sizeof *kv);
    kv[ni.a.nfrontend] = (IrKeyValue){REMAT_ATTR, of};
    ni.a.frontend = kv;
    ni.a.nfrontend++;
    int32_t c = ir_add_instr(m, k->e, &ni);
    if (c >= 0)
        k->copy[v] = c;
    return c;
}

/* Does every name of a names= policy name a forward instruction of c (the
 * first n_fwd)? A misspelt one would otherwise save nothing, silently. */
static IrStatus names_exist(const Policy *p, const IrComputation *c, int32_t n_fwd, IrDiag *d)
{
    for (const char *s = p->kind == SAVE_NAMES ? p->names : ""; *s;) {
        const char *e = strchr(s, ',');
        int len = (int)(e ? (size_t)(e - s) : strlen(s));
        int32_t i = 0;
        while (i < n_fwd && !(strlen(c->instr[i].name) == (size_t)len && strncmp(c->instr[i].name, s, len) == 0))
            i++;
        if (i == n_fwd)
            return ir_error(d, IR_EINPUT, NULL, NULL, (IrPos){0, 0},
                            "grad: --remat names=%s: '%.*s' is no instruction of computation %s", p->names, len, s,
                            c->name);
        s = e ? e + 1 : s + len;
    }
    return IR_OK;
}

IrStatus grad_checkpoint(Grad *g, int32_t comp, int32_t n_fwd, const char *policy)
{
    Ckpt k = {.g = g, .e = g->m->comp[comp]};
    if (parse_policy(policy, &k.pol, g->d) != IR_OK || names_exist(&k.pol, k.e, n_fwd, g->d) != IR_OK)
        return g->d->status;
    k.copy = ts_malloc((size_t)(n_fwd > 0 ? n_fwd : 1) * sizeof *k.copy);
    if (!k.copy)
        return gb_oom(g);
    for (int32_t i = 0; i < n_fwd; i++)
        k.copy[i] = -1;
    int32_t n_bwd = k.e->ninstr; /* the copies come after: they read forward values only */
    for (int32_t i = n_fwd; i < n_bwd; i++) {
        if (i == k.e->root)
            continue;
        for (int32_t j = 0; j < k.e->instr[i].nopnd; j++) {
            int32_t o = k.e->instr[i].opnd[j];
            if (o < 0 || o >= n_fwd)
                continue;
            int32_t r = recompute(&k, o);
            if (r < 0) {
                ts_free(k.copy);
                return gb_oom(g);
            }
            if (r != o) {
                /* A fresh operand array: builders may share one. */
                IrInstr *ins = &k.e->instr[i];
                int32_t *no = ir_alloc_array(g->m->arena, (size_t)ins->nopnd, sizeof *no);
                if (!no) {
                    ts_free(k.copy);
                    return gb_oom(g);
                }
                memcpy(no, ins->opnd, (size_t)ins->nopnd * sizeof *no);
                no[j] = r;
                ins->opnd = no;
            }
        }
    }
    ts_free(k.copy);
    return IR_OK;
}
