"""tt.trace, tt.record, tt.load: run a model with the recording hooks and open the result."""

import atexit
import itertools
import json
import os
import shutil
import sys
import tempfile
import warnings

import torch

from . import _store
from ._backend import check_kernel_mode, get_backend
from ._errors import fail
from ._escapes import EscapeCounter, warn_once
from ._inputs import InputRecorder
from ._naming import ROOT, site_names
from ._prompt import is_text, tokenize
from ._selectors import as_selector
from ._session import HookSet
from ._sink import TensorSink
from ._trace import Recording, Trace, load  # noqa: F401 (tt.load, defined without torch)

_counter = itertools.count(1)
_tmpdir = None  # (pid, directory) of this process's temporary traces


def _remove_tmpdir(pid, path):
    if os.getpid() == pid:  # not from a forked child: the directory is its parent's
        shutil.rmtree(path, ignore_errors=True)


def _default_path(kind):
    """A file in a temporary directory of this process, removed when the process exits
    (pass out= to keep a trace): a notebook or a long job tracing many times must not fill
    the disk with traces nobody asked to keep."""
    global _tmpdir
    if _tmpdir is None or _tmpdir[0] != os.getpid():
        path = tempfile.mkdtemp(prefix="tokentrace-")
        _tmpdir = (os.getpid(), path)
        atexit.register(_remove_tmpdir, os.getpid(), path)
    return os.path.join(_tmpdir[1], f"{kind}-{os.getpid()}-{next(_counter)}.sqlite")


def _out_path(out, kind):
    if out is None:
        return _default_path(kind)
    if not isinstance(out, (str, os.PathLike)):
        fail(f"out must be a file path (str or os.PathLike), got {type(out).__name__}")
    path = os.path.abspath(os.fspath(out))
    problem = _store.check_writable(path)
    if problem:
        fail(f"cannot write the trace to {path}: {problem}; pass out= a path in a writable "
             f"directory")
    return path


def _model_of(fn, model):
    if model is not None:
        if not isinstance(model, torch.nn.Module):
            fail(f"model= must be a torch.nn.Module, got {type(model).__name__}")
        return model
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return owner
    fail(f"cannot tell which model {getattr(fn, '__qualname__', fn)!r} runs; pass the model, "
         f"one of its bound methods (model.generate), or model=...")


def _is_compiled(fn, model):
    """True for torch.compile'd models and functions (what TorchDynamo would run)."""
    # Compiling imports TorchDynamo, so without it in sys.modules nothing here is compiled.
    # Importing it just to ask would cost the first tt.trace of a process 1-2 s.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    OptimizedModule = getattr(eval_frame, "OptimizedModule", None)
    if OptimizedModule is None:
        return False
    owners = (fn, getattr(fn, "__self__", None), model)
    return (any(isinstance(o, OptimizedModule) for o in owners)
            or hasattr(fn, "_torchdynamo_orig_callable")
            or getattr(model, "_compiled_call_impl", None) is not None)


def _warn_if_compiled(fn, model):
    if _is_compiled(fn, model):
        warnings.warn(
            "tokentrace: tracing a torch.compile'd model runs it eagerly (the recording "
            "wrappers are opaque to TorchDynamo), and TorchDynamo keeps running it eagerly "
            "after the trace; call torch._dynamo.reset() afterwards to compile it again, or "
            "trace the model before compiling it", RuntimeWarning, stacklevel=4)


def _call_args(model, inputs, input_kwargs, tokenizer):
    if input_kwargs is None:
        input_kwargs = {}
    if not isinstance(input_kwargs, dict):
        fail(f"input_kwargs must be a dict of keyword arguments, got {type(input_kwargs).__name__}")
    kwargs = dict(input_kwargs)
    if inputs is None:
        return (), kwargs
    if is_text(inputs):
        encoded = tokenize(model, inputs, tokenizer)
        encoded.update(kwargs)
        return (), encoded
    if isinstance(inputs, dict):
        merged = dict(inputs)
        merged.update(kwargs)
        return (), merged
    if isinstance(inputs, (list, tuple)):
        return tuple(inputs), kwargs
    return (inputs,), kwargs


def _resolve(model, sites, save, default_all, inputs_of=None):
    """(hooked sites, saved sites, sites whose inputs are recorded: the root's always)."""
    names = list(site_names(model))
    saved = as_selector(save, "save=").resolve(names, "save=") if save is not None else []
    if sites is None:
        hooked = names if default_all else [ROOT]
    else:
        hooked = as_selector(sites, "sites=").resolve(names, "sites=")
    inputs = set(as_selector(inputs_of, "inputs_of=").resolve(names, "inputs_of=")
                 if inputs_of is not None else []) | {ROOT}
    chosen = set(hooked) | set(saved) | inputs
    return [n for n in names if n in chosen], saved, inputs


def _run(kind, fn, model, args, kwargs, hooked, saved, inputs, kernels, out, shard_bytes,
         intervene):
    kernels = check_kernel_mode(kernels)
    path = _out_path(out, kind)
    backend = get_backend()
    bound_edits = intervene.hooks_for(model) if intervene is not None else None
    sink = TensorSink(path, shard_bytes) if saved else None
    recorder = InputRecorder(backend.current, sink, backend.settled_path)
    on_cpu = not any(p.is_cuda for p in itertools.islice(model.parameters(), 1))
    report = backend.escape if on_cpu else None
    escapes = EscapeCounter(lambda: backend.current()[2], report)
    path = backend.start(path, kernels)
    hooks = HookSet(backend, model, hooked, saved, sink, inputs, recorder)
    try:
        if bound_edits is not None:
            bound_edits.install()
        hooks.install()
        escapes.install()
        try:
            fn(*args, **kwargs)
        finally:
            escapes.remove()
            hooks.remove()
            if bound_edits is not None:
                bound_edits.remove()
    finally:
        status = backend.kernels_status
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the last kernels' records reach the file before stop
        backend.stop()
        rows = sink.close() if sink is not None else []
        if sink is not None and sink.failed:
            warnings.warn(f"tokentrace: {sink.failed} saved outputs could not be written to "
                          f"{sink.directory} ({sink.errors[0]}); they are counted in the trace's "
                          f"losses (save_failed)", RuntimeWarning)
        meta = {"python_save_errors": hooks.save_errors, "kernels_status": status,
                "inputs_of": json.dumps(sorted(inputs))}
        _store.write_python_rows(path, rows, escapes.rows(), meta,
                                 {"save_failed": hooks.save_errors,
                                  "inputs_failed": hooks.input_errors},
                                 recorder.table_rows(sink.files if sink is not None else {}))
    result = (Recording if kind == "record" else Trace)(path)
    _warn_escapes(result, escapes, on_cpu)
    return result


def _warn_escapes(result, escapes, python_counts):
    tokens = len(result.tokens)
    if python_counts:
        total = sum(escapes.counts.values())
    else:  # CUDA with the shim: the real synchronizing reads, per token
        total = sum(t.escapes for t in result.tokens)
    by_loc = {}
    for (_, loc), n in escapes.counts.items():
        by_loc[loc] = by_loc.get(loc, 0) + n
    warn_once(total, tokens, sorted(by_loc.items(), key=lambda kv: -kv[1]), stacklevel=5)


def trace(fn, inputs=None, input_kwargs=None, *, save=None, sites=None, kernels="summary",
          out=None, tokenizer=None, model=None, intervene=None, shard_mb=64, inputs_of=None):
    """Runs fn(inputs, **input_kwargs) with hooks on every module (or `sites=`) and returns a Trace.

    fn: a model, or a bound method of one (model.generate). inputs: a tensor, a tuple of
    positional arguments, a dict of keyword arguments, or text (tokenized with `tokenizer=`
    or the tokenizer saved next to the model). save=: sites whose output tensors are kept
    (trace["site:k"].out is then the tensor; for sites whose inputs are recorded,
    .inputs holds tensors too). inputs_of=: sites whose inputs (every tensor and value each call
    was given, by path) are recorded besides the root's, which always are.
    kernels: 'off' | 'summary' | 'full' | 'sample:N'.
    out: the SQLite file (default: a temporary file; see trace.path).
    """
    if not callable(fn):
        fail(f"trace() needs a callable: a model or a bound method such as model.generate; "
             f"got {type(fn).__name__}")
    model = _model_of(fn, model)
    _warn_if_compiled(fn, model)
    hooked, saved, recorded = _resolve(model, sites, save, True, inputs_of)
    _check_intervene(intervene)
    args, kwargs = _call_args(model, inputs, input_kwargs, tokenizer)
    return _run("trace", fn, model, args, kwargs, hooked, saved, recorded, kernels, out,
                int(shard_mb * (1 << 20)), intervene)


def record(model, inputs=None, save=None, generate_kwargs=None, *, sites=None,
           kernels="summary", out=None, tokenizer=None, intervene=None, shard_mb=64,
           inputs_of=None):
    """Runs model.generate(inputs, **generate_kwargs), recording only the `save=` sites.

    Returns a Recording: rec[site] (all steps), rec["site:k"].out (the tensor), rec.steps.
    Saved tensors stream to safetensors shards next to the SQLite file, so memory stays
    bounded by `shard_mb` however many steps run. inputs_of=: as for trace (the inputs of
    saved sites stream to the shards too).
    """
    if isinstance(model, torch.nn.Module):
        fn = getattr(model, "generate", None)
        if fn is None:
            fail(f"record() runs model.generate, and {type(model).__name__} has no generate; "
                 f"use tt.trace(model, inputs, save=...) for a plain forward")
    elif callable(model):
        fn = model
        model = _model_of(fn, None)
    else:
        fail(f"record() needs a model with generate (or model.generate); got "
             f"{type(model).__name__}")
    if save is None:
        fail("record() needs save=: the sites to keep, e.g. save=tt.module('model.layers.*.mlp')")
    _warn_if_compiled(fn, model)
    hooked, saved, recorded = _resolve(model, sites if sites is not None else save, save,
                                       False, inputs_of)
    _check_intervene(intervene)
    if generate_kwargs is not None and not isinstance(generate_kwargs, dict):
        fail(f"generate_kwargs must be a dict, got {type(generate_kwargs).__name__}")
    args, kwargs = _call_args(model, inputs, generate_kwargs, tokenizer)
    return _run("record", fn, model, args, kwargs, hooked, saved, recorded, kernels, out,
                int(shard_mb * (1 << 20)), intervene)


def _check_intervene(intervene):
    if intervene is None:
        return
    from .edits import EditSpec
    if not isinstance(intervene, EditSpec):
        fail(f"intervene= takes an edit spec from tt.when(...), got {type(intervene).__name__}")


