"""Kernels of an Inductor-compiled model attributed to the modules they came from, on the CPU:
Inductor's generated C++ kernels, profiled when op records are on, are op calls of the
compiled module's call; python/tokentrace/_compiled/kernel_map.py notes at compile time which
modules each kernel came from; the trace joins the two. Without op records,
Inductor generates the same code with and without tokentrace.

Inductor compiles in-process here (compile_threads=1): its worker pool is not worth starting
for a model this small, on a machine this small."""

import json
import re

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace._compiled import kernel_map

inductor_utils = pytest.importorskip("torch._inductor.utils")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        return torch.relu(self.ln(self.lin(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        return self.b(self.a(x)) * 2


@pytest.fixture(scope="module")
def in_process():
    import torch._inductor.config as config
    saved = config.compile_threads, config.force_disable_caches
    config.compile_threads, config.force_disable_caches = 1, True  # every run compiles
    yield
    config.compile_threads, config.force_disable_caches = saved


def _run(trace_with):
    """(outputs of 3 calls, the generated code, the trace or None) of a fresh compile of Model,
    traced with ops=trace_with (None: not traced)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(Model().eval())
    x = torch.arange(24.0).reshape(3, 8) / 24
    outs, trace = [], [None]

    def three_calls(x):
        with torch.no_grad():
            for _ in range(3):
                outs.append(compiled(x))

    def run():
        if trace_with is None:
            three_calls(x)
        else:
            with pytest.warns(RuntimeWarning, match="inside a compiled region"):
                trace[0] = tt.trace(three_calls, x, model=compiled, kernels="off", ops=trace_with)
    _, code = inductor_utils.run_and_get_code(run)
    return outs, "\n".join(code), trace[0]


@pytest.fixture(scope="module")
def runs(in_process):
    return {"plain": _run(None), "traced": _run(False), "ops": _run(True)}


def _kernel_names(code):
    return sorted(set(re.findall(r"\bcpp_fused_\w+", code)))


def test_without_ops_inductor_generates_the_same_kernels(runs):
    plain_outs, plain_code, _ = runs["plain"]
    outs, code, _ = runs["traced"]
    assert _kernel_names(code) == _kernel_names(plain_code) != []
    assert "RecordFunction" not in code and "RecordFunction" not in plain_code
    assert all(torch.equal(a, b) for a, b in zip(outs, plain_outs))


def test_with_ops_each_kernel_is_attributed_to_its_modules(runs):
    plain_outs, plain_code, _ = runs["plain"]
    outs, code, trace = runs["ops"]
    assert "RAIIAtenRecordFunctionHandle" in code  # asked for: Inductor profiles its kernels
    assert _kernel_names(code) == _kernel_names(plain_code)
    assert all(torch.equal(a, b) for a, b in zip(outs, plain_outs))
    assert trace.losses == {}
    for token in (1, 2, 3):  # token 1 compiles first: its compile's ops are no kernels
        kernels = trace.compiled_kernels(token)
        by_name = [(re.sub(r"^graph_\d+_", "", k.name), k.modules, k.fused) for k in kernels]
        assert by_name == [
            ("aten::addmm", ["a.lin"], False),
            ("cpp_fused_native_layer_norm_relu_0", ["a", "a.ln"], True),  # ln, then a's relu
            ("aten::addmm", ["b.lin"], False),
            # b's layer norm and relu, and the root's `* 2` ("self": the compiled module)
            ("cpp_fused_mul_native_layer_norm_relu_1", ["self", "b", "b.ln"], True)]
    # Each graph's compile id is the one TorchDynamo's region range names where it ran (the
    # rule that tells graphs apart on a GPU, where Triton kernel names repeat across graphs).
    regions = json.loads(trace.meta[kernel_map.REGIONS_KEY])
    ran = {n.split(": ", 1)[1] for (n,) in trace._q(
        "SELECT name FROM sites WHERE name LIKE 'Torch-Compiled Region: %'")}
    assert regions and set(regions.values()) <= ran, (regions, ran)
    totals = {t.module: t for t in trace.compiled_modules(token=3)}
    assert sorted(totals) == ["a", "a.lin", "a.ln", "b", "b.lin", "b.ln", "self"]
    # The kernels ran inside the token's root call: their time is part of its wall time.
    assert 0 < sum(k.cpu_ns for k in trace.compiled_kernels(3)) / 1e6 <= trace["self:3"].cpu_ms
