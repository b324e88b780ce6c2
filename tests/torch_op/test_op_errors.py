"""Bad input: clear one-line errors starting with "tokentrace:", raised before any element is
touched; entries that cannot fit an output at apply time are skipped and counted."""
import pytest
import torch


def _table(tto, *args, max_sites=2, **kw):
    table = tto.PatchTable(max_sites)
    table.add_entry(*args, **kw)
    return table.upload("cpu")


@pytest.mark.parametrize("args,kw,message", [
    ((7, "zero"), {},
     "tokentrace: the entry is for site 7 but the table has sites 0..1 (patch entry 0)"),
    ((0, "add"), {"operand": torch.ones(3, dtype=torch.int64)},
     "tokentrace: op 'add' cannot take an operand of dtype int64 (supported: float32, float16, "
     "bfloat16) (patch entry 0)"),
    ((0, "add"), {"operand": torch.ones(3, dtype=torch.complex64)},
     "tokentrace: the operand has dtype ComplexFloat"),
    ((0, "replace"), {}, "tokentrace: op 'replace' needs an operand tensor (patch entry 0)"),
    ((0, "zero"), {"index": (slice(0, 2, 0),)},
     "tokentrace: slice step 0 in dimension 0 must be >= 1"),
    ((0, "clamp"), {"lo": 1.0, "hi": 0.0},
     "tokentrace: clamp bounds lo=1.000000 hi=0.000000 need lo <= hi (patch entry 0)"),
    ((0, "zero"), {"calls": ("call", 0)}, "tokentrace: call selector 'call 0' selects nothing"),
    ((0, "zero"), {"calls": ("tokens", 3, 2)},
     "tokentrace: call selector 'tokens 3..2' selects nothing"),
    ((0, "add"), {"operand": torch.ones([1] * 7)},
     "tokentrace: the operand has 7 dimensions; the patch table takes up to 6 (patch entry 0)"),
])
def test_bad_entries_fail_at_create(tto, args, kw, message):
    with pytest.raises(RuntimeError) as e:
        _table(tto, *args, **kw)
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_bad_entry_comes_back_as_data(tto):
    """upload() reports the refused entry's index and reason (the library's code, named by its
    abi()), not only text: entry 1 of 3 here."""
    table = tto.PatchTable(2)
    table.add_entry(0, "zero")
    table.add_entry(1, "clamp", lo=float("nan"), hi=1.0)
    table.add_entry(0, "zero", index=(slice(0, 2, 0),))
    with pytest.raises(tto.PatchEntryError) as e:
        table.upload("cpu")
    assert (e.value.entry, e.value.reason) == (1, "bad_clamp")
    assert e.value.message.startswith("clamp bounds lo=nan")
    args = (table._ints, table._floats, [None] * 3, 2, torch.device("cpu"))
    entry, reason, _ = torch.ops.tokentrace.table_check(*args)
    assert (entry, reason) == (1, tto.abi()["error.bad_clamp"])


@pytest.mark.parametrize("kw,message", [
    ({"op": "zap"}, "tokentrace: unknown op 'zap'"),
    ({"calls": "foo"}, "tokentrace: bad calls='foo'"),
    ({"index": (slice(None),) * 7}, "tokentrace: index"),
    ({"index": (1.5,)}, "tokentrace: index item 1.5 is not an int or a slice"),
])
def test_bad_python_arguments(tto, kw, message):
    args = {"site": 0, "op": "zero", **kw}
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("*", r"\*")):
        tto.PatchTable(1).add_entry(**args)


@pytest.fixture
def replace_table(tto):
    return _table(tto, 0, "replace", index=(slice(None), 1), operand=torch.ones(3))


@pytest.mark.parametrize("like,site,message", [
    (torch.zeros(2, 4, 5), 0, "tokentrace: operand of shape [3] does not broadcast to the index "
     "box: operand dimension 0 has size 3, the box has 5 (box shape [2, 5]) (patch entry 0)"),
    (torch.zeros(2, 1, 3), 0,
     "tokentrace: index 1 is out of range for dimension 1 of size 1 (patch entry 0)"),
    (torch.zeros(2, 4, 3), 5, "tokentrace: site 5 is not in this patch table (sites 0..1)"),
    (torch.zeros(2, 4, 3, dtype=torch.float64), 0,
     "tokentrace: op 'replace' cannot take an output of dtype float64"),
    (torch.zeros(2, 4, 5, device="meta"), 0, "tokentrace: operand of shape [3] does not"),
])
def test_validate(replace_table, like, site, message):
    with pytest.raises(RuntimeError) as e:
        replace_table.validate(site, like)
    assert str(e.value).startswith(message)
    replace_table.validate(0, torch.zeros(2, 4, 3))  # fits


@pytest.mark.parametrize("out,site,message", [
    (torch.zeros(2, 4, 3, dtype=torch.float64), 0,
     "tokentrace: apply_patches_ cannot take an output of dtype float64 (supported: float32, "
     "float16, bfloat16)"),
    (torch.zeros(3, dtype=torch.int32), 0, "tokentrace: apply_patches_ cannot take an output of "
     "dtype int32"),
    (torch.zeros(3, dtype=torch.complex64), 0, "tokentrace: apply_patches_ cannot take an output "
     "of dtype ComplexFloat"),
    (torch.zeros(1, 4, 3).expand(2, 4, 3), 0, "tokentrace: the output has overlapping memory"),
    (torch.zeros([1] * 7), 0, "tokentrace: the output has 7 dimensions; patches support up to 6"),
    (torch.zeros(3), -1, "tokentrace: site -1 is not in this patch table (sites 0..1)"),
    (torch.zeros(3), 2, "tokentrace: site 2 is not in this patch table (sites 0..1)"),
])
def test_apply_refuses(replace_table, out, site, message):
    before = out.clone()
    with pytest.raises(RuntimeError) as e:
        replace_table.apply_(out, site)
    assert str(e.value).startswith(message)
    assert torch.equal(out, before)
    assert replace_table.counters()["site_calls"] == [0, 0]  # a refused call is not a call


def test_entry_that_does_not_fit_is_skipped_and_counted(replace_table):
    x = torch.zeros(2, 1, 3)  # a decode-step shape: position 1 does not exist
    replace_table.apply_(x, 0)
    assert torch.equal(x, torch.zeros(2, 1, 3))
    c = replace_table.counters()
    assert c["fires"] == [0] and c["skips"] == [1] and c["site_calls"] == [1, 0]
    assert replace_table.errors() == [
        "tokentrace: index 1 is out of range for dimension 1 of size 1"]


def test_freed_table(tto):
    table = _table(tto, 0, "zero")
    handle = table.handle
    table.free()
    with pytest.raises(RuntimeError, match="^tokentrace: no patch table with handle"):
        torch.ops.tokentrace.apply_patches_(torch.zeros(3), handle, 0)
    with pytest.raises(RuntimeError, match=r"^tokentrace: PatchTable.upload\(device\) was not"):
        table.apply_(torch.zeros(3), 0)


def test_bad_serialised_form(tto):
    with pytest.raises(RuntimeError, match="^tokentrace: table_create needs 30 ints and 3 floats"):
        torch.ops.tokentrace.table_create([1, 2], [1.0], [None], 1, torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_upload_without_cuda(tto):
    table = tto.PatchTable(1)
    table.add_entry(0, "zero")
    with pytest.raises(RuntimeError, match="^tokentrace: no CUDA device is available"):
        table.upload("cuda")


@pytest.mark.gpu
def test_device_mismatch(tto):
    table = _table(tto, 0, "add", operand=torch.ones(3))
    with pytest.raises(RuntimeError, match="^tokentrace: patch table .* lives on cpu but the "
                                           "output is on cuda:0"):
        table.apply_(torch.zeros(3, device="cuda"), 0)
    with pytest.raises(RuntimeError, match="^tokentrace: the operand is on cpu but the table is "
                                           "for cuda:0"):
        torch.ops.tokentrace.table_create(table._ints, table._floats, [torch.ones(3)], 2,
                                          torch.device("cuda", 0))
