"""torch.compile traces apply_patches_ and advance_token without a graph break, and compiled
results (fires included) equal eager ones."""
import pytest
import torch


def _table(tto):
    table = tto.PatchTable(2)
    table.add_entry(0, "zero", index=(slice(None), 1), calls="prefill")
    table.add_entry(0, "scale", index=(slice(None), slice(-2, None)), calls=("token", 3),
                    value=3.0)
    table.add_entry(1, "add", index=(0,), calls=("tokens", 2, None), operand=torch.arange(4.0))
    return table.upload("cpu")


def _step_fn(table):
    def step(x):
        table.advance_token()
        h = torch.tanh(x) + 1
        table.apply_(h, 0)
        y = h @ torch.ones(4, 4)
        table.apply_(y, 1)
        return y.sum(0)
    return step


def _run(table, fn, steps=4):
    table.reset()
    x = torch.linspace(-1, 1, 3 * 4).reshape(3, 4)
    outs = [fn(x.clone()) for _ in range(steps)]
    return outs, table.counters()


def test_no_graph_break(tto):
    table = _table(tto)
    explanation = torch._dynamo.explain(_step_fn(table))(torch.zeros(3, 4))
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes]
    assert "tokentrace.advance_token.default" in ops or any("advance_token" in o for o in ops)
    assert sum("apply_patches_" in o for o in ops) == 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compiled_equals_eager(tto, backend):
    torch._dynamo.reset()
    table = _table(tto)
    eager, eager_counts = _run(table, _step_fn(table))
    compiled = torch.compile(_step_fn(table), backend=backend, fullgraph=True)
    got, got_counts = _run(table, compiled)
    for a, b in zip(eager, got):
        assert torch.allclose(a, b, atol=1e-6), (a, b)
    assert got_counts == eager_counts
    assert eager_counts["fires"] == [1, 1, 3] and eager_counts["token"] == 4
    # the edits really happened: a clean run differs
    empty = tto.PatchTable(2).upload("cpu")
    clean = _run(empty, _step_fn(empty))[0]
    assert not torch.allclose(clean[0], eager[0])
