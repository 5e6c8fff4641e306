#!/usr/bin/python3
"""replay_io.py: the inputs and outputs of a replayed SPMD program, worked
out with NumPy from the plan's JSON dump (docs/plan.md), independently of
tessel's own shard code.

  replay_io.py inputs PLAN.json DIR SEED     whole random inputs DIR/in_<k>.npy;
                                             prints one --input K=FILE per line
  replay_io.py cut PLAN.json DIR N R         each device's shard of every input
                                             (split tree leaves, padded with zeros to
                                             the per-device shape): DIR/in_<k>.dev<g>.npy;
                                             prints one --input K@G=FILE per line
  replay_io.py join PLAN.json DIR OUT N [DIR OUT N ...]
                                             output_<i>.npy rebuilt in OUT from
                                             DIR/output_<i>.device_<p>.npy of replica 0
                                             (concat tree leaves, padding dropped);
                                             each DIR OUT N in one process

Exit status 3 when the program's inputs or outputs are not all arrays this
script handles (tuple parameters, complex or sub-byte types): the caller
skips it.
"""
import json
import os
import re
import sys

import numpy as np

DISK = {"f32": "<f4", "f64": "<f8", "f16": "<f2", "bf16": "<f4", "s8": "|i1", "s16": "<i2", "s32": "<i4",
        "s64": "<i8", "u8": "|u1", "u16": "<u2", "u32": "<u4", "u64": "<u8", "pred": "|b1"}


def shape_of(text):
    m = re.fullmatch(r"([a-z0-9]+)\[([0-9,]*)\](\{[^}]*\})?", text)
    if not m or m.group(1) not in DISK:
        sys.exit(3)
    dims = [int(x) for x in m.group(2).split(",") if x]
    return m.group(1), dims


def leaves(tree, ndev):
    """Every leaf of a compact tree (docs/plan.md): runs expanded, "all"
    devices listed."""
    if tree.get("leaf"):
        yield dict(tree, devices=list(range(ndev)) if tree["devices"] == "all" else tree["devices"])
    elif "leaves" in tree:
        for j in range(tree["leaves"]):
            yield {"leaf": True, "shape": tree["shape"],
                   "devices": list(range(ndev)) if tree["devices"] == "all"
                   else [x + j * tree["devices_step"] for x in tree["devices"]],
                   "offset": [o + j * s for o, s in zip(tree["offset"], tree["offset_step"])]}
    for c in tree.get("children", []):
        yield from leaves(c, ndev)


def cluster(path):
    with open(path) as f:
        plan = json.load(f)
    if len(plan["clusters"]) != 1:
        sys.exit(3)
    c = plan["clusters"][0]
    if len({i["index"] for i in c["inputs"]}) != len(c["inputs"]):
        sys.exit(3)  # a tuple parameter: several leaves share an index
    for v in c["inputs"] + c["outputs"]:
        shape_of(v["shape"])  # exits 3 for a kind this script does not handle
    return c


def draw(ty, dims, rng):
    if ty == "pred":
        return rng.integers(0, 2, dims).astype(bool)
    if ty[0] in "su":
        return rng.integers(0 if ty[0] == "u" else -8, 9, dims).astype(DISK[ty])
    return rng.uniform(-1, 1, dims).astype(DISK[ty])


def main():
    cmd, plan = sys.argv[1], sys.argv[2]
    c = cluster(plan)
    if cmd == "inputs":
        d, seed = sys.argv[3], int(sys.argv[4])
        rng = np.random.default_rng(seed)
        for i in c["inputs"]:
            ty, dims = shape_of(i["shape"])
            f = os.path.join(d, "in_%d.npy" % i["index"])
            np.save(f, draw(ty, dims, rng))
            print("--input=%d=%s" % (i["index"], f))
    elif cmd == "cut":
        d, n, r = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        for i in c["inputs"]:
            whole = np.load(os.path.join(d, "in_%d.npy" % i["index"]))
            _, ddims = shape_of(i["device_shape"])
            for g in range(n * r):
                leaf = next(lf for lf in leaves(i["split_tree"], n) if g % n in lf["devices"])
                box = tuple(slice(o, o + e) for o, e in zip(leaf["offset"], leaf["shape"]))
                shard = np.zeros(ddims, whole.dtype)
                shard[tuple(slice(0, e) for e in leaf["shape"])] = whole[box]
                f = os.path.join(d, "in_%d.dev%d.npy" % (i["index"], g))
                np.save(f, shard)
                print("--input=%d@%d=%s" % (i["index"], g, f))
    elif cmd == "join":
        groups = sys.argv[3:]
        if not groups or len(groups) % 3:
            sys.exit("replay_io.py join: DIR OUT N, one or more times")
        for k in range(0, len(groups), 3):
            d, out, n = groups[k], groups[k + 1], int(groups[k + 2])
            os.makedirs(out, exist_ok=True)
            for o in c["outputs"]:
                _, dims = shape_of(o["shape"])
                whole = None
                for leaf in leaves(o["concat_tree"], n):
                    p = leaf["devices"][0]
                    part = np.load(os.path.join(d, "output_%d.device_%d.npy" % (o["index"], p)))
                    if whole is None:
                        whole = np.zeros(dims, part.dtype)
                    box = tuple(slice(x, x + e) for x, e in zip(leaf["offset"], leaf["shape"]))
                    whole[box] = part[tuple(slice(0, e) for e in leaf["shape"])]
                np.save(os.path.join(out, "output_%d.npy" % o["index"]), whole)
    else:
        sys.exit("replay_io.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
