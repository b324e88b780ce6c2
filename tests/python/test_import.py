"""`tokentrace import` against an independent reading of the same traces (import_truth.py).

Five real GPU traces (four torch.profiler, one Nsight Systems export; their README says where
each comes from) are imported, and every GPU record of every output file is checked against
the oracle: its call's site is the innermost range open on the launching thread when its
launch began, no record is lost or doubled, and the two losses (records without their launch,
records of launches outside every range) are the oracle's counts. The oracle is first checked
on its own against the numbers the traces' README states, so a wrong oracle fails there, not
as a disagreement with the import.

The traces are found in $TOKENTRACE_GPU_TRACES, else the repository's copy
(tests/data/gpu-traces), else <repo>/../shared/gpu-traces; without them those tests skip.
The tests of bad input need only the program (`tokentrace import`).
"""

import collections
import functools
import gzip
import json
import os
import shutil
import sqlite3
import subprocess

import pytest

import import_truth
from tt_testutil import ROOT

QWEN = "h100-qwen1.5-0.5b-forward.json.gz"
BERT = "h100-bert-small-forward.json.gz"
B200 = "b200-vllm-gpt-oss-prefill.json.gz"
V100 = "v100-cuda-graph-launches.json.gz"
NSYS = "h100-2gpu-nsys-export.sqlite"
TRACES = [QWEN, BERT, B200, V100, NSYS]
# What a crash of ours would leave in the output, besides the one line of an error.
CRASH_TEXT = ("Traceback", "terminate called", "what():", "Segmentation", "Aborted",
              "core dumped", "std::")


def _traces_dir():
    where = os.environ.get("TOKENTRACE_GPU_TRACES") or next(
        (d for d in (os.path.join(ROOT, "tests", "data", "gpu-traces"),
                     os.path.join(os.path.dirname(ROOT), "shared", "gpu-traces"))
         if os.path.isdir(d)), os.path.join(ROOT, "tests", "data", "gpu-traces"))
    if not os.path.isdir(where):
        pytest.skip("no recorded GPU traces at %s (set TOKENTRACE_GPU_TRACES)" % where)
    return where


def _trace(name):
    path = os.path.join(_traces_dir(), name)
    if not os.path.exists(path):
        pytest.skip("%s is not in %s" % (name, os.path.dirname(path)))
    return path


@functools.lru_cache(maxsize=None)
def _program_or_none():
    """The tokentrace program when it knows `import` (its --help exits 0), else None."""
    native = os.environ.get("TOKENTRACE_NATIVE_DIR")
    program = os.path.join(native, "tokentrace") if native else None
    if not (program and os.access(program, os.X_OK)):
        program = shutil.which("tokentrace")
    if program is None:
        return None
    try:
        helped = subprocess.run([program, "import", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return program if helped.returncode == 0 else None


def _program():
    program = _program_or_none()
    if program is None:
        pytest.skip("the tokentrace program is not built or has no `import` subcommand")
    return program


def _import(trace, out_dir):
    """Runs the import; {pid: output file}."""
    said = subprocess.run([_program(), "import", trace, "--out",
                           os.path.join(out_dir, "%p.sqlite")],
                          capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stdout + said.stderr
    return {int(name[:-len(".sqlite")]): os.path.join(out_dir, name)
            for name in sorted(os.listdir(out_dir)) if name.endswith(".sqlite")}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """{trace name: {pid: output file}}, each trace imported once for the module."""
    done = {}

    def get(name):
        if name not in done:
            trace = _trace(name)
            done[name] = _import(trace, str(tmp_path_factory.mktemp(name.split(".")[0])))
        return done[name]
    return get


def _read(path):
    """What one output file says: the kernels as the oracle keys them, with their call's site
    (None: call_id 0), and the losses, the sites, the calls, the meta."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        rows = con.execute(
            "SELECT k.correlation_id, k.gpu_begin_ns, k.stream, k.device, k.call_id, c.id, "
            "s.name, k.kind FROM kernels k LEFT JOIN calls c ON c.id = k.call_id "
            "LEFT JOIN sites s ON s.id = c.site_id").fetchall()
        records = collections.Counter()
        orphans = 0  # rows naming a call the file does not have
        for corr, begin, stream, device, call_id, found, site, _ in rows:
            if call_id and found is None:
                orphans += 1
            records[((corr, begin, stream, device), site if call_id else None)] += 1
        return {
            "records": records, "orphans": orphans,
            "kinds": collections.Counter(row[7] for row in rows),
            "losses": dict(con.execute("SELECT kind, count FROM losses")),
            "sites": {name: (kind, is_token) for name, kind, is_token in
                      con.execute("SELECT name, kind, is_token FROM sites")},
            "calls": con.execute("SELECT COUNT(*) FROM calls").fetchone()[0],
            "meta": dict(con.execute("SELECT key, value FROM meta")),
        }
    finally:
        con.close()


def _differences(want, got, limit=8):
    """The first records the oracle has and the file has not, and the other way round."""
    missing = list((want - got).items())[:limit]
    extra = list((got - want).items())[:limit]
    return "oracle only: %s\nfile only: %s" % (missing, extra)


# --- the oracle on its own -------------------------------------------------------------------

def test_the_oracle_on_the_shared_traces():
    """The numbers the traces' README states, read by the oracle (bert's README line says 58
    module ranges; the file holds 84 `nn.Module:` events, one per module call, all on one
    thread: the oracle is held to the file)."""
    qwen = import_truth.truth(_trace(QWEN))
    assert list(qwen) == [25286]
    q = qwen[25286]
    assert q.kinds["kernel"] == 1465 and q.launch_cats["cuda_runtime"] == 1921
    assert q.no_launch_kinds["kernel"] == 436  # launched before the profiler started
    assert q.no_launch == 436 + q.no_launch_kinds["memset"]
    assert sum(module for module in q.range_names.values()) == 316 and q.root == "Qwen2Model_0"
    assert len({key[2] for key, _ in q.records}) == 1 and q.outside_ranges == 0

    bert = import_truth.truth(_trace(BERT))[19392]
    assert bert.kinds["kernel"] == 60 and bert.no_launch == 0 and bert.outside_ranges == 0
    assert sum(bert.range_names.values()) == 84 and bert.root == "BertLMHeadModel_0"

    b200 = import_truth.truth(_trace(B200))
    assert list(b200) == [6583]
    b = b200[6583]
    assert b.kinds["kernel"] == 768 and b.launch_cats["cuda_driver"] > 0
    assert b.no_launch == 0 and b.root == "GptOssForCausalLM_0"

    v100 = import_truth.truth(_trace(V100))
    assert list(v100) == [2568503]
    v = v100[2568503]
    assert v.kinds["kernel"] == 9876 and v.root is None
    assert not any(v.range_names.values())  # user_annotation ranges only
    assert len(v.fan_out) == 12
    assert {name for name, _, _ in v.fan_out} == {"cudaGraphLaunch"}
    assert {n for _, _, n in v.fan_out} == {339, 502}
    assert len({thread for _, thread, _ in v.fan_out}) == 2

    nsys = import_truth.truth(_trace(NSYS))
    assert sorted(nsys) == [111, 112]
    assert sum(p.kinds["kernel"] for p in nsys.values()) == 3442
    assert sum(p.no_launch_kinds["kernel"] for p in nsys.values()) == 1810
    assert all(p.root is None for p in nsys.values())

    for name in TRACES:
        for pid, p in import_truth.truth(_trace(name)).items():
            # every record is counted once, under exactly one answer
            assert p.total == sum(p.kinds.values()) == sum(p.by_range().values())
            assert p.by_range()[import_truth.NO_LAUNCH] == p.no_launch
            assert p.by_range()[None] == p.outside_ranges
            print("%s pid %d: %d records, no launch %d, outside ranges %d (%d launches), "
                  "%d ranges, badly nested %d" % (name, pid, p.total, p.no_launch,
                                                  p.outside_ranges, p.launches_outside_ranges,
                                                  p.ranges, p.badly_nested))


def test_the_oracles_innermost_range():
    """The rule on a hand-made thread: largest begin, then smallest end; ends are inclusive."""
    R = import_truth.Range
    outer, inner = R("outer", 0, 100, True), R("inner", 10, 50, True)
    same_begin, late = R("short", 10, 20, True), R("late", 60, 100, True)
    held = import_truth.innermost([outer, inner, same_begin, late],
                                  [(5, "a"), (10, "b"), (20, "c"), (21, "d"), (55, "e"),
                                   (100, "f"), (101, "g")])
    assert {k: r and r.name for k, r in held.items()} == {
        "a": "outer", "b": "short", "c": "short", "d": "inner", "e": "outer", "f": "late",
        "g": None}
    assert import_truth.badly_nested([outer, inner, same_begin, late]) == 0
    assert import_truth.badly_nested([outer, R("x", 50, 150, False), R("y", 100, 120, False)]) \
        == 2  # x crosses outer's end; y only touches it
    assert import_truth.nvtx_site("aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], []]") == \
        "aten::mm"


# --- the import against the oracle -----------------------------------------------------------

def _check(truth, files, label):
    """Every record of the files against the oracle's truth of their trace."""
    # one file per process that launched GPU work, named by its pid, which its meta holds
    assert sorted(files) == sorted(truth), (files, list(truth))
    for pid, path in files.items():
        want, got = truth[pid], _read(path)
        assert got["meta"].get("pid") == str(pid)
        assert got["orphans"] == 0
        expected = collections.Counter()
        for (key, site), n in want.records.items():
            expected[(key, None if site is import_truth.NO_LAUNCH else site)] += n
        # record for record: each once, under the oracle's range (None: no call)
        assert got["records"] == expected, _differences(expected, got["records"])
        assert got["losses"].get("unknown_correlation", 0) == want.no_launch
        assert got["losses"].get("import_outside_ranges", 0) == want.outside_ranges
        # the kinds split the records as the oracle's (kernel, memcpy, memset) do
        assert sorted(got["kinds"].values()) == sorted(want.kinds.values())
        # a call per range, a site per range name: 'module' for nn.Module ranges, 'range'
        # for the others, the root's (whose calls are tokens) 'root'
        assert got["calls"] == want.ranges
        assert set(got["sites"]) == set(want.range_names)
        for site, (kind, is_token) in got["sites"].items():
            if site == want.root:
                assert (kind, is_token) == ("root", 1), site
            else:
                assert kind == ("module" if want.range_names[site] else "range"), site
                assert not is_token, site
        print("%s pid %d: %d records, unknown_correlation %d, import_outside_ranges %d, "
              "badly nested ranges %d" % (label, pid, want.total, want.no_launch,
                                          want.outside_ranges, want.badly_nested))


@pytest.mark.parametrize("name", TRACES)
def test_each_record_is_attributed_as_the_truth_says(name, imported):
    _check(import_truth.truth(_trace(name)), imported(name), name)


def _edges_trace():
    """A torch.profiler trace (times in us) at the edges of the rule, which the real traces
    never reach: ranges that begin together, a launch at a range's first and last instant,
    siblings that touch, a thread without ranges, a graph launch's fan-out, a record without
    its launch, launches outside every module range and outside every range."""
    def rng(name, ts, dur, cat="python_function", tid=7):
        if cat == "python_function":
            name = "nn.Module: " + name
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts,
                "dur": dur}

    def launch(corr, ts, tid=7, cat="cuda_runtime", name="cudaLaunchKernel"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts,
                "dur": 0.5, "args": {"correlation": corr}}

    def record(corr, ts, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": "k%d" % corr, "pid": 0, "tid": 7, "ts": ts,
                "dur": 0.25, "args": {"correlation": corr, "stream": 7, "device": 0}}
    return {"traceEvents": [
        rng("step", 90.0, 210.0, cat="user_annotation"),
        rng("Net_0", 100.0, 100.0), rng("Block_0", 110.0, 40.0), rng("Inner_0", 110.0, 20.0),
        rng("Next_0", 150.0, 30.0),
        launch(1, 110.0), launch(2, 130.0), launch(3, 140.0), launch(4, 150.0),
        launch(5, 250.0), launch(6, 350.0), launch(7, 120.0, tid=8),
        launch(8, 160.0, cat="cuda_driver", name="cuLaunchKernelEx"),
        launch(9, 170.0, name="cudaGraphLaunch"),
        record(1, 400.0), record(2, 401.0), record(3, 402.0, "gpu_memcpy"), record(4, 403.0),
        record(5, 404.0, "gpu_memset"), record(6, 405.0), record(7, 406.0), record(8, 407.0),
        record(9, 408.0), record(9, 409.0), record(9, 410.001), record(99, 411.0)]}


def test_the_edges_of_the_rule(tmp_path):
    trace = tmp_path / "edges.json"
    trace.write_text(json.dumps(_edges_trace()))
    truth = import_truth.truth(str(trace))
    p = truth[7]
    by_corr = {key[0]: site for (key, site) in p.records}
    assert by_corr == {1: "Inner_0", 2: "Inner_0", 3: "Block_0", 4: "Next_0", 5: "step",
                       6: None, 7: None, 8: "Next_0", 9: "Next_0", 99: import_truth.NO_LAUNCH}
    assert (p.no_launch, p.outside_ranges, p.launches_outside_ranges) == (1, 2, 2)
    assert p.root == "Net_0" and p.badly_nested == 0 and p.fan_out == [
        ("cudaGraphLaunch", (7, 7), 3)]
    out = tmp_path / "out"
    out.mkdir()
    _check(truth, _import(str(trace), str(out)), "edges")


# --- the live CUPTI path, driven by the same traces --------------------------------------------

def _replayer():
    """(cupti_replay, the shim, the fake libcupti, the fake libcuda) from the build, or skip."""
    native = os.environ.get("TOKENTRACE_NATIVE_DIR") or os.path.join(ROOT, "build")
    paths = [os.path.join(native, name) for name in (
        "cupti_replay", "libtokentrace.so", "libfake_cupti.so", "libfake_cuda.so")]
    if not all(os.path.exists(path) for path in paths):
        pytest.skip("the live replay needs the build's test programs (%s)" % ", ".join(paths))
    return paths


def _live(trace, pid, out, per_buffer=None):
    """One process of `trace` performed again under the preloaded shim, its calls as CUPTI
    callbacks and its GPU records in buffers of the fake libcupti (tests/import/cupti_replay.cc);
    returns what the shim wrote."""
    replay, shim, cupti, cuda = _replayer()
    env = dict(os.environ, LD_PRELOAD=shim, TOKENTRACE_CUPTI=cupti, TOKENTRACE_OUT=out,
               TOKENTRACE_KERNELS="full")
    args = [replay, trace, str(pid), cuda] + ([str(per_buffer)] if per_buffer else [])
    said = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stdout + said.stderr
    # the calls it could not make (a name CUPTI's headers lack): "unknown NAME N calls R records"
    return {line.split()[1]: (int(line.split()[2]), int(line.split()[4]))
            for line in said.stdout.splitlines() if line.startswith("unknown ")}


def _with_tokens(path):
    """Counter of ((correlation, begin, stream, device), site, token) over the file's records."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return collections.Counter(con.execute(
            "SELECT k.correlation_id, k.gpu_begin_ns, k.stream, k.device, s.name, k.token "
            "FROM kernels k LEFT JOIN calls c ON c.id = k.call_id "
            "LEFT JOIN sites s ON s.id = c.site_id").fetchall())
    finally:
        con.close()


def _check_live(trace, truth, imported, tmp_path, per_buffer=None):
    """Each process replayed live: its records as the truth says and as the import has them,
    token for token; nothing lost on the way."""
    for pid, imported_path in imported.items():
        live = str(tmp_path / ("live-%d.sqlite" % pid))
        unknown = _live(trace, pid, live, per_buffer)
        want, got = truth[pid], _read(live)
        expected = collections.Counter()
        for (key, site), n in want.records.items():
            expected[(key, None if site is import_truth.NO_LAUNCH else site)] += n
        assert got["records"] == expected, _differences(expected, got["records"])
        assert got["orphans"] == 0
        assert got["losses"].get("unknown_correlation", 0) == want.no_launch
        # nothing dropped, untimed or lost in between (records outside ranges are no loss live)
        assert set(got["losses"]) <= {"unknown_correlation"}, got["losses"]
        assert got["meta"]["kernel_mode"] == "full" and got["meta"]["kernels_status"] == ""
        # the live path and the import agree on each record's call and token
        live_rows, imported_rows = _with_tokens(live), _with_tokens(imported_path)
        assert live_rows == imported_rows, _differences(imported_rows, live_rows)
        # the same sites, of the same kinds (the root's calls are the tokens)
        assert got["sites"] == _read(imported_path)["sites"]
        # every call was made as its callback but those Kineto could not name (INVALID), and
        # none of them launched GPU work
        assert set(unknown) <= {"INVALID"} and all(
            records == 0 for _, records in unknown.values()), unknown
        print("live %s pid %d: %d records, %d calls" % (os.path.basename(trace), pid,
                                                        want.total, got["calls"]))


@pytest.mark.parametrize("name", TRACES)
def test_the_live_cupti_path_attributes_as_import_and_the_truth(name, imported, tmp_path):
    trace = _trace(name)
    _check_live(trace, import_truth.truth(trace), imported(name), tmp_path)


def _live_rows(name, tmp_path):
    """{pid: [(correlation, stream, site, thread of the launching call)]} of a shared trace
    replayed live."""
    trace = _trace(name)
    out = {}
    for pid in import_truth.truth(trace):
        path = str(tmp_path / ("%s-%d.sqlite" % (name.split(".")[0], pid)))
        _live(trace, pid, path)
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        out[pid] = con.execute(
            "SELECT k.correlation_id, k.stream, s.name, c.thread FROM kernels k "
            "LEFT JOIN calls c ON c.id = k.call_id LEFT JOIN sites s ON s.id = c.site_id"
        ).fetchall()
        con.close()
    return out


def test_the_live_path_on_what_only_real_streams_hold(tmp_path):
    """What hand-built records never had, each seen through the live path (the test above
    checks every record; this one checks that each of these is there to be checked)."""
    # CUDA-graph launches fan out: each of V100's 12 cudaGraphLaunch calls has its 339 or 502
    # records under its one correlation id, all in one call
    truth = import_truth.truth(_trace(V100))
    (pid, rows), = _live_rows(V100, tmp_path).items()
    per_launch = collections.defaultdict(list)
    for correlation, _, site, _ in rows:
        per_launch[correlation].append(site)
    fanned = sorted(len(sites) for sites in per_launch.values() if len(sites) > 1)
    assert fanned == sorted(n for _, _, n in truth[pid].fan_out) and len(fanned) == 12
    assert all(len(set(per_launch[c])) == 1 for c in per_launch if len(per_launch[c]) > 1)
    # several streams, and launches from several threads
    assert len({stream for _, stream, _, _ in rows}) > 1
    assert len({thread for _, _, site, thread in rows if site is not None}) > 1
    # driver launches (B200's cuLaunchKernelEx, beside runtime ones) are attributed as the
    # runtime's are: each of their records is in a range
    with gzip.open(_trace(B200), "rt") as f:
        driver = {e["args"]["correlation"] for e in json.load(f)["traceEvents"]
                  if e.get("cat") == "cuda_driver" and "correlation" in e.get("args", {})}
    (pid, rows), = _live_rows(B200, tmp_path).items()
    by_driver = [site for correlation, _, site, _ in rows if correlation in driver]
    assert len(by_driver) >= 200 and None not in by_driver
    # a deep queue: Qwen's 509 records launched before the profiler started are the live
    # path's unknown_correlation, with no call
    truth = import_truth.truth(_trace(QWEN))
    (pid, rows), = _live_rows(QWEN, tmp_path).items()
    launched = {c for c, _, site, _ in rows if site is not None}
    assert sum(1 for c, _, site, _ in rows if site is None and c not in launched) == \
        truth[pid].no_launch == 509


def test_the_live_path_at_the_edges_of_the_rule(tmp_path):
    trace = tmp_path / "edges.json"
    trace.write_text(json.dumps(_edges_trace()))
    out = tmp_path / "out"
    out.mkdir()
    imported = _import(str(trace), str(out))
    # one record per buffer: each arrives in its own buffer, handed back out of order
    _check_live(str(trace), import_truth.truth(str(trace)), imported, tmp_path, per_buffer=1)


# --- bad input: one line naming the file, exit status 1 --------------------------------------

def _gpu_free_trace():
    """A torch.profiler trace with a module range and a launch, but no GPU record."""
    return {"traceEvents": [
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Net_0", "pid": 7, "tid": 7,
         "ts": 10.0, "dur": 50.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
         "ts": 20.0, "dur": 2.0, "args": {"correlation": 1}}]}


def _bad_inputs(tmp_path):
    missing = tmp_path / "missing.json.gz"
    truncated = tmp_path / "truncated.json.gz"
    events = _gpu_free_trace()["traceEvents"] * 2000  # large enough that 1000 bytes cut it
    truncated.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode())[:1000])
    not_json = tmp_path / "notes.json"
    not_json.write_text("these are notes, not a trace\n")
    not_nsys = tmp_path / "other.sqlite"
    con = sqlite3.connect(not_nsys)
    con.execute("CREATE TABLE fruit(name TEXT, weight REAL)")
    con.execute("INSERT INTO fruit VALUES ('apple', 0.2)")
    con.commit()
    con.close()
    no_gpu = tmp_path / "cpu-only.json"
    no_gpu.write_text(json.dumps(_gpu_free_trace()))
    return {"missing": missing, "truncated gzip": truncated, "not JSON": not_json,
            "SQLite, no nsys export": not_nsys, "no GPU records": no_gpu}


@pytest.mark.parametrize("case", ["missing", "truncated gzip", "not JSON",
                                  "SQLite, no nsys export", "no GPU records"])
def test_bad_input_is_one_line_naming_the_file(case, tmp_path):
    program = _program()
    trace = _bad_inputs(tmp_path)[case]
    out = tmp_path / "out"
    out.mkdir()
    said = subprocess.run([program, "import", str(trace), "--out", str(out / "%p.sqlite")],
                          capture_output=True, text=True, timeout=60)
    text = (said.stdout + said.stderr).strip()
    assert said.returncode == 1, (said.returncode, text)
    assert len(text.splitlines()) == 1, text
    assert str(trace) in text or trace.name in text, text
    assert not any(crash in text for crash in CRASH_TEXT), text


@pytest.mark.parametrize("name, options, hint", [
    (BERT, [], None),  # module ranges: its forward is the token
    (V100, [], "torch.profiler.profile(..., with_stack=True)"),  # user_annotation ranges only
    (NSYS, [], "give --root NAME or --token-range REGEX"),
    (V100, ["--token-range", "ProfilerStep.*"], None),  # tokens asked for: nothing to say
])
def test_a_process_without_tokens_is_told_how_to_get_them(name, options, hint, tmp_path):
    """A profile recorded without module ranges (torch.profiler writes them only with its
    Python tracer: with_stack=True; with_modules=True alone has none) imports with every call
    in token 0; the import says so for each such process, with what would give tokens."""
    said = subprocess.run([_program(), "import", _trace(name), *options, "--out",
                           str(tmp_path / "%p.sqlite")], capture_output=True, text=True,
                          timeout=300)
    assert said.returncode == 0, said.stdout + said.stderr
    told = [line for line in said.stderr.splitlines() if "has no module ranges" in line]
    if hint is None:
        assert told == [], said.stderr
    else:
        pids = [line.split()[3] for line in said.stdout.splitlines()]  # "... process PID -> ..."
        assert len(told) == len(pids) and all(hint in line for line in told), said.stderr
        assert all(f"process {pid} of " in line for pid, line in zip(pids, told))
