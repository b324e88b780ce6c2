"""Recording the inputs of a call: every tensor (and other value) a forward was given, by path.

The walk over a call's arguments and the kinds of values are _common/values.py's (shared with
the input edits); this file makes each leaf a row and writes the rows to the trace file.
Values that are not tensors are entries of kind "value" with their type, and the value itself
for small scalars (bool, int, float, None, short strings); what the walk does not look into is
one entry of kind "object" with its type name (and its length, for a long sequence or dict).

A row is (path, kind, type, shape, dtype, device, value); shape is a list of ints.
"""

import ctypes
import dataclasses
from typing import Any

import torch

from .._backend import torch_library
from .._common import (
    KINDS,
    MAX_DEPTH,
    MAX_ITEMS,
    SCALARS,
    add_rows,
    children_of,
    dtype_name,
    kind_of,
    loader,
    parameter_names,
    walk_call,
)

_MAX_STR = 64      # longer strings are recorded by type and length only
_META: dict[str, int] = {}  # "address": tokentrace_tensor_meta's, once looked up


def tensor_meta():
    """The address of tokentrace_tensor_meta (cuda/torch/tensor_meta.cc: a tensor's sizes,
    dtype and device read in C++, ~100x cheaper than tensor.shape/.dtype/.device) in the torch
    ops library, or 0 where that library is not built or does not load into this torch (the
    native walk then reads the Python attributes)."""
    if "address" not in _META:
        # the library edits load, when they did already (one path per process: two copies
        # would register torch.ops.tokentrace twice)
        path = torch_library.loaded_path() or torch_library.find_library()[0]
        try:  # the same handle torch.ops.load_library gets later, if edits need the library
            _META["address"] = ctypes.cast(ctypes.CDLL(path).tokentrace_tensor_meta,
                                           ctypes.c_void_p).value if path else 0
        except (OSError, AttributeError):  # another torch's build, or one older than this
            _META["address"] = 0
    return _META["address"]


def _field_names(cls):
    """A dataclass's field names, in order (the native walk asks once per type)."""
    return tuple(field.name for field in dataclasses.fields(cls))


# dtypes and devices -> their text (few; str() of a device costs more than a walk)
_TEXT: dict[Any, str] = {}


def _text(obj):
    text = _TEXT.get(obj)
    if text is None:
        text = _TEXT[obj] = dtype_name(obj) if isinstance(obj, torch.dtype) else str(obj)
    return text


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # rows as describe makes them, inline


def describe(path, value):
    """The row of one leaf: (path, kind, type, shape, dtype, device, value). Rows hold only
    ints and strings: the garbage collector stops tracking them, so a long run's rows do not
    make every collection slower."""
    if isinstance(value, torch.Tensor):
        return (path, "tensor", type(value).__name__, tuple(value.shape), _text(value.dtype),
                _text(value.device), None)
    type_name = type(value).__name__
    if isinstance(value, SCALARS):
        return (path, "value", type_name, None, None, None, repr(value))
    if isinstance(value, str):
        shown = repr(value) if len(value) <= _MAX_STR else f"<{len(value)} characters>"
        return (path, "value", type_name, None, None, None, shown)
    size = f"<{len(value)} items>" if isinstance(value, (tuple, list, dict)) else None
    return (path, "object", f"{type(value).__module__}.{type(value).__qualname__}",
            None, None, None, size)


class InputRecorder:
    """Records the inputs of the calls of chosen sites, from inside each call (before forward
    runs: a cache's entries are seen as the call received them, not after it appended).

    The tensors of sites whose inputs are saved stream to the TensorSink as outputs do. Recording
    into a trace (trace_path given), each call's rows go to the trace's writer as the call is
    recorded (the native walk hands them itself), which commits them with the calls: a killed
    or signalled job keeps the inputs of every call its file keeps. Rows of saved tensors (and
    those after them) wait until their shard is written, since they name it. Without a trace
    (tests of the walk), rows stay here until read.
    """

    flush_rows = 20000  # rows the native walk keeps when there is no writer to hand them to

    def __init__(self, current, sink=None, trace_path=None, native=True, tensor_meta=True):
        self._current = current
        self._sink = sink
        self._trace_path = trace_path  # callable: the trace file, once the shim settled it
        self._rows = []  # (call_id, path, kind, type, shape, dtype, device, value, key)
        self._native = native  # False: the Python walk only (the reference, for tests)
        # False: the native walk reads each tensor's Python attributes, as it does where the
        # torch ops library is not built (for tests)
        self._tensor_meta = tensor_meta
        self._buffer = None  # the native walk's pending rows (an InputBuffer), made on use
        self.failed = 0  # calls whose inputs could not be recorded (counted as a loss)
        self.flushed = 0  # rows already in the trace file

    @property
    def rows(self):
        """The rows not written yet, in call order (the native walk's pending ones drained)."""
        if self._buffer is not None and self._buffer is not False and len(self._buffer):
            self._rows.extend(self._buffer.drain())
        return self._rows

    def hook(self, forward, save):
        """The callable(*args, **kwargs) that records one call's inputs: the native forward
        wrapper calls it with the arguments as they came, inside the call. Sites whose inputs
        are not saved (the root's, by default) get the native walk (inputs_walk.cc), which
        makes the same rows as the Python walk (walk_call, then describe), a few µs per call
        instead of ~100 for a 32-layer cache; saved sites, and jobs without the extension, get
        the Python one."""
        names = parameter_names(forward)
        buffer = None if save else self._native_buffer()
        if buffer is not None:
            return buffer.walker(names)
        current = self._current
        sink = self._sink if save else None

        def on_input(*args, **kwargs):
            call_id = current()[0]
            if not call_id:
                return
            rows = self.rows  # after the native walk's pending rows: call order is kept
            for path, value in walk_call(names, args, kwargs):
                if type(value) in _PLAIN_TENSORS:  # most rows: one tuple, no call of describe
                    dtype, device = value.dtype, value.device
                    rows.append((call_id, path, "tensor", type(value).__name__,
                                 tuple(value.shape), _TEXT.get(dtype) or _text(dtype),
                                 _TEXT.get(device) or _text(device), None,
                                 None if sink is None else self._save(call_id, path, value)))
                else:
                    row = describe(path, value)
                    rows.append((call_id,) + row + (
                        None if sink is None or row[1] != "tensor" else
                        self._save(call_id, path, value),))
            if self._trace_path is not None:
                self.flush()
        return on_input

    def _native_buffer(self):
        """The InputBuffer of the native walk, or None without the extension."""
        if self._buffer is None:
            native = loader.load() if self._native else None
            if native is None or not hasattr(native, "InputBuffer"):
                self._buffer = False
                return None
            # the shim's own current call, read in C, when that is what current() says
            owner = getattr(self._current, "__self__", None)
            in_c = getattr(owner, "_n", None) is native and getattr(
                self._current, "__name__", None) == "current"
            self._buffer = native.InputBuffer(
                None if in_c else self._current,
                KINDS, (kind_of, describe, _text, _field_names, children_of), _PLAIN_TENSORS,
                MAX_DEPTH,
                MAX_ITEMS, None, 0 if self._trace_path else self.flush_rows,
                tensor_meta() if self._tensor_meta else 0)
        return self._buffer if self._buffer is not False else None

    def _save(self, call_id, path, tensor):
        """The key of a saved input tensor, or None where it could not be saved."""
        key = f"{call_id}:{path}"
        try:
            self._sink.save(call_id, tensor, key=key)
        except Exception:  # e.g. a meta tensor: its metadata is still kept
            self.failed += 1
            return None
        return key

    def flush(self):
        """Hands the rows that are ready to the trace's writer, up to the first of a saved
        tensor still in memory (the file keeps the rows in call and argument order)."""
        files = self._sink.files if self._sink is not None else {}
        ready = next((i for i, r in enumerate(self.rows)
                      if r[-1] is not None and r[-1] not in files), len(self.rows))
        if not ready:
            return
        add_rows("call_inputs", self.table_rows(files, self.rows[:ready]))
        del self.rows[:ready]
        self.flushed += ready

    def safe(self, on_input):
        """on_input for a forward pre-hook (with_kwargs=True): never raises into the job."""
        def pre_hook(module, args, kwargs):
            try:
                on_input(*args, **kwargs)
            except Exception:
                self.failed += 1
        return pre_hook

    def table_rows(self, files, rows=None):
        """call_inputs rows of `rows` (default: those not written yet); `files` maps a saved
        tensor's key to its shard (TensorSink.files): a tensor whose shard could not be
        written keeps its metadata and loses its key."""
        import json
        out = []
        for call_id, path, kind, type_name, shape, dtype, device, value, key in (
                self.rows if rows is None else rows):
            file = files.get(key) if key is not None else None
            out.append((call_id, path, kind, type_name,
                        json.dumps(list(shape)) if shape is not None else None, dtype, device,
                        value, file, key if file is not None else None))
        return out
