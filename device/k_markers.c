/*
 * k_markers.c: the registry of custom-call targets the executor runs
 * itself (dev_builtin_target, dev_builtin_kernel), and the kernel of the
 * annotation targets that are identities on one CPU device.
 *
 * An annotation target takes one operand and returns it unchanged, its
 * result of the operand's shape. XLA gives them meaning only for its
 * compiler (where a value lives, where sharding stops propagating, a
 * bound for dynamic-shape inference) and removes them before code is
 * emitted; on one device holding all of a value, the data passes through:
 *
 *   Sharding                  a sharding constraint (the SPMD partitioner
 *   SPMDFullToShardShape      consumes these three; on one device the shard
 *   SPMDShardToFullShape      is the whole array, so the shapes must match)
 *   annotate_device_placement memory_annotations::kDevicePlacement: jax's
 *                             device_put to a memory kind
 *   MoveToHost, MoveToDevice  host offloading (memory_annotations.h)
 *   PinToDevice,              the same for pinning to device memory / SRAM
 *   PinToDeviceSram
 *   Pin, Unpin                array <-> buffer (XLA's buffer shape b(f32[..]),
 *                             which tessel computes as the array it holds)
 *   ShardBarrierFrom,         stop sharding propagation in one direction
 *   ShardBarrierTo            (XLA's ShardBarrierPartitioner removes them)
 *   xla.sdy.FuncResultSharding  Shardy's sharding of a function result
 *   xla.sdy.PropagationBarrier  Shardy's barrier to sharding propagation
 *   SetBound                  an upper bound (its literal=) for XLA's value
 *                             inference of dynamic sizes; the dynamic padder
 *                             replaces it by its operand
 *
 * And CreateBuffer (no operands): a new buffer of its shape (JAX's
 * create_linear), uninitialized in XLA; zeros here.
 *
 * JAX's Python callbacks (ir_python_callback) that give nothing back
 * (jax.debug.print, jax.debug.callback): the empty tuple, nothing run
 * (tessel runs no Python; the compile warns). One with results cannot be
 * computed: refused (runtime/host_program.c refuses it before any run).
 */
#include "device.h"

#include <string.h>

typedef IrStatus (*BuiltinKernel)(const DevKernelArgs *k, DevValue **out);

static IrStatus k_identity(const DevKernelArgs *k, DevValue **out)
{
    const char *t = k->ins->a.x->custom_call_target;
    if (k->nopnd != 1 || !ir_shape_equal(&k->opnd[0]->shape, &k->ins->shape)) {
        /* The SPMD markers may change the shape in a partitioned program
         * (a shard's shape); the other annotations never do. */
        if (strcmp(t, "Sharding") == 0 || strncmp(t, "SPMD", 4) == 0)
            return dev_kernel_error(k, IR_EUNSUPPORTED,
                                    "custom-call %s changes the shape: needs the SPMD partitioner", t);
        return dev_kernel_error(k, IR_EINPUT,
                                "custom-call %s takes one operand and returns it: the result must "
                                "have the operand's shape", t);
    }
    *out = dev_value_ref(k->opnd[0]);
    return IR_OK;
}

static IrStatus k_create_buffer(const DevKernelArgs *k, DevValue **out)
{
    if (k->nopnd != 0 || !ir_shape_is_array(&k->ins->shape))
        return dev_kernel_error(k, IR_EINPUT, "custom-call CreateBuffer takes no operands and gives an array");
    *out = dev_value_new(&k->ins->shape);
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory");
}

static IrStatus k_python_callback(const DevKernelArgs *k, DevValue **out)
{
    if (!ir_resultless_callback(k->ins))
        return dev_kernel_error(k, IR_EUNSUPPORTED,
                                "custom-call %s is a JAX Python callback with results (jax.pure_callback, "
                                "io_callback): tessel runs no Python, so it cannot compute them",
                                k->ins->a.x->custom_call_target);
    *out = dev_value_zeros(&k->ins->shape); /* the empty tuple, or tokens */
    return *out ? IR_OK : dev_kernel_error(k, IR_ENOMEM, "out of memory");
}

static const struct {
    const char *name;
    BuiltinKernel run;
} builtin[] = {
    {"Sharding", k_identity},
    {"SPMDFullToShardShape", k_identity},
    {"SPMDShardToFullShape", k_identity},
    {"annotate_device_placement", k_identity},
    {"MoveToHost", k_identity},
    {"MoveToDevice", k_identity},
    {"PinToDevice", k_identity},
    {"PinToDeviceSram", k_identity},
    {"Pin", k_identity},
    {"Unpin", k_identity},
    {"CreateBuffer", k_create_buffer},
    {"ShardBarrierFrom", k_identity},
    {"ShardBarrierTo", k_identity},
    {"xla.sdy.FuncResultSharding", k_identity},
    {"xla.sdy.PropagationBarrier", k_identity},
    {"SetBound", k_identity},
    {"TopK", dev_k_topk},
    {"Qr", dev_k_qr},
    {"ProductOfElementaryHouseholderReflectors", dev_k_householder_product},
    {"lapack_sgetrf_ffi", dev_k_getrf},
    {"lapack_dgetrf_ffi", dev_k_getrf},
    {"lapack_cgetrf_ffi", dev_k_getrf},
    {"lapack_zgetrf_ffi", dev_k_getrf},
    {"tessel_lu_permutation", dev_k_lu_permutation},
    {"lapack_ssyevd_ffi", dev_k_syevd},
    {"lapack_dsyevd_ffi", dev_k_syevd},
    {"lapack_cheevd_ffi", dev_k_syevd},
    {"lapack_zheevd_ffi", dev_k_syevd},
    {"lapack_sgesdd_ffi", dev_k_gesdd},
    {"lapack_dgesdd_ffi", dev_k_gesdd},
    {"lapack_cgesdd_ffi", dev_k_gesdd},
    {"lapack_zgesdd_ffi", dev_k_gesdd},
    {"lapack_sgesvd_ffi", dev_k_gesdd},
    {"lapack_dgesvd_ffi", dev_k_gesdd},
    {"lapack_cgesvd_ffi", dev_k_gesdd},
    {"lapack_zgesvd_ffi", dev_k_gesdd},
    {"lapack_sgeev_ffi", dev_k_geev},
    {"lapack_dgeev_ffi", dev_k_geev},
    {"lapack_cgeev_ffi", dev_k_geev},
    {"lapack_zgeev_ffi", dev_k_geev},
    {"xla_ffi_python_cpu_callback", k_python_callback},
    {"xla_python_cpu_callback", k_python_callback},
    {"xla_ffi_partitioned_python_cpu_callback", k_python_callback},
};

static BuiltinKernel find(const char *t)
{
    for (size_t i = 0; t && i < sizeof builtin / sizeof builtin[0]; i++)
        if (strcmp(builtin[i].name, t) == 0)
            return builtin[i].run;
    return NULL;
}

bool dev_builtin_target(const char *t)
{
    return find(t) != NULL;
}

static const char *builtin_name(void *ctx, int32_t i)
{
    (void)ctx;
    return builtin[i].name;
}

const char *dev_builtin_target_nearest(const char *t)
{
    return t ? ir_nearest(t, strlen(t), (int32_t)(sizeof builtin / sizeof builtin[0]), builtin_name, NULL) : NULL;
}

IrStatus dev_k_builtin_custom_call(const DevKernelArgs *k, DevValue **out)
{
    BuiltinKernel f = find(k->ins->a.x->custom_call_target);
    if (!f)
        return dev_kernel_error(k, IR_EINTERNAL, "custom-call target %s is not built in",
                                k->ins->a.x->custom_call_target ? k->ins->a.x->custom_call_target : "");
    return f(k, out);
}
