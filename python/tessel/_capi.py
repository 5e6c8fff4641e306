"""_capi.py: libtessel through ctypes: finding and loading the shared
library, the structs of include/tessel.h and the prototypes of the
functions the module calls. Internal: use the `tessel` package.

The library is looked for, in order:
  1. next to the installed module (`cmake --install` writes _install.py
     beside this file with the library's path relative to it);
  2. the environment variable TESSEL_LIBRARY (a path to libtessel.so);
  3. ctypes.util.find_library("tessel") (the loader's path, ldconfig).
"""
import ctypes
import ctypes.util
import os

TS_MAX_RANK = 64
TS_MAX_STEPS = 10**12  # include/tessel.h

c_int32 = ctypes.c_int32
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_bool = ctypes.c_bool


class TsDiag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int),
                ("file", c_char_p),
                ("line", c_int32),
                ("col", c_int32),
                ("line_text", c_char_p),
                ("msg", c_char_p)]


class TsLimits(ctypes.Structure):
    _fields_ = [("elements", c_int64),
                ("rank", c_int32),
                ("tuple", c_int32),
                ("depth", c_int32),
                ("name", c_int64),
                ("devices", c_int64),
                ("trips", c_int64),
                ("memory_bytes", c_int64),
                ("instructions", c_int64)]


class TsCompileOptions(ctypes.Structure):
    _fields_ = [("num_partitions", c_int64),
                ("num_replicas", c_int64),
                ("hosts", c_int64),
                ("local_devices", c_int64),
                ("limits", ctypes.POINTER(TsLimits)),
                ("no_verify", c_bool),
                ("spmd", c_bool),
                ("dump_dir", c_char_p),
                ("link_gbps", ctypes.c_double),
                ("on_warning", ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_char_p)),
                ("warning_ctx", ctypes.c_void_p),
                ("auto_shard", c_bool),
                ("mesh", c_char_p),
                ("profile", c_char_p),
                ("donate", c_int32),
                ("sign_key", ctypes.c_void_p),
                ("sign_key_len", ctypes.c_size_t),
                ("host_cores", c_int64)]

# The type of TsCompileOptions.on_warning.
WarningFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_char_p)


class TsGradOptions(ctypes.Structure):
    _fields_ = [("wrt", c_char_p),
                ("loss", c_char_p),
                ("jvp", c_bool),
                ("sgd", ctypes.c_double),
                ("adam", ctypes.c_double),
                ("remat", c_char_p)]


class TsArray(ctypes.Structure):
    _fields_ = [("dtype", c_char_p),
                ("rank", c_int32),
                ("dims", ctypes.POINTER(c_int64)),
                ("data", c_void_p),
                ("nbytes", c_size_t)]


class TsArrayInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p),
                ("dtype", ctypes.c_char * 8),
                ("type", ctypes.c_char * 16),
                ("rank", c_int32),
                ("dims", c_int64 * TS_MAX_RANK),
                ("nbytes", c_size_t)]


class TsInput(ctypes.Structure):
    _fields_ = [("key", c_char_p),
                ("path", c_char_p),
                ("array", ctypes.POINTER(TsArray))]


# void (*on_error)(void *ctx, const TsDiag *d)
ON_ERROR = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(TsDiag))
ON_STEP = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)  # (ctx, const TsStepInfo *)


class TsTuning(ctypes.Structure):
    """How a run moves data (include/tessel.h): all zero, the defaults."""
    _fields_ = [("piece_bytes", c_int64),
                ("chunk_bytes", c_int64),
                ("pipeline_bytes", c_int64),
                ("copies_bytes", c_int64),
                ("stream_bound", c_int32),
                ("fusion", c_int32),
                ("fusion_block", c_int32),
                ("fail_mpi_after", c_int64),
                ("skip_collective_after", c_int64),
                ("fail_one_rank", c_bool),
                ("fail_rank", c_int32),
                ("openblas_num_threads_unset", c_bool),
                ("sgemm", c_int32)]


class TsRunOptions(ctypes.Structure):
    _fields_ = [("ninputs", c_int32),
                ("inputs", ctypes.POINTER(TsInput)),
                ("random", c_bool),
                ("seed", ctypes.c_uint64),
                ("steps", c_int64),
                ("ninfeeds", c_int32),
                ("infeeds", ctypes.POINTER(c_char_p)),
                ("stats", c_bool),
                ("load_seconds", ctypes.c_double),
                ("on_error", ON_ERROR),
                ("on_error_ctx", c_void_p),
                ("per_device", c_bool),
                ("one_device", c_bool),
                ("output_device", c_int64),
                ("on_step", ON_STEP),
                ("on_step_ctx", c_void_p),
                ("watch", c_char_p),
                ("limits", ctypes.POINTER(TsLimits)),
                ("heartbeat_seconds", ctypes.c_double),
                ("tuning", TsTuning),
                ("process_local", c_bool),
                ("zero_state", c_bool),
                ("nagree", c_int32),
                ("agree", c_void_p),
                ("on_agreed", c_void_p),
                ("on_agreed_ctx", c_void_p),
                ("stats_ops", c_int32)]


class TsStepInfo(ctypes.Structure):
    _fields_ = [("step", c_int64),
                ("steps", c_int64),
                ("seconds", ctypes.c_double),
                ("has_watched", c_bool),
                ("watched", ctypes.c_double)]


class TsDumpOptions(ctypes.Structure):
    _fields_ = [("format", c_char_p),
                ("nexpand", c_int32),
                ("expand", ctypes.POINTER(c_char_p)),
                ("graph_svg", c_char_p)]


PDIAG = ctypes.POINTER(TsDiag)
PP = ctypes.POINTER(c_void_p)  # TsModule **, TsPlan **, TsOutputs **
ST = ctypes.c_int              # TsStatus

# name: (restype, argtypes). Opaque handles are void pointers; strings the
# library returns for us to free are void pointers too (read with
# ctypes.string_at, then ts_free), so ctypes does not copy and lose them.
PROTOTYPES = {
    "ts_diag_format": (c_void_p, [PDIAG]),
    "ts_diag_clear": (None, [PDIAG]),
    "ts_free": (None, [c_void_p]),
    "ts_version": (c_char_p, []),
    "ts_shutdown": (None, []),
    "ts_limits_default": (TsLimits, []),
    "ts_limits_set": (ST, [ctypes.POINTER(TsLimits), c_char_p, PDIAG]),
    "ts_module_parse": (ST, [c_char_p, c_char_p, c_size_t, ctypes.POINTER(TsLimits), PP, PDIAG]),
    "ts_module_load_ex": (ST, [c_char_p, ctypes.POINTER(TsLimits), PP, PDIAG]),
    "ts_module_free": (None, [c_void_p]),
    "ts_module_name": (c_char_p, [c_void_p]),
    "ts_module_num_parameters": (c_int32, [c_void_p]),
    "ts_module_summary": (c_void_p, [c_void_p]),
    "ts_module_text": (c_void_p, [c_void_p]),
    "ts_module_is_plan": (c_bool, [c_void_p]),
    "ts_module_check_devices": (ST, [c_void_p, c_int64, c_int64, PDIAG]),
    "ts_add_gradients": (ST, [c_void_p, ctypes.POINTER(TsGradOptions), PP, PDIAG]),
    "ts_compile": (ST, [c_void_p, ctypes.POINTER(TsCompileOptions), PP, PDIAG]),
    "ts_plan_load": (ST, [c_char_p, ctypes.POINTER(TsLimits), PP, PDIAG]),
    "ts_plan_parse": (ST, [c_char_p, c_char_p, c_size_t, ctypes.POINTER(TsLimits), PP, PDIAG]),
    "ts_plan_open": (ST, [c_char_p, ctypes.POINTER(TsCompileOptions), PP, PDIAG]),
    "ts_plan_free": (None, [c_void_p]),
    "ts_plan_set_layout": (ST, [c_void_p, c_int64, c_int64, PDIAG]),
    "ts_plan_num_partitions": (c_int64, [c_void_p]),
    "ts_plan_num_replicas": (c_int64, [c_void_p]),
    "ts_plan_hosts": (c_int64, [c_void_p]),
    "ts_plan_local_devices": (c_int64, [c_void_p]),
    "ts_plan_num_clusters": (c_int32, [c_void_p]),
    "ts_plan_from_file": (c_bool, [c_void_p]),
    "ts_plan_file_text": (c_void_p, [c_void_p]),
    "ts_plan_memory_fit": (c_void_p, [c_void_p]),
    "ts_plan_explain": (c_void_p, [c_void_p]),
    "ts_plan_explain_json": (c_void_p, [c_void_p]),
    "ts_plan_save": (ST, [c_void_p, c_char_p, PDIAG]),
    "ts_plan_dump": (ST, [c_void_p, c_char_p, ctypes.POINTER(c_void_p), PDIAG]),
    "ts_plan_dump_ex": (ST, [c_void_p, ctypes.POINTER(TsDumpOptions), ctypes.POINTER(c_void_p), PDIAG]),
    "ts_plan_show": (ST, [c_void_p, c_char_p, ctypes.c_uint, ctypes.POINTER(c_void_p), PDIAG]),
    "ts_plan_why": (ST, [c_void_p, c_char_p, ctypes.POINTER(c_void_p), PDIAG]),
    "ts_plan_num_inputs": (c_int32, [c_void_p]),
    "ts_plan_num_outputs": (c_int32, [c_void_p]),
    "ts_plan_input_info": (ST, [c_void_p, c_int32, ctypes.POINTER(TsArrayInfo), PDIAG]),
    "ts_plan_output_info": (ST, [c_void_p, c_int32, ctypes.POINTER(TsArrayInfo), PDIAG]),
    "ts_outputs_count": (c_int32, [c_void_p]),
    "ts_outputs_num_devices": (c_int64, [c_void_p]),
    "ts_outputs_info": (ST, [c_void_p, c_int32, ctypes.POINTER(TsArrayInfo), PDIAG]),
    "ts_outputs_read": (ST, [c_void_p, c_int32, c_void_p, c_size_t, PDIAG]),
    "ts_outputs_summary": (c_void_p, [c_void_p]),
    "ts_outputs_stats": (c_char_p, [c_void_p]),
    "ts_outputs_free": (None, [c_void_p]),
    "ts_outputs_write": (ST, [c_void_p, c_char_p, PDIAG]),
    "ts_outputs_verify": (ST, [c_char_p, c_char_p, PDIAG]),
    "ts_output_dir_open": (ST, [c_char_p, ctypes.POINTER(c_void_p), PDIAG]),
    "ts_output_dir_make": (ST, [c_char_p, ctypes.POINTER(c_void_p), PDIAG]),
    "ts_output_dir_close": (None, [c_void_p]),
    "ts_plan_num_aliases": (c_int32, [c_void_p]),
    "ts_plan_alias": (ST, [c_void_p, c_int32, ctypes.POINTER(c_int32), ctypes.POINTER(c_int32), PDIAG]),
    "ts_plan_alias_leaves": (ST, [c_void_p, c_int32, ctypes.POINTER(c_int32), ctypes.POINTER(c_int32),
                                  ctypes.POINTER(c_int32), ctypes.POINTER(c_int32), PDIAG]),
    "ts_plan_input_key": (ST, [c_void_p, c_char_p, ctypes.POINTER(c_int32), ctypes.POINTER(c_int32), PDIAG]),
    "ts_plan_digest": (ST, [c_void_p, c_char_p, PDIAG]),
    "ts_input_sha256": (ST, [ctypes.POINTER(TsInput), c_char_p, PDIAG]),
    "ts_sha256": (ST, [c_char_p, c_size_t, c_char_p, PDIAG]),
    "ts_plan_run": (ST, [c_void_p, ctypes.POINTER(TsRunOptions), PP, PDIAG]),
    "ts_plan_run_reference": (ST, [c_void_p, ctypes.POINTER(TsRunOptions), PP, PDIAG]),
    "ts_run_reference": (ST, [c_void_p, ctypes.POINTER(TsRunOptions), PP, PDIAG]),
    "ts_plan_run_mpi": (ST, [c_void_p, c_void_p, ctypes.POINTER(TsRunOptions), PP, PDIAG]),
    "ts_devices_describe": (ST, [c_int32, c_char_p, ctypes.POINTER(c_void_p), PDIAG]),
}


def _candidates():
    """(where, path) pairs to try, in order (module docstring)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _install  # written by cmake --install only
        path = _install.LIBRARY
        if not os.path.isabs(path):
            path = os.path.normpath(os.path.join(here, path))
        yield "installed beside the module", path
    except ImportError:
        pass
    env = os.environ.get("TESSEL_LIBRARY")
    if env:
        yield "TESSEL_LIBRARY", env
    found = ctypes.util.find_library("tessel")
    if found:
        yield "ctypes.util.find_library", found


def load():
    """The loaded library (ctypes.CDLL) and its path; OSError saying what
    was tried when none loads."""
    tried = []
    for where, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s" % (where, e))
            continue
        missing = [n for n in PROTOTYPES if not hasattr(lib, n)]
        if missing:
            tried.append("%s: %s lacks %s" % (where, path, ", ".join(missing)))
            continue
        for name, (restype, argtypes) in PROTOTYPES.items():
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = argtypes
        return lib, path
    raise OSError("tessel: cannot load libtessel (set TESSEL_LIBRARY to the path of libtessel.so); tried: "
                  + ("; ".join(tried) if tried else "nothing: not installed beside the module, "
                     "TESSEL_LIBRARY unset, find_library('tessel') found nothing"))
