"""Edits of site outputs during real runs: tt.when(selector, action, calls=...).bind(model).

A rule says *where* (a site selector), *when* (a call selector: tt.prefill, tt.call(k),
tt.token(k), ranges; default every call) and *what* (a declarative op from _patch_ops, or a
Python callable fn(values, *, ctx) run in the hook, eager only). A bound model runs the
model's real forward/generate with the rules installed as forward hooks that replace the
output, and records nothing; bound.last_report counts the fires of the last run.

Specs also load from JSON (load_spec, EditSpec.to_json; the format is in _edit_json.py), which
is how preload mode (TOKENTRACE_PATCHES) gets them.

Counting: each run of the bound model (one __call__ or one generate) starts fresh; k is the
site's 1-based call number within the run and the token is the root call number within the
run (so in generate, token 1 is the prefill).
"""

import threading

import torch

from ._errors import fail
from ._naming import ROOT, site_names
from ._outputs import first_tensor
from ._patch_ops import Op
from ._selectors import as_selector


# --- call selectors -------------------------------------------------------------------
class CallSelector:
    def __init__(self, by, values, text):
        self.by = by          # "every" | "call" | "token" | "any" (a union)
        self.values = values  # frozenset/range of ints, or a tuple of selectors for "any"
        self.text = text

    def matches(self, k, token):
        if self.by == "every":
            return True
        if self.by == "any":
            return any(s.matches(k, token) for s in self.values)
        return (k if self.by == "call" else token) in self.values

    def __or__(self, other):
        other = as_calls(other)
        return CallSelector("any", (self, other), f"{self.text} | {other.text}")

    def __repr__(self):
        return self.text


def _ints(by, value):
    if isinstance(value, range):
        if value.step <= 0 or value.start < 1:
            fail(f"tt.{by}(range) takes increasing 1-based ranges, got {value!r}")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            fail(f"tt.{by}(k): k is 1-based, got {value}")
        return frozenset([value])
    if isinstance(value, (list, tuple, set, frozenset)) and value:
        return frozenset(_one for v in value for _one in _ints(by, v))
    fail(f"tt.{by}() takes an int k (1-based), a range, or a list of ints; got {value!r}")


def call(k):
    """The k-th call of the site (1-based); a range or list selects several."""
    return CallSelector("call", _ints("call", k), f"tt.call({k!r})")


def token(k):
    """Calls during token k (1-based; token 1 is the prefill); a range or list selects several."""
    return CallSelector("token", _ints("token", k), f"tt.token({k!r})")


prefill = CallSelector("call", frozenset([1]), "tt.prefill")
every_call = CallSelector("every", None, "every call")


def as_calls(value):
    if value is None:
        return every_call
    if isinstance(value, CallSelector):
        return value
    if isinstance(value, (int, range)) and not isinstance(value, bool):
        return call(value)
    fail(f"calls= takes tt.prefill, tt.call(k), tt.token(k), a range of calls, or None "
         f"(every call); got {value!r}")


# --- rules and specs --------------------------------------------------------------------
class EditContext:
    """What a callable action is told: the site, its call number k, and the token."""

    __slots__ = ("site", "call", "token")

    def __init__(self, site, call, token):
        self.site, self.call, self.token = site, call, token

    def __repr__(self):
        return f"EditContext(site={self.site!r}, call={self.call}, token={self.token})"


class Rule:
    def __init__(self, selector, action, calls):
        self.selector = selector
        self.action = action
        self.calls = calls

    def describe(self):
        act = self.action.describe() if isinstance(self.action, Op) else getattr(
            self.action, "__name__", "callable")
        return f"{self.selector!r} -> {act} on {self.calls!r}"


class EditSpec:
    """One or more rules; combine with `+`; install with .bind(model)."""

    def __init__(self, rules):
        self.rules = list(rules)

    def __add__(self, other):
        if not isinstance(other, EditSpec):
            fail(f"edit specs combine with other specs from tt.when(...), got "
                 f"{type(other).__name__}")
        return EditSpec(self.rules + other.rules)

    def bind(self, model):
        """A bound model: calls run the real forward (and .generate the real generate) with
        these edits installed; nothing is recorded."""
        return BoundModel(model, self)

    def hooks_for(self, model):
        return EditHooks(model, self)

    def to_json(self, path=None, *, operand_dir=None):
        """The JSON form of this spec (what tt.load_spec reads), as text; also written to
        `path` when given. Tensor operands loaded from a file refer to that file; in-memory
        ones are saved as .safetensors under `operand_dir` (required for them). Rules with a
        Python callable have no JSON form (an error)."""
        from ._edit_json import to_json
        return to_json(self, path, operand_dir)

    def __repr__(self):
        return "EditSpec(" + "; ".join(r.describe() for r in self.rules) + ")"


def when(selector, action, calls=None):
    """A rule: at the sites `selector` selects, on the calls `calls` selects, run `action`.

    action: tt.zero/fill/add/scale/clamp/replace(...), or fn(values, *, ctx) returning the new
    values (or None after editing them in place).
    """
    selector = as_selector(selector, "tt.when selector")
    if not (isinstance(action, Op) or callable(action)):
        fail(f"tt.when action must be a patch op (tt.zero(), tt.scale(f), ...) or a callable "
             f"fn(values, *, ctx); got {type(action).__name__}")
    return EditSpec([Rule(selector, action, as_calls(calls))])


def load_spec(path, device=None):
    """Reads an edit spec from a JSON file (a list of rules; the format is in docs/python.md
    and _edit_json.py). device: where tensor operands go (default the CPU)."""
    from ._edit_json import load_spec as _load
    return _load(path, device)


# --- installation -------------------------------------------------------------------------
class EditReport:
    def __init__(self, rules, fires):
        self.per_rule = [(r.describe(), n) for r, n in zip(rules, fires)]
        self.num_fires = sum(fires)

    def __repr__(self):
        return f"EditReport(num_fires={self.num_fires}, per_rule={self.per_rule})"


def _replace_first(output, new, path):
    if path == "":
        return new
    if isinstance(output, (tuple, list)) and path.startswith("["):
        i = int(path[1:path.index("]")])
        rest = path[path.index("]") + 1:].lstrip(".")
        items = list(output)
        items[i] = _replace_first(items[i], new, rest)
        return type(output)(items) if isinstance(output, list) else (
            output.__class__(*items) if hasattr(output, "_fields") else tuple(items))
    if isinstance(output, dict):
        key, _, rest = path.partition(".")
        if "[" in key:
            key, rest = key[:key.index("[")], key[key.index("["):] + (("." + rest) if rest else "")
        output[key] = _replace_first(output[key], new, rest)
        return output
    fail(f"cannot put the edited tensor back at {path!r} in a {type(output).__name__}")


class EditHooks:
    """The forward hooks of one spec on one model. Resolving happens here, before any run."""

    def __init__(self, model, spec):
        if not isinstance(model, torch.nn.Module):
            fail(f"bind() takes a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.spec = spec
        names = list(site_names(model))
        self.targets = {}  # site -> [rule index]
        for i, rule in enumerate(spec.rules):
            for site in rule.selector.resolve(names, "tt.when selector"):
                self.targets.setdefault(site, []).append(i)
        self.modules = site_names(model)
        self.handles = []
        self.reset()

    def reset(self):
        self.fires = [0] * len(self.spec.rules)
        self.counts = {}
        self.token = 0
        self._local = threading.local()

    def report(self):
        return EditReport(self.spec.rules, self.fires)

    def install(self):
        try:
            root = self.modules[ROOT]
            self.handles.append(root.register_forward_pre_hook(self._root_pre, prepend=True))
            self.handles.append(root.register_forward_hook(self._root_post, always_call=True))
            for site, rule_ids in self.targets.items():
                mod = self.modules[site]
                self.handles.append(mod.register_forward_pre_hook(self._pre(site), prepend=True))
                self.handles.append(mod.register_forward_hook(self._post(site, rule_ids),
                                                              prepend=True, always_call=True))
        except BaseException:
            self.remove()
            raise

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _depth(self):
        return getattr(self._local, "root_depth", 0)

    def _root_pre(self, module, args):
        if self._depth() == 0:
            self.token += 1
        self._local.root_depth = self._depth() + 1

    def _root_post(self, module, args, output):
        self._local.root_depth = max(self._depth() - 1, 0)

    def _stack(self, site):
        stacks = getattr(self._local, "stacks", None)
        if stacks is None:
            stacks = self._local.stacks = {}
        return stacks.setdefault(site, [])

    def _pre(self, site):
        def pre(module, args):
            k = self.counts.get(site, 0) + 1
            self.counts[site] = k
            self._stack(site).append(k)
        return pre

    def _post(self, site, rule_ids):
        rules = self.spec.rules

        def post(module, args, output):
            stack = self._stack(site)
            if not stack:
                return None
            k = stack.pop()
            if output is None:
                return None  # the forward raised; always_call hooks see no output
            values, path = first_tensor(output)
            if values is None:
                return None
            ctx = EditContext(site, k, self.token)
            changed = False
            for i in rule_ids:
                rule = rules[i]
                if not rule.calls.matches(k, self.token):
                    continue
                if isinstance(rule.action, Op):
                    new = rule.action.apply(values, ctx)
                else:
                    new = rule.action(values, ctx=ctx)
                    if new is not None and not isinstance(new, torch.Tensor):
                        fail(f"the edit {rule.describe()} returned {type(new).__name__}; "
                             f"return a tensor (or None after editing in place)")
                if new is not None:
                    values = new
                    changed = True
                self.fires[i] += 1
            return _replace_first(output, values, path) if changed else None
        return post


class BoundModel:
    """The model with edits installed per run. bound(...) = forward, bound.generate(...)."""

    def __init__(self, model, spec):
        self._hooks = EditHooks(model, spec)  # resolves selectors now: errors before any run
        self._model = model
        self.last_report = None

    @property
    def model(self):
        return self._model

    def _run(self, fn, args, kwargs):
        hooks = self._hooks
        hooks.reset()
        hooks.install()
        try:
            return fn(*args, **kwargs)
        finally:
            hooks.remove()
            self.last_report = hooks.report()

    def __call__(self, *args, **kwargs):
        return self._run(self._model, args, kwargs)

    def generate(self, *args, **kwargs):
        return self._run(self._model.generate, args, kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __repr__(self):
        return f"<tokentrace bound {type(self._model).__name__} {self._hooks.spec!r}>"
