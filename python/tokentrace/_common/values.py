"""The values inside a call's arguments: their kinds, and the walk that finds every leaf by path.

A path reads like Python access from the forward's own parameter names: "input_ids",
"past_key_values.layers[0].keys", "attention_mask", "[2]" for a positional argument past the
named ones (paths.py parses them). Containers are looked into: tuples and lists ("[i]"), dicts
and ModelOutput (".key"), dataclasses (".field"), and transformers' caches (DynamicCache,
StaticCache, EncoderDecoderCache and the others: whatever of their attributes hold tensors,
layers or other caches, so a DynamicCache shows "layers[i].keys" and "layers[i].values" per
layer). Anything else is one leaf: never dropped silently (so is a sequence or dict of more
than MAX_ITEMS items, and anything deeper than MAX_DEPTH).

Both sides use this: the recording (_record/inputs.py makes a row of each leaf; the native
walk, python/src/inputs_walk.cc, is given these kinds and limits so that it makes the same
rows) and the input edits (_edit/inputs.py finds the tensor a path names, and lists the paths
when it names none). A row is (path, kind, type, shape, dtype, device, value); _read/inputs.py
reads it back.
"""

import dataclasses
import inspect
from typing import Any

import torch

MAX_DEPTH = 8     # deeper than this, a container is one "object" entry
MAX_ITEMS = 256   # a longer sequence or dict is one "object" entry (a call's rows stay few)
SCALARS = (bool, int, float, type(None))


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


# Kinds start at 1, so `_KINDS.get(cls) or kind_of(cls)` is the whole lookup on the hot path.
# CONTAINER: a type given to tt.register_container, walked through its flatten.
TENSOR, LEAF, SEQ, DICT, CACHE, DATACLASS, OBJECT, CONTAINER = range(1, 9)
KINDS = (TENSOR, LEAF, SEQ, DICT, CACHE, DATACLASS, OBJECT, CONTAINER)  # the native walk's order
# type -> how to walk it (types are few; the walk runs at every recorded call)
_KINDS: dict[type, Any] = {}


# type -> (flatten, unflatten): the containers of tt.register_container; flatten(value) ->
# (children, aux_data), unflatten(aux_data, children) -> value (None: not rebuilt)
_CONTAINERS: dict[type, Any] = {}


def register_container(cls: type, flatten: Any, unflatten: Any = None) -> None:
    """Teaches the walk of a call's arguments (recorded inputs, inputs_of=) a container type of
    the user's: flatten(value) gives (children, aux_data), as TorchLens's register_container
    takes it; its children get the paths "[0]", "[1]", ... under the container's own.
    unflatten(aux, children) rebuilds one: what an input edit (tt.when(..., input=
    "pair[0]")) inside it needs. Register before tracing: a recording already running keeps
    what it saw."""
    from .._errors import fail
    if not isinstance(cls, type):
        fail(f"register_container(type, flatten, unflatten) takes a class first, got "
             f"{type(cls).__name__}")
    if not callable(flatten) or (unflatten is not None and not callable(unflatten)):
        fail("register_container(type, flatten, unflatten): flatten (value -> (children, "
             "aux_data)) and unflatten ((aux_data, children) -> value) are functions")
    _CONTAINERS[cls] = (flatten, unflatten)
    _KINDS.pop(cls, None)  # decided again with the registration


def children_of(value):
    """A registered container's children, as a list (the native walk asks for them)."""
    children, _ = _CONTAINERS[type(value)][0](value)
    return list(children)


def rebuilt(value, index, child):
    """A registered container like `value` with its child `index` replaced (unflatten)."""
    flatten, unflatten = _CONTAINERS[type(value)]
    if unflatten is None:
        from .._errors import fail
        fail(f"an edit inside a {type(value).__name__} needs its unflatten: "
             f"tt.register_container({type(value).__name__}, flatten, unflatten)")
    children, aux = flatten(value)
    children = list(children)
    children[index] = child
    return unflatten(aux, children)


def kind_of(cls):
    """How a value of type `cls` is walked: one of KINDS."""
    kind = _KINDS.get(cls)
    if kind is None:
        if cls in _CONTAINERS:
            kind = CONTAINER
        elif issubclass(cls, torch.Tensor):
            kind = TENSOR
        elif issubclass(cls, (str,) + SCALARS):
            kind = LEAF
        elif issubclass(cls, (tuple, list)):
            kind = SEQ
        elif issubclass(cls, dict):  # ModelOutput is an OrderedDict
            kind = DICT
        elif any(c.__module__ == "transformers.cache_utils" and c.__name__ in (
                "Cache", "CacheLayerMixin") for c in cls.__mro__):
            # transformers' caches and their per-layer objects, recognised without importing
            # transformers (a job that never imported it has none)
            kind = CACHE
        elif dataclasses.is_dataclass(cls):
            kind = DATACLASS
        else:
            kind = OBJECT
        _KINDS[cls] = kind
    return kind


def _holds_state(value):
    """Whether a cache attribute is worth a path: tensors, layers, caches, lists of those."""
    kind = _KINDS.get(type(value)) or kind_of(type(value))
    if kind == SEQ:
        return any((_KINDS.get(type(x)) or kind_of(type(x))) in (CACHE, TENSOR)
                   for x in value)
    return kind == CACHE or kind == TENSOR


def _join(path, key):
    return f"{path}.{key}" if path else str(key)


# (path, str or int key) -> the child's path, made once and shared by every row
_PATHS: dict[tuple[str, str | int], str] = {}
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
    kind = _KINDS.get(type(value)) or kind_of(type(value))
    if kind <= LEAF or kind == OBJECT or depth >= MAX_DEPTH or (
            kind in (SEQ, DICT) and len(value) > MAX_ITEMS):
        out.append((path, value))
    elif kind == SEQ or kind == CONTAINER:
        items = value if kind == SEQ else children_of(value)
        for i, item in enumerate(items):
            _walk(item, _PATHS.get((path, i)) or _child(path, i), depth + 1, out)
    elif kind == DICT:
        for key, item in value.items():
            plain = type(key) is str or type(key) is int  # True is 1 to a dict: no memo
            _walk(item, (_PATHS.get((path, key)) or _child(path, key)) if plain else
                  f"{path}[{key!r}]", depth + 1, out)
    elif kind == CACHE:  # per layer: keys, values and a few flags; the tensors go straight in
        for key, item in vars(value).items():
            item_kind = _KINDS.get(type(item)) or kind_of(type(item))
            if item_kind == TENSOR:
                out.append((_PATHS.get((path, key)) or _child(path, key), item))
            elif item_kind == CACHE or (item_kind == SEQ and _holds_state(item)):
                _walk(item, _PATHS.get((path, key)) or _child(path, key), depth + 1, out)
    else:  # a dataclass
        for field in dataclasses.fields(value):
            _walk(getattr(value, field.name, None), _child(path, field.name), depth + 1, out)
