"""The forward hooks of one edit spec on one model (EditHooks), and how a call is counted.

Declarative ops run through one native patch table per bound spec (torch_library.PatchTable, the
libtokentrace_torch_ops library), built at bind time on the model's device: each selected
module gets a site id, each (rule, call selector) an entry (table.py). The module's
forward hook makes one in-place call torch.ops.tokentrace.apply_patches_(output, table, site);
the root's forward pre-hook calls torch.ops.tokentrace.advance_token(table). Which entries fire
is decided from the table's own counters (device memory for a CUDA table), so the hooks hold
no Python state: torch.compile traces them without a graph break and a CUDA graph that
captures a step replays the edit at the right calls and tokens. Python callables run in the
hook with Python-side counters (eager only).

Rules that select ops (tt.func, tt.in_module, tt.label, ...) are run by an op mode
(op_edits.py), which install() enters only when there are some: a declarative one has a table
site of its own, a callable a Python counter, each advanced only at the ops its selector chose
(its k). A rule that selects by label (or tt.where) makes the mode number every op of the run
as the trace's reader does (op_labels.py; self.live_labels, restarted with the counters).

Where the call number k is counted, and why each place must:
- the patch table (cuda/patch_table.h, site_calls; advanced by apply_patches_): op rules. It
  lives where the op runs (device memory for a CUDA table), so a CUDA graph that captured a
  step replays the right k; a counter on the host would stay at its capture-time value.
- here (self.counts in _pre and _input_edit): callable rules and input edits. They run in
  Python, eager only, with nothing recorded as often as not, and their k restarts with each
  run of the bound model.
- the joiner (src/core/joiner.cc, NextK): the k a trace stores. It is given when the drain
  thread joins the rings' push events, after the call, so a hook deciding at the call cannot
  read it: python/src/native.cc's current() reads the recorder's open call, whose k is 0
  until the joiner numbers it (src/core/recorder.cc). Asking the extension from every hook
  would also put a call into the hot path that op rules keep free of Python.
"""

import contextlib
import threading
import warnings

import torch

from .._backend import torch_library
from .._common import ROOT, first_tensor, replace_in_output, site_names
from .._errors import fail
from . import label_memory
from .inputs import input_hook, output_finder
from .op_edits import OpEdits
from .op_labels import LiveLabels
from .operations import Op
from .report import EditReport, counters, warn_skips, warn_unfired
from .requests import ServedRules
from .rules import EditContext
from .table import TableEntries
from .views import apply_view, float_dtype, validate, view_key


class _Segment:
    """Consecutive actions at one site: op rules sharing one table site id (and view key), or
    one callable rule."""

    __slots__ = ("rules", "site_id", "key", "fn")

    def __init__(self, rules, site_id=None, key=None, fn=None):
        self.rules, self.site_id, self.key, self.fn = rules, site_id, key, fn


# The site prefix a recording gives an assisted generation's assistant (_record/root.py).
ASSISTANT = "assistant_model"


class EditHooks:
    """The forward hooks of one spec on one model. Resolving, validation and the patch table
    happen here, before any run: errors come before any model work."""

    def __init__(self, model, spec, sites=None, serving=None):
        if not isinstance(model, torch.nn.Module):
            fail(f"bind() takes a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.spec = spec
        # {site: module}: the model's, and a recorded assistant's ("assistant_model.*")
        self.modules = dict(sites) if sites is not None else site_names(model)
        names = list(self.modules)
        # (site, where) -> [rule index], in rule order; where: None (the output's first
        # tensor), ("input", path) or ("output", path)
        targets = {}
        # Rules that select ops (op_edits.py): run by the op mode, not by module hooks.
        self.op_rules = [i for i, r in enumerate(spec.rules) if r.selector.names_ops]
        for i, rule in enumerate(spec.rules):
            if rule.selector.names_ops:
                continue
            if sites is None and any(str(p).startswith(ASSISTANT)
                                     for p in getattr(rule.selector, "patterns", ())):
                fail(f"rule {i} ({rule.describe()}): sites under {ASSISTANT!r} are an assisted "
                     f"generation's assistant, which tt.trace, tt.record and `tokentrace run "
                     f"--edits` edit beside the model; a bound model edits its own sites only "
                     f"(bind the assistant itself, with its own site names)")
            for site in rule.selector.resolve(names, "tt.when selector"):
                where = (("input", rule.input) if rule.input is not None else
                         ("output", rule.output) if rule.output is not None else None)
                targets.setdefault((site, where), []).append(i)
        by_site = {}
        for target in targets:
            by_site.setdefault(target[0], []).append(target)
        self.targets = {t: targets[t] for site in names for t in by_site.get(site, ())}
        self.has_callables = any(not isinstance(r.action, Op) for r in spec.rules)
        self.table = None
        self.handle = None
        self.device = None
        self._entries = TableEntries()
        self.entry_rule = self._entries.entry_rule  # table entry -> rule index
        # rules for served requests (requests.py): their row masks, in a serving engine
        from .._engines import max_rows, not_served_why
        from .._engines import serving as served_by_engine
        if serving is None:
            serving = served_by_engine(model)
        self.served = ServedRules(spec.rules, serving, self._rule_error,
                                  None if serving else not_served_why(model))
        if self.served.slots:
            self.served.max_rows = max_rows(model) or self.served.max_rows
        self.plans = {}       # (site, where) -> [_Segment]
        self.op_plans = {}    # op rule index -> _Segment
        self.op_mode = None   # the OpEdits of a run, while installed
        self._scope = None    # (backend, site id): where the edits' own ops are recorded
        self._plan()
        if self.entry_rule:
            self.table = self._entries.build(self.num_sites, self.device, self._rule_error,
                                             len(self.served.slots), self.served.max_rows)
            self.handle = self.table.handle
        self.handles = []
        self._run = 0
        self.step_driven = False  # a serving engine's steps are the tokens (engine_step)
        self._rows_due = False  # a step began whose rows have not come (serving_rows)
        self._warned = False
        self._warned_unfired = False
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
                rule = self.spec.rules[i]
                action = rule.action
                if not isinstance(action, Op):
                    segments.append(_Segment([i], fn=rule.fn))
                    continue
                key, box = view_key(action.index)
                if segments and segments[-1].fn is None and segments[-1].key == key:
                    segments[-1].rules.append((i, box))
                    continue
                segments.append(_Segment([(i, box)], site_id=site_id, key=key))
                site_id += 1
            self.plans[target] = segments
        for i in self.op_rules:  # each op rule its own table site: its k counts its ops
            rule = self.spec.rules[i]
            if not isinstance(rule.action, Op):
                self.op_plans[i] = _Segment([i], fn=rule.fn)
                continue
            key, box = view_key(rule.action.index)
            self.op_plans[i] = _Segment([(i, box)], site_id=site_id, key=key)
            site_id += 1
        self.num_sites = site_id
        if not site_id:
            return
        torch_library.load_library()  # a clear error (how to build it) before anything else
        self.device = self.current_device()
        model_dtype = float_dtype(self.model)
        for (site, where), segments in self.plans.items():
            module = self.modules[site]
            dtype = float_dtype(module) or model_dtype
            for seg in segments:
                if seg.fn is not None:
                    continue
                for i, box in seg.rules:
                    rule = self.spec.rules[i]
                    validate(lambda message, i=i: self._rule_error(i, message), rule.action,
                             site, module, dtype, seg.key, box, where is None, self.device)
                    self._entries.add(self._rule_error, i, rule, seg.site_id, box,
                                      self.served.selectors(i))
        for i, seg in self.op_plans.items():
            if seg.fn is not None:
                continue
            rule = self.spec.rules[i]
            (_, box), = seg.rules
            # An op's output shape is known only at the call: checked as an input edit's is.
            validate(lambda message, i=i: self._rule_error(i, message), rule.action,
                     repr(rule.selector), self.model, model_dtype, seg.key, box, False,
                     self.device)
            self._entries.add(self._rule_error, i, rule, seg.site_id, box)

    def _device_of(self, site):
        for source in (self.modules[site], self.model):
            for t in source.parameters():
                return t.device
            for t in source.buffers():
                return t.device
        return torch.device("cpu")

    # -- runs and counters ---------------------------------------------------------------
    def _reset_python(self):
        self.fires = [0] * len(self.spec.rules)  # callable rules only; ops count in the table
        self.counts = {}
        self.module_calls = {}  # site -> its calls so far (op rules' tt.in_module)
        self.token = 0
        self.said_left = getattr(self, "said_left", False)  # op_edits.py: once per hooks
        # op labels numbered so far (label rules only), as the model's last read trace's
        self.live_labels = LiveLabels(label_memory.recall(self.model))
        self._local = threading.local()

    def current_device(self):
        return self._device_of(next((s for (s, _), segs in self.plans.items()
                                     if any(g.fn is None for g in segs)), ROOT))

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

    def follow_steps(self):
        """The tokens are a serving engine's steps, which its adapter (_engines/) begins with
        engine_step(); the root's calls (the engine's profiling, warm-up, compile and
        CUDA-graph capture runs among them) advance no token."""
        self.step_driven = True

    def engine_step(self, step):
        """Served step `step` (1, 2, ...) begins, before its model call. The first starts every
        counter from zero, so what ran before it (vLLM's start-up runs, which compile and
        capture modes make more of) counts nowhere; each sets the table's token to the step,
        on the table's device (stream-ordered, outside any captured graph), where compiled
        code and CUDA-graph replays read it."""
        if self._rows_due:  # the last step's rows never came: its served rules edited nothing
            self.served.steps_unread += 1
        if step == 1:
            self._reset_python()
            if self.table is not None:
                self.table.reset()
        self.token = step
        if self.table is not None:
            self.table.set_token(step)
            for slot in range(len(self.served.slots)):  # until the step's rows come
                self.table.set_row_mask(slot, ())
        self._rows_due = bool(self.served.slots)

    def serving_rows(self, rows):
        """The open step's rows (requests.StepRow, in the batch's order), before its model
        runs: each served rule's row mask for the step, written to the table."""
        if self.table is None or not self.served.slots:
            return
        self._rows_due = False
        for slot, mask in self.served.masks(self.token, rows):
            self.table.set_row_mask(slot, torch.from_numpy(mask))

    def report(self):
        report = EditReport(self, self._run, self.fires)
        if self.table is not None and self.table.device.type == "cpu":
            report._read()  # host counters: free to read, so skips warn right away
        return report

    def warn_unfired_labels(self, stacklevel=None):
        """Once per hooks: one EditSkipWarning naming the op rules that select by label text
        (tt.label, tt.contains, tt.regex) and chose no op in the run just ended. A label the
        live numbering (op_labels.py) gave no op would otherwise edit nothing without a word.
        Reads the counters (a device sync) only where there are such rules."""
        if self._warned_unfired:
            return
        unfired = self.unfired_label_rules()
        if unfired:
            self._warned_unfired = True
            warn_unfired(unfired, stacklevel)

    @property
    def numbered_labels(self):
        """Whether op rules numbered ops by label in the run just ended."""
        return bool(self.live_labels.given)

    def warn_label_drift(self, read, stacklevel=None):
        """One RuntimeWarning when op rules numbered ops by label in this run and the run's
        trace (with op records) labels some of them otherwise: TorchLens's loops and orphans
        take the whole run, the live numbering (op_labels.py) only what ran so far. read:
        {(root call k, its n-th op): layer_label} of the trace's op sites."""
        if not self.live_labels.given:
            return
        count, example = self.live_labels.drift(read)
        if count:
            warnings.warn(
                f"tokentrace: {count} of the {len(self.live_labels.given)} ops numbered while "
                f"the model ran for an op edit by label have another label in this trace "
                f"(first: {example}): the trace follows TorchLens's loops and drops its "
                f"orphans, which take the whole run; the edit chose by the numbering it had. "
                f"Select those ops by tt.func(...) & tt.in_module(...) (docs/ops.md)",
                RuntimeWarning, stacklevel=stacklevel or 2)

    def unfired_label_rules(self):
        """The rules selecting ops by label text that chose no op in this run (their text)."""
        labelled = [i for i in self.op_rules if self.spec.rules[i].selector.names_labels()]
        if not labelled:
            return []
        fires = self._snapshot(self._run, self.fires)["fires"]
        return [fires[i][0] for i in labelled if fires[i][1] == 0]

    def _snapshot(self, run, python_fires):
        if run != self._run:
            fail("this report's counters were reset by a later run of the bound model; read "
                 "bound.last_report after each run")
        data = counters(self.spec.rules, self.table, self.entry_rule, python_fires)
        if any(n for _, n in data["skips"]) and not self._warned:
            self._warned = True
            warn_skips(data)
        return data

    # -- hooks ---------------------------------------------------------------------------
    def install(self):
        try:
            root = self.modules[ROOT]
            self.handles.append(root.register_forward_pre_hook(self._root_pre, prepend=True))
            if self.has_callables or self.op_rules:
                self.handles.append(root.register_forward_hook(self._root_post,
                                                               always_call=True))
            for (site, where), segments in self.plans.items():
                mod = self.modules[site]
                if where is not None and where[0] == "input":
                    # before forward, ahead of the recording's input hook
                    path = where[1]
                    hook = input_hook(mod, site, path, self._input_edit(site, path, segments))
                    self.handles.append(mod.register_forward_pre_hook(hook, prepend=True,
                                                                      with_kwargs=True))
                    continue
                find = first_tensor if where is None else output_finder(site, where[1])
                if any(seg.fn is not None for seg in segments):
                    # an output path's calls are counted apart from the site's own edits
                    key = site if where is None else (site, where)
                    self.handles.append(mod.register_forward_pre_hook(self._pre(key),
                                                                      prepend=True))
                    hook = self._post(site, segments, key, find)
                    self.handles.append(mod.register_forward_hook(hook, prepend=True,
                                                                  with_kwargs=True,
                                                                  always_call=True))
                else:
                    self.handles.append(mod.register_forward_hook(
                        self._post_ops(segments, find), prepend=True))
            if self.op_rules:
                self._install_ops()
        except BaseException:
            self.remove()
            raise

    def remove(self):
        if self.op_mode is not None:
            self.op_mode.remove()
            self.op_mode = None
        for h in self.handles:
            h.remove()
        self.handles = []

    # -- op rules (op_edits.py) ----------------------------------------------------------
    def _install_ops(self):
        """The module calls open around each op (hooks on every module, for tt.in_module),
        then the op mode, entered on this thread (the model's)."""
        for site, mod in self.modules.items():
            self.handles.append(mod.register_forward_pre_hook(self._open(site), prepend=True))
            self.handles.append(mod.register_forward_hook(self._close, always_call=True))
        rules = [(i, self.spec.rules[i].selector, self._op_apply(i, self.op_plans[i]))
                 for i in self.op_rules]
        self.op_mode = OpEdits(self, rules)
        self.op_mode.install()

    def _open(self, site):
        def pre(module, args):
            k = self.module_calls.get(site, 0) + 1
            self.module_calls[site] = k
            self._open_stack().append(f"{site}:{k}")
        return pre

    def _close(self, module, args, output):
        stack = self._open_stack()
        if stack:
            stack.pop()

    def _open_stack(self):
        stack = getattr(self._local, "open_calls", None)
        if stack is None:
            stack = self._local.open_calls = []
        return stack

    def open_calls(self):
        """The module calls open now, outermost (the root call) first: ("self:1", ...)."""
        return tuple(self._open_stack())

    def set_op_scope(self, backend, site_id):
        """Records the op edits' own ops (the copy, the patch call) inside calls of this
        range site, apart from the model's ops (a trace with op records: _read/op_sites.py)."""
        self._scope = (backend, site_id)

    @contextlib.contextmanager
    def op_scope(self):
        if self._scope is None:
            yield
            return
        backend, site_id = self._scope
        backend.push(site_id)
        try:
            yield
        finally:
            backend.pop()

    def _op_apply(self, i, seg):
        """apply(values, op) of op rule i: the values edited (a copy, op_edits.py's)."""
        rule = self.spec.rules[i]
        if seg.fn is None:
            editable = torch_library.editable_dtypes()

            def apply_op(values, op):
                if values.dtype in editable:  # an int or bool output: not an op's to edit
                    self._apply_ops(values, seg)
                return values
            return apply_op

        def apply_fn(values, op):
            k = self.counts.get(("op", i), 0) + 1
            self.counts[("op", i)] = k
            if not rule.calls.matches(k, self.token):
                return values
            new = seg.fn(values, EditContext(op.func_name, k, self.token, op.args, op.kwargs))
            if new is not None and not isinstance(new, torch.Tensor):
                fail(f"the edit {rule.describe()} returned {type(new).__name__}; "
                     f"return a tensor (or None after editing in place)")
            self.fires[i] += 1
            return values if new is None else new
        return apply_fn

    def _depth(self):
        return getattr(self._local, "root_depth", 0)

    def _root_pre(self, module, args):
        if self.table is not None and not self.step_driven:
            torch.ops.tokentrace.advance_token(self.handle)
        if self.has_callables or self.op_rules:
            if self._depth() == 0 and not self.step_driven:
                self.token += 1
            self._local.root_depth = self._depth() + 1

    def _root_post(self, module, args, output):
        self._local.root_depth = max(self._depth() - 1, 0)

    def _stack(self, site):
        stacks = getattr(self._local, "stacks", None)
        if stacks is None:
            stacks = self._local.stacks = {}
        return stacks.setdefault(site, [])

    def _pre(self, key):
        def pre(module, args):
            k = self.counts.get(key, 0) + 1
            self.counts[key] = k
            self._stack(key).append(k)
        return pre

    def _apply_ops(self, values, seg):
        if seg.key is None:
            torch.ops.tokentrace.apply_patches_(values, self.handle, seg.site_id)
        else:
            apply_view(values, seg.key, self.handle, seg.site_id)

    def _post_ops(self, segments, find=first_tensor):
        """Only declarative ops at this site: in-place table calls, no Python state (what
        torch.compile traces and a CUDA graph captures)."""
        def post(module, args, output):
            values, path = find(output)
            if values is None:
                return None
            copied = any(values is a for a in args)
            if copied:  # the module returned its input: edit a copy, not the caller's tensor
                values = values.clone()
            for seg in segments:
                self._apply_ops(values, seg)
            return replace_in_output(output, path, values) if copied else None
        return post

    def _run_rules(self, values, segments, site, k, args=(), kwargs=None):
        """Applies one target's segments to `values`; the (possibly new) tensor."""
        rules = self.spec.rules
        ctx = EditContext(site, k, self.token, args, kwargs)
        for seg in segments:
            if seg.fn is None:
                self._apply_ops(values, seg)
                continue
            i = seg.rules[0]
            if not rules[i].calls.matches(k, self.token):
                continue
            new = seg.fn(values, ctx)
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

    def _post(self, site, segments, key=None, find=first_tensor):
        def post(module, args, kwargs, output):
            stack = self._stack(site if key is None else key)
            if not stack:
                return None
            k = stack.pop()
            if output is None:
                return None  # the forward raised; always_call hooks see no output
            values, path = find(output)
            if values is None:
                return None
            original = values
            if any(values is a for a in args):
                values = values.clone()
            values = self._run_rules(values, segments, site, k, args, kwargs)
            return replace_in_output(output, path, values) if values is not original else None
        return post
