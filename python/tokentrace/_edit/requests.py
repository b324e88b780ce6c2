"""Rules for served requests: which rows of each engine step a rule edits, and which requests
each rule edited.

In a serving engine (vLLM) one step's batch holds many requests, flattened along dim 0 of every
module output: request i's rows are the tokens the step computes for it, at positions
computed .. computed + n - 1 of its sequence. The engine's adapter (_engines/vllm/steps.py)
hands each step's rows, in the batch's order, after the step's inputs are prepared and before
the model runs (EditHooks.serving_rows). A rule served per request has a row mask of the patch
table (a slot) and its entries the selector ("rows", slot): the table edits only the marked
rows, read from the table's arena at a fixed address, so compiled code and CUDA-graph replays
read the step's masks as eager code does. The masks are cleared as each step begins, so a step
whose rows never came edits no row.

A rule is served per request when it names requests (requests=), a request's own tokens
(tt.request_token), or the prefill (which in a serving engine is each request's, not the
engine's first step). A row is marked for it when its request carries one of the rule's tags
(any request when it names none) and its position is one the rule's calls select:
  tt.prefill             position < the prompt's length (every chunk of a chunked prefill)
  tt.request_token(k)    k = 1: the prefill rows; k >= 2: position prompt + k - 2 (the row whose
                         output gives the request's k-th token)
  tt.token(k)            engine step k: all the request's rows in it
  every call             all the request's rows
Other rules (no requests, calls every or engine steps) edit every row of the steps they select,
as before.
"""

from __future__ import annotations

import json

import numpy as np

from .._engines import request_tags
from .calls import prefill

# The rows one mask holds when the engine does not say its largest batch (vLLM's runner does:
# max_num_tokens). A step with more rows than this leaves the rest unedited, counted.
DEFAULT_MAX_ROWS = 1 << 16


def served_per_request(rule) -> bool:
    """Whether a serving engine edits `rule` by rows (see the module's text)."""
    return rule.per_request or any(p is prefill for p in rule.calls.parts())


class ServedRules:
    """The row masks of one spec's rules in a serving engine, and what each edited."""

    def __init__(self, rules, serving, rule_error, why_not=None):
        """why_not: where an engine serves the model but its steps are not followed, why."""
        self.rules = rules
        self.slots = []  # slot -> rule index
        if serving:
            self.slots = [i for i, r in enumerate(rules) if served_per_request(r)]
        else:
            why = (f": {why_not}" if why_not is not None else
                   ", and this model is not served by one (vLLM's worker under `tokentrace run "
                   "--edits`); use tt.token(k) or tt.prefill here")
            for i, r in enumerate(rules):
                if r.per_request:
                    rule_error(i, f"requests= and tt.request_token(k) name a serving engine's "
                                  f"requests{why}")
        self.slot_of = {i: s for s, i in enumerate(self.slots)}
        self.max_rows = DEFAULT_MAX_ROWS
        # What each rule edited, per request: each request seen has a column (its index,
        # reused once it is forgotten) of `steps` and `rows` (slot x column), so a step's
        # counting is two numpy additions per rule, not a Python loop over its requests.
        self.requests: dict[str, int] = {}  # request -> column, in the order first seen
        self._free: list[int] = []
        self._steps = np.zeros((len(self.slots), 64), dtype=np.int64)
        self._rows = np.zeros((len(self.slots), 64), dtype=np.int64)
        self.edited_requests = [0] * len(self.slots)  # per slot: requests it edited, ever
        self.rows_past_limit = 0  # rows a step had past max_rows (never edited)
        self.steps_unread = 0  # steps whose rows did not come (no row edited in them)

    def selectors(self, i):
        """The table selectors of rule i: its row mask's, or None (the rule's own calls)."""
        slot = self.slot_of.get(i)
        return None if slot is None else [("rows", slot)]

    def _column(self, request):
        column = self.requests.get(request)
        if column is None:
            column = self._free.pop() if self._free else len(self.requests)
            if column >= self._steps.shape[1]:  # twice as many columns
                grow = np.zeros_like(self._steps)
                self._steps = np.concatenate([self._steps, grow], axis=1)
                self._rows = np.concatenate([self._rows, np.zeros_like(grow)], axis=1)
            self.requests[request] = column
        return column

    def masks(self, step, rows):
        """[(slot, mask: a uint8 numpy array, 1 = edit the row)] for one step's rows; counts
        what each rule edits. Vectorized over the step's rows: per rule a few numpy
        expressions over all of them."""
        if not self.slots or not rows:
            for r in rows:
                self._column(r.request)
            return [(slot, np.zeros(0, dtype=np.uint8)) for slot in range(len(self.slots))]
        # one pass over the requests: their sizes, positions, prompts, columns and tag sets
        # (by index: a step has few distinct ones, so each rule checks those, not every row)
        sets: dict[frozenset, int] = {}
        column = self._column
        table = np.array([(r.n, r.computed, r.prompt, sets.setdefault(r.tags, len(sets)),
                           column(r.request)) for r in rows], dtype=np.int64)
        n, computed, prompt, tag_id, columns = table.T
        total = int(n.sum())
        kept = min(total, self.max_rows)
        self.rows_past_limit += total - kept
        starts = np.cumsum(n) - n
        owner = np.repeat(np.arange(len(rows)), n)[:kept]  # the request of each row
        positions = computed[owner] + np.arange(kept) - starts[owner]
        prompts = prompt[owner]
        distinct = list(sets)
        out = []
        for slot, i in enumerate(self.slots):
            rule = self.rules[i]
            chosen = _selects(rule.calls, step, positions, prompts)
            if rule.requests is not None:
                tagged = np.array([not t.isdisjoint(rule.requests) for t in distinct])
                chosen &= tagged[tag_id][owner]
            marked = np.bincount(owner[chosen], minlength=len(rows))
            edited = marked > 0
            steps = self._steps[slot]
            self.edited_requests[slot] += int(np.count_nonzero(edited & (steps[columns] == 0)))
            steps[columns] += edited  # a step's columns are distinct: plain fancy adds
            self._rows[slot][columns] += marked
            out.append((slot, chosen.view(np.uint8)))
        return out

    def request_rows(self, requests=None):
        """request_events rows (role worker) of `requests` (default: every request seen): the
        rules that edited each, as JSON {rule index: [steps, rows]} ("{}": none)."""
        keys = list(self.requests) if requests is None else list(requests)
        steps, rows_done = self._steps.tolist(), self._rows.tolist()
        rows = []
        for request in keys:
            c = self.requests.get(request)
            edits = {} if c is None else {
                str(i): [steps[s][c], rows_done[s][c]]
                for s, i in enumerate(self.slots) if steps[s][c]}
            rows.append({"role": "worker", "request": request, "edits": json.dumps(edits)})
        return rows

    def forget(self, requests):
        for request in requests:
            c = self.requests.pop(request, None)
            if c is not None:
                self._steps[:, c] = 0
                self._rows[:, c] = 0
                self._free.append(c)

    def per_rule(self):
        """{rule index: requests it edited} of the rules served per request."""
        return {i: self.edited_requests[s] for s, i in enumerate(self.slots)}


_LOOKUP: dict = {}  # id(selector) -> (selector, its lookup table)


def _lookup(values):
    """A boolean table t with t[k] for k in values; its last entry (past the largest k, where
    larger ks are clipped to) is False."""
    lut = np.zeros(max(values) + 2, dtype=bool)
    lut[list(values)] = True
    return lut


def _selects(calls, step, positions, prompt):
    """Which rows at `positions` (a numpy array) of a request with a `prompt`-token prompt
    `calls` selects in engine step `step`: a boolean array."""
    chosen = np.zeros(len(positions), dtype=bool)
    for part in calls.parts():
        if part.by == "every" or (part.by == "token" and step in part.values):
            chosen[:] = True
        elif part is prefill:
            chosen |= positions < prompt
        elif part.by == "request_token":
            k = np.where(positions < prompt, 1, positions - prompt + 2)
            values = part.values
            if isinstance(values, range):  # a range may be long: compared, not listed
                chosen |= (k >= values.start) & (k < values.stop) & \
                    ((k - values.start) % values.step == 0)
            else:  # a lookup table of the ks, made once per selector
                table = _LOOKUP.get(id(part))
                if table is None or table[0] is not part:
                    table = _LOOKUP[id(part)] = (part, _lookup(values))
                lut = table[1]
                chosen |= lut[np.minimum(k, len(lut) - 1)]
    return chosen


class SpecSalt:
    """The cache salts an edit spec asks of a serving engine's requests (_engines/vllm/salt.py).

    A request's KV cache differs from another's with the same prompt when a rule edits one and
    not the other, or edits them at different times. Per rule that applies to a request (it
    names none of the request's tags: it does not apply):
    - a rule for tagged requests on its prefill or every call: its index; requests with the
      same such rules share blocks;
    - a rule whose calls are engine steps (tt.token(k), tt.call(k)) or a request's tokens past
      its prefill (tt.request_token(k > 1)): what it edits depends on when the request ran or
      where its prompt ended, so the request's own id (its blocks are never shared);
    - a rule for every request by position, or on every call: nothing (all requests alike).
    No part: no salt (the job's own, if any, stays). Otherwise "tokentrace-<hash of the spec and
    the parts>", and the job's salt after it."""

    def __init__(self, spec_path):
        from .spec import load_spec
        with open(spec_path, "rb") as f:
            self.digest = f.read()
        self.rules = load_spec(spec_path, device="cpu").rules
        self.needed = any(r.requests is not None or _by_step(r) for r in self.rules)

    def parts(self, tags, request_id):
        out = []
        for i, rule in enumerate(self.rules):
            if rule.requests is not None and not tags.intersection(rule.requests):
                continue
            if _by_step(rule):
                out.append(f"{i}@{request_id}")
            elif rule.requests is not None:
                out.append(str(i))
        return out

    def of(self, request):
        """The salt of one EngineCoreRequest, or None to leave it as it is."""
        params = getattr(request, "sampling_params", None)
        parts = self.parts(request_tags(getattr(params, "extra_args", None)),
                           str(request.request_id))
        if not parts:
            return None
        import hashlib
        h = hashlib.sha256(self.digest + b"|" + ",".join(parts).encode()).hexdigest()[:24]
        own = getattr(request, "cache_salt", None)
        return f"tokentrace-{h}" + (f":{own}" if own else "")


def _by_step(rule):
    """Whether what `rule` edits in a request's cache depends on more than the tokens at each
    position: on the engine step (tt.token(k), tt.call(k)), or on where the request's own
    prompt ended (tt.request_token(k) past its prefill: the same position is a decode row in
    one request and a prompt row in a later one that continues it)."""
    for p in rule.calls.parts():
        if p.by == "token" or (p.by == "call" and p is not prefill):
            return True
        if p.by == "request_token" and any(k > 1 for k in _some(p.values)):
            return True
    return False


def _some(values):
    return (values.start, values[-1]) if isinstance(values, range) and len(values) else values
