"""What a recording puts on its model, and finding that model when only a function is given.

Attachment is the one recording set-up, used by tt.trace/tt.record (python/tokentrace/_api.py)
and by the preloaded job (python/tokentrace/preload.py): the per-model pieces (recording hooks,
bound edits, the input recorder, the saved-tensor sink, op records, the escape counter, the
torch.distributed wrappers) and the rows the Python layer adds to the trace file at the end.
They go on either before the traced function runs (the model is known: a model, a bound method,
model=), or at the first module call (any other callable, and the preloaded job: FirstRoot in
root.py chooses the root there). The differences between those are its parameters.

When a function is traced without model=, the models it refers to (its closure, the globals
it names, a bound self, a functools.partial's parts) are compared with the one found: if it
refers to another model too, or the one found is a part of a bigger one it refers to, a
RuntimeWarning names the model traced and the others, and says to pass model=.
"""

import functools
import inspect
import itertools
import json
import warnings

import torch

from .._common import OP_EDIT_SITE, ROOT, add_losses, add_meta, add_rows
from .._compiled import CompiledCalls, compiled_rows
from .._engines import worker_adapter
from .._errors import TokentraceError
from . import collectives, op_records
from .escapes import EscapeCounter
from .hooks import HookSet
from .inputs import InputRecorder
from .op_saver import OpSaver
from .root import RootChoice, sites_of
from .sink import DEFAULT_SHARD_BYTES, TensorSink
from .token_text import TokenTexts


def selection(names, hooked, saved, inputs_of):
    """(hooked sites in model order, saved sites, sites whose inputs are recorded): every site
    that is saved or has its inputs recorded is hooked too, and the root's inputs always are."""
    inputs = set(inputs_of) | {ROOT}
    chosen = set(hooked) | set(saved) | inputs
    return [n for n in names if n in chosen], list(saved), inputs


class Attachment:
    """The one recording set-up of tt.trace, tt.record and the preloaded job.

    path: the trace file, or a callable giving it once the shim has settled it (preload).
    select(names) -> (hooked, saved, inputs) for the list of site names (the root's, then an
    assistant's), see selection(). edit_spec: an edit spec whose
    hooks go on first, so the recorded calls see the edited outputs. ops: record ATen ops.
    op_save: save= as an op selector: the outputs of the ops it may choose are saved too
    (op_saver.py; op records must be on).
    say: None for tt.trace/tt.record, where a problem raises or warns in the caller; a
    function (one line to stderr) for the preloaded job, which never stops over a recording
    problem: it says so and records without that part.
    """

    def __init__(self, backend, path, select, *, shard_bytes=DEFAULT_SHARD_BYTES,
                 edit_spec=None, ops=False, say=None, op_save=None, tokenizer=None):
        self.backend, self.path, self.shard_bytes = backend, path, shard_bytes
        self.select, self.edit_spec, self.ops, self.say = select, edit_spec, ops, say
        self.op_save = op_save  # the op selector of save= (its ops' outputs are saved), or None
        self.op_saver = None
        self.escapes = EscapeCounter(backend.current_token)
        self.model = None
        self.root = None  # the RootChoice attached
        self.inputs = set()
        self.sink = self.hooks = self.edits = self.collectives = self.compiled_calls = None
        self.compiled_note = None  # one line: the job compiled the model while traced
        self.engine = None  # a serving engine's worker adapter (_engines/), when one runs
        # edits installed apart from this recording (the preloaded job's TOKENTRACE_EDITS),
        # whose tokens are the engine's steps too when one runs
        self.step_edits = None
        self.recorder = InputRecorder(backend.current, None, backend.settled_path)
        self.on_cpu = True
        self.ops_on = False
        self.op_params = {}  # {TensorImpl address: parameter name}, while op records are on
        # each token's generated ids and text (token_text.py); tokenizer: given, or None
        self.token_texts = TokenTexts(backend.current_token, tokenizer, say)

    def attach(self, root):
        """Installs everything on root.model (and root.assistant's sites), before the call that
        chose it runs (FirstRoot: that call is then made through what was installed). `root`:
        a RootChoice, or a model given by the caller."""
        if not isinstance(root, RootChoice):
            root = RootChoice(root, "the model traced", root)
        model = root.model
        adapter = worker_adapter(model, self.backend, self.path, self.say) \
            if root.token is None else None
        if adapter is not None:  # an engine's worker: its steps are the tokens
            root.token, root.token_how = adapter.token_site, adapter.token_how
            self.engine = adapter
        names = sites_of(model, root.assistant)
        hooked, saved, self.inputs = self.select(list(names))
        self.model, self.root = model, root
        self.edits = (self.edit_spec.hooks_for(model, names) if self.edit_spec is not None
                      else None)
        wants_sink = saved or self.op_save is not None
        self.sink = TensorSink(self.path, self.shard_bytes) if wants_sink else None
        self.recorder = InputRecorder(self.backend.current, self.sink, self.backend.settled_path)
        self.on_cpu = not any(p.is_cuda for p in itertools.islice(model.parameters(), 1))
        self.token_texts.model = model
        self.hooks = HookSet(self.backend, model, hooked, saved, self.sink, self.inputs,
                             self.recorder, names=names, root_is_token=root.token is None,
                             link_outputs=self.ops,
                             root_input=self.token_texts.hook if root.token is None else None)
        step_edits = self.edits if self.edits is not None else self.step_edits
        if self.engine is not None and step_edits is not None:
            # an engine's steps are the edits' tokens too (set before install(), which may
            # open the step the first model call runs in)
            step_edits.follow_steps()
            self.engine.on_step = step_edits.engine_step
            if step_edits.served.slots:  # rules for served requests: each step's rows
                self.engine.on_rows = step_edits.serving_rows
        if self.engine is not None:
            self.engine.install()
        if self.edits is not None:
            self.edits.install()
        self.hooks.install()
        # The job compiling the model itself (transformers' generate): compiled from outside.
        self.compiled_calls = CompiledCalls(self.hooks, model, self._compiled_noted)
        if self.ops:
            self._start_ops()
        if self.edits is not None and self.edits.op_rules and self.ops_on:
            # An op edit's own ops (its copy, the patch call) go in calls of OP_EDIT_SITE.
            self.edits.set_op_scope(self.backend, self.backend.site(
                OP_EDIT_SITE, self.backend.site_kind("range")))
        if self.op_save is not None and self.ops_on:  # op outputs: OpSaver, on this thread
            self.op_saver = OpSaver(self.backend, self.sink, self.op_save)
            self.op_saver.install()
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
        # The parameters by identity (as op records see tensors: their TensorImpl), for
        # TorchLens's loops in op labels (_read/op_loops.py): ops that read the same ones are
        # passes of one layer.
        self.op_params = op_records.parameters(self.model)

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
        if self.op_saver is not None:
            self.op_saver.remove()
        if self.ops_on:
            op_records.stop()
            self.ops_on = False
        if self.compiled_calls is not None:
            self.compiled_calls.remove()
            self.compiled_calls = None
        if self.engine is not None:
            self.engine.remove()
        if self.hooks is not None:
            self.hooks.remove()
        if self.edits is not None:
            self.edits.remove()
        self.escapes.remove()

    def hand_rows(self, path, meta):
        """Hands the Python layer's last rows to the trace's writer, before the session stops
        (its final write takes them): saved tensors, escape locations, the recorded inputs not
        handed yet, its losses, and `meta` with what every recording notes. `path`: the file
        so far (the compiled join reads it)."""
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
            meta.update(self.root.meta())
        losses = {"save_failed": self.save_errors, "inputs_failed": self.input_errors}
        if self.engine is not None:
            self.engine.close()
            meta.update(self.engine.meta())
        if self.op_params:
            meta["op_params"] = json.dumps(self.op_params)
        if self.ops:  # compiled kernels' modules, and what they miss, read from the file so far
            self.backend.flush()
            compiled_meta, compiled_losses = compiled_rows(path)
            meta.update(compiled_meta)
            losses.update(compiled_losses)
        if self.ops_on:  # the run is over: tokentrace's own reads below are no ops of the job
            op_records.stop()
            self.ops_on = False
        if self.model is not None:
            self.token_texts.finish(self.model)
        add_rows("saved_outputs", rows)
        add_rows("escape_sites", self.escapes.rows())
        add_rows("call_inputs", self.recorder.table_rows(sink.files if sink is not None else {}))
        losses["token_ids_unread"] = self.token_texts.failed
        add_losses(losses)
        add_meta(meta)

    def note_output(self, model, output):
        """What `model`'s generate returned: the last token's ids (token_text.py)."""
        try:
            self.token_texts.note_output(model, output)
        except Exception:  # never into the job
            self.token_texts.failed += 1

    def _report(self, message):
        if self.say is not None:
            self.say(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    @property
    def save_errors(self):
        ops = self.op_saver.errors if self.op_saver is not None else 0
        return ops + (self.hooks.save_errors if self.hooks is not None else 0)

    @property
    def input_errors(self):
        return self.hooks.input_errors if self.hooks is not None else 0


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


def warn_if_doubtful(fn, root, stacklevel, how="the first module called"):
    """Warns when fn refers to models besides the root that was found (or to a bigger model
    the root is part of): which one was traced is then a guess."""
    others = [m for m in referenced_models(fn)
              if m is not root and not any(m is sub for sub in root.modules())]
    if not others:
        return
    names = {id(m): f"{type(m).__name__} (id {id(m):#x})" for m in [root] + others}
    listed = ", ".join(_label(m, names) for m in others)
    warnings.warn(
        f"tokentrace: traced {_label(root, names)}, {how} in "
        f"{getattr(fn, '__qualname__', type(fn).__name__)} (as `tokentrace run` chooses); "
        f"it also refers to {listed}; pass model= to trace another one", RuntimeWarning,
        stacklevel=stacklevel)
