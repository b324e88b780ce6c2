"""A compiled call of the traced model that the job makes while it is traced.

transformers' generate compiles the model itself: on CUDA with a compilable cache
(cache_implementation="static", ...) it runs its decode steps through
`model.get_compiled_call(compile_config)`, which is torch.compile(model.__call__,
mode="reduce-overhead" by default), and its prefill eagerly. That compiled call goes through
Module.__call__ into every module's forward, where the trace's recording wrappers are: native
objects TorchDynamo cannot trace, so it would break the graph at each module, and the job
would not run as it does untraced.

While a trace is attached, `get_compiled_call` (an instance attribute over the class's, taken
off at the end) hands out the compiled call wrapped: each call takes the trace's wrappers and
hooks off the modules (HookSet.hide), runs the compiled call inside the root's recording
wrapper (so it is a token, recorded from outside the compiled region, as a compiled module's
calls are: entry.py), and puts them back. TorchDynamo sees the modules as they are
untraced: the same graphs, no graph break, and its guards, which see the same attributes at
every call, never ask for a recompile. The eager calls (the prefill) keep every module's
record; the compiled calls record the root only, and with ops=True their kernels are
attributed to the modules inside (kernel_map.py, join.py).

The preloaded job (and tt.trace of a function, without model=) attaches at the first root
call, which in generate comes after generate took the compiled call: so torch.compile itself
is watched, from the start of the process or of the trace (watch_compile): a module's
compiled __call__ is handed out wrapped, and each call of it asks whether a trace is attached
to that module now (the same hide-and-record then; else it runs as it is).

Any other function compiled with fullgraph=True while watched (a compiled helper that calls
modules, a module's own method compiled in its __init__ as vLLM's compile decorator does)
would fail to compile with the trace's wrappers inside its region. It is handed out so that
each call, while a trace is attached, takes the wrappers and hooks of every attached trace off
the modules and puts them back after: it runs as compiled, and the modules it runs are not
recorded in it (said once). A module holding such a compiled method of its own is recorded from
outside, at that attribute (entry.py). Without fullgraph=True the compiled function is left as
torch.compile made it: TorchDynamo breaks its graph at each recording wrapper and the modules
in it are recorded.
"""

import functools
import types
import weakref
from typing import Any

import torch

# model -> its CompiledCalls while a trace is on
_attached: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _note(inside):
    return (f"tokentrace: the job compiled the model's __call__ while traced (transformers' "
            f"generate does, for its decode steps); its compiled calls are recorded as calls "
            f"of the root from outside the compiled region, so they run as compiled, and the "
            f"{inside} modules inside are recorded in its eager calls only (with ops=True the "
            f"compiled kernels are attributed to them)")


class CompiledCalls:
    """For `hooks` (an installed HookSet that records the root of `model`): the compiled calls
    of the model's __call__ that the job makes, recorded from outside (wrapped()). A
    transformers model (its class has get_compiled_call) gets that method intercepted.
    noted(message) is called once, at the first compiled call handed out."""

    def __init__(self, hooks, model, noted):
        self.hooks, self.model, self.noted = hooks, model, noted
        self.made = {}  # id(compiled) -> (compiled, its wrapped call): one wrapper each
        self.installed = False
        self.active = hooks.records_root
        if not self.active:
            return
        _attached[model] = self
        original = getattr(type(model), "get_compiled_call", None)
        if callable(original) and "get_compiled_call" not in model.__dict__:
            self.original = original
            model.__dict__["get_compiled_call"] = self.get_compiled_call
            self.installed = True

    def get_compiled_call(self, *args, **kwargs):
        compiled = self.original(self.model, *args, **kwargs)
        if getattr(compiled, "tokentrace_watched", False):
            return compiled  # made through watch_compile: it asks for us at each call
        return self.wrapped(compiled)

    def wrapped(self, compiled):
        """`compiled` (a compiled __call__ of the model), run as a root call of the trace
        with the trace's wrappers and hooks out of sight."""
        key = id(compiled)
        if key not in self.made:
            if not self.made:
                self.noted(_note(self.hooks.hooked_inside_root))
            self.made[key] = (compiled, self._wrap(compiled))
        return self.made[key][1]

    def _wrap(self, compiled):
        hooks = self.hooks
        root = hooks.entry(compiled)

        def compiled_call(*args, **kwargs):
            show = hooks.hide()
            try:
                return root(*args, **kwargs)
            finally:
                show()
        compiled_call.__wrapped__ = compiled
        return compiled_call

    def remove(self):
        """Gives get_compiled_call back; calls handed out go on, doing nothing of ours once
        the hooks are removed (hide() then finds nothing, and the root wrapper is off)."""
        self.active = False
        if _attached.get(self.model) is self:
            del _attached[self.model]
        if self.installed and \
                self.model.__dict__.get("get_compiled_call") == self.get_compiled_call:
            del self.model.__dict__["get_compiled_call"]
        self.installed = False


def attached_calls(model):
    """The CompiledCalls of the trace attached to `model` now, or None."""
    return _attached.get(model)


def _hidden_note(compiled):
    name = getattr(compiled, "__qualname__", type(compiled).__name__)
    return (f"tokentrace: {name} is compiled with fullgraph=True and runs modules inside its "
            f"compiled region; while it runs, the trace's hooks are off those modules (inside "
            f"a full graph they would stop it compiling), so their calls in it are not "
            f"recorded")


def _hidden_call(compiled):
    """`compiled` (a function compiled with fullgraph=True), handed out so that each call made
    while traces are attached runs with their wrappers and hooks off the modules."""
    noted = []

    @functools.wraps(compiled)
    def hidden(*args, **kwargs):
        if not _attached or torch.compiler.is_compiling():
            return compiled(*args, **kwargs)  # no trace, or inside an outer compiled region
        attached = [calls for calls in list(_attached.values()) if calls.active]
        if attached and not noted:
            noted.append(True)
            # A module's own compiled method, wrapped as its entry (entry.py), is said with the
            # modules inside it (HookSet.not_hooked); anything else here.
            for calls in attached:
                if not any(previous is hidden for _, _, previous, _ in calls.hooks.wrapped):
                    calls.noted(_hidden_note(compiled))
        shows = [calls.hooks.hide() for calls in attached]
        try:
            return compiled(*args, **kwargs)
        finally:
            for show in reversed(shows):
                show()
    hidden.tokentrace_watched = True
    return hidden


def watch_compile(on_compile=None):
    """From now on, torch.compile hands out a module's compiled __call__ wrapped: a call asks
    whether a trace is attached to that module (then it runs as that trace's wrapped() call),
    else runs the compiled call as it is. Anything else is compiled as torch.compile makes
    it. Returns the function that gives torch.compile back (tt.trace, at its end; the
    preloaded job keeps the watch for the process); calls handed out stay watched.
    on_compile(): called at each torch.compile, TorchDynamo loaded (the preloaded job's
    first-call hook then becomes one TorchDynamo does not trace)."""
    real = torch.compile
    if getattr(real, "tokentrace_watching", False):
        return lambda: None

    @functools.wraps(real)
    def compile(*args, **kwargs):
        fn = args[0] if args else kwargs.get("model")
        if fn is None:  # @torch.compile(fullgraph=True): a decorator
            return lambda model: compile(model, **kwargs)
        owner = getattr(fn, "__self__", None)
        is_call = isinstance(owner, torch.nn.Module) and \
            getattr(fn, "__func__", None) is getattr(type(owner), "__call__", None)
        # A __call__ taken while the root is still being looked for is the stand-in of
        # FirstRoot (_record/attach.py): compile the __call__ it stands in for, as the job
        # would have.
        stands_for = getattr(getattr(fn, "__func__", None), "tokentrace_stands_for", None)
        if is_call and stands_for is not None:
            fn = types.MethodType(stands_for, owner)
            args, kwargs = ((fn,) + args[1:], kwargs) if args else (args, dict(kwargs, model=fn))
        compiled = real(*args, **kwargs)
        if on_compile is not None:
            on_compile()
        if not is_call:
            if kwargs.get("fullgraph") and callable(compiled) and \
                    not isinstance(compiled, torch.nn.Module):
                return _hidden_call(compiled)
            return compiled
        owner_ref = weakref.ref(owner)

        @functools.wraps(compiled)
        def watched(*args, **kwargs):
            model = owner_ref()
            calls = _attached.get(model) if model is not None else None
            if calls is None or not calls.active:
                return compiled(*args, **kwargs)
            return calls.wrapped(compiled)(*args, **kwargs)
        watched.tokentrace_watched = True
        return watched
    compile.tokentrace_watching = True
    torch.compile = compile

    def unwatch():
        if torch.compile is compile:
            torch.compile = real
    return unwatch
