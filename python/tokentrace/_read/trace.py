"""Trace and Recording: read-only views over a SQLite trace file (every schema version the
extension reads, OLDEST_READABLE_SCHEMA to SCHEMA_VERSION; version 1 files have no call_inputs).

Reads are lazy: sites are loaded on open, each site's calls on first access, and GPU totals
(inclusive of child calls) in one pass when first asked for. The file may still be growing
(preload mode); reopen with tt.load to see newer rows.

What the readers of the other files (ops, op labels, serving, tt.save's copy) need of an
opened trace is its TraceState (state.py: the file, the site table, the outputs, the GPU
totals, the per-trace caches), handed to them as trace.state: they never import this file,
which imports them (inside the functions that use them, so that opening a trace imports only
what reading it needs).
"""

from __future__ import annotations

import json
import os
from typing import Any, NoReturn

from .._common import OP_EDIT_SITE, OP_SAVE_SITE
from .._errors import fail
from .._file import TraceFile, queries
from . import token_rows
from .state import OutputMeta, TraceState, numbers_in
from .token_rows import PagedTokenRows, TokenRow, TokenRows

TYPE_CHECKING = False
if TYPE_CHECKING:  # the annotations' names; tt.load and reading a trace import no torch
    from collections.abc import Iterator

    import torch

    from .._compiled import CompiledKernel, ModuleTotal
    from .inputs import CallInputs
    from .op_records import OpCall, OpTotal
    from .op_sites import SiteTable
    from .serving import Request, StepRequest


def _numbers_in(trace, table):
    """numbers_in (state.py) for a table of `trace`'s file."""
    return numbers_in(trace.path, table)


class CallView:
    """One call `site:k`."""

    def __init__(self, trace: Trace, site: str, row: tuple) -> None:
        self._trace = trace
        self.site = site
        self.id, self.k, self.token, self.parent_id, self.thread, b, e = row
        with _numbers_in(trace, "calls"):
            self.cpu_ms = ((e or b) - b) / 1e6

    @property
    def name(self) -> str:
        return f"{self.site}:{self.k}"

    @property
    def out(self) -> torch.Tensor | OutputMeta | None:
        """The output tensor when saved (save=), else OutputMeta(shape, dtype, path), or None."""
        return self._trace.state.output(self.id)

    @property
    def inputs(self) -> CallInputs:
        """{path: InputEntry or tensor} of what this call was given (see CallInputs)."""
        return self._trace._inputs(self)

    @property
    def ops(self) -> list[OpCall]:
        """The ATen ops this call ran, in order (ops=True; [] without): OpCall(name, k, out,
        module, cpu_ms, inner), outermost ops only."""
        from .op_records import ops_of
        return ops_of(self._trace.state, self)

    @property
    def gpu_ms(self) -> float | None:
        """GPU busy time of this call's kernels and its children's; None when not recorded."""
        totals = self._trace.state.gpu_totals()
        if totals is None:
            return None
        with _numbers_in(self._trace, "call_gpu"):
            return totals.get(self.id, (0, 0))[1] / 1e6

    @property
    def kernels(self) -> int | None:
        """Number of kernels of this call and its children; None when not recorded."""
        totals = self._trace.state.gpu_totals()
        if totals is None:
            return None
        return totals.get(self.id, (0, 0))[0]

    @property
    def kernel_list(self) -> list[tuple[str, float]]:
        """(kernel name, gpu_ms) of the kernels this call launched itself (kernels='full')."""
        rows = self._trace.file.ask("call_kernels", (self.id,))
        with _numbers_in(self._trace, "kernels"):
            return [(name, (e - b) / 1e6) for name, b, e in rows]

    def __repr__(self) -> str:
        return f"<call {self.name} token={self.token} cpu_ms={self.cpu_ms:.3f}>"


class SiteView:
    """Every call of one site."""

    def __init__(self, trace: Trace, site_id: int, name: str, kind: str) -> None:
        self._trace = trace
        self.id, self.name, self.kind = site_id, name, kind
        self._calls: list[CallView] | None = None

    @property
    def calls(self) -> list[CallView]:
        if self._calls is None:
            rows = self._trace.file.ask("site_calls", (self.id,))
            self._calls = [CallView(self._trace, self.name, r) for r in rows]
        return self._calls

    @property
    def num_calls(self) -> int:
        return len(self.calls)

    def __len__(self) -> int:
        return self.num_calls

    def __iter__(self) -> Iterator[CallView]:
        return iter(self.calls)

    def __getitem__(self, k: int) -> CallView:
        if not isinstance(k, int) or isinstance(k, bool):
            fail(f"calls are numbered by int k (1-based), got {k!r}")
        if not 1 <= k <= self.num_calls:
            fail(f"{self.name} has {self.num_calls} calls; k must be 1..{self.num_calls}, "
                 f"got {k}")
        return self.calls[k - 1]

    @property
    def out(self) -> torch.Tensor | OutputMeta | None:
        """The output of a site called once (TorchLens's site.out); a site called more often
        is asked for one call: trace['site:k'].out, or .outs for all."""
        n = self.num_calls
        if n != 1:
            fail(f"{self.name} has {n} calls, so it has no one .out: use "
                 f"trace['{self.name}:k'].out (k 1..{n}) or trace['{self.name}'].outs")
        return self.calls[0].out

    @property
    def outs(self) -> list[torch.Tensor | OutputMeta | None]:
        """Every call's .out, in call order."""
        return [c.out for c in self.calls]

    @property
    def cpu_ms(self) -> float:
        return sum(c.cpu_ms for c in self.calls)

    @property
    def gpu_ms(self) -> float | None:
        values = [c.gpu_ms for c in self.calls]
        known = [v for v in values if v is not None]
        return None if len(known) < len(values) else sum(known)

    def __repr__(self) -> str:
        return f"<site {self.name} ({self.kind}) num_calls={self.num_calls}>"


class Trace:
    """A recorded run. trace[site], trace['site:k'], trace.tokens, trace.report()."""

    halted = False  # TorchLens's trace.halted: tt.trace(..., halt=) ended the run early

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._compiled_join = None  # _compiled()
        # The opening rules (read-only, a missing -wal said, views refused, the versions this
        # build reads, the writer's summaries) are the file room's: _file/reading.py.
        self._file = TraceFile(self.path, stacklevel=3)
        self.meta = self._file.meta
        self.schema_version = self._file.schema_version  # the version that wrote the file
        # Never closed by its writer and no -wal beside it: a copy that may lack the rows
        # written after its last checkpoint, which no loss count covers.
        self.misses_its_wal = self._file.misses_its_wal
        # The writer's summaries (token_stats' per-token columns, site_stats) where the file
        # has them; else the calls are scanned, said once for a file written before them.
        self.has_summaries = self._file.has_summaries
        self._tables = self._file.tables
        self._tokens_sql = self._file.tokens_sql
        # The site table, the outputs, the GPU totals and the readers' caches (state.py):
        # what the readers of the other files (ops, labels, serving, tt.save) are handed.
        # Not a public API; tt.trace sets its model.
        self.state = TraceState(self._file, self.kernels_recorded)
        self._sites = self.state.sites
        self._site_order = self.state.site_order
        self._views: dict[str, SiteView] = {}
        self._input_rows = None

    # --- plumbing -----------------------------------------------------------------------
    @property
    def file(self) -> TraceFile:
        """The trace file as SQL (_file/reading.py): its tables, its queries under the opening
        rules. What the package's other readers (ops, serving, plot, tt.save) query through;
        not a public API."""
        return self._file

    def _q(self, sql, args=()):
        return self._file.q(sql, args)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- lookup -------------------------------------------------------------------------
    @property
    def sites(self) -> list[str]:
        """Site names in the order they were first seen (model order for hooked modules)."""
        return list(self._site_order)

    def __contains__(self, key: object) -> bool:
        return key in self._sites

    def __getitem__(self, key: str | int) -> Any:
        """trace['site'] (SiteView), trace['site:k'] (CallView); with op records, an op's
        TorchLens label: trace['relu_1_2'] (OpLabel, every pass), trace['relu_1_2:k'] and
        trace['relu_1:k'] (OpSite; see op_sites.py), its short name trace['relu_1'] and its
        ordinal trace[2] (the layer of step index 2), as TorchLens's."""
        if isinstance(key, int) and not isinstance(key, bool):
            from . import op_sites
            return op_sites.by_step(self.state, key, self._boundary)  # TorchLens's trace[7]
        if not isinstance(key, str):
            fail(f"index a trace with 'site' or 'site:k' (k 1-based), got {key!r}")
        if key in self._sites:
            return self._site(key)
        site, sep, k = key.rpartition(":")
        if sep and k.isdigit() and site in self._sites:
            return self._site(site)[int(k)]
        from . import op_sites
        if op_sites.looks_like_label(key):
            found = op_sites.lookup(self.state, key)
            if found is not None:
                return found
            fail(op_sites.unknown_label(self.state, key))
        if key in ("input_1", "output_1") and self._sites.get("self"):
            return self._boundary(key[:-2])  # TorchLens's model input and output layers
        short = op_sites.lookup_short(self.state, key)  # "conv2d_3": the layer, every pass
        if short is not None:
            return short
        self._unknown(site if (sep and k.isdigit()) else key)

    def _boundary(self, kind: str) -> Any:
        """TorchLens's input_1 / output_1: the root's first call's first input tensor (where
        its inputs were recorded) or its output."""
        from .op_sites import BoundaryLayer
        call = self._site("self")[1]
        if kind == "output":
            row = self.state._load_outputs().get(call.id)
            return BoundaryLayer(kind, call.out, row[0] if row else None)
        try:
            inputs = call.inputs
            paths = [p for p in inputs if hasattr(inputs[p], "shape")]
        except Exception:  # inputs not recorded (a file without them): no value to give
            return BoundaryLayer(kind, None)
        if not paths:
            return BoundaryLayer(kind, None)
        return BoundaryLayer(kind, inputs[paths[0]], "" if len(list(inputs)) == 1 else paths[0])

    @property
    def ops(self) -> dict[str, Any]:
        """TorchLens's trace.ops: {label: op} of every op the trace labelled (an op of one
        pass by its layer label, of several each pass by its pass-qualified label), with
        TorchLens's input_1 and output_1 (trace.input_layers, trace.output_layers)."""
        from .op_sites import op_sites
        table: dict[str, Any] = {"input_1": self._boundary("input")}
        for op in op_sites(self.state):
            table.setdefault(op.key, op)
        table["output_1"] = self._boundary("output")
        return table

    @property
    def layer_labels(self) -> list[str]:
        """TorchLens's trace.layer_labels: the keys of trace.ops, in order."""
        return list(self.ops)

    @property
    def input_layers(self) -> list[str]:
        return ["input_1"]

    @property
    def output_layers(self) -> list[str]:
        return ["output_1"]

    def find_sites(self, query: Any, *, max_fanout: int | None = None) -> SiteTable:
        """The sites a selector chooses, in the order they ran: op sites (OpSite, with ops
        recorded) and module calls (CallView); an empty SiteTable when none. max_fanout:
        more matches is an error (None, the default: no limit)."""
        from .op_sites import find_sites
        return find_sites(self.state, query, lambda name: self._site(name).calls, max_fanout)

    def resolve_sites(self, query: Any, *, strict: bool = False,
                      max_fanout: int | None = 8) -> SiteTable:
        """TorchLens's trace.resolve_sites: find_sites that must resolve: no site is an error,
        and more than max_fanout (8, TorchLens's default) too. strict= is taken (tokentrace's
        selectors are all portable)."""
        table = self.find_sites(query, max_fanout=max_fanout)
        if not len(table):
            fail(f"{query!r} resolves to no site of this trace (resolve_sites needs one; "
                 f"find_sites returns an empty table)")
        return table

    def _site(self, name):
        view = self._views.get(name)
        if view is None:
            sid, kind, _ = self._sites[name]
            view = self._views[name] = SiteView(self, sid, name, kind)
        return view

    def _unknown(self, name: str) -> NoReturn:
        import difflib
        close = difflib.get_close_matches(name, self._site_order, n=3, cutoff=0.5)
        hint = (f"did you mean {', '.join(repr(c) for c in close)}?" if close
                else f"the trace has {len(self._site_order)} sites, see trace.sites")
        fail(f"no site named {name!r} in this trace; {hint}")

    # --- tokens -------------------------------------------------------------------------
    @property
    def tokens(self) -> TokenRows | PagedTokenRows:
        """One TokenRow per token (root call); token 1 is the prefill. A read-only sequence
        (index, slice, iterate, len, == with a list) holding ~40 bytes a token; for a long
        run (more than PAGED_TOKENS tokens, in a finished file with the writer's token
        totals) its rows are read in pages as they are indexed or iterated, a bounded number
        of pages held."""
        gpu_on = self.kernels_recorded
        count = self._listed_tokens()
        if count is not None and count > token_rows.PAGED_TOKENS:
            return PagedTokenRows(TokenRow, self._token_page, count, gpu_on)
        return TokenRows(TokenRow, self._token_page(0, 0, -1), gpu_on)

    def _token_page(self, after: int, offset: int, limit: int) -> Iterator[tuple]:
        """The tokens after token `after` (skipping `offset`, at most `limit`; -1: all), as
        (token, cpu_ms, gpu_ms, kernels, escapes, finished)."""
        # The C++ readers' SELECT (the file room's tokens_sql); it counts CUDA-graph replays,
        # which have no token call of their own. Each token's generated id and text
        # (token_text: its first sequence's).
        rows = self._file.rows(*queries.token_page(
            self._tokens_sql, "token_text" in self._tables, max(after, 0), limit, offset))
        with _numbers_in(self, "calls or token_stats"):
            yield from (
                (t, (e - b) / 1e6 if b is not None and e is not None else 0.0,
                 (g or 0) / 1e6, kn or 0, esc or 0, not (b is not None and e is None), i, x)
                for t, b, e, kn, g, esc, i, x in rows)

    def _listed_tokens(self) -> int | None:
        """The tokens (> 0) from the writer's token totals (schema 5), read in one row; None
        where the file has none or is still being written (its count would run ahead)."""
        if not self.has_summaries or "token_totals" not in self._tables:
            return None
        if self._file.being_written():
            return None
        row = self._file.one_or_none(queries.QUERIES["listed_tokens"])
        if row is None:
            return None
        (count,) = row
        return count if isinstance(count, int) and count >= 0 else None

    @property
    def prompt(self) -> str | None:
        """The prompt's text (the first sequence's), when a tokenizer was known; else None."""
        if "token_text" not in self._tables:
            return None
        rows = self._file.ask("prompt_text")
        return rows[0][0] if rows else None

    @property
    def generated(self) -> str | None:
        """The text generated (the first sequence's tokens' texts joined), when a tokenizer
        was known; else None."""
        if "token_text" not in self._tables:
            return None
        rows = self._file.ask("generated_texts")
        texts = [t for (t,) in rows]
        return "".join(texts) if texts and all(t is not None for t in texts) else None

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    # --- kernels ------------------------------------------------------------------------
    @property
    def kernel_mode(self) -> str:
        return self.meta.get("kernel_mode", "off")

    @property
    def kernels_status(self) -> str:
        """Why kernels were not recorded ('' when they were)."""
        return self.meta.get("kernels_status", "")

    @property
    def kernels_recorded(self) -> bool:
        return self.kernel_mode != "off" and not self.kernels_status

    # --- outputs ------------------------------------------------------------------------
    @property
    def has_saved(self) -> bool:
        return bool(self.state.saved_ids())

    def _inputs(self, call):
        from .inputs import CallInputs
        if self.schema_version < 2 or "call_inputs" not in self._tables:
            fail(f"the inputs of {call.name} were not recorded: schema version "
                 f"{self.schema_version} files record no inputs")
        if call.site not in json.loads(self.meta.get("inputs_of", "[]")):
            fail(f"the inputs of {call.name} were not recorded: record them with "
                 f"inputs_of=tt.module({call.site!r}); the root's are always recorded")
        if self._input_rows is None:
            self._input_rows = {}
            for row in self._file.ask("call_inputs"):
                self._input_rows.setdefault(row[0], []).append(row[1:])
        return CallInputs(call.name, self._input_rows.get(call.id, ()), self.state.tensor)

    # --- escapes, losses, report ------------------------------------------------------
    @property
    def escape_sites(self) -> list[tuple[str, int]]:
        """[(location, reads)] of host reads seen from Python, most frequent first."""
        if "escape_sites" not in self._tables:
            return []
        return self._file.ask("escape_locations")

    def top_ops(self, token: int | None = None, n: int = 10) -> list[OpTotal]:
        """With ops=True: [OpTotal(name, calls, cpu_ms, gpu_ms, kernels)] of the ATen ops, over
        the run or one token, by GPU time then CPU time (see op_records.top_ops)."""
        from .op_records import top_ops
        return top_ops(self.state, token, n)

    def compiled_kernels(self, token: int | None = None) -> list[CompiledKernel]:
        """With ops=True on a torch.compile'd model: [CompiledKernel(call_id, token, name,
        modules, fused, cpu_ns)], each kernel Inductor generated (or library call it made) that
        ran, with the module sites it came from (see _compiled/kernel_map.py). Op calls of
        compiled calls that no kernel explains are counted in losses["compiled_unattributed"].
        """
        kernels, _ = self._compiled()
        return [k for k in kernels if token is None or k.token == token]

    def compiled_modules(self, token: int | None = None) -> list[ModuleTotal]:
        """[ModuleTotal(module, kernels, fused, cpu_ms, gpu_ms)] of compiled_kernels() per
        module, over the run or one token, by GPU then CPU time; a fused kernel counts towards
        each of its modules."""
        from .._compiled import module_totals
        kernels, _ = self._compiled()
        return module_totals(kernels, self.state.gpu_totals(), token)

    def _compiled(self):
        """The compiled-kernel join of this file, made once (the file does not change)."""
        if self._compiled_join is None:
            from .._compiled import join_kernels
            self._compiled_join = join_kernels(self._q)
        return self._compiled_join

    @property
    def losses(self) -> dict[str, int]:
        if "losses" not in self._tables:
            return {}
        return {k: n for k, n in self._file.ask("losses_by_kind") if n}

    def report(self, top: int = 15) -> str:
        """The per-token report of `tokentrace report FILE` (one implementation, in C++: tokens,
        prefill vs decode, top sites by GPU then CPU self time, losses), followed by where the
        host read device values."""
        from .report import render_report
        return render_report(self.path, self.escape_sites, top)

    # --- TorchLens's names ----------------------------------------------------------------
    @property
    def num_ops(self) -> int:
        """TorchLens's trace.num_ops: the ops the run recorded, one per labelled tensor
        (trace.find_sites(tt.where(lambda op: True)) lists them); op records must be on."""
        from .op_sites import op_sites
        if not any(kind == "op" for _, kind, _ in self._sites.values()):
            fail("this trace has no op records, so no ops to count: trace without ops=False "
                 "(tt.trace records them by default; tt.record with ops=True)")
        return len(op_sites(self.state))

    @property
    def annotations(self) -> dict[str, Any]:
        """TorchLens's trace.annotations: {"episode": {"header": {...}, "rows": [...]}}, the
        episode's ledger, where each root call (token) is a step: rows of episode_step (from
        0), role ("prefill" for the first, then "decode"), status ("complete", or
        "interrupted" for a call that never returned), coord ({"member_call_index": k}),
        step_output (the generated token id where known; for episode=, as TorchLens, the
        root's integer output's last positions, one a step) and cpu_ms."""
        tokens = list(self.tokens)
        declared = getattr(self, "_episode", None) or {}
        header = {
            "capture_kind": "episode",
            "stepped_module": declared.get("stepped_module", "self"),
            "n_steps_declared": declared.get("n_steps"),
            "n_steps": len(tokens),
            "token_feed": "open",
        }
        evidence = declared.get("step_outputs")  # from the root's output, episode= runs
        rows = [{"episode_step": i, "role": "prefill" if i == 0 else "decode",
                 "status": "complete" if t.finished else "interrupted",
                 "coord": {"member_call_index": t.token},
                 "step_output": evidence[i] if evidence is not None else t.id,
                 "cpu_ms": t.cpu_ms}
                for i, t in enumerate(tokens)]
        return {"episode": {"header": header, "rows": rows}}

    def cleanup(self) -> None:
        """TorchLens's trace.cleanup(): lets go of what the trace holds (the file, its
        caches, the tensors read); the file stays on disk (tt.load opens it again)."""
        self.state.cache.clear()
        self._views.clear()
        self._input_rows = None
        self.close()

    def run(self, model: Any = None, inputs: Any = None, input_kwargs: Any = None, *,
            fast: bool = False) -> Trace:
        """TorchLens's trace.run(model, inputs): the recorded capture run again on new inputs,
        with the same save=, sites=, edits (intervene=) and options, its saved sites refreshed:
        this Trace then reads the new run (a new file; trace.path says which). model: the
        model (or function) to run, by default the one traced; fast= is accepted (every
        tokentrace run is the model's own forward with hooks). trace.last_run says what ran."""
        capture = getattr(self, "_capture", None)
        if capture is None:
            fail("trace.run() reruns a tt.trace capture of this process; this trace has no "
                 "model to run (opened with tt.load, or made by tt.record): call "
                 "tt.trace(model, inputs, ...)")
        if not isinstance(fast, bool):
            fail(f"trace.run(fast=) takes True or False, got {fast!r}")
        fn, arguments = capture
        fresh = arguments["rerun"](model if model is not None else fn, inputs, input_kwargs)
        keep = {"_capture": capture}
        self.close()
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        self.__dict__.update(keep)
        self.last_run = {"engine": "guarded_fast", "fast_refused": None, "path": self.path,
                         "tokens": self.num_tokens}
        return self

    def __getattr__(self, name: str) -> Any:
        # only for names a Trace lacks: TorchLens's trace methods get a message that says so
        from .._common import TRACE_METHODS, missing
        raise missing(name, type(self).__name__, TRACE_METHODS)

    @property
    def step_requests(self) -> list[StepRequest]:
        """A serving engine's steps (vLLM): one row per request a step computed tokens for
        (token = the step), in step order; [] for other traces."""
        from .serving import step_requests
        return step_requests(self.state)

    @property
    def requests(self) -> dict[str, Request]:
        """A serving engine's requests: {request id: Request(steps, prefill_tokens,
        decode_tokens, first_step, first_token_step, last_step)}; {} for other traces."""
        from .serving import requests
        return requests(self.state)

    def summary(self) -> str:
        """One row per called site: kind, calls, CPU ms, GPU ms and the first output's shape
        (tokentrace's form of TorchLens's trace.summary(); report() is the per-token view)."""
        from .saving import summary
        return summary(self.path, self.num_tokens, self.kernels_recorded,
                       [self._site(name) for name in self.sites])

    def __repr__(self) -> str:
        return (f"<tokentrace.Trace {os.path.basename(self.path)}: {len(self._sites)} sites, "
                f"{self.num_tokens} tokens>")


class Recording(Trace):
    """What tt.record kept: rec[site] (every step), rec['site:k'].out (the tensor), rec.steps."""

    @property
    def steps(self) -> int:
        """The number of steps (tokens) recorded."""
        return self.num_tokens

    @property
    def n_records(self) -> int:
        """TorchLens's recording.n_records: the saved outputs it holds."""
        return len(self.state.saved_ids())

    def to_trace(self) -> Trace:
        """TorchLens's recording.to_trace(): this recording as a Trace (the same file; a
        Recording already is one, with steps and saved_sites besides)."""
        trace = Trace(self.path)
        for name in ("_capture", "_episode"):
            if name in self.__dict__:
                trace.__dict__[name] = self.__dict__[name]
        return trace

    @property
    def saved_sites(self) -> list[str]:
        ids = self.state.saved_ids()
        if not ids:
            return []
        names = {sid: n for n, (sid, _, _) in self._sites.items()}
        found = {r[0] for r in self._file.ask("sites_of_saved_calls")}
        # The copies of saved op outputs are calls of OP_SAVE_SITE; the ops are the sites.
        return [names[s] for s in sorted(found) if names[s] not in (OP_SAVE_SITE, OP_EDIT_SITE)]

    def __repr__(self) -> str:
        return (f"<tokentrace.Recording {os.path.basename(self.path)}: {self.steps} steps, "
                f"saved {self.saved_sites}>")


# Here, next to Trace, so that tt.load (and `tokentrace plot`) never import torch: reading a
# trace of a long run costs what its SQL costs, not torch's import (~0.5 GB, seconds).
def load(path: str | os.PathLike[str]) -> Trace:
    """Opens a trace file (from tt.trace, tt.record or `tokentrace run`) as a Trace."""
    if not isinstance(path, (str, os.PathLike)):
        fail(f"load() takes a path to a .sqlite trace file, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        fail(f"no trace file at {path}; pass the path printed by `tokentrace run` or trace.path")
    trace_obj = Trace(path)
    if trace_obj.has_saved:
        return Recording(path)
    return trace_obj


def save(trace: Trace, path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
    """Copies `trace` (from tt.trace, tt.record or tt.load) and its saved tensors to `path`
    (a .sqlite file; its shards go beside it); returns the new path, which tt.load opens."""
    if not isinstance(trace, Trace):
        fail(f"tt.save(trace, path) takes a trace from tt.trace, tt.record or tt.load, got "
             f"{type(trace).__name__}")
    from .saving import save_trace
    return save_trace(trace.state, path, overwrite)
