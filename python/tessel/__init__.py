"""tessel: compile HLO modules for N partitions x R replicas and run them,
from Python, over libtessel (include/tessel.h) through ctypes.

    import numpy as np, tessel
    plan = tessel.compile(open("examples/mlp.hlo").read(), num_partitions=2)
    x = np.ones((8, 16), np.float32)
    y, = plan.run([x], random=1)        # w1, w2: the deterministic random inputs
    ref, = plan.run_reference([x], random=1)
    plan.save("mlp.plan")
    plan = tessel.load_plan("mlp.plan")
    print(plan.dump("text"))

Arrays go in as NumPy arrays (any array-like; C order and little endian
are ensured by copying when needed) and come out as NumPy arrays of the
output's dtype and shape. Errors of the library raise tessel.Error, which
carries the status and FILE:LINE:COL; str() of it is what the command line
prints. Under mpirun, plan.run(..., comm=MPI.COMM_WORLD) runs on mpi4py's
communicator (outputs on rank 0, None on the others). docs/python.md.
"""
import atexit
import collections
import ctypes
import enum
import json
import operator
import os
import re
import shutil
import tempfile
import warnings

import numpy as np

from . import _capi

__all__ = ["Error", "Status", "ArrayInfo", "Module", "Plan", "Outputs", "compile", "grad", "parse_module",
           "load_module", "load_plan", "parse_plan", "version", "devices", "shutdown"]

_lib, library_path = _capi.load()

__version__ = _lib.ts_version().decode()


class Status(enum.IntEnum):
    """TsStatus."""
    OK = 0
    EINPUT = 1        # bad input: syntax, semantics, a bad or missing .npy, a bad option
    ENOMEM = 2        # out of memory
    EUNSUPPORTED = 3  # valid input that tessel cannot handle (yet)
    EINTERNAL = 4     # a bug in tessel
    ERUNTIME = 5      # a failure while running (I/O, a kernel, MPI)


class Error(Exception):
    """An error of libtessel (a TsDiag): status (Status), file (str or None),
    line and col (0 when unknown), line_text (the source line or None) and
    message. str() is ts_diag_format's text without its last newline:
    "tessel: FILE:LINE:COL: error: MESSAGE" then the line and a caret."""

    def __init__(self, status, message, file=None, line=0, col=0, line_text=None, formatted=None):
        self.status = Status(status) if status in Status._value2member_map_ else status
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        self.line_text = line_text
        self.formatted = formatted if formatted is not None else "tessel: error: %s" % message
        super().__init__(self.formatted)

    def __str__(self):
        return self.formatted


def _str(b):
    return None if b is None else b.decode("utf-8", "replace")


def _take_string(ptr):
    """A heap string of the library (void pointer) as str; frees it."""
    if not ptr:
        raise MemoryError("tessel: out of memory")
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _lib.ts_free(ptr)


def _error(status, d):
    """The Error of a failed call from its diag (then cleared)."""
    ptr = _lib.ts_diag_format(ctypes.byref(d))
    formatted = ctypes.string_at(ptr).decode("utf-8", "replace").rstrip("\n") if ptr else None
    _lib.ts_free(ptr)
    err = Error(d.status or status, _str(d.msg) or "status %d" % status, _str(d.file), d.line, d.col,
                _str(d.line_text), formatted)
    _lib.ts_diag_clear(ctypes.byref(d))
    return err


def _call(fn, *args):
    """fn(*args, &diag); raises Error unless TS_OK."""
    d = _capi.TsDiag()
    st = fn(*args, ctypes.byref(d))
    if st != Status.OK:
        raise _error(st, d)
    _lib.ts_diag_clear(ctypes.byref(d))


def _int(what, v):
    """v as an int for option `what`: an int or an integer NumPy scalar,
    never a bool (True would be 1: steps=True ran one step, random=True
    seed 0) nor a float (operator.index refuses it): TypeError."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("tessel: %s must be an int, not a bool (%r)" % (what, v))
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("tessel: %s must be an int, not %s (%r)" % (what, type(v).__name__, v)) from None


def _cstr(v, what="a string"):
    """str (UTF-8) or a path (os.fsencode) as the C library's bytes; a NUL
    inside would cut the C string short, so it is refused as Python's own
    open() refuses it: ValueError."""
    b = v.encode() if isinstance(v, str) else os.fsencode(v)
    if b"\0" in b:
        raise ValueError("tessel: %s holds a NUL character: %r" % (what, v))
    return b


def _path(p):
    return _cstr(p, "a path")


def _limits(limits):
    """A TsLimits from None or a dict {"elements": 2**40, ...} (or a
    "NAME=VALUE" string, or a list of them): ts_limits_set for each."""
    if limits is None:
        return None
    lim = _lib.ts_limits_default()
    if isinstance(limits, (str, bytes)):
        limits = [limits]
    items = limits.items() if isinstance(limits, dict) else [(s, None) for s in limits]
    for name, value in items:
        if isinstance(name, bytes):
            name = name.decode()
        text = name if value is None else "%s=%s" % (name, value)
        _call(_lib.ts_limits_set, ctypes.byref(lim), _cstr(text, "a limit"))
    return lim


def _limits_ptr(lim):
    return ctypes.byref(lim) if lim is not None else None


def version():
    """The library's version (ts_version), e.g. "0.2.0"."""
    return __version__


def shutdown():
    """Release the process-wide caches (ts_shutdown); safe when no run is in
    progress. Also done at exit."""
    _lib.ts_shutdown()


atexit.register(shutdown)


def devices(local_devices=0, format="text"):
    """The local devices hwloc finds (ts_devices_describe), as text or JSON."""
    out = ctypes.c_void_p()
    _call(_lib.ts_devices_describe, local_devices, format.encode(), ctypes.byref(out))
    return _take_string(out)


# ---------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------

class _Handle:
    """A library handle freed by close(), by `with`, or when collected.
    Subclasses name what they are (_what) and their free function (_free,
    the name of the ts_*_free function)."""

    _what = "handle"
    _free = None

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)

    def close(self):
        """Free it now (also done when it is collected)."""
        if self._h:
            getattr(_lib, self._free)(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_h", None) and _lib is not None:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise ValueError("tessel: the %s is closed" % self._what)
        return self._h


class Module(_Handle):
    """A parsed and verified HLO module (TsModule)."""

    _what, _free = "module", "ts_module_free"

    @property
    def name(self):
        return _str(_lib.ts_module_name(self._handle()))

    @property
    def num_parameters(self):
        return _lib.ts_module_num_parameters(self._handle())

    @property
    def is_plan(self):
        """True when the text was a plan file (a partitioned program, not a
        model): load it with tessel.load_plan instead."""
        return bool(_lib.ts_module_is_plan(self._handle()))

    def summary(self):
        """One line on what the module holds (ts_module_summary)."""
        return _take_string(_lib.ts_module_summary(self._handle()))

    def text(self):
        """The module as HLO text (ts_module_text)."""
        return _take_string(_lib.ts_module_text(self._handle()))

    def compile(self, **options):
        """tessel.compile(self, **options)."""
        return compile(self, **options)

    def grad(self, **options):
        """tessel.grad(self, **options)."""
        return grad(self, **options)

    def run_reference(self, inputs=None, **options):
        """The unpartitioned module on one device (ts_run_reference); as
        Plan.run."""
        return _run(_lib.ts_run_reference, self._handle(), None, inputs, options)

    def __repr__(self):
        return "<tessel.Module %s>" % (self.name if self._h else "(closed)")


def parse_module(text, name="<string>", limits=None):
    """Parse and verify HLO text (str or bytes); `name` names it in errors."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    lim = _limits(limits)
    h = ctypes.c_void_p()
    _call(_lib.ts_module_parse, name.encode(), data, len(data), _limits_ptr(lim), ctypes.byref(h))
    return Module(h.value)


def load_module(path, limits=None):
    """Read, parse and verify the HLO text file at `path`."""
    lim = _limits(limits)
    h = ctypes.c_void_p()
    _call(_lib.ts_module_load_ex, _path(path), _limits_ptr(lim), ctypes.byref(h))
    return Module(h.value)


# ---------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------

ArrayInfo = collections.namedtuple("ArrayInfo", "name dtype shape type")
ArrayInfo.__doc__ = """An input or output leaf: name (the parameter's, None for
outputs), dtype (numpy.dtype, as the array travels), shape (tuple) and type
(tessel's element type: "f32", "bf16", ...)."""


def _info(ti):
    return ArrayInfo(_str(ti.name), np.dtype(ti.dtype.decode()), tuple(ti.dims[:ti.rank]), ti.type.decode())


def _model(model, name, limits, what):
    """(Module, whether we made it) from HLO text, a Module or a path."""
    if isinstance(model, Module):
        return model, False
    if isinstance(model, os.PathLike):
        return load_module(model, limits), True
    if isinstance(model, (str, bytes, bytearray, memoryview)):
        return parse_module(model, name, limits), True
    raise TypeError("tessel.%s: model must be HLO text, a Module or a path, not %s" % (what, type(model).__name__))


def grad(model, wrt=None, loss=None, jvp=False, sgd=0.0, adam=0.0, name="<string>", limits=None, remat=None):
    """The gradient module of a forward model (ts_add_gradients, `tessel
    grad`), a new Module. `model`: HLO text, a Module or a path. `wrt`:
    the parameters (numbers or names, a list or "0,w1"; None: every
    floating one); `loss`: the root tuple's element that is the loss
    (number or name; None: the root, a scalar). Its outputs are the forward
    outputs, then dLoss/dP for each P. jvp=True: forward mode (a tangent
    parameter per P appended; outputs then their tangents). sgd=LR or
    adam=LR: a training step whose updated parameters are aliased to the
    inputs (docs/cli.md, `tessel grad`). remat: the checkpoint policy of
    the forward values the backward keeps, "dots", "nothing" or
    "names=a,b" (jax.checkpoint's dots_saveable, nothing_saveable,
    save_only_these_names; `tessel grad --remat`)."""
    if wrt is not None and not isinstance(wrt, (str, bytes)):
        wrt = ",".join(str(w) for w in wrt)
    m, own = _model(model, name, limits, "grad")
    try:
        go = _capi.TsGradOptions(_cstr(wrt, "wrt") if isinstance(wrt, str) else wrt,
                                 _cstr(str(loss), "loss") if loss is not None else None, bool(jvp), float(sgd),
                                 float(adam), _cstr(remat, "remat") if remat else None)
        h = ctypes.c_void_p()
        _call(_lib.ts_add_gradients, m._handle(), ctypes.byref(go), ctypes.byref(h))
        return Module(h.value)
    finally:
        if own:
            m.close()


def compile(model, num_partitions=0, num_replicas=0, hosts=0, local_devices=0, limits=None, verify=True,
            name="<string>", spmd=False, link_gbps=0.0, auto_shard=False, mesh=None, profile=None,
            memory=None, donate="declared", sign_key=None, host_cores=0):
    """Compile a model into a Plan (ts_compile). `model`: HLO text (str or
    bytes), a Module, or a path (os.PathLike, e.g. pathlib.Path). 0 takes
    the default: the module header's num_partitions / replica_count (else
    1), 1 host, N*R/hosts local devices. `limits`: a dict of TsLimits
    fields (elements, rank, tuple, depth, name, devices). spmd=True: the
    model is already an SPMD program, replayed as it is on every device
    (`tessel run --spmd`; run() then takes "KEY@D" inputs, per_device and
    output_device). link_gbps: the links between hosts in Gb/s, for the
    cost model that decides which dots are windowed (0: 10; `tessel
    compile --link-gbps`). auto_shard=True: shardings chosen for every
    value the model leaves unsharded, over the device mesh `mesh` ("2x4"
    or "data=2,model=4"; None: one axis of all partitions), with the cost
    model's rates from the profile file `profile` (None: the defaults);
    Plan.explain() says why (`tessel compile --auto-shard`,
    docs/auto-shard.md). host_cores: the cores of a host, for auto_shard
    (`--host-cores`): where a host's devices outnumber them, no tie-break
    toward less communication (0: the profile's "host_cores", else a core
    per device). memory: bytes per device (an int, or text with
    K, M, G or T) the compile fits the program into, reordering and
    recomputing values (`--limit memory=`; Plan.memory_fit says what it
    did); Error (status 2) naming the smallest peak reached when nothing
    fits. donate="auto": input_output_alias pairs inferred where safe (a
    parameter read for the last time no later than an output of its
    shape, type and sharding is written; `--donate auto`, docs/plan.md
    "Donation"); "declared" (default): the module's own pairs, and each
    buffer_donor parameter paired with an output of its shape, type and
    sharding.
    sign_key: bytes (or str, UTF-8) of a key: Plan.save writes the plan
    signed with HMAC-SHA256 under it (`tessel compile --sign-key FILE`;
    load it with load_plan(path, sign_key=...); docs/plan.md, "Digest and
    signature")."""
    if donate not in ("auto", "declared"):
        raise ValueError("donate must be 'auto' or 'declared', not %r" % (donate,))
    for what, v in (("num_partitions", num_partitions), ("num_replicas", num_replicas), ("hosts", hosts),
                    ("local_devices", local_devices), ("host_cores", host_cores)):
        v = _int(what, v)
        if not 0 <= v < 2**63:  # ctypes would wrap 2**64+2 to 2 partitions
            raise ValueError("tessel: %s must be from 0 (the default) to 2**63-1, not %d" % (what, v))
    key = _sign_key(sign_key)
    m, own = _model(model, name, limits, "compile")
    try:
        lim = _limits(limits)
        if memory is not None:
            lim = lim if lim is not None else _lib.ts_limits_default()
            _call(_lib.ts_limits_set, ctypes.byref(lim), ("memory=%s" % memory).encode())
        # A compile's warnings (a module for several partitions with no
        # sharding on any value) become Python warnings.
        on_warning = _capi.WarningFn(lambda ctx, msg: warnings.warn("tessel: " + msg.decode(), stacklevel=3))
        co = _capi.TsCompileOptions(num_partitions, num_replicas, hosts, local_devices,
                                    ctypes.pointer(lim) if lim is not None else None, not verify, bool(spmd),
                                    None, float(link_gbps), on_warning, None, bool(auto_shard),
                                    _cstr(mesh, "mesh") if mesh else None,
                                    _path(profile) if profile else None, 1 if donate == "auto" else 0,
                                    ctypes.cast(key, ctypes.c_void_p) if key is not None else None,
                                    len(key) if key is not None else 0, host_cores)
        h = ctypes.c_void_p()
        _call(_lib.ts_compile, m._handle(), ctypes.byref(co), ctypes.byref(h))
        return Plan(h.value)
    finally:
        if own:
            m.close()


def _sign_key(key):
    """A plan key as a ctypes buffer (None: no key); a key needs bytes."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError("sign_key must be bytes or str, not %s" % type(key).__name__)
    key = bytes(key)
    if not key:
        raise ValueError("sign_key is empty: a key needs bytes")
    return ctypes.create_string_buffer(key, len(key))


def load_plan(path, limits=None, sign_key=None):
    """Load a plan file written by Plan.save or `tessel compile` (checked
    whole: a truncated or altered plan raises Error naming the line).
    sign_key: the key the plan was signed with (`--sign-key`); a signed
    plan loaded without it, or with another key, raises Error."""
    lim = _limits(limits)
    h = ctypes.c_void_p()
    key = _sign_key(sign_key)
    if key is None:
        _call(_lib.ts_plan_load, _path(path), _limits_ptr(lim), ctypes.byref(h))
    else:
        co = _capi.TsCompileOptions()
        co.limits = ctypes.pointer(lim) if lim is not None else None
        co.sign_key = ctypes.cast(key, ctypes.c_void_p)
        co.sign_key_len = len(key)
        _call(_lib.ts_plan_open, _path(path), ctypes.byref(co), ctypes.byref(h))
    return Plan(h.value)


def parse_plan(text, name="<string>", limits=None):
    """A plan from plan file text (str or bytes)."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    lim = _limits(limits)
    h = ctypes.c_void_p()
    _call(_lib.ts_plan_parse, name.encode(), data, len(data), _limits_ptr(lim), ctypes.byref(h))
    return Plan(h.value)


# The instructions of each device stats="ops" lists (as `tessel run --stats=ops`).
_STATS_OPS = 20


class Outputs(list):
    """The output leaves of a run, depth first, as NumPy arrays (a list),
    with `stats` (the "tessel: stats: ..." lines when run with stats=True,
    else "") and `summary` (ts_outputs_summary's lines). A replay of every
    device (spmd=True) holds each device's leaves in turn: num_devices > 0
    and device(d) is device d's list."""
    stats = ""
    summary = ""
    history = ()  # with run(watch=...): the watched value after each step
    num_devices = 0

    def device(self, d):
        if not self.num_devices:
            raise Error(Status.EINPUT, "these outputs are the program's, not per device")
        k = len(self) // self.num_devices
        if not 0 <= d < self.num_devices:
            raise Error(Status.EINPUT, "no device %d (there are %d)" % (d, self.num_devices))
        return list(self[d * k:(d + 1) * k])


class Plan(_Handle):
    """A compiled program (TsPlan): compiled here by tessel.compile (then it
    also holds the unpartitioned module, for run_reference) or loaded by
    tessel.load_plan."""

    _what, _free = "plan", "ts_plan_free"

    num_partitions = property(lambda self: _lib.ts_plan_num_partitions(self._handle()))
    num_replicas = property(lambda self: _lib.ts_plan_num_replicas(self._handle()))
    hosts = property(lambda self: _lib.ts_plan_hosts(self._handle()))
    local_devices = property(lambda self: _lib.ts_plan_local_devices(self._handle()))
    num_clusters = property(lambda self: _lib.ts_plan_num_clusters(self._handle()))
    from_file = property(lambda self: bool(_lib.ts_plan_from_file(self._handle())))

    @property
    def inputs(self):
        """The input leaves (entry parameters, tuple leaves depth first):
        a list of ArrayInfo with their logical shapes."""
        return self._infos(_lib.ts_plan_num_inputs, _lib.ts_plan_input_info)

    @property
    def outputs(self):
        """The output leaves, depth first: a list of ArrayInfo."""
        return self._infos(_lib.ts_plan_num_outputs, _lib.ts_plan_output_info)

    def _infos(self, count, get):
        h = self._handle()
        out = []
        for i in range(count(h)):
            ti = _capi.TsArrayInfo()
            _call(get, h, i, ctypes.byref(ti))
            out.append(_info(ti))
        return out

    def set_layout(self, hosts, local_devices=0):
        """Rebuild the host layout for `hosts` hosts of `local_devices`
        devices (0: N*R/hosts)."""
        _call(_lib.ts_plan_set_layout, self._handle(), hosts, local_devices)

    def text(self):
        """The plan file text (valid HLO text; docs/plan.md)."""
        return _take_string(_lib.ts_plan_file_text(self._handle()))

    @property
    def memory_fit(self):
        """What compiling to a memory limit changed (the lines `tessel`
        prints on stderr), or None when it changed nothing."""
        h = _lib.ts_plan_memory_fit(self._handle())
        return _take_string(h) if h else None

    def explain(self, format="text"):
        """Why each sharding was chosen, for a plan compiled with
        auto_shard=True (the alternatives and their estimated costs;
        `tessel plan --explain`): a str, or with format="json" the dict of
        `tessel plan --explain --format json` (docs/auto-shard.md); None
        otherwise."""
        if format not in ("text", "json"):
            raise ValueError("explain: format is 'text' or 'json'")
        if format == "json":
            ptr = _lib.ts_plan_explain_json(self._handle())
            return json.loads(_take_string(ptr)) if ptr else None
        ptr = _lib.ts_plan_explain(self._handle())
        return _take_string(ptr) if ptr else None

    def save(self, path):
        """Write the plan file to `path` (atomically)."""
        _call(_lib.ts_plan_save, self._handle(), _path(path))

    def dump(self, format="text"):
        """The plan for people ("text"), programs ("json", docs/plan.md) or
        Graphviz ("dot"), as a str."""
        out = ctypes.c_void_p()
        _call(_lib.ts_plan_dump, self._handle(), format.encode(), ctypes.byref(out))
        return _take_string(out)

    def why(self, name):
        """Why the collectives that produce or consume the value `name` are
        there (`tessel plan --why NAME`): each with its bytes per device,
        the instruction that asked for it and its FILE:LINE:COL, the
        sharding conflict in words, and the change that would avoid it; the
        same reasons are in dump("json")'s collectives ("why"). Raises
        Error (EINPUT) when the plan has nothing of that name."""
        out = ctypes.c_void_p()
        _call(_lib.ts_plan_why, self._handle(), _cstr(name, "a name"), ctypes.byref(out))
        return _take_string(out)

    def run(self, inputs=None, *, random=None, steps=0, comm=None, stats=False, infeeds=None, per_device=False,
            output_device=None, process_local=False, init_state=None, watch=None, on_step=None,
            checkpoint_every=0, checkpoint_dir=None, resume=None):
        """Run the plan; returns Outputs (a list of NumPy arrays).

        inputs: a list or tuple (item k binds entry parameter k; None leaves
        it unbound), or a dict keyed by parameter index (0 or "0"), name
        ("x") or tuple leaf ("0.1", "p.1"). Values are arrays (anything
        numpy.asarray takes) or paths of .npy files (str or os.PathLike).
        random: a seed: unbound leaves get the deterministic random inputs
        (DESIGN.md). steps: run K times, aliased outputs fed back.
        infeeds: .npy paths for infeed / recv from the host, in order.
        comm: an mpi4py communicator: run under MPI on it (every rank
        calls; its size must be the plan's hosts); rank 0 gets the outputs,
        the other ranks None. Without comm: on this process's devices (the
        plan must be for one host). Replays (compile(spmd=True)): keys
        "KEY@D" bind device D only; per_device: each device draws its own
        random inputs; output_device=D: only device D's outputs.
        process_local (with comm): each rank passes only its own part of
        every array input and gets its own part of every output (every
        rank gets Outputs): the part its devices' shards cover, each
        dimension's distinct shard intervals laid end to end, as
        jax.make_array_from_process_local_data takes it (docs/python.md).
        init_state="zeros": the optimizer state of a training step (`tessel
        grad --adam`'s m_P, v_P, t) starts at zero unless bound. watch:
        an output (leaf number or instruction name, one element: a loss)
        whose value after each step goes into Outputs.history and to
        on_step. on_step: called after each step with a StepInfo (step,
        steps, seconds, watched), steps counted over the whole run.
        checkpoint_every=M, checkpoint_dir=DIR: every M steps the state
        the steps carry goes to DIR/step-S as `tessel run --checkpoint-every`
        writes it; resume=DIR continues from DIR's last checkpoint that
        verifies (the command line's checkpoints too), bit-identical to
        an uninterrupted run (one process: comm=None)."""
        options = dict(random=random, steps=steps, stats=stats, infeeds=infeeds, per_device=per_device,
                       output_device=output_device, process_local=process_local, init_state=init_state,
                       watch=watch, on_step=on_step)
        if checkpoint_every or checkpoint_dir or resume:
            if comm is not None:
                raise Error(Status.EUNSUPPORTED, "checkpoints from Python run in one process (comm=None); "
                            "under mpirun use `tessel run --checkpoint-every`")
            return _checkpointed(self, inputs, options, checkpoint_every, checkpoint_dir, resume)
        if comm is None:
            return _run(_lib.ts_plan_run, self._handle(), self, inputs, options)
        from mpi4py import MPI
        addr = ctypes.c_void_p(MPI._addressof(comm))

        def run_mpi(h, ro, out, d):
            return _lib.ts_plan_run_mpi(h, addr, ro, out, d)
        return _run(run_mpi, self._handle(), self, inputs, options, may_be_empty=True)

    def run_reference(self, inputs=None, *, random=None, steps=0, stats=False, infeeds=None):
        """The unpartitioned module on one device: the oracle run() is
        checked against (only for a plan compiled in this process: a
        loaded plan has no module and raises Error). As run()."""
        return _run(_lib.ts_plan_run_reference, self._handle(), self, inputs,
                    dict(random=random, steps=steps, stats=stats, infeeds=infeeds))

    def __repr__(self):
        if not self._h:
            return "<tessel.Plan (closed)>"
        return "<tessel.Plan %d partitions x %d replicas, %d hosts x %d devices, %d clusters>" % (
            self.num_partitions, self.num_replicas, self.hosts, self.local_devices, self.num_clusters)


# ---------------------------------------------------------------------------
# Running: inputs into TsInput/TsArray, outputs out of TsOutputs
# ---------------------------------------------------------------------------

def _leaf_info(plan, key, infos):
    """The ArrayInfo a key names when it is plain (an index or a name of a
    non-tuple parameter), else None."""
    if infos is None:
        return None
    if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
        k = int(key)
        # index k is leaf k only when no parameter is a tuple (then the
        # names of the leaves are distinct)
        names = [i.name for i in infos]
        if 0 <= k < len(infos) and len(set(names)) == len(names):
            return infos[k]
        return None
    hits = [i for i in infos if i.name == key]
    return hits[0] if len(hits) == 1 else None


def _as_array(value, info):
    """value as a C-contiguous little-endian ndarray. Arrays keep their
    dtype (the library checks it against the parameter); other values
    (lists, scalars) take the parameter's dtype when it is known."""
    if isinstance(value, np.ndarray):
        a = value
    elif info is not None:
        a = np.asarray(value, dtype=info.dtype)
    else:
        a = np.asarray(value)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    # Not np.ascontiguousarray: it makes a 0-d array 1-d, so a 0-d array
    # could not bind an f32[] parameter and bound an f32[1] one.
    return a if a.flags.c_contiguous else a.copy(order="C")


def _bind(plan, inputs):
    """TsInput array for `inputs` (list/tuple/dict) and the objects that
    must stay alive while the library reads them."""
    if inputs is None:
        items = []
    elif isinstance(inputs, dict):
        items = list(inputs.items())
    elif isinstance(inputs, (list, tuple)):
        items = [(k, v) for k, v in enumerate(inputs) if v is not None]
    else:
        raise TypeError("tessel: inputs must be a list, a tuple or a dict, not %s" % type(inputs).__name__)
    infos = plan.inputs if (plan is not None and items) else None
    keep = []
    arr = (_capi.TsInput * max(len(items), 1))()
    for j, (key, value) in enumerate(items):
        if not isinstance(key, (int, str)):
            raise TypeError("tessel: input keys are indices or names, not %r" % (key,))
        kb = _cstr(str(key), "an input key")
        keep.append(kb)
        arr[j].key = kb
        if isinstance(value, (str, bytes, os.PathLike)):
            pb = _path(value)
            keep.append(pb)
            arr[j].path = pb
            continue
        a = _as_array(value, _leaf_info(plan, key, infos))
        dims = (_capi.c_int64 * max(a.ndim, 1))(*a.shape)
        dt = a.dtype.str.encode()
        ta = _capi.TsArray(dt, a.ndim, dims, a.ctypes.data, a.nbytes)
        keep += [a, dims, dt, ta]
        arr[j].array = ctypes.pointer(ta)
    return arr, len(items), keep


_SELF_KEY = ', "checkpoint_sha256": "'


def _sha256(text):
    """The library's SHA-256 of text (ts_sha256), 64 hex digits."""
    b = text.encode()
    out = ctypes.create_string_buffer(65)
    _call(_lib.ts_sha256, b, len(b), out)
    return out.value.decode()


def _json_key(key):
    """key as tools/checkpoint.c writes it in a JSON string: '"', '\\' and
    control characters as \\u00XX, everything else as it is."""
    return "".join("\\u%04x" % ord(ch) if ch in '"\\' or ord(ch) < 0x20 else ch for ch in key)


def _input_key(plan, key):
    """(parameter, leaf) input key binds (ts_plan_input_key: leaf -1 for an
    array parameter), or None when nothing answers to it."""
    param, leaf, d = ctypes.c_int32(-1), ctypes.c_int32(-1), _capi.TsDiag()
    st = _lib.ts_plan_input_key(plan._handle(), _cstr(str(key), "an input key"), ctypes.byref(param), ctypes.byref(leaf),
                                ctypes.byref(d))
    _lib.ts_diag_clear(ctypes.byref(d))
    return (param.value, leaf.value) if st == Status.OK else None


def _taken_with(plan, given, random, aliases, init_state):
    """checkpoint.json's "random_inputs", "inputs" and "init_state"
    members, as tools/checkpoint.c's record_inputs writes them: the seed,
    each input that does not bind the state (a leaf an alias names), by
    what it binds ("P", "P.L" for a leaf of a tuple) and the SHA-256 of
    its value (ts_input_sha256: a file and the same array are one), and
    init_state ("none" when not given)."""
    state = {(param, pleaf) for _, param, pleaf in aliases}
    items = []
    for key, value in given.items():
        pk = _input_key(plan, key)
        if pk in state:
            continue
        k = str(key) if pk is None else "%d.%d" % pk if pk[1] >= 0 else str(pk[0])
        arr, n, keep = _bind(plan, {key: value})
        out = ctypes.create_string_buffer(65)
        _call(_lib.ts_input_sha256, arr, out)
        del keep
        items.append('{"key": "%s", "sha256": "%s"}' % (_json_key(k), out.value.decode()))
    seed = "none" if random is None else str(_int("random", random))
    return '"random_inputs": "%s", "inputs": [%s], "init_state": "%s"' % (
        seed, ", ".join(items), "zeros" if init_state == "zeros" else "none")


def _checkpoint_text(step, steps, digest, osha, aliases, taken_with):
    """checkpoint.json as `tessel run --checkpoint-every` writes it
    (tools/checkpoint.c): version 3, ending in its own SHA-256."""
    body = ('{"format": "tessel-checkpoint", "version": 3, "step": %d, "steps": %d, "digest": "%s", '
            '"outputs_sha256": "%s", "aliases": [%s], %s'
            % (step, steps, digest, osha,
               ", ".join('{"output": %d, "parameter": %d' % (o, p) + (', "leaf": %d}' % pl if pl >= 0 else "}")
                         for o, p, pl in aliases), taken_with))
    return body + _SELF_KEY + _sha256(body) + '"}\n'


def _self_digest_ok(text):
    """checkpoint.json's checkpoint_sha256 is the SHA-256 of what precedes it."""
    at = text.rfind(_SELF_KEY)
    return at >= 0 and text[at + len(_SELF_KEY):] == _sha256(text[:at]) + '"}\n'


class _HeldDir:
    """The checkpoint directory held as the command line holds it
    (DIR/.tessel.lock, ts_output_dir_open): one run writes checkpoints
    there at a time. An existing one is held from the start; a missing one
    is made and held by the first checkpoint."""

    def __init__(self, path):
        self.path, self.handle = path, None
        if os.path.exists(path):
            self._take(_lib.ts_output_dir_open)
            _remove_stale_temps(path)
        else:
            # made (with its parents) at the first checkpoint: a path that
            # cannot be made fails now, not after the first chunk of steps
            # (it was an OSError from os.makedirs then), as the command line
            top = os.path.abspath(path)
            while not os.path.lexists(top):
                top = os.path.dirname(top)
            why = ("not a directory" if not os.path.isdir(top) else
                   "not writable" if not os.access(top, os.W_OK | os.X_OK) else None)
            if why:
                raise Error(Status.ERUNTIME, "%s: cannot create the checkpoint directory: %s is %s"
                            % (os.fspath(path), top, why))

    def _take(self, fn):
        h = ctypes.c_void_p()
        _call(fn, os.fsencode(self.path), ctypes.byref(h))
        self.handle = h

    def make(self):
        if self.handle is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)  # as os.makedirs did
            self._take(_lib.ts_output_dir_make)

    def close(self):
        if self.handle is not None:
            _lib.ts_output_dir_close(self.handle)
            self.handle = None


_STEP_FILE = re.compile(r"checkpoint\.json|outputs\.json|\.tessel\.lock|\.tessel-tmp-.*|checkpoint\.json\.tmp\..*|"
                        r"[^.].*\.npy")


def _remove_stale_temps(ckdir):
    """The temporaries of checkpoints a killed run was writing
    (.step-S.XXXXXX, the command line's or ours) in ckdir, which this
    process holds: their files that a checkpoint holds, then the directory
    (one holding anything else stays; tools/checkpoint.c alike)."""
    for name in os.listdir(ckdir):
        if not re.fullmatch(r"\.step-[0-9]+\.[A-Za-z0-9_]{6,8}", name):
            continue
        t = os.path.join(ckdir, name)
        if os.path.islink(t) or not os.path.isdir(t):
            continue
        for f in os.listdir(t):
            p = os.path.join(t, f)
            if _STEP_FILE.fullmatch(f) and os.path.isfile(p) and not os.path.islink(p):
                os.unlink(p)
        try:
            os.rmdir(t)
        except OSError:
            pass


def _refuse_written_step(ckdir, done, steps, every, final=0):
    """A step-S in ckdir that this run would write again (tools/checkpoint.c
    refuse_written_step): refused before the first step. `final`: the run's
    last step, checkpointed and kept (not written again)."""
    try:
        names = os.listdir(ckdir)
    except OSError:
        return
    hits = [int(m.group(1)) for m in (re.fullmatch(r"step-([1-9][0-9]{0,17})", n) for n in names) if m]
    hits = sorted(s for s in hits if done < s <= steps and s % every == 0 and s != final)
    if not hits:
        return
    if done == 0:
        what = ("checkpoint_dir %s already holds step-%d, a checkpoint this run would write: go on from its "
                "checkpoints with resume=%s, or give a checkpoint_dir without checkpoints" % (ckdir, hits[0], ckdir))
    else:
        what = ("%s already holds step-%d, a checkpoint this run (from step %d) would write again: move it away, "
                "or give another checkpoint_dir" % (ckdir, hits[0], done))
    raise Error(Status.EINPUT, what)


def _sync_dir(path):
    """fsync the directory `path`: the renames into it are on the disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_checkpoint(out, ckdir, step, steps, digest, aliases, taken_with):
    """DIR/step-S from a run's outputs, written into a fresh temporary
    directory renamed when complete (a killed run leaves whole
    checkpoints only). Its path."""
    tmp = tempfile.mkdtemp(prefix=".step-%d." % step, dir=ckdir)
    final = os.path.join(ckdir, "step-%d" % step)
    try:
        _call(_lib.ts_outputs_write, out, os.fsencode(tmp))
        osha = ctypes.create_string_buffer(65)
        _call(_lib.ts_outputs_verify, os.fsencode(tmp), osha)
        with open(os.path.join(tmp, "checkpoint.json"), "w") as f:
            f.write(_checkpoint_text(step, steps, digest, osha.value.decode(), aliases, taken_with))
            # on the disk before the renames, as ts_outputs_write's files
            f.flush()
            os.fsync(f.fileno())
        _sync_dir(tmp)
        os.rename(tmp, final)
        _sync_dir(ckdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _last_checkpoint(ckdir, digest, steps):
    """(step, path, inputs record) of the last checkpoint of this program in
    ckdir that verifies, by the command line's rules (docs/cli.md,
    --resume): those that do not are named in a warning and passed over."""
    best, below, other, bad = (0, None, None), (0, None, None), False, 0
    try:
        names = os.listdir(ckdir)
    except OSError as e:
        raise Error(Status.EINPUT, "resume %s: %s" % (ckdir, e.strerror)) from None
    for name in names:
        m = re.fullmatch(r"step-([1-9][0-9]{0,17})", name)
        sdir = os.path.join(ckdir, name)
        try:
            with open(os.path.join(sdir, "checkpoint.json")) as f:
                text = f.read(1 << 20)
            ck = json.loads(text)
        except (OSError, ValueError):
            continue
        if not m or not isinstance(ck, dict) or ck.get("format") != "tessel-checkpoint":
            continue
        why = None
        if ck.get("version") != 3:
            why = "checkpoint.json is not version 3 (an older tessel's, or edited)"
        elif not _self_digest_ok(text):
            why = ("checkpoint.json's \"checkpoint_sha256\" is not the SHA-256 of its content (its \"digest\", "
                   "\"step\" or another member was edited, or it was cut short)")
        elif ck.get("digest") != digest:
            other = True
            continue
        osha = ctypes.create_string_buffer(65)
        d = _capi.TsDiag()
        if why:
            pass
        elif "outputs_sha256" not in ck or "random_inputs" not in ck:
            why = "checkpoint.json lacks the outputs' digest or the inputs it was taken with: edited"
        elif ck.get("step") != int(m.group(1)):
            why = "checkpoint.json says step %s, its directory step %s" % (ck.get("step"), m.group(1))
        elif _lib.ts_outputs_verify(os.fsencode(sdir), osha, ctypes.byref(d)) != Status.OK:
            why = str(_error(Status.EINPUT, d))
        elif osha.value.decode() != ck["outputs_sha256"]:
            why = "its outputs.json is not the one checkpoint.json names (outputs_sha256)"
        _lib.ts_diag_clear(ctypes.byref(d))
        if why:
            warnings.warn("tessel: resume: %s is not used: %s" % (sdir, why))
            bad += 1
        else:
            taken = text[text.index('"random_inputs": '):text.rindex(_SELF_KEY)]
            if "init_state" not in ck:  # an older tessel's: not given
                taken += ', "init_state": "none"'
            if ck["step"] > best[0]:
                best = (ck["step"], sdir, taken)
            if below[0] < ck["step"] < steps:
                below = (ck["step"], sdir, taken)
    if best[1] is not None and best[0] == steps:
        # The run's last step (a run killed while its outputs were written):
        # no steps are left and the outputs are not all state, so the steps
        # after the checkpoint before it run again (from the start where
        # none is) and step-`steps` is kept (tools/checkpoint.c alike).
        return (below[0], below[1], below[2] or best[2], steps) if below[1] else (0, None, best[2], steps)
    if best[1] is None:
        raise Error(Status.EINPUT, "resume %s: %s" % (ckdir, "no checkpoint there verifies" if bad else
                    "its checkpoints belong to another program" if other else "no complete checkpoint there"))
    if best[0] > steps:
        raise Error(Status.EINPUT, "resume: the last checkpoint is at step %d, past steps %d" % (best[0], steps))
    return best + (0,)


def _checkpointed(plan, inputs, options, every, ckdir, resume):
    """Plan.run cut into chunks of `every` steps, each ending in a
    checkpoint, from DIR's last checkpoint with resume (tools/checkpoint.c
    does the same for the command line)."""
    options = dict(options)
    steps = options.pop("steps", 0)
    steps = _int("steps", 0 if steps is None else steps) or 1
    every = _int("checkpoint_every", every if every is not None else 0)
    if not resume and not (every and ckdir):
        raise ValueError("tessel: checkpoints need both checkpoint_every=M and checkpoint_dir=DIR")
    if every < 0:
        raise ValueError("tessel: checkpoint_every must be >= 1, not %d" % every)
    ckdir = os.fspath(ckdir or resume)
    h = plan._handle()
    aliases = []  # (output leaf, parameter, its leaf or -1): every leaf the aliases move
    for k in range(_lib.ts_plan_num_aliases(h)):
        out, param, pleaf, count = (ctypes.c_int32() for _ in range(4))
        _call(_lib.ts_plan_alias_leaves, h, k, ctypes.byref(out), ctypes.byref(param), ctypes.byref(pleaf),
              ctypes.byref(count))
        aliases += [(out.value + j, param.value, pleaf.value + j if pleaf.value >= 0 else -1)
                    for j in range(count.value)]
    if not aliases:
        raise Error(Status.EINPUT, "checkpoints keep the state steps carry (input_output_alias), and this "
                    "module aliases no output to a parameter")
    dg = ctypes.create_string_buffer(65)
    _call(_lib.ts_plan_digest, h, dg)
    digest = dg.value.decode()
    done, last, taken, final = _last_checkpoint(os.fspath(resume), digest, steps) if resume else (0, None, None, 0)
    if inputs is None:
        given = {}
    elif isinstance(inputs, dict):
        given = dict(inputs)
    else:
        given = {k: v for k, v in enumerate(inputs) if v is not None}
    taken_with = _taken_with(plan, given, options.get("random"), aliases, options.get("init_state"))
    if taken is not None and taken != taken_with:
        then, now = json.loads("{%s}" % taken), json.loads("{%s}" % taken_with)
        if then["init_state"] != now["init_state"]:
            what = "it was taken with init_state=%s, this run gives init_state=%s" % tuple(
                '"zeros"' if z == "zeros" else "None" for z in (then["init_state"], now["init_state"]))
        elif then["random_inputs"] != now["random_inputs"]:
            what = "it was taken with random=%s, this run gives random=%s" % (
                then["random_inputs"], now["random_inputs"])
        else:
            a = {i["key"]: i["sha256"] for i in then["inputs"]}
            b = {i["key"]: i["sha256"] for i in now["inputs"]}
            k = sorted(set(a) ^ set(b) | {k for k in a if k in b and a[k] != b[k]})[0]
            what = "input %s %s" % (k, "has other content" if k in a and k in b else
                                    "was given then and is not now" if k in a else "is given now and was not then")
        raise Error(Status.EINPUT, "resume %s: %s; resume with the inputs the checkpoint was taken with (the "
                    "state comes from it)" % (last or os.path.join(os.fspath(resume), "step-%d" % final), what))
    held = None
    if every:
        held = _HeldDir(ckdir)
        try:
            _refuse_written_step(ckdir, done, steps, every, final)
        except BaseException:
            held.close()
            raise
    try:
        return _checkpointed_chunks(plan, h, given, options, steps, every, done, last, ckdir, digest, aliases,
                                    taken_with, held, final)
    finally:
        if held:
            held.close()


def _checkpointed_chunks(plan, h, given, options, steps, every, done, last, ckdir, digest, aliases, taken_with,
                         held, final=0):
    """_checkpointed's steps: chunks of `every`, a checkpoint after each,
    into ckdir (held)."""
    history = []
    while True:
        chunk = steps - done
        if every:
            chunk = min(chunk, every - done % every)
        ins = dict(given)
        if last:  # the state from the checkpoint, not from the caller
            for leaf, param, pleaf in aliases:
                for key in [k for k in ins if _input_key(plan, k) == (param, pleaf)]:
                    del ins[key]
                ins["%d.%d" % (param, pleaf) if pleaf >= 0 else str(param)] = \
                    os.path.join(last, "output_%d.npy" % leaf)
        res, out = _run(_lib.ts_plan_run, h, plan, ins, dict(options, steps=chunk), base=done, total=steps,
                        keep_handle=True)
        try:
            done += chunk
            history += res.history
            if every and done % every == 0 and done != final:  # a kept last step is not written again
                held.make()
                last = _write_checkpoint(out, ckdir, done, steps, digest, aliases, taken_with)
        finally:
            _lib.ts_outputs_free(out)
        if done >= steps:
            res.history = history
            return res


StepInfo = collections.namedtuple("StepInfo", "step steps seconds watched")
StepInfo.__doc__ = """One step done (Plan.run's on_step): step of steps, counted over the
whole run (checkpoints and resumes included), its seconds, and the watched
output's value after it (None without watch)."""


def _run(fn, handle, plan, inputs, options, may_be_empty=False, base=0, total=0, keep_handle=False):
    """fn(handle, &TsRunOptions, &TsOutputs*, &diag) and the outputs as an
    Outputs list (None when the library gave none and may_be_empty). base,
    total: the steps done before this call and the run's count, for
    on_step. keep_handle: (Outputs, the TsOutputs handle, the caller's to
    free)."""
    options = dict(options)
    init_state = options.pop("init_state", None)
    watch = options.pop("watch", None)
    on_step = options.pop("on_step", None)
    random = options.pop("random", None)
    steps = options.pop("steps", 0)
    steps = 0 if steps is None else steps
    stats = options.pop("stats", False)
    infeeds = options.pop("infeeds", None) or []
    per_device = options.pop("per_device", False)
    output_device = options.pop("output_device", None)
    process_local = options.pop("process_local", False)
    if options:
        raise TypeError("tessel: unknown run options: %s" % ", ".join(sorted(options)))
    arr, n, keep = _bind(plan, inputs)
    feeds = (ctypes.c_char_p * max(len(infeeds), 1))(*[_path(p) for p in infeeds])
    ro = _capi.TsRunOptions()
    ro.ninputs = n
    ro.inputs = arr
    if random is not None:
        ro.random = True
        seed = _int("random", random)
        if not 0 <= seed < 2**64:  # ctypes would wrap 2**64+3 to 3 and -1 to 2**64-1
            raise ValueError("tessel: random must be a seed from 0 to 2**64-1, not %d" % seed)
        ro.seed = seed
    steps = _int("steps", steps)
    if not 0 <= steps <= _capi.TS_MAX_STEPS:  # 0 and 1: one step; a negative count is no count
        raise ValueError("tessel: steps must be from 0 (one step) to %d, not %d" % (_capi.TS_MAX_STEPS, steps))
    ro.steps = steps
    ro.ninfeeds = len(infeeds)
    ro.infeeds = feeds
    if stats not in (False, True, None, "ops"):
        raise ValueError("tessel: stats is True, False or \"ops\" (per-instruction times), not %r" % (stats,))
    ro.stats = bool(stats)
    ro.stats_ops = _STATS_OPS if stats == "ops" else 0
    ro.per_device = bool(per_device)
    ro.process_local = bool(process_local)
    # The library reads no environment variable: what it may do with
    # OpenBLAS's (include/tessel.h, TsTuning) is said here.
    ro.tuning.openblas_num_threads_unset = "OPENBLAS_NUM_THREADS" not in os.environ
    if output_device is not None:
        dev = _int("output_device", output_device)
        if not 0 <= dev < 2**63:  # ctypes would wrap 2**64+3 to device 3
            raise ValueError("tessel: output_device must be from 0 to 2**63-1, not %d" % dev)
        ro.one_device = True
        ro.output_device = dev
    if init_state not in (None, "zeros"):
        raise ValueError("tessel: init_state is None or \"zeros\", not %r" % (init_state,))
    ro.zero_state = init_state == "zeros"
    if watch is not None:
        wb = _cstr(str(watch), "watch")
        keep.append(wb)
        ro.watch = wb
    history, raised = [], []
    if watch is not None or on_step is not None:
        def hook(ctx, info):
            try:
                s = ctypes.cast(info, ctypes.POINTER(_capi.TsStepInfo)).contents
                w = s.watched if s.has_watched else None
                if watch is not None:
                    history.append(w)
                if on_step is not None and not raised:
                    on_step(StepInfo(base + s.step, total or s.steps, s.seconds, w))
            except BaseException as e:  # raised after the run: ctypes would only print it
                raised.append(e)
        cb = _capi.ON_STEP(hook)
        keep.append(cb)
        ro.on_step = cb
    out = ctypes.c_void_p()
    d = _capi.TsDiag()
    st = fn(handle, ctypes.byref(ro), ctypes.byref(out), ctypes.byref(d))
    del keep
    if raised:
        _lib.ts_outputs_free(out)
        _lib.ts_diag_clear(ctypes.byref(d))
        raise raised[0]
    if st != Status.OK:
        _lib.ts_outputs_free(out)
        raise _error(st, d)
    _lib.ts_diag_clear(ctypes.byref(d))
    if not out:
        if may_be_empty:
            return None
        raise Error(Status.EINTERNAL, "the library returned no outputs")
    if keep_handle:
        try:
            res = _read_outputs(out)
        except BaseException:
            _lib.ts_outputs_free(out)
            raise
        res.history = history
        return res, out
    try:
        res = _read_outputs(out)
        res.history = history
        return res
    finally:
        _lib.ts_outputs_free(out)


def _read_outputs(out):
    res = Outputs()
    for i in range(_lib.ts_outputs_count(out)):
        ti = _capi.TsArrayInfo()
        _call(_lib.ts_outputs_info, out, i, ctypes.byref(ti))
        info = _info(ti)
        a = np.empty(info.shape, info.dtype)
        if a.nbytes != ti.nbytes:
            raise Error(Status.EINTERNAL, "output %d: %d bytes for %s%s, the library says %d"
                        % (i, a.nbytes, info.dtype.str, list(info.shape), ti.nbytes))
        _call(_lib.ts_outputs_read, out, i, a.ctypes.data, a.nbytes)
        res.append(a)
    res.num_devices = _lib.ts_outputs_num_devices(out)
    res.stats = _str(_lib.ts_outputs_stats(out)) or ""
    summary = _lib.ts_outputs_summary(out)
    res.summary = _take_string(summary) if summary else ""
    return res
