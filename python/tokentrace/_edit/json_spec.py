"""The JSON form of edit specs: tt.load_spec(path), EditSpec.to_json(), TOKENTRACE_EDITS.

A spec file is a JSON list of rules; each rule is an object:

    {"site": "model.layers.*.mlp",          # a glob or address, or a list of them; or "ops"
     "op": "scale",                         # zero | fill | add | scale | clamp | replace
     "factor": 0.5,                         # the op's numbers (see _OP_KEYS)
     "index": [null, [1, null, 2], -1],     # optional box, one entry per dimension
     "calls": {"token": 3},                 # optional; default every call
     "input": "hidden_states"}              # optional: edit this input (a path), not the output
                                            # ("output": "logits": this leaf of the output)

A rule that edits ops instead of module calls has "ops" in place of "site": an object of
one or more of "func" (a function name such as "relu", or a list of them: any of these),
"in_module" (a module address, "address:k" for its k-th call), "label" (a TorchLens op label,
"relu_1_2" or "relu_1_2:3"), "contains" and "regex" (over op labels); all that it names must
hold, as tt.func(...) & tt.in_module(...) & ... (docs/ops.md, "Op-level edits"):
    {"ops": {"func": "relu", "in_module": "transformer.h.1"}, "op": "zero"}

index: null or absent is the whole output; a list holds one entry per dimension: an int
(negative allowed), null (the whole dimension), [start, stop] or [start, stop, step] (ints or
null, Python slice semantics), or "..." (Ellipsis); a bare int is a one-entry list.
calls: "every" (default), "prefill", {"call": k}, {"token": k}, {"request_token": k} (k an int
or a list of ints), {"calls": [first, last]}, {"tokens": [first, last]} (inclusive, 1-based), or
a list of these (their union).
requests: in a serving engine, the tag (or a list of tags) of the requests the rule edits
(a request's SamplingParams.extra_args["tokentrace"]; vllm_xargs through vLLM's OpenAI
server): only their rows (docs/serving.md).
operand (add, replace): a .safetensors or .pt file holding the tensor; a relative path is
relative to the spec file; "operand_key" picks a tensor when the file holds several. add and
replace also take a number as "value".
"""

import functools
import json
import operator
import os

import torch

from .._common import contains, func, in_module, label, module, regex
from .._errors import TokentraceError, fail
from .calls import call, every_call, prefill, request_token, token
from .operations import Op, add, clamp, fill, replace, scale, zero
from .rules import make_rule

OPS = {"zero": zero, "fill": fill, "add": add, "scale": scale, "clamp": clamp,
       "replace": replace}
_COMMON = ("site", "ops", "op", "index", "calls", "input", "output", "requests")
_OPS_KEYS = {"func": func, "in_module": in_module, "label": label, "contains": contains,
             "regex": regex}
_OP_KEYS = {"zero": (), "fill": ("value",), "add": ("value", "operand", "operand_key"),
            "scale": ("factor",), "clamp": ("lo", "hi"),
            "replace": ("value", "operand", "operand_key")}
_CALLS_ACCEPTED = ('"every", "prefill", {"call": k}, {"token": k}, {"request_token": k}, '
                   '{"calls": [first, last]}, {"tokens": [first, last]}, or a list of these')
_BY_K = {"call": call, "token": token, "request_token": request_token}
_INDEX_ACCEPTED = ('an int, null (the whole dimension), [start, stop] or [start, stop, step] '
                   '(ints or null), or "..."')


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _show(v):
    return json.dumps(v) if not isinstance(v, str) or len(v) < 60 else json.dumps(v[:57] + "...")


# --- loading -------------------------------------------------------------------------------
def read_rules(path, device=None):
    """The rules of a JSON edit spec file (a list of rules); tt.load_spec makes them a spec.

    device: where tensor operands are put (default the CPU).
    """
    if not isinstance(path, (str, os.PathLike)):
        fail(f"load_spec() takes the path of a JSON edit spec file, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        fail(f"no edit spec file at {path}; pass the path of a JSON list of rules, e.g. "
             f'[{{"site": "model.layers.0.mlp", "op": "zero"}}]')
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the edit spec {path}: {exc}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"edit spec {path} is not valid JSON: {exc.msg} at line {exc.lineno} column "
             f"{exc.colno}")
    except RecursionError:
        fail(f"edit spec {path} nests its JSON too deeply to read (a rule is an object of "
             f"strings, numbers and short lists)")
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        fail(f"edit spec {path} cannot be read: {_clip(str(exc))}")
    if not isinstance(data, list):
        fail(f"edit spec {path}: the top level must be a JSON list of rules "
             f'([{{"site": ..., "op": ...}}, ...]), got {type(data).__name__}')
    base = os.path.dirname(os.path.abspath(path))
    rules = []
    for i, item in enumerate(data):
        where = f"edit spec {path}, rule {i}"
        try:
            rules.append(_rule(item, where, base, device))
        except TokentraceError:
            raise
        except (RecursionError, ValueError, TypeError, OverflowError, MemoryError) as exc:
            fail(f"{where}: cannot be read ({type(exc).__name__}: {_clip(str(exc))})")
    return rules


def _clip(text, limit=200):
    """An error text cut to one short line: a message quoting a huge value stays readable."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _rule(item, where, base, device):
    def bad(message):
        fail(f"{where}: {message}")

    if not isinstance(item, dict):
        bad(f'a rule is a JSON object ({{"site": ..., "op": ...}}), got {_show(item)}')
    op = item.get("op")
    if op is None:
        bad(f'has no "op"; accepted: {", ".join(OPS)}')
    if op not in OPS:
        bad(f"unknown op {_show(op)}; accepted: {', '.join(OPS)}")
    accepted = _COMMON + _OP_KEYS[op]
    for key in item:
        if key not in accepted:
            bad(f"unknown key {_show(key)} for op {op!r}; accepted keys: {', '.join(accepted)}")
    site = item.get("site")
    if "ops" in item:
        if "site" in item:
            bad('a rule edits module calls ("site") or ops ("ops"), not both')
    elif isinstance(site, str) and site:
        patterns = [site]
    elif isinstance(site, list) and site and all(isinstance(s, str) and s for s in site):
        patterns = site
    else:
        bad(f'"site" must be a module address or glob (or a non-empty list of them), or '
            f'"ops" an object choosing ops ({_OPS_ACCEPTED}); got '
            f"{_show(site) if 'site' in item else 'neither'}")
    try:
        selector = _ops(item["ops"], bad) if "ops" in item else module(*patterns)
        index = _index(item.get("index"), bad)
        action = _op(op, item, index, bad, base, device)
        calls = _calls(item.get("calls"), bad)
        return make_rule(selector, action, calls, item.get("input"), item.get("output"),
                         item.get("requests"))
    except TokentraceError as exc:
        message = str(exc)
        if message.startswith(f"tokentrace: {where}"):
            raise
        bad(message[len("tokentrace: "):] if message.startswith("tokentrace: ") else message)


_OPS_ACCEPTED = ('{"func": "relu" or a list of names, "in_module": "address", "label": '
                 '"relu_1_2", "contains": "text", "regex": "pattern"}, one key or more')


def _ops(value, bad):
    """The op selector of a rule's "ops" object: its keys' selectors, all of them holding."""
    if not isinstance(value, dict) or not value:
        bad(f'"ops" must be an object {_OPS_ACCEPTED}; got {_show(value)}')
    parts = []
    for key, v in value.items():
        make = _OPS_KEYS.get(key)
        if make is None:
            bad(f'unknown key {_show(key)} in "ops"; accepted: {", ".join(_OPS_KEYS)}')
        if key == "func" and isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            parts.append(functools.reduce(operator.or_, [func(x) for x in v]))
        elif isinstance(v, str) and v:
            parts.append(make(v))
        else:
            what = "a name or a non-empty list of names" if key == "func" else "a string"
            bad(f'"ops" key "{key}" takes {what}; got {_show(v)}')
    return functools.reduce(operator.and_, parts)


def _index(value, bad):
    if value is None:
        return None
    if _is_int(value):
        return (value,)
    if not isinstance(value, list):
        bad(f'"index" must be null, an int, or a list with one entry per dimension '
            f"({_INDEX_ACCEPTED}); got {_show(value)}")
    parts = []
    for d, part in enumerate(value):
        if _is_int(part):
            parts.append(part)
        elif part is None:
            parts.append(slice(None))
        elif part == "...":
            parts.append(Ellipsis)
        elif (isinstance(part, list) and len(part) in (2, 3)
              and all(v is None or _is_int(v) for v in part)):
            parts.append(slice(*part))
        else:
            bad(f'"index" entry {d} must be {_INDEX_ACCEPTED}; got {_show(part)}')
    return tuple(parts)


def _number(item, key, bad, required=True):
    if key not in item:
        if required:
            bad(f'op {item["op"]!r} needs "{key}" (a number)')
        return None
    v = item[key]
    if not _is_num(v):
        bad(f'"{key}" must be a number, got {_show(v)}')
    return v


def _op(op, item, index, bad, base, device):
    if op == "zero":
        return zero(index=index)
    if op == "fill":
        return fill(_number(item, "value", bad), index=index)
    if op == "scale":
        return scale(_number(item, "factor", bad), index=index)
    if op == "clamp":
        lo, hi = _number(item, "lo", bad, False), _number(item, "hi", bad, False)
        if lo is None and hi is None:
            bad('op "clamp" needs "lo", "hi" or both (numbers)')
        return clamp(lo, hi, index=index)
    # add / replace: a number ("value") or a tensor file ("operand")
    if ("value" in item) == ("operand" in item):
        bad(f'op {op!r} needs exactly one of "value" (a number) or "operand" (a .safetensors '
            f"or .pt file)")
    if "operand_key" in item and "operand" not in item:
        bad('"operand_key" goes with "operand"')
    if "value" in item:
        v = _number(item, "value", bad)
        result = add(v, index=index) if op == "add" else replace(torch.tensor(float(v)),
                                                                   index=index)
        return result
    file, key = _operand_file(item, bad, base)
    tensor = _load_tensor(file, key, bad)
    if device is not None:
        tensor = tensor.to(device)
    result = OPS[op](tensor, index=index)
    result.operand_source = (file, key)
    return result


def _operand_file(item, bad, base):
    file, key = item["operand"], item.get("operand_key")
    if not isinstance(file, str) or not file:
        bad(f'"operand" must be the path of a .safetensors or .pt file, got {_show(file)}')
    if key is not None and not isinstance(key, str):
        bad(f'"operand_key" must be a string, got {_show(key)}')
    return os.path.normpath(os.path.join(base, os.path.expanduser(file))), key


def _load_tensor(file, key, bad):
    if not os.path.isfile(file):
        bad(f'"operand" file {file} does not exist')
    try:
        if file.endswith(".safetensors"):
            from safetensors.torch import load_file
            data = load_file(file, device="cpu")
        elif file.endswith((".pt", ".pth")):
            data = torch.load(file, map_location="cpu", weights_only=True)
        else:
            bad(f'"operand" file {file}: accepted formats are .safetensors and .pt')
    except TokentraceError:
        raise
    except Exception as exc:
        bad(f'cannot read the "operand" file {file}: {exc}')
    if isinstance(data, torch.Tensor):
        if key is not None:
            bad(f'"operand" file {file} holds one tensor, not a dict; drop "operand_key"')
        return data
    if not isinstance(data, dict) or not data:
        bad(f'"operand" file {file} holds no tensor (a tensor or a dict of tensors is accepted)')
    if key is None:
        if len(data) != 1:
            bad(f'"operand" file {file} holds {len(data)} tensors; pick one with "operand_key" '
                f"(one of {', '.join(repr(k) for k in sorted(map(str, data)))})")
        key = next(iter(data))
    if key not in data:
        bad(f'"operand_key" {key!r} is not in {file}; it holds '
            f"{', '.join(repr(k) for k in sorted(map(str, data)))}")
    if not isinstance(data[key], torch.Tensor):
        bad(f'"operand" file {file}: {key!r} is a {type(data[key]).__name__}, not a tensor')
    return data[key]


def _calls(value, bad):
    if value is None or value == "every":
        return every_call
    if value == "prefill":
        return prefill
    if isinstance(value, list):
        if not value:
            bad(f'"calls" is an empty list; accepted: {_CALLS_ACCEPTED}')
        sel = _calls(value[0], bad)
        for part in value[1:]:
            sel = sel | _calls(part, bad)
        return sel
    if isinstance(value, dict) and len(value) == 1:
        (key, v), = value.items()
        if key in _BY_K:
            if _is_int(v) or (isinstance(v, list) and v and all(_is_int(x) for x in v)):
                return _BY_K[key](v)
            bad(f'"calls": {{"{key}": k}} takes an int k >= 1 or a list of them, got {_show(v)}')
        if key in ("calls", "tokens"):
            if isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v) \
                    and 1 <= v[0] <= v[1]:
                return (call if key == "calls" else token)(range(v[0], v[1] + 1))
            bad(f'"calls": {{"{key}": [first, last]}} takes two ints, 1 <= first <= last '
                f"(inclusive), got {_show(v)}")
    bad(f'"calls" must be {_CALLS_ACCEPTED}; got {_show(value)}')


# --- writing ------------------------------------------------------------------------------
def to_json(rules, path=None, operand_dir=None):
    """The JSON text of a spec's `rules` (written to `path` too when given)."""
    rules = [_rule_json(i, rule, operand_dir) for i, rule in enumerate(rules)]
    text = json.dumps(rules, indent=1)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return text


def _rule_json(i, rule, operand_dir):
    action = rule.action
    if not isinstance(action, Op):
        fail(f"rule {i} ({rule.describe()}) runs a Python callable; only the declarative ops "
             f"({', '.join(OPS)}) have a JSON form")
    if rule.selector.names_ops:
        ops = rule.selector.json_form()
        if ops is None:
            fail(f"rule {i} ({rule.describe()}) selects ops in a way JSON cannot say; its "
                 f'"ops" object takes tt.func (or | of them), tt.in_module, tt.label, '
                 f"tt.contains and tt.regex joined with &, not tt.where, ~ or output=")
        out = {"ops": ops, "op": action.name}
    else:
        patterns = list(rule.selector.patterns)
        out = {"site": patterns[0] if len(patterns) == 1 else patterns, "op": action.name}
    if action.name == "fill":
        out["value"] = action.value
    elif action.name == "scale":
        out["factor"] = action.factor
    elif action.name == "clamp":
        if action.lo is not None:
            out["lo"] = action.lo
        if action.hi is not None:
            out["hi"] = action.hi
    elif action.name in ("add", "replace"):
        out.update(_operand_json(i, action, operand_dir))
    if action.index is not None:
        out["index"] = [_part_json(p) for p in action.index]
    calls = _calls_json(rule.calls)
    if calls != "every":
        out["calls"] = calls
    if rule.input is not None:
        out["input"] = rule.input
    if rule.output is not None:
        out["output"] = rule.output
    if rule.requests is not None:
        out["requests"] = rule.requests[0] if len(rule.requests) == 1 else list(rule.requests)
    return out


def _operand_json(i, action, operand_dir):
    t = action.operand if action.name == "add" else action.tensor
    if not isinstance(t, torch.Tensor):
        return {"value": t}
    source = getattr(action, "operand_source", None)
    if source is not None:
        file, key = source
        return {"operand": file, **({"operand_key": key} if key is not None else {})}
    if t.dim() == 0 and action.name == "replace" and t.is_floating_point():
        return {"value": float(t.item())}
    if operand_dir is None:
        fail(f"rule {i} ({action.describe()}) has an in-memory tensor operand; pass "
             f"to_json(operand_dir=...) to save it as a .safetensors file the JSON refers to")
    from safetensors.torch import save_file
    os.makedirs(operand_dir, exist_ok=True)
    file = os.path.abspath(os.path.join(operand_dir, f"rule{i}-{action.name}.safetensors"))
    save_file({"operand": t.detach().to("cpu").contiguous()}, file)
    action.operand_source = (file, None)
    return {"operand": file}


def _part_json(part):
    if part is Ellipsis:
        return "..."
    if isinstance(part, slice):
        if part.start is None and part.stop is None and part.step is None:
            return None
        return [part.start, part.stop, part.step]
    return part


def _calls_json(sel):
    if sel is prefill:
        return "prefill"
    if sel.by == "every":
        return "every"
    if sel.by == "any":
        parts = []
        for s in sel.values:
            j = _calls_json(s)
            parts.extend(j if isinstance(j, list) else [j])
        return parts
    values = sel.values
    if isinstance(values, range):
        if values.step == 1 and len(values) > 0 and sel.by != "request_token":
            return {sel.by + "s": [values.start, values[-1]]}
        values = list(values)
    values = sorted(values)
    return {sel.by: values[0] if len(values) == 1 else values}
