"""A model Inductor compiled and ran before an ops=True trace: its kernel map is recovered from
what TorchDynamo and Inductor keep of each compiled graph (python/tokentrace/_compiled/
precompiled.py), and nothing is compiled again. On the CPU its generated C++ kernels were
compiled without profiling: they run unrecorded (named in meta compiled_unrecorded); its
library calls, which op records see, are attributed to the modules they came from, the same
as when the model is compiled under the trace. Before, every one of them was counted as
compiled_unattributed and the regions named as unmapped."""

import json

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace._compiled import kernel_map, precompiled

pytest.importorskip("torch._inductor.utils")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        return torch.relu(self.ln(self.lin(x)))


class Model(nn.Module):
    def __init__(self, graph_break=False):
        super().__init__()
        self.a, self.b = Block(), Block()
        self.graph_break = graph_break

    def forward(self, x):
        x = self.a(x)
        if self.graph_break:
            torch._dynamo.graph_break()
        return self.b(x) * 2


@pytest.fixture(scope="module")
def in_process():
    import torch._inductor.config as config
    saved = config.compile_threads, config.force_disable_caches
    config.compile_threads, config.force_disable_caches = 1, True  # every run compiles
    yield
    config.compile_threads, config.force_disable_caches = saved


def _precompiled_trace(graph_break):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Model(graph_break).eval()
    compiled = torch.compile(model)
    x = torch.arange(24.0).reshape(3, 8) / 24
    with torch.no_grad():
        expected = model(x)
        compiled(x)  # compiled and warmed up before the trace
        compiled(x)
        counters = dict(torch._dynamo.utils.counters["stats"])

        def two_calls(x):
            return [compiled(x) for _ in range(2)]
        with pytest.warns(RuntimeWarning, match="inside a compiled region"):
            trace = tt.trace(two_calls, x, model=compiled, kernels="off", ops=True)
        assert dict(torch._dynamo.utils.counters["stats"]) == counters  # nothing compiled
        assert torch.allclose(compiled(x), expected)
    return trace


def test_library_calls_of_a_graph_compiled_before_the_trace_are_attributed(in_process):
    trace = _precompiled_trace(graph_break=False)
    assert "compiled_unattributed" not in trace.losses, trace.losses
    assert "compiled_unmapped" not in trace.meta
    for token in (1, 2):
        kernels = trace.compiled_kernels(token)
        assert [(k.name, k.modules, k.fused) for k in kernels] == [
            ("aten::addmm", ["a.lin"], False), ("aten::addmm", ["b.lin"], False)]
    unrecorded = json.loads(trace.meta[kernel_map.UNRECORDED_KEY])
    assert list(unrecorded.values()) == [["cpp_fused_native_layer_norm_relu_0",
                                          "cpp_fused_mul_native_layer_norm_relu_1"]]
    assert list(unrecorded) == list(json.loads(trace.meta[kernel_map.REGIONS_KEY]).values())
    (compile_id,) = unrecorded
    assert trace.meta["compiled_unrecorded_regions"] == f"{compile_id} (2 kernels)"
    assert ("compiled before the trace (kernel map recovered), generated kernels that ran "
            "unrecorded (compiled without profiling; their time is their region's own): "
            f"{compile_id} (2 kernels)") in trace.report()


def test_graphs_on_both_sides_of_a_graph_break_are_each_recovered(in_process):
    trace = _precompiled_trace(graph_break=True)
    assert "compiled_unattributed" not in trace.losses, trace.losses
    assert "compiled_unmapped" not in trace.meta
    regions = json.loads(trace.meta[kernel_map.REGIONS_KEY])
    assert len(set(regions.values())) == 2, regions
    for token in (1, 2):
        kernels = trace.compiled_kernels(token)
        assert [(k.name, k.modules) for k in kernels] == [
            ("aten::addmm", ["a.lin"]), ("aten::addmm", ["b.lin"])]


def test_a_library_call_is_the_module_of_its_last_source_node():
    source = '''
cpp_fused_relu_0 = async_compile.cpp_pybinding(['float*'], r\'\'\'
extern "C" void kernel(float* p) {}
\'\'\')

class Runner:
    def call(self, args):
        buf0 = empty_strided_cpu((3, 8), (8, 1), torch.float32)
        # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.t, aten.addmm]
        extern_kernels.addmm(arg1_1, arg2_1, arg0_1, alpha=1, beta=1, out=buf0)
        cpp_fused_relu_0(buf0)
        # Topologically Sorted Source Nodes: [relu, linear_1], Original ATen: [aten.addmm]
        extern_kernels.mm(buf0, arg3_1, out=buf1)
        # Topologically Sorted Source Nodes: [sdpa], Original ATen: [aten._foo]
        buf2 = torch.ops.aten._foo.default(buf1)
        return (buf2, )

runner = Runner(partitions=[])
'''
    kernels, profiled = precompiled.parse(source)
    assert kernels == [("extern", "aten::addmm", ["linear"]), ("cpp", "cpp_fused_relu_0", []),
                       ("extern", "aten::mm", ["relu", "linear_1"]),
                       ("extern", "aten::_foo", ["sdpa"])]
    assert profiled == {"cpp_fused_relu_0": False}


def test_a_graph_not_read_is_not_mapped():
    """No map rather than an empty one: a graph left out stays unmapped, its regions named and
    its ops counted (test_compiled_before.py)."""
    gm = torch.fx.symbolic_trace(Block())

    def compiled(*args):
        return None
    compiled.named_parameters = gm.named_parameters
    compiled.source_code = "def call(args):\n    return ()\n"  # no kernel in its call()
    compiled.fx_kwargs = {"graph_id": 7}
    assert precompiled.graph_map(compiled, kernel_map._node_module) is None
    compiled.source_code = "// C++ wrapper"
    compiled.fx_kwargs = {"graph_id": 7, "cpp_wrapper": True}
    assert precompiled.graph_map(compiled, kernel_map._node_module) is None
    del compiled.source_code  # another backend's function (aot_eager): no source at all
    assert precompiled.graph_map(compiled, kernel_map._node_module) is None
