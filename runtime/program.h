/*
 * program.h: runtime/ section for host programs (host_program.c): the host program
 * of a PlanProgram (partition/partition.h) runs in the process, and each
 * of its cluster calls runs that cluster's SPMD program on the devices.
 * Part of the runtime layer's interface; includes runtime.h.
 */
#ifndef TESSEL_PROGRAM_H
#define TESSEL_PROGRAM_H

#include "../cluster/cluster.h"
#include "runtime.h"

/* Run the host program in this process `steps` times (< 2: once); each
 * cluster call runs its cluster on N x R in-process devices (rt_run_local).
 * Between steps the outputs the host module's input_output_alias names
 * become the next step's parameters (rt_check_aliases: a bad alias is an
 * error before anything runs); *out is the last step's result. Without
 * host work (p->host NULL) the steps go to cluster 0 (RtRunOptions.steps).
 * Host custom-calls (tessel_print, tessel_save) run here, at every step.
 * Every while loop (host program and clusters) is bounded by max_trips
 * (0: unbounded; --limit trips): one more trip is IR_ERUNTIME at the loop.
 * args are not changed. */
IrStatus rt_run_program_local(const PlanProgram *p, const RtArgs *args, int64_t steps, int64_t max_trips,
                              const RtStepHook *hook, const CollTuning *tune,
                              DevValue **out, IrDiag *d);
/* Under mpirun: every rank runs the host program (it is deterministic, so
 * every rank computes the same host values and reaches the same cluster
 * calls in the same order: no broadcast is needed); at each cluster call
 * this rank runs its devices [first, first + nlocal) with the transport and
 * the results come to every rank. Only rank 0 prints or saves (host
 * targets). `steps` as rt_run_program_local (every rank feeds the same
 * aliased values). Every rank gets *out. */
IrStatus rt_run_program_mpi(const PlanProgram *p, const RtArgs *args, int64_t steps, int64_t max_trips,
                            const RtStepHook *hook, const CollTuning *tune,
                            CollMpi *t, int64_t first, int64_t nlocal, DevValue **out, IrDiag *d);
/* The host custom-call targets tessel registers: tessel_print prints a
 * summary of its operand to stdout (unless silent) and returns it;
 * tessel_save keeps its operand in `saves` under the name its
 * backend_config gives (rt_save_name_problem) and returns it: the run
 * writes it with its outputs, as NAME.npy inside the output directory. */
typedef struct RtHostCtx {
    bool silent;             /* under MPI: every rank but 0 */
    RtSaves *saves;          /* NULL: saved values are not kept (checked all the same) */
} RtHostCtx;
DevCustomCalls rt_host_calls(RtHostCtx *ctx);
/* Every custom-call of m has a target tessel runs (the executor's
 * markers, dev_builtin_target, or the host targets above); otherwise
 * IR_EUNSUPPORTED at the instruction, before anything runs: a module (or a
 * plan file) cannot reach the executor with a target it does not know.
 * A tessel_save whose name is not a plain file name is IR_EINPUT there. */
IrStatus rt_check_custom_calls(const IrModule *m, IrDiag *d);

#endif /* TESSEL_PROGRAM_H */
