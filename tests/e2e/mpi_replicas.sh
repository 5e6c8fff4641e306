#!/usr/bin/env bash
# mpi_replicas.sh: 2-D meshes with replicas (issue 30). A model on a 2x2
# mesh ({devices=[1,2,2,1]0,1,2,3}: four collective-permutes of halos) and
# one with partially replicated operands, run on 4 partitions x 2 replicas
# in one process, under `mpirun -np 8` (one device a rank, over TCP) and
# `-np 2`, against --reference. On main they stopped with "collective-
# permute: source_target_pairs: id 4 is out of range": the partitioner
# numbered a permute's pairs (and an all-to-all's groups) by global device
# where XLA numbers the partitions within a replica. Every model of
# tests/models also runs on N x 2 replicas in test_oracle (in process).
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self)

# NAME:RANKS: each model in one process and under one mpirun (one launch
# each keeps the test under a minute under ASan).
for run in conv_spatial_2d:8 mesh_partial_replication:2 reshard_alltoall_mesh:8; do
    name=${run%:*} np=${run#*:}
    M="$WORK/$name.hlo"
    sed -e "s/@N/4/g" -e "s/@D/0,1,2,3/g" "$TESSEL_SRC/tests/models/$name.hlo" >"$M"
    expect_status 0 "$TESSEL" run --reference --random-inputs 5 --output-dir "$WORK/$name.ref" "$M"
    expect_status 0 "$TESSEL" run --num-partitions 4 --num-replicas 2 --random-inputs 5 --output-dir "$WORK/$name.one" "$M"
    same_outputs "$WORK/$name.ref" "$WORK/$name.one" "$name 4x2 in one process"
    "${MPIRUN[@]}" -np $np "$TESSEL" run --num-partitions 4 --num-replicas 2 --random-inputs 5 \
        --output-dir "$WORK/$name.$np" "$M" >"$OUT" 2>"$ERR" || fail "$name 4x2 under mpirun -np $np"
    same_outputs "$WORK/$name.ref" "$WORK/$name.$np" "$name 4x2 under mpirun -np $np"
    echo "mpi_replicas: $name on 4 partitions x 2 replicas (one process, mpirun -np $np) equals --reference"
done
