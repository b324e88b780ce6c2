"""Python calls as ops: the torch entry points TorchLens logs as one op, under their own name,
where op records and an op mode see other ATen ops.

TorchLens logs each call of a torch function or Tensor method by its name; op records see
ATen ops, and an op mode (op_mode.py, a TorchFunctionMode) sees the function torch dispatches
to. The three agree where a call runs one ATen op of its name, and not for these:
- x[index] (__getitem__) runs an op per part of the index (aten::select, aten::slice, ...);
- x[index] = v (__setitem__) as many, and returns None: its output is x, as TorchLens's;
- torch.tensor, torch.as_tensor, x.new_tensor make a tensor from data in three or four ops;
- x.contiguous() of a contiguous tensor runs none;
- x.float() and the other dtype methods run aten::to;
- operators named by their method: x / y (truediv; aten::div, and a mode sees Tensor.div, as
  for torch.div), x += y (iadd; aten::add_, as x.add_(y)), -=, *=, /= (idiv), x % y (mod;
  aten::remainder), &, |, ^, ~ (and, or, xor, invert; aten::bitwise_*).
ENTRIES lists them with TorchLens's name of each. While installed, each is a wrapper that
1. with op records on (install(backend)), makes the call a call of its own op site
   ("python::__getitem__", type getitem), holding the ATen ops it runs, with its output
   recorded (_read/op_sites.py labels it as one op; an output that is an nn.Parameter,
   p.float() of a float parameter, is not recorded: TorchLens logs no op there);
2. while an op mode is on (install(None) from OpMode.install), marks the call on its thread,
   so the mode, which the call reaches through torch's dispatch under another name, takes
   the entry's name (claim()): op edits number it, and savers decide, as the trace labels it.
Nothing is patched while neither is on: no cost. remove() undoes one install; the originals
are back after the last. Inside code TorchDynamo compiles a wrapper only calls the original
(is_compiling is true there), and TorchScript finds torch.tensor's builtin for its wrapper.

Under a TorchFunctionMode a Tensor method such as __getitem__ reaches the mode through the
class's attribute, which is the wrapper: the call is then one op call holding another (the
mode's call), and whatever the mode records after the function (an op saver's copy,
OP_SAVE_SITE) lands inside the outer one; the reader takes both forms.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, NamedTuple

import torch

_PREFIX = "python::"
_DTYPES = ("float", "double", "half", "bfloat16", "int", "long", "short", "bool", "byte", "char")
# (owner, attribute) -> TorchLens's name of the call (its type is the name lower-cased, without
# underscores: __getitem__ -> getitem, __itruediv__'s __idiv__ -> idiv)
ENTRIES: dict[tuple[str, str], str] = {
    **{("Tensor", n): n for n in ("__getitem__", "__setitem__", "contiguous", "new_tensor")},
    **{("Tensor", n): n for n in _DTYPES},
    **{("Tensor", n): n for n in ("__truediv__", "__iadd__", "__isub__", "__imul__", "__mod__",
                                  "__and__", "__or__", "__xor__", "__invert__")},
    ("Tensor", "__itruediv__"): "__idiv__",
    ("torch", "tensor"): "tensor", ("torch", "as_tensor"): "as_tensor",
}

NAMES = frozenset(ENTRIES.values())
_OWNERS = {"Tensor": torch.Tensor, "torch": torch}
# (owner, attribute, original or None where it was inherited, wrapper), while installed
_patched: list[tuple[Any, str, Any, Any]] = []
_users = {"marks": 0, "records": 0}
_lock = threading.Lock()  # install and remove (bound models may run on several threads)


class _Records(NamedTuple):
    """The backend's entry points a wrapper calls while op records are on."""
    push: Any
    pop: Any
    pop_output: Any  # (output, read=None): the output; read: what it returned as it read it
    sites: dict[str, int]  # {entry point name: its op site id}


# While op records are on: _Records; None otherwise
_records: list[_Records | None] = [None]


class _Marks(threading.local):
    """Per thread: [[name, claimed], ...], the entries' calls open on it. Made on a thread's
    first use, so reading it never misses (a missing attribute of a threading.local costs
    ~0.4 µs, on every torch call an op mode sees)."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []


_local = _Marks()


def site_name(name: str) -> str:
    """The op site of an entry named `name` ("__getitem__" -> "python::__getitem__")."""
    return _PREFIX + name


def claim() -> str | None:
    """The name of the entry whose call is running on this thread, the first time an op mode
    asks during it (the mode's call is that entry's dispatch); None otherwise."""
    marks = _local.stack
    if marks and not marks[-1][1]:
        marks[-1][1] = True
        return marks[-1][0]
    return None


# A tensor's identity as op records keep it (its TensorImpl's address, in a capsule, for
# backend.link), read without TorchFunctionMode dispatch (Tensor._cdata would be a call an op
# mode sees); a torch without it: None, and no data flow for Python-call ops
tensor_handle = getattr(torch._C, "_tensor_impl_raw_handle", lambda tensor: None)
_Tensor = torch.Tensor


def _wrap(original: Any, name: str, setitem: bool) -> Any:
    is_compiling = torch.compiler.is_compiling

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return original(*args, **kwargs)
        records, marks = _records[0], None
        if _users["marks"]:
            marks = _local.stack
            marks.append([name, False])
        if records is not None:
            records.push(records.sites[name])
        try:
            out = original(*args, **kwargs)
        except BaseException:
            if records is not None:
                records.pop()
            raise
        finally:
            if marks is not None:
                marks.pop()
        if records is not None:
            value = args[0] if setitem and args else out
            # A parameter is a source, not an op's: TorchLens logs none (p.float() of a float
            # p); a plain tensor skips Parameter's slow __instancecheck__
            if type(value) is not _Tensor and isinstance(value, torch.nn.Parameter):
                records.pop()
            elif args and value is args[0]:  # returns what it read, maybe with no ATen op
                records.pop_output(value, value)   # (x.contiguous()): its data flow, said
            else:  # its ATen ops say its data flow
                records.pop_output(value)
        return out

    call.__tokentrace_original__ = original  # type: ignore[attr-defined]
    return call


def _as_builtin(wrapper: Any, original: Any) -> None:
    """TorchScript compiles a torch function it meets by its builtin op, found by the
    function's identity; the wrapper gets the original's (torch.tensor is aten::tensor), or
    torch.jit.script of code that calls it while installed fails on the wrapper."""
    try:
        from torch.jit import _builtins
        op = _builtins._find_builtin(original)
        if op is not None:
            _builtins._register_builtin(wrapper, op)
    except Exception:  # another torch's internals: the wrapper still works outside TorchScript
        pass


def _drop_builtin(wrapper: Any) -> None:
    """Takes the wrapper out of TorchScript's table again (keyed by id: a later object at the
    same address must not be taken for aten::tensor)."""
    try:
        from torch.jit import _builtins
        _builtins._get_builtin_table().pop(id(wrapper), None)
    except Exception:
        pass


def install(backend: Any = None) -> None:
    """One more user: op records (backend: the native backend, whose op sites the calls
    become) or an op mode (None: marks only). Patches the entry points at the first."""
    with _lock:
        _install(backend)


def _prime_torch_caches() -> None:
    """Torch caches sets of its functions by identity on first use, for the process: the
    factories a `with torch.device(...)` block gives its device (torch.utils._device), the
    functions torch function modes ignore (torch.overrides). Filled while torch.tensor is a
    wrapper, a set holds the wrapper for good: after remove(), torch.tensor under `with
    torch.device("meta")` was made on the CPU, so transformers took a meta-device model for
    a real one (its from_pretrained left the rotary embeddings' buffers as uninitialized
    memory, and a loaded model answered garbage). Filled here first, they hold the originals."""
    try:
        from torch.utils._device import _device_constructors
        _device_constructors()
    except Exception:  # another torch: no such cache to fill
        pass
    try:
        torch.overrides.get_ignored_functions()
    except Exception:
        pass


def _install(backend: Any) -> None:
    if backend is not None:
        kind = backend.site_kind("op")
        sites = {name: backend.site(site_name(name), kind) for name in NAMES}
        native = getattr(backend, "_n", backend)  # the extension's own: one call, no wrapper
        _records[0] = _Records(native.push, native.pop, native.pop_output, sites)
        _users["records"] += 1
    else:
        _users["marks"] += 1
    if _patched:
        return
    _prime_torch_caches()
    for (owner_name, attr), name in ENTRIES.items():
        owner = _OWNERS[owner_name]
        original = getattr(owner, attr, None)
        if original is None or hasattr(original, "__tokentrace_original__"):
            continue
        wrapper = _wrap(original, name, attr == "__setitem__")
        own = attr in vars(owner)  # else inherited (TensorBase's slot): deleted again after
        _as_builtin(wrapper, original)
        setattr(owner, attr, wrapper)
        _patched.append((owner, attr, original if own else None, wrapper))


def remove(records: bool = False) -> None:
    """One user less: op records (records=True) or an op mode; the originals go back after
    the last."""
    with _lock:
        _remove(records)


def _remove(records: bool) -> None:
    key = "records" if records else "marks"
    _users[key] = max(_users[key] - 1, 0)
    if not _users["records"]:
        _records[0] = None
    if any(_users.values()):
        return
    while _patched:
        owner, attr, original, wrapper = _patched.pop()
        _drop_builtin(wrapper)
        if original is None:
            delattr(owner, attr)
        else:
            setattr(owner, attr, original)
