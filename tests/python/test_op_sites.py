"""Op-level sites: the selectors over ATen ops (tt.func, tt.in_module, tt.label, tt.contains,
tt.where, & | ~ -), TorchLens's labels of a trace's ops as lookup keys, trace.find_sites, and
op records turned on by a selector that names ops (python/tokentrace/_common/op_selectors.py,
python/tokentrace/_read/op_sites.py)."""

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace import TokentraceError
from tokentrace._record import op_records


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        x = torch.flatten(self.block(x), 1)
        return torch.relu(self.fc(x)) / 2 + 1


# TorchLens's rule (`{type}_{type_index}_{step_index}`, both counters from 1 in execution
# order; the type is the function name lower-cased without underscores), by hand for
# TinyCNN: conv2d, relu (nn.ReLU), flatten, linear, torch.relu, `/`, `+`. TorchLens's input_1
# and output_1 are its model input and output, not ops (the input takes step 0, the output
# comes last), so they shift nothing. `/` is truediv (aten::div inside, as for torch.div).
CNN_LABELS = ["conv2d_1_1", "relu_1_2", "flatten_1_3", "linear_1_4", "relu_2_5", "truediv_1_6",
              "add_1_7"]


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return TinyCNN().eval()


@pytest.fixture(scope="module")
def cnn_trace(cnn):
    return tt.trace(cnn, torch.randn(1, 1, 6, 6), kernels="off", ops=True)


def _labels(table):
    return [s.layer_label for s in table]


def test_cnn_ops_are_labelled_by_torchlens_rule(cnn_trace):
    every = cnn_trace.find_sites(tt.where(lambda op: True))
    assert _labels(every) == CNN_LABELS
    relu = every[1]
    assert (relu.label, relu.label_short, relu.layer_type, relu.func_name) == (
        "relu_1_2:1", "relu_1:1", "relu", "aten::relu")
    assert (relu.type_index, relu.step_index, relu.pass_index, relu.num_passes) == (1, 2, 1, 1)
    assert relu.module == "block.1:1" and relu.modules == ("self:1", "block:1", "block.1:1")
    # The op site is the op call of op records: trace[f"{name}:{k}"] is the same call.
    assert cnn_trace[f"{relu.name}:{relu.k}"].id == relu.call_id


def test_labels_are_lookup_keys_with_their_out(cnn_trace):
    relu = cnn_trace["relu_1_2"]  # every pass of the label: one here
    assert relu.num_passes == 1 and list(relu.out.shape) == [1, 2, 4, 4]
    assert list(relu.out.shape) == list(cnn_trace["block.1:1"].out.shape)
    assert cnn_trace["relu_1_2:1"].layer_label == "relu_1_2"
    assert cnn_trace["linear_1:1"].layer_label == "linear_1_4"  # the short form
    assert cnn_trace["linear_1:1"].shape == [1, 3]
    assert cnn_trace["linear_1_4"][1].module == "fc:1"
    with pytest.raises(TokentraceError, match=r"no op labelled 'relu_3_5'.*did you mean"):
        cnn_trace["relu_3_5"]
    with pytest.raises(TokentraceError, match=r"no op labelled 'relu_1:2'"):
        cnn_trace["relu_1:2"]  # one pass only
    # Module sites and their calls are looked up as before.
    assert cnn_trace["fc:1"].site == "fc"


def test_a_trace_without_op_records_says_how_to_get_labels(cnn):
    trace = tt.trace(cnn, torch.randn(1, 1, 6, 6), kernels="off", ops=False)
    with pytest.raises(TokentraceError, match=r"no op labelled 'relu_1_2' in this trace: it "
                                              r"has no op records \(traced with ops=False"):
        trace["relu_1_2"]
    assert len(trace.find_sites(tt.func("relu"))) == 0


@pytest.mark.parametrize("query,labels", [
    (lambda: tt.func("relu"), ["relu_1_2", "relu_2_5"]),
    (lambda: tt.func(torch.relu), ["relu_1_2", "relu_2_5"]),  # TorchLens takes strings only
    (lambda: tt.func(torch.nn.functional.relu), ["relu_1_2", "relu_2_5"]),
    (lambda: tt.func("aten::relu"), ["relu_1_2", "relu_2_5"]),
    (lambda: tt.func("linear"), ["linear_1_4"]),
    (lambda: tt.func("conv2d"), ["conv2d_1_1"]),
    (lambda: tt.func("truediv"), ["truediv_1_6"]),  # TorchLens's type of `/`
    (lambda: tt.func("div"), []),  # torch.div's: `/` is not
    (lambda: tt.func("__add__"), ["add_1_7"]),
    (lambda: tt.in_module("block"), ["conv2d_1_1", "relu_1_2"]),  # and its submodules
    (lambda: tt.in_module("block.1"), ["relu_1_2"]),
    (lambda: tt.in_module("block:1"), ["conv2d_1_1", "relu_1_2"]),
    (lambda: tt.in_module("block:2"), []),
    (lambda: tt.in_module("fc"), ["linear_1_4"]),
    (lambda: tt.label("relu_2_5"), ["relu_2_5"]),
    (lambda: tt.label("relu_2:1"), ["relu_2_5"]),
    (lambda: tt.contains("RELU"), ["relu_1_2", "relu_2_5"]),
    (lambda: tt.contains("_1_"), ["conv2d_1_1", "relu_1_2", "flatten_1_3", "linear_1_4",
                                  "truediv_1_6", "add_1_7"]),
    (lambda: tt.where(lambda op: op.shape == [1, 3]), ["linear_1_4", "relu_2_5", "truediv_1_6",
                                                       "add_1_7"]),
    (lambda: tt.in_module("block") & tt.func("relu"), ["relu_1_2"]),
    (lambda: tt.func("relu") & ~tt.in_module("block"), ["relu_2_5"]),
    (lambda: tt.func("relu") - tt.in_module("block"), ["relu_2_5"]),
    (lambda: tt.func("relu") | tt.func("linear"), ["relu_1_2", "linear_1_4", "relu_2_5"]),
    (lambda: ~(tt.func("relu") | tt.func("linear")), ["conv2d_1_1", "flatten_1_3", "truediv_1_6",
                                                     "add_1_7"]),
    (lambda: tt.label("nothing_1_1"), []),
    (lambda: tt.regex("^relu_"), ["relu_1_2", "relu_2_5"]),
    (lambda: tt.regex("_1:1$"), ["conv2d_1_1", "relu_1_2", "flatten_1_3", "linear_1_4",
                                 "truediv_1_6", "add_1_7"]),  # label_short: the first of a type
])
def test_selectors_choose_ops(cnn_trace, query, labels):
    assert _labels(cnn_trace.find_sites(query())) == labels


def test_module_selectors_join_op_selectors(cnn_trace):
    table = cnn_trace.find_sites(tt.module("fc") | tt.func("relu"))
    # In the order they ran: the module call, then the op it ran.
    assert table.labels() == ("relu_1_2", "fc:1", "relu_2_5")
    assert isinstance(table[1], tt.CallView) and isinstance(table[0], tt.OpSite)
    # ~ of a module selector is the other modules, of an op selector the other ops.
    assert cnn_trace.find_sites(~tt.module("fc") & tt.module("block*")).labels() == (
        "block:1", "block.0:1", "block.1:1")
    assert cnn_trace.find_sites(tt.module("fc") & tt.func("linear")).labels() == ()
    # tt.module unions stay what they were: one Selector, with its own repr.
    union = tt.module("fc") | tt.module("block") | "block.0"
    assert isinstance(union, tt.Selector) and union.patterns == ("fc", "block", "block.0")
    assert repr(tt.in_module("block") & tt.func("relu")) == (
        "(tt.in_module('block') & tt.func('relu'))")
    assert repr(~tt.label("x")) == "(~tt.label('x'))"
    listed = tt.module("fc") | ["block.0", tt.func("relu")]  # a list: the union of its items
    assert cnn_trace.find_sites(listed).labels() == ("block.0:1", "relu_1_2", "fc:1",
                                                     "relu_2_5")
    chain = tt.func("a") | tt.func("b") | tt.func("c")
    assert len(chain.parts) == 3  # one n-ary selector, as TorchLens flattens chains


def test_find_sites_returns_a_table(cnn_trace):
    table = cnn_trace.find_sites(tt.func("relu"))
    assert len(table) == 2 and [s.layer_label for s in table] == ["relu_1_2", "relu_2_5"]
    assert table.first().layer_label == "relu_1_2" and table[-1].layer_label == "relu_2_5"
    assert table.labels() == ("relu_1_2", "relu_2_5")
    assert list(table.first().out.shape) == [1, 2, 4, 4]
    assert table[1:].labels() == ("relu_2_5",)
    assert table.where(lambda op: op.module == "self:1").labels() == ("relu_2_5",)
    assert repr(table) == "SiteTable(2 sites: relu_1_2, relu_2_5)"
    # The documented TorchLens use: the first label of a search, as an exact selector.
    exact = tt.label(cnn_trace.find_sites(tt.in_module("block") & tt.func("relu")).labels()[0])
    assert cnn_trace.find_sites(exact).labels() == ("relu_1_2",)
    empty = cnn_trace.find_sites(tt.func("softmax"))
    assert len(empty) == 0 and list(empty) == [] and empty.labels() == ()
    with pytest.raises(TokentraceError, match=r"tt.func\('softmax'\) chose no site"):
        empty.first()
    with pytest.raises(TokentraceError, match=r"chose 2 sites, more than max_fanout=1"):
        cnn_trace.find_sites(tt.func("relu"), max_fanout=1)
    with pytest.raises(TokentraceError, match=r"no site named 'fcc'.*did you mean 'fc'"):
        cnn_trace.find_sites(tt.module("fcc") | tt.func("relu"))


def test_a_selector_naming_ops_turns_op_records_on(cnn, monkeypatch):
    x = torch.randn(1, 1, 6, 6)
    trace = tt.trace(cnn, x, kernels="off", sites=tt.in_module("block") & tt.func("relu"))
    assert _labels(trace.find_sites(tt.func("relu"))) == ["relu_1_2", "relu_2_5"]
    # The modules it needs are recorded (in_module's and those inside it), and the root.
    assert [s for s in trace.sites if "::" not in s] == ["self", "block", "block.0", "block.1"]
    assert op_records.stop() is False  # the observer went off with the trace
    # With ops=False and no op selector nothing of op records is started (and costs nothing).

    def refuse(*args, **kwargs):
        raise AssertionError("op records started for a trace with no op selector")
    monkeypatch.setattr(op_records, "start", refuse)
    plain = tt.trace(cnn, x, kernels="off", sites=tt.module("block") | "fc", ops=False)
    assert not any("::" in s for s in plain.sites)
    with pytest.raises(AssertionError, match="op records started"):
        tt.trace(cnn, x, kernels="off", sites=tt.func("relu"), ops=False)


@pytest.mark.parametrize("make,message", [
    (lambda: tt.func(3), r"^tokentrace: tt.func\(\) takes a function name such as 'relu' or "
                         r"'aten::addmm', or a torch function such as torch.relu; got int$"),
    (lambda: tt.func(" "), r"tt.func\(\) got an empty name"),
    (lambda: tt.func("relu", output="values"), r"output=\) takes the index of one output"),
    (lambda: tt.in_module(""), r"tt.in_module\(\) takes a module address"),
    (lambda: tt.label(5), r"tt.label\(\) takes an op label such as 'relu_1_2'"),
    (lambda: tt.contains(""), r"tt.contains\(\) takes a part of an op label"),
    (lambda: tt.where(1), r"tt.where\(\) takes a function op -> bool"),
    (lambda: tt.regex("("), r"tt.regex\('\('\) is not a regular expression"),
    (lambda: tt.func("relu") & 3, r"the right side of & must be a selector \(tt.module"),
    (lambda: 3 | tt.func("relu"), r"the left side of \| must be a selector"),
    (lambda: tt.module(), r"tt.module\(\) needs at least one address"),  # as before
])
def test_bad_selectors_are_one_line_errors(make, message):
    with pytest.raises(TokentraceError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_save_keeps_the_outputs_of_the_ops_it_selects(cnn):
    x = torch.randn(1, 1, 6, 6)
    trace = tt.trace(cnn, x, kernels="off", save=tt.func("relu") | tt.func("linear"))
    with torch.no_grad():
        hidden = cnn.block(x)
        fc = cnn.fc(torch.flatten(hidden, 1))
    assert torch.equal(trace["relu_1_2"].out, hidden)
    assert torch.equal(trace["linear_1_4"].out, fc)
    assert torch.equal(trace.find_sites(tt.func("relu"))[1].out, torch.relu(fc))
    assert not isinstance(trace["flatten_1_3"].out, torch.Tensor)  # not selected: its meta
    assert list(trace["flatten_1_3"].out.shape) == [1, 32]
    # The copies' own ops (detach, clone) are not the model's: the labels are as without.
    assert _labels(trace.find_sites(tt.where(lambda op: True))) == CNN_LABELS
    assert not trace.losses
    # Saved by type: a selector decided only when the trace is read keeps every op.
    trace = tt.trace(cnn, x, kernels="off", save=tt.in_module("block") & tt.func("relu"))
    assert torch.equal(trace["relu_1_2"].out, hidden)


def test_torchlens_spellings_of_saving_ops(cnn, tmp_path):
    x = torch.randn(1, 1, 6, 6)
    with torch.no_grad():
        hidden = cnn.block(x)
    # CaptureOptions(layers_to_save=[...]) with TorchLens's labels: tt.label of each.
    opts = tt.options.CaptureOptions(layers_to_save=["relu_1_2", "fc"])
    trace = tt.trace(cnn, x, kernels="off", capture=opts)
    assert torch.equal(trace["relu_1_2"].out, hidden)
    assert isinstance(trace["fc:1"].out, torch.Tensor)  # a module name stays a module
    with tt.fastlog.Recorder(cnn, save=tt.func("relu"), out=str(tmp_path / "r.sqlite")) as rec:
        rec.log(x)
    assert torch.equal(rec.recording["relu_1_2"].out, hidden)


def test_op_saving_is_a_mode_only_while_an_op_selector_saves(cnn):
    depth = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = cnn

        def forward(self, x):
            depth.append(torch._C._len_torch_function_stack())
            return self.cnn(x)

    probe = Probe()
    x = torch.randn(1, 1, 6, 6)
    tt.trace(probe, x, kernels="off", save=tt.module("cnn.fc"))
    tt.trace(probe, x, kernels="off", sites=tt.func("relu"))  # op records, nothing saved
    tt.trace(probe, x, kernels="off", save=tt.func("relu"))
    assert depth == [0, 0, 1]
    assert torch._C._len_torch_function_stack() == 0


def test_what_op_selectors_cannot_do_yet_is_one_clear_error(cnn):
    x = torch.randn(1, 1, 6, 6)
    # tt.when edits ops by tt.func(...) and by label now (test_op_edits.py).
    tt.when(tt.label("relu_1_2"), tt.zero())
    with pytest.raises(TokentraceError, match=r"tt.when takes tt.module\(...\) selectors"):
        tt.when(tt.module("fc") & ~tt.module("block"), tt.zero())
    with pytest.raises(TokentraceError, match=r"inputs_of=tt.func\('relu'\) selects ops"):
        tt.trace(cnn, x, kernels="off", inputs_of=tt.func("relu"))
    with pytest.raises(TokentraceError, match=r"no site named 'blok'.*did you mean 'block'"):
        tt.trace(cnn, x, kernels="off", sites=tt.in_module("blok"))


def test_an_op_with_several_output_tensors_takes_a_label_each():
    class Pieces(nn.Module):
        def forward(self, x):
            a, b, c = x.split(2, dim=1)
            values, _ = x.topk(2)
            if x.sum() > 0:  # a host read: aten::is_nonzero returns no tensor, no label
                a = a + 1
            low, _ = x.min(dim=1)  # two tensors, though aten::min's name does not say so
            return a * b + c + values.sum() + low.sum()

    trace = tt.trace(Pieces(), torch.ones(2, 6), kernels="off", ops=True)
    # TorchLens labels each output tensor of a function: split's three, topk's two, min's two.
    assert _labels(trace.find_sites(tt.where(lambda op: True))) == [
        "split_1_1", "split_2_2", "split_3_3", "topk_1_4", "topk_2_5", "sum_1_6", "gt_1_7",
        "add_1_8", "min_1_9", "min_2_10", "mul_1_11", "add_2_12", "sum_2_13", "add_3_14",
        "sum_3_15", "add_4_16"]
    assert _labels(trace.find_sites(tt.func("split", output=1))) == ["split_2_2"]
    assert trace["topk_1_4"].out.shape == (2, 2) and trace["topk_2_5"].out.shape == (2, 2)
    assert trace["topk_2_5"].out.dtype == torch.int64  # the indices, as op records keep them
    assert trace["min_2_10"].out.shape == (2,) and trace["split_2_2"].out.shape == (2, 2)
    # x.split([1, 3]) (aten::split_with_sizes): cut without inner ops, its pieces still counted
    class Sizes(nn.Module):
        def forward(self, x):
            return [p * 1 for p in x.split([1, 2, 3], dim=1)]

    sizes = tt.trace(Sizes(), torch.ones(2, 6), kernels="off", ops=True)
    assert _labels(sizes.find_sites(tt.where(lambda op: True)))[:3] == [
        "splitwithsizes_1_1", "splitwithsizes_2_2", "splitwithsizes_3_3"]


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64)).eval()


@pytest.fixture(scope="module")
def gpt2_trace(gpt2):
    return tt.trace(gpt2.generate, torch.tensor([[1, 2, 3]]),
                    {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False},
                    kernels="off", ops=True)


def test_gpt2_each_root_call_is_a_pass_numbered_by_the_rule(gpt2_trace):
    every = list(gpt2_trace.find_sites(tt.where(lambda op: True)))
    assert sorted({s.root for s in every}) == [1, 2, 3]  # one root call per token
    first = [s for s in every if s.root == 1]
    # Root call 1 by the rule: step_index counts layers from 1, type_index each type's
    # layers; a block's two residual adds are one layer of two passes (TorchLens's loops)
    layers = list(dict.fromkeys((s.layer_type, s.type_index, s.step_index) for s in first))
    assert [step for _, _, step in layers] == list(range(1, len(layers) + 1))
    seen = {}
    for kind, type_index, _ in layers:
        seen[kind] = seen.get(kind, 0) + 1
        assert type_index == seen[kind]
    looped = [s for s in first if s.num_passes > 3]
    assert [(s.layer_type, s.module, s.pass_index) for s in looped] == [
        ("add", "transformer.h.0:1", 1), ("add", "transformer.h.0:1", 2),
        ("add", "transformer.h.1:1", 1), ("add", "transformer.h.1:1", 2)]
    # Later root calls inherit the layer_label of the first's layer of the same type and
    # index; a layer that runs once a root call has pass k in root call k, a looped one
    # counts its runs on (the residual adds' passes 3 and 4 in root call 2)
    by_key = {(s.layer_type, s.type_index): s.layer_label for s in first}
    for s in every:
        if (s.layer_type, s.type_index) in by_key:
            assert s.layer_label == by_key[(s.layer_type, s.type_index)]
        assert s.label == f"{s.layer_label}:{s.pass_index}"
        assert s.label_short == f"{s.layer_type}_{s.type_index}:{s.pass_index}"
        if s.num_passes == 3:
            assert s.pass_index == s.root
    assert [s.pass_index for s in every if s.layer_label == looped[0].layer_label] == [
        1, 2, 3, 4, 5, 6]
    # Each split of c_attn's output is three labels (query, key, value), one per layer.
    splits = [s for s in first if s.layer_type == "split"]
    assert [s.type_index for s in splits] == [1, 2, 3, 4, 5, 6]
    assert splits[1].step_index == splits[0].step_index + 1


def test_gpt2_pass_qualified_labels_and_selectors(gpt2_trace):
    lm_head = gpt2_trace.find_sites(tt.func("linear"))  # lm_head, once per token
    assert [(s.pass_index, s.module) for s in lm_head] == [
        (1, "lm_head:1"), (2, "lm_head:2"), (3, "lm_head:3")]
    label = lm_head[0].layer_label
    assert {s.layer_label for s in lm_head} == {label}
    assert lm_head.labels() == (f"{label}:1", f"{label}:2", f"{label}:3")
    assert gpt2_trace["linear_1:2"].module == "lm_head:2"
    assert gpt2_trace[f"{label}:3"].token == 3
    assert gpt2_trace["linear_1:2"].shape == [1, 1, 64]
    assert gpt2_trace[label].num_passes == 3
    with pytest.raises(TokentraceError, match=r"ran 3 times \(passes 1..3\)"):
        gpt2_trace[label].out
    assert [list(o.shape) for o in gpt2_trace[label].outs] == [[1, 1, 64]] * 3
    mlp = gpt2_trace.find_sites(tt.in_module("transformer.h.1.mlp:2") & tt.func("addmm"))
    assert [s.module for s in mlp] == ["transformer.h.1.mlp.c_fc:2",
                                       "transformer.h.1.mlp.c_proj:2"]
    decode = gpt2_trace.find_sites(tt.in_module("transformer.h.1.mlp") & tt.func("addmm"))
    assert len(decode) == 6  # 2 a token


def test_record_saves_ops_of_every_step(gpt2):
    rec = tt.record(gpt2, torch.tensor([[1, 2, 3]]), save=tt.func("linear") | tt.module("lm_head"),
                    generate_kwargs={"max_new_tokens": 2, "min_new_tokens": 2,
                                     "do_sample": False}, kernels="off")
    sites = rec.find_sites(tt.func("linear"))
    assert [s.pass_index for s in sites] == [1, 2]
    for k in (1, 2):  # the op's value is the module's output, at every step
        assert torch.equal(rec[f"linear_1:{k}"].out, rec[f"lm_head:{k}"].out)
    assert rec.saved_sites == ["lm_head"]  # the copies' range site is no saved site
    only_sites = tt.record(gpt2, torch.tensor([[1, 2, 3]]), save=tt.module("lm_head"),
                           sites=tt.func("linear"), kernels="off",
                           generate_kwargs={"max_new_tokens": 2, "do_sample": False})
    assert not isinstance(only_sites["linear_1:2"].out, torch.Tensor)  # recorded, not saved


class _Run(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


# One Python call per kind of FUNCTION_ATEN that a forward can make (each in a module of its own).
_FUNCTIONS = {
    "rtruediv": lambda x, n, t: 2 / x, "floordiv": lambda x, n, t: x // 2,
    "radd": lambda x, n, t: 2 + x, "rmul": lambda x, n, t: 3 * x,
    "crossentropy": lambda x, n, t: torch.nn.functional.cross_entropy(x, t),
    # Python calls op records keep as ops of their own (_common/op_groups.py): their own type.
    "double": lambda x, n, t: x.double(), "float": lambda x, n, t: x.float(),
    "half": lambda x, n, t: x.half(), "tensor": lambda x, n, t: torch.tensor([1.0, 2.0]),
    "astensor": lambda x, n, t: torch.as_tensor([1.0, 2.0]),
    "newtensor": lambda x, n, t: x.new_tensor([1.0]), "contiguous": lambda x, n, t: x.contiguous(),
    "getitem": lambda x, n, t: x[0, 1:], "setitem": lambda x, n, t: t.__setitem__(0, 0),
    "truediv": lambda x, n, t: x / 3, "mod": lambda x, n, t: x % 2,
    "invert": lambda x, n, t: ~n, "and": lambda x, n, t: n & 1,
}


class _Functions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.each = torch.nn.ModuleDict({f"f_{k}": _Run(fn) for k, fn in _FUNCTIONS.items()})

    def forward(self, x):
        n, t = (x * 10).long(), torch.zeros(x.shape[0], dtype=torch.long)
        return [m(x, n, t) for m in self.each.values()]


def test_the_aten_ops_each_python_function_runs_are_the_tables():
    """FUNCTION_ATEN (the one table of which ATen ops a Python function runs, in order) against
    what torch runs: each function's ops in the trace, in its own module, are the table's (a
    function not in it is one op of its own type: the Python calls op records keep); and
    tt.func of the function's TorchLens type selects the last of them, whose output is the
    function's (2 / x runs reciprocal then mul: the mul)."""
    from tokentrace._common import FUNCTION_ATEN
    trace = tt.trace(_Functions(), torch.rand(2, 3) + 0.5, kernels="off", ops=True)
    for kind in _FUNCTIONS:
        ran = [s.layer_type for s in trace.find_sites(tt.in_module(f"each.f_{kind}"))]
        assert ran == list(FUNCTION_ATEN.get(kind, (kind,))), (kind, ran)
    chosen = trace.find_sites(tt.func("rtruediv") & tt.in_module("each.f_rtruediv"))
    assert [s.layer_type for s in chosen] == ["mul"]
    assert [s.layer_type for s in trace.find_sites(
        tt.func("float") & tt.in_module("each.f_float"))] == ["float"]
    assert not trace.find_sites(tt.func("to") & tt.in_module("each.f_float"))


class _Indexes(nn.Module):
    def forward(self, x):
        y = x * 2
        y[0] = 1.0
        self.out = y[0, 1:] + y[:, None].sum() + torch.tensor([1.0, 2.0, 3.0])
        return self.out


def test_python_calls_are_ops_while_op_records_are_on_and_are_put_back_after():
    """x[i], x[i] = v and torch.tensor are one op each (their ATen ops inside, unlabelled),
    with the call's output (x[i] = v: x); the entry points are torch's own again after the
    trace, also after one that raised inside them."""
    before = {name: vars(torch.Tensor).get(name) for name in ("__getitem__", "__setitem__")}
    tensor = torch.tensor
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    model = _Indexes()
    with torch.no_grad():
        want = _Indexes()(x)
        trace = tt.trace(model, x, kernels="off", ops=True)
    sites = trace.find_sites(tt.where(lambda op: True))
    assert sites.labels() == ("mul_1_1", "setitem_1_2", "getitem_1_3", "getitem_2_4",
                              "sum_1_5", "add_1_6", "tensor_1_7", "add_2_8")
    assert [s.shape for s in sites][1:4] == [[3, 4], [3], [3, 1, 4]]
    ops = trace["self:1"].ops
    assert [o.name for o in ops[1:4]] == ["python::__setitem__"] + ["python::__getitem__"] * 2
    assert {"aten::select", "aten::slice"} <= set(ops[2].inner)  # x[0, 1:]'s ATen ops
    assert torch.equal(model.out, want)
    assert {n: vars(torch.Tensor).get(n) for n in before} == before and torch.tensor is tensor

    # Saved and edited as ops: the saver's copy lands inside the call's op (the mode reaches
    # the method through the patched class), and the reader gives it to that op
    saved = tt.trace(model, x, kernels="off", save=tt.func("getitem"))
    y = x * 2
    y[0] = 1.0
    assert torch.equal(saved["getitem_1_3"].out, y[0, 1:])
    assert torch.equal(saved["getitem_2_4"].out, y[:, None])
    with torch.no_grad():
        tt.trace(model, x, kernels="off", ops=True,
                 edits=tt.when(tt.label("getitem_1_3"), tt.zero()))
    assert torch.allclose(model.out, want - y[0, 1:])  # y[0, 1:] zeroed

    class Raises(nn.Module):
        def forward(self, x):
            return x[10]

    with pytest.raises(IndexError, match="out of bounds"):
        tt.trace(Raises(), x, kernels="off", ops=True)
    assert {n: vars(torch.Tensor).get(n) for n in before} == before and torch.tensor is tensor
    after = tt.trace(_Indexes(), x, kernels="off", ops=True)  # the raise left no call open
    assert after.find_sites(tt.where(lambda op: True)).labels() == sites.labels()


def test_a_compiled_model_with_python_call_ops_runs_as_compiled():
    """torch.compile of a model that indexes, traced with op records: the patched entry points
    step aside inside TorchDynamo, so it compiles and gives the eager output."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    want = _Indexes()(x)
    model = _Indexes()
    compiled = torch.compile(model, backend="eager")
    trace = tt.trace(compiled, x, kernels="off", ops=True)
    assert torch.equal(model.out, want) and trace.num_tokens == 1
    assert torch.equal(compiled(x), want)


def test_torchscript_compiled_while_op_records_are_on_compiles():
    """A job that scripts a function calling torch.tensor while op records are on: TorchScript
    finds the builtin by the function's identity, so the patched torch.tensor carries the
    original's (it failed in inspect.getsource before); after the trace the table is as it was.
    """
    from torch.jit import _builtins

    class Scripts(nn.Module):
        def forward(self, x):
            @torch.jit.script
            def shift(y: torch.Tensor) -> torch.Tensor:
                return y[0] + torch.tensor([1.0])

            self.out = shift(x)
            return self.out

    table = dict(_builtins._get_builtin_table())
    x = torch.randn(3)
    model = Scripts()
    tt.trace(model, x, kernels="off", ops=True)
    assert torch.equal(model.out, x[0] + torch.tensor([1.0]))
    assert _builtins._get_builtin_table() == table


def test_a_python_call_that_returns_a_parameter_is_no_op():
    """p.float() of a float parameter returns the parameter itself: TorchLens logs no op for a
    parameter (a source), and neither the trace nor an op edit's live labels number one; the
    same call on an activation is an op."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((3,), 2.0))

        def forward(self, x):
            return x.float() * self.w.float()

    seen = []
    with torch.no_grad():
        trace = tt.trace(Scaled(), torch.ones(3), kernels="off", ops=True,
                         edits=tt.when(tt.where(lambda op: seen.append(op.label) or False),
                                       tt.zero()))
    labels = [s.label for s in trace.find_sites(tt.where(lambda op: True))]
    assert labels == ["float_1_1:1", "mul_1_2:1"] and seen == labels
