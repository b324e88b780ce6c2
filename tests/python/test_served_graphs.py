"""Rules for served requests as a serving engine drives them, without the engine: a model over
a flattened batch (vLLM's layout: every request's rows along dim 0), engine steps begun with
EditHooks.engine_step and each step's rows handed with serving_rows, as the vLLM adapter does
(_engines/vllm/steps.py). On the GPU, uniform decode steps replay one CUDA graph captured before
the first step at a padded batch size, as vLLM's FULL decode graphs do: the rows each rule edits
come from the table's row masks, written between replays. The expected rows are written out by
hand here (not by requests.py), and the untagged rows must equal a plain run's, bit for bit.
tests/vllm/test_vllm_requests.py runs the same rules in vLLM itself (CPU build: no graphs)."""

import json

import pytest
import torch

import tokentrace as tt
from tokentrace._edit import EditHooks
from tokentrace._engines import StepRow

HIDDEN = 16
GRAPH_ROWS = 8  # the captured decode batch: steps with fewer rows pad to it

SPEC = (tt.when(tt.module("model.layers.*.mlp"), tt.add(0.5), requests="a") +
        tt.when(tt.module("model.layers.1.mlp"), tt.scale(-1.0), calls=tt.request_token(3),
                requests="b") +
        tt.when(tt.module("model.layers.0.mlp"), tt.fill(0.0), calls=tt.prefill, requests="b"))


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return x + torch.tanh(self.mlp(x))


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _Served(torch.nn.Module):
    """A served model's shape: the runner's model, whose sites are model.layers.*.mlp."""

    def __init__(self):
        super().__init__()
        self.model = _Inner()

    def forward(self, x):
        return self.model(x)


# (request, prompt length, tags); r3's prompt is prefilled in two chunks
REQUESTS = {"r1": (4, {"a"}), "r2": (3, {"b"}), "r3": (5, set()), "r4": (2, {"a", "b"})}
# each step: (request, rows, first position); steps 3-6 are uniform decodes (graph replays)
STEPS = [
    [("r1", 4, 0), ("r2", 3, 0), ("r3", 3, 0), ("r4", 2, 0)],
    [("r1", 1, 4), ("r2", 1, 3), ("r3", 2, 3), ("r4", 1, 2)],
    *[[("r1", 1, 4 + s), ("r2", 1, 3 + s), ("r3", 1, 5 + s - 1), ("r4", 1, 2 + s)]
      for s in range(1, 5)],
]


def _inputs(step, device):
    """One row per (request, position), the same whatever the step: a token's input."""
    rows = []
    for request, n, first in step:
        for position in range(first, first + n):
            g = torch.Generator().manual_seed(1000 * int(request[1:]) + position)
            rows.append(torch.randn(HIDDEN, generator=g))
    return torch.stack(rows).to(device)


def _marks(step):
    """By hand, per rule: which of the step's rows it edits."""
    marks = {0: [], 1: [], 2: []}
    for request, n, first in step:
        prompt, tags = REQUESTS[request]
        for position in range(first, first + n):
            marks[0].append("a" in tags)
            marks[1].append("b" in tags and position == prompt + 1)  # its 3rd token's row
            marks[2].append("b" in tags and position < prompt)
    return {i: torch.tensor(m) for i, m in marks.items()}


def _reference(model, x, marks):
    """The edits as forward hooks over the hand-made marks, in rule order at each site."""
    def edit(layer):
        def hook(module, args, out):
            rows = marks[0].to(out.device)[:, None]
            out = torch.where(rows, out + 0.5, out)
            if layer == 0:
                out = torch.where(marks[2].to(out.device)[:, None], torch.zeros_like(out), out)
            else:
                out = torch.where(marks[1].to(out.device)[:, None], -out, out)
            return out
        return hook
    handles = [model.model.layers[i].mlp.register_forward_hook(edit(i)) for i in (0, 1)]
    try:
        return model(x)
    finally:
        for h in handles:
            h.remove()


class _Graph:
    """One captured forward at GRAPH_ROWS rows (capture after a warm-up on a side stream)."""

    def __init__(self, model, device):
        self.x = torch.zeros(GRAPH_ROWS, HIDDEN, device=device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                model(self.x)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = model(self.x)

    def __call__(self, x):
        self.x.zero_()
        self.x[:len(x)] = x
        self.graph.replay()
        return self.out[:len(x)].clone()


def _uniform_decode(step):
    return all(n == 1 for _, n, _ in step)


def _run(model, device, graphed, on_step=None):
    """Every step's output; decode steps through a CUDA graph when `graphed`."""
    outs = []
    with torch.no_grad():  # as an engine serves (the capture included)
        graph = _Graph(model, device) if graphed else None
        for k, step in enumerate(STEPS, start=1):
            if on_step is not None:
                on_step(k, step)
            x = _inputs(step, device)
            outs.append(graph(x) if graph is not None and _uniform_decode(step) else model(x))
    if device == "cuda":
        torch.cuda.synchronize()
    return outs


def _served_run(model, device, graphed):
    hooks = EditHooks(model, SPEC, serving=True)
    assert hooks.served.slots == [0, 1, 2]
    hooks.follow_steps()
    hooks.install()

    def on_step(k, step):  # the adapter: the step begins, then its inputs are prepared
        hooks.engine_step(k)
        hooks.serving_rows([StepRow(r, n, first, REQUESTS[r][0], frozenset(REQUESTS[r][1]))
                            for r, n, first in step])
    try:
        outs = _run(model, device, graphed, on_step)  # the capture ran before step 1
    finally:
        hooks.remove()
    return outs, hooks


def _check(model, device, graphed):
    torch.manual_seed(0)
    plain = _run(model, device, graphed)
    served, hooks = _served_run(model, device, graphed)
    for k, step in enumerate(STEPS, start=1):
        marks = _marks(step)
        with torch.no_grad():
            want = _reference(model, _inputs(step, device), marks)
        edited = marks[0] | marks[1] | marks[2]
        assert edited.any() and not edited.all(), k
        assert torch.allclose(served[k - 1], want, atol=1e-5), k
        untouched = ~edited
        # r3 carries no tag: its rows are the plain run's, bit for bit
        assert torch.equal(served[k - 1][untouched.to(device)], plain[k - 1][untouched.to(device)])
    # what each rule edited, per request: [steps, rows], against the hand marks
    want_rows = {r: {} for r in REQUESTS}
    for step in STEPS:
        marks, row = _marks(step), 0
        for request, n, _ in step:
            for rule, m in marks.items():
                count = int(m[row:row + n].sum())
                if count:
                    steps, rows = want_rows[request].get(str(rule), [0, 0])
                    want_rows[request][str(rule)] = [steps + 1, rows + count]
            row += n
    got = {r["request"]: json.loads(r["edits"]) for r in hooks.served.request_rows()}
    assert got == want_rows
    assert got["r3"] == {}
    assert hooks.served.steps_unread == 0 and hooks.served.rows_past_limit == 0
    report = hooks.report()
    assert report.num_skips == 0
    return report


def test_each_rule_edits_its_requests_rows_in_an_eager_served_batch():
    _check(_Served().eval(), "cpu", graphed=False)


@pytest.mark.gpu
@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "cuda_graph"])
def test_on_cuda_decode_graph_replays_edit_the_rows_each_step_marks(graphed):
    """graphed: steps 3-6 (4 decode rows each) replay a graph captured at 8 rows before step
    1, whose edits read the row masks each step writes; steps 1-2 (prefill chunks) run eager."""
    report = _check(_Served().eval().cuda(), "cuda", graphed)
    assert report.num_fires > 0
