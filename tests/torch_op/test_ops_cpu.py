"""apply_patches_ on CPU tensors against the plain-torch reference: ops, dtypes, index boxes,
selectors, fire counts, several entries and sites."""
import pytest
import torch

from reference import apply_reference, box_shape

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPE = (2, 5, 8)
INDEXES = [
    (slice(None), 1),                                   # the seed's values[:, 1]
    (0, slice(-2, None)),                               # negative start, open end
    (slice(None), slice(1, None, 2), slice(None, -1)),  # step, negative stop
    (-1,),                                              # negative integer index
    (slice(None), -1, slice(0, 8, 3)),
    (slice(None, None, 2), slice(-100, 100)),           # slice ends clamp as in Python
    (),                                                 # the whole output
]
OPS = [
    ("zero", {}),
    ("fill", {"value": 2.5}),
    ("add", {"value": 1.5}),
    ("add", {"operand": "vector"}),
    ("scale", {"value": -0.5}),
    ("clamp", {"lo": -0.25, "hi": 0.5}),
    ("replace", {"operand": "box"}),
]
OP_IDS = [f"{o}-{'op' if 'operand' in k else 'p'}" for o, k in OPS]
INDEX_IDS = [str(i) for i in range(len(INDEXES))]


def _operand(kind, shape, index, dtype):
    bs = box_shape(shape, index)
    g = torch.Generator().manual_seed(1)
    if kind == "vector":  # broadcast along every box dim but the last
        return torch.randn(bs[-1:], generator=g).to(dtype)
    return torch.randn(bs, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("index", INDEXES, ids=INDEX_IDS)
@pytest.mark.parametrize("op,kw", OPS, ids=OP_IDS)
def test_op_matches_reference(tto, dtype, index, op, kw):
    kw = dict(kw)
    if "operand" in kw:
        kw["operand"] = _operand(kw["operand"], SHAPE, index, dtype)
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(dtype)
    want = apply_reference(x, index, op, **kw)
    table = tto.PatchTable(1)
    table.add_entry(0, op, index=index, calls="prefill", **kw)
    table.upload("cpu")
    table.advance_token()
    got = table.apply_(x.clone(), 0)
    assert torch.equal(got.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       want.view(torch.int16 if dtype != torch.float32 else torch.int32))
    assert table.fires() == (1, [1])


def test_strided_output_and_operand(tto):
    base = torch.randn(8, 5, 2)
    x = base.permute(2, 1, 0)  # shape [2, 5, 8], not contiguous
    operand = torch.randn(8, 5)[:, 0]  # a strided operand view
    index = (slice(None), slice(1, 4))
    want = apply_reference(x, index, "add", operand=operand)
    table = tto.PatchTable(1)
    table.add_entry(0, "add", index=index, operand=operand)
    table.upload("cpu")
    table.apply_(x, 0)
    assert torch.equal(x, want)
    assert torch.equal(base.permute(2, 1, 0), want)  # edited in place, through the view


# (calls, calls at which it fires) with one site call per token, tokens advanced per call.
SELECTORS = [
    ("prefill", [1]),
    (3, [3]),
    (("call", 2), [2]),
    (("calls", 2, 4), [2, 3, 4]),
    (("calls", 4, None), [4, 5, 6]),
    (("token", 5), [5]),
    (("tokens", 1, 2), [1, 2]),
    ("every", [1, 2, 3, 4, 5, 6]),
]


@pytest.mark.parametrize("calls,fires_at", SELECTORS, ids=[str(s[0]) for s in SELECTORS])
def test_selectors(tto, calls, fires_at):
    table = tto.PatchTable(1)
    table.add_entry(0, "fill", index=(slice(None), 0), calls=calls, value=1.0)
    table.upload("cpu")
    fired = []
    for call in range(1, 7):
        table.advance_token()
        x = torch.zeros(1, 2)
        table.apply_(x, 0)
        if x[0, 0] == 1.0:
            fired.append(call)
        assert x[0, 1] == 0.0
    assert fired == fires_at
    assert table.fires() == (len(fires_at), [len(fires_at)])
    c = table.counters()
    assert c["site_calls"] == [6] and c["token"] == 6


def test_token_selector_counts_tokens_not_calls(tto):
    # Two calls of the site per token (e.g. a shared module): token 2 is calls 3 and 4.
    table = tto.PatchTable(1)
    table.add_entry(0, "add", calls=("token", 2), value=1.0)
    table.upload("cpu")
    seen = []
    for _ in range(3):
        table.advance_token()
        for _ in range(2):
            x = torch.zeros(3)
            table.apply_(x, 0)
            seen.append(float(x[0]))
    assert seen == [0, 0, 1, 1, 0, 0]
    assert table.fires() == (2, [2])


def test_no_token_before_advance(tto):
    table = tto.PatchTable(1)
    table.add_entry(0, "zero", calls=("tokens", 1, None))
    table.upload("cpu")
    x = torch.ones(4)
    table.apply_(x, 0)  # token 0: no token selector matches it
    assert torch.equal(x, torch.ones(4))
    table.set_token(1)
    table.apply_(x, 0)
    assert torch.equal(x, torch.zeros(4))


def test_two_entries_apply_in_order_and_other_sites_untouched(tto):
    x0 = torch.randn(2, 3, 4)
    table = tto.PatchTable(3)
    table.add_entry(1, "scale", index=(slice(None), slice(0, 2)), value=2.0)
    table.add_entry(1, "add", index=(slice(None), 1), value=1.0)
    table.add_entry(2, "zero")
    table.upload("cpu")
    table.advance_token()
    want = apply_reference(x0, (slice(None), slice(0, 2)), "scale", value=2.0)
    want = apply_reference(want, (slice(None), 1), "add", value=1.0)
    x = x0.clone()
    table.apply_(x, 1)
    assert torch.equal(x, want)
    y = x0.clone()
    table.apply_(y, 0)  # a site with no entries
    assert torch.equal(y, x0)
    assert table.fires() == (2, [1, 1, 0])
    assert table.counters()["site_calls"] == [1, 1, 0]


def test_reset_and_reupload(tto):
    table = tto.PatchTable(1)
    table.add_entry(0, "zero", calls="prefill")
    table.upload("cpu")
    for _ in range(3):
        table.apply_(torch.ones(2), 0)
    assert table.fires() == (1, [1])
    table.reset()
    assert table.counters() == {"fires": [0], "skips": [0], "site_calls": [0], "token": 0}
    x = torch.ones(2)
    table.apply_(x, 0)  # call 1 again
    assert torch.equal(x, torch.zeros(2))
    old = table.handle
    table.upload("cpu")
    assert table.handle != old and table.fires() == (0, [0])


def test_zero_size_output(tto):
    table = tto.PatchTable(1)
    table.add_entry(0, "fill", index=(slice(None), 0), value=1.0)
    table.upload("cpu")
    x = torch.empty(0, 3)
    table.apply_(x, 0)
    assert table.fires() == (1, [1])
