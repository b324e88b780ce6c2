"""tokentrace: what each module did at each generated token, on the GPU, and what it cost.

    import tokentrace as tt
    trace = tt.trace(lm.generate, prompt, input_kwargs={"max_new_tokens": 3})
    trace["transformer.h.1.mlp"].num_calls           # one call per generated token
    trace["transformer.h.1.mlp:1"].out.shape         # call 1 is the prefill
    rec = tt.record(lm, prompt, save=tt.module("transformer.h.*.mlp"), generate_kwargs={...})
    bound = tt.when(tt.module("model.layers.0.self_attn.v_proj"), tt.zero(index=(slice(None), 1)),
                    calls=tt.prefill).bind(lm)
    tt.load("trace.sqlite")

See docs/python.md.

The names below are imported on first use: `import tokentrace` itself imports neither torch nor
the native extension, so the `tokentrace` console script (tokentrace/__main__.py) starts in
milliseconds.
"""

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see of the names below (the package ships py.typed)
    from ._api import record, trace
    from ._common import Selector, input_at, module, output_at, register_container
    from ._edit import (
        add,
        call,
        clamp,
        every_call,
        fill,
        load_spec,
        mean_ablate,
        noise,
        prefill,
        project_off,
        project_onto,
        replace,
        scale,
        splice_module,
        steer,
        swap_with,
        token,
        when,
        zero,
        zero_ablate,
    )
    from ._errors import EditSkipWarning, ScalarEscapeWarning, TokentraceError
    from ._read import CallView, OutputMeta, Recording, SiteView, TokenRow, Trace, load, save
    from .edits import BoundModel, EditSpec
if TYPE_CHECKING:  # op-level sites: selectors over ATen ops, what trace.find_sites returns
    from ._common import contains, func, in_module, label, regex, where
    from ._read import OpLabel, OpSite, SiteTable

# name -> the submodule that defines it
_EXPORTS = {
    "load": "._read", "save": "._read", "record": "._api", "trace": "._api",
    "EditSkipWarning": "._errors", "ScalarEscapeWarning": "._errors",
    "TokentraceError": "._errors",
    "add": "._edit", "clamp": "._edit", "fill": "._edit",
    "replace": "._edit", "scale": "._edit", "zero": "._edit",
    "mean_ablate": "._edit", "noise": "._edit", "project_off": "._edit",
    "project_onto": "._edit", "splice_module": "._edit", "steer": "._edit",
    "swap_with": "._edit", "zero_ablate": "._edit",
    "Selector": "._common", "module": "._common", "register_container": "._common",
    "output_at": "._common", "input_at": "._common",
    "CallView": "._read", "OutputMeta": "._read", "Recording": "._read",
    "SiteView": "._read", "Trace": "._read", "TokenRow": "._read",
    "BoundModel": ".edits", "EditSpec": ".edits", "call": ".edits", "every_call": ".edits",
    "load_spec": ".edits", "prefill": ".edits", "token": ".edits", "when": ".edits",
}
# Op-level sites (TorchLens's selectors over ops, find_sites' table, the op label views).
_EXPORTS.update({
    "func": "._common", "in_module": "._common", "label": "._common", "contains": "._common",
    "where": "._common", "regex": "._common", "SiteTable": "._read", "OpSite": "._read",
    "OpLabel": "._read",
})

# Public submodules reached as attributes (TorchLens's tl.options, tl.intervention,
# tl.fastlog).
_SUBMODULES = ("options", "intervention", "fastlog")

__all__ = [
    "trace", "record", "load", "save", "module", "Selector", "when", "prefill", "call", "token",
    "every_call", "zero", "fill", "add", "scale", "clamp", "replace", "Trace", "Recording",
    "SiteView", "CallView", "OutputMeta", "TokenRow", "EditSpec", "BoundModel",
    "ScalarEscapeWarning", "EditSkipWarning", "TokentraceError", "native_available", "load_spec",
    "steer", "zero_ablate", "mean_ablate", "noise", "project_onto", "project_off", "swap_with",
    "splice_module", "register_container", "output_at", "input_at",
]
__all__ += ["func", "in_module", "label", "contains", "where", "regex", "SiteTable", "OpSite",
            "OpLabel"]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    if name in _SUBMODULES:  # tt.options, tt.intervention: TorchLens's namespaces
        return importlib.import_module(f".{name}", __name__)
    if name == "__version__":
        return _version()
    from ._common import MODULE_NAMES, missing
    raise missing(name, "module 'tokentrace'", MODULE_NAMES)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES) | {"__version__"})


def _version():
    """The version compiled into the native extension (pyproject.toml's, through CMake); the
    installed distribution's when the extension is not built."""
    from ._common import loader
    native = loader.load()
    if native is not None and hasattr(native, "__version__"):
        return native.__version__
    from importlib import metadata
    try:
        return metadata.version("tokentrace")
    except metadata.PackageNotFoundError:
        return "unknown (the native extension is not built)"


def native_available() -> "tuple[bool, str]":
    """(True, '') when the native extension is loaded, else (False, why)."""
    from ._common import loader
    return (loader.load() is not None, loader.unavailable_reason())
