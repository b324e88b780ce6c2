"""The inputs of a call: every tensor (and every other value) a forward was given, by path.

A path reads like Python access from the forward's own parameter names: "input_ids",
"past_key_values.layers[0].keys", "attention_mask", "[2]" for a positional argument past the
named ones. Containers are looked into: tuples and lists ("[i]"), dicts and ModelOutput
(".key"), dataclasses (".field"), and transformers' caches (DynamicCache, StaticCache,
EncoderDecoderCache and the others: whatever of their attributes hold tensors, layers or
other caches, so a DynamicCache shows "layers[i].keys" and "layers[i].values" per layer).
Anything else is one entry of kind "object" with its type name: never dropped silently (so is
a sequence or dict of more than 256 items, with its length).
Values that are not tensors are entries of kind "value" with their type, and the value itself
for small scalars (bool, int, float, None, short strings).

An entry is a row (path, kind, type, shape, dtype, device, value); shape is a list of ints.
"""

import ctypes
import dataclasses
import inspect
import weakref

import torch

from ._outputs import dtype_name

_MAX_DEPTH = 8     # deeper than this, a container is one "object" entry
_MAX_STR = 64      # longer strings are recorded by type and length only
_MAX_ITEMS = 256   # a longer sequence or dict is one "object" entry (a call's rows stay few)
_SCALARS = (bool, int, float, type(None))
_FLUSH_ROWS = 20000  # rows kept in memory before they go to the trace file


class InputEntry:
    """What a call was given at one path: a tensor's shape, dtype and device, or a value."""

    saved = False
    __slots__ = ("path", "kind", "type", "shape", "dtype", "device", "value")

    def __init__(self, path, kind, type_name, shape=None, dtype=None, device=None, value=None):
        self.path, self.kind, self.type = path, kind, type_name
        self.shape = torch.Size(shape) if shape is not None else None
        self.dtype, self.device, self.value = dtype, device, value

    def __repr__(self):
        if self.kind == "tensor":
            return (f"InputEntry({self.path!r}: shape={list(self.shape)}, dtype={self.dtype}, "
                    f"device={self.device})")
        if self.kind == "value" and self.value is not None:
            return f"InputEntry({self.path!r}: {self.type} {self.value})"
        return f"InputEntry({self.path!r}: {self.kind} {self.type})"


def parameter_names(forward):
    """Names of forward's positional parameters, in order, up to a *args (which has none)."""
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return ()
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return tuple(names)


def walk_call(names, args, kwargs):
    """[(path, value)] of the leaves of one call's arguments: tensors, scalars and objects."""
    out = []
    for i, arg in enumerate(args):
        _walk(arg, names[i] if i < len(names) else f"[{i}]", 0, out)
    for key, arg in kwargs.items():
        _walk(arg, key, 0, out)
    return out


# Kinds start at 1, so `_KINDS.get(cls) or _kind_of(cls)` is the whole lookup on the hot path.
_TENSOR, _LEAF, _SEQ, _DICT, _CACHE, _DATACLASS, _OBJECT = range(1, 8)
_KINDS = {}  # type -> how to walk it (types are few; the walk runs at every recorded call)


def _kind_of(cls):
    kind = _KINDS.get(cls)
    if kind is None:
        if issubclass(cls, torch.Tensor):
            kind = _TENSOR
        elif issubclass(cls, (str,) + _SCALARS):
            kind = _LEAF
        elif issubclass(cls, (tuple, list)):
            kind = _SEQ
        elif issubclass(cls, dict):  # ModelOutput is an OrderedDict
            kind = _DICT
        elif any(c.__module__ == "transformers.cache_utils" and c.__name__ in (
                "Cache", "CacheLayerMixin") for c in cls.__mro__):
            # transformers' caches and their per-layer objects, recognised without importing
            # transformers (a job that never imported it has none)
            kind = _CACHE
        elif dataclasses.is_dataclass(cls):
            kind = _DATACLASS
        else:
            kind = _OBJECT
        _KINDS[cls] = kind
    return kind


def _holds_state(value):
    """Whether a cache attribute is worth a path: tensors, layers, caches, lists of those."""
    kind = _KINDS.get(type(value)) or _kind_of(type(value))
    if kind == _SEQ:
        return any((_KINDS.get(type(x)) or _kind_of(type(x))) in (_CACHE, _TENSOR)
                   for x in value)
    return kind == _CACHE or kind == _TENSOR


def _join(path, key):
    return f"{path}.{key}" if path else str(key)


_PATHS = {}  # (path, str or int key) -> the child's path, made once and shared by every row
_MAX_PATHS = 1 << 16  # a job that keeps making new keys gets a fresh memo, not a growing one


def _child(path, key):
    """The path of key (an attribute or str key: ".key"; an index or int key: "[i]") inside
    path. Memoised: a decoding step's 65 cache paths are the same strings at every token, so
    they are neither formatted again nor held once per row."""
    text = _PATHS.get((path, key))
    if text is None:
        if len(_PATHS) >= _MAX_PATHS:
            _PATHS.clear()
        text = _PATHS[(path, key)] = _join(path, key) if type(key) is str else f"{path}[{key!r}]"
    return text


def _walk(value, path, depth, out):
    kind = _KINDS.get(type(value)) or _kind_of(type(value))
    if kind <= _LEAF or kind == _OBJECT or depth >= _MAX_DEPTH or (
            kind in (_SEQ, _DICT) and len(value) > _MAX_ITEMS):
        out.append((path, value))
    elif kind == _SEQ:
        for i, item in enumerate(value):
            _walk(item, _PATHS.get((path, i)) or _child(path, i), depth + 1, out)
    elif kind == _DICT:
        for key, item in value.items():
            plain = type(key) is str or type(key) is int  # True is 1 to a dict: no memo
            _walk(item, (_PATHS.get((path, key)) or _child(path, key)) if plain else
                  f"{path}[{key!r}]", depth + 1, out)
    elif kind == _CACHE:  # per layer: keys, values and a few flags; the tensors go straight in
        for key, item in vars(value).items():
            item_kind = _KINDS.get(type(item)) or _kind_of(type(item))
            if item_kind == _TENSOR:
                out.append((_PATHS.get((path, key)) or _child(path, key), item))
            elif item_kind == _CACHE or (item_kind == _SEQ and _holds_state(item)):
                _walk(item, _PATHS.get((path, key)) or _child(path, key), depth + 1, out)
    else:  # a dataclass
        for field in dataclasses.fields(value):
            _walk(getattr(value, field.name, None), _child(path, field.name), depth + 1, out)


_META = {}  # "address": tokentrace_tensor_meta's, once looked up


def _tensor_meta():
    """The address of tokentrace_tensor_meta (cuda/torch/tensor_meta.cc: a tensor's sizes,
    dtype and device read in C++, ~100x cheaper than tensor.shape/.dtype/.device) in the torch
    ops library, or 0 where that library is not built or does not load into this torch (the
    native walk then reads the Python attributes)."""
    if "address" not in _META:
        from . import _torch_ops
        # the library edits load, when they did already (one path per process: two copies
        # would register torch.ops.tokentrace twice)
        path = _torch_ops._state["loaded"] or _torch_ops.find_library()[0]
        try:  # the same handle torch.ops.load_library gets later, if edits need the library
            _META["address"] = ctypes.cast(ctypes.CDLL(path).tokentrace_tensor_meta,
                                           ctypes.c_void_p).value if path else 0
        except (OSError, AttributeError):  # another torch's build, or one older than this
            _META["address"] = 0
    return _META["address"]


def _field_names(cls):
    """A dataclass's field names, in order (the native walk asks once per type)."""
    return tuple(field.name for field in dataclasses.fields(cls))


_TEXT = {}  # dtypes and devices -> their text (few; str() of a device costs more than a walk)


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
    if isinstance(value, _SCALARS):
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

    The tensors of sites whose inputs are saved stream to the TensorSink as outputs do. The
    rows (metadata) go into the trace file whenever _FLUSH_ROWS are pending, so memory stays
    flat over a long run (a decoding step of a 32-layer model gives 65 rows); rows of saved
    tensors (and those after them) wait until their shard is written, since they name it.
    """

    def __init__(self, current, sink=None, trace_path=None, native=True):
        self._current = current
        self._sink = sink
        self._trace_path = trace_path  # callable: the trace file, once the shim settled it
        self._rows = []  # (call_id, path, kind, type, shape, dtype, device, value, key)
        self._native = native  # False: the Python walk only (the reference, for tests)
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
        makes the same rows as this module's walk, a few µs per call instead of ~100 for a
        32-layer cache; saved sites, and jobs without the extension, get the Python one."""
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
            if len(rows) >= _FLUSH_ROWS and self._trace_path is not None:
                self.flush()
        return on_input

    def _native_buffer(self):
        """The InputBuffer of the native walk, or None without the extension."""
        if self._buffer is None:
            from . import _loader
            native = _loader.load() if self._native else None
            if native is None or not hasattr(native, "InputBuffer"):
                self._buffer = False
                return None
            # the shim's own current call, read in C, when that is what current() says
            owner = getattr(self._current, "__self__", None)
            in_c = getattr(owner, "_n", None) is native and getattr(
                self._current, "__name__", None) == "current"
            self._buffer = native.InputBuffer(
                None if in_c else self._current,
                (_TENSOR, _LEAF, _SEQ, _DICT, _CACHE, _DATACLASS, _OBJECT),
                (_kind_of, describe, _text, _field_names), _PLAIN_TENSORS, _MAX_DEPTH,
                _MAX_ITEMS, weakref.WeakMethod(self.flush) if self._trace_path else None,
                _FLUSH_ROWS, _tensor_meta())
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
        """Writes the rows that are ready, up to the first of a saved tensor still in memory
        (the file keeps the rows in call and argument order)."""
        from ._store import write_python_rows
        files = self._sink.files if self._sink is not None else {}
        ready = next((i for i, r in enumerate(self.rows)
                      if r[-1] is not None and r[-1] not in files), len(self.rows))
        if not ready:
            return
        write_python_rows(self._trace_path(), inputs=self.table_rows(files, self.rows[:ready]))
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
