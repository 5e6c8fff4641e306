#!/usr/bin/env bash
# hostile_values.sh: extreme values that gave wrong answers (issue 30),
# each checked against values worked out by hand, partitioned and through
# the oracle (--reference).
#  1. A gather with u64 indices of 2^63 and above clamps them to the last
#     row, as XLA does; partitioned on 2, 3 and 4 devices they were
#     converted to s64 first (negative: row 0).
#  2. An f16 sum whose per-device partials overflow: partials are carried
#     in f32 (partition/spmd_reduce.c), so the partitioned run gives the
#     reference's 1, not inf + -inf = NaN.
#     The same for a convolution whose input features are sharded (f16 and
#     bf16, partition/spmd_conv.c), on 2, 3 and 4 devices; a reduce-window
#     computes each window on one device (halos), so it needs nothing.
#  3. A slice stride near INT64_MAX takes one element (f32[1,4], as XLA
#     infers); shape inference overflowed (UBSan) and inferred f32[0,4].
set -euo pipefail
source "$(dirname "$0")/lib.bash"

# ---- 1. u64 gather indices past INT64_MAX ----
"$PY" - "$WORK" <<'PY'
import struct, sys
def npy(path, descr, shape, fmt, vals):
    tup = "(" + "".join("%d, " % d for d in shape) + ")"
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, tup)
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%d%s" % (len(vals), fmt), *vals))
w = sys.argv[1]
npy(w + "/op.npy", "<f4", (8, 4), "f", [float(i) for i in range(32)])
npy(w + "/ix.npy", "<u8", (4, 1), "Q", [2**63, 2**64 - 1, 2**63 + 5, 1])
npy(w + "/h.npy", "<f2", (2, 4), "e", [60000, 60000, -60000, -60000, 1, 2, 3, 4.5])
npy(w + "/ones.npy", "<f2", (4, 1), "e", [1, 1, 1, 1])
PY
# rows 7, 7, 7 (clamped to 8 - 1) and 1
WANT="<f4 4,4 28 29 30 31 28 29 30 31 28 29 30 31 4 5 6 7"
for N in 2 3 4; do
    D=$(seq -s, 0 $((N - 1)))
    cat >"$WORK/g$N.hlo" <<HLO
HloModule gather_u64, num_partitions=$N
ENTRY main {
  op = f32[8,4] parameter(0), sharding={devices=[$N,1]$D}
  ix = u64[4,1] parameter(1), sharding={replicated}
  ROOT g = f32[4,4] gather(op, ix), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}, sharding={replicated}
}
HLO
    expect_status 0 "$TESSEL" run "$WORK/g$N.hlo" --input 0="$WORK/op.npy" --input 1="$WORK/ix.npy" --output-dir "$WORK/g$N"
    [ "$(npy_dump "$WORK/g$N/output_0.npy")" = "$WANT" ] || fail "u64 gather on $N: $(npy_dump "$WORK/g$N/output_0.npy")"
done
expect_status 0 "$TESSEL" run --reference "$WORK/g2.hlo" --input 0="$WORK/op.npy" --input 1="$WORK/ix.npy" --output-dir "$WORK/gr"
[ "$(npy_dump "$WORK/gr/output_0.npy")" = "$WANT" ] || fail "u64 gather reference: $(npy_dump "$WORK/gr/output_0.npy")"
echo "hostile_values: u64 gather indices >= 2^63 clamp to the last row on 2, 3, 4 partitions"

# ---- 2. f16 partials that overflow ----
cat >"$WORK/f16.hlo" <<'HLO'
HloModule f16_sum, num_partitions=2
add {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] add(a, b)
}
ENTRY main {
  x = f16[2,4] parameter(0), sharding={devices=[1,2]0,1}
  one = f16[] constant(1)
  ROOT r = f16[2] reduce(x, one), dimensions={1}, to_apply=add, sharding={replicated}
}
HLO
# 60000 + 60000 - 60000 - 60000 + 1 = 1; 1 + 2 + 3 + 4.5 + 1 = 11.5
for how in --reference --num-partitions=2; do
    expect_status 0 "$TESSEL" run "$WORK/f16.hlo" ${how/=/ } --input 0="$WORK/h.npy" --output-dir "$WORK/f16$how"
    [ "$(npy_dump "$WORK/f16$how/output_0.npy")" = "<f2 2 1 11.5" ] ||
        fail "f16 sum $how: $(npy_dump "$WORK/f16$how/output_0.npy")"
done
echo "hostile_values: an f16 sum whose partials overflow is the reference's, partitioned"
# The same through a dot whose contracting dim is sharded: the partials
# are f32 (as the reference's accumulator, and XLA's CPU backend, which
# computes f16 dots in f32), the result rounded once. 60000 + 60000 -
# 60000 - 60000 = 0; 1 + 2 + 3 + 4.5 = 10.5 (NaN partitioned before).
cat >"$WORK/f16dot.hlo" <<'HLO'
HloModule f16_dot, num_partitions=2

ENTRY main {
  x = f16[2,4] parameter(0), sharding={devices=[1,2]0,1}
  w = f16[4,1] parameter(1), sharding={devices=[2,1]0,1}
  ROOT d = f16[2,1] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
HLO
for how in --reference --num-partitions=2; do
    expect_status 0 "$TESSEL" run "$WORK/f16dot.hlo" ${how/=/ } --input 0="$WORK/h.npy" --input 1="$WORK/ones.npy" \
        --output-dir "$WORK/f16dot$how"
    [ "$(npy_dump "$WORK/f16dot$how/output_0.npy")" = "<f2 2,1 0 10.5" ] ||
        fail "f16 dot $how: $(npy_dump "$WORK/f16dot$how/output_0.npy")"
done
echo "hostile_values: an f16 dot whose partials overflow is the reference's, partitioned"

# The same through a convolution whose input features are sharded: f32
# partials, rounded once (NaN partitioned before). Row 0: 60000 + 60000 -
# 60000 - 60000 = 0 (inf + -inf in f16 partials); row 1: 256 + 1 + 1 -
# 256 = 2 (bf16 partials round 257 to 256: 1). The parameters are f32,
# converted in the module, so the .npy files stay f32.
"$PY" - "$WORK" <<'PY'
import struct, sys
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 4), }"
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
with open(sys.argv[1] + "/cx.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<8f", 60000, 60000, -60000, -60000, 256, 1, 1, -256))
PY
for T in f16 bf16; do
    for N in 2 3 4; do
        D=$(seq -s, 0 $((N - 1)))
        cat >"$WORK/conv_$T$N.hlo" <<HLO
HloModule conv_narrow, num_partitions=$N
ENTRY main {
  x32 = f32[2,1,4] parameter(0), sharding={devices=[1,1,$N]$D}
  x = $T[2,1,4] convert(x32), sharding={devices=[1,1,$N]$D}
  k = $T[1,4,1] constant({ { {1}, {1}, {1}, {1} } }), sharding={devices=[1,$N,1]$D}
  c = $T[2,1,1] convolution(x, k), window={size=1}, dim_labels=b0f_0io->b0f, sharding={replicated}
  ROOT r = f32[2,1,1] convert(c)
}
HLO
        for how in --reference --num-partitions=$N; do
            expect_status 0 "$TESSEL" run "$WORK/conv_$T$N.hlo" ${how/=/ } --input 0="$WORK/cx.npy" \
                --output-dir "$WORK/conv_$T$N$how"
            [ "$(npy_dump "$WORK/conv_$T$N$how/output_0.npy")" = "<f4 2,1,1 0 2" ] ||
                fail "$T convolution on $N $how: $(npy_dump "$WORK/conv_$T$N$how/output_0.npy")"
        done
    done
done
echo "hostile_values: f16 and bf16 convolutions whose partials overflow or round are the reference's, partitioned"

# ---- 3. a slice stride near INT64_MAX ----
cat >"$WORK/slice.hlo" <<'HLO'
HloModule slice_stride, num_partitions=2
ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  ROOT s = f32[1,4] slice(x), slice={[3:8:9223372036854775807], [0:4:9223372036854775806]}
}
HLO
# the stride of 2^63-2 in dim 1 takes one element too: a declared f32[1,4] is wrong
expect_status 2 "$TESSEL" check "$WORK/slice.hlo"
expect_in "$ERR" "slice.hlo:4:8: error: s: declared shape f32[1,4] does not match the inferred shape f32[1,1]"
sed 's/f32\[1,4\] slice/f32[1,1] slice/' "$WORK/slice.hlo" >"$WORK/slice11.hlo"
expect_status 0 "$TESSEL" check "$WORK/slice11.hlo"
for how in --reference --num-partitions=2; do
    expect_status 0 "$TESSEL" run "$WORK/slice11.hlo" ${how/=/ } --input 0="$WORK/op.npy" --output-dir "$WORK/sl$how"
    [ "$(npy_dump "$WORK/sl$how/output_0.npy")" = "<f4 1,1 12" ] || fail "slice $how: $(npy_dump "$WORK/sl$how/output_0.npy")"
done
echo "hostile_values: a slice stride near INT64_MAX takes one element"
