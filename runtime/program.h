/*
 * program.h: runtime/ section for programs with host work (host.c): a
 * host program that calls outlined device clusters, each compiled and
 * partitioned on its own (see cluster/cluster.h). Kept beside runtime.h
 * while runtime.h is being extended by others; it is part of the runtime
 * layer's interface and includes runtime.h.
 */
#ifndef TESSEL_PROGRAM_H
#define TESSEL_PROGRAM_H

#include "../cluster/cluster.h"
#include "runtime.h"

/* A module split into a host program and device clusters. */
typedef struct RtProgram {
    IrModule *host;          /* host program (entry) + cluster computations (owned) */
    CluResult res;           /* clusters, host instructions, cut values */
    int32_t ncluster;
    RtCompiled *cluster;     /* cluster k compiled for N x R devices */
    int64_t num_partitions, num_replicas;
} RtProgram;

/* True when some instruction of m runs on the host (a host custom-call
 * target or _xla_compute_type="host"). */
bool rt_has_host_ops(const IrModule *m);
/* Propagate shardings over the whole module (so values crossing a cut
 * carry one), extract the clusters, and compile each for N x R devices.
 * Takes ownership of src (also on failure). */
IrStatus rt_compile_program(IrModule *src, int64_t num_partitions, int64_t num_replicas, RtProgram *out,
                            IrDiag *d);
void rt_program_free(RtProgram *p);
/* Run the host program in this process; each cluster call runs its
 * cluster on N x R in-process devices (rt_run_local). Host custom-calls
 * (tessel_print, tessel_save) run here. */
IrStatus rt_run_program_local(const RtProgram *p, const RtArgs *args, DevValue **out, IrDiag *d);
/* Under mpirun: every rank runs the host program (it is deterministic, so
 * every rank computes the same host values and reaches the same cluster
 * calls in the same order: no broadcast is needed); at each cluster call
 * this rank runs its devices [first, first + nlocal) with the transport and
 * the results come to every rank. Only rank 0 prints or saves (host
 * targets). Every rank gets *out. */
IrStatus rt_run_program_mpi(const RtProgram *p, const RtArgs *args, RtTransport *t, int64_t first, int64_t nlocal,
                            DevValue **out, IrDiag *d);
/* The host custom-call targets tessel registers: tessel_print prints a
 * summary of its operand to stdout and returns it; tessel_save writes its
 * operand to the .npy file named by its backend_config and returns it. */
const DevCustomCalls *rt_host_targets(void);
/* Every custom-call of m has a target tessel runs (the executor's
 * markers, dev_builtin_target, or the host targets above); otherwise
 * IR_EUNSUPPORTED at the instruction, before anything runs: a module (or a
 * plan file) cannot reach the executor with a target it does not know. */
IrStatus rt_check_custom_calls(const IrModule *m, IrDiag *d);

/* Plan dumps of a program: one entry per cluster (its Plan, plans[k]), and
 * the host instructions and the values cut between host and devices. */
char *rt_plans_text(Plan *const *plans, int32_t nplans, const CluResult *res);
char *rt_plans_json(Plan *const *plans, int32_t nplans, const CluResult *res);
/* The host program and each cluster as a DOT subgraph. */
char *rt_program_dot(const RtProgram *prog);

#endif /* TESSEL_PROGRAM_H */
