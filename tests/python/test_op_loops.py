"""TorchLens's loops in op labels (python/tokentrace/_read/op_loops.py): ops that run the same
parameters again within one root call, and the ops in lockstep with them in the data flow, are
passes of one layer; layers, not ops, are counted in the labels. Op records keep the data flow
(op_links) and the trace the parameters by identity (meta op_params). The labels here are the
ones TorchLens 2.36.1 gives the same models (test_torchlens_oracle.py runs TorchLens itself on
them)."""

import shutil
import sqlite3

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace import TokentraceError


class Loop(nn.Module):
    """One Linear run three times in a loop whose body (relu, + 1) has no module."""

    def __init__(self):
        super().__init__()
        self.lin, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        for _ in range(3):
            x = torch.relu(self.lin(x)) + 1
        return self.head(x).sum()


class BodyFirst(nn.Module):
    """The loop's body starts before the module: its first x * 2 feeds no earlier pass."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        for _ in range(3):
            x = self.lin(x * 2)
        return x.sum()


class OverTime(nn.Module):
    """An RNN cell over the steps of a sequence: x[:, t] differs in t at each step."""

    def __init__(self):
        super().__init__()
        self.cell, self.out = nn.GRUCell(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 4)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return self.out(h)


def _labels(trace):
    return [(s.layer_label, s.pass_index) for s in trace.find_sites(tt.where(lambda op: True))]


def _trace(model, x, **kw):
    with torch.no_grad():
        return tt.trace(model, x, kernels="off", ops=True, **kw)


def test_a_module_run_three_times_is_three_passes_with_its_loop_body():
    torch.manual_seed(0)
    model, x = Loop().eval(), torch.randn(2, 4)
    trace = _trace(model, x)
    body = [("linear_1_1", k) for k in (1, 2, 3)]
    assert _labels(trace) == [step for k in (1, 2, 3) for step in
                              (("linear_1_1", k), ("relu_1_2", k), ("add_1_3", k))] + [
        ("linear_2_4", 1), ("sum_1_5", 1)]
    assert [s.pass_index for s in trace["linear_1_1"].passes] == [k for _, k in body]
    assert trace["linear_1_1"].num_passes == 3 and trace["sum_1_5"].num_passes == 1
    # A pass is its own lookup key and has its own output
    h = x
    outs = []
    for _ in range(3):
        h = torch.relu(model.lin(h)) + 1
        outs.append(h)
    saved = tt.trace(model, x, kernels="off", save=tt.func("add"))
    for k in (1, 2, 3):
        assert torch.allclose(saved[f"add_1_3:{k}"].out, outs[k - 1])
        assert torch.allclose(saved[f"add_1:{k}"].out, outs[k - 1])
    with pytest.raises(TokentraceError, match="ran 3 times"):
        trace["add_1_3"].out
    assert trace.find_sites(tt.label("relu_1_2")).labels() == ("relu_1_2:1", "relu_1_2:2",
                                                               "relu_1_2:3")


def test_a_loop_body_that_starts_before_the_module():
    """TorchLens groups what follows each pass: the x * 2 before the first pass is a layer of
    its own, the two after passes 1 and 2 one layer of two passes."""
    trace = _trace(BodyFirst().eval(), torch.randn(2, 4))
    assert _labels(trace) == [("mul_1_1", 1), ("linear_1_2", 1), ("mul_2_3", 1),
                              ("linear_1_2", 2), ("mul_2_3", 2), ("linear_1_2", 3),
                              ("sum_1_4", 1)]


def test_ops_that_differ_in_their_arguments_are_not_passes():
    """x[:, 0], x[:, 1], x[:, 2] read one tensor with other indices: three layers, while the
    cell that runs its parameters at each step is one layer of three passes."""
    trace = _trace(OverTime().eval(), torch.randn(2, 3, 4))
    assert _labels(trace) == [("zeros_1_1", 1), ("getitem_1_2", 1), ("grucell_1_3", 1),
                              ("getitem_2_4", 1), ("grucell_1_3", 2), ("getitem_3_5", 1),
                              ("grucell_1_3", 3), ("linear_1_6", 1)]


def test_modules_that_run_once_are_unchanged_and_tied_weights_are_not_a_loop():
    """An embedding whose weight the output projection reads again (tied) runs it as another
    op type: no loop. Each block of its own is a layer of its own."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.a, self.b = nn.Embedding(10, 4), nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, ids):
            x = torch.tanh(self.b(torch.tanh(self.a(self.emb(ids)))))
            return x @ self.emb.weight.T

    trace = _trace(Tied().eval(), torch.tensor([[1, 2, 3]]))
    assert _labels(trace) == [("embedding_1_1", 1), ("linear_1_2", 1), ("tanh_1_3", 1),
                              ("linear_2_4", 1), ("tanh_2_5", 1), ("t_1_6", 1),
                              ("matmul_1_7", 1)]


def test_passes_of_a_loop_count_on_over_root_calls():
    """Three passes a root call: root call 2 runs passes 4 to 6 of the loop's layers; a layer
    that runs once a root call keeps pass k in root call k."""
    torch.manual_seed(0)
    model, x = Loop().eval(), torch.randn(2, 4)

    def twice(x):
        return model(x) + model(x)

    with torch.no_grad():
        trace = tt.trace(twice, x, model=model, kernels="off", ops=True)
    labels = _labels(trace)
    assert [k for label, k in labels if label == "relu_1_2"] == [1, 2, 3, 4, 5, 6]
    assert [k for label, k in labels if label == "linear_2_4"] == [1, 2]
    assert trace["relu_1_2:5"].root == 2 and trace["relu_1:5"] is trace["relu_1_2:5"]
    assert trace["linear_2_4:2"].root == 2


def _altered(trace, tmp_path, sql):
    """A copy of the trace's file with `sql` run on it, loaded."""
    old = tmp_path / "altered.sqlite"
    shutil.copy(trace.path, old)
    db = sqlite3.connect(old)
    db.execute(sql)
    db.commit()
    db.close()
    return tt.load(old)


def test_a_file_without_data_flow_numbers_each_op_as_its_own_layer(tmp_path):
    """A file written before op records kept data flow (no op_links table) reads as before:
    no loops, each op a layer of its root call."""
    old = _altered(_trace(Loop().eval(), torch.randn(2, 4)), tmp_path, "DROP TABLE op_links")
    assert [label for label, _ in _labels(old)] == [
        "linear_1_1", "relu_1_2", "add_1_3", "linear_2_4", "relu_2_5", "add_2_6",
        "linear_3_7", "relu_3_8", "add_3_9", "linear_4_10", "sum_1_11"]


def test_data_flow_joins_each_op_to_the_ops_that_fed_it():
    """op_links: each op's tensor arguments and outputs by identity; a Python-call op
    (x[i], x.contiguous()) has its own, so an op with no ATen op of its own is still joined;
    the parameters are in meta op_params, by the same identities."""
    import json

    class Flow(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x).contiguous()  # contiguous already: no ATen op
            return y[0] + torch.relu(y)

    model = Flow().eval()
    trace = _trace(model, torch.randn(2, 4))
    db = sqlite3.connect(trace.path)
    found = db.execute("SELECT s.name, l.inputs, l.outputs FROM op_links l JOIN calls c ON "
                       "c.id = l.call_id JOIN sites s ON s.id = c.site_id "
                       "ORDER BY l.call_id").fetchall()
    db.close()
    rows = []  # (op, is an output, identity), inputs before outputs
    for name, inputs, outputs in found:
        for text, output in ((inputs, False), (outputs, True)):
            rows += [(name, output, int(e.split(":")[1])) for e in text.split()]
    made, read = {}, set()  # tensor -> the op that returned it last; (reader, its maker)
    for name, output, tensor in rows:
        if output:
            made[tensor] = name
        else:
            read.add((name, made.get(tensor)))
    assert ("python::contiguous", "aten::linear") in read
    assert ("aten::relu", "python::contiguous") in read
    params = json.loads(trace.meta["op_params"])
    assert sorted(params.values()) == ["lin.bias", "lin.weight"]
    assert {str(t) for name, output, t in rows if name == "aten::linear" and not output} >= \
        set(params)


def test_an_op_edit_by_label_on_a_model_with_loops_says_its_labels_differ():
    """An op-level edit that selects by label numbers ops while the model runs, without the
    data flow of the whole root call: on a model with loops it warns, once, at the first op
    that runs its parameters again. Without loops it says nothing."""
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match=r"linear in lin:2 runs parameters it ran already "
                                            r"in root call 1 \(a loop\)") as seen:
        _trace(Loop().eval(), x, edits=tt.when(tt.label("relu_1_2"), tt.zero()))
    assert sum("a loop" in str(w.message) for w in seen) == 1

    class Once(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _trace(Once().eval(), x, edits=tt.when(tt.label("relu_1_2"), tt.zero()))


class _Orphans(nn.Module):
    """A mask made from torch.ones only to be read on the host (an orphan), and a check of
    the input read on the host (connected to the input: kept)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.ones(2, 4).sum()
        if mask.item() > 0 and bool(x.ne(0).any()):
            x = x + 1
        return self.lin(x)


def test_orphans_take_no_label_and_ops_read_from_the_input_keep_theirs():
    trace = _trace(_Orphans().eval(), torch.randn(2, 4))
    assert [label for label, _ in _labels(trace)] == [
        "ne_1_1", "any_1_2", "add_1_3", "linear_1_4"]
    assert trace["self:1"].ops[0].name == "aten::ones"  # recorded, only unlabelled


def test_an_aten_op_that_returns_a_parameter_is_no_op():
    """p.to(float32) of a float32 parameter returns p: TorchLens logs no op for it."""

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, x):
            return x * self.w.to(torch.float32)

    trace = _trace(Scale().eval(), torch.randn(2, 4))
    assert [label for label, _ in _labels(trace)] == ["mul_1_1"]


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        x = x + self.a(x)
        return x + self.b(x)


class _Scan(nn.Module):
    def forward(self, a, b):
        h = torch.zeros(2, 4)
        for i in range(3):
            h = a[:, i] * h + b[:, i]
        return h


class _Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.scan = _Residual(), _Scan()

    def forward(self, x):
        return self.scan(self.block(x).unsqueeze(1).expand(2, 3, 4),
                         (x.unsqueeze(1) + 0.5).expand(2, 3, 4))


def test_loops_no_parameter_anchors_a_residual_chain_and_a_scan():
    """A block's two residual adds, the second reading the first: one layer of two passes.
    A scan's steps in a module, each reading what the one before made: mul and add three
    passes each, while its x[:, i] reads (another index each) stay layers of their own."""
    torch.manual_seed(0)
    trace = _trace(_Blocks().eval(), torch.randn(2, 4))
    labels = _labels(trace)
    adds = [(label, k) for label, k in labels if label.startswith("add_")]
    assert adds[:2] == [("add_1_2", 1), ("add_1_2", 2)]
    muls = [(label, k) for label, k in labels if label.startswith("mul_")]
    assert [k for _, k in muls] == [1, 2, 3] and len({label for label, _ in muls}) == 1
    scan_adds = [label for label, _ in adds[2:] if trace[label].num_passes == 3]
    assert len(scan_adds) == 3
    getitems = [label for label, _ in labels if label.startswith("getitem_")]
    assert len(getitems) == len(set(getitems)) == 6


def test_op_records_without_data_flow_are_said_once(tmp_path):
    """op_links present but empty (a torch ops library older than the extension): one
    warning, and each op numbered as a layer of its own."""
    old = _altered(_trace(Loop().eval(), torch.randn(2, 4)), tmp_path, "DELETE FROM op_links")
    with pytest.warns(RuntimeWarning, match="has op records but no data flow of them"):
        labels = [label for label, _ in _labels(old)]
    assert labels[:4] == ["linear_1_1", "relu_1_2", "add_1_3", "linear_2_4"]
