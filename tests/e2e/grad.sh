#!/usr/bin/env bash
# grad.sh: `tessel grad` end to end (issue 15): the numerical gradient
# checker over tests/models/grad/*.hlo (gradcheck.py), in reverse and in
# forward mode (--jvp), NumPy-derived gradients of an MLP and a softmax
# cross entropy, gradient (and jvp) modules of sharded models partitioned
# on 2..8 devices and under mpirun against the reference run, the plans'
# collectives and shardings, SGD training steps with --steps and the loss
# per step, a loop counted at run time past its bound, custom gradients
# (tessel_gradient), and the errors.
set -euo pipefail
source "$(dirname "$0")/lib.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPI_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=(env ASAN_OPTIONS="$MPI_ASAN" timeout 120 mpirun --oversubscribe --mca btl tcp,self)
M="$TESSEL_SRC/tests/models/grad"

# ---- the numerical checker: every rule family and the composite models ----
"$PY" "$TESSEL_SRC/tests/e2e/gradcheck.py" "$TESSEL" "$WORK" "$M"/*.hlo
# ---- forward mode (--jvp): tangents against central differences ----
"$PY" "$TESSEL_SRC/tests/e2e/gradcheck.py" "$TESSEL" "$WORK" --jvp "$M"/*.hlo

model_for() {
    local devs
    devs=$(seq -s, 0 $(($2 - 1)))
    sed -e "s/@N/$2/g" -e "s/@D/$devs/g" "$M/$1.hlo.in" >"$WORK/$1.$2.hlo"
    echo "$WORK/$1.$2.hlo"
}

# ---- NumPy-derived gradients: MLP (tanh, relu, two dots) and softmax CE ----
expect_status 0 "$TESSEL" grad "$M/softmax_ce.hlo" --wrt w,b -o "$WORK/ce.grad.hlo"
expect_status 0 "$TESSEL" grad "$M/mlp.hlo" --wrt w1,w2 -o "$WORK/mlp.grad.hlo"
"$PY" - "$TESSEL" "$WORK" <<'PY'
import subprocess, sys, numpy as np
tessel, work = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(3)
def run(model, xs, tag):
    args = [tessel, "run", model, "--reference", "--output-dir", "%s/%s" % (work, tag)]
    for k, x in enumerate(xs):
        np.save("%s/%s_in%d.npy" % (work, tag, k), x)
        args += ["--input", "%d=%s/%s_in%d.npy" % (k, work, tag, k)]
    subprocess.run(args, check=True)
    return [np.load("%s/%s/output_%d.npy" % (work, tag, k)) for k in range(3)]
# softmax cross entropy: d loss / d logits = (softmax - labels) / rows
x, w, b = rng.uniform(-1, 1, (5, 3)), rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 4)
labels = np.eye(4)[rng.integers(0, 4, 5)]
loss, gw, gb = run(work + "/ce.grad.hlo", [x, w, b, labels], "ce")
z = x @ w + b
p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
dz = (p - labels) / 5
assert np.allclose(loss, -np.sum(labels * np.log(p)) / 5, rtol=1e-12), loss
assert np.allclose(gw, x.T @ dz, rtol=1e-10, atol=1e-12), (gw, x.T @ dz)
assert np.allclose(gb, dz.sum(0), rtol=1e-10, atol=1e-12)
# MLP: l = sum(y^2), y = tanh(relu(x w1)) w2
x, w1, w2 = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 5)), rng.uniform(-1, 1, (5, 2))
loss, g1, g2 = run(work + "/mlp.grad.hlo", [x, w1, w2], "mlp")
h = x @ w1; r = np.maximum(h, 0); t = np.tanh(r); y = t @ w2
dy = 2 * y; dt = dy @ w2.T; dh = dt * (1 - t * t) * (h > 0)
assert np.allclose(g2, t.T @ dy, rtol=1e-10, atol=1e-12)
assert np.allclose(g1, x.T @ dh, rtol=1e-10, atol=1e-12)
print("ok NumPy-derived gradients of the MLP and the softmax cross entropy")
PY

# ---- sharded models: partitioned and under mpirun equal the reference ----
same() { "$PY" -c "
import numpy as np, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + '/*.npy')):
    a, b = np.load(f), np.load(os.path.join(sys.argv[2], os.path.basename(f)))
    assert a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-11), (f, a, b)
" "$1" "$2" || fail "$3: differs from the reference"; }
for n in 2 4 8; do
    for name in dp_lsq megatron_mlp; do
        m=$(model_for $name $n)
        expect_status 0 "$TESSEL" grad "$m" -o "$WORK/$name.$n.grad.hlo"
        g="$WORK/$name.$n.grad.hlo"
        rm -rf "$WORK/ref" "$WORK/got"
        expect_status 0 "$TESSEL" run "$g" --reference --random-inputs 4 --output-dir "$WORK/ref"
        expect_status 0 "$TESSEL" run "$g" --random-inputs 4 --output-dir "$WORK/got"
        same "$WORK/ref" "$WORK/got" "$name on $n devices"
        # and on n partitions x 2 replicas (issue 30: every partitioned model)
        rm -rf "$WORK/got"
        expect_status 0 "$TESSEL" run "$g" --num-replicas 2 --random-inputs 4 --output-dir "$WORK/got"
        same "$WORK/ref" "$WORK/got" "$name on $n devices x 2 replicas"
        # forward mode too: the tangent parameters carry the shardings
        expect_status 0 "$TESSEL" grad "$m" --jvp -o "$WORK/$name.$n.jvp.hlo"
        rm -rf "$WORK/ref" "$WORK/got"
        expect_status 0 "$TESSEL" run "$WORK/$name.$n.jvp.hlo" --reference --random-inputs 4 --output-dir "$WORK/ref"
        expect_status 0 "$TESSEL" run "$WORK/$name.$n.jvp.hlo" --random-inputs 4 --output-dir "$WORK/got"
        same "$WORK/ref" "$WORK/got" "$name --jvp on $n devices"
    done
done
# The Megatron weight gradients keep the weights' shardings.
m=$(model_for megatron_mlp 2)
expect_status 0 "$TESSEL" grad "$m" --wrt w1,w2 -o "$WORK/meg.grad.hlo"
grep -v parameter "$WORK/meg.grad.hlo" | grep -q 'f64\[24,40\] [a-z]*(.*sharding={devices=\[1,2\]0,1}' || fail "dW1 lost W1's sharding"
grep -v parameter "$WORK/meg.grad.hlo" | grep -q 'f64\[40,24\] [a-z]*(.*sharding={devices=\[2,1\]0,1}' || fail "dW2 lost W2's sharding"
rm -rf "$WORK/ref" "$WORK/got"
expect_status 0 "$TESSEL" run "$WORK/meg.grad.hlo" --reference --random-inputs 6 --output-dir "$WORK/ref"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/meg.grad.hlo" --random-inputs 6 --output-dir "$WORK/got"
same "$WORK/ref" "$WORK/got" "Megatron MLP gradients under mpirun -np 2"
rm -rf "$WORK/got"
expect_status 0 "${MPIRUN[@]}" -np 4 "$TESSEL" run "$WORK/meg.grad.hlo" --num-replicas 2 --random-inputs 6 --output-dir "$WORK/got"
same "$WORK/ref" "$WORK/got" "Megatron MLP gradients on 2 partitions x 2 replicas under mpirun -np 4"
expect_status 0 "$TESSEL" grad "$m" --jvp --wrt w1,w2 -o "$WORK/meg.jvp.hlo"
rm -rf "$WORK/ref" "$WORK/got"
expect_status 0 "$TESSEL" run "$WORK/meg.jvp.hlo" --reference --random-inputs 6 --output-dir "$WORK/ref"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/meg.jvp.hlo" --random-inputs 6 --output-dir "$WORK/got"
same "$WORK/ref" "$WORK/got" "Megatron MLP tangents under mpirun -np 2"
m=$(model_for dp_lsq 2)
expect_status 0 "$TESSEL" grad "$m" -o "$WORK/dp.grad.hlo"
rm -rf "$WORK/ref" "$WORK/got"
expect_status 0 "$TESSEL" run "$WORK/dp.grad.hlo" --reference --random-inputs 6 --output-dir "$WORK/ref"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/dp.grad.hlo" --random-inputs 6 --output-dir "$WORK/got"
same "$WORK/ref" "$WORK/got" "data-parallel gradients under mpirun -np 2"

# ---- the plans: dp's gradient all-reduce, Megatron's sharded weight gradients ----
expect_status 0 "$TESSEL" grad "$(model_for dp_lsq 2)" --wrt w -o "$WORK/dpw.grad.hlo"
expect_status 0 "$TESSEL" compile "$WORK/dpw.grad.hlo" -o "$WORK/dpw.plan"
expect_status 0 "$TESSEL" plan "$WORK/dpw.plan" --format json -o "$WORK/dpw.json"
expect_status 0 "$TESSEL" plan "$WORK/meg.grad.hlo" --format json -o "$WORK/meg.json"
"$PY" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
c = json.load(open(work + "/dpw.json"))["clusters"][0]
ins = {i["name"]: i for i in c["instructions"]}
# dL/dw = X^T (2 r / 32): rows split, so each device holds a partial sum of
# f64[3] that an all-reduce over both devices completes (24 bytes).
ar = [k for k in c["collectives"] if k["opcode"] == "all-reduce" and k["bytes_per_device"] == 24
      and ins[k["name"]]["shape"] == "f64[3]" and k["replica_groups"] == "{{0,1}}"]
assert ar, c["collectives"]
assert c["outputs"][1]["sharding"] == "{replicated}", c["outputs"][1]
c = json.load(open(work + "/meg.json"))["clusters"][0]
o = c["outputs"]
assert (o[1]["sharding"], o[1]["device_shape"]) == ("{devices=[1,2]0,1}", "f64[24,20]"), o[1]
assert (o[2]["sharding"], o[2]["device_shape"]) == ("{devices=[2,1]0,1}", "f64[20,24]"), o[2]
# The backward needs no collective of its own: the one all-reduce is the
# forward's (y = h W2, 16 x 24 f64), nothing gathers a weight gradient.
assert [(k["opcode"], k["bytes_per_device"]) for k in c["collectives"]] == [("all-reduce", 3072)], c["collectives"]
print("ok plans: the data-parallel gradient is all-reduced, the Megatron weight gradients stay sharded")
PY

# ---- training: 50 SGD steps of least squares reach the bound ----
expect_status 0 "$TESSEL" grad "$m" --wrt w --sgd 0.25 -o "$WORK/sgd.hlo"
expect_in "$WORK/sgd.hlo" "input_output_alias={ {1}: (2, {}"
"$PY" - "$WORK" <<'PY'
import numpy as np, sys
work = sys.argv[1]
rng = np.random.default_rng(9)
X = rng.uniform(-1, 1, (32, 3)); y = X @ np.array([0.5, -1.0, 2.0]) + 0.1 * rng.standard_normal(32)
np.save(work + "/X.npy", X); np.save(work + "/y.npy", y); np.save(work + "/w0.npy", np.zeros(3))
# loss(w) = |X w - y|^2 / 32, Hessian H = 2 X^T X / 32. With step 0.25 the
# error e_k = (I - 0.25 H)^k e_0, so loss_k - loss* <= rho^(2k) (loss_0 - loss*)
# with rho = max |1 - 0.25 lambda(H)|.
H = 2 * X.T @ X / 32
lam = np.linalg.eigvalsh(H)
rho = max(abs(1 - 0.25 * lam))
assert rho < 1, rho
ws = np.linalg.lstsq(X, y, rcond=None)[0]
ls = np.sum((X @ ws - y) ** 2) / 32
l0 = np.sum(y ** 2) / 32
open(work + "/bound", "w").write("%r %r" % (ls, ls + rho ** 100 * (l0 - ls) + 1e-12))
PY
check_trained() {
    "$PY" -c "
import numpy as np, sys
X, y = np.load(sys.argv[1] + '/X.npy'), np.load(sys.argv[1] + '/y.npy')
w = np.load(sys.argv[2] + '/output_1.npy')
ls, bound = map(float, open(sys.argv[1] + '/bound').read().split())
l = np.sum((X @ w - y) ** 2) / 32
assert l <= bound, (l, bound)
print('ok 50 SGD steps (%s): loss %.6g, least squares %.6g, bound %.6g' % (sys.argv[3], l, ls, bound))
" "$WORK" "$1" "$2" || fail "SGD did not reach the bound ($2)"
}
IN=(--input "0=$WORK/X.npy" --input "1=$WORK/y.npy" --input "2=$WORK/w0.npy")
rm -rf "$WORK/t1" "$WORK/t2"
expect_status 0 "$TESSEL" run "$WORK/sgd.hlo" --reference "${IN[@]}" --steps 50 --output-dir "$WORK/t1"
check_trained "$WORK/t1" "reference"
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/sgd.hlo" "${IN[@]}" --steps 50 --output-dir "$WORK/t2"
check_trained "$WORK/t2" "mpirun -np 2"
# The loss of every step: --stats with --watch prints it; it falls.
loss_falls() {
    "$PY" -c "
import re, sys
ls = [float(m.group(2)) for m in re.finditer(r'tessel: stats: step (\d+) of 20: l (\S+)', open(sys.argv[1]).read())]
assert len(ls) == 20, ls
assert all(b < a for a, b in zip(ls, ls[1:])) and ls[-1] < ls[0] / 10, ls
print('ok the loss printed per step falls (%s): %.6g -> %.6g' % (sys.argv[2], ls[0], ls[-1]))
" "$ERR" "$1" || fail "the loss per step does not fall ($1)"
}
expect_status 0 "$TESSEL" run "$WORK/sgd.hlo" --reference "${IN[@]}" --steps 20 --stats --watch l --output-dir "$WORK/t4"
loss_falls reference
expect_status 0 "${MPIRUN[@]}" -np 2 "$TESSEL" run "$WORK/sgd.hlo" "${IN[@]}" --steps 20 --stats --watch l --output-dir "$WORK/t5"
loss_falls "mpirun -np 2"
# Adam: moments and the counter are parameters and outputs, all aliased.
expect_status 0 "$TESSEL" grad "$m" --wrt w --adam 0.05 -o "$WORK/adam.hlo"
expect_status 0 "$TESSEL" check "$WORK/adam.hlo"
"$PY" -c "import numpy as np; np.save('$WORK/z3.npy', np.zeros(3)); np.save('$WORK/t0.npy', np.zeros((), np.float32))"
rm -rf "$WORK/t3"
expect_status 0 "$TESSEL" run "$WORK/adam.hlo" --reference "${IN[@]}" --input "3=$WORK/z3.npy" \
    --input "4=$WORK/z3.npy" --input "5=$WORK/t0.npy" --steps 300 --output-dir "$WORK/t3"
"$PY" -c "
import numpy as np
X, y = np.load('$WORK/X.npy'), np.load('$WORK/y.npy')
w = np.load('$WORK/t3/output_1.npy'); t = np.load('$WORK/t3/output_4.npy')
ls = float(open('$WORK/bound').read().split()[0])
l = np.sum((X @ w - y) ** 2) / 32
assert t == 300 and l < ls + 1e-3, (t, l, ls)
print('ok 300 Adam steps: loss %.6g, least squares %.6g' % (l, ls))
" || fail "Adam did not train"

# ---- a loop counted at run time whose bound is too small: NaN, not wrong ----
sed 's/tessel_max_trips="64"/tessel_max_trips="2"/' "$M/while_data.hlo" >"$WORK/wd2.hlo"
expect_status 0 "$TESSEL" grad "$WORK/wd2.hlo" -o "$WORK/wd2.grad.hlo"
"$PY" -c "import numpy as np; np.save('$WORK/wd_x.npy', np.array([0.3, -0.2, 0.1])); np.save('$WORK/wd_w.npy', np.array([0.5, 0.4, -0.6]))"
rm -rf "$WORK/wd2" "$WORK/wd64"
expect_status 0 "$TESSEL" run "$WORK/wd2.grad.hlo" --reference --input "0=$WORK/wd_x.npy" --input "1=$WORK/wd_w.npy" --output-dir "$WORK/wd2"
expect_status 0 "$TESSEL" grad "$M/while_data.hlo" -o "$WORK/wd64.grad.hlo"
expect_status 0 "$TESSEL" run "$WORK/wd64.grad.hlo" --reference --input "0=$WORK/wd_x.npy" --input "1=$WORK/wd_w.npy" --output-dir "$WORK/wd64"
"$PY" -c "
import numpy as np
a, b = np.load('$WORK/wd2/output_1.npy'), np.load('$WORK/wd64/output_1.npy')
assert np.all(np.isnan(a)) and np.all(np.isfinite(b)), (a, b)
assert np.load('$WORK/wd2/output_0.npy') == np.load('$WORK/wd64/output_0.npy')
print('ok a loop past its tessel_max_trips bound gets NaN gradients')
" || fail "the overflowing loop's gradient is not NaN"
# A known_trip_count that is wrong (2; the loop runs more) gives NaN too.
sed 's/, frontend_attributes={tessel_max_trips="64"}/, backend_config={"known_trip_count":{"n":"2"}}/' \
    "$M/while_data.hlo" >"$WORK/wdk.hlo"
expect_status 0 "$TESSEL" grad "$WORK/wdk.hlo" -o "$WORK/wdk.grad.hlo"
rm -rf "$WORK/wdk"
expect_status 0 "$TESSEL" run "$WORK/wdk.grad.hlo" --reference --input "0=$WORK/wd_x.npy" --input "1=$WORK/wd_w.npy" --output-dir "$WORK/wdk"
"$PY" -c "
import numpy as np
assert np.all(np.isnan(np.load('$WORK/wdk/output_1.npy')))
print('ok a wrong known_trip_count gets NaN gradients')
" || fail "a wrong known_trip_count's gradient is not NaN"
sed 's/tessel_max_trips="64"/tessel_max_trips="0"/' "$M/while_data.hlo" >"$WORK/wd0.hlo"
expect_status 2 "$TESSEL" grad "$WORK/wd0.hlo"
expect_in "$ERR" "tessel_max_trips must be a number of trips from 1 to 2^30"

# ---- custom gradients: the named computation is used ----
# round's true derivative is zero; its straight-through estimator (the
# computation ste, named by frontend_attributes={tessel_gradient="ste"})
# passes the adjoint through, so dl/dx = 3 w and dl/dw = round(3 x).
cat >"$WORK/ste.hlo" <<'HLO'
HloModule ste

add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}

// the straight-through estimator: round's adjoint is the incoming one
ste {
  x = f64[4] parameter(0)
  y = f64[4] parameter(1)
  ROOT g = f64[4] parameter(2)
}

ENTRY main {
  x = f64[4] parameter(0)
  w = f64[4] parameter(1)
  three = f64[4] constant({3, 3, 3, 3})
  s = f64[4] multiply(x, three)
  r = f64[4] round-nearest-even(s), frontend_attributes={tessel_gradient="ste"}
  m = f64[4] multiply(r, w)
  z = f64[] constant(0)
  ROOT l = f64[] reduce(m, z), dimensions={0}, to_apply=add
}
HLO
expect_status 0 "$TESSEL" grad "$WORK/ste.hlo" --wrt x,w -o "$WORK/ste.grad.hlo"
expect_in "$WORK/ste.grad.hlo" "to_apply=ste"
"$PY" - "$TESSEL" "$WORK" <<'PY'
import subprocess, sys, numpy as np
tessel, work = sys.argv[1], sys.argv[2]
x, w = np.array([0.1, -0.4, 0.7, 0.25]), np.array([1.5, -2.0, 0.5, 3.0])
np.save(work + "/ste_x.npy", x); np.save(work + "/ste_w.npy", w)
subprocess.run([tessel, "run", work + "/ste.grad.hlo", "--reference", "--input", "0=%s/ste_x.npy" % work,
                "--input", "1=%s/ste_w.npy" % work, "--output-dir", work + "/ste"], check=True)
l, gx, gw = (np.load("%s/ste/output_%d.npy" % (work, k)) for k in range(3))
assert np.allclose(l, np.sum(np.round(3 * x) * w)), l
assert np.array_equal(gx, 3 * w), gx
assert np.array_equal(gw, np.round(3 * x)), gw
print("ok straight-through estimator: dl/dx = 3 w through tessel_gradient")
PY
# Signatures that do not fit are errors at the instruction.
sed 's/tessel_gradient="ste"/tessel_gradient="nope"/' "$WORK/ste.hlo" >"$WORK/ste_bad.hlo"
expect_status 2 "$TESSEL" grad "$WORK/ste_bad.hlo"
expect_in "$ERR" "ste_bad.hlo:21:3: error: grad: tessel_gradient=\"nope\" of instruction r: there is no computation of that name"
sed 's/tessel_gradient="ste"/tessel_gradient="add"/' "$WORK/ste.hlo" >"$WORK/ste_bad.hlo"
expect_status 2 "$TESSEL" grad "$WORK/ste_bad.hlo"
expect_in "$ERR" "it must take the operands, the result and its adjoint"

# ---- errors: named, positioned, nothing written ----
cat >"$WORK/fft.hlo" <<'HLO'
HloModule nofft

ENTRY main {
  x0 = f32[8] parameter(0)
  y0 = f32[8] broadcast(f32[] constant(0)), dimensions={}
  x = c64[8] complex(x0, y0)
  f = c64[8] fft(x), fft_type=FFT, fft_length={8}
  r = f32[8] real(f)
  ROOT s = f32[] reduce(r, f32[] constant(0)), dimensions={0}, to_apply={ a = f32[] parameter(0) b = f32[] parameter(1) ROOT c = f32[] add(a, b) }
}
HLO
cat >"$WORK/rng.hlo" <<'HLO'
HloModule norule

ENTRY main {
  x = f32[4] parameter(0)
  c = f32[4] custom-call(x), custom_call_target="my_op"
  ROOT d = f32[] reduce(c, f32[] constant(0)), dimensions={0}, to_apply={ a = f32[] parameter(0) b = f32[] parameter(1) ROOT c = f32[] add(a, b) }
}
HLO
expect_status 2 "$TESSEL" grad "$WORK/fft.hlo"
expect_in "$ERR" "fft.hlo:8:3: error: grad: no gradient rule for real (instruction r): complex values are not differentiated"
expect_status 2 "$TESSEL" grad "$WORK/fft.hlo" --jvp
expect_in "$ERR" "fft.hlo:6:3: error: grad: no forward-mode (jvp) rule for complex (instruction x): complex values are not differentiated"
expect_status 2 "$TESSEL" grad "$WORK/rng.hlo" -o "$WORK/never.hlo"
expect_in "$ERR" "rng.hlo:5:3: error: grad: no gradient rule for custom-call (instruction c)"
[ ! -e "$WORK/never.hlo" ] || fail "a failed grad wrote its output"
# Inside a called computation (copied under a new name for the backward),
# the error names the instruction as the line it shows writes it.
cat >"$WORK/incall.hlo" <<'HLO'
HloModule norule_in_call

inner {
  p = f32[4] parameter(0)
  ROOT mine.7 = f32[4] custom-call(p), custom_call_target="my_op"
}

ENTRY main {
  x = f32[4] parameter(0)
  c = f32[4] call(x), to_apply=inner
  ROOT d = f32[] reduce(c, f32[] constant(0)), dimensions={0}, to_apply={ a = f32[] parameter(0) b = f32[] parameter(1) ROOT c = f32[] add(a, b) }
}
HLO
expect_status 2 "$TESSEL" grad "$WORK/incall.hlo"
expect_in "$ERR" "incall.hlo:5:8: error: grad: no gradient rule for custom-call (instruction mine.7)"
# A custom-call without a rule gets one from its attribute (its gradient
# module is written and verified; running it needs the target).
sed -e 's/custom_call_target="my_op"/custom_call_target="my_op", frontend_attributes={tessel_gradient="pass"}/' \
    -e 's/^ENTRY main {/pass {\n  x = f32[4] parameter(0)\n  y = f32[4] parameter(1)\n  ROOT g = f32[4] parameter(2)\n}\n\nENTRY main {/' \
    "$WORK/rng.hlo" >"$WORK/cc.hlo"
expect_status 0 "$TESSEL" grad "$WORK/cc.hlo" -o "$WORK/cc.grad.hlo"
expect_in "$WORK/cc.grad.hlo" "to_apply=pass"
expect_status 0 "$TESSEL" check "$WORK/cc.grad.hlo"
expect_status 2 "$TESSEL" grad "$WORK/rng.hlo" --jvp -o "$WORK/never.hlo"
expect_in "$ERR" "rng.hlo:5:3: error: grad: no forward-mode (jvp) rule for custom-call (instruction c)"
[ ! -e "$WORK/never.hlo" ] || fail "a failed grad --jvp wrote its output"
expect_status 2 "$TESSEL" grad "$M/mlp.hlo" --jvp --sgd 0.1
expect_in "$ERR" "--jvp writes tangents of every output; it takes no --loss, --sgd or --adam"
expect_status 2 "$TESSEL" grad "$M/mlp.hlo" --wrt nope
expect_in "$ERR" "'nope' is neither a parameter number nor a parameter name"
expect_status 2 "$TESSEL" grad "$M/mlp.hlo" --wrt x,w3
expect_in "$ERR" "'w3' is neither a parameter number nor a parameter name of main; did you mean w1?"
expect_status 2 "$TESSEL" grad "$M/embedding.hlo" --wrt ids
expect_in "$ERR" "has no floating value to differentiate"
sed 's/ROOT l = f64\[\] reduce(q, z), dimensions={0,1}/ROOT l = f64[10] reduce(q, z), dimensions={1}/' \
    "$M/embedding.hlo" >"$WORK/vec.hlo"
expect_status 2 "$TESSEL" grad "$WORK/vec.hlo"
expect_in "$ERR" "error: grad: the loss must be a floating scalar, not f64[10]"
# a tuple parameter is refused by --sgd/--adam at its line (the error read
# the freed parameter list: a crash, or a wrong position)
cat >"$WORK/tuple_param.hlo" <<'EOF'
HloModule tuple_param

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  p = (f32[4], f32[4]) parameter(0)
  a = f32[4] get-tuple-element(p), index=0
  b = f32[4] get-tuple-element(p), index=1
  c = f32[4] multiply(a, b)
  z = f32[] constant(0)
  ROOT l = f32[] reduce(c, z), dimensions={0}, to_apply=add
}
EOF
for opt in "--sgd 0.1" "--adam 0.1"; do
    expect_status 2 "$TESSEL" grad "$WORK/tuple_param.hlo" $opt -o "$WORK/never.hlo"
    expect_in "$ERR" "tuple_param.hlo:10:3: error: grad: --sgd/--adam update array parameters only, not a tuple"
done
expect_status 2 "$TESSEL" grad "$M/mlp.hlo" --sgd -1
expect_in "$ERR" "--sgd needs a learning rate > 0"
expect_status 2 "$TESSEL" grad "$M/mlp.hlo" --loss 0
expect_in "$ERR" "the root is not a tuple"
echo "grad.sh: ok"
