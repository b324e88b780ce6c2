"""Op-level edits: tt.when(<op selector>, action) edits the output of the ops the selector
chooses while the model runs (python/tokentrace/_edit/op_edits.py), in tt.trace, tt.record
and tt.bind; label selectors are refused with one clear error."""

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace import TokentraceError

RELU_IN_BLOCK = tt.func("relu") & tt.in_module("block")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class Net(nn.Module):
    """relu outside the block (after pre), relu inside it, relu outside again."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.block = Block()
        self.head = nn.Linear(4, 4)
        self.depth = []  # the torch-function mode stack's depth seen in each forward

    def forward(self, x):
        self.depth.append(torch._C._len_torch_function_stack())
        return self.head(torch.relu(self.block(torch.relu(self.pre(x)))))


def by_hand(net, x, inside=lambda t: t, outside=lambda t: t):
    """Net's forward with each relu's output changed by hand: inside=, outside= the block."""
    h = outside(torch.relu(net.pre(x)))
    h = inside(torch.relu(net.block.lin(h))) * 2
    return net.head(outside(torch.relu(h)))


@pytest.fixture
def net():
    torch.manual_seed(0)
    return Net()


@pytest.fixture
def x():
    torch.manual_seed(1)
    return torch.randn(2, 4) + 0.5


def test_bind_edits_the_op_inside_the_module_only(net, x):
    bound = tt.when(RELU_IN_BLOCK, tt.scale(0.5)).bind(net)
    with torch.no_grad():
        got = bound(x)
        want = by_hand(net, x, inside=lambda t: t * 0.5)
        plain = net(x)
    assert torch.equal(got, want)
    assert not torch.equal(got, plain)
    assert bound.last_report.fire_count == 1
    assert bound.last_report.rule_fire_counts == {bound.last_report.per_rule[0][0]: 1}
    # with a module rule in the same spec: both apply, each counted on its own rule
    spec = tt.when(tt.module("head"), tt.scale(2.0)) + tt.when(RELU_IN_BLOCK, tt.scale(0.5))
    bound = spec.bind(net)
    with torch.no_grad():
        assert torch.equal(bound(x), by_hand(net, x, inside=lambda t: t * 0.5) * 2.0)
    assert [n for _, n in bound.last_report.per_rule] == [1, 1]
    # ~: every relu but the block's
    bound = tt.when(tt.func("relu") & ~tt.in_module("block"), tt.zero()).bind(net)
    with torch.no_grad():
        assert torch.equal(bound(x), by_hand(net, x, outside=torch.zeros_like))
    assert bound.last_report.fire_count == 2
    # an op outside the root's calls is no op site: left alone
    bound = tt.when(tt.func("relu"), tt.fill(7.0)).bind(net)
    with torch.no_grad(), bound.installed():
        after = torch.relu(net(x) - 100)
    assert torch.equal(after, torch.zeros_like(after))
    assert bound.last_report.fire_count == 3


def test_trace_and_record_see_the_edited_op(net, x):
    spec = tt.when(RELU_IN_BLOCK, tt.scale(0.5))
    with torch.no_grad():
        want = by_hand(net, x, inside=lambda t: t * 0.5)
        plain = tt.trace(net, x, kernels="off", save=tt.func("relu"))
        edited = tt.trace(net, x, kernels="off", save=tt.func("relu"), edits=spec)
        out = tt.trace(net, x, kernels="off", save="self", edits=spec)
        rec = tt.record(net, x, save="self", edits=spec)
    assert torch.equal(out["self:1"].out, want)
    assert torch.equal(rec["self:1"].out, want)
    # The edit's own ops (its copy, the patch call) take no label: the labels are the plain
    # run's, and the saved op output is the edited one.
    labels = [s.layer_label for s in plain.find_sites(tt.in_module("self"))]
    assert [s.layer_label for s in edited.find_sites(tt.in_module("self"))] == labels
    inside = plain.find_sites(RELU_IN_BLOCK).first().layer_label
    assert torch.equal(edited[inside].out, plain[inside].out * 0.5)
    before = plain.find_sites(tt.func("relu")).first()  # the relu before the block: unchanged
    assert before.layer_label != inside
    assert torch.equal(edited[before.layer_label].out, before.out)


def test_calls_tokens_callables_and_where(net, x):
    seen = []

    def spy(values, *, ctx):
        seen.append((ctx.site, ctx.call, ctx.token))
        return values + 1

    bound = tt.when(tt.func(torch.relu), spy, calls=tt.call(2)).bind(net)
    with torch.no_grad():
        assert torch.equal(bound(x), by_hand(net, x, inside=lambda t: t + 1))
    assert seen == [("relu", 2, 1)]
    assert bound.last_report.fire_count == 1
    # calls=tt.token(2): the second root call only, counted across calls inside installed()
    bound = tt.when(RELU_IN_BLOCK, tt.zero(), calls=tt.token(2)).bind(net)
    with torch.no_grad(), bound.installed():
        first, second = net(x), net(x)
    assert torch.equal(first, by_hand(net, x))
    assert torch.equal(second, by_hand(net, x, inside=torch.zeros_like))
    assert bound.last_report.fire_count == 1
    # tt.in_module("block:2"): the block's second call, counted per run as module rules count
    bound = tt.when(tt.func("relu") & tt.in_module("block:2"), tt.zero()).bind(net)
    with torch.no_grad(), bound.installed():
        first, second = net(x), net(x)
    assert torch.equal(first, by_hand(net, x))
    assert torch.equal(second, by_hand(net, x, inside=torch.zeros_like))
    # tt.where: decided by what is known while the op runs
    where = tt.where(lambda op: op.layer_type == "relu" and "block:1" in
                     [m.rpartition(".")[2] for m in op.modules])
    bound = tt.when(where, tt.fill(3.0)).bind(net)
    with torch.no_grad():
        assert torch.equal(bound(x), by_hand(net, x, inside=lambda t: torch.full_like(t, 3.0)))
    # a predicate that reads a label: one clear error naming what it may read
    bound = tt.when(tt.where(lambda op: op.layer_label == "relu_2_4"), tt.zero()).bind(net)
    with pytest.raises(TokentraceError, match=r"read op.layer_label: op labels are numbered "
                                              r"only when the trace is read"):
        with torch.no_grad():
            bound(x)


def test_no_op_rule_installs_no_mode(net, x):
    with torch.no_grad():
        tt.when(tt.module("block"), tt.scale(0.5)).bind(net)(x)
        tt.trace(net, x, kernels="off", edits=tt.when(tt.module("block.lin"), tt.zero()))
        tt.when(RELU_IN_BLOCK, tt.scale(0.5)).bind(net)(x)
    assert net.depth == [0, 0, 1]
    assert torch._C._len_torch_function_stack() == 0  # removed after the run


def test_what_cannot_be_decided_live_is_one_clear_error():
    for sel, what in ((tt.label("relu_1_2"), r"tt.label\('relu_1_2'\)"),
                      (tt.contains("relu"), r"tt.contains\('relu'\)"),
                      (tt.func("relu") & tt.regex("^relu_"), r"tt.regex\('\^relu_'\)")):
        with pytest.raises(TokentraceError, match=rf"^tokentrace: tt.when cannot edit .*{what} "
                                                  r"selects by op label, and labels are "
                                                  r"numbered only when the trace is read\. An "
                                                  r"op-level edit takes tt.func\(...\), "
                                                  r"tt.in_module\(...\), tt.where.*choose the "
                                                  r"op with tt.func\(...\) & tt.in_module\(...\) "
                                                  r"instead$"):
            tt.when(sel, tt.zero())
    with pytest.raises(TokentraceError, match=r"tt.module\('block'\) selects modules; an "
                                              r"op-level edit's selector selects ops only"):
        tt.when(tt.func("relu") | tt.module("block"), tt.zero())
    with pytest.raises(TokentraceError, match=r"output 1; an op-level edit edits an op's "
                                              r"first output tensor"):
        tt.when(tt.func("split", output=1), tt.zero())
    with pytest.raises(TokentraceError, match=r"input=\) edits a module call.s input"):
        tt.when(tt.func("relu"), tt.zero(), input="x")
    with pytest.raises(TokentraceError, match=r"selects ops; op-level edits have no JSON form"):
        tt.when(tt.func("relu"), tt.zero()).to_json()
