"""Helpers shared by the Python layer's tests (imported as `tt_testutil`, not from conftest,
so that running tests/python together with tests/torch_op, which has its own conftest, works)."""

import glob
import json
import os
import re
import sqlite3
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)


def make_trace_file(path, *, kernels=True, saved=None):
    """A schema-v1 file written by hand (tables from the one schema, src/store/schema.sql,
    through the extension), as the shim would: root `self` with two tokens,
    `layer` called once per token, `layer.mlp` twice per token (re-entrant numbering)."""
    con = sqlite3.connect(path)
    from tokentrace._file import write_schema
    write_schema(con)
    meta = {"schema_version": "1", "kernel_mode": "full" if kernels else "off",
            "kernels_status": "" if kernels else "kernel mode off", "pid": "1"}
    con.executemany("INSERT INTO meta VALUES (?,?)", meta.items())
    con.executemany("INSERT INTO sites VALUES (?,?,?,?)",
                    [(1, "self", "root", 1), (2, "layer", "module", 0),
                     (3, "layer.mlp", "module", 0)])
    calls = []
    cid = 0
    t0 = 1_000_000
    for tok in (1, 2):
        base = t0 + (tok - 1) * 10_000_000
        root = cid = cid + 1
        calls.append((root, 1, tok, tok, None, 7, base, base + 9_000_000))
        layer = cid = cid + 1
        calls.append((layer, 2, tok, tok, root, 7, base + 1_000_000, base + 8_000_000))
        for j in range(2):
            cid += 1
            calls.append((cid, 3, 2 * (tok - 1) + j + 1, tok, layer, 7,
                          base + 2_000_000 + j * 2_000_000, base + 3_000_000 + j * 2_000_000))
    con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?)", calls)
    if kernels:
        con.execute("INSERT INTO strings VALUES (1, 'gemm_kernel')")
        gpu = [(c[0], 1, 500_000, c[6], c[6] + 500_000) for c in calls if c[1] == 3]
        gpu += [(c[0], 2, 250_000, c[6], c[6] + 250_000) for c in calls if c[1] == 2]
        con.executemany("INSERT INTO call_gpu VALUES (?,?,?,?,?,0)", gpu)
        con.executemany("INSERT INTO kernels VALUES (?,?,1,0,0,7,?,?,0,0,0)",
                        [(c[0], c[3], c[6], c[6] + 500_000) for c in calls if c[1] == 3])
        con.executemany("INSERT INTO token_stats(token, kernels, gpu_busy_ns, escapes) "
                        "VALUES (?,?,?,?)", [(1, 6, 1_250_000, 2), (2, 4, 1_250_000, 1)])
        con.executemany("INSERT INTO escapes VALUES (?,?,7,?,'sync')",
                        [(1, 1, 1), (2, 1, 2), (5, 2, 3)])
    con.execute("INSERT INTO losses VALUES ('ring_full', 3)")
    con.executemany("INSERT INTO call_outputs VALUES (?,?,?,?)",
                    [(c[0], "", json.dumps([1, 5 if c[3] == 1 else 1, 8]), "float32")
                     for c in calls if c[1] == 3])
    con.commit()
    con.close()
    return path


def signal_when_ready(args, sig, *, env, cwd, ready="READY", timeout=120):
    """Runs `args`, sends `sig` once its stdout printed a line with `ready`, and returns
    (returncode, the rest of stdout, stderr); the process is killed if it outlives `timeout`,
    and the failure then says where each of its threads was (state, wait channel, signal
    masks: a signal left blocked or pending shows there)."""
    import subprocess
    # The job starts with `sig` at its default, as one run from a terminal does: a runner
    # that started the tests in the background (`cmd &` in a script) hands them SIGINT
    # ignored, and Python, finding it ignored, never makes it a KeyboardInterrupt. A small
    # Python trampoline puts it back and execs the job (preexec_fn is unsafe with threads).
    # (SIGKILL cannot be caught, nor its disposition set: nothing to put back.)
    reset = ("import os, signal, sys\n"
             "if int(sys.argv[1]) != signal.SIGKILL: signal.signal(int(sys.argv[1]), "
             "signal.SIG_DFL)\n"
             "os.execvp(sys.argv[2], sys.argv[2:])")
    proc = subprocess.Popen([sys.executable, "-c", reset, str(int(sig)), *args], env=env,
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if ready in line:
                break
        proc.send_signal(sig)
        try:
            rest, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{args[0]} outlived {timeout} s after signal {sig}:\n"
                                 f"{_threads_of(proc.pid)}") from None
    finally:
        proc.kill()
    return proc.returncode, rest, err


def _threads_of(pid):
    """One line per thread of process `pid`: name, state, wait channel, signal masks."""
    keep = ("Name", "State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    lines = []
    for task in sorted(glob.glob(f"/proc/{pid}/task/*")):
        try:
            with open(os.path.join(task, "status")) as f:
                status = [line for line in f.read().splitlines() if line.startswith(keep)]
            with open(os.path.join(task, "wchan")) as f:
                status.append("wchan:" + f.read().strip())
        except OSError:
            continue
        lines.append(" | ".join(s.replace("\t", " ") for s in status))
    return "\n".join(lines) or "(no /proc entries)"


_DOCS_FENCE = re.compile(r"```python\n(# docs-test: (?:needs=(\w+) )?expected=(.*?)\n.*?)```",
                         re.S)


def doc_blocks():
    """The code blocks of README.md and docs/*.md that start with `# docs-test: [needs=WHAT]
    expected=...`, as (path, first line, code, expected text, needs or None). A block that
    needs=vllm runs in the vLLM environment (tests/vllm), the others in tests/python."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                             "*.md")))
    for path in files:
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8").read()
        for m in _DOCS_FENCE.finditer(text):
            line = text[:m.start()].count("\n") + 2
            yield path, line, m.group(1), m.group(3), m.group(2)


def run_doc_block(path, line, code, expected):
    """Runs one docs block in a fresh namespace (its line numbers as in the file); it must
    leave RESULT == expected."""
    import ast
    import warnings
    namespace = {"__name__": "__docs_test__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)
    assert "RESULT" in namespace, f"{path}:{line} sets no RESULT"
    assert namespace["RESULT"] == ast.literal_eval(expected)


def add_rows_by_hand(path, *, meta=None, losses=None, **tables):
    """Adds rows to a hand-made trace file as the writer would (tests that fabricate files; the
    package hands its rows to the session's writer instead, _common/store.py): `tables` maps a
    table to tuples in _common.ROW_COLUMNS' order or to {column: value} dicts; `losses` are
    added to the file's counts; `meta` is upserted."""
    from tokentrace._common import ROW_COLUMNS
    con = sqlite3.connect(path)
    with con:
        for table, rows in tables.items():
            for row in rows:
                names = list(row) if isinstance(row, dict) else list(ROW_COLUMNS[table])
                values = list(row.values()) if isinstance(row, dict) else list(row)
                con.execute(f"INSERT INTO {table}({', '.join(names)}) VALUES "
                            f"({', '.join('?' * len(names))})", values)
        for key, value in (meta or {}).items():
            con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)", (key, str(value)))
        for kind, count in (losses or {}).items():
            if count:
                con.execute("INSERT INTO losses(kind, count) VALUES (?,?) ON CONFLICT(kind) "
                            "DO UPDATE SET count = count + excluded.count", (kind, count))
    con.close()
