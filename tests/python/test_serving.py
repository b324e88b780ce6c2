"""A serving engine's steps read back: trace.step_requests (each step's requests) and
trace.requests (each request's steps), on a hand-built file shaped as a vLLM worker writes it
(the tokens are calls of `vllm.step`; step_requests holds the rows)."""

import sqlite3

import tokentrace as tt
from tokentrace._common import schema, write_schema

# (token, request, prefill, decode, position): A's prompt of 4 in one step, B's of 5 in two
# chunks (a chunked prefill), then decodes; token 5 is a step with no request.
ROWS = [(1, "A", 4, 0, 0),
        (2, "A", 0, 1, 4), (2, "B", 3, 0, 0),
        (3, "A", 0, 1, 5), (3, "B", 2, 0, 3),
        (4, "B", 0, 1, 5)]


def _file(path, rows=ROWS, steps=5):
    con = sqlite3.connect(path)
    write_schema(con)
    con.executemany("INSERT INTO meta(key, value) VALUES (?,?)",
                    [("schema_version", str(schema().SCHEMA_VERSION)), ("pid", "1"),
                     ("kernel_mode", "off"), ("engine", "vllm"),
                     ("root", "vllm.step (vLLM engine steps); model LlamaForCausalLM")])
    con.executemany("INSERT INTO sites(id, name, kind, is_token) VALUES (?,?,?,?)",
                    [(1, "vllm.step", "root", 1), (2, "self", "module", 0)])
    calls = []
    for k in range(1, steps + 1):
        base = k * 10_000_000
        calls.append((2 * k - 1, 1, k, k, None, 7, base, base + 8_000_000))
        calls.append((2 * k, 2, k, k, 2 * k - 1, 7, base + 1_000_000, base + 6_000_000))
    con.executemany("INSERT INTO calls(id, site_id, k, token, parent_id, thread, cpu_begin_ns, "
                    "cpu_end_ns) VALUES (?,?,?,?,?,?,?,?)", calls)
    con.executemany("INSERT INTO step_requests(token, request, prefill_tokens, decode_tokens, "
                    "position) VALUES (?,?,?,?,?)", rows)
    con.commit()
    con.close()
    return str(path)


def test_each_steps_requests_and_each_requests_steps(tmp_path):
    trace = tt.load(_file(tmp_path / "serve.sqlite"))
    assert [tuple(r) for r in trace.step_requests] == ROWS
    assert [r for r in trace.step_requests if r.token == 2] == [(2, "A", 0, 1, 4),
                                                                (2, "B", 3, 0, 0)]
    requests = trace.requests
    assert list(requests) == ["A", "B"]
    a, b = requests["A"], requests["B"]
    assert (a.prefill_tokens, a.decode_tokens, a.first_step, a.last_step) == (4, 2, 1, 3)
    assert (b.prefill_tokens, b.decode_tokens, b.first_step, b.last_step) == (5, 1, 2, 4)
    assert a.first_token_step == 1 and b.first_token_step == 3  # B's prefill took two chunks


def test_a_trace_of_no_engine_has_no_requests(tmp_path):
    trace = tt.load(_file(tmp_path / "plain.sqlite", rows=[]))
    assert trace.step_requests == [] and trace.requests == {}
