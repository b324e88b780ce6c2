"""Row masks (the "rows" selector) through torch.ops on the CPU: set_row_mask decides which
rows of dim 0 a ("rows", slot) entry edits at the next applies, fires counts only calls with a
marked row, and bad rows are one-line errors. gpu-marked: the same on CUDA, and a CUDA graph
replayed with new masks between replays."""
import pytest
import torch

from reference import apply_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).cpu()


def _masked_reference(x, index, op, mask, **kw):
    """apply_reference on the rows the mask marks (rows past len(mask) unmarked); x elsewhere."""
    marked = torch.zeros(x.shape[0], dtype=torch.bool)
    n = min(len(mask), x.shape[0])
    marked[:n] = torch.as_tensor(list(mask[:n])) != 0
    edited = apply_reference(x, index, op, **kw)
    return torch.where(marked.view(-1, *[1] * (x.dim() - 1)), edited, x)


def _table(tto, *entries, max_masks=2, max_rows=8, device="cpu"):
    table = tto.PatchTable(1, max_masks=max_masks, max_rows=max_rows)
    for args, kw in entries:
        table.add_entry(*args, **kw)
    return table.upload(device)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
def test_only_marked_rows_change(tto, dtype):
    index = (slice(None), slice(1, None, 2))  # a box that selects columns, with the mask
    table = _table(tto, ((0, "scale"), {"index": index, "calls": ("rows", 1), "value": -2.0}))
    mask = [1, 0, 0, 1, 1]  # rows 0, 3, 4; row 5 is past the mask's length
    table.set_row_mask(1, mask)
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(0)).to(dtype)
    want = _masked_reference(x, index, "scale", mask, value=-2.0)
    got = table.apply_(x.clone(), 0)
    assert torch.equal(_bits(got), _bits(want))
    assert not torch.equal(_bits(got), _bits(x))
    assert table.fires() == (1, [1])


def test_fires_count_only_calls_with_marked_rows(tto):
    table = _table(tto, ((0, "add"), {"calls": ("rows", 0), "value": 1.0}),
                   ((0, "fill"), {"index": (slice(None), 0), "calls": "every", "value": 9.0}))
    steps = [[0, 1], [0, 0, 0], [], [False, False, False, True],
             torch.tensor([1], dtype=torch.uint8)]
    changed = []
    for mask in steps:
        table.set_row_mask(0, mask)
        x = torch.zeros(4, 3)
        table.apply_(x, 0)
        changed.append([r for r in range(4) if x[r, 1:].ne(0).any()])
    assert changed == [[1], [], [], [3], [0]]
    c = table.counters()
    assert c["fires"] == [3, 5] and c["skips"] == [0, 0] and c["site_calls"] == [5]


def test_one_dimensional_output(tto):
    table = _table(tto, ((0, "fill"), {"index": (slice(1, None),), "calls": ("rows", 0),
                                       "value": 2.0}))
    table.set_row_mask(0, torch.tensor([True, True, False, True]))
    x = torch.zeros(6)
    table.apply_(x, 0)
    assert x.tolist() == [0, 2, 0, 2, 0, 0]


def test_reset_clears_masks_and_upload_keeps_the_sizes(tto):
    table = _table(tto, ((0, "zero"), {"calls": ("rows", 1)}), max_masks=2, max_rows=3)
    table.set_row_mask(1, [1, 1, 1])
    table.reset()
    x = torch.ones(3, 2)
    table.apply_(x, 0)  # the mask did not survive the reset
    assert torch.equal(x, torch.ones(3, 2)) and table.fires() == (0, [0])
    table.set_row_mask(1, [1])
    table.upload("cpu")  # a new table: same sizes, empty masks
    table.apply_(x, 0)
    assert torch.equal(x, torch.ones(3, 2))
    table.set_row_mask(1, [0, 0, 1])
    table.apply_(x, 0)
    assert x[:, 0].tolist() == [1, 1, 0]
    with pytest.raises(RuntimeError, match="^tokentrace: a row mask of 4 rows is longer than "
                                           "this patch table's max_rows 3$"):
        table.set_row_mask(1, [0, 0, 0, 1])


@pytest.mark.parametrize("rows,given", [
    (torch.ones(3), "a 1-d float32 tensor on cpu"),
    (torch.ones(3, dtype=torch.int64), "a 1-d int64 tensor on cpu"),
    (torch.ones(2, 2, dtype=torch.uint8), "a 2-d uint8 tensor on cpu"),
    (torch.tensor(True), "a 0-d bool tensor on cpu"),
])
def test_bad_rows_tensor_is_one_line_error(tto, rows, given):
    table = _table(tto)
    message = ("tokentrace: set_row_mask takes the rows as a 1-D CPU tensor of dtype bool or "
               f"uint8 (nonzero = marked); got {given}")
    for call in (lambda: torch.ops.tokentrace.set_row_mask(table.handle, 0, rows),
                 lambda: table.set_row_mask(0, rows)):
        with pytest.raises(RuntimeError) as e:
            call()
        assert str(e.value) == message


def test_bad_rows_sequence_and_slots(tto):
    table = _table(tto)
    with pytest.raises(ValueError, match="^tokentrace: set_row_mask rows must be bools or ints "
                                         r"\(nonzero = marked\), got torch.float32 values$"):
        table.set_row_mask(0, [0.0, 1.0])
    with pytest.raises(RuntimeError, match=r"^tokentrace: row mask slot 2 is not in this patch "
                                           r"table \(slots 0..1: max_masks 2\)$"):
        table.set_row_mask(2, [1])
    with pytest.raises(RuntimeError, match="^tokentrace: row mask slot 0 is not in this patch "
                                           "table .it has no row mask slots: max_masks is 0.$"):
        _table(tto, max_masks=0, max_rows=0).set_row_mask(0, [])


def test_rows_slot_beyond_max_masks_comes_back_as_data(tto):
    table = tto.PatchTable(1, max_masks=2, max_rows=4)
    table.add_entry(0, "zero", calls=("rows", 1))
    table.add_entry(0, "zero", calls=("rows", 2))
    with pytest.raises(tto.PatchEntryError) as e:
        table.upload("cpu")
    assert (e.value.entry, e.value.reason) == (1, "bad_mask_slot")
    assert e.value.message == ("rows selector slot 2 is not below the table's max_masks 2; "
                               "create the table with max_masks >= 3")
    args = (table._ints, table._floats, [None, None], 1, torch.device("cpu"), 2, 4)
    entry, reason, _ = torch.ops.tokentrace.table_check(*args)
    assert (entry, reason) == (1, tto.abi()["error.bad_mask_slot"])
    with pytest.raises(ValueError, match=r"^tokentrace: bad calls=\('rows', -1\)"):
        table.add_entry(0, "zero", calls=("rows", -1))


def test_scalar_output_is_skipped_with_its_error(tto):
    table = _table(tto, ((0, "fill"), {"calls": ("rows", 0), "value": 1.0}))
    table.set_row_mask(0, [1])
    y = torch.tensor(3.0)
    table.apply_(y, 0)
    assert y.item() == 3.0
    assert table.counters()["skips"] == [1]
    assert table.errors() == [
        "tokentrace: call selector 'rows 0' edits rows (dimension 0) but the output is 0-d; a "
        "rows selector needs an output of 1 or more dimensions"]
    with pytest.raises(RuntimeError, match="the output is 0-d"):
        table.validate(0, torch.tensor(1.0))


def _compiled_step(table):
    def step(x, rows):
        table.set_row_mask(0, rows)
        h = x * 2
        table.apply_(h, 0)
        return h + 1
    return step


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compile_traces_set_row_mask_without_a_graph_break(tto, backend):
    torch._dynamo.reset()
    table = _table(tto, ((0, "fill"), {"calls": ("rows", 0), "value": 0.0}))
    step = _compiled_step(table)
    x = torch.ones(3, 2)
    explanation = torch._dynamo.explain(step)(x, torch.tensor([1, 0, 1], dtype=torch.uint8))
    assert explanation.graph_break_count == 0
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes]
    assert any("set_row_mask" in o for o in ops)
    table.reset()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    for rows in ([1, 0, 1], [0, 1, 0], [0, 0, 0]):  # new masks each call, one compiled graph
        got = compiled(x, torch.tensor(rows, dtype=torch.uint8))
        assert got[:, 0].tolist() == [1.0 if r else 3.0 for r in rows]
    assert table.fires() == (2, [2])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
def test_cuda_matches_cpu(tto, dtype):
    entries = [((0, "scale"), {"index": (slice(None), slice(2, 9)), "calls": ("rows", 1),
                               "value": 3.0}),
               ((0, "add"), {"calls": ("rows", 0), "value": 1.0})]
    x = torch.randn(16, 12, generator=torch.Generator().manual_seed(1)).to(dtype)
    outs = {}
    for device in ("cpu", "cuda"):
        table = _table(tto, *entries, max_rows=16, device=device)
        table.set_row_mask(0, [1, 0] * 6)
        table.set_row_mask(1, torch.arange(16) % 3 == 0)
        outs[device] = table.apply_(x.to(device).clone(), 0)
        assert table.fires() == (2, [1, 1])
    assert torch.equal(_bits(outs["cuda"]), _bits(outs["cpu"]))


@pytest.mark.gpu
def test_cuda_graph_replays_with_new_masks(tto):
    table = _table(tto, ((0, "fill"), {"calls": ("rows", 0), "value": 7.0}), device="cuda")
    x = torch.zeros(4, 8, device="cuda")
    y = torch.empty_like(x)

    def step():
        y.copy_(x)
        table.apply_(y, 0)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
        with pytest.raises(RuntimeError, match="^tokentrace: set_row_mask cannot run while"):
            table.set_row_mask(0, [1])
    table.reset()
    for rows in ([1, 0, 0, 1], [], [0, 1]):
        table.set_row_mask(0, rows)
        graph.replay()
        assert y[:, 0].tolist() == [7.0 if i < len(rows) and rows[i] else 0.0 for i in range(4)]
    assert table.fires() == (2, [2])
