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
"""

from ._api import load, record, trace
from ._errors import EditSkipWarning, ScalarEscapeWarning, TokentraceError
from ._patch_ops import add, clamp, fill, replace, scale, zero
from ._selectors import Selector, module
from ._trace import CallView, OutputMeta, Recording, SiteView, Trace, TokenRow
from .edits import BoundModel, EditSpec, call, every_call, load_spec, prefill, token, when

__version__ = "0.1.0"

__all__ = [
    "trace", "record", "load", "module", "Selector", "when", "prefill", "call", "token",
    "every_call", "zero", "fill", "add", "scale", "clamp", "replace", "Trace", "Recording",
    "SiteView", "CallView", "OutputMeta", "TokenRow", "EditSpec", "BoundModel",
    "ScalarEscapeWarning", "EditSkipWarning", "TokentraceError", "native_available", "load_spec",
]


def native_available():
    """(True, '') when the native extension is loaded, else (False, why)."""
    from . import _loader
    return (_loader.load() is not None, _loader.unavailable_reason())
