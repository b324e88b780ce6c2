"""The tokentrace PyTorch operators (libtokentrace_torch_ops.so, cuda/torch/): loader and table.

The library registers torch.ops.tokentrace.*: apply_patches_(Tensor(a!) out, int table,
int site) edits `out` in place from a native patch table (CPU: the host implementation; CUDA:
the device kernel, whose call/token/fire counters live in device memory), plus the table ops
table_create, table_free, advance_token, set_token, reset_counters, set_row_mask,
table_counters, table_errors, table_validate, table_check (a bad entry as data) and abi (the
codes). The serialised entry layout is in cuda/torch/torch_table.h.
The edits (_edit/table.py) build one PatchTable per bound spec on top of this module; the
recording reads tensors through its tokentrace_tensor_meta (_record/inputs.py) and records ATen
ops through its op observer (_record/op_records.py); tests/torch_op test it directly.

    find_library() -> (path or None, where it looked)
    load_library(path=None) -> str     loads once (raises TokentraceError when missing/broken,
                                       or when its ABI version is not ABI_VERSION)
    loaded_path() -> str or None       where it was loaded from, if it was
    abi() -> {name: value}             the library's codes and limits (cuda/patch_table.h)
    PatchTable(max_sites, max_masks=0, max_rows=0)
        max_masks row mask slots of max_rows rows each, for calls=("rows", slot)
        .add_entry(site, op, index=(), calls="every", value=0.0, lo=0.0, hi=0.0, operand=None)
            op: "zero" | "fill" (value) | "add" (operand or value) | "scale" (value)
                | "clamp" (lo, hi) | "replace" (operand)
            index: a tuple of ints and slices, as in values[index] (negative values, open ends
                and steps >= 1; dims past len(index) are whole)
            calls: "every" | "prefill" (call 1) | k (call k) | ("call", k) | ("calls", a, b)
                | ("token", k) | ("tokens", a, b); b=None is open-ended. 1-based; token 1 is
                the prefill, advance_token() starts each root call. ("rows", slot): matches a
                call when row mask `slot` marks a row, and edits only the marked rows (dim-0
                indices) of the box; a serving engine writes the masks before each step.
        .upload(device="cpu") -> self   native table on that device (operands copied there);
                                         call again after add_entry (handle changes); a bad
                                         entry raises PatchEntryError(entry, reason, message)
        .apply_(tensor, site)           torch.ops.tokentrace.apply_patches_ (in place)
        .set_row_mask(slot, rows)       rows: 1-D bool/uint8 tensor or a sequence of bools/ints
                                        (nonzero = marked; rows past len(rows) unmarked)
        .advance_token() / .set_token(t) / .reset()   (reset also empties every row mask)
        .fires() -> (total, [per entry])   reads counters (syncs the device)
        .counters() -> dict  .errors() -> [str]  .validate(site, like_tensor)  .free()

Where the library is looked for, first hit wins: $TOKENTRACE_TORCH_OPS_LIB; next to the
package's native files (the $TOKENTRACE_NATIVE_DIR build directory, the directory of the loaded
_native extension, the package directory: where `pip install` puts it); then
$TOKENTRACE_NATIVE_DIR/torch-ops (where scripts/setup.sh builds it).
"""

import os

import torch

from .._common import loader
from .._errors import TokentraceError, fail

LIB_NAME = "libtokentrace_torch_ops.so"
HOW_TO_BUILD = ("build it with `bash scripts/setup.sh` (then `source build/env.sh`) or "
                "`cuda/torch/build.sh build/torch-ops`, or set TOKENTRACE_TORCH_OPS_LIB to the "
                "library built against this torch")
# The patch table ABI this module writes (cuda/patch_table.h, kPatchTableVersion): the entry
# layout of cuda/torch/torch_table.h. The codes themselves (ops, selectors, dim flags, errors,
# the dimension limit) are read from the loaded library (abi()), never copied here.
ABI_VERSION = 3
_state = {"loaded": None, "error": None, "abi": None}


class PatchEntryError(TokentraceError, RuntimeError):
    """A table entry the library refused, as data: entry (its index in the table), reason (the
    name of its patch::PatchError code, e.g. "bad_step") and message (one line, without the
    entry's index). A RuntimeError too, as the library's own errors are."""

    def __init__(self, entry, reason, message):
        self.entry, self.reason = entry, reason
        self.message = message.removeprefix("tokentrace: ")
        super().__init__(f"{self.message} (patch entry {entry})")


def _candidates():
    env = os.environ.get("TOKENTRACE_TORCH_OPS_LIB")
    if env:
        return [os.path.abspath(env)], True
    dirs = list(loader.search_dirs())
    native = os.environ.get("TOKENTRACE_NATIVE_DIR")
    if native:
        dirs.append(os.path.join(os.path.abspath(native), "torch-ops"))
    seen, out = set(), []
    for d in dirs:
        path = os.path.join(d, LIB_NAME)
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out, False


def find_library():
    """(path, looked): the library's path or None, and the paths that were looked at."""
    paths, _ = _candidates()
    for path in paths:
        if os.path.isfile(path):
            return path, paths
    return None, paths


def load_library(path=None):
    """Loads the operator library once; returns the path it was loaded from.

    Raises TokentraceError (one line: what is missing and how to build it) when the library is
    not found or does not load into this torch."""
    if _state["loaded"] is not None:
        return _state["loaded"]
    if path is None:
        path, looked = find_library()
        if path is None:
            where = ("$TOKENTRACE_TORCH_OPS_LIB=" + looked[0]) if os.environ.get(
                "TOKENTRACE_TORCH_OPS_LIB") else ", ".join(looked)
            fail(f"the patch table library {LIB_NAME} is not built (looked in: {where}); "
                 f"declarative edits (tt.zero/fill/add/scale/clamp/replace) run through it, "
                 f"Python callables do not need it; {HOW_TO_BUILD}")
    elif not os.path.isfile(path):
        fail(f"the patch table library {path} does not exist; {HOW_TO_BUILD}")
    try:
        torch.ops.load_library(path)
    except (OSError, RuntimeError) as exc:
        text = " ".join(str(exc).split())
        fail(f"the patch table library {path} does not load into torch {torch.__version__} "
             f"({text}); rebuild it against this torch: {HOW_TO_BUILD}")
    _state["abi"] = _read_abi(path)
    # Fake kernels: the ops change state, not shapes. apply_patches_ has a C++ Meta kernel.
    for name in ("advance_token", "set_token", "reset_counters", "set_row_mask"):
        torch.library.register_fake(f"tokentrace::{name}")(lambda *args: None)
    # Keep the counter ops in traced graphs although nothing uses their (absent) outputs.
    ops = torch.ops.tokentrace
    for op in (ops.advance_token.default, ops.set_token.default, ops.reset_counters.default,
               ops.set_row_mask.default, ops.apply_patches_.default):
        torch.fx.node.has_side_effect(op)
    _state["loaded"] = path
    return path


def _read_abi(path):
    """The library's codes and limits as {name: value} (see AbiTable in cuda/torch/); one
    clear error when its table version is not the one this module writes."""
    if not hasattr(torch.ops.tokentrace, "abi"):
        fail(f"the patch table library {path} predates patch table ABI versions (it has no "
             f"abi() op); this tokentrace writes version {ABI_VERSION}: {HOW_TO_BUILD}")
    names, values = torch.ops.tokentrace.abi()
    abi = dict(zip(names, values))
    if abi.get("version") != ABI_VERSION:
        fail(f"the patch table library {path} has patch table ABI version {abi.get('version')}, "
             f"this tokentrace writes version {ABI_VERSION}; rebuild the library from this "
             f"checkout: {HOW_TO_BUILD}")
    return abi


def loaded_path():
    """The path the library was loaded from, or None when it was not loaded (yet)."""
    return _state["loaded"]


def abi():
    """{name: value} of the loaded library: "version", "max_dims", "ints_per_entry",
    "floats_per_entry", "open_end", and "op.<name>", "selector.<name>", "dim.<name>",
    "dtype.<name>", "error.<name>" (cuda/patch_table.h). Loads the library."""
    load_library()
    return dict(_state["abi"])


def _codes(prefix):
    """{name: code} of one list of abi(), e.g. _codes("op") -> {"zero": 0, ...}."""
    return {k[len(prefix) + 1:]: v for k, v in abi().items() if k.startswith(prefix + ".")}


def editable_dtypes():
    """The torch dtypes the table's ops edit (TT_PATCH_EDITABLE_DTYPES, cuda/patch_table.h),
    in code order."""
    codes = _codes("editable")
    return tuple(getattr(torch, name) for name in sorted(codes, key=codes.get))


def available():
    """(True, path) when the library is loaded or loadable, else (False, why)."""
    try:
        return True, load_library()
    except ValueError as exc:
        return False, str(exc)


def _selector(calls):
    kinds = _codes("selector")
    if calls is None or calls == "every":
        return kinds["every"], 0, 0
    if calls == "prefill":
        return kinds["call"], 1, 1
    if isinstance(calls, int) and not isinstance(calls, bool):
        return kinds["call"], calls, calls
    if (isinstance(calls, tuple) and len(calls) == 2 and calls[0] == "rows"
            and isinstance(calls[1], int) and not isinstance(calls[1], bool) and calls[1] >= 0):
        return kinds["rows"], calls[1], calls[1]
    if isinstance(calls, tuple) and len(calls) in (2, 3) and calls[0] in ("call", "token",
                                                                          "calls", "tokens"):
        single = calls[0] in ("call", "token")
        if single and len(calls) == 2:
            return kinds[calls[0]], calls[1], calls[1]
        if not single and len(calls) == 3:
            last = abi()["open_end"] if calls[2] is None else calls[2]
            return kinds[calls[0]], calls[1], last
    fail(f"bad calls={calls!r}; use 'every', 'prefill', k, ('call', k), ('calls', a, b), "
         "('token', k), ('tokens', a, b) or ('rows', slot) (slot >= 0)")


def _rows_tensor(rows):
    """A sequence (or array) of bools/ints as a bool tensor: nonzero marks a row."""
    try:
        t = torch.as_tensor(rows if hasattr(rows, "__array__") else list(rows))
    except (TypeError, ValueError, RuntimeError) as exc:
        fail(f"set_row_mask rows must be a 1-D bool/uint8 tensor or a sequence of bools or "
             f"ints ({' '.join(str(exc).split())})")
    if t.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    if t.is_floating_point() or t.is_complex():
        fail(f"set_row_mask rows must be bools or ints (nonzero = marked), got {t.dtype} "
             f"values")
    return t != 0


def _box(index):
    if not isinstance(index, tuple):
        index = (index,)
    max_dims, flag = abi()["max_dims"], _codes("dim")
    if len(index) > max_dims:
        fail(f"index {index!r} has more than {max_dims} dimensions")
    dims = []
    for item in index:
        if isinstance(item, slice):
            flags = (flag["has_start"] if item.start is not None else 0) | (
                flag["has_stop"] if item.stop is not None else 0)
            step = 1 if item.step is None else int(item.step)
            dims += [int(item.start or 0), int(item.stop or 0), step, flags]
        elif isinstance(item, int) and not isinstance(item, bool):
            dims += [int(item), 0, 1, flag["has_start"] | flag["index"]]
        else:
            fail(f"index item {item!r} is not an int or a slice")
    dims += [0, 0, 1, 0] * (max_dims - len(index))
    return [len(index)] + dims


class PatchTable:
    """A list of patch entries and, after upload(), the native table built from them."""

    def __init__(self, max_sites, max_masks=0, max_rows=0):
        load_library()
        self.max_sites = int(max_sites)
        self.max_masks, self.max_rows = int(max_masks), int(max_rows)
        self._ints, self._floats, self._operands = [], [], []
        self.handle = None
        self.device = None

    def __len__(self):
        return len(self._operands)

    def add_entry(self, site, op, index=(), calls="every", value=0.0, lo=0.0, hi=0.0,
                  operand=None):
        """Appends an entry; returns its index (the position in fires())."""
        ops = _codes("op")
        if op not in ops:
            fail(f"unknown op {op!r}; use one of {sorted(ops)}")
        kind, first, last = _selector(calls)
        self._ints += [int(site), ops[op], kind, first, last] + _box(index)
        self._floats += [float(value), float(lo), float(hi)]
        self._operands.append(operand)
        return len(self._operands) - 1

    def upload(self, device="cpu"):
        """(Re)creates the native table on `device`; counters start at zero and row masks
        empty (the same max_masks and max_rows)."""
        device = torch.device(device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("tokentrace: no CUDA device is available; upload the patch table "
                               "to \"cpu\" or run where torch.cuda.is_available()")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        operands = [None if t is None else t.to(device) for t in self._operands]
        args = (self._ints, self._floats, operands, self.max_sites, device, self.max_masks,
                self.max_rows)
        entry, reason, message = torch.ops.tokentrace.table_check(*args)
        if entry >= 0:
            names = {code: name for name, code in _codes("error").items()}
            raise PatchEntryError(entry, names.get(reason, str(reason)), message)
        handle = torch.ops.tokentrace.table_create(*args)
        self.free()
        self.handle, self.device = handle, device
        return self

    def _h(self):
        if self.handle is None:
            raise RuntimeError("tokentrace: PatchTable.upload(device) was not called")
        return self.handle

    def apply_(self, tensor, site):
        torch.ops.tokentrace.apply_patches_(tensor, self._h(), site)
        return tensor

    def advance_token(self):
        torch.ops.tokentrace.advance_token(self._h())

    def set_token(self, token):
        torch.ops.tokentrace.set_token(self._h(), token)

    def reset(self):
        """Counters, token and every row mask back to zero (no stale mask survives a run)."""
        torch.ops.tokentrace.reset_counters(self._h())

    def set_row_mask(self, slot, rows):
        """Row mask `slot` := rows (1-D bool/uint8 tensor, or a sequence of bools/ints; nonzero
        marks a row): the rows of dim 0 the slot's ("rows", slot) entries edit at the next
        applies. A CUDA table copies it on the current stream; not while capturing a graph."""
        if not isinstance(rows, torch.Tensor):
            rows = _rows_tensor(rows)
        if rows.dtype in (torch.bool, torch.uint8) and rows.dim() == 1:
            rows = rows.to("cpu", torch.uint8)  # anything else: the op's one-line error
        torch.ops.tokentrace.set_row_mask(self._h(), int(slot), rows)

    def counters(self):
        """fires/skips per entry, calls per site, the token; syncs a device table."""
        fires, skips, calls, token = torch.ops.tokentrace.table_counters(self._h())
        return {"fires": fires.tolist(), "skips": skips.tolist(), "site_calls": calls.tolist(),
                "token": token}

    def fires(self):
        per_entry = self.counters()["fires"]
        return sum(per_entry), per_entry

    def errors(self):
        return list(torch.ops.tokentrace.table_errors(self._h()))

    def validate(self, site, like):
        torch.ops.tokentrace.table_validate(self._h(), site, like)

    def free(self):
        if self.handle is not None:
            torch.ops.tokentrace.table_free(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter teardown: the op library may already be gone
            pass
