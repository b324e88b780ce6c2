"""The patch table ABI is read from the library, not copied: what abi() exports is what
cuda/patch_table.h says, and a library of another ABI version is one clear error at load."""
import os
import re

import pytest
import torch

_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "cuda", "patch_table.h")
_PREFIX = {"DTYPES": "dtype", "OPS": "op", "SELECTORS": "selector", "DIM_FLAGS": "dim",
           "ERRORS": "error"}


def _header_facts():
    """{name: value} as the header spells them: the X-macro lists and the constants."""
    text = open(_HEADER, encoding="utf-8").read()
    facts = {
        "version": int(re.search(r"kPatchTableVersion = (\d+);", text).group(1)),
        "max_dims": int(re.search(r"kMaxPatchDims = (\d+);", text).group(1)),
        "open_end": int(re.search(r"kOpenEnd = (0x[0-9a-f]+)u;", text).group(1), 16),
    }
    for m in re.finditer(r"#define TT_PATCH_(\w+)\(X\)((?:.*\\\n)*.*)", text):
        for name, value, word in re.findall(r"X\((\w+), (\d+)u?, \"(\w+)\"\)", m.group(2)):
            facts[f"{_PREFIX[m.group(1)]}.{word}"] = int(value)
    return facts


def test_abi_is_the_header(tto):
    facts = _header_facts()
    assert len([k for k in facts if k.startswith("op.")]) == 6  # the parse found the lists
    abi = tto.abi()
    assert {k: abi[k] for k in facts if k in abi} == facts
    assert set(facts) <= set(abi)
    assert abi["ints_per_entry"] == 6 + 4 * abi["max_dims"]


def test_editable_dtypes_are_the_headers_list(tto):
    """The dtypes an edit may target come from TT_PATCH_EDITABLE_DTYPES, not a Python copy."""
    text = open(_HEADER, encoding="utf-8").read()
    listed = re.search(r"#define TT_PATCH_EDITABLE_DTYPES\(X\)(.*)", text).group(1)
    enumerators = re.findall(r"X\((\w+)\)", listed)
    words = dict(re.findall(r"X\((\w+), \d+, \"(\w+)\"\)", text))  # kF32 -> "float32"
    expected = [getattr(torch, words[e]) for e in enumerators]
    assert enumerators and list(tto.editable_dtypes()) == expected


def test_other_abi_version_is_one_clear_error(tto, monkeypatch):
    loaded = tto.load_library()
    monkeypatch.setattr(tto, "ABI_VERSION", 999)
    monkeypatch.setitem(tto._state, "loaded", None)
    with pytest.raises(ValueError) as e:
        tto.load_library(loaded)
    message = str(e.value)
    assert message.startswith(f"tokentrace: the patch table library {loaded} has patch table "
                              f"ABI version {_header_facts()['version']}, this tokentrace "
                              f"writes version 999; rebuild the library")
    assert "\n" not in message
