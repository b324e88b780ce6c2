"""Preload mode: hook an unmodified job (started by `tokentrace run -- python job.py`).

boot/sitecustomize.py calls install() right after torch is imported. install() adds one global
forward pre-hook; the first module whose forward runs is the root (`self`, one call per
token). At that moment the global hook removes itself and the per-site hooks go onto that
model, selected by TOKENTRACE_SITES (globs; default every module), with the outputs of
TOKENTRACE_SAVE sites streamed next to the trace file. The call already in progress is opened
by hand, so token 1 is that first call.

The shim (LD_PRELOAD) owns the session and the file: it was started in its constructor from
the TOKENTRACE_* environment, and it writes the file until the process exits. At Python exit
we add our rows (output shapes, saved tensors, escape locations) to that file. Without the
native extension, the pure-Python recorder writes the file itself (no kernels).
"""

import atexit
import os
import sys

import torch

from . import _loader, _store
from ._backend import get_backend
from ._errors import TokentraceError
from ._escapes import EscapeCounter
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


def _expand(pattern):
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or "0"
    return pattern.replace("%p", str(os.getpid())).replace("%r", rank)


def _select(env, names, default_all):
    text = os.environ.get(env, "").strip()
    if not text:
        return list(names) if default_all else []
    try:
        return select_module(*parse_env_list(text)).resolve(names, env)
    except TokentraceError as exc:
        _say(f"{exc}; hooking the root `self` only" if env == "TOKENTRACE_SITES"
             else f"{exc}; saving nothing")
        return []


def _attach(model, args):
    backend = get_backend()
    own_session = False
    if backend.name == "native":
        if not backend.active():
            _say("the native shim is not recording (run the job with `tokentrace run -- ...`); "
                 "no hooks installed")
            return
    else:
        path = _expand(os.environ.get("TOKENTRACE_OUT", "tokentrace-%p.sqlite"))
        _say(f"recording calls and tokens with the pure-Python recorder "
             f"({_loader.unavailable_reason()}); writing {path} at exit")
        backend.start(path, "off")
        own_session = True
    names = list(site_names(model))
    hooked = _select("TOKENTRACE_SITES", names, True)
    saved = _select("TOKENTRACE_SAVE", names, False)
    chosen = set(hooked) | set(saved) | {ROOT}
    hooked = [n for n in names if n in chosen]
    path = backend.out_path()
    sink = TensorSink(path) if saved else None
    on_cpu = not any(p.is_cuda for p in model.parameters())
    escapes = EscapeCounter(lambda: backend.current()[2],
                            backend.escape if on_cpu or backend.name == "python" else None)
    hooks = HookSet(backend, model, hooked, saved, sink)
    hooks.install(running_root_args=args)
    escapes.install()
    atexit.register(_finish, backend, hooks, escapes, sink, own_session)


def _finish(backend, hooks, escapes, sink, own_session):
    try:
        escapes.remove()
        path = backend.out_path()
        outputs = backend.take_outputs()
        rows = sink.close() if sink is not None else []
        if own_session:
            backend.stop()
        else:
            backend.flush()
        _store.write_python_rows(path, outputs, rows, escapes.rows(),
                                 {"python_save_errors": hooks.save_errors})
    except Exception as exc:
        _say(f"could not add output shapes/saved tensors to the trace: {exc}")
