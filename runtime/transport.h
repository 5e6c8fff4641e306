/*
 * transport.h: how the devices of one host reach the devices of other
 * hosts (runtime-internal). local.c runs a host's devices as threads and
 * calls these from one thread at a time (the host's leader device), so MPI
 * needs only MPI_THREAD_SERIALIZED. mpi.c implements them over MPI.
 */
#ifndef TESSEL_TRANSPORT_H
#define TESSEL_TRANSPORT_H

#include "runtime.h"

/* Every host contributes `bytes` bytes; `recv` receives hosts * bytes, in
 * host order. */
IrStatus rt_transport_allgather(RtTransport *t, const void *send, size_t bytes, void *recv, IrDiag *d);
/* In place: buf[i] = op over hosts of buf[i], count elements of type ty.
 * op is a simple reducer (add, multiply, maximum, minimum, and, or, xor). */
IrStatus rt_transport_allreduce(RtTransport *t, void *buf, int64_t count, IrType ty, IrOpcode op, IrDiag *d);
/* A device of this host failed: end the whole job (never returns when the
 * transport can stop the other hosts). */
void rt_transport_abort(RtTransport *t, const char *msg);

/* local.c: run devices [first, first + nlocal) of a compiled program, on
 * this host, with its shards of the full arguments. results[k] receives
 * device first+k's root value (a new reference each). With t == NULL the
 * devices must be all of them (one process). */
IrStatus rt_run_devices(const RtCompiled *c, const RtArgs *args, int64_t first, int64_t nlocal, RtTransport *t,
                        DevValue **results, IrDiag *d);

#endif /* TESSEL_TRANSPORT_H */
