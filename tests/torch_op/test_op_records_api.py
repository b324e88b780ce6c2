"""op_records_start takes the address of libtokentrace.so's entry table (tokentrace_get_api in
include/tokentrace/tokentrace.h) and checks it before it calls anything: a table shorter than
the entries the observer calls, of another API version, or with a null entry is one clear
error that names what it got and what it wants."""
import ctypes
import os
import re

import pytest
import torch

_HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "include", "tokentrace", "tokentrace.h")
_ENTRIES = ("site", "push", "pop", "text", "output_current", "escape", "links", "pop_linked")


class _Table(ctypes.Structure):
    """tokentrace_api as the header lays it out (two uint32_t, then one pointer an entry)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("api_version", ctypes.c_uint32)] + [
        (name, ctypes.c_void_p) for name in _ENTRIES]


def _api_version():
    with open(_HEADER, encoding="utf-8") as f:
        return int(re.search(r"#define TOKENTRACE_API_VERSION (\d+)", f.read()).group(1))


def _start(table):
    torch.ops.tokentrace.op_records_start(ctypes.addressof(table), False)


def _refused(table):
    with pytest.raises(RuntimeError) as e:
        _start(table)
    return str(e.value)


def _table(**fields):
    # Entries are dummies: a refused table is never called.
    table = _Table(ctypes.sizeof(_Table), _api_version(), *([1] * len(_ENTRIES)))
    for name, value in fields.items():
        setattr(table, name, value)
    return table


def _mismatch(got_size, got_version):
    return (f"tokentrace: the native extension and the torch ops library disagree on the C API "
            f"(got struct_size {got_size}, api_version {got_version}; want struct_size >= "
            f"{ctypes.sizeof(_Table)}, api_version {_api_version()}); rebuild both with "
            f"scripts/setup.sh")


def test_a_shorter_table_is_refused(tto):
    short = ctypes.sizeof(_Table) - ctypes.sizeof(ctypes.c_void_p)  # no `pop_linked`
    message = _refused(_table(struct_size=short))
    assert message.startswith(_mismatch(short, _api_version())), message
    assert "\n" not in message


def test_another_api_version_is_refused(tto):
    message = _refused(_table(api_version=_api_version() + 1))
    assert message.startswith(_mismatch(ctypes.sizeof(_Table), _api_version() + 1)), message


def test_a_null_entry_and_address_zero_are_refused(tto):
    assert _refused(_table(escape=None)).startswith(
        "tokentrace: the C API table has a null entry; rebuild with scripts/setup.sh")
    with pytest.raises(RuntimeError, match="got no C API table"):
        torch.ops.tokentrace.op_records_start(0, False)


def test_the_libraries_own_table_is_taken(tto):
    """The extension's address (tokentrace._native.api_address()) passes the checks; the
    observer is then on until tokentrace_op_records_stop. A longer table (entries added at the
    end by a newer library) is taken too."""
    from tokentrace._common import loader
    native = loader.load()
    if native is None:
        pytest.skip(f"the native extension is not built: {loader.unavailable_reason()}")
    stop = ctypes.CDLL(tto.load_library()).tokentrace_op_records_stop
    real = _Table.from_address(native.api_address())
    assert real.struct_size >= ctypes.sizeof(_Table) and real.api_version == native.API_VERSION
    torch.ops.tokentrace.op_records_start(native.api_address(), False)
    assert stop() == 1

    class _Longer(ctypes.Structure):
        _fields_ = [("head", _Table), ("later", ctypes.c_void_p)]
    longer = _Longer(real, None)
    longer.head.struct_size = ctypes.sizeof(_Longer)
    torch.ops.tokentrace.op_records_start(ctypes.addressof(longer), False)
    assert stop() == 1
