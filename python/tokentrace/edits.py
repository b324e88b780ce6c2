"""Edits of site outputs during real runs: tt.when(selector, action, calls=...).bind(model).

A rule says *where* (a site selector), *when* (a call selector: tt.prefill, tt.call(k),
tt.token(k), ranges; default every call) and *what* (a declarative op from _patch_ops, or a
Python callable fn(values, *, ctx) run in the hook, eager only). A bound model runs the
model's real forward/generate with the rules installed as forward hooks, and records nothing;
bound.last_report counts the fires of the last run.

Declarative ops run through one native patch table per bound spec (_torch_ops.PatchTable, the
libtokentrace_torch_ops library), built at bind time on the model's device: each selected
module gets a site id, each (rule, call selector) an entry. The module's forward hook makes
one in-place call torch.ops.tokentrace.apply_patches_(output, table, site); the root's forward
pre-hook calls torch.ops.tokentrace.advance_token(table). Which entries fire is decided from
the table's own counters (device memory for a CUDA table), so the hooks hold no Python state:
torch.compile traces them without a graph break and a CUDA graph that captures a step replays
the edit at the right calls and tokens. Fires and skips are read back only when a report is
read. Python callables run in the hook with Python-side counters (eager only).

Specs also load from JSON (load_spec, EditSpec.to_json; the format is in _edit_json.py), which
is how preload mode (TOKENTRACE_PATCHES) gets them.

Counting: each run of the bound model (one __call__ or one generate) starts fresh; k is the
site's 1-based call number within the run and the token is the root call number within the
run (so in generate, token 1 is the prefill).
"""

import contextlib
import re
import threading
import warnings

import torch

from ._errors import EditSkipWarning, TokentraceError, fail
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

    def table_selectors(self):
        """The patch table's selectors for this one: a list of "every", ("call", k),
        ("calls", a, b), ("token", k), ("tokens", a, b); their union is this selector. Sets
        are merged into disjoint runs, so within one kind no call is selected twice."""
        if self.by == "every":
            return ["every"]
        parts = {"call": [], "token": []}
        stack = [self]
        while stack:
            sel = stack.pop()
            if sel.by == "every":
                return ["every"]
            if sel.by == "any":
                stack.extend(sel.values)
            else:
                parts[sel.by].append(sel.values)
        out = []
        for kind in ("call", "token"):
            for a, b in _runs(parts[kind]):
                out.append((kind, a) if a == b else (kind + "s", a, b))
        return out

    def __repr__(self):
        return self.text


def _runs(value_sets):
    """Disjoint inclusive runs [(a, b)] covering the union of ranges and int sets."""
    spans = []
    for values in value_sets:
        if isinstance(values, range) and values.step == 1:
            if len(values):
                spans.append((values.start, values[-1]))
        else:
            spans.extend((v, v) for v in values)
    spans.sort()
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


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
    def __init__(self, selector, action, calls, input=None):
        self.selector = selector
        self.action = action
        self.calls = calls
        self.input = input  # a path into the call's inputs, or None: the output

    def describe(self):
        act = self.action.describe() if isinstance(self.action, Op) else getattr(
            self.action, "__name__", "callable")
        where = f" input {self.input!r}" if self.input is not None else ""
        return f"{self.selector!r}{where} -> {act} on {self.calls!r}"


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


def when(selector, action, calls=None, *, input=None):
    """A rule: at the sites `selector` selects, on the calls `calls` selects, run `action`.

    action: tt.zero/fill/add/scale/clamp/replace(...), or fn(values, *, ctx) returning the new
    values (or None after editing them in place). input: edit the call's input at this path
    (as trace["site:k"].inputs names it: "hidden_states", "past_key_values.layers[0].values")
    before forward runs, instead of its output.
    """
    selector = as_selector(selector, "tt.when selector")
    if not (isinstance(action, Op) or callable(action)):
        fail(f"tt.when action must be a patch op (tt.zero(), tt.scale(f), ...) or a callable "
             f"fn(values, *, ctx); got {type(action).__name__}")
    if input is not None and (not isinstance(input, str) or not input):
        fail(f"tt.when input= takes a path into the call's inputs, such as 'hidden_states' or "
             f"'past_key_values.layers[0].values'; got {input!r}")
    return EditSpec([Rule(selector, action, as_calls(calls), input)])


def load_spec(path, device=None):
    """Reads an edit spec from a JSON file (a list of rules; the format is in docs/python.md
    and _edit_json.py). device: where tensor operands go (default the CPU)."""
    from ._edit_json import load_spec as _load
    return _load(path, device)


# --- installation -------------------------------------------------------------------------
_TABLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_MAX_ENTRIES = 4096


class EditReport:
    """What the edits of one run did. num_fires (total), per_rule [(rule, fires)], num_skips,
    per_rule_skips, skip_reasons {rule: last reason}, last_skip_reason. The native table's
    counters are read the first time one of these is asked for (a device sync on CUDA), never
    while the model runs."""

    def __init__(self, hooks, run, python_fires):
        self._hooks, self._run = hooks, run
        self._python_fires = list(python_fires)
        self._data = None

    def _read(self):
        if self._data is None:
            self._data = self._hooks._snapshot(self._run, self._python_fires)
        return self._data

    @property
    def num_fires(self):
        return sum(n for _, n in self._read()["fires"])

    @property
    def per_rule(self):
        return list(self._read()["fires"])

    @property
    def num_skips(self):
        return sum(n for _, n in self._read()["skips"])

    @property
    def per_rule_skips(self):
        return list(self._read()["skips"])

    @property
    def skip_reasons(self):
        return dict(self._read()["reasons"])

    @property
    def last_skip_reason(self):
        reasons = list(self._read()["reasons"].values())
        return reasons[-1] if reasons else None

    def __repr__(self):
        try:
            text = f"num_fires={self.num_fires}, per_rule={self.per_rule}"
            if self.num_skips:
                text += f", num_skips={self.num_skips}, last_skip_reason={self.last_skip_reason!r}"
        except TokentraceError as exc:
            text = str(exc)
        return f"EditReport({text})"


def _user_stacklevel():
    """The warnings stacklevel of the first frame outside tokentrace and contextlib."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not (os.path.abspath(name).startswith(here) or name.endswith("contextlib.py")):
            return level
        frame, level = frame.f_back, level + 1
    return 1


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


def _view_key(index):
    """(key, box): key None for a left-aligned box (dims after the box are whole), or
    (p, q) when an Ellipsis has p entries before and q after it; the box is then applied to
    the output viewed with rank p + 1 + q (the dims the Ellipsis covers flattened into one)."""
    if index is None:
        return None, ()
    if Ellipsis not in index:
        return None, tuple(index)
    p = index.index(Ellipsis)
    pre, post = index[:p], index[p + 1:]
    if not post:  # a trailing Ellipsis changes nothing: dims past the box are whole
        return None, tuple(pre)
    return (p, len(post)), tuple(pre) + (slice(None),) + tuple(post)


def _apply_view(values, key, handle, site):
    """apply_patches_ on `values` in place, through the (p, q) view of an Ellipsis box."""
    p, q = key
    n = values.dim()
    if n < p + q:  # the box cannot fit: the table skips and counts it
        torch.ops.tokentrace.apply_patches_(values, handle, site)
    elif n == p + q:
        torch.ops.tokentrace.apply_patches_(values.unsqueeze(p), handle, site)
    elif values.is_contiguous():
        torch.ops.tokentrace.apply_patches_(values.flatten(p, n - q - 1), handle, site)
    else:  # flatten may copy a strided tensor: edit the copy, write it back
        tmp = values.flatten(p, n - q - 1)
        torch.ops.tokentrace.apply_patches_(tmp, handle, site)
        values.copy_(tmp.view(values.shape))


def _last_dim(module):
    """The size of the output's last dimension when the module type fixes it, else None."""
    if isinstance(module, torch.nn.Linear):
        return module.out_features, f"out_features of {type(module).__name__}"
    if isinstance(module, torch.nn.Embedding):
        return module.embedding_dim, "embedding_dim of Embedding"
    return None, None


def _float_dtype(module):
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def _slice_len(part, size):
    return len(range(*part.indices(size)))


class _Segment:
    """Consecutive actions at one site: op rules sharing one table site id (and view key), or
    one callable rule."""

    __slots__ = ("rules", "site_id", "key", "fn")

    def __init__(self, rules, site_id=None, key=None, fn=None):
        self.rules, self.site_id, self.key, self.fn = rules, site_id, key, fn


class EditHooks:
    """The forward hooks of one spec on one model. Resolving, validation and the patch table
    happen here, before any run: errors come before any model work."""

    def __init__(self, model, spec):
        if not isinstance(model, torch.nn.Module):
            fail(f"bind() takes a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.spec = spec
        self.modules = site_names(model)
        names = list(self.modules)
        targets = {}  # (site, input path or None for the output) -> [rule index], rule order
        for i, rule in enumerate(spec.rules):
            for site in rule.selector.resolve(names, "tt.when selector"):
                targets.setdefault((site, rule.input), []).append(i)
        by_site = {}
        for target in targets:
            by_site.setdefault(target[0], []).append(target)
        self.targets = {t: targets[t] for site in names for t in by_site.get(site, ())}
        self.has_callables = any(not isinstance(r.action, Op) for r in spec.rules)
        self.table = None
        self.handle = None
        self.device = None
        self.entry_rule = []  # table entry -> rule index
        self._entries = []    # (site id, op, box, table selector) per entry
        self.plans = {}       # (site, input path or None) -> [_Segment]
        self._plan()
        if self.entry_rule:
            self._build_table()
        self.handles = []
        self._run = 0
        self._warned = False
        self._local = threading.local()
        self._reset_python()

    # -- planning and validation ---------------------------------------------------------
    def _rule_error(self, i, message):
        fail(f"rule {i} ({self.spec.rules[i].describe()}): {message}")

    def _plan(self):
        site_id = 0
        for target, rule_ids in self.targets.items():
            segments = []
            for i in rule_ids:
                action = self.spec.rules[i].action
                if not isinstance(action, Op):
                    segments.append(_Segment([i], fn=action))
                    continue
                key, box = _view_key(action.index)
                if segments and segments[-1].fn is None and segments[-1].key == key:
                    segments[-1].rules.append((i, box))
                    continue
                segments.append(_Segment([(i, box)], site_id=site_id, key=key))
                site_id += 1
            self.plans[target] = segments
        self.num_sites = site_id
        if not site_id:
            return
        from . import _torch_ops
        _torch_ops.load_library()  # a clear error (how to build it) before anything else
        self.device = self.current_device()
        model_dtype = _float_dtype(self.model)
        for (site, path), segments in self.plans.items():
            module = self.modules[site]
            dtype = _float_dtype(module) or model_dtype
            for seg in segments:
                if seg.fn is not None:
                    continue
                for i, box in seg.rules:
                    self._validate(i, site, module, dtype, seg.key, box, path is None)
                    self._add_entries(i, seg.site_id, box)

    def _device_of(self, site):
        for source in (self.modules[site], self.model):
            for t in source.parameters():
                return t.device
            for t in source.buffers():
                return t.device
        return torch.device("cpu")

    def _validate(self, i, site, module, dtype, key, box, output):
        op = self.spec.rules[i].action
        if dtype is not None and dtype not in _TABLE_DTYPES:
            self._rule_error(i, f"{site} computes in {str(dtype).replace('torch.', '')}; the "
                                f"patch table edits float32, float16 and bfloat16 outputs")
        t = op.operand_tensor()
        if t is not None:
            if t.device != self.device:
                self._rule_error(i, f"the operand is on {t.device} but the model is on "
                                    f"{self.device}; move it with .to({str(self.device)!r}) "
                                    f"(or load_spec(path, device=...))")
            if t.dtype not in _TABLE_DTYPES + (torch.float64,):
                self._rule_error(i, f"the operand has dtype {str(t.dtype).replace('torch.', '')}"
                                    f"; accepted: float32, float16, bfloat16")
            if t.dim() > 6:
                self._rule_error(i, f"the operand has {t.dim()} dimensions; the patch table "
                                    f"takes up to 6")
        if t is not None and key is not None:
            after = sum(isinstance(e, slice) for e in box[key[0] + 1:])
            lead = t.shape[:max(t.dim() - after, 0)]
            if any(n != 1 for n in lead):
                self._rule_error(i, f"with ... in index=, the operand may vary only along the "
                                    f"{after} box dimension(s) after the ... (they are applied "
                                    f"to every position the ... covers); its shape is "
                                    f"{list(t.shape)}")
        size, what = _last_dim(module) if output else (None, None)  # inputs: known at the call
        if size is None:
            return
        last_box = None  # the box's size along the output's last dim, when known
        if key is not None:  # (..., e): e is the output's last dimension
            e = box[-1]
            if isinstance(e, int):
                if not -size <= e < size:
                    self._rule_error(i, f"index {e} is outside the last dimension of {site}'s "
                                        f"output (size {size}, the {what}); accepted: "
                                        f"{-size}..{size - 1}")
            else:
                last_box = {_slice_len(e, size)}
        elif not box:
            last_box = {size}
        elif isinstance(box[-1], slice):  # the box's last entry is the last dim, or dims follow
            last_box = {size, _slice_len(box[-1], size)}
        if t is not None and t.dim() >= 1 and last_box is not None:
            n = t.shape[-1]
            if n != 1 and n not in last_box:
                want = " or ".join(str(v) for v in sorted(last_box | {1}))
                self._rule_error(i, f"operand shape {list(t.shape)} does not broadcast over the "
                                    f"box: its last dimension has {n} elements, the box's last "
                                    f"dimension at {site} has {want} ({what} = {size})")

    def _add_entries(self, i, site_id, box):
        rule = self.spec.rules[i]
        selectors = rule.calls.table_selectors()
        if len(self.entry_rule) + len(selectors) > _MAX_ENTRIES:
            self._rule_error(i, f"its calls= selects too many separate calls or tokens for the "
                                f"patch table ({_MAX_ENTRIES} entries); use ranges")
        for sel in selectors:
            self._entries.append((site_id, rule.action, box, sel))
            self.entry_rule.append(i)

    def _build_table(self):
        from . import _torch_ops
        table = _torch_ops.PatchTable(self.num_sites)
        for site_id, op, box, sel in self._entries:
            args = dict(op.table_args())
            if isinstance(args.get("operand"), torch.Tensor) and \
                    args["operand"].dtype == torch.float64:
                args["operand"] = args["operand"].float()  # ops compute in float32 anyway
            table.add_entry(site_id, op.name, index=box, calls=sel, **args)
        try:
            table.upload(self.device)
        except RuntimeError as exc:  # ValidateEntryStatic's words, "(patch entry n)"
            text = str(exc).splitlines()[0]
            m = re.search(r"\(patch entry (\d+)\)", text)
            if m:
                self._rule_error(self.entry_rule[int(m.group(1))],
                                 text.replace(m.group(0), "").removeprefix("tokentrace: ").strip())
            fail(text.removeprefix("tokentrace: "))
        self.table = table
        self.handle = table.handle

    # -- runs and counters ---------------------------------------------------------------
    def _reset_python(self):
        self.fires = [0] * len(self.spec.rules)  # callable rules only; ops count in the table
        self.counts = {}
        self.token = 0
        self._local = threading.local()

    def current_device(self):
        return self._device_of(next(s for (s, _), segs in self.plans.items()
                                    if any(g.fn is None for g in segs)))

    def begin_run(self):
        """A new run: the table follows the model's device (re-uploaded when the model moved)
        and every counter starts from zero."""
        self._run += 1
        self._reset_python()
        if self.table is None:
            return
        device = self.current_device()
        if device != self.table.device:
            self.device = device
            self.table.upload(device)  # operands are copied there; counters start at zero
            self.handle = self.table.handle
        else:
            self.table.reset()

    def reset_counters(self):
        """Counters back to zero without ending the run (e.g. after a CUDA-graph warm-up)."""
        self._reset_python()
        if self.table is not None:
            self.table.reset()

    def report(self):
        report = EditReport(self, self._run, self.fires)
        if self.table is not None and self.table.device.type == "cpu":
            report._read()  # host counters: free to read, so skips warn right away
        return report

    def _snapshot(self, run, python_fires):
        if run != self._run:
            fail("this report's counters were reset by a later run of the bound model; read "
                 "bound.last_report after each run")
        fires = list(python_fires)
        skips = [0] * len(self.spec.rules)
        reasons = {}
        if self.table is not None:
            counters = self.table.counters()
            for e, i in enumerate(self.entry_rule):
                fires[i] += counters["fires"][e]
                skips[i] += counters["skips"][e]
            if any(counters["skips"]):
                errors = self.table.errors()
                for e, i in enumerate(self.entry_rule):
                    if counters["skips"][e] and errors[e]:
                        reasons[self.spec.rules[i].describe()] = errors[e].removeprefix(
                            "tokentrace: ")
        rules = self.spec.rules
        data = {"fires": [(r.describe(), n) for r, n in zip(rules, fires)],
                "skips": [(r.describe(), n) for r, n in zip(rules, skips)],
                "reasons": reasons}
        if sum(skips) and not self._warned:
            self._warned = True
            rule, why = next(iter(reasons.items())) if reasons else ("?", "?")
            warnings.warn(f"tokentrace: {sum(skips)} edit(s) matched a call but did not fit the "
                          f"output and were skipped ({rule}: {why}); see "
                          f"last_report.skip_reasons", EditSkipWarning,
                          stacklevel=_user_stacklevel())
        return data

    # -- hooks ---------------------------------------------------------------------------
    def install(self):
        try:
            root = self.modules[ROOT]
            self.handles.append(root.register_forward_pre_hook(self._root_pre, prepend=True))
            if self.has_callables:
                self.handles.append(root.register_forward_hook(self._root_post,
                                                               always_call=True))
            for (site, path), segments in self.plans.items():
                mod = self.modules[site]
                if path is not None:  # before forward, ahead of the recording's input hook
                    from ._input_edit import input_hook
                    hook = input_hook(mod, site, path, self._input_edit(site, path, segments))
                    self.handles.append(mod.register_forward_pre_hook(hook, prepend=True,
                                                                      with_kwargs=True))
                elif any(seg.fn is not None for seg in segments):
                    self.handles.append(mod.register_forward_pre_hook(self._pre(site),
                                                                      prepend=True))
                    hook = self._post(site, segments)
                    self.handles.append(mod.register_forward_hook(hook, prepend=True,
                                                                  always_call=True))
                else:
                    self.handles.append(mod.register_forward_hook(self._post_ops(segments),
                                                                  prepend=True))
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
        if self.table is not None:
            torch.ops.tokentrace.advance_token(self.handle)
        if self.has_callables:
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

    def _apply_ops(self, values, seg):
        if seg.key is None:
            torch.ops.tokentrace.apply_patches_(values, self.handle, seg.site_id)
        else:
            _apply_view(values, seg.key, self.handle, seg.site_id)

    def _post_ops(self, segments):
        """Only declarative ops at this site: in-place table calls, no Python state (what
        torch.compile traces and a CUDA graph captures)."""
        def post(module, args, output):
            values, path = first_tensor(output)
            if values is None:
                return None
            copied = any(values is a for a in args)
            if copied:  # the module returned its input: edit a copy, not the caller's tensor
                values = values.clone()
            for seg in segments:
                self._apply_ops(values, seg)
            return _replace_first(output, values, path) if copied else None
        return post

    def _run_rules(self, values, segments, site, k):
        """Applies one target's segments to `values`; the (possibly new) tensor."""
        rules = self.spec.rules
        ctx = EditContext(site, k, self.token)
        for seg in segments:
            if seg.fn is None:
                self._apply_ops(values, seg)
                continue
            i = seg.rules[0]
            if not rules[i].calls.matches(k, self.token):
                continue
            new = seg.fn(values, ctx=ctx)
            if new is not None and not isinstance(new, torch.Tensor):
                fail(f"the edit {rules[i].describe()} returned {type(new).__name__}; "
                     f"return a tensor (or None after editing in place)")
            if new is not None:
                values = new
            self.fires[i] += 1
        return values

    def _input_edit(self, site, path, segments):
        """What the input pre-hook runs on a copy of the input at `path`."""
        def edit(values):
            k = self.counts.get((site, path), 0) + 1
            self.counts[(site, path)] = k
            return self._run_rules(values, segments, site, k)
        return edit

    def _post(self, site, segments):
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
            original = values
            if any(values is a for a in args):
                values = values.clone()
            values = self._run_rules(values, segments, site, k)
            return _replace_first(output, values, path) if values is not original else None
        return post


class BoundModel:
    """The model with edits installed per run. bound(...) = forward, bound.generate(...).

    Each call of bound(...) or bound.generate(...) is one run: the hooks go on, every counter
    starts from zero (token 1 = the first root call), and last_report describes the run. Inside
    `with bound.installed():` the hooks stay on across calls of the model (bound or not) and
    counting continues: what a serving loop or a CUDA graph replayed step by step needs."""

    def __init__(self, model, spec):
        self._hooks = EditHooks(model, spec)  # resolves and validates now: errors before any run
        self._model = model
        self._inside = False
        self.last_report = None

    @property
    def model(self):
        return self._model

    @property
    def patch_table(self):
        """The native PatchTable of the declarative rules (None when there are none)."""
        return self._hooks.table

    def _run(self, fn, args, kwargs):
        if self._inside:
            return fn(*args, **kwargs)
        with self.installed():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def installed(self):
        """Installs the edits on the model for the whole block (one run); last_report covers
        it. Counters continue across calls inside the block."""
        if self._inside:
            fail("the edits of this bound model are already installed (nested installed())")
        hooks = self._hooks
        hooks.begin_run()
        hooks.install()
        self._inside = True
        try:
            yield self
        finally:
            self._inside = False
            hooks.remove()
            self.last_report = hooks.report()

    def reset_counters(self):
        """Every call, token and fire counter back to zero (inside installed(): e.g. after
        warming up and capturing a CUDA graph, before replaying it)."""
        self._hooks.reset_counters()

    def report(self):
        """A report of the counters so far (inside installed(), or of the last run)."""
        return self._hooks.report()

    def __call__(self, *args, **kwargs):
        return self._run(self._model, args, kwargs)

    def generate(self, *args, **kwargs):
        return self._run(self._model.generate, args, kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __repr__(self):
        return f"<tokentrace bound {type(self._model).__name__} {self._hooks.spec!r}>"
