/*
 * cluster_internal.h: what the files of cluster/ share and nobody else
 * sees: the state of one extraction (clu_extract) and small containers.
 *
 *   extract.c   the driver (clu_extract), containers, errors, CluResult
 *   form.c      placement per computation, levels, cluster formation,
 *               the host program's order, each cluster's inputs/outputs
 *   outline.c   cluster computations and host computations in the output
 *
 * The passes run in that order: clu_analyze (every host computation,
 * recursively through host control flow), clu_number (clusters numbered
 * as the host program runs them), clu_outline (the output module), then
 * the result.
 */
#ifndef TESSEL_CLUSTER_INTERNAL_H
#define TESSEL_CLUSTER_INTERNAL_H

#include "cluster.h"

/* Host control flow nested deeper than this is refused (the passes
 * recurse once per level of nesting). */
#define CLU_MAX_NESTING 256

/* ---- containers (extract.c) ---- */

/* A set of borrowed strings (open addressing, at most half full). */
typedef struct CluStrSet {
    const char **slot;
    size_t cap, n;
} CluStrSet;
bool clu_strset_has(const CluStrSet *s, const char *k);

/* A growable array of `elem`-byte records (ts_realloc; free v). */
typedef struct CluVec {
    void *v;
    int32_t n;
    int64_t cap;
    size_t elem;
} CluVec;
void *clu_vec_push(CluVec *v);                     /* a zeroed new record, NULL on OOM */

int clu_cmp_i32(const void *a, const void *b);     /* for qsort / bsearch */

/* ---- the state of one extraction ---- */

/* A cluster of one host computation. Instruction indices are the source
 * computation's. */
typedef struct Clu {
    int32_t level;
    int32_t first;           /* topological position of its first instruction */
    int32_t nmem, nin, nout, nconst;
    int32_t *mem;            /* members, topological order */
    int32_t *in;             /* values flowing in, by index */
    int32_t *outv;           /* values flowing out, by index */
    int32_t *consts;         /* small constants cloned into it */
    int32_t number;          /* global number, -1 until numbered */
    int32_t comp;            /* its computation in the output */
    int32_t call;            /* its call in the host computation */
} Clu;

/* The analysis of one host computation. Arrays of n entries are indexed
 * by source instruction index unless said otherwise. */
typedef struct HostComp {
    int32_t src, n;
    CluPlace *place;
    int32_t *order, *pos;    /* topological order and its inverse */
    int32_t *node;           /* graph node of an instruction (CluCycles id) */
    int32_t *uoff, *use;     /* users (data and control) in CSR form */
    uint8_t *uctrl;          /* use[k] is a control successor */
    int32_t *lv;             /* device: level; host: pass */
    int32_t *cl;             /* cluster of a device instruction, else -1 */
    int32_t ncl;
    Clu *cls;
    int32_t nunit;
    int32_t *unit;           /* host program order: >= 0 a host instruction, -(k+1) cluster k */
    bool numbered;
    int32_t outc;            /* its computation in the output, -1 until emitted */
    int32_t *vmap;           /* host instruction -> index in the output computation */
    int32_t *gteof;          /* device value read outside its cluster -> its get-tuple-element */
    int32_t *lmap;           /* scratch of the cluster being outlined */
    uint8_t *cut_host;       /* value already recorded as cut towards the host */
} HostComp;

typedef struct CluRef {
    HostComp *h;
    int32_t k;
} CluRef;

typedef struct HostRec {
    int32_t comp, instr;
    CluPlace place;
} HostRec;

typedef struct CutRec {
    int32_t comp, instr, from, to;
} CutRec;

typedef struct Extract {
    const IrModule *in;
    IrModule *out;
    const char *const *targets;
    int64_t max_const;
    IrDiag *d;
    IrArena *scratch;        /* everything of the analysis, freed at once */
    bool *has_host;          /* per source computation (clu_host_computations) */
    HostComp **hc;           /* per source computation; NULL: not run as host code */
    int32_t *devmap;         /* ir_clone_computation map for device callees */
    CluStrSet srcnames;      /* every name of the source, which new names avoid */
    CluVec all;              /* CluRef in number order */
    CluVec hostrec, cutrec;  /* HostRec, CutRec in host program order */
    IrStatus st;             /* the first error (also when d is NULL) */
} Extract;

/* ---- errors and scratch (extract.c) ---- */

IrStatus clu_nomem(Extract *x);
IrStatus clu_internal(Extract *x, const char *what, const char *comp);
/* The status of the error already recorded by a helper that returned -1. */
IrStatus clu_failed(const Extract *x);
/* n zeroed elements in the scratch arena (at least one), NULL on OOM. */
void *clu_salloc(Extract *x, int32_t n, size_t elem);

static inline const IrComputation *clu_src(const Extract *x, const HostComp *h)
{
    return x->in->comp[h->src];
}

static inline bool clu_is_device(const HostComp *h, int32_t i)
{
    return h->place[i] == CLU_DEVICE;
}

/* Predecessors of an instruction: operands, then control predecessors. */
static inline int32_t clu_npred(const IrInstr *ins)
{
    return ins->nopnd + ins->a.x->control_predecessors.n;
}

static inline int32_t clu_pred_at(const IrInstr *ins, int32_t k)
{
    return k < ins->nopnd ? ins->opnd[k] : (int32_t)ins->a.x->control_predecessors.v[k - ins->nopnd];
}

/* ---- the passes ---- */

/* form.c: analyse host computation `ci` and, recursively, those its host
 * control flow runs (each once: x->hc). */
IrStatus clu_analyze(Extract *x, int32_t ci, int depth);
/* form.c: number the clusters of h (and of what it runs) in run order. */
IrStatus clu_number(Extract *x, HostComp *h);
/* outline.c: build x->out: clusters, other computations, host computations. */
IrStatus clu_outline(Extract *x);

#endif /* TESSEL_CLUSTER_INTERNAL_H */
