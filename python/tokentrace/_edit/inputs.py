"""Edits of a call's input by path: tt.when(site, action, input="hidden_states").

The edit runs in a forward pre-hook, before forward: it finds the tensor at the path (the
paths of recorded inputs, see _common/values.py), edits a copy, and hands forward the arguments with
the copy in its place. The caller's tensor is not touched, since it is often used elsewhere
too (a residual stream). The containers on the way are copied as well (tuples, lists, dicts,
dataclasses), except transformers' caches: a cache is state shared across steps, so an edit
of `past_key_values.layers[0].values` replaces that tensor in the cache itself, and later steps
read the edited entries too (as when the call that wrote them had written them edited).
"""

import difflib

from .._common import (
    cache_alias,
    children_of,
    descend,
    ends,
    parameter_names,
    put_at,
    walk_call,
)
from .._errors import fail


def locate(names, args, kwargs, path, alias=True):
    """The steps from the call's arguments to the value at `path`, or None when it names
    nothing. Steps: ("arg", i) or ("kw", name) first, then ("item", i), ("key", k) and
    ("attr", name), and ("child", i) in a registered container."""
    tops = [(names[i] if i < len(names) else f"[{i}]", ("arg", i), a) for i, a in enumerate(args)]
    tops += [(k, ("kw", k), v) for k, v in kwargs.items()]
    for name, step, value in sorted(tops, key=lambda t: -len(t[0])):
        if ends(path, name):
            steps = descend(value, path[len(name):], [step])
            if steps is not None:
                return steps
    other = cache_alias(path) if alias else None  # the cache's other name (past_key_values/cache)
    return locate(names, args, kwargs, other, alias=False) if other is not None else None


def get(args, kwargs, steps):
    how, k = steps[0]
    value = args[k] if how == "arg" else kwargs[k]
    for how, k in steps[1:]:
        if how == "child":  # a registered container (tt.register_container)
            value = children_of(value)[k]
        else:
            value = getattr(value, k) if how == "attr" else value[k]
    return value


def put(args, kwargs, steps, new):
    """(args, kwargs) with `new` at `steps`; what the caller passed is left as it was, except
    inside a cache (edited in place: see the module's docstring)."""
    how, k = steps[0]
    if how == "arg":
        args = list(args)
        args[k] = put_at(args[k], steps[1:], new, False)
        return tuple(args), kwargs
    kwargs = dict(kwargs)
    kwargs[k] = put_at(kwargs[k], steps[1:], new, False)
    return args, kwargs


def input_hook(module, site, path, edit):
    """The forward pre-hook (with_kwargs=True) that runs `edit(tensor)` -> tensor on the input
    at `path` of each call of `site`. A path that names nothing, or names no tensor, is an
    error listing the nearest paths."""
    names = parameter_names(module.forward)

    def pre(mod, args, kwargs):
        steps = locate(names, args, kwargs, path)
        value = get(args, kwargs, steps) if steps is not None else None
        if steps is None or not hasattr(value, "clone"):
            paths = [p for p, v in walk_call(names, args, kwargs) if hasattr(v, "clone")]
            close = difflib.get_close_matches(path, paths, n=3, cutoff=0.4)
            what = "no input" if steps is None else f"a {type(value).__name__}, not a tensor,"
            fail(f"the input edit at {site} has {what} at {path!r}; the nearest tensor "
                 f"paths: {', '.join(repr(p) for p in close or paths[:4]) or 'none'}")
        return put(args, kwargs, steps, edit(value.clone()))
    return pre


def output_finder(site, path):
    """find(output) -> (tensor, path) of the output leaf at `path` of each call of `site` (an
    edit's tt.when(..., output=path) or tt.output_at(path)); a path that names nothing, or no
    tensor, is an error listing the output's tensor paths."""
    rest = path if path[:1] in ("[", ".") else "." + path

    def find(output):
        steps = descend(output, rest, [])
        value = output
        for how, k in steps or ():
            if how == "child":
                value = children_of(value)[k]
            else:
                value = getattr(value, k) if how == "attr" else value[k]
        if steps is None or not hasattr(value, "clone"):
            paths = [p for p, v in _leaves(output, "") if hasattr(v, "clone")]
            close = difflib.get_close_matches(path, paths, n=3, cutoff=0.4)
            what = "nothing" if steps is None else f"a {type(value).__name__}, not a tensor,"
            fail(f"the output edit at {site} finds {what} at {path!r} in its "
                 f"{type(output).__name__}; its tensor paths: "
                 f"{', '.join(_shown(p) for p in close or paths[:4]) or 'none'}")
        return value, path
    return find


def _leaves(value, path):
    """[(path, leaf)] of an output, walked as a call's inputs are (values.py)."""
    out = walk_call((), (value,), {})
    return [(p[len("[0]"):].lstrip("."), v) for p, v in out]


def _shown(path):
    return repr(path) if path else "'' (the output itself)"
