"""tt.trace, tt.record: run a model with the recording hooks and open the result (tt.load is
_read/trace.py's)."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import tempfile
import warnings

import torch

from ._backend import check_kernel_mode, get_backend
from ._common import (
    HALT,
    ROOT,
    Halted,
    as_selector,
    check_writable,
    names_ops,
    op_selection,
    where,
)
from ._compat import capture_with, chunked, halt_rule, run_options, storage_out
from ._compiled import compiled_entry, watch_compile
from ._edit import check_edits, remember_labels
from ._errors import TokentraceError, fail
from ._file import FileError
from ._read import Recording, Trace
from ._record import (
    Attachment,
    FirstRoot,
    RootChoice,
    find_tokenizer,
    is_text,
    op_records,
    selection,
    sites_of,
    tokenize,
    warn_if_doubtful,
    warn_once,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ._common import SiteSelector
    from ._edit import EditSpec
    from .options import CaptureOptions, EpisodeSpec

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
    problem = check_writable(path)
    if problem:
        fail(f"cannot write the trace to {path}: {problem}; pass out= a path in a writable "
             f"directory")
    return path


def _model_of(fn, model):
    if model is not None:
        if not isinstance(model, torch.nn.Module):
            fail(f"model= must be a torch.nn.Module, got {type(model).__name__}")
        if getattr(fn, "_orig_mod", None) is model:  # torch.compile(model): its entry is fn
            return fn
        return model
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return owner
    return None  # any other callable: the first module it calls (_record/attach.py)


def _warn_if_compiled_function(fn, model):
    """A compiled function that calls an uncompiled model: the recording wrappers would run
    inside the compiled region, where they are opaque to TorchDynamo."""
    if not hasattr(fn, "_torchdynamo_orig_callable"):
        return
    if model is not None and compiled_entry(model) is not None:
        return
    warnings.warn(
        "tokentrace: tracing a torch.compile'd function that calls an uncompiled model puts "
        "the recording wrappers inside the compiled region: TorchDynamo breaks the graph at "
        "each module call (and may keep doing so after the trace, until "
        "torch._dynamo.reset()); compile the model instead (torch.compile(model) or "
        "model.compile()): its calls are then recorded from outside, and it runs compiled",
        RuntimeWarning, stacklevel=4)


def _call_args(model, inputs, input_kwargs, tokenizer):
    if input_kwargs is None:
        input_kwargs = {}
    if not isinstance(input_kwargs, dict):
        fail(f"input_kwargs must be a dict of keyword arguments, got {type(input_kwargs).__name__}")
    kwargs = dict(input_kwargs)
    if inputs is None:
        return (), kwargs
    if is_text(inputs) and model is None:
        fail("text inputs are tokenized with the model's tokenizer, and a plain function does "
             "not say which model it runs; pass model=..., tokenizer=..., or token ids")
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


def _selector(sites, save, default_all, inputs_of):
    """select(names) -> (hooked, saved, inputs) for a list of site names, checked at once
    when the model is known."""
    return lambda names: _resolve(names, sites, save, default_all, inputs_of)


def _resolve(names, sites, save, default_all, inputs_of=None):
    """(hooked sites, saved sites, sites whose inputs are recorded: the root's always).
    An op selector in sites= or save= hooks the modules it needs to be decided (those of
    tt.in_module), besides the root, whose calls number the ops."""
    needed = set()
    saved = []
    if save is not None:
        chosen = as_selector(save, "save=")
        saved = chosen.resolve(names, "save=")
        needed |= chosen.needs(names, "save=")
    if sites is None:
        hooked = names if default_all else [ROOT]
    else:
        chosen = as_selector(sites, "sites=")
        hooked = chosen.resolve(names, "sites=")
        needed |= chosen.needs(names, "sites=")
    if needed:
        hooked = [n for n in names if n in needed or n in hooked]
    inputs = []
    if inputs_of is not None:
        chosen = as_selector(inputs_of, "inputs_of=")
        if chosen.names_ops:
            fail(f"inputs_of={chosen!r} selects ops; inputs are recorded for module calls: "
                 f"pass tt.module(...)")
        inputs = chosen.resolve(names, "inputs_of=")
    return selection(names, hooked, saved, inputs)


def _root_given(model, how, kwargs):
    """The RootChoice of a model the caller named, with the assistant_model= it generates
    with (assisted generation), or None when fn is to find its model (FirstRoot)."""
    if model is None:
        return None
    assistant = kwargs.get("assistant_model")
    if not isinstance(assistant, torch.nn.Module) or assistant is model:
        assistant = None
    return RootChoice(model, how, model, assistant)


def _ops_for(ops, sites, save):
    """ops= as given, or True when sites= or save= selects ops (tt.func, tt.in_module, ...):
    op records are on for that run."""
    return op_records.check(ops) or names_ops(save, "save=") or names_ops(sites, "sites=")


def _default_ops(ops):
    """tt.trace's ops=: None (the default) is on, as TorchLens records every op of a trace,
    where the torch ops library that records them loads; where it does not, a trace of module
    calls, said once (ops=True asks for them and fails there; ops=False turns them off)."""
    if ops is not None:
        return ops
    problem = op_records.unavailable()
    if problem:
        warnings.warn(f"tokentrace: op records are off for this trace (module calls only): "
                      f"{problem}; pass ops=False to say so and not be told", RuntimeWarning,
                      stacklevel=3)
        return False
    return True


def _run(kind, fn, root, args, kwargs, select, kernels, out, shard_bytes, edits,
         ops=False, op_save=None, tokenizer=None, with_output=False, halting=False):
    """Runs fn with the recording on; root None: attach to what FirstRoot chooses.
    select(names) -> (hooked, saved, inputs); op_save: save='s op selector, or None.
    with_output: (fn's return value, the result). halting: a halt= rule is among the edits;
    its Halted ends the run early (the result's `halted` is then True, the output None)."""
    unwatch = HALT.watch() if halting else None
    try:
        with _session(kind, fn, root, select, kernels, out, shard_bytes, edits, ops,
                      op_save, tokenizer) as box:
            try:
                box["output"] = fn(*args, **kwargs)  # generate's: the last token's ids
            except Halted:
                pass
        halted = halting and (HALT.fired or HALT.pending)
    finally:
        if unwatch is not None:
            unwatch()
            HALT.pending = HALT.fired = False  # never left asking a later run to end
    result = box["result"]
    result.halted = halted
    return (box.get("output"), result) if with_output else result


# Frames between the session's code after its yield and the user's: the generator,
# contextlib's __exit__, the function that holds the `with` (_run, or Recorder._finish), and its
# caller (tt.trace, tt.record, or Recorder.__exit__).
_AFTER_YIELD = 4


@contextlib.contextmanager
def _session(kind, fn, root, select, kernels, out, shard_bytes, edits, ops=False,
             op_save=None, tokenizer=None):
    """The recording on for the body of the `with`; box["result"] is the Trace (or Recording)
    after it. fn: what runs in it, for the root's choice and the errors (None: the body only
    calls the root itself)."""
    kernels = check_kernel_mode(kernels)
    path = _out_path(out, kind)
    backend = get_backend()
    with op_records.ring_for_ops(backend, ops):
        path = backend.start(path, kernels)
    attached = Attachment(backend, path, select, shard_bytes=shard_bytes, edit_spec=edits,
                          ops=ops, op_save=op_save, tokenizer=tokenizer)
    finder = None
    box = {}
    # A compiled __call__ the job takes before the model is found (generate takes it before
    # its prefill) is recorded from outside when it runs (_compiled/call.py).
    unwatch = watch_compile()
    try:
        try:
            if root is not None:
                attached.attach(root)
            else:
                finder = FirstRoot(attached.attach)
            attached.escapes.install()
            yield box
        finally:
            if finder is not None:
                finder.remove()
            try:
                attached.detach()
            finally:
                unwatch()  # after detach: op records' torch.compile wrapper went on over it
    finally:
        status = backend.kernels_status
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the last kernels' records reach the file before stop
        # Our last rows go to the writer before the stop, whose final write takes them. A
        # stop that fails (a full disk) after the run: the file has what fitted and counts the
        # rest; the caller keeps the trace and is told.
        ending_error = None
        if "output" in box and attached.model is not None:
            attached.note_output(attached.model, box["output"])
        try:
            attached.hand_rows(path, {"kernels_status": status})
        except (TokentraceError, OSError, FileError) as exc:
            ending_error = exc
        try:
            backend.stop()
        except TokentraceError as exc:
            ending_error = ending_error or exc
    user = _AFTER_YIELD + 1  # the stacklevel of a warning about the user's call
    if attached.model is None:
        fail(f"{getattr(fn, '__qualname__', fn)!r} called no torch.nn.Module, so there was "
             f"no model to trace; pass a function that runs the model, or model=...")
    if root is None:
        warn_if_doubtful(fn, attached.model, user + 1, attached.root.how)
    not_hooked = attached.not_hooked_message()
    if not_hooked:
        warnings.warn(not_hooked, RuntimeWarning, stacklevel=user)
    if attached.edits is not None:
        attached.edits.warn_unfired_labels(user)
    try:
        result = (Recording if kind == "record" else Trace)(path)
    except TokentraceError:
        if ending_error is None:
            raise
        fail(str(ending_error))  # nothing readable was left
    if attached.ops:  # its op labels, once read, number a later edit's by label
        result.state.on_labels = remember_labels(attached.model)
    if attached.edits is not None and attached.ops and attached.edits.numbered_labels:
        read = {(s.root, s.raw_step): s.layer_label
                for s in result.find_sites(where(lambda op: True))}
        attached.edits.warn_label_drift(read, user)
    # The file refused writes: at the stop (ending_error), or in a drain while the job ran
    # (said on stderr then; counted in the file's write_failed_* losses).
    refused = sum(n for kind, n in result.losses.items() if kind.startswith("write_failed"))
    if ending_error is not None or refused:
        message = (str(ending_error).removeprefix("tokentrace: ") if ending_error is not None
                   else f"{refused} rows were refused while it ran")
        counted = (", and its losses count the rest" if result.losses
                   else "; what is missing is not counted in it")
        warnings.warn(f"tokentrace: the run finished but its trace could not be written whole "
                      f"({message}); {path} has what fitted{counted}", RuntimeWarning,
                      stacklevel=user)
    _warn_escapes(result, attached.escapes, attached.on_cpu, user + 2)
    box["result"] = result


def _warn_escapes(result, escapes, python_counts, stacklevel):
    tokens = len(result.tokens)
    if python_counts:
        total = sum(escapes.counts.values())
    else:  # CUDA with the shim: the real synchronizing reads, per token
        total = sum(t.escapes for t in result.tokens)
    by_loc = {}
    for (_, loc), n in escapes.counts.items():
        by_loc[loc] = by_loc.get(loc, 0) + n
    warn_once(total, tokens, sorted(by_loc.items(), key=lambda kv: -kv[1]),
              stacklevel=stacklevel)


def trace(fn: Callable[..., Any], inputs: Any = None,
          input_kwargs: dict[str, Any] | None = None, *, save: SiteSelector | None = None,
          sites: SiteSelector | None = None, kernels: str | None = None,
          out: str | os.PathLike[str] | None = None, tokenizer: Callable[..., Any] | None = None,
          model: torch.nn.Module | None = None, edits: EditSpec | None = None,
          shard_mb: float = 64, inputs_of: SiteSelector | None = None,
          ops: bool | None = None,
          intervene: EditSpec | None = None, capture: CaptureOptions | None = None,
          episode: EpisodeSpec | None = None, chunk_size: int | None = None,
          chunk_paths: Any = None, **capture_fields: Any) -> Trace:
    """Runs fn(inputs, **input_kwargs) with hooks on every module (or `sites=`) and returns a Trace.

    fn: a model, a bound method of one (model.generate), or any function that calls a model
    (then the first module it calls is the model, as with `tokentrace run`). inputs: a tensor, a
    tuple of positional arguments, a dict of keyword arguments, or text (tokenized with `tokenizer=`
    or the tokenizer saved next to the model). save=: sites whose output tensors are kept
    (trace["site:k"].out is then the tensor; for sites whose inputs are recorded,
    .inputs holds tensors too). inputs_of=: sites whose inputs (every tensor and value each call
    was given, by path) are recorded besides the root's, which always are.
    kernels: 'off' | 'summary' | 'full' | 'sample:N'; None (the default): TOKENTRACE_KERNELS,
    else 'summary'.
    out: the SQLite file (default: a temporary file; see trace.path).
    ops: op records, on by default as in TorchLens (ops=False: module calls only): every ATen
    op is a call inside its module's call (trace['site:k'].ops), labelled as TorchLens labels
    it (trace["relu_1_2"], trace.find_sites(tt.func("relu"))); an op selector in save= keeps
    those ops' outputs (trace["relu_1_2"].out).
    edits=: an edit spec (tt.when(...)) applied during the run (intervene=: its deprecated name).
    TorchLens's capture=tt.options.CaptureOptions(...), episode=tt.options.EpisodeSpec(...) and
    chunk_size= (a model's forward run once per chunk of its batch, one token each; chunk_paths=
    the inputs to split) are mapped onto these (docs/from-torchlens.md); CaptureOptions fields
    are also taken as keyword arguments (capture_container_structure=True).
    """
    if not callable(fn):
        fail(f"trace() needs a callable: a model or a bound method such as model.generate; "
             f"got {type(fn).__name__}")
    out = storage_out(capture_fields, out, "trace")
    halt = capture_fields.pop("halt", None)
    stop = halt_rule(halt, "trace")
    capture = capture_with(capture, capture_fields, "trace")
    edits = check_edits(edits, intervene)
    again = dict(save=save, sites=sites, kernels=kernels, tokenizer=tokenizer, model=model,
                 edits=edits, shard_mb=shard_mb, inputs_of=inputs_of, ops=ops, capture=capture,
                 episode=episode, chunk_size=chunk_size, chunk_paths=chunk_paths)
    if halt is not None:
        again["halt"] = halt
    options = run_options(capture, episode, save, model, "trace")
    save, model = options.save, options.model
    if stop is not None:  # halt=: its rule after the edits', which it ends the run after
        edits = stop if edits is None else edits + stop
    how = "model=" if model is not None else "the model traced"
    model = _model_of(fn, model)
    _warn_if_compiled_function(fn, model)
    select = _selector(sites, save, True, inputs_of)
    if is_text(inputs) and tokenizer is None and model is not None:
        tokenizer = find_tokenizer(model)  # the prompt's, and the tokens' text
    args, kwargs = _call_args(model, inputs, input_kwargs, tokenizer)
    root = _root_given(model, how, kwargs)
    if chunk_size is not None or chunk_paths is not None:
        fn, _ = chunked(fn, model, args, kwargs, chunk_size, chunk_paths)
        args, kwargs = (), {}
    if root is not None:  # bad selectors fail before anything runs
        select(list(sites_of(root.model, root.assistant)))
    with options.around_run():
        output, result = _run("trace", fn, root, args, kwargs, select, kernels, out,
                              int(shard_mb * (1 << 20)), edits,
                              _ops_for(_default_ops(ops), sites, save),
                              op_selection(save, "save="), tokenizer, with_output=True,
                              halting=stop is not None)
    options.check_steps(result, 2)
    _remember(result, fn, input_kwargs, again, episode, model)
    if episode is not None:
        result._episode["step_outputs"] = _step_outputs(output, result.num_tokens,
                                                        episode.step_axis)
    return result


def _remember(result, fn, input_kwargs, again, episode, model):
    """What trace.run() reruns (the call's arguments) and what trace.annotations' header
    says of an episode."""
    def rerun(target, inputs, kwargs):
        given = dict(again)
        if target is not fn and isinstance(target, torch.nn.Module):
            given["model"] = None  # the model handed to run() is the root
        return trace(target, inputs, kwargs if kwargs is not None else input_kwargs, **given)
    result._capture = (fn, {"rerun": rerun})
    if episode is not None:
        name = type(model).__name__ if model is not None else "self"
        result._episode = {"stepped_module": name, "n_steps": episode.n_steps}


def _step_outputs(output, steps, axis):
    """TorchLens's per-step evidence of an episode ("tokens"): the last `steps` positions of
    the root's integer output along `axis`, one a step (a list of the batch's ids each); None
    where the output is no such tensor."""
    if not isinstance(output, torch.Tensor) or output.is_floating_point() or output.dim() == 0:
        return None
    if not isinstance(axis, int) or not -output.dim() <= axis < output.dim():
        return None
    n = output.shape[axis]
    if steps < 1 or n < steps:
        return None
    return [output.select(axis, n - steps + i).tolist() for i in range(steps)]


def record(fn: torch.nn.Module | Callable[..., Any] | None = None, inputs: Any = None,
           save: SiteSelector | None = None, generate_kwargs: dict[str, Any] | None = None, *,
           model: torch.nn.Module | None = None,
           sites: SiteSelector | None = None, kernels: str | None = None,
           out: str | os.PathLike[str] | None = None,
           tokenizer: Callable[..., Any] | None = None, edits: EditSpec | None = None,
           shard_mb: float = 64, inputs_of: SiteSelector | None = None, ops: bool = False,
           intervene: EditSpec | None = None,
           input_kwargs: dict[str, Any] | None = None,
           capture: CaptureOptions | None = None, return_output: bool = False,
           **capture_fields: Any) -> Any:
    """Runs fn.generate(inputs, **generate_kwargs) for a model fn (or fn(inputs, **generate_kwargs)
    for any other callable), recording only the `save=` sites. A model without generate runs
    one forward, fn(inputs, **generate_kwargs), as TorchLens's record does (input_kwargs= is
    TorchLens's name for those keyword arguments: give one of the two).

    Returns a Recording: rec[site] (all steps), rec["site:k"].out (the tensor), rec.steps.
    Saved tensors stream to safetensors shards next to the SQLite file, so memory stays
    bounded by `shard_mb` however many steps run. model=: the root when fn is a function (else
    the model fn calls first, or the model whose generate it calls, is). inputs_of=, edits=: as
    for trace (the inputs of saved sites stream to the shards too). return_output=True:
    (what the model returned, the Recording), as TorchLens's. CaptureOptions fields are taken
    as keyword arguments too.
    """
    if not isinstance(return_output, bool):
        fail(f"record(return_output=) takes True or False, got {return_output!r}")
    out = storage_out(capture_fields, out, "record")
    capture = capture_with(capture, capture_fields, "record")
    options = run_options(capture, None, save, model, "record")
    save = options.save
    how = "the model traced"
    if fn is None:  # record(model=m, ...): the model's generate
        fn, model = model, None
    if isinstance(fn, torch.nn.Module):
        if model is not None and model is not fn:
            fail(f"record() got two models: {type(fn).__name__} to run and model="
                 f"{type(model).__name__}; give one (model= is for a function that runs it)")
        model = fn
        fn = getattr(model, "generate", None) or model  # no generate: one forward
    elif callable(fn):
        if model is not None:
            how = "model="
        model = _model_of(fn, model)
    else:
        fail(f"record() needs a model with generate (or model.generate); got "
             f"{type(fn).__name__}")
    if save is None:
        fail("record() needs save=: the sites to keep, e.g. save=tt.module('model.layers.*.mlp')")
    _warn_if_compiled_function(fn, model)
    select = _selector(sites if sites is not None else save, save, False, inputs_of)
    edits = check_edits(edits, intervene)
    if input_kwargs is not None:
        if generate_kwargs is not None:
            fail("record() got generate_kwargs= and input_kwargs=; give the keyword arguments "
                 "once (input_kwargs= is TorchLens's name for them)")
        generate_kwargs = input_kwargs
    if generate_kwargs is not None and not isinstance(generate_kwargs, dict):
        fail(f"generate_kwargs must be a dict, got {type(generate_kwargs).__name__}")
    args, kwargs = _call_args(model, inputs, generate_kwargs, tokenizer)
    root = _root_given(model, how, kwargs)
    if root is not None:  # bad selectors fail before anything runs
        select(list(sites_of(root.model, root.assistant)))
    with options.around_run():
        return _run("record", fn, root, args, kwargs, select, kernels, out,
                    int(shard_mb * (1 << 20)), edits, _ops_for(ops, sites, save),
                    op_selection(save, "save="), tokenizer, with_output=return_output)


class Recorder:
    """TorchLens's fastlog.Recorder: `with Recorder(model, save=...) as rec: rec.log(x)` runs
    forwards of `model` with the recording on (each log() is one call of the root, one step)
    and leaves rec.recording, a Recording, after the block. Arguments as tt.record's."""

    def __init__(self, model: torch.nn.Module, *, save: SiteSelector | None = None,
                 edits: EditSpec | None = None, intervene: EditSpec | None = None,
                 sites: SiteSelector | None = None, kernels: str | None = None,
                 out: str | os.PathLike[str] | None = None, shard_mb: float = 64,
                 inputs_of: SiteSelector | None = None, ops: bool = False) -> None:
        if not isinstance(model, torch.nn.Module):
            fail(f"Recorder(model) takes a torch.nn.Module, got {type(model).__name__}")
        if save is None:
            fail("Recorder() needs save=: the sites to keep, e.g. save=tt.module('layers.*')")
        self.model = model
        self._select = _selector(sites if sites is not None else save, save, False, inputs_of)
        self._select(list(sites_of(model, None)))  # bad selectors fail here
        self._args = (kernels, out, int(shard_mb * (1 << 20)), check_edits(edits, intervene),
                      _ops_for(ops, sites, save), op_selection(save, "save="))
        self._session: Any = None  # the recording's context manager while inside the block
        self._box: dict[str, Any] = {}
        self._used = False
        self.recording: Recording | None = None

    def __enter__(self) -> Recorder:
        if self._used:
            fail("a Recorder is entered once; make a new one for another recording")
        self._used = True
        kernels, out, shard_bytes, edits, ops, op_save = self._args
        root = RootChoice(self.model, "Recorder(model)", self.model, None)
        self._session = _session("record", self.model, root, self._select, kernels, out,
                                 shard_bytes, edits, ops, op_save)
        self._box = self._session.__enter__()
        return self

    def log(self, input_args: Any, input_kwargs: dict[str, Any] | None = None, *,
            sample_id: Any = None) -> Any:
        """One forward of the model, recorded; returns its output."""
        if self._session is None or self.recording is not None:
            fail("Recorder.log() runs inside `with Recorder(...) as rec:`")
        args, kwargs = _call_args(self.model, input_args, input_kwargs, None)
        return self.model(*args, **kwargs)

    def __exit__(self, *exc: Any) -> bool:
        return self._finish(*exc)

    def _finish(self, *exc):
        session, self._session = self._session, None
        suppressed = session.__exit__(*exc)
        if exc[0] is None:
            self.recording = self._box["result"]
        return bool(suppressed)
