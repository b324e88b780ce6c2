"""The kernel map of graphs compiled before the trace started (see kernel_map.py), recovered
from what TorchDynamo and Inductor keep of a compiled graph; nothing is compiled again.

What is kept (torch 2.11). TorchDynamo keeps, per compiled frame, its cache entries (the
compile id, "0/1", that names the frame's "Torch-Compiled Region: 0/1" range, and the
transformed code, which calls the graph's compiled function, a global "__compiled_fn_<n>_..."
of the frame's module). That function (AOTAutograd's forward, wrapping Inductor's
CompiledFxGraph, whose attributes it carries) keeps
  - source_code: the generated wrapper module. Its call() runs the kernels in order; before
    each library call (extern_kernels.addmm, a fallback op) Inductor writes a comment
    "# Topologically Sorted Source Nodes: [linear_1, ...]" naming the TorchDynamo FX nodes it
    came from; a Triton kernel's definition has the same comment;
  - named_parameters, bound to TorchDynamo's GraphModule, whose nodes (by those names) carry
    meta["nn_module_stack"]: the modules;
  - fx_kwargs["graph_id"]: Inductor's graph id.

What it lacks. A C++ kernel compiled without config.cpp.enable_kernel_profile (the default;
kernel_map turns it on only for graphs compiled under an ops=True trace) opens no
RecordFunction: it runs unseen by op records, its time is its region's own time, and it cannot
be attributed from the CPU side at all; its definition has no source-node comment either.
Such kernels are left out of the recovered map and named (UNRECORDED_KEY). What op records see
of such a graph, its library calls, is mapped: a library call's comment lists its inputs'
nodes first (topological order) and the node it computes last, which is the node the
compile-time hook notes (the call's origin node), so the last one's module is the call's.
A Triton kernel (on a GPU) runs under its own name (CUPTI) and gets the modules of all its
comment's nodes, as a fused kernel does at compile time. A graph whose function is not
Inductor's (backend="aot_eager"), or whose source or TorchDynamo graph is not found, gets no
map: its regions stay unmapped (counted and named, join.unmapped_regions).
"""

import re
import sys

COMMENT = re.compile(r"#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[([^\]]*)\]")
_DEFINITION = re.compile(r"^(\w+) = async_compile\.(\w+)\(")
_EXTERN = re.compile(r"^\s*(?:[\w, ]+ = )?extern_kernels\.(\w+)\(")
_OP = re.compile(r"^\s*(?:[\w, ]+ = )?(?:torch\.ops\.(\w+)|(aten))\.(\w+)(?:\.\w+)?\(")
_GENERATED = re.compile(r"^\s*(?:[\w, ]+ = )?(\w+)(?:\.run)?\(")
_CALL = re.compile(r"^(\s*)def call\((?:self, )?args\):")


def _nodes(text):
    return [n.strip() for n in text.split(",") if n.strip()]


def parse(source):
    """([(kind, name, [source node names])] of the kernels the wrapper's call() runs, in
    order; kind "extern" (a library call, name "aten::addmm"), "triton" or "cpp" (a generated
    kernel by its name; "cpp" with profiled=True when its source opens a RecordFunction),
    {cpp kernel name: profiled})."""
    lines = source.splitlines()
    kernels, comment, cpp = {}, None, {}
    for i, line in enumerate(lines):
        found = COMMENT.search(line) if line.startswith("#") else None
        if found:
            comment = _nodes(found.group(1))
            continue
        d = _DEFINITION.match(line)
        if d:
            kind = "triton" if d.group(2).startswith("triton") else "cpp"
            kernels[d.group(1)] = (kind, comment or [])
            if kind == "cpp":
                end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("''')")),
                           len(lines))
                cpp[d.group(1)] = any("RecordFunction" in x for x in lines[i:end])
        if not line.startswith("#"):
            comment = None
    out, pending, body = [], None, None
    for line in lines:
        if body is None:
            start = _CALL.match(line)
            if start:
                body = len(start.group(1))
            continue
        if line.strip() and len(line) - len(line.lstrip()) <= body:
            break  # the end of call()
        stripped = line.strip()
        if stripped.startswith("#"):
            found = COMMENT.search(stripped)
            if found:
                pending = _nodes(found.group(1))
            continue
        if (e := _EXTERN.match(line)) is not None:
            out.append(("extern", "aten::" + e.group(1), pending or []))
        elif (o := _OP.match(line)) is not None:
            out.append(("extern", f"{o.group(1) or o.group(2)}::{o.group(3)}", pending or []))
        elif (g := _GENERATED.match(line)) is not None and g.group(1) in kernels:
            kind, nodes = kernels[g.group(1)]
            out.append((kind, g.group(1), nodes))
        else:
            continue
        pending = None
    return out, cpp


def _unwrap(fn, attr, want):
    """The first `attr` satisfying want() along fn's __wrapped__ chain."""
    for _ in range(16):
        value = getattr(fn, attr, None)
        if value is not None and want(value):
            return value
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return None
    return None


def graph_map(fn, module_of):
    """(graph id, entries, unrecorded) of a compiled function, or None when it is not an
    Inductor graph with its Python wrapper's source (a kernel in its call()) and TorchDynamo
    graph. entries: [[runtime name, paths or
    None]] (None: a node of the kernel not found in the graph; the kernel is then counted);
    unrecorded: the generated C++ kernels that run without a record. module_of(node) is the
    module path of a TorchDynamo node."""
    import torch.fx
    source = _unwrap(fn, "source_code", lambda v: isinstance(v, str))
    params = _unwrap(fn, "named_parameters",
                     lambda v: isinstance(getattr(v, "__self__", None), torch.fx.GraphModule))
    if source is None or params is None:
        return None
    fx_kwargs = _unwrap(fn, "fx_kwargs", lambda v: isinstance(v, dict)) or {}
    if fx_kwargs.get("cpp_wrapper"):
        return None  # its source is C++: not read here
    graph_id = fx_kwargs.get("graph_id")
    nodes = {n.name: n for n in params.__self__.graph.nodes}

    def paths(names):
        if not names or any(n not in nodes for n in names):
            return None
        return sorted({module_of(nodes[n]) for n in names})
    kernels, profiled = parse(source)
    if not kernels:
        return None  # nothing read of it (another wrapper's form): left unmapped, named
    entries, unrecorded = [], []
    for kind, name, names in kernels:
        if kind == "extern":
            entries.append([name, paths(names[-1:])])
        elif kind == "triton":
            entries.append([name, paths(names)])
        elif profiled.get(name) and graph_id is not None:
            entries.append([f"graph_{graph_id}_{name}", paths(names)])
        else:
            unrecorded.append(name)
    return graph_id, entries, unrecorded


def compiled_frames():
    """[(compile id, compiled function)] of the graphs of every frame TorchDynamo compiled
    that is still cached: its cache entries' compile ids and the functions their code calls
    (globals of the frame's module, looked up in the loaded modules)."""
    from torch._dynamo import convert_frame
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    wanted = []
    for ref in list(convert_frame.input_codes.seen):
        code = ref()
        if code is None:
            continue
        for entry in _debug_get_cache_entry_list(code):
            names = [n for n in entry.code.co_names if n.startswith("__compiled_fn")]
            wanted += [(str(entry.compile_id), n) for n in names]
    if not wanted:
        return []
    names = {n for _, n in wanted}
    found = {}
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for n in names & space.keys():
            found[n] = space[n]
    return [(cid, found[n]) for cid, n in wanted if n in found]
