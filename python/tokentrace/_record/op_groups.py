"""Python calls as ops: the torch entry points that TorchLens logs as one op although they run
several ATen ops, or none, while op records are on.

TorchLens logs each call of a torch function or Tensor method; op records see ATen ops. The
two agree where a call runs one ATen op of its name, and not for these, whose calls become a
call of an op site of their own ("python::__getitem__": its type is "getitem") holding the
ATen ops they run:
- x[index] (__getitem__) runs an op per part of the index (aten::select, aten::slice, ...);
- x[index] = v (__setitem__) as many, and returns None: its output is x, as TorchLens's;
- torch.tensor, torch.as_tensor, x.new_tensor make a tensor from data in three or four ops;
- x.contiguous() of a contiguous tensor runs none;
- x.float() and the other dtype methods run aten::to (TorchLens's type is the method's name).
An op edit's or saver's TorchFunctionMode (_common/op_mode.py) sees the same calls by the same
names, so labels numbered while the model runs (_edit/op_labels.py) count them the same way.

install(backend) patches them (op records are on for one trace at a time) and remove() puts
the originals back. A wrapper costs a Python call and two native calls per call
while installed, and nothing when op records are off: nothing is patched then. Inside code
TorchDynamo compiles the wrapper only calls the original (is_compiling is true there).

Under a TorchFunctionMode a Tensor method's call reaches the mode through the class's
attribute, which is the wrapper: the call is then one group holding another (the mode's call),
and whatever the mode records after the function (an op saver's copy, OP_SAVE_SITE) lands
inside the outer one; the reader (_read/op_sites.py) takes both forms.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

_PREFIX = "python::"
_TENSOR_METHODS = ("__getitem__", "__setitem__", "contiguous", "new_tensor", "float", "double",
                   "half", "bfloat16", "int", "long", "short", "bool", "byte", "char")
_TORCH_FUNCTIONS = ("tensor", "as_tensor")

# (owner, attribute, original or None where it was inherited, wrapper), while installed
_patched: list[tuple[Any, str, Any, Any]] = []


def site_name(entry: str) -> str:
    """The op site of a patched entry point ("__getitem__" -> "python::__getitem__")."""
    return _PREFIX + entry


def _wrap(original: Any, sid: int, backend: Any, setitem: bool) -> Any:
    is_compiling = torch.compiler.is_compiling
    push, pop, pop_output = backend.push, backend.pop, backend.pop_output

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return original(*args, **kwargs)
        push(sid)
        try:
            out = original(*args, **kwargs)
        except BaseException:
            pop()
            raise
        pop_output(args[0] if setitem and args else out)
        return out

    call.__tokentrace_original__ = original  # type: ignore[attr-defined]
    return call


def _as_builtin(wrapper: Any, original: Any) -> None:
    """TorchScript compiles a torch function it meets by its builtin op, found by the
    function's identity; the wrapper gets the original's (torch.tensor is aten::tensor), or
    torch.jit.script of code that calls it while op records are on fails on the wrapper."""
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


def install(backend: Any) -> None:
    """Patches the entry points (nothing more while they are patched)."""
    if _patched:
        return
    kind = backend.site_kind("op")
    entries: list[tuple[Any, str]] = [(torch.Tensor, n) for n in _TENSOR_METHODS]
    entries += [(torch, n) for n in _TORCH_FUNCTIONS]
    for owner, attr in entries:
        original = getattr(owner, attr, None)
        if original is None or hasattr(original, "__tokentrace_original__"):
            continue
        sid = backend.site(site_name(attr), kind)
        wrapper = _wrap(original, sid, backend, attr == "__setitem__")
        own = attr in vars(owner)  # else inherited (TensorBase's slot): deleted again after
        _as_builtin(wrapper, original)
        setattr(owner, attr, wrapper)
        _patched.append((owner, attr, original if own else None, wrapper))


def remove() -> None:
    """Puts the originals back."""
    while _patched:
        owner, attr, original, wrapper = _patched.pop()
        _drop_builtin(wrapper)
        if original is None:
            delattr(owner, attr)
        else:
            setattr(owner, attr, original)
