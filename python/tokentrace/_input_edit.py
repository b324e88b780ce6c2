"""Edits of a call's input by path: tt.when(site, action, input="hidden_states").

The edit runs in a forward pre-hook, before forward: it finds the tensor at the path (the
paths of recorded inputs, see _inputs.py), edits a copy, and hands forward the arguments with
the copy in its place. The caller's tensor is not touched, since it is often used elsewhere
too (a residual stream). The containers on the way are copied as well (tuples, lists, dicts,
dataclasses), except transformers' caches: a cache is state shared across steps, so an edit
of `past_key_values.layers[0].values` replaces that tensor in the cache itself, and later steps
read the edited entries too (as when the call that wrote them had written them edited).
"""

import copy
import dataclasses
import difflib
import re

from ._errors import fail
from ._inputs import _CACHE, _DATACLASS, _DICT, _SEQ, _kind_of, parameter_names, walk_call

_INDEX = re.compile(r"\[(\d+)\]")


def _ends(rest, text):
    """Whether `rest` starts with the path component `text` (and the component ends there)."""
    return rest.startswith(text) and (len(rest) == len(text) or rest[len(text)] in ".[")


def locate(names, args, kwargs, path):
    """The steps from the call's arguments to the value at `path`, or None when it names
    nothing. Steps: ("arg", i) or ("kw", name) first, then ("item", i), ("key", k) and
    ("attr", name)."""
    tops = [(names[i] if i < len(names) else f"[{i}]", ("arg", i), a) for i, a in enumerate(args)]
    tops += [(k, ("kw", k), v) for k, v in kwargs.items()]
    for name, step, value in sorted(tops, key=lambda t: -len(t[0])):
        if _ends(path, name):
            steps = _descend(value, path[len(name):], [step])
            if steps is not None:
                return steps
    return None


def _descend(value, rest, steps):
    if not rest:
        return steps
    kind = _kind_of(type(value))
    if kind == _SEQ:
        m = _INDEX.match(rest)
        if m is None or int(m.group(1)) >= len(value):
            return None
        i = int(m.group(1))
        return _descend(value[i], rest[m.end():], steps + [("item", i)])
    if kind == _DICT:
        options = [(f".{k}" if isinstance(k, str) else f"[{k!r}]", "key", k) for k in value]
    elif kind == _CACHE:
        options = [(f".{k}", "attr", k) for k in vars(value)]
    elif kind == _DATACLASS:
        options = [(f".{f.name}", "attr", f.name) for f in dataclasses.fields(value)]
    else:
        return None
    for text, how, k in sorted(options, key=lambda o: -len(o[0])):
        if _ends(rest, text):
            child = value[k] if how == "key" else getattr(value, k)
            found = _descend(child, rest[len(text):], steps + [(how, k)])
            if found is not None:
                return found
    return None


def get(args, kwargs, steps):
    how, k = steps[0]
    value = args[k] if how == "arg" else kwargs[k]
    for how, k in steps[1:]:
        value = getattr(value, k) if how == "attr" else value[k]
    return value


def put(args, kwargs, steps, new):
    """(args, kwargs) with `new` at `steps`; what the caller passed is left as it was, except
    inside a cache (edited in place: see the module's docstring)."""
    how, k = steps[0]
    if how == "arg":
        args = list(args)
        args[k] = _put(args[k], steps[1:], new, False)
        return tuple(args), kwargs
    kwargs = dict(kwargs)
    kwargs[k] = _put(kwargs[k], steps[1:], new, False)
    return args, kwargs


def _put(obj, steps, new, in_cache):
    if not steps:
        return new
    (how, k), rest = steps[0], steps[1:]
    in_cache = in_cache or _kind_of(type(obj)) == _CACHE
    child = _put(getattr(obj, k) if how == "attr" else obj[k], rest, new, in_cache)
    if how == "attr":
        if in_cache:
            setattr(obj, k, child)
            return obj
        return dataclasses.replace(obj, **{k: child})
    if isinstance(obj, tuple):
        items = list(obj)
        items[k] = child
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if not in_cache:
        obj = copy.copy(obj)  # a list, a dict or a ModelOutput of the caller's
    obj[k] = child
    return obj


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
