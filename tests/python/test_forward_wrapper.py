"""How the recording attaches to modules: each hooked module's `forward` is wrapped natively
for the trace (so torch keeps its fast, hook-free call path), and comes back as it was."""

import functools
import inspect
import warnings

import pytest
import torch
from torch import nn

import tokentrace as tt


def _trace(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tt.trace(*args, **kwargs)


class Probe(nn.Module):
    """Looks at its own `forward` while it runs, as transformers does with inspect.signature."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x, scale: float = 2.0, *, bias=None):
        self.seen.append((inspect.signature(self.forward), self.forward.__name__,
                          getattr(self.forward, "__self__", self) is self,
                          "forward" in self.__dict__))
        return self.lin(x) * scale


def test_forward_is_wrapped_during_the_trace_only():
    model = Probe()
    plain_sig = inspect.signature(model.forward)
    trace = _trace(model, torch.ones(1, 4))
    sig, name, bound_to_self, wrapped = model.seen[-1]
    assert wrapped, "the root's forward was not wrapped while tracing"
    assert sig == plain_sig and name == "forward" and bound_to_self
    assert "forward" not in model.__dict__ and "forward" not in model.lin.__dict__
    assert trace["self"].num_calls == 1 and trace["lin"].num_calls == 1
    assert list(trace["lin:1"].out.shape) == [1, 4]


def test_keyword_arguments_reach_forward():
    model = Probe()
    x = torch.ones(1, 4)
    expected = model(x, 3.0, bias=None)
    with torch.no_grad():
        trace = _trace(model, x, input_kwargs={"scale": 3.0}, save=tt.module("self"))
    assert torch.allclose(trace["self:1"].out, expected)


def test_an_existing_instance_forward_is_kept_and_restored():
    model = Probe()
    calls = []
    original = model.forward

    @functools.wraps(original)
    def logged(*args, **kwargs):  # as accelerate's hooks install themselves
        calls.append(1)
        return original(*args, **kwargs)
    model.forward = logged
    trace = _trace(model, torch.ones(1, 4))
    assert calls == [1] and trace["self"].num_calls == 1
    assert model.__dict__["forward"] is logged


def test_wrapped_over_during_the_trace_stays_working():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    lin = model[0]
    outer = []

    class Wrapper(nn.Module):
        def forward(self, x):
            inner = lin.forward

            def over(*args):  # someone replaces forward over ours mid-trace
                outer.append(1)
                return inner(*args)
            lin.forward = over
            return model(x)

    _trace(Wrapper(), torch.ones(1, 4), model=model)
    assert "forward" in lin.__dict__  # theirs stays
    lin(torch.ones(1, 4))  # ours inside theirs is now a pass-through
    assert outer == [1, 1]
    trace = _trace(model, torch.ones(1, 4))  # and a later trace records as usual
    assert trace["0"].num_calls == 1


def test_forward_that_raises_closes_its_call():
    class Boom(Exception):
        pass

    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            y = self.inner(x)
            try:
                self.bad(y)
            except Boom:
                pass
            return y

    class Raising(nn.Module):
        def forward(self, x):
            raise Boom()

    model = Fails()
    model.bad = Raising()
    trace = _trace(model, torch.ones(1, 4))
    # bad:1 raised and was closed; the root still closed after it, with the right parent.
    assert trace["bad"].num_calls == 1 and trace["self"].num_calls == 1
    assert trace["bad:1"].parent_id == trace["self:1"].id
    assert trace["inner:1"].parent_id == trace["self:1"].id
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_modules_with_hooks_record_the_hooked_output():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    h = model[0].register_forward_hook(lambda m, a, out: out * 0)
    try:
        trace = _trace(model, torch.ones(1, 4), save=tt.module("0"))
    finally:
        h.remove()
    assert trace["0:1"].out.abs().sum() == 0  # the output downstream saw
    assert "forward" not in model[0].__dict__ and not model[0]._forward_pre_hooks


def test_recursive_module_numbering():
    class Countdown(nn.Module):
        def forward(self, x, n):
            return x if n == 0 else self(x + 1, n - 1)

    model = Countdown()
    trace = _trace(model, (torch.zeros(1), 3))
    calls = [trace[f"self:{k}"] for k in range(1, 5)]
    assert trace["self"].num_calls == 4
    assert [c.parent_id for c in calls[1:]] == [c.id for c in calls[:-1]]


def test_data_parallel_models_get_hooks_instead():
    # DataParallel replicas are shallow copies of each module's __dict__: a wrapped forward
    # there would run the original module, so such models are traced through hooks.
    inner = Probe()
    model = nn.DataParallel(inner, device_ids=[])  # no GPU here: calls the module directly
    trace = _trace(model, torch.ones(1, 4), model=model)
    wrapped = inner.seen[-1][3]
    assert not wrapped, "a module under DataParallel had its forward replaced"
    assert trace["module"].num_calls == 1 and trace["module.lin"].num_calls == 1
    assert not inner._forward_hooks and not inner._forward_pre_hooks


def test_compiled_function_over_an_uncompiled_model_warns():
    # A compiled *function* that calls a plain model puts the wrappers inside the compiled
    # region; the trace says so and how to avoid it (compiled models: tests/python/
    # test_compiled.py).
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    fn = torch.compile(lambda x: model(x), backend="eager")
    with pytest.warns(RuntimeWarning, match=r"compile the model instead"):
        trace = tt.trace(fn, torch.ones(1, 4), model=model, kernels="off")
    assert trace["self"].num_calls == 1
    torch._dynamo.reset()


def test_model_can_be_saved_and_copied_while_traced(tmp_path):
    # torch.save or copy.deepcopy of a module mid-trace (a checkpoint callback) must not fail
    # on the wrapper; the copy gets a plain forward bound to itself, and works.
    import copy

    class Saver(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.copies = []

        def forward(self, x):
            torch.save(self.lin, tmp_path / "lin.pt")
            self.copies.append(copy.deepcopy(self.lin))
            return self.lin(x)

    model = Saver()
    trace = _trace(model, torch.ones(1, 4))
    assert trace["lin"].num_calls == 1
    loaded = torch.load(tmp_path / "lin.pt", weights_only=False)
    for clone in (loaded, model.copies[0]):
        assert getattr(clone.forward, "__self__", None) is clone
        assert torch.allclose(clone(torch.ones(1, 4)), model.lin(torch.ones(1, 4)))
