/*
 * api_layout.c: the size of every struct of tessel.h and the offset of
 * each of its fields, one "Struct size N" / "Struct.field N" line each,
 * for test_capi_layout.py to compare with python/tessel/_capi.py's ctypes
 * declarations (which must follow the header byte for byte).
 */
#include <stddef.h>
#include <stdio.h>

#include "tessel.h"

#define SIZE(T) printf(#T " size %zu\n", sizeof(T))
#define FIELD(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))

int main(void)
{
    SIZE(TsDiag);
    FIELD(TsDiag, status);
    FIELD(TsDiag, file);
    FIELD(TsDiag, line);
    FIELD(TsDiag, col);
    FIELD(TsDiag, line_text);
    FIELD(TsDiag, msg);
    SIZE(TsLimits);
    FIELD(TsLimits, elements);
    FIELD(TsLimits, rank);
    FIELD(TsLimits, tuple);
    FIELD(TsLimits, depth);
    FIELD(TsLimits, name);
    FIELD(TsLimits, devices);
    FIELD(TsLimits, trips);
    FIELD(TsLimits, memory_bytes);
    FIELD(TsLimits, instructions);
    SIZE(TsCompileOptions);
    FIELD(TsCompileOptions, num_partitions);
    FIELD(TsCompileOptions, num_replicas);
    FIELD(TsCompileOptions, hosts);
    FIELD(TsCompileOptions, local_devices);
    FIELD(TsCompileOptions, limits);
    FIELD(TsCompileOptions, no_verify);
    FIELD(TsCompileOptions, spmd);
    FIELD(TsCompileOptions, dump_dir);
    FIELD(TsCompileOptions, link_gbps);
    FIELD(TsCompileOptions, on_warning);
    FIELD(TsCompileOptions, warning_ctx);
    FIELD(TsCompileOptions, auto_shard);
    FIELD(TsCompileOptions, mesh);
    FIELD(TsCompileOptions, profile);
    FIELD(TsCompileOptions, donate);
    FIELD(TsCompileOptions, sign_key);
    FIELD(TsCompileOptions, sign_key_len);
    FIELD(TsCompileOptions, host_cores);
    SIZE(TsGradOptions);
    FIELD(TsGradOptions, wrt);
    FIELD(TsGradOptions, loss);
    FIELD(TsGradOptions, jvp);
    FIELD(TsGradOptions, sgd);
    FIELD(TsGradOptions, adam);
    FIELD(TsGradOptions, remat);
    SIZE(TsArray);
    FIELD(TsArray, dtype);
    FIELD(TsArray, rank);
    FIELD(TsArray, dims);
    FIELD(TsArray, data);
    FIELD(TsArray, nbytes);
    SIZE(TsArrayInfo);
    FIELD(TsArrayInfo, name);
    FIELD(TsArrayInfo, dtype);
    FIELD(TsArrayInfo, type);
    FIELD(TsArrayInfo, rank);
    FIELD(TsArrayInfo, dims);
    FIELD(TsArrayInfo, nbytes);
    SIZE(TsInput);
    FIELD(TsInput, key);
    FIELD(TsInput, path);
    FIELD(TsInput, array);
    SIZE(TsRunOptions);
    FIELD(TsRunOptions, ninputs);
    FIELD(TsRunOptions, inputs);
    FIELD(TsRunOptions, random);
    FIELD(TsRunOptions, seed);
    FIELD(TsRunOptions, steps);
    FIELD(TsRunOptions, ninfeeds);
    FIELD(TsRunOptions, infeeds);
    FIELD(TsRunOptions, stats);
    FIELD(TsRunOptions, load_seconds);
    FIELD(TsRunOptions, on_error);
    FIELD(TsRunOptions, on_error_ctx);
    FIELD(TsRunOptions, per_device);
    FIELD(TsRunOptions, one_device);
    FIELD(TsRunOptions, output_device);
    FIELD(TsRunOptions, on_step);
    FIELD(TsRunOptions, on_step_ctx);
    FIELD(TsRunOptions, watch);
    SIZE(TsStepInfo);
    FIELD(TsStepInfo, step);
    FIELD(TsStepInfo, steps);
    FIELD(TsStepInfo, seconds);
    FIELD(TsStepInfo, has_watched);
    FIELD(TsStepInfo, watched);
    SIZE(TsDumpOptions);
    FIELD(TsDumpOptions, format);
    FIELD(TsDumpOptions, nexpand);
    FIELD(TsDumpOptions, expand);
    FIELD(TsDumpOptions, graph_svg);
    FIELD(TsRunOptions, limits);
    FIELD(TsRunOptions, heartbeat_seconds);
    FIELD(TsRunOptions, tuning);
    SIZE(TsTuning);
    FIELD(TsTuning, piece_bytes);
    FIELD(TsTuning, chunk_bytes);
    FIELD(TsTuning, pipeline_bytes);
    FIELD(TsTuning, copies_bytes);
    FIELD(TsTuning, stream_bound);
    FIELD(TsTuning, fusion);
    FIELD(TsTuning, fusion_block);
    FIELD(TsTuning, fail_mpi_after);
    FIELD(TsTuning, skip_collective_after);
    FIELD(TsTuning, fail_one_rank);
    FIELD(TsTuning, fail_rank);
    FIELD(TsTuning, openblas_num_threads_unset);
    FIELD(TsTuning, sgemm);
    FIELD(TsRunOptions, process_local);
    FIELD(TsRunOptions, zero_state);
    FIELD(TsRunOptions, nagree);
    FIELD(TsRunOptions, agree);
    FIELD(TsRunOptions, on_agreed);
    FIELD(TsRunOptions, on_agreed_ctx);
    FIELD(TsRunOptions, stats_ops);
    printf("TS_MAX_RANK %d\n", TS_MAX_RANK);
    printf("TS_ERUNTIME %d\n", (int)TS_ERUNTIME);
    return 0;
}
