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

from ._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the public names: type checkers import them (py.typed), lazy_face reads them
    from ._api import record, trace
    from ._bundle import Bundle, bundle
    from ._common import Selector, input_at, module, output_at, register_container
    from ._edit import (
        add,
        clamp,
        fill,
        mean_ablate,
        noise,
        project_off,
        project_onto,
        replace,
        scale,
        splice_module,
        steer,
        swap_with,
        zero,
        zero_ablate,
    )
    from ._errors import EditSkipWarning, ScalarEscapeWarning, TokentraceError
    from ._read import CallView, OutputMeta, Recording, SiteView, TokenRow, Trace, load, save
    from .edits import (
        BoundModel,
        EditSpec,
        call,
        every_call,
        load_spec,
        prefill,
        request_token,
        token,
        when,
    )
    from .options import to_disk
if TYPE_CHECKING:  # op-level sites: selectors over ATen ops, what trace.find_sites returns
    from ._common import (
        at_step,
        contains,
        followed_by,
        func,
        in_module,
        label,
        preceded_by,
        regex,
        where,
    )
    from ._read import OpLabel, OpSite, SiteTable

# Public submodules reached as attributes (TorchLens's tl.options, tl.intervention,
# tl.fastlog, tl.utils).
_SUBMODULES = ("options", "intervention", "fastlog", "utils")


def _otherwise(name):
    """What the names above lack: TorchLens's namespaces, __version__, or the error that says
    what to use instead of a TorchLens name."""
    if name in _SUBMODULES:  # tt.options, tt.intervention: TorchLens's namespaces
        return importlib.import_module(f".{name}", __name__)
    if name == "__version__":
        return _version()
    from ._common import MODULE_NAMES, missing
    raise missing(name, "module 'tokentrace'", MODULE_NAMES)


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


__getattr__, _face_dir = lazy_face(__name__, _otherwise)  # and __all__: the names above


def __dir__():
    return sorted(set(_face_dir()) | set(_SUBMODULES) | {"__version__"})
