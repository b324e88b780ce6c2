"""Op records (`ops=True` in trace/record, TOKENTRACE_OPS=1 or `tokentrace run --ops`): on and off.

The observer lives in the torch ops library (cuda/torch/op_observer.cc): a RecordFunction
callback, added to torch only while op records are on, that makes each ATen op a call (site
kind "op", named like "aten::addmm") nested in the call open on its thread, with the op's first
output tensor as the call's output. Off, nothing is registered and torch runs its ops without
RecordFunction at all. Reading them back is _read/op_records.py's.

    check(ops)                  ops= as given to trace/record: True or False
    unavailable()               why op records cannot be on here ('' when they can)
    start(backend, host_reads)  turns the observer on (host_reads: report escape ops as host
                                reads, for models on the CPU where CUPTI sees none)
    stop()                      turns it off
    parameters(model)           {str(TensorImpl address): name} of its parameters (meta op_params)
    ring_for_ops(backend, ops)  the larger per-thread ring op records need, while a session starts
"""

import contextlib
import ctypes
import os
from typing import Any

import torch

from .._backend import torch_library
from .._common import op_groups
from .._compiled import kernel_map
from .._errors import TokentraceError, fail

ESCAPE_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero")


def check(ops, where="ops="):
    if not isinstance(ops, bool):
        fail(f"{where} takes True or False (record every ATen op as a call), got {ops!r}")
    return ops


def unavailable():
    """Why op records cannot be on in this process (the torch ops library does not load), or
    '' when they can: tt.trace's default turns them on only then."""
    try:
        torch_library.load_library()
    except TokentraceError as exc:
        return str(exc).removeprefix("tokentrace: ")
    return ""


def parameters(model):
    """The model's parameters by identity as the observer records tensors (the address of
    each one's TensorImpl, Tensor._cdata): {str(address): name}. Empty without a model."""
    if model is None:
        return {}
    try:
        return {str(p._cdata): name for name, p in model.named_parameters()}
    except (AttributeError, RuntimeError, TypeError):  # an odd module: no loops, no failure
        return {}


def start(backend, host_reads):
    try:
        torch_library.load_library()
    except TokentraceError as exc:
        fail(f"ops=True records ATen ops through the torch ops library, which did not load: "
             f"{str(exc).removeprefix('tokentrace: ')}")
    try:
        torch.ops.tokentrace.op_records_start(backend.api_address(), bool(host_reads))
    except RuntimeError as exc:
        fail(" ".join(str(exc).split()).removeprefix("tokentrace: "))
    # Compiled kernels become ops too, mapped to their modules (_compiled/kernel_map.py).
    kernel_map.start()
    # Python calls TorchLens logs as one op (x[i], torch.tensor, x / y, ...): op calls of
    # their own (_common/op_groups.py).
    op_groups.install(backend)


_lib: dict[str, Any] = {}


def stop():
    """Turns the observer off; True if it was on. Through ctypes, not an op: an op would be
    recorded as a call of its own."""
    kernel_map.stop()
    op_groups.remove(records=True)
    path = torch_library.load_library()
    if path not in _lib:
        _lib[path] = ctypes.CDLL(path)
    return bool(_lib[path].tokentrace_op_records_stop())


@contextlib.contextmanager
def ring_for_ops(backend, ops):
    """With ops on and TOKENTRACE_BUFFER_EVENTS unset, the session's per-thread ring is the
    larger one op records need (TOKENTRACE_OPS_BUFFER_EVENTS in include/tokentrace/tokentrace.h;
    `tokentrace run --ops` does the same). The variable is read when the session starts."""
    if not ops or os.environ.get("TOKENTRACE_BUFFER_EVENTS"):
        yield
        return
    os.environ["TOKENTRACE_BUFFER_EVENTS"] = str(backend.ops_buffer_events)
    try:
        yield
    finally:
        os.environ.pop("TOKENTRACE_BUFFER_EVENTS", None)
