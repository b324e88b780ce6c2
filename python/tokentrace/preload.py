"""Preload mode: hook an unmodified job (started by `tokentrace run -- python job.py`).

boot/sitecustomize.py calls install() right after torch is imported. install() adds one global
forward pre-hook; the first module whose forward runs is the root (`self`, one call per
token). At that moment the global hook removes itself and the per-site hooks go onto that
model, selected by TOKENTRACE_SITES (globs; default every module), with the outputs of
TOKENTRACE_SAVE sites streamed next to the trace file. The call already in progress is opened
by hand, so token 1 is that first call.

The shim (LD_PRELOAD) owns the session and the file: it was started in its constructor from
the TOKENTRACE_* environment, and it writes the file until the process exits. At Python exit
we add our rows (saved tensors, escape locations, the root's inputs) to that file. Without the
native extension nothing is recorded (one line on stderr says why and how to build it).

TOKENTRACE_PATCHES (`tokentrace run --patches spec.json`) names a JSON edit spec
(tokentrace.edits.load_spec): its edits go onto the same root as forward hooks, exactly as
spec.bind(model) installs them for one run (here the run is the whole process: token k is
the k-th root call). They apply with or without recording; with a trace file, its meta gets
"patch_fires" = {"num_fires": N, "per_rule": [...], "spec": path} as JSON at exit.
"""

import atexit
import json
import os
import sys

import torch

from . import _collectives as collectives
from . import _compiled_join, _store
from ._backend import get_backend
from ._errors import TokentraceError
from ._escapes import EscapeCounter
from ._inputs import InputRecorder
from ._naming import ROOT, site_names
from ._selectors import module as select_module
from ._selectors import parse_env_list
from ._session import HookSet
from ._sink import TensorSink

_state = {"handle": None, "done": False}


def _say(message):
    print(message if message.startswith("tokentrace:") else "tokentrace: " + message,
          file=sys.stderr)


def install():
    if _state["handle"] is not None or _state["done"]:
        return
    from torch.nn.modules.module import register_module_forward_pre_hook
    _state["handle"] = register_module_forward_pre_hook(_first_call)


def _first_call(module, args):
    if _state["done"]:
        return None
    _state["done"] = True
    _state["handle"].remove()
    try:
        _attach(module, args)
    except Exception as exc:  # never crash the traced job
        _say(f"hooks not installed on {type(module).__name__}: {exc}")
    return None


def _select(env, names, default_all):
    text = os.environ.get(env, "").strip()
    if not text:
        return list(names) if default_all else []
    try:
        return select_module(*parse_env_list(text)).resolve(names, env)
    except TokentraceError as exc:
        _say({"TOKENTRACE_SITES": f"{exc}; hooking the root `self` only",
              "TOKENTRACE_INPUTS": f"{exc}; recording the root's inputs only"}.get(
                  env, f"{exc}; saving nothing"))
        return []


def _attach(model, args):
    edits = _attach_edits(model, args)
    if not _attach_recording(model, args) and edits is not None:
        atexit.register(_say_fires, edits)


def _attach_edits(model, args):
    """TOKENTRACE_PATCHES: the JSON edit spec, installed on the root as a bound model's
    forward hooks (counting from the first root call, the one in progress). A bad spec stops
    the job before the model's first forward runs (exit status 2): running without the edits
    the user asked for would give results that look right and are not."""
    spec_path = os.environ.get("TOKENTRACE_PATCHES", "").strip()
    if not spec_path:
        return None
    from .edits import load_spec
    try:
        device = next(iter(model.parameters()), torch.empty(0)).device
        hooks = load_spec(spec_path, device=device).hooks_for(model)
        hooks.install()
    except TokentraceError as exc:
        message = str(exc).removeprefix("tokentrace: ")
        _say(f"TOKENTRACE_PATCHES: {message}; stopping the job (fix the spec, or unset "
             f"TOKENTRACE_PATCHES to run without edits)")
        sys.stderr.flush()
        os._exit(2)
    hooks._root_pre(model, args)  # the root call in progress is token 1
    _state["edits"] = hooks
    return hooks


def _attach_recording(model, args):
    """The recording hooks; False when nothing records (no extension, or the shim is off)."""
    try:
        backend = get_backend()
    except TokentraceError as exc:
        _say(f"{exc}; nothing is recorded")
        return False
    if not backend.active():
        _say("the native shim is not recording (run the job with `tokentrace run -- ...`); "
             "no recording hooks installed")
        return False
    names = list(site_names(model))
    hooked = _select("TOKENTRACE_SITES", names, True)
    saved = _select("TOKENTRACE_SAVE", names, False)
    inputs = set(_select("TOKENTRACE_INPUTS", names, False)) | {ROOT}
    chosen = set(hooked) | set(saved) | inputs
    hooked = [n for n in names if n in chosen]
    sink = TensorSink(backend.settled_path) if saved else None
    on_cpu = not any(p.is_cuda for p in model.parameters())
    # The root's inputs, and TOKENTRACE_INPUTS sites', as tt.trace records them (of the first
    # root call, its positional arguments only: it was already running when the hooks went on).
    recorder = InputRecorder(backend.current, sink, backend.settled_path)
    hooks = HookSet(backend, model, hooked, saved, sink, inputs, recorder)
    hooks.install(running_root_args=args)
    if hooks.not_hooked:
        _say(f"{len(hooks.not_hooked)} modules run inside a compiled region and are not "
             f"recorded; the compiled module's own calls are, so it runs as compiled")
    ops = _start_ops(backend, on_cpu)  # then the op observer reports a CPU model's host reads
    _state["ops"] = ops
    escapes = EscapeCounter(lambda: backend.current()[2],
                            backend.escape if on_cpu and not ops else None)
    escapes.install()
    collectives.install(backend)  # c10d calls as sites of their own: wait, not work
    atexit.register(_finish, backend, hooks, escapes, sink, recorder, sorted(inputs))
    return True


def _start_ops(backend, on_cpu):
    """TOKENTRACE_OPS=1 (`tokentrace run --ops`): op records from here to the end of the
    process (from inside the first root call, whose earlier ops are not recorded)."""
    value = os.environ.get("TOKENTRACE_OPS", "").strip()
    if value in ("", "0"):
        return False
    if value != "1":
        _say(f"TOKENTRACE_OPS={value!r} is not 1 or 0; ATen ops are not recorded")
        return False
    from . import _ops
    try:
        _ops.start(backend, host_reads=on_cpu)
    except TokentraceError as exc:
        _say(f"{exc}; ATen ops are not recorded")
        return False
    return True


def _patch_meta():
    edits = _state.get("edits")
    if edits is not None:
        report = edits.report()
        return {"patch_fires": json.dumps({
            "num_fires": report.num_fires, "per_rule": [n for _, n in report.per_rule],
            "spec": os.path.abspath(os.environ.get("TOKENTRACE_PATCHES", "").strip())})}
    return {}


def _say_fires(edits):
    _say(f"TOKENTRACE_PATCHES: {edits.report().num_fires} edit fires (no trace file to note "
         f"them in)")


def _finish(backend, hooks, escapes, sink, recorder, inputs):
    try:
        escapes.remove()
        # Python's atexit runs before CUDA's own teardown: wait for the device here, so this
        # flush hands over every GPU record while CUDA is still up (the shim's final stop,
        # from the C atexit list, may come after the runtime has torn the context down).
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        path = backend.settled_path()
        rows = sink.close() if sink is not None else []
        meta = {"python_save_errors": hooks.save_errors, "inputs_of": json.dumps(inputs)}
        meta.update(_patch_meta())
        _store.write_python_rows(path, rows, escapes.rows(), meta,
                                 {"save_failed": hooks.save_errors,
                                  "inputs_failed": hooks.input_errors},
                                 recorder.table_rows(sink.files if sink is not None else {}))
        if _state.get("ops"):
            _compiled_join.write(path)  # compiled kernels' modules, and what they miss
    except Exception as exc:
        _say(f"could not add output shapes/saved tensors to the trace: {exc}")
