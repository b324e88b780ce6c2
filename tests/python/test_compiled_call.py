"""A compiled call of the traced model that the job makes while traced (transformers' generate
compiling the model's __call__ itself: python/tokentrace/_compiled/call.py), with a model
whose get_compiled_call stands in for transformers': it notes what a compiler tracing the
call would see on the modules. No compiler here: test_compiled_generate.py compiles for real.
Also: a TorchDynamo reset between traces forgets the compiled-kernel map of the graphs it
drops (python/tokentrace/_compiled/kernel_map.py)."""

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace._backend import get_backend
from tokentrace._compiled import kernel_map


def _visible(model):
    """What TorchDynamo reads of each module: its instance attributes and its hook dicts."""
    return {name: (sorted(k for k in m.__dict__ if k in ("forward", "_compiled_call_impl")),
                   list(m._forward_pre_hooks.values()), list(m._forward_hooks.values()))
            for name, m in model.named_modules()}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

    def get_compiled_call(self, compile_config):
        """As transformers': one compiled __call__, made once and kept."""
        if getattr(self, "_compiled_call", None) is None:
            def compiled(*args, **kwargs):
                self.seen.append(_visible(self))
                return self(*args, **kwargs)
            self._compiled_call = compiled
        return self._compiled_call


def _job(model, calls):
    def job(x):
        model(x)  # eager, as generate's prefill
        compiled = model.get_compiled_call(None)
        for _ in range(calls):  # the decode steps
            compiled(x)
    return job


def test_the_compiled_call_sees_the_modules_as_untraced_and_is_a_root_call():
    torch.manual_seed(0)
    model = Model()
    user_pre = model.b.register_forward_pre_hook(lambda m, args: None)  # b: the hook pair
    user_post = model.b.register_forward_hook(lambda m, args, out: None)
    untraced = _visible(model)
    x = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match="compiled the model's __call__ while traced"):
        trace = tt.trace(_job(model, 2), x, model=model, kernels="off")
    # Nothing of the trace where the compiled call looks, the user's hooks still there.
    assert model.seen == [untraced, untraced]
    assert trace["self"].num_calls == 3  # the eager call, then each compiled call: tokens
    assert trace["a"].num_calls == trace["b"].num_calls == 1  # inside: eager calls only
    assert [list(trace[f"self:{k}"].out.shape) for k in (1, 2, 3)] == [[2, 4]] * 3
    # Everything given back: no interception, no wrapper, the user's hooks in their order.
    assert "get_compiled_call" not in model.__dict__
    assert _visible(model) == untraced
    user_pre.remove()
    user_post.remove()


def test_hooks_the_job_adds_during_a_compiled_call_are_kept_and_ours_go_back_in_place():
    model = Model()
    first = model.b.register_forward_pre_hook(lambda m, args: None)
    added = []

    def compiled_adding_a_hook(*args, **kwargs):
        added.append(model.b.register_forward_pre_hook(lambda m, args: None))
        return model(*args, **kwargs)
    model._compiled_call = compiled_adding_a_hook
    during = []

    def job(x):
        compiled = model.get_compiled_call(None)
        compiled(x)
        during.append(list(model.b._forward_pre_hooks))  # ours back, first; theirs kept
        model(x)
    with pytest.warns(RuntimeWarning, match="compiled the model's __call__ while traced"):
        trace = tt.trace(job, torch.randn(1, 4), model=model, kernels="off")
    ours_first = during[0][0]
    assert ours_first not in (first.id, added[0].id)
    assert during[0][1:] == [first.id, added[0].id]
    assert trace["b"].num_calls == 1  # the eager call after the compiled one
    assert list(model.b._forward_pre_hooks) == [first.id, added[0].id]


def test_a_model_without_get_compiled_call_is_left_alone():
    model = nn.Sequential(nn.Linear(4, 4))
    trace = tt.trace(model, torch.randn(1, 4), kernels="off")
    assert trace["self"].num_calls == 1
    assert "get_compiled_call" not in model.__dict__


def test_a_dynamo_reset_between_traces_forgets_the_graphs_noted_before_it():
    import torch._dynamo
    saved = dict(kernel_map._state["graphs"]), dict(kernel_map._state["regions"])
    try:
        kernel_map.start()  # puts the reset wrapper on (TorchDynamo is loaded)
        kernel_map._state["graphs"]["7"] = [["triton_poi_fused_add_0", ["mlp"]]]
        kernel_map._state["regions"]["7"] = "0/1"
        torch._dynamo.reset()  # during a trace: kept (that trace may have run the graph)
        assert kernel_map.meta()
        kernel_map.stop()
        torch.compiler.reset()  # between traces: the graph is gone, its compile id is free
        assert kernel_map.meta() == {}
    finally:
        kernel_map.stop()
        kernel_map._state["graphs"].update(saved[0])
        kernel_map._state["regions"].update(saved[1])


PRELOADED_JOB = """
import torch
from torch import nn
from torch._dynamo.utils import counters


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

    def get_compiled_call(self, compile_config):
        if getattr(self, "_compiled_call", None) is None:
            # TorchDynamo without Inductor: its graph breaks are what is checked here
            self._compiled_call = torch.compile(self.__call__, backend="eager")
        return self._compiled_call


model = Model()
x = torch.randn(2, 4)
with torch.no_grad():
    step = model.get_compiled_call(None)  # before the first root call, as generate does
    model(x)  # the prefill, eager: the preloaded job attaches here
    for _ in range(2):
        step(x)
print("BREAKS", sum(counters["graph_break"].values()))
"""


def test_the_preloaded_job_records_a_compiled_call_taken_before_it_attached(tmp_path):
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path, PRELOADED_JOB)
    res = _run_cli(tmp_path, job, own, ("--kernels", "off"),
                   TOKENTRACE_OUT=str(tmp_path / "p.sqlite"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "BREAKS 0" in res.stdout.splitlines()  # TorchDynamo saw none of the trace
    assert res.stderr.count("compiled the model's __call__ while traced") == 1
    trace = tt.load(tmp_path / "p.sqlite")
    assert trace["self"].num_calls == 3
    assert trace["a"].num_calls == trace["b"].num_calls == 1


def test_the_native_swap_restores_what_each_wrapper_replaced_and_puts_them_back():
    native = get_backend()
    missing, ours_a, ours_b, theirs = object(), object(), object(), object()
    a, b, c = {"forward": ours_a}, {"forward": ours_b}, {"forward": theirs}  # c: not ours now
    plan = [(a, "forward", ours_a, missing), (b, "forward", ours_b, "old"),
            (c, "forward", object(), missing)]
    hidden = native.hide_attributes(plan, missing)
    assert hidden == plan[:2]
    assert a == {} and b == {"forward": "old"} and c == {"forward": theirs}
    assert native.hide_attributes(plan, missing) == []  # a compiled call inside another
    native.show_attributes(hidden)
    assert a == {"forward": ours_a} and b == {"forward": ours_b} and c == {"forward": theirs}
    with pytest.raises(TypeError, match="dict, key, wrapper, previous"):
        native.hide_attributes([("not a dict", "k", 1, 2)], missing)


def test_a_function_that_compiles_the_model_before_calling_it_needs_no_model_argument():
    from torch._dynamo.utils import counters
    scope = {}
    exec(PRELOADED_JOB.split("model = Model()")[0], scope)  # noqa: S102 - the class above
    model, x = scope["Model"](), torch.randn(2, 4)
    compile_before = torch.compile

    def job(x):  # a closure: the model is found at its first call, after the compile
        with torch.no_grad():
            step = model.get_compiled_call(None)
            model(x)
            for _ in range(2):
                step(x)
    counters.clear()
    with pytest.warns(RuntimeWarning, match="compiled the model's __call__ while traced"):
        trace = tt.trace(job, x, kernels="off")
    assert sum(counters["graph_break"].values()) == 0
    assert trace["self"].num_calls == 3 and trace["a"].num_calls == 1
    assert torch.compile is compile_before  # the watch is off with the trace
    before = counters["stats"]["unique_graphs"]
    with torch.no_grad():  # watched still, passing through: the same compiled code
        model._compiled_call(x)
    assert counters["stats"]["unique_graphs"] == before


def test_the_preloaded_job_attaches_when_a_compiled_function_calls_the_model_first(tmp_path):
    # TorchDynamo traces the function and the first-call hook in it: the attach must run
    # outside its tracing (it failed there: TorchDynamo's error on stderr, nothing recorded).
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path, """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
compiled = torch.compile(lambda x: model(x) * 2, backend="eager")
for _ in range(2):
    print("OUT", list(compiled(torch.randn(3, 4)).shape))
""")
    res = _run_cli(tmp_path, job, own, ("--kernels", "off"),
                   TOKENTRACE_OUT=str(tmp_path / "f.sqlite"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.splitlines()[-2:] == ["OUT [3, 2]"] * 2
    assert "hooks not installed" not in res.stderr and "Traceback" not in res.stderr
    trace = tt.load(tmp_path / "f.sqlite")
    assert trace["self"].num_calls == 2 and trace["0"].num_calls == 2
