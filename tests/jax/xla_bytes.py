#!/usr/bin/env python3
"""xla_bytes.py: the bytes each device moves in the collectives of an XLA
module, counted as tessel's plan counts them (docs/plan.md, "Bytes moved
per device").

Input: the per-device (SPMD-partitioned) module XLA compiled, as JAX prints
it: `jax.jit(f, ...).lower(...).compile().as_text()`. Each collective
instruction counts once (a loop body's once, as in tessel's plan); B is the
sum of its operands' bytes and n the size of its replica groups:

    all-reduce, all-reduce-start       2 * B * (n - 1) // n
    reduce-scatter                     B * (n - 1) // n
    all-gather, all-gather-start       B * (n - 1)
    all-to-all                         B * (n - 1) // n
    collective-permute(-start)         B
    collective-broadcast               B

(-done halves count nothing; an async-start counts as the collective its
called computation holds.) replica_groups are read in every form XLA
prints: the list `{{0,1},{2,3}}`, the iota form `[2,4]<=[8]` and
`[4,2]<=[2,4]T(1,0)`, and the mesh form `mesh['a'=2,'b'=4] {'b'}` (with
`, device_ids=(...)` for a mesh whose devices are not in order, and
sub-axes `'a':(1)2`); `{}` or none is every device of the module
(num_partitions x replica_count).

usage: xla_bytes.py COMPILED.txt     prints one line per collective and the
                                     total; exit 2 on text it cannot read
As a module: collectives(text) -> [Collective], total_bytes(text) -> int,
replica_groups(attr, ndevices) -> list of groups.
"""
import dataclasses
import math
import re
import sys

# bytes per element of XLA's element types
TYPE_BYTES = {
    "pred": 1, "s2": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "u2": 1, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e5m2": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1,
    "f8e4m3": 1, "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 1, "token": 0,
}

KINDS = {
    "all-reduce": "all-reduce", "all-reduce-start": "all-reduce",
    "reduce-scatter": "reduce-scatter",
    "all-gather": "all-gather", "all-gather-start": "all-gather",
    "all-to-all": "all-to-all", "ragged-all-to-all": "all-to-all",
    "collective-permute": "collective-permute", "collective-permute-start": "collective-permute",
    "collective-broadcast": "collective-broadcast",
}


class XlaTextError(Exception):
    pass


@dataclasses.dataclass
class Collective:
    name: str
    kind: str          # all-reduce, reduce-scatter, all-gather, all-to-all, collective-permute, ...
    operand_bytes: int
    group_size: int
    groups: list       # the replica groups (lists of device ids)
    bytes_per_device: int


def shape_bytes(text):
    """Bytes of a shape's text: f32[4,8]{1,0}, (f32[2], s32[]), token[]."""
    total = 0
    for ty, dims in re.findall(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]", text):
        if ty not in TYPE_BYTES:
            raise XlaTextError("unknown element type %r in %r" % (ty, text))
        n = 1
        for d in dims.split(","):
            d = d.strip().lstrip("<=")
            if d:
                n *= int(d)
        total += n * TYPE_BYTES[ty]
    return total


def _iota_groups(shape, reshape, perm):
    """XLA's iota list [G,S]<=[reshape]T(perm): iota(prod reshape), reshaped,
    transposed by perm, read as G groups of S."""
    n = math.prod(reshape)
    ids = list(range(n))
    if perm:
        strides = [math.prod(reshape[k + 1:]) for k in range(len(reshape))]
        tdims = [reshape[p] for p in perm]
        ids = []
        for flat in range(n):
            idx, rest = [], flat
            for d in reversed(tdims):
                idx.append(rest % d)
                rest //= d
            idx.reverse()
            ids.append(sum(idx[k] * strides[perm[k]] for k in range(len(perm))))
    size = shape[-1]
    return [ids[k:k + size] for k in range(0, n, size)]


MESH = re.compile(r"mesh\[([^\]]*)\]\s*(?:,\s*device_ids=\(((?:[^()]|\([^()]*\))*)\))?\s*\{([^}]*)\}")


def _mesh_groups(text):
    """Groups of XLA's mesh form: mesh['a'=2,'b'=4][, device_ids=(...)] {'b',...};
    device_ids a list, or an iota tile assignment [2,4]T(1,0) ([dims]<=[...]...)."""
    m = MESH.match(text)
    if not m or m.end() != len(text.rstrip()):
        raise XlaTextError("cannot read mesh replica groups %r" % text)
    names, sizes = [], []
    for part in m.group(1).split(","):
        k, _, v = part.partition("=")
        names.append(k.strip().strip("'\""))
        sizes.append(int(v))
    total = math.prod(sizes)
    if m.group(2) is None:
        devices = list(range(total))
    elif "T(" in m.group(2) or "<=" in m.group(2):
        dm = re.match(r"\s*\[([\d,]+)\](?:<=\[([\d,]+)\])?(?:T\(([\d,]+)\))?\s*$", m.group(2))
        if not dm:
            raise XlaTextError("cannot read device_ids %r" % m.group(2))
        reshape = [int(x) for x in (dm.group(2) or dm.group(1)).split(",")]
        perm = [int(x) for x in dm.group(3).split(",")] if dm.group(3) else None
        devices = [d for g in _iota_groups([1, total], reshape, perm) for d in g]
    else:
        devices = [int(x) for x in m.group(2).replace("[", "").replace("]", "").split(",") if x.strip()]
    if len(devices) != total:
        raise XlaTextError("mesh %r lists %d devices" % (text, len(devices)))
    # Each grouped axis reference: (axis, pre_size, size); a whole axis is (1, its size).
    refs = []
    for r in (x.strip() for x in m.group(3).split(",") if x.strip()):
        rm = re.match(r"^['\"]?([^'\":]+)['\"]?(?::\((\d+)\)(\d+))?$", r)
        if not rm or rm.group(1) not in names:
            raise XlaTextError("unknown mesh axis %r in %r" % (r, text))
        a = names.index(rm.group(1))
        refs.append((a, int(rm.group(2)), int(rm.group(3))) if rm.group(2) else (a, 1, sizes[a]))
    # Split each axis into the parts its references cut (major to minor),
    # then transpose the referenced parts last, in the order listed.
    dims, where = [], {}
    for a, size in enumerate(sizes):
        done = 1
        for ref in sorted((r for r in refs if r[0] == a), key=lambda r: r[1]):
            if ref[1] != done:
                dims.append(ref[1] // done)
                done = ref[1]
            where[ref] = len(dims)
            dims.append(ref[2])
            done *= ref[2]
        if done != size:
            dims.append(size // done)
    grouped = [where[r] for r in refs]
    order = [d for d in range(len(dims)) if d not in grouped] + grouped
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]
    gsize = math.prod(dims[d] for d in grouped)
    out = []
    for flat in range(total):
        idx, rest = [], flat
        for d in reversed([dims[o] for o in order]):
            idx.append(rest % d)
            rest //= d
        idx.reverse()
        out.append(devices[sum(idx[k] * strides[order[k]] for k in range(len(order)))])
    return [out[k:k + gsize] for k in range(0, total, gsize)]


def replica_groups(attr, ndevices):
    """The groups of a replica_groups= value (its text after '='); None or
    '{}': one group of every device."""
    t = (attr or "").strip()
    if t in ("", "{}"):
        return [list(range(ndevices))]
    if t.startswith("mesh["):
        return _mesh_groups(t)
    m = re.match(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$", t)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        reshape = [int(x) for x in m.group(2).split(",")]
        perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else None
        return _iota_groups(shape, reshape, perm)
    if t.startswith("{"):
        return [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([\d,\s]*)\}", t[1:-1])]
    raise XlaTextError("cannot read replica_groups=%s" % t)


def _groups_attr(rest):
    """The replica_groups value in an instruction's attribute text."""
    i = rest.find("replica_groups=")
    if i < 0:
        return None
    s = rest[i + len("replica_groups="):]
    if s.startswith("mesh["):
        m = MESH.match(s)
        return m.group(0) if m else s
    if s.startswith("["):
        return re.match(r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?", s).group(0)
    depth = 0
    for k, ch in enumerate(s):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return s[:k + 1]
    raise XlaTextError("unterminated replica_groups in %r" % rest[:200])


INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")


def _split_operands(s):
    """Operand names of 'a, %b, f32[2] %c), attrs' up to the closing paren."""
    depth, k = 0, 0
    for k, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
    names = re.findall(r"%?([\w.\-]+)\s*(?:,|$)", s[:k])
    return names, s[k + 1:]


def collectives(text):
    """The collectives of a compiled module's text, in order."""
    header = re.search(r"^HloModule\s.*$", text, re.M)
    if not header:
        raise XlaTextError("no HloModule line")
    np_ = re.search(r"num_partitions=(\d+)", header.group(0))
    nr = re.search(r"replica_count=(\d+)", header.group(0))
    ndevices = (int(np_.group(1)) if np_ else 1) * (int(nr.group(1)) if nr else 1)
    shapes, instrs, comps, comp = {}, [], {}, None
    for line in text.splitlines():
        cm = re.match(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$", line)
        if cm:
            comp = cm.group(1)
            comps[comp] = []
            continue
        m = INSTR.match(line)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        shapes[name] = shape
        instrs.append((name, shape, op, rest))
        if comp is not None:
            comps[comp].append((name, shape, op, rest))
    out = []
    for name, shape, op, rest in instrs:
        inner = op
        operands, attrs = _split_operands(rest)
        if op == "async-start":
            cm = re.search(r"calls=%?([\w.\-]+)", attrs)
            body = comps.get(cm.group(1), []) if cm else []
            inner_ops = [i for i in body if i[2] in KINDS]
            if not inner_ops:
                continue
            inner, attrs = inner_ops[0][2], _split_operands(inner_ops[0][3])[1]
        if inner not in KINDS:
            continue
        kind = KINDS[inner]
        b = 0
        for o in operands:
            if o not in shapes:
                raise XlaTextError("%s: operand %s has no shape" % (name, o))
            b += shape_bytes(shapes[o])
        if kind == "collective-permute":
            groups, n = [], 1
            per = b
        else:
            groups = replica_groups(_groups_attr(attrs), ndevices)
            n = max(len(g) for g in groups)
            per = {"all-reduce": 2 * b * (n - 1) // n if n else 0,
                   "reduce-scatter": b * (n - 1) // n if n else 0,
                   "all-gather": b * (n - 1),
                   "all-to-all": b * (n - 1) // n if n else 0,
                   "collective-broadcast": b}[kind]
        out.append(Collective(name, kind, b, n, groups, per))
    return out


def total_bytes(text):
    return sum(c.bytes_per_device for c in collectives(text))


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    try:
        cs = collectives(open(argv[1]).read())
    except (OSError, XlaTextError) as e:
        print("xla_bytes.py: %s" % e, file=sys.stderr)
        return 2
    for c in cs:
        print("%-28s %-20s n=%-3d %d bytes per device" % (c.name, c.kind, c.group_size, c.bytes_per_device))
    print("total %d bytes per device" % sum(c.bytes_per_device for c in cs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
