"""Tracing a compiled model does not change what runs: no eager fallback, no added graph
breaks (a trace that changed them would measure another program). The compiled module's
calls are recorded from outside the compiled region; the modules inside it are not hooked."""

import pytest
import torch
from torch import nn

import tokentrace as tt


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Model(nn.Module):
    """Two blocks with one graph break of its own between them (so 'no added graph breaks'
    compares 1 with 1, not 0 with 0)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def _compile(how, backend):
    torch.manual_seed(0)
    model = Model().eval()
    if how == "torch.compile(model)":
        return model, torch.compile(model, backend=backend)
    if how == "model.compile()":
        model.compile(backend=backend)
        return model, model
    model.forward = torch.compile(model.forward, backend=backend)  # transformers' style
    return model, model


def _run(how, traced, find=False):
    """(outputs, graph breaks, graphs compiled, compiled graph runs, trace or None)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    graphs, runs = [], []

    def backend(gm, inputs):
        graphs.append(gm)

        def run(*args):
            runs.append(1)
            return gm.forward(*args)
        return run
    model, entry = _compile(how, backend)
    x = torch.ones(1, 4)
    outs = []

    def three_calls(x):
        with torch.no_grad():
            for _ in range(3):
                outs.append(entry(x))

    trace = None
    if traced:
        with pytest.warns(RuntimeWarning, match=r"[45] modules run inside a compiled region"):
            trace = tt.trace(three_calls, x, model=None if find else entry, kernels="off")
    else:
        three_calls(x)
    breaks = sum(counters["graph_break"].values())
    return outs, breaks, len(graphs), len(runs), trace


@pytest.mark.parametrize("find", [False, True], ids=["model=", "found"])
@pytest.mark.parametrize("how", ["torch.compile(model)", "model.compile()", "compiled forward"])
def test_a_compiled_model_stays_compiled_while_traced(how, find):
    # find: no model=, the first module called is the model (as in `tokentrace run`).
    plain_outs, plain_breaks, plain_graphs, plain_runs, _ = _run(how, traced=False)
    outs, breaks, graphs, runs, trace = _run(how, traced=True, find=find)
    assert plain_breaks == 1 and plain_graphs == 2 and plain_runs == 6  # the model's own break
    assert (breaks, graphs, runs) == (plain_breaks, plain_graphs, plain_runs)  # no eager fallback
    assert all(torch.equal(a, b) for a, b in zip(outs, plain_outs))
    # Tokens come from the root call, outside the compiled region; the rest are op records
    # (tt.trace's default), which keep it compiled (above).
    modules = [s for s in trace.sites if trace._site(s).kind != "op"]
    assert modules == ["self"] and trace["self"].num_calls == 3
    assert list(trace["self:3"].out.shape) == [1, 4]


def test_after_the_trace_the_compiled_entry_is_restored():
    torch._dynamo.reset()
    model, compiled = _compile("model.compile()", "eager")
    impl = model.__dict__["_compiled_call_impl"]
    with pytest.warns(RuntimeWarning, match="inside a compiled region"):
        tt.trace(model, torch.ones(1, 4), kernels="off")
    assert model.__dict__["_compiled_call_impl"] is impl
    assert "forward" not in model.a.__dict__  # nothing inside was wrapped
