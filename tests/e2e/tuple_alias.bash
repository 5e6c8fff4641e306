# tuple_alias.bash: the models of steps_tuple_alias.sh and
# checkpoint_tuple_alias.sh (issue 32), sourced by both (ctest runs *.sh
# only). p = (w, m, c) and x; a step writes w' = w - c*(m + w*x),
# m' = m + w*x and g = w*x, with w and m aliased back into p, c not.
#
#   step_model N OUT     f32[64,32] values split in N rows
#   nested_model IN OUT  step_model's IN with p = ((w, m), c) and the inner
#                        tuple aliased whole ({0}: (0, {0}))

step_model() {
    local n=$1 sh
    if [ "$n" = 1 ]; then sh="{replicated}"; else sh="{devices=[$n,1]$(seq -s, 0 $((n - 1)))}"; fi
    cat >"$2" <<HLO
HloModule tuple_steps, num_partitions=$n, input_output_alias={ {0}: (0, {0}, may-alias), {1}: (0, {1}, may-alias) }

ENTRY main {
  p = (f32[64,32], f32[64,32], f32[64,32]) parameter(0), sharding={$sh, $sh, $sh}
  x = f32[64,32] parameter(1), sharding=$sh
  w = f32[64,32] get-tuple-element(p), index=0
  m = f32[64,32] get-tuple-element(p), index=1
  c = f32[64,32] get-tuple-element(p), index=2
  g = f32[64,32] multiply(w, x), sharding=$sh
  m1 = f32[64,32] add(m, g), sharding=$sh
  cm = f32[64,32] multiply(c, m1), sharding=$sh
  w1 = f32[64,32] subtract(w, cm), sharding=$sh
  ROOT t = (f32[64,32], f32[64,32], f32[64,32]) tuple(w1, m1, g)
}
HLO
}

nested_model() {
    sed -e 's/{ {0}: (0, {0}, may-alias), {1}: (0, {1}, may-alias) }/{ {0}: (0, {0}, may-alias) }/' \
        -e 's/p = (f32\[64,32\], f32\[64,32\], f32\[64,32\]) parameter(0), sharding={\(.*\), \(.*\), \(.*\)}/p = ((f32[64,32], f32[64,32]), f32[64,32]) parameter(0), sharding={\1, \2, \3}/' \
        -e 's/w = f32\[64,32\] get-tuple-element(p), index=0/wm = (f32[64,32], f32[64,32]) get-tuple-element(p), index=0\n  w = f32[64,32] get-tuple-element(wm), index=0/' \
        -e 's/m = f32\[64,32\] get-tuple-element(p), index=1/m = f32[64,32] get-tuple-element(wm), index=1/' \
        -e 's/c = f32\[64,32\] get-tuple-element(p), index=2/c = f32[64,32] get-tuple-element(p), index=1/' \
        -e 's/ROOT t = .*/wm1 = (f32[64,32], f32[64,32]) tuple(w1, m1)\n  ROOT t = ((f32[64,32], f32[64,32]), f32[64,32]) tuple(wm1, g)/' \
        "$1" >"$2"
}
