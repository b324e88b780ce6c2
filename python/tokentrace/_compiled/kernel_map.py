"""Which modules a compiled kernel came from (op records on a torch.compile'd model).

At compile time. While op records are on (ops=True, TOKENTRACE_OPS=1), Inductor is told to
profile its generated C++ kernels (config.cpp.enable_kernel_profile: each one opens a
RecordFunction named "graph_<id>_<kernel>", which the op observer records as an op call), its
graph caches are off for the trace (a graph loaded from a cache is not generated again, so its
kernels would not be seen here), and the function Inductor calls for each kernel it emits,
in the order the compiled wrapper calls them (debug.set_kernel_post_grad_provenance_tracing,
its provenance hook), is wrapped to note the kernel's name and the FX nodes it came from. Each
node's meta["nn_module_stack"] names the modules it was traced in; the innermost one is the
node's module. Nothing of this is set when op records are off: Inductor generates exactly what
it generates without tokentrace.

At read time (join). The calls of a compiled module have op children in the order the wrapper
ran them. A generated kernel is found by its name. A library kernel (extern_kernels.mm, a
fallback op) has no name of its own: it is the next library call of the same graph after the
last generated kernel seen (or before the next one, at the start of a call). Each kernel gets
the modules of its nodes; more than one is a `fused` kernel, attributed to all of them. An op
child of a compiled call that matches nothing (an eager op run between graphs, a graph whose
map was not recovered) is counted as the loss kind `compiled_unattributed`; regions that ran
with no graph of the map are named in meta "compiled_unmapped" (join.unmapped_regions).

Graphs compiled before the trace (recover(), precompiled.py). When the trace starts, the graphs
TorchDynamo has compiled and still caches are added to the map from what they keep: the
compiled function's generated source (the order of its kernels, the FX nodes Inductor names
in a comment before each library call) and TorchDynamo's GraphModule (those nodes'
nn_module_stack). Nothing is compiled again. On the CPU their C++ kernels were generated
without profiling: they open no RecordFunction, so op records never see them; their time is
their region's own and cannot be attributed. They are named per compile id in meta
"compiled_unrecorded" and left out of the map; the library calls (extern_kernels.addmm,
fallback ops), which op records see, are attributed. A graph of another backend (aot_eager),
or one whose source or TorchDynamo graph is not found, stays unmapped (counted and named).

The map is stored in the trace file's meta ("compiled_kernels", JSON:
{graph id: [[runtime name, [module paths relative to the compiled module] or null], ...]};
null: a recovered kernel whose FX nodes were not found, counted when it runs).
"""

import json
import re
import sys
from typing import Any

META_KEY = "compiled_kernels"
# {graph id: TorchDynamo compile id ("0/1")}: the compile each graph came from, which the
# "Torch-Compiled Region: 0/1" range around its run names (see join.py, graph rule).
REGIONS_KEY = "compiled_graph_regions"
LOSS_KIND = "compiled_unattributed"  # include/tokentrace/kinds.h

# {compile id: [generated C++ kernels]} of graphs recovered from compiled code (precompiled.py)
# whose kernels run without a record.
UNRECORDED_KEY = "compiled_unrecorded"

_state: dict[str, Any] = {"saved": None, "graphs": {}, "regions": {}, "compile": None,
                          "unrecorded": {}}


def _runtime_name(name, generated, graph_id, profiled):
    """The name a kernel the wrapper calls `name` is recorded under: a profiled C++ kernel's
    RecordFunction, the op of a library call, else (Triton) the GPU kernel's own name, which
    CUPTI reports (Triton names the kernel after its function)."""
    if generated:
        return name if graph_id is None or not profiled else f"graph_{graph_id}_{name}"
    if name.startswith("extern_kernels."):
        return "aten::" + name[len("extern_kernels."):]
    parts = name.removeprefix("torch.ops.").split(".")
    return "::".join(parts[:2]) if len(parts) >= 2 else name


# TorchDynamo's source of the compiled module: a local or global (L / G) and the subscripts
# that reach it: L['self'], L['args'][0] (a forward wrapped in a *args function, as
# transformers' deprecate_kwarg does), L['kwargs']['model'], G['model'].
_SOURCE = re.compile(r"^[LG](?:\[(?:'[^']*'|\"[^\"]*\"|\d+)\])+")


def module_path(fqn):
    """"L['self'].model.layers[0].mlp" (TorchDynamo's name) -> "model.layers.0.mlp", relative
    to the compiled module, whatever source names that module; "" is the compiled module."""
    s = re.sub(r"\._modules\[['\"]([^'\"]*)['\"]\]", r".\1", fqn)
    source = _SOURCE.match(s)
    if source is not None:
        s = s[source.end():]
    else:  # an older spelling without L/G ("self.model..."): its first part is the source
        s = s.partition(".")[2]
    s = re.sub(r"\[(\d+)\]", r".\1", s)
    s = re.sub(r"\[['\"]([^'\"]*)['\"]\]", r".\1", s)
    return s.strip(".")


def _node_module(node):
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""  # traced in the compiled module's own forward
    fqn = list(stack.values())[-1][0]
    return module_path(fqn)


def _noted(original, profiled):
    def note(node_schedule, kernel_name, is_extern=False):
        try:
            from torch._guards import CompileContext
            from torch._inductor.virtualized import V
            graph_id = V.graph.graph_id
            compile_id = CompileContext.current_compile_id()
            if compile_id is not None:
                _state["regions"][str(graph_id)] = str(compile_id)
            if is_extern:
                node = node_schedule.origin_node
                origins = [node] if node is not None else list(node_schedule.origins)
            else:
                origins = [o for sn in node_schedule if getattr(sn, "node", None) is not None
                           for o in sn.node.origins]
            modules = sorted({_node_module(o) for o in origins})
            _state["graphs"].setdefault(str(graph_id), []).append(
                [_runtime_name(kernel_name, not is_extern, graph_id, profiled), modules])
        except Exception:  # noqa: BLE001 - never break a compile; the kernel stays unmapped
            pass
        return original(node_schedule, kernel_name, is_extern)
    note.tokentrace_original = original
    return note


def _forget_on_reset():
    """torch._dynamo.reset() (torch.compiler.reset()) drops every compiled frame, and compile
    ids start again from 0/0: graphs noted before it never run again, and a new graph would
    share their compile ids (and, being the same model, their kernel names), so that the join
    could not tell them apart and would count every kernel. A reset while no trace is noting
    forgets them; one during a trace keeps them (that trace may have run them; what is then
    ambiguous is counted, never given to one graph). Kept on for the process, as the map is."""
    import torch._dynamo as dynamo
    reset = dynamo.reset
    if hasattr(reset, "tokentrace_original"):
        return

    def reset_and_forget(*args, **kwargs):
        out = reset(*args, **kwargs)
        if _state["saved"] is None:
            _state["graphs"].clear()
            _state["regions"].clear()
            _state["unrecorded"].clear()
        return out
    reset_and_forget.tokentrace_original = reset
    reset_and_forget.__doc__, reset_and_forget.__wrapped__ = reset.__doc__, reset
    dynamo.reset = reset_and_forget


def _install_inductor():
    _forget_on_reset()
    import torch._inductor.config as config
    import torch._inductor.debug as debug
    modules = [debug]
    for name in ("torch._inductor.codegen.cpp", "torch._inductor.codegen.triton"):
        try:
            __import__(name)
            modules.append(sys.modules[name])
        except Exception:  # noqa: BLE001 - a backend that does not import here emits nothing
            pass
    saved = {"config": (config.cpp.enable_kernel_profile, config.force_disable_caches),
             "patched": []}
    config.cpp.enable_kernel_profile = True
    config.force_disable_caches = True
    for module in modules:
        original = getattr(module, "set_kernel_post_grad_provenance_tracing", None)
        if original is not None and not hasattr(original, "tokentrace_original"):
            profiled = module.__name__.endswith(".cpp")  # enable_kernel_profile's ranges
            module.set_kernel_post_grad_provenance_tracing = _noted(original, profiled)
            saved["patched"].append((module, original))
    _state["saved"] = saved


def start():
    """Notes what Inductor compiles from now on. TorchDynamo already loaded (the model was
    compiled before the trace): now. Else on the first torch.compile call, so a trace of an
    eager model does not import the compiler (1-2 s). The map is kept for the process: graph
    ids are unique in it, and graphs compiled in an earlier trace run here again."""
    if _state["saved"] is not None or _state["compile"] is not None:
        return  # already noting (one trace at a time; the op observer refuses a second)
    if "torch._dynamo" in sys.modules:
        _install_inductor()
        recover()
        return
    import torch
    compile_fn = torch.compile

    def compile_and_note(*args, **kwargs):
        if _state["saved"] is None:
            _install_inductor()
        return compile_fn(*args, **kwargs)
    compile_and_note.__wrapped__ = compile_fn
    torch.compile = compile_and_note
    _state["compile"] = compile_fn


def stop():
    """Restores Inductor's settings and functions; the map noted so far is kept for write()."""
    import torch
    if _state["compile"] is not None:
        torch.compile = _state["compile"]
        _state["compile"] = None
    saved, _state["saved"] = _state["saved"], None
    if saved is None:
        return
    import torch._inductor.config as config
    config.cpp.enable_kernel_profile, config.force_disable_caches = saved["config"]
    for module, original in saved["patched"]:
        module.set_kernel_post_grad_provenance_tracing = original


def recover():
    """Adds to the map the graphs TorchDynamo has compiled and cached before now that were not
    noted at compile time (precompiled.py): keyed by Inductor's graph id, under the compile id
    of the cache entry that runs them. A graph not recovered stays out of the map (its regions
    are then unmapped: counted and named)."""
    from . import precompiled
    try:
        frames = precompiled.compiled_frames()
    except Exception:  # noqa: BLE001 - TorchDynamo's internals moved: nothing is recovered
        return
    noted = set(_state["regions"].values())
    for compile_id, fn in frames:
        if compile_id in noted:
            continue  # compiled under an ops=True trace: noted, kernels profiled
        try:
            found = precompiled.graph_map(fn, _node_module)
        except Exception:  # noqa: BLE001 - this graph stays unmapped
            continue
        if found is None:
            continue
        graph_id, entries, unrecorded = found
        key = str(graph_id) if graph_id is not None else f"pre:{compile_id}"
        if key in _state["graphs"]:
            continue
        _state["graphs"][key] = entries
        _state["regions"][key] = compile_id
        if unrecorded:
            _state["unrecorded"][compile_id] = unrecorded
        noted.add(compile_id)


def meta():
    """{META_KEY: json, REGIONS_KEY: json[, UNRECORDED_KEY: json]} of the kernels noted since
    start() and recovered from graphs compiled before it, or {} when nothing compiled."""
    if not _state["graphs"]:
        return {}
    out = {META_KEY: json.dumps(_state["graphs"]), REGIONS_KEY: json.dumps(_state["regions"])}
    if _state["unrecorded"]:
        out[UNRECORDED_KEY] = json.dumps(_state["unrecorded"])
    return out
