"""CUDA: the same results as the CPU path (f32 bit-identical, bf16 identical), and a CUDA graph
that replays the edit at the right token because the decision is made on the device."""
import pytest
import torch

from test_ops_cpu import INDEX_IDS, INDEXES, OP_IDS, OPS, SHAPE, _operand

pytestmark = pytest.mark.gpu


def _bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).cpu()


def _apply(tto, device, x, index, op, kw):
    table = tto.PatchTable(1)
    table.add_entry(0, op, index=index, calls="prefill", **kw)
    table.upload(device)
    table.advance_token()
    y = x.to(device).clone()
    table.apply_(y, 0)
    assert table.fires() == (1, [1])
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("index", INDEXES, ids=INDEX_IDS)
@pytest.mark.parametrize("op,kw", OPS, ids=OP_IDS)
def test_cuda_matches_cpu(tto, dtype, index, op, kw):
    kw = dict(kw)
    if "operand" in kw:
        kw["operand"] = _operand(kw["operand"], SHAPE, index, dtype)
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(dtype)
    cpu = _apply(tto, "cpu", x, index, op, kw)
    cuda = _apply(tto, "cuda", x, index, op, kw)
    assert torch.equal(_bits(cuda), _bits(cpu))


def test_cuda_strided_output(tto):
    base = torch.randn(8, 5, 2, device="cuda")
    x = base.permute(2, 1, 0)
    table = tto.PatchTable(1)
    table.add_entry(0, "scale", index=(slice(None), slice(1, 4)), value=-2.0)
    table.upload("cuda")
    want = x.clone()
    want[:, 1:4] *= -2.0
    table.apply_(x, 0)
    assert torch.equal(x, want)


def _graph_case(tto):
    table = tto.PatchTable(1)
    table.add_entry(0, "add", index=(slice(None), 0), calls=("token", 3), value=1.0)
    table.upload("cuda")
    x = torch.zeros(2, 4, device="cuda")
    y = torch.empty_like(x)

    def step():  # one "root call": a token, a computation, the site's apply
        table.advance_token()
        y.copy_(x * 2)
        table.apply_(y, 0)

    return table, y, step


def test_cuda_graph_replays_edit_at_token_3(tto):
    table, y, step = _graph_case(tto)
    eager = []
    for _ in range(5):
        step()
        eager.append(y.clone())
    eager_counts = table.counters()

    table.reset()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph recommends
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    table.reset()  # the warm-up ran the kernels; capture did not
    replays = []
    for _ in range(5):
        graph.replay()
        replays.append(y.clone())
    counts = table.counters()

    fired = [bool((r[:, 0] == 1).all()) for r in replays]
    assert fired == [False, False, True, False, False]
    for a, b in zip(replays, eager):
        assert torch.equal(a, b)
    assert counts == eager_counts
    assert counts["fires"] == [1] and counts["token"] == 5 and counts["site_calls"] == [5]


def test_plain_python_hook_cannot_do_this(tto):
    # The companion: a Python decision made at capture time is frozen into the graph.
    x = torch.zeros(2, 4, device="cuda")
    y = torch.empty_like(x)
    token = [0]

    def step():
        token[0] += 1
        y.copy_(x * 2)
        if token[0] == 3:
            y[:, 0] += 1

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()  # token 1 at capture: no edit recorded
    fired = []
    for _ in range(5):
        graph.replay()
        fired.append(bool((y[:, 0] == 1).all()))
    assert fired == [False] * 5


def test_cuda_compile_no_graph_break(tto):
    torch._dynamo.reset()
    table = tto.PatchTable(1)
    table.add_entry(0, "zero", index=(slice(None), 1), calls="prefill")
    table.upload("cuda")

    def f(x):
        table.advance_token()
        h = x + 1
        table.apply_(h, 0)
        return h * 2

    x = torch.ones(2, 3, device="cuda")
    explanation = torch._dynamo.explain(f)(x)
    assert explanation.graph_break_count == 0
    table.reset()
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert got[:, 1].eq(0).all() and got[:, [0, 2]].eq(4).all()
    assert table.fires() == (1, [1])
