"""What a recording puts on its model, and finding that model when only a function is given.

Attachment is the one recording set-up, used by tt.trace/tt.record (python/tokentrace/_api.py)
and by the preloaded job (python/tokentrace/preload.py): the per-model pieces (recording hooks,
bound edits, the input recorder, the saved-tensor sink, op records, the escape counter, the
torch.distributed wrappers) and the rows the Python layer adds to the trace file at the end.
They go on either before the traced function runs (the model is known: a model, a bound method,
model=), at the first module call (any other callable: the first root module called is the
model), or from inside the first root call of a preloaded job. The differences between those
are its parameters.

When a function is traced without model=, the models it refers to (its closure, the globals
it names, a bound self, a functools.partial's parts) are compared with the one found: if it
refers to another model too, or the one found is a part of a bigger one it refers to, a
RuntimeWarning names the model traced and the others, and says to pass model=.
"""

import functools
import inspect
import itertools
import json
import sys
import warnings

import torch

from .._common import ROOT, write_python_rows
from .._compiled import CompiledCalls, compiled_rows
from .._errors import TokentraceError
from . import collectives, op_records
from .escapes import EscapeCounter
from .hooks import HookSet
from .inputs import InputRecorder
from .sink import DEFAULT_SHARD_BYTES, TensorSink


def selection(names, hooked, saved, inputs_of):
    """(hooked sites in model order, saved sites, sites whose inputs are recorded): every site
    that is saved or has its inputs recorded is hooked too, and the root's inputs always are."""
    inputs = set(inputs_of) | {ROOT}
    chosen = set(hooked) | set(saved) | inputs
    return [n for n in names if n in chosen], list(saved), inputs


class Attachment:
    """The one recording set-up of tt.trace, tt.record and the preloaded job.

    path: the trace file, or a callable giving it once the shim has settled it (preload).
    select(model) -> (hooked, saved, inputs), see selection(). edit_spec: an edit spec whose
    hooks go on first, so the recorded calls see the edited outputs. ops: record ATen ops.
    say: None for tt.trace/tt.record, where a problem raises or warns in the caller; a
    function (one line to stderr) for the preloaded job, which never stops over a recording
    problem: it says so and records without that part.
    """

    def __init__(self, backend, path, select, *, shard_bytes=DEFAULT_SHARD_BYTES,
                 edit_spec=None, ops=False, say=None):
        self.backend, self.path, self.shard_bytes = backend, path, shard_bytes
        self.select, self.edit_spec, self.ops, self.say = select, edit_spec, ops, say
        self.escapes = EscapeCounter(backend.current_token)
        self.model = None
        self.inputs = set()
        self.sink = self.hooks = self.edits = self.collectives = self.compiled_calls = None
        self.compiled_note = None  # one line: the job compiled the model while traced
        self.recorder = InputRecorder(backend.current, None, backend.settled_path)
        self.on_cpu = True
        self.ops_on = False

    def attach(self, model):
        """Installs everything on `model`, before its first call (FirstRoot: the call that
        found it is then made through what was installed)."""
        hooked, saved, self.inputs = self.select(model)
        self.model = model
        self.edits = self.edit_spec.hooks_for(model) if self.edit_spec is not None else None
        self.sink = TensorSink(self.path, self.shard_bytes) if saved else None
        self.recorder = InputRecorder(self.backend.current, self.sink, self.backend.settled_path)
        self.on_cpu = not any(p.is_cuda for p in itertools.islice(model.parameters(), 1))
        self.hooks = HookSet(self.backend, model, hooked, saved, self.sink, self.inputs,
                             self.recorder)
        if self.edits is not None:
            self.edits.install()
        self.hooks.install()
        # The job compiling the model itself (transformers' generate): compiled from outside.
        self.compiled_calls = CompiledCalls(self.hooks, model, self._compiled_noted)
        if self.ops:
            self._start_ops()
        # With op records on a CPU model the op observer reports each host read inside the op
        # that made it (aten::item, ...); the Python counter then only says where they came from.
        self.escapes.set_report(self.backend.escape if self.on_cpu and not self.ops_on else None)
        # torch.distributed collectives and Work.wait as calls: wait, not work (multi-rank).
        self.collectives = collectives.install(self.backend)

    def _start_ops(self):
        try:
            op_records.start(self.backend, host_reads=self.on_cpu)
        except TokentraceError as exc:
            if self.say is None:
                raise
            self.say(f"{exc}; ATen ops are not recorded")
            return
        self.ops_on = True

    def _compiled_noted(self, message):
        if self.say is not None:
            self.say(message)  # the preloaded job: now (it has no end of trace to wait for)
        else:
            self.compiled_note = message

    def not_hooked_message(self):
        """One line about the sites left out because they run inside a compiled region (or
        about a compiled call of the model the job made while traced)."""
        missing = self.hooks.not_hooked if self.hooks is not None else []
        if not missing:
            return self.compiled_note
        return (f"tokentrace: {len(missing)} modules run inside a compiled region and are not "
                f"recorded (first: {missing[0]!r}); the compiled module's own calls are, "
                f"from outside the region, so it runs as compiled")

    def detach(self):
        """Removes what attach() and escapes.install() put on (the trace's end)."""
        if self.collectives is not None:
            self.collectives.remove()
            self.collectives = None
        if self.ops_on:
            op_records.stop()
            self.ops_on = False
        if self.compiled_calls is not None:
            self.compiled_calls.remove()
            self.compiled_calls = None
        if self.hooks is not None:
            self.hooks.remove()
        if self.edits is not None:
            self.edits.remove()
        self.escapes.remove()

    def write_rows(self, path, meta):
        """Adds the Python layer's rows to the trace file at `path`: saved tensors, escape
        locations, recorded inputs, its losses, and `meta` with what every recording notes."""
        sink = self.sink
        rows = sink.close() if sink is not None else []
        if sink is not None and sink.failed:
            self._report(f"tokentrace: {sink.failed} saved outputs could not be written to "
                         f"{sink.directory} ({sink.errors[0]}); they are counted in the trace's "
                         f"losses (save_failed)")
        meta = dict(meta, python_save_errors=self.save_errors,
                    inputs_of=json.dumps(sorted(self.inputs)))
        if self.model is not None:
            meta["model"] = type(self.model).__name__
        losses = {"save_failed": self.save_errors, "inputs_failed": self.input_errors}
        if self.ops:  # compiled kernels' modules, and what they miss, in the same write
            compiled_meta, compiled_losses = compiled_rows(path)
            meta.update(compiled_meta)
            losses.update(compiled_losses)
        write_python_rows(path, rows, self.escapes.rows(), meta, losses,
                          self.recorder.table_rows(sink.files if sink is not None else {}))

    def _report(self, message):
        if self.say is not None:
            self.say(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    @property
    def save_errors(self):
        return self.hooks.save_errors if self.hooks is not None else 0

    @property
    def input_errors(self):
        return self.hooks.input_errors if self.hooks is not None else 0


class FirstRoot:
    """Calls on_first(module) with the first module called, before its call runs. Until then,
    nn.Module.__call__ is ours: it calls on_first, gives __call__ back, and makes the call
    again through it, so the first call is recorded like every later one (its keyword
    arguments too). Catching the call before the module's own call path starts keeps a module
    compiled in place (module.compile()) compiled: its call path, hooks included, runs inside
    the compiled region, where a global forward pre-hook would be traced by TorchDynamo.
    tt.trace without model= and the preloaded job (preload.py) both find their root so."""

    def __init__(self, on_first):
        self._original = torch.nn.Module.__dict__["__call__"]
        self._on_first = on_first
        self._patched = False
        self._untraced = False
        self._install(sys.modules.get("torch._dynamo"))

    def _install(self, dynamo):
        original, first = self._original, self

        def attach(module):
            first.remove()
            first._on_first(module)
        attach_now = attach

        def call(module, *args, **kwargs):
            # Code that took `module.__call__` while ours was in place (generate keeps
            # `model_forward = self.__call__` for all its steps) calls us again: pass through.
            if first._patched:
                attach_now(module)
            return original(module, *args, **kwargs)
        if dynamo is not None:
            # A compiled function (tt.trace(torch.compile(fn))) calls its first module inside
            # its compiled region. TorchDynamo cannot trace the attach (it failed with an
            # internal AssertionError): it runs it as it is, and this frame too; the module's
            # call path below runs as it would without us (compiled where it was).
            attach_now = dynamo.disable(attach)
            call = dynamo.disable(call, recursive=False)
            self._untraced = True
        call.tokentrace_stands_for = original  # what torch.compile of it compiles (watch_compile)
        torch.nn.Module.__call__ = call
        self._patched = True

    def untraced(self):
        """TorchDynamo is loaded now (the job compiles something): until the first call, ours
        is a __call__ TorchDynamo runs as it is (a graph break there)."""
        if self._patched and not self._untraced and "torch._dynamo" in sys.modules:
            self._install(sys.modules["torch._dynamo"])

    def remove(self):
        if self._patched:
            torch.nn.Module.__call__ = self._original
            self._patched = False


def _unwrap(fn, seen):
    """The objects fn is made of: the function itself, its bound self, a partial's parts, the
    original of a compiled or wrapped function."""
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    out = [fn]
    for inner in (getattr(fn, "_torchdynamo_orig_callable", None),
                  getattr(fn, "__wrapped__", None), getattr(fn, "__self__", None),
                  getattr(fn, "__func__", None)):
        if inner is not None:
            out += _unwrap(inner, seen)
    if isinstance(fn, functools.partial):
        for part in (fn.func, *fn.args, *fn.keywords.values()):
            out += _unwrap(part, seen)
    return out


def referenced_models(fn):
    """The torch.nn.Modules fn refers to directly (closure, named globals, bound self,
    partial arguments, defaults), in a stable order, without repeats."""
    found, ids = [], set()
    for obj in _unwrap(fn, set()):
        values = [obj]
        if inspect.isfunction(obj):
            try:
                closure = inspect.getclosurevars(obj)
                values += list(closure.nonlocals.values()) + list(closure.globals.values())
            except (TypeError, ValueError):
                pass
            values += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
        for v in values:
            if isinstance(v, torch.nn.Module) and id(v) not in ids:
                ids.add(id(v))
                found.append(v)
    return found


def _label(model, names):
    return names.get(id(model), type(model).__name__)


def warn_if_doubtful(fn, root, stacklevel):
    """Warns when fn refers to models besides the root that was found (or to a bigger model
    the root is part of): which one was traced is then a guess."""
    others = [m for m in referenced_models(fn)
              if m is not root and not any(m is sub for sub in root.modules())]
    if not others:
        return
    names = {id(m): f"{type(m).__name__} (id {id(m):#x})" for m in [root] + others}
    listed = ", ".join(_label(m, names) for m in others)
    warnings.warn(
        f"tokentrace: traced {_label(root, names)}, the first module "
        f"{getattr(fn, '__qualname__', type(fn).__name__)} called (as `tokentrace run` does); "
        f"it also refers to {listed}; pass model= to trace another one", RuntimeWarning,
        stacklevel=stacklevel)
