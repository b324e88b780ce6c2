"""Preload mode: hook an unmodified job (started by `tokentrace run -- python job.py`).

boot/sitecustomize.py calls install() right after torch is imported. install() takes
nn.Module.__call__ until the first module call (FirstRoot, as tt.trace without model= does),
which chooses the root (`self`, one call per token): the model whose generate the job calls,
else the first module called or the model it is part of; TOKENTRACE_ROOT (`--root`) overrides
(_record/root.py). When another module could have been taken for it, one line on stderr
names the root and why. The per-site hooks go onto that model (and an assisted generation's
assistant, as sites under `assistant_model`),
selected by TOKENTRACE_SITES (globs; default every module), with the outputs of
TOKENTRACE_SAVE sites streamed next to the trace file, and the first call is then made
through them, so token 1 is that call, its keyword arguments recorded too. What goes on the
model (hooks, saved-tensor sink, input recorder, op records, escape counter) and the rows
added at exit are tt.trace's own set-up (Attachment, python/tokentrace/_record/attach.py);
only the options come from the environment here.

The shim (LD_PRELOAD) owns the session and the file: it was started in its constructor from
the TOKENTRACE_* environment, and it writes the file until the process exits. At Python exit
we add our rows (saved tensors, escape locations, the root's inputs) to that file. Without the
native extension nothing is recorded (one line on stderr says why and how to build it).

vLLM's engine core and front end call no module: their recordings (_engines/vllm/core.py,
front.py) go on when vLLM's modules vllm.v1.engine.core and
vllm.v1.engine.output_processor are loaded (the boot's after_import), in whichever process
makes an engine or processes its outputs, and add their request rows and meta at exit.

TOKENTRACE_EDITS (`tokentrace run --edits spec.json`) names a JSON edit spec
(tokentrace.edits.load_spec): its edits go onto the same root as forward hooks, exactly as
spec.bind(model) installs them for one run (here the run is the whole process: token k is
the k-th root call). They apply with or without recording; with a trace file, its meta gets
"patch_fires" = {"num_fires": N, "per_rule": [...], "spec": path} as JSON at exit.
TOKENTRACE_PATCHES, its old name, still works (deprecated; one line on stderr says so).
"""

import atexit
import json
import os
import sys

import torch

from ._backend import get_backend
from ._common import module as select_module
from ._common import parse_env_list
from ._compiled import watch_compile
from ._engines import install_watchers
from ._errors import TokentraceError
from ._record import Attachment, FirstRoot, selection, sites_of

_state = {"first": None, "done": False}


def _say(message):
    print(message if message.startswith("tokentrace:") else "tokentrace: " + message,
          file=sys.stderr)


def install():
    if _state["first"] is not None or _state["done"]:
        return
    # The root is chosen at the first module call, which is then made through the hooks, so
    # it is recorded like every later one, keyword arguments included.
    root = os.environ.get("TOKENTRACE_ROOT", "").strip()
    _state["first"] = FirstRoot(_first_call, root=root, say=_say)
    atexit.register(_never_chosen)
    # A compiled __call__ taken before the first root call (transformers' generate takes it
    # before its prefill) is recorded from outside when it runs (_compiled/call.py).
    watch_compile(on_compile=_compiling)
    # vLLM's engine core and front end call no module: their recordings go on when vLLM's
    # modules are loaded.
    try:
        from _tokentrace_after_import import after_import  # the boot's, beside sitecustomize
    except ImportError:  # not started by `tokentrace run` (no boot on sys.path)
        return
    install_watchers(_recording_backend, _say, after_import, _edit_salt())
    after_import("transformers.generation.utils", _watch_generate)


def _edit_salt():
    """What gives the edits' prefix-cache salts in a serving engine (_edit/requests.py
    SpecSalt), or None when the job has no edit spec."""
    spec_path = _edits_variable()[1]
    if not spec_path:
        return None

    def make():
        from ._edit import SpecSalt
        return SpecSalt(spec_path)
    return make


def _watch_generate(module):
    """transformers' GenerationMixin.generate, wrapped so that what it returns reaches the
    recording: the last token's ids, which no root call reads (_record/token_text.py). The
    job gets generate's output as it is; nothing else changes."""
    import functools
    mixin = getattr(module, "GenerationMixin", None)
    original = getattr(mixin, "generate", None)
    if original is None or getattr(original, "__tokentrace_generate__", False):
        return

    # Its code is not named `generate`: the root's choice reads the generate frames on the stack
    # (the model, its assistant_model argument: _record/root.py), which stay the original's.
    @functools.wraps(original)
    def noting_generate(self, *args, **kwargs):
        output = original(self, *args, **kwargs)
        attached = _state.get("attached")
        if attached is not None:
            attached.note_output(self, output)
        return output

    noting_generate.__tokentrace_generate__ = True
    mixin.generate = noting_generate


def _recording_backend():
    """The native backend when the shim records in this process, else None (said once)."""
    try:
        backend = get_backend()
    except TokentraceError as exc:
        _say(f"{exc}; nothing is recorded")
        return None
    return backend if backend.active() else None


def _compiling():
    """The job compiles something (TorchDynamo is loaded now). A compiled function may make
    the first module call inside its compiled region, where TorchDynamo would trace the
    attach (it cannot: an internal error, printed, and nothing recorded). Until the first
    call, ours is a __call__ TorchDynamo runs as it is (a graph break there)."""
    first = _state["first"]
    if first is not None and not _state["done"]:
        first.untraced()


def _never_chosen():
    first = _state["first"]
    waiting = first.waiting_for if first is not None and not _state["done"] else None
    if waiting is not None:
        _say(f"TOKENTRACE_ROOT={waiting}: no module of that class was called; nothing was "
             f"recorded")


def _first_call(choice):
    _state["done"] = True
    if choice.doubtful:
        first = ("" if choice.first is choice.model or choice.first is None
                 else f"; the first module called was {type(choice.first).__name__}")
        assistant = ("" if choice.assistant is None else
                     f"; its assistant {type(choice.assistant).__name__} is recorded under "
                     f"'assistant_model'")
        _say(f"root: {choice.describe}{first}{assistant}; --root (TOKENTRACE_ROOT) chooses "
             f"another")
    try:
        _attach(choice)
    except Exception as exc:  # never crash the traced job
        _say(f"hooks not installed on {type(choice.model).__name__}: {exc}")


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


def _attach(choice):
    edits = _attach_edits(choice.model, choice.assistant)
    if not _attach_recording(choice, edits) and edits is not None:
        atexit.register(_say_fires, edits)


def _edits_variable():
    """(name, value) of the variable naming the edit spec: TOKENTRACE_EDITS, else its
    deprecated old name TOKENTRACE_PATCHES (noted once on stderr); value "" when neither."""
    value = os.environ.get("TOKENTRACE_EDITS", "").strip()
    if value or not os.environ.get("TOKENTRACE_PATCHES", "").strip():
        return "TOKENTRACE_EDITS", value
    if not _state.get("patches_noted"):
        _state["patches_noted"] = True
        _say("TOKENTRACE_PATCHES is deprecated; use TOKENTRACE_EDITS (`tokentrace run --edits`)")
    return "TOKENTRACE_PATCHES", os.environ["TOKENTRACE_PATCHES"].strip()


def _attach_edits(model, assistant=None):
    """TOKENTRACE_EDITS: the JSON edit spec, installed on the root as a bound model's
    forward hooks (counting from the first root call, made through them); its rules may name
    an assisted generation's assistant's sites ("assistant_model.*"). A bad spec stops
    the job before the model's first forward runs (exit status 2): running without the edits
    the user asked for would give results that look right and are not."""
    variable, spec_path = _edits_variable()
    if not spec_path:
        return None
    from .edits import load_spec
    try:
        device = next(iter(model.parameters()), torch.empty(0)).device
        hooks = load_spec(spec_path, device=device).hooks_for(model,
                                                              sites_of(model, assistant))
        hooks.install()
    except Exception as exc:  # ours says what is wrong; anything else is still a bad spec
        message = str(exc).removeprefix("tokentrace: ")
        if not isinstance(exc, TokentraceError):
            message = " ".join(message.split())[:200]
            message = f"{spec_path} could not be used ({type(exc).__name__}: {message})"
        _say(f"{variable}: {message}; stopping the job (fix the spec, or unset "
             f"{variable} to run without edits)")
        sys.stderr.flush()
        os._exit(2)
    _state["edits"] = hooks
    return hooks


def _attach_recording(choice, edits=None):
    """The recording hooks; False when nothing records (no extension, or the shim is off).
    `edits`: the spec's hooks (_attach_edits), whose tokens are a serving engine's steps when
    the recording finds one."""
    try:
        backend = get_backend()
    except TokentraceError as exc:
        _say(f"{exc}; nothing is recorded")
        return False
    if not backend.active():
        _say("the native shim is not recording (run the job with `tokentrace run -- ...`); "
             "no recording hooks installed")
        return False
    # The set-up of tt.trace (python/tokentrace/_record/attach.py), before the first root call.
    tokenizer = os.environ.get("TOKENTRACE_TOKENIZER", "").strip() or None
    attached = Attachment(backend, backend.settled_path, _env_selection, ops=_ops_wanted(),
                          say=_say, tokenizer=tokenizer)
    attached.step_edits = edits
    attached.attach(choice)
    if attached.engine is not None and edits is not None:
        # a serving engine may kill this process at shutdown, before any exit handler: the
        # fires so far go with the rows it writes whenever it is idle
        attached.engine.idle_meta = lambda: _fires_meta(edits)
        if edits.served.slots:  # rules for served requests: which requests each edited
            attached.engine.request_rows = lambda: _served_rows(edits)
    _state["attached"] = attached  # generate's output goes to it (_generate_returned)
    not_hooked = attached.not_hooked_message()
    if not_hooked:
        _say(not_hooked)
    attached.escapes.install()
    atexit.register(_finish, backend, attached)
    return True


def _env_selection(names):
    return selection(names, _select("TOKENTRACE_SITES", names, True),
                     _select("TOKENTRACE_SAVE", names, False),
                     _select("TOKENTRACE_INPUTS", names, False))


def _ops_wanted():
    """TOKENTRACE_OPS=1 (`tokentrace run --ops`): op records from here to the end of the
    process (from inside the first root call, whose earlier ops are not recorded)."""
    value = os.environ.get("TOKENTRACE_OPS", "").strip()
    if value in ("", "0"):
        return False
    if value != "1":
        _say(f"TOKENTRACE_OPS={value!r} is not 1 or 0; ATen ops are not recorded")
        return False
    return True


def _say_unfired(edits):
    """One line naming the label rules that chose no op (tt.trace says it as a warning)."""
    unfired = edits.unfired_label_rules()
    if unfired:
        _say(f"{_edits_variable()[0]}: {len(unfired)} rule(s) selecting ops by label chose no "
             f"op in this run ({'; '.join(unfired[:3])}): no op the model ran had such a "
             f"label (docs/ops.md, 'Labels in edits')")


def _patch_meta():
    edits = _state.get("edits")
    if edits is not None:
        _say_unfired(edits)
        meta = _fires_meta(edits)
        _say_idle_rules(edits)
        return meta
    return {}


def _fires_meta(edits):
    """{"patch_fires": ...}: the edits' fires so far, as the trace's meta keeps them; with
    rules for served requests, "served": {rule index: requests it edited}."""
    report = edits.report()
    fires = {"num_fires": report.num_fires, "per_rule": [n for _, n in report.per_rule],
             "spec": os.path.abspath(_edits_variable()[1])}
    if edits.served.slots:
        fires["served"] = {str(i): n for i, n in edits.served.per_rule().items()}
        fires["served_rows_past_limit"] = edits.served.rows_past_limit
        fires["served_steps_unread"] = edits.served.steps_unread
    return {"patch_fires": json.dumps(fires)}


def _served_rows(edits):
    """The worker's request_events rows of the requests seen since the last hand-over (which
    rules edited each), which are then forgotten (the engine is idle: they finished)."""
    rows = edits.served.request_rows()
    edits.served.forget([r["request"] for r in rows])
    return rows


def _say_idle_rules(edits):
    """At exit, in a process that served steps: one line naming the rules that never fired
    (and, for rules served per request, that edited no request)."""
    if not edits.step_driven or not getattr(edits, "token", 0):
        return
    report = edits.report()
    idle = [i for i, (_, n) in enumerate(report.per_rule) if n == 0]
    if not idle:
        return
    rules = edits.spec.rules
    shown = "; ".join(f"rule {i} ({rules[i].describe()})" for i in idle[:3])
    more = f"; and {len(idle) - 3} more" if len(idle) > 3 else ""
    _say(f"{_edits_variable()[0]}: {len(idle)} rule(s) edited nothing in the "
         f"{edits.token} steps served: {shown}{more} (a rule for requests edits only the rows "
         f"of requests carrying its tag in SamplingParams.extra_args['tokentrace'])")


def _say_fires(edits):
    _say_unfired(edits)
    _say(f"{_edits_variable()[0]}: {edits.report().num_fires} edit fires (no trace file to "
         f"note them in)")


def _finish(backend, attached):
    try:
        attached.escapes.remove()
        # Python's atexit runs before CUDA's own teardown: wait for the device here, so this
        # flush hands over every GPU record while CUDA is still up (the shim's final stop,
        # from the C atexit list, may come after the runtime has torn the context down).
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        attached.hand_rows(backend.settled_path(), _patch_meta())
    except Exception as exc:
        _say(f"could not add output shapes/saved tensors to the trace: {exc}")
