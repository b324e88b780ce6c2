"""Op-level edits: tt.when(<op selector>, action) edits the output of the ops the selector
chooses while the model runs (python/tokentrace/_edit/op_edits.py), in tt.trace, tt.record
and tt.bind; label selectors (tt.label, tt.contains, tt.regex) choose the op the trace's
reader labels so."""

import warnings

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
    # a predicate reads the op's labels, numbered as the trace's reader numbers them
    bound = tt.when(tt.where(lambda op: op.layer_label == "relu_2_4"), tt.zero()).bind(net)
    with torch.no_grad():
        assert torch.equal(bound(x), by_hand(net, x, inside=torch.zeros_like))
    # what depends on the whole run: one clear error
    bound = tt.when(tt.where(lambda op: op.num_passes == 1), tt.zero()).bind(net)
    with pytest.raises(TokentraceError, match=r"read op.num_passes, which depends on the whole "
                                              r"run .*unknown while the model runs"):
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
    for sel in (tt.label("relu_1_2"), tt.contains("relu"), tt.func("relu") & tt.regex("^relu_")):
        tt.when(sel, tt.zero())  # labels are numbered while the model runs
    with pytest.raises(TokentraceError, match=r"tt.module\('block'\) selects modules; an "
                                              r"op-level edit's selector selects ops only"):
        tt.when(tt.func("relu") | tt.module("block"), tt.zero())
    with pytest.raises(TokentraceError, match=r"output 1; an op-level edit edits an op's "
                                              r"first output tensor"):
        tt.when(tt.func("split", output=1), tt.zero())
    with pytest.raises(TokentraceError, match=r"input=\) edits a module call.s input"):
        tt.when(tt.func("relu"), tt.zero(), input="x")
    with pytest.raises(TokentraceError, match=r"selects ops in a way JSON cannot say"):
        tt.when(tt.where(lambda op: True), tt.zero()).to_json()


# -- TorchLens's labels in edits: tt.label, tt.contains, tt.regex ------------------------------
# The edit numbers the ops while the model runs (python/tokentrace/_edit/op_labels.py); these
# tests hold it to the trace's reader (_read/op_sites.py) on the same run.

class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
        self.fc = nn.Linear(2 * 2 * 2, 3)

    def forward(self, x):
        h = torch.flatten(torch.nn.functional.max_pool2d(self.block(x), 2), 1)
        return torch.softmax(self.fc(h), -1) + h.sum() / 2


class Indexing(nn.Module):
    """Python calls that run several (or no) ATen ops, as op_labels.py counts them."""

    def forward(self, x):
        y = x * 1
        parts = [x[0], x[0, 1], x[:, 1:], x[:], x[:, :], x[...], x[..., 0], x[None],
                 x[0, ..., None, 1:3], x[[0, 1]], x[torch.tensor([0, 1])], x[x > 0],
                 x[torch.ones((), dtype=torch.long)], torch.tensor([1.0]), torch.tensor(3),
                 x.contiguous(), x.t().contiguous(), x.float(), x.T, x.data, 2 / x, 2 - x,
                 x // 2, x % 3, x.max(dim=1)[0], x.split([1, 3])[0], x.unbind(0)[1],
                 x.topk(2)[0], torch.nn.functional.cross_entropy(x, torch.tensor([0, 1, 0, 1]))]
        z = y.clone()
        z[0] = 1.0
        z[:, 0] = x[:, 1]
        z[x > 0] = 0.0
        z[:, :] = 1.0
        z[0] = torch.ones(())
        z[1:, None] = x[1:, None]
        z += 1
        return z, parts


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64)).eval()


GENERATE = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}


@pytest.fixture(scope="module")
def gpt2():
    return _gpt2()


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return CNN().eval()


def _cnn_inputs():
    torch.manual_seed(2)
    return [torch.randn(1, 1, 6, 6) for _ in range(3)]


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    return T5ForConditionalGeneration(T5Config(
        vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
        num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=63)).eval()


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=63)).eval()


def _run(case, model, **kw):
    """A trace of the case: GPT-2 generating 3 tokens, the CNN called on 3 inputs (3 passes);
    T5 (its encoder runs before token 1: no op site, no label) and Llama with a padded batch,
    3 tokens each."""
    if case == "t5":
        return tt.trace(model.generate, torch.tensor([[5, 9, 17, 3]]), GENERATE,
                        kernels="off", **kw)
    if case == "llama":
        return tt.trace(model.generate, {
            "input_ids": torch.tensor([[0, 0, 5, 9], [7, 8, 9, 10]]),
            "attention_mask": torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]), **GENERATE},
            kernels="off", **kw)
    if case == "gpt2":
        return tt.trace(model.generate, torch.tensor([[1, 2, 3]]), GENERATE, kernels="off", **kw)
    if case == "cnn":
        return tt.trace(lambda *xs: [model(x) for x in xs], _cnn_inputs(), model=model,
                        kernels="off", **kw)
    torch.manual_seed(3)
    return tt.trace(model, torch.randn(4, 4), kernels="off", **kw)


def _compare(case, model):
    """(what the edit saw of every op, the reader's op sites of the same run)."""
    seen = []

    def log(op):
        seen.append((op.label, op.label_short, op.layer_type, op.module, op.output_index,
                     op.shape))
        return False

    with torch.no_grad():
        trace = _run(case, model, ops=True, edits=tt.when(tt.where(log), tt.zero()))
    read = [(s.label, s.label_short, s.layer_type, s.module, s.output_index, s.shape)
            for s in trace.find_sites(tt.where(lambda op: True))]
    return seen, read, trace


@pytest.mark.parametrize("case", ["cnn", "indexing", "t5"])
def test_live_labels_are_the_readers(case, cnn):
    """Where the trace has no loops and no orphans (TorchLens's, which take the whole run),
    the labels an edit numbers while the model runs are the trace's, op for op."""
    model = {"cnn": cnn, "indexing": Indexing, "t5": _t5}[case]
    model = model() if callable(model) and not isinstance(model, nn.Module) else model
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no drift said
        seen, read, _ = _compare(case, model)
    assert len(read) > 20 and len(seen) == len(read)
    for live, op in zip(seen, read):
        assert live[:5] == op[:5]
        if live[5] is not None and op[5] is not None:  # a second output's shape is not read
            assert live[5] == op[5]
    if case == "indexing":
        # A Python call that runs several ATen ops (x[0, 1]: two aten::select) or none (a
        # contiguous tensor's x.contiguous()) is one op, as TorchLens logs it; x[i] = v too,
        # with no value an edit can change; max with dim= returns two tensors: two labels
        types = [s[2] for s in seen]
        assert "select" not in types and "liftfresh" not in types
        assert types.count("getitem") == 15 and types.count("setitem") == 6
        assert ("setitem", None) in [(s[2], s[5]) for s in seen]
        assert [s[4] for s in seen if s[2] == "max"] == [0, 1]
        assert types.count("contiguous") == 2 and "tensor" in types


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_live_labels_that_loops_or_orphans_renumber_are_said(case, gpt2):
    """GPT-2's residual adds are a loop of each block; Llama's generate on a padded batch has
    orphans (a mask made only to be read on the host). The trace numbers them as TorchLens
    does, which takes the whole run: the labels numbered while the model ran differ from
    there on, and one warning says how many and the first; before it they are the trace's."""
    model = gpt2 if case == "gpt2" else _llama()
    with pytest.warns(RuntimeWarning, match=r"tokentrace: \d+ of the \d+ ops numbered while "
                                            r"the model ran for an op edit by label have "
                                            r"another label in this trace \(first: "):
        seen, read, trace = _compare(case, model)
    sites = list(trace.find_sites(tt.where(lambda op: True)))
    renumbered = [s for s in sites if s.num_passes > len({x.root for x in sites})]
    first = next(i for i, (live, op) in enumerate(zip(seen, read)) if live[:5] != op[:5])
    assert first > 0 and [s[:5] for s in seen[:first]] == [s[:5] for s in read[:first]]
    if case == "gpt2":
        assert renumbered and renumbered[0].layer_type == "add"
    else:
        assert len(seen) > len(read)  # the orphans have live labels, no trace labels


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_a_label_edit_follows_the_labels_of_the_models_last_trace(case, gpt2):
    """Once a trace's op labels are read, an edit by label on the same model numbers its ops
    as that trace did, loops and orphans included: the labels it sees are the trace's, op for
    op (an orphan there has none), and a rule on a looped layer's pass fires on that op."""
    model = gpt2 if case == "gpt2" else _llama()
    with torch.no_grad():
        reader = _run(case, model, ops=True)
    sites = list(reader.find_sites(tt.where(lambda op: True)))  # read: remembered
    looped = [s for s in sites if s.pass_index != s.root]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no drift, no divergence
        seen, read, _ = _compare(case, model)
    assert len(seen) == len(read) == len(sites)
    assert [s[:5] for s in seen] == [s[:5] for s in read]
    if case != "gpt2":
        return
    target = looped[-1]  # a residual add of the last token: pass 6 of its layer
    fired = []

    def look(op):
        fired.append((op.label, op.module, op.token))
        return True

    with torch.no_grad():
        _run(case, model, edits=tt.when(tt.label(target.label) & tt.where(look), tt.scale(1.0)))
    assert target.pass_index == 6
    assert fired == [(target.label, target.module, target.root)]


def _sample(trace, types):
    """For each type, its first op in pass 1 and in pass 3 (reader's OpSites)."""
    sites = list(trace.find_sites(tt.where(lambda op: True)))
    out = []
    for kind in types:
        for p in (1, 3):
            out.append(next(s for s in sites if s.layer_type == kind and s.pass_index == p))
    return out


@pytest.mark.parametrize("case, types", [("cnn", ("conv2d", "relu", "linear", "softmax",
                                                  "add"))])
def test_a_label_edit_fires_on_the_op_the_reader_labels(case, types, gpt2, cnn):
    model = gpt2 if case == "gpt2" else cnn
    with torch.no_grad():
        reader = _run(case, model, ops=True)
    for site in _sample(reader, types):
        for label, passes in ((site.label, [site.pass_index]),
                              (site.label_short, [site.pass_index]),
                              (site.layer_label, [s.pass_index for s in
                                                  reader[site.layer_label].passes])):
            saw, ctxs = [], []

            def look(op):
                saw.append(op)
                return True

            def spy(values, *, ctx):
                ctxs.append((ctx.token, ctx.site))
                return values

            with torch.no_grad():
                _run(case, model, edits=tt.when(tt.label(label) & tt.where(look), spy))
            assert [op.pass_index for op in saw] == passes, label
            assert [t for t, _ in ctxs] == passes
            want = reader[f"{site.layer_label}:{passes[0]}"]
            op = saw[0]
            assert (op.layer_type, op.module, op.shape, op.label) == (
                want.layer_type, want.module, want.shape, want.label)


def test_a_label_edit_is_the_same_edit_as_func_and_in_module(gpt2, cnn):
    with torch.no_grad():
        reader = _run("gpt2", gpt2, ops=True)
        # the first addmm, before the first loop (a block's residual adds): its label while
        # the model runs is the trace's
        site = reader.find_sites(tt.func("addmm") &
                                 tt.in_module("transformer.h.0.attn.c_attn:2")).first()
        by_label = _run("gpt2", gpt2, save="lm_head", edits=tt.when(tt.label(site.label),
                                                                   tt.scale(-3.0)))
        by_module = _run("gpt2", gpt2, save="lm_head", edits=tt.when(
            tt.func("addmm") & tt.in_module("transformer.h.0.attn.c_attn:2"), tt.scale(-3.0)))
        plain = _run("gpt2", gpt2, save="lm_head")
    for k in (1, 2, 3):
        assert torch.equal(by_label[f"lm_head:{k}"].out, by_module[f"lm_head:{k}"].out)
    assert torch.equal(by_label["lm_head:1"].out, plain["lm_head:1"].out)  # pass 2 only
    assert not torch.equal(by_label["lm_head:2"].out, plain["lm_head:2"].out)
    # the CNN's relu of its second call, by bind: the same as by module
    xs = _cnn_inputs()
    a = tt.when(tt.label("relu_1:2"), tt.fill(0.25)).bind(cnn)
    b = tt.when(tt.func("relu") & tt.in_module("block.1:2"), tt.fill(0.25)).bind(cnn)
    with torch.no_grad():
        with a.installed():
            got = [cnn(x) for x in xs]
        with b.installed():
            want = [cnn(x) for x in xs]
        plain = [cnn(x) for x in xs]
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert torch.equal(got[0], plain[0]) and not torch.equal(got[1], plain[1])
    assert a.last_report.fire_count == 1


def test_contains_and_regex_in_edits(cnn):
    xs = _cnn_inputs()
    with torch.no_grad():
        reader = _run("cnn", cnn, ops=True)
    for selector in (tt.contains("RELU"), tt.regex(r"^linear_1_\d+:2$"),
                     tt.regex("^softmax_") & tt.in_module("self:3")):
        seen = []
        with torch.no_grad():
            _run("cnn", cnn, edits=tt.when(selector & tt.where(
                lambda op: seen.append(op.label) or True), tt.zero()))
        assert seen == list(reader.find_sites(selector).labels()) or seen == [
            s.label for s in reader.find_sites(selector)], selector
        assert seen
    bound = tt.when(tt.contains("relu"), tt.zero()).bind(cnn)
    with torch.no_grad():
        out = bound(xs[0])
    assert torch.allclose(out.sum(), torch.tensor(1.0))  # softmax of fc(0) + 0
    assert bound.last_report.fire_count == 1


def test_a_label_of_an_op_without_a_value_is_an_error_and_divergence_is_seen(cnn):
    # 2 / x runs aten::reciprocal then aten::mul in one Python call: the reciprocal's output
    # is never the model's, so an edit cannot change it
    class Reciprocal(nn.Module):
        def forward(self, x):
            return 2 / x

    with pytest.raises(TokentraceError, match=r"tt.label\('reciprocal_1_1'\) chose "
                                              r"reciprocal_1_1:1 \(aten reciprocal, op 1 of "
                                              r"pass 1\), which __rdiv__ runs inside one "
                                              r"Python call"):
        with torch.no_grad():
            tt.when(tt.label("reciprocal_1_1"), tt.zero()).bind(Reciprocal())(torch.randn(4, 4))
    # x[0] = 1.0 returns nothing: one op (setitem_1_2) with no output to edit
    class Sets(nn.Module):
        def forward(self, x):
            y = x * 1
            y[0] = 1.0
            return y

    with pytest.raises(TokentraceError, match=r"chose setitem_1_2:1 \(x\[index\] = v, op 2 "
                                              r"of pass 1\), which returns nothing"):
        with torch.no_grad():
            tt.when(tt.label("setitem_1_2"), tt.zero()).bind(Sets())(torch.randn(4, 4))

    # F.normalize is one call to the edit but four ATen ops to the reader: the labels after it
    # differ (docs/ops.md), so the reader's label of the relu after it never fires
    class Normalized(nn.Module):
        def forward(self, x):
            return torch.relu(torch.nn.functional.normalize(x))

    model = Normalized()
    x = torch.randn(2, 4)
    relu = tt.trace(model, x, kernels="off", ops=True).find_sites(tt.func("relu")).first()
    assert relu.layer_label == "relu_1_5"
    bound = tt.when(tt.label(relu.layer_label), tt.zero()).bind(model)
    # ... and the user is told, once: where the run leaves the trace's labels (the edit sees
    # normalize where the trace has vectornorm), and that a label rule chose no op
    with pytest.warns(RuntimeWarning, match=r"op 1 of root call 1 is normalize here but "
                                            r"vectornorm_1_1 in .*, whose labels this run's "
                                            r"edits by label followed; from this op on, ops "
                                            r"are numbered as they run"):
        with pytest.warns(tt.EditSkipWarning, match=r"1 edit rule\(s\) selecting ops by "
                                                    r"label chose no op in this run "
                                                    r"\(.*relu_1_5"):
            with torch.no_grad():
                bound(x)
    assert bound.last_report.fire_count == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            bound(x)  # said once per bound model
    with pytest.warns(tt.EditSkipWarning, match="chose no op"):
        tt.trace(model, x, kernels="off", edits=tt.when(tt.label(relu.layer_label), tt.zero()))
    with warnings.catch_warnings():  # a predicate that chose nothing names no label: quiet
        warnings.simplefilter("error", tt.EditSkipWarning)
        tt.trace(model, x, kernels="off", edits=tt.when(tt.where(lambda op: False), tt.zero()))
    bound = tt.when(tt.label("relu_1_2"), tt.zero()).bind(model)  # the live numbering's
    with torch.no_grad():
        assert torch.equal(bound(x), torch.zeros(2, 4))


def test_op_rules_on_a_compiled_model_run_it_eagerly_and_leave_it_compiled():
    """An op-level edit or save of a model the job compiled: TorchDynamo used to trace into the
    op mode and fail its own guard on the mode's cache ("Guard failed on the same frame it was
    created", out of the job's call). While op rules are on, compiled code runs eagerly, so the
    rules see its ops; afterwards the job's model compiles and runs compiled again."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(len(example_inputs))
        return gm.forward
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 4)
    with torch.no_grad():
        plain = compiled(x)
        assert len(compiles) == 1
        edited = model[2](torch.zeros(2, 4))  # the relu's output zeroed
        trace = tt.trace(compiled, x, kernels="off", edits=tt.when(tt.func("relu"), tt.zero()),
                         save=tt.func("relu"))
        assert torch.equal(trace.find_sites(tt.func("relu")).first().out, torch.zeros(2, 4))
        bound = tt.when(tt.func("relu"), tt.zero()).bind(compiled)
        assert torch.equal(bound(x), edited) and bound.last_report.fire_count == 1
        assert len(compiles) == 1  # nothing compiled while the rules were on
        assert torch.equal(compiled(x), plain)
        compiled(torch.randn(3, 4))  # a new shape: compiled again, as before the run
    assert len(compiles) >= 2


def test_record_takes_a_label_edit_and_saves_the_edited_op(cnn):
    """tt.record with an edit by label (the relu of the CNN's 2nd call, read from a trace of
    the same run) and save= of that op: the saved output is the edited one, in that call only."""
    xs = _cnn_inputs()
    with torch.no_grad():
        reader = _run("cnn", cnn, ops=True)
    (label,) = reader.find_sites(tt.func("relu") & tt.in_module("self:2")).labels()
    with torch.no_grad():
        rec = tt.record(lambda *xs: [cnn(x) for x in xs], xs, save=tt.func("relu"),
                        edits=tt.when(tt.label(label), tt.zero()), model=cnn, kernels="off")
    relus = {s.pass_index: s.out for s in rec.find_sites(tt.func("relu"))}
    assert sorted(relus) == [1, 2, 3]
    assert not relus[2].any() and relus[1].any() and relus[3].any()


def test_an_operator_is_known_by_its_torchlens_name_in_a_bound_model():
    """x / y reaches the op mode as Tensor.div, as torch.div(x, y) does; TorchLens calls the
    first truediv, and so do the labels and tt.func of a bound model (no trace, no op records:
    op_groups.py marks the operator's call for the mode), and the entry points are torch's
    own again after the call."""
    class Divides(nn.Module):
        def forward(self, x):
            y = x * 2
            return y / 4 + torch.div(y, 4)

    x = torch.randn(3)
    truediv = torch.Tensor.__truediv__
    with torch.no_grad():
        by_label = tt.when(tt.label("truediv_1_2"), tt.zero()).bind(Divides())(x)
        by_func = tt.when(tt.func("div"), tt.zero()).bind(Divides())(x)
    assert torch.equal(by_label, torch.div(x * 2, 4))
    assert torch.equal(by_func, (x * 2) / 4)
    assert torch.Tensor.__truediv__ is truediv
