"""Compiled modules stay compiled while traced.

A module runs compiled in four ways: it is torch.compile(module) (an OptimizedModule, whose
instance `forward` is TorchDynamo's entry), it was compiled in place (module.compile() sets
`_compiled_call_impl`, which Module.__call__ runs instead of its usual call path), its
`forward` was replaced by a compiled function (model.forward = torch.compile(model.forward)),
or it holds a compiled method of its own in an attribute that its class's __call__ calls (vLLM's
compile decorator: `self._compiled_callable = torch.compile(self.forward, fullgraph=True)`,
inside an eager top-level model).
In each case the attribute named here is the entry into the compiled region: a recording
wrapper put there runs outside it, so TorchDynamo never sees our code (no graph break, no
eager fallback). Modules under a compiled one run inside the region; wrapping them would
break the graph there, so they are not hooked (HookSet counts them in `not_hooked`).
"""

import sys


def _optimized_module_type():
    # Compiling imports TorchDynamo, so without it in sys.modules no module is compiled.
    # Importing it just to ask would cost the first tt.trace of a process 1-2 s.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return getattr(eval_frame, "OptimizedModule", None)


def compiled_entry(module):
    """The attribute to wrap when `module` runs compiled ("forward", "_compiled_call_impl", or
    the attribute holding a compiled method of its own), else None."""
    optimized = _optimized_module_type()
    if optimized is not None and isinstance(module, optimized):
        return "forward"
    if module.__dict__.get("_compiled_call_impl") is not None:
        return "_compiled_call_impl"
    if hasattr(module.__dict__.get("forward"), "_torchdynamo_orig_callable"):
        return "forward"
    for attr, value in module.__dict__.items():
        original = getattr(value, "_torchdynamo_orig_callable", None)
        if original is not None and _method_of(module, original):
            return attr
    return None


def _method_of(module, fn):
    """True when fn is one of module's methods: bound to it, or a function with the code of its
    class's method of that name, seen through `__wrapped__` (TorchDynamo keeps a compiled bound
    method as the original of an inlining wrapper of its own). Its __call__ is not: a compiled
    __call__ is a compiled call of the whole module, recorded as one (call.py)."""
    call_code = getattr(type(module).__call__, "__code__", None)
    for _ in range(4):
        if fn is None:
            return False
        if getattr(getattr(fn, "__func__", fn), "__code__", None) is call_code:
            return False
        if getattr(fn, "__self__", None) is module:
            return True
        name, code = getattr(fn, "__name__", None), getattr(fn, "__code__", None)
        method = getattr(type(module), name, None) if isinstance(name, str) else None
        if code is not None and getattr(method, "__code__", None) is code:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def compiled_layout(names):
    """({site: attribute} of the outermost compiled modules, {sites inside them}) for
    names = {site: module}, root first as `self` (names are in named_modules() order, so a
    parent comes before its children)."""
    entries, inside = {}, set()
    prefixes = []  # sites of compiled modules: "" for the root, else "name."
    for name, module in names.items():
        if name != "self" and any(name.startswith(p) for p in prefixes):
            inside.add(name)
            continue
        attr = compiled_entry(module)
        if attr is not None:
            entries[name] = attr
            prefixes.append("" if name == "self" else name + ".")
    return entries, inside
