"""A serving engine's steps read back: trace.step_requests (each step's requests) and
trace.requests (each request's steps), on a hand-built file shaped as a vLLM worker writes it
(the tokens are calls of `vllm.step`; step_requests holds the rows)."""

import sqlite3

import pytest

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


# --- the vLLM adapter on a stand-in of vLLM's model runner --------------------------------
class _Backend:
    """What the adapter asks of the native backend: sites, and push/pop of the step."""

    def __init__(self):
        self.events = []

    def site_kind(self, kind):
        return kind

    def site(self, name, kind):
        self.events.append(("site", name, kind))
        return 7

    def push(self, site_id):
        self.events.append(("push", site_id))

    def pop(self):
        self.events.append(("pop",))


class _New:
    def __init__(self, req_id, prompt, computed=0):
        self.req_id, self.prompt_token_ids, self.num_computed_tokens = req_id, prompt, computed


class _Cached:
    def __init__(self, ids=(), computed=()):
        self.req_ids, self.num_computed_tokens = list(ids), list(computed)


class _Output:
    def __init__(self, new=(), cached=None, scheduled=None, finished=()):
        self.scheduled_new_reqs = list(new)
        self.scheduled_cached_reqs = cached or _Cached()
        self.num_scheduled_tokens = dict(scheduled or {})
        self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())
        self.finished_req_ids = set(finished)


def _stand_in_vllm(monkeypatch):
    import sys
    import types

    class GPUModelRunner:
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            return None  # sample_tokens follows

        def sample_tokens(self, grammar_output):
            return "output"

    module = types.ModuleType("vllm.v1.worker.gpu_model_runner")
    module.GPUModelRunner = GPUModelRunner
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu_model_runner", module)
    return GPUModelRunner


def test_the_vllm_adapter_makes_each_step_a_token_and_writes_its_requests(tmp_path,
                                                                           monkeypatch):
    from tokentrace._record import VllmSteps
    runner_cls = _stand_in_vllm(monkeypatch)
    path = _file(tmp_path / "w.sqlite", rows=[], steps=0)
    backend = _Backend()
    steps = VllmSteps(backend, path)
    assert steps.install()
    runner = runner_cls()
    # step 1: A's prompt of 4; step 2: A decodes, B's prompt of 5 in a chunk of 3
    runner.execute_model(_Output(new=[_New("A", [1, 2, 3, 4])], scheduled={"A": 4}))
    runner.sample_tokens(None)
    runner.execute_model(_Output(new=[_New("B", [1] * 5)], cached=_Cached(["A"], [4]),
                                 scheduled={"B": 3, "A": 1}))
    runner.sample_tokens(None)
    assert backend.events == [("site", "vllm.step", "root"), ("push", 7), ("pop",),
                              ("push", 7), ("pop",)]
    # nothing scheduled, a request still in flight: no step, nothing written yet
    runner.execute_model(_Output(finished={"A"}))
    assert len(backend.events) == 5 and tt.load(path).step_requests == []
    # the last request finished: the rows go to the file now (a kill after this loses none)
    runner.execute_model(_Output(finished={"B"}))
    assert [tuple(r) for r in tt.load(path).step_requests] == [
        (1, "A", 4, 0, 0), (2, "B", 3, 0, 0), (2, "A", 0, 1, 4)]
    steps.remove()
    assert runner_cls.execute_model.__name__ == "execute_model"
    assert not hasattr(runner_cls.execute_model, "__wrapped__")


def test_a_vllm_step_that_raises_is_closed(tmp_path, monkeypatch):
    from tokentrace._record import VllmSteps
    runner_cls = _stand_in_vllm(monkeypatch)

    def broken(self, scheduler_output, intermediate_tensors=None):
        raise RuntimeError("the forward failed")
    runner_cls.execute_model = broken
    backend = _Backend()
    steps = VllmSteps(backend, _file(tmp_path / "x.sqlite", rows=[], steps=0))
    steps.install()
    with pytest.raises(RuntimeError, match="the forward failed"):
        runner_cls().execute_model(_Output(new=[_New("A", [1])], scheduled={"A": 1}))
    assert backend.events[-2:] == [("push", 7), ("pop",)]
