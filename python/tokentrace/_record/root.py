"""Which module is the root (one call of it = one token), chosen as a user would name it.

FirstRoot holds nn.Module.__call__ until the job's first module call, and chooses there:
1. inside a `generate` (transformers' GenerationMixin.generate, or any module's method of that
   name): the model whose generate the job called, the outermost such call on the stack
   (assisted generation calls the assistant's generate inside the main model's). An
   encoder-decoder's first call is its encoder, made by generate before the first decoder
   step: the model is still the root, and the encoder's call is recorded before token 1
   (token 0). A module given to that generate as `assistant_model` is recorded too, under
   site names starting with ASSISTANT ("assistant_model", "assistant_model.model.layers.0");
   its calls are not tokens.
2. else the first module called, unless it is part of a bigger model that the calling code
   holds (a local of a frame on the stack, or a global its code names): a job that calls
   model.get_input_embeddings()(ids) before model.generate(inputs_embeds=...) traces the
   model, not the embedding; the embedding's call is then recorded before token 1.
3. `root` (TOKENTRACE_ROOT, `tokentrace run --root`) overrides both: a site path of the model
   chosen so (`model`, `self`) or a class name (`LlamaForCausalLM`, or with its module:
   `transformers.models.llama.modeling_llama.LlamaForCausalLM`). A class that is not in the
   chosen model is waited for: the first module of that class called is the root.

Until it has chosen, FirstRoot's __call__ makes the call it caught again through
nn.Module.__call__, after the hooks went on, so the first call is recorded like every later
one (its keyword arguments too). Catching the call before the module's own call path starts
keeps a module compiled in place (module.compile()) compiled: its call path, hooks included,
runs inside the compiled region, where a global forward pre-hook would be traced by
TorchDynamo. tt.trace without model= and the preloaded job (preload.py) both find their root
so.
"""

import sys
from dataclasses import dataclass

import torch

from .._common import ROOT, site_names

ASSISTANT = "assistant_model"  # the site prefix of an assisted generation's assistant


@dataclass
class RootChoice:
    """model: the root. how: why it was chosen, as the report says it. first: the module whose
    call found it. assistant: a second model recorded beside it (assisted generation)."""
    model: torch.nn.Module
    how: str
    first: torch.nn.Module | None = None
    assistant: torch.nn.Module | None = None
    # The site whose calls are the tokens when they are not the model's calls: a serving
    # engine's step (_engines/vllm/steps.py), in which the model's calls are then plain calls.
    token: str | None = None
    token_how: str = ""

    @property
    def describe(self):
        """'T5ForConditionalGeneration (the model whose generate was called)'."""
        if self.token is not None:
            return f"{self.token} ({self.token_how}); model {type(self.model).__name__}"
        return f"{type(self.model).__name__} ({self.how})"

    @property
    def doubtful(self):
        """True when another module could have been taken for the root: the first module
        called was not the root, or an assistant runs beside it."""
        return self.first is not self.model or self.assistant is not None

    def meta(self):
        out = {"root": self.describe}
        if self.assistant is not None:
            out["assistant"] = f"{type(self.assistant).__name__} (sites {ASSISTANT}.*)"
        return out


def sites_of(model, assistant=None):
    """{site: module} of the root (root first as `self`) and, after it, the assistant's under
    ASSISTANT (its own `self` is ASSISTANT). An assistant that is part of the model adds
    nothing: its modules already have names."""
    names = site_names(model)
    if assistant is None or any(assistant is m for m in names.values()):
        return names
    for name, module in site_names(assistant).items():
        names.setdefault(ASSISTANT if name == ROOT else f"{ASSISTANT}.{name}", module)
    return names


def _frames(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def _generating(frame):
    """(model, its assistant_model argument) of the outermost generate on the stack."""
    found = None
    for f in _frames(frame):
        if f.f_code.co_name != "generate":
            continue
        local = f.f_locals
        model = local.get("self")
        if isinstance(model, torch.nn.Module):
            assistant = local.get("assistant_model")
            found = (model, assistant if isinstance(assistant, torch.nn.Module) else None)
    return found


def _holder(module, frame):
    """The biggest model held by the code on the stack that `module` is a proper part of."""
    best, best_size = None, 0
    seen = {id(module)}
    for f in _frames(frame):
        named = f.f_globals
        values = list(f.f_locals.values())
        values += [named[n] for n in f.f_code.co_names if n in named]
        for value in values:
            if not isinstance(value, torch.nn.Module) or id(value) in seen:
                continue
            seen.add(id(value))
            parts = list(value.modules())
            if len(parts) > best_size and any(module is p for p in parts):
                best, best_size = value, len(parts)
    return best


def choose_root(module, frame):
    """The automatic choice (rules 1 and 2) at the first call, of `module`, made from `frame`."""
    generating = _generating(frame)
    if generating is not None:
        model, assistant = generating
        if assistant is model:
            assistant = None
        return RootChoice(model, "the model whose generate was called", module, assistant)
    holder = _holder(module, frame)
    if holder is not None:
        return RootChoice(holder, f"the model that the first module called "
                                  f"({type(module).__name__}) is part of", module)
    return RootChoice(module, "the first module called", module)


def _class_matches(module, text):
    cls = type(module)
    return text in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}")


def override_root(choice, text, variable):
    """Rule 3 within the automatic choice: a RootChoice, or None when `text` names neither a
    site of the chosen model nor the class of one of its modules."""
    names = site_names(choice.model)
    found = names.get(text)
    if found is None:
        found = next((m for m in names.values() if _class_matches(m, text)), None)
    if found is None:
        return None
    assistant = choice.assistant if found is choice.model else None
    return RootChoice(found, f"{variable}={text}", choice.first, assistant)


class FirstRoot:
    """Calls on_first(choice) with the RootChoice made at the first module call, before that
    call runs (see the module docstring). root: rule 3's text, or None; variable: its name as
    the user gave it (TOKENTRACE_ROOT, root=). say(line): where a root that is not the only
    candidate, or a --root that does not match yet, is told (None: not told)."""

    def __init__(self, on_first, root=None, variable="TOKENTRACE_ROOT", say=None):
        self._original = torch.nn.Module.__dict__["__call__"]
        self._on_first = on_first
        self._root, self._variable, self._say = root or None, variable, say
        self._waiting = None  # the automatic choice while a --root class is waited for
        self._patched = False
        self._untraced = False
        self._install(sys.modules.get("torch._dynamo"))

    @property
    def waiting_for(self):
        """The --root text still not matched by any module called (None once chosen)."""
        return self._root if self._patched and self._waiting is not None else None

    def _choose(self, module, frame):
        """The RootChoice for this call, or None to let it run unrecorded (a --root class that
        has not been called yet)."""
        if self._root is None:
            return choose_root(module, frame)
        if self._waiting is not None:
            if not _class_matches(module, self._root):
                return None
            return RootChoice(module, f"{self._variable}={self._root}", module)
        auto = choose_root(module, frame)
        chosen = override_root(auto, self._root, self._variable)
        if chosen is None:
            self._waiting = auto
            if self._say is not None:
                self._say(f"{self._variable}={self._root} is neither a module path of "
                          f"{type(auto.model).__name__} nor the class of one of its modules; "
                          f"waiting for a module of that class to be called")
        return chosen

    def _install(self, dynamo):
        original, first = self._original, self

        def attach(module, frame):
            choice = first._choose(module, frame)
            if choice is None:
                return
            first.remove()
            first._on_first(choice)
        attach_now = attach

        def call(module, *args, **kwargs):
            # Code that took `module.__call__` while ours was in place (generate keeps
            # `model_forward = self.__call__` for all its steps) calls us again: pass through.
            if first._patched:
                attach_now(module, sys._getframe(1))
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
