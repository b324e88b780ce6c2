"""The path grammar of values inside a call's arguments or a module's output, parsed once.

Paths read like Python access: "[0]" for a tuple or list item, ".key" (or "key" first) for a
dict / ModelOutput key or a dataclass / cache attribute, "[3]" for an int key. values.py and
outputs.py write them; descend() reads one against a value (a key may hold dots, so the value
decides), and put_at() puts a new value there, copying the containers on the way (except
transformers' caches, which are shared state and edited in place).
"""

import copy
import dataclasses
import re

from .._errors import fail
from .values import CACHE, CONTAINER, DATACLASS, DICT, SEQ, children_of, kind_of, rebuilt

_INDEX = re.compile(r"\[(\d+)\]")

# The names transformers gives the cache argument of a forward: past_key_values, and cache
# since 5.24 (its generate passes cache=; the old name is still taken, deprecated).
CACHE_NAMES = ("past_key_values", "cache")


def cache_alias(path):
    """`path` with the cache argument's other name ("past_key_values.layers[0].keys" <->
    "cache.layers[0].keys"), or None when it does not start with either."""
    for name, other in (CACHE_NAMES, CACHE_NAMES[::-1]):
        if ends(path, name):
            return other + path[len(name):]
    return None


def ends(rest, text):
    """Whether `rest` starts with the path component `text` (and the component ends there)."""
    return rest.startswith(text) and (len(rest) == len(text) or rest[len(text)] in ".[")


def descend(value, rest, steps):
    """`steps` plus the steps from `value` to the value at path `rest` ("[0].key"), or None
    when it names nothing. Steps: ("item", i), ("key", k), ("attr", name)."""
    if not rest:
        return steps
    kind = kind_of(type(value))
    if kind == SEQ or kind == CONTAINER:
        items = value if kind == SEQ else children_of(value)
        m = _INDEX.match(rest)
        if m is None or int(m.group(1)) >= len(items):
            return None
        i = int(m.group(1))
        how = "item" if kind == SEQ else "child"
        return descend(items[i], rest[m.end():], steps + [(how, i)])
    if kind == DICT:
        options = [(f".{k}" if isinstance(k, str) else f"[{k!r}]", "key", k) for k in value]
    elif kind == CACHE:
        options = [(f".{k}", "attr", k) for k in vars(value)]
    elif kind == DATACLASS:
        options = [(f".{f.name}", "attr", f.name) for f in dataclasses.fields(value)]
    else:
        return None
    for text, how, k in sorted(options, key=lambda o: -len(o[0])):
        if ends(rest, text):
            child = value[k] if how == "key" else getattr(value, k)
            found = descend(child, rest[len(text):], steps + [(how, k)])
            if found is not None:
                return found
    return None


def put_at(obj, steps, new, in_cache):
    """`obj` with `new` at `steps` (containers copied on the way, caches edited in place)."""
    if not steps:
        return new
    (how, k), rest = steps[0], steps[1:]
    if how == "child":  # a registered container: rebuilt around the new child
        return rebuilt(obj, k, put_at(children_of(obj)[k], rest, new, in_cache))
    in_cache = in_cache or kind_of(type(obj)) == CACHE
    child = put_at(getattr(obj, k) if how == "attr" else obj[k], rest, new, in_cache)
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


def replace_in_output(output, path, new):
    """`output` with `new` at `path` (as outputs.first_tensor names it: "", "[0]", "logits",
    "[0].hidden"); a path that names nothing there is an error."""
    steps = descend(output, path if path[:1] in ("", "[", ".") else "." + path, [])
    if steps is None:
        fail(f"cannot put the edited tensor back at {path!r} in a {type(output).__name__}")
    return put_at(output, steps, new, False)
