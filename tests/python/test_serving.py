"""A serving engine's steps read back: trace.step_requests (each step's requests) and
trace.requests (each request's steps), on a hand-built file shaped as a vLLM worker writes it
(the tokens are calls of `vllm.step`; step_requests holds the rows)."""

import sqlite3

import pytest
import torch

import tokentrace as tt
from tokentrace._common import schema
from tokentrace._file import write_schema

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
@pytest.fixture
def writer(tmp_path):
    """A recording session (in-process, kernels off) whose writer takes the rows the adapters
    hand over, as in a traced engine; read() commits them and loads its file."""
    from tokentrace._common import loader
    native = loader.load()
    path = str(tmp_path / "writer.sqlite")
    native.start(path, "off", None)

    class Writer:
        def read(self):
            native.flush()
            return tt.load(path)

    try:
        yield Writer()
    finally:
        native.stop()


class _Backend:
    """A backend that numbers tokens as the recorder does: a root site's call opened with no
    token open is a new token; every other call is in the open one."""

    def __init__(self):
        self.events, self.names, self.open, self.token = [], {}, [], 0

    def site_kind(self, kind):
        return kind

    def site(self, name, kind):
        self.names[len(self.names) + 1] = (name, kind)
        return len(self.names)

    def push(self, site_id):
        name, kind = self.names[site_id]
        if kind == "root" and not any(k == "root" for _, k in self.open):
            self.token += 1
        self.open.append((name, kind))
        self.events.append(("push", name))

    def pop(self):
        self.events.append(("pop", self.open.pop()[0]))

    def current(self):
        return (len(self.open), self.token if self.open else 0)


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
                                                                           monkeypatch, writer):
    from tokentrace._engines import VllmSteps
    runner_cls = _stand_in_vllm(monkeypatch)
    backend = _Backend()
    steps = VllmSteps(backend, None)
    assert steps.install()
    runner = runner_cls()
    # step 1: A's prompt of 4; step 2: A decodes, B's prompt of 5 in a chunk of 3
    runner.execute_model(_Output(new=[_New("A", [1, 2, 3, 4])], scheduled={"A": 4}))
    runner.sample_tokens(None)
    runner.execute_model(_Output(new=[_New("B", [1] * 5)], cached=_Cached(["A"], [4]),
                                 scheduled={"B": 3, "A": 1}))
    runner.sample_tokens(None)
    assert backend.names == {1: ("vllm.step", "root")}
    assert backend.events == [("push", "vllm.step"), ("pop", "vllm.step")] * 2
    # a step's rows went to the writer as the step opened: committed with the step
    assert [tuple(r) for r in writer.read().step_requests] == [
        (1, "A", 4, 0, 0), (2, "B", 3, 0, 0), (2, "A", 0, 1, 4)]
    # nothing scheduled: no step, no rows
    runner.execute_model(_Output(finished={"A"}))
    runner.execute_model(_Output(finished={"B"}))
    assert len(backend.events) == 4 and len(writer.read().step_requests) == 3
    assert writer.read().meta["engine_steps"] == "2"  # handed when the engine went idle
    steps.remove()
    assert runner_cls.execute_model.__name__ == "execute_model"
    assert not hasattr(runner_cls.execute_model, "__wrapped__")


def test_a_vllm_step_that_raises_is_closed(tmp_path, monkeypatch):
    from tokentrace._engines import VllmSteps
    runner_cls = _stand_in_vllm(monkeypatch)

    def broken(self, scheduler_output, intermediate_tensors=None):
        raise RuntimeError("the forward failed")
    runner_cls.execute_model = broken
    backend = _Backend()
    steps = VllmSteps(backend, _file(tmp_path / "x.sqlite", rows=[], steps=0))
    steps.install()
    with pytest.raises(RuntimeError, match="the forward failed"):
        runner_cls().execute_model(_Output(new=[_New("A", [1])], scheduled={"A": 1}))
    assert backend.events[-2:] == [("push", "vllm.step"), ("pop", "vllm.step")]



def test_a_model_served_by_model_runner_v2_is_said_in_one_line_and_refuses_request_rules(
        monkeypatch):
    """vLLM's Model Runner V2 (its default where Triton runs, as on GPUs) is not followed: a
    model it calls is no engine worker's (each model call a token), which the recording says
    in one line, and a rule naming requests stops with that reason, not the generic one. A
    model the V1 runner calls, with both modules loaded (a GPU worker imports both), is."""
    import sys
    import types

    from tokentrace._edit import EditHooks
    from tokentrace._engines import not_served_why, serving, worker_adapter
    v1_cls = _stand_in_vllm(monkeypatch)

    class GPUModelRunner:  # V2's
        def execute_model(self, scheduler_output, dummy_run=False):
            return self.call(self.model)

        def call(self, fn):
            return fn()

    module = types.ModuleType("vllm.v1.worker.gpu.model_runner")
    module.GPUModelRunner = GPUModelRunner
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu.model_runner", module)
    model = type("LlamaForCausalLM", (torch.nn.Sequential,),
                 {"__module__": "vllm.model_executor.models.llama"})(torch.nn.Linear(4, 4))
    said = []

    def attach():  # what the recording and the edits ask at the model's first call
        adapter = worker_adapter(model, _Backend(), None, said.append)
        return adapter, serving(model), not_served_why(model)

    runner = GPUModelRunner()
    runner.model = attach
    adapter, served, why = runner.execute_model(_Output())
    assert adapter is None and not served and said == [why]
    assert "Model Runner V2" in why and "VLLM_USE_V2_MODEL_RUNNER=0" in why
    assert "\n" not in why
    spec = tt.when(tt.module("0"), tt.zero(), requests="x")
    runner.model = lambda: EditHooks(model, spec)
    with pytest.raises(tt.TokentraceError, match="VLLM_USE_V2_MODEL_RUNNER=0"):
        runner.execute_model(_Output())
    # called by the V1 runner (or outside any runner): as before, nothing said
    v1_cls.call = lambda self, fn: fn()
    adapter, served, why = v1_cls().call(attach)
    assert adapter is not None and served and why is None and len(said) == 1
    # the rows a step may have: the max_num_tokens of the runner making the call
    from tokentrace._engines import max_rows
    v1 = v1_cls()
    v1.max_num_tokens = 64
    assert v1.call(lambda: max_rows(model)) == 64 and max_rows(model) is None

# --- the engine core's adapter on a stand-in of vLLM's EngineCore -------------------------
class _Reason(int):
    """vLLM's FinishReason: an int whose str is its word."""

    def __str__(self):
        return {1: "length", 2: "abort"}[int(self)]


class _Status:
    """vLLM's RequestStatus (an abort's status), with get_finished_reason."""
    FINISHED_ABORTED = None

    @staticmethod
    def get_finished_reason(status):
        return _Reason(2)


_Status.FINISHED_ABORTED = _Status()


class _Request:
    def __init__(self, request_id, prompt, arrival):
        self.request_id, self.num_prompt_tokens, self.arrival_time = request_id, prompt, arrival


class _Out:
    def __init__(self, request_id, tokens, finish=None):
        self.request_id, self.new_token_ids, self.finish_reason = request_id, tokens, finish


class _Outputs:
    def __init__(self, *outs):
        self.outputs = list(outs)


def _stand_in_engine_core():
    """A module shaped as vllm.v1.engine.core: EngineCore with a scheduler, step_fn = step
    (schedule, the worker, update), and the test's queue of what each step gives."""
    import types

    class Scheduler:
        def __init__(self):
            self.unfinished, self.plan = set(), []

        def add_request(self, request):
            self.unfinished.add(request.request_id)

        def schedule(self, throttle_prefills=False):
            if isinstance(self.plan[0][0], Exception):
                raise self.plan[0][0]
            return self.plan[0][0]

        def update_from_output(self, scheduler_output, model_output):
            outputs = self.plan.pop(0)[1]
            for o in outputs.outputs:
                if o.finish_reason is not None:
                    self.unfinished.discard(o.request_id)
            return {0: outputs}

        def finish_requests(self, request_ids, finished_status):
            self.unfinished -= set(request_ids)
            return []

        def has_unfinished_requests(self):
            return bool(self.unfinished)

    class EngineCore:
        def __init__(self):
            self.scheduler, self.batch_queue = Scheduler(), None
            self.step_fn = self.step

        def step(self):
            if not self.scheduler.plan:
                return {}, False
            out = self.scheduler.schedule()
            return self.scheduler.update_from_output(out, None), True

    module = types.ModuleType("vllm.v1.engine.core")
    module.EngineCore = EngineCore
    return module


def test_the_engine_cores_steps_are_tokens_and_each_request_is_a_row(writer):
    from tokentrace._engines import VllmCore
    module = _stand_in_engine_core()
    backend = _Backend()
    core = VllmCore(backend, None)
    assert core.install(module)
    engine = module.EngineCore()
    engine.scheduler.add_request(_Request("A", 4, 100.0))
    engine.scheduler.add_request(_Request("B", 5, 100.5))
    # step 1: both prompts, a first token each; step 2: A's last token (length); B aborted
    engine.scheduler.plan = [
        (_Output(new=[_New("A", [1] * 4), _New("B", [1] * 5)], scheduled={"A": 4, "B": 5}),
         _Outputs(_Out("A", [7]), _Out("B", [8]))),
        (_Output(cached=_Cached(["A", "B"], [4, 5]), scheduled={"A": 1, "B": 1}),
         _Outputs(_Out("A", [9], finish=_Reason(1)), _Out("B", [10])))]
    engine.step_fn()
    engine.step_fn()
    engine.scheduler.finish_requests(["B"], _Status.FINISHED_ABORTED)
    # a finished request's row went to the writer as it finished: committed with its steps
    assert list(writer.read().requests) == ["A", "B"]
    engine.step_fn()  # nothing unfinished: no step
    step = [("push", "vllm.core_step"), ("push", "vllm.schedule"), ("pop", "vllm.schedule"),
            ("push", "vllm.update"), ("pop", "vllm.update"), ("pop", "vllm.core_step")]
    assert backend.events == step * 2
    requests = writer.read().requests
    assert list(requests) == ["A", "B"]
    a, b = requests["A"].events["engine_core"], requests["B"].events["engine_core"]
    assert a["role"] == "engine_core"
    assert (a["first_step"], a["first_token_step"], a["finished_step"]) == (1, 1, 2)
    assert (a["finish_reason"], a["output_tokens"], a["prompt_tokens"]) == ("length", 2, 4)
    assert a["arrival_unix_ns"] == 100_000_000_000
    assert a["queued_ns"] <= a["scheduled_ns"] <= a["first_token_ns"] <= a["finished_ns"]
    assert (b["finish_reason"], b["output_tokens"], b["finished_step"]) == ("abort", 2, 0)
    assert requests["A"].queue_ms >= 0 and requests["A"].finish_reason == "length"
    assert core.meta()["engine_core_steps"] == 2 and core.meta()["role"].endswith("engine_core")
    core.remove()
    assert module.EngineCore.__init__.__name__ == "__init__"
    assert not hasattr(module.EngineCore.__init__, "__wrapped__")


def test_an_engine_core_step_that_raises_is_closed(tmp_path):
    from tokentrace._engines import VllmCore
    module = _stand_in_engine_core()
    backend = _Backend()
    core = VllmCore(backend, _file(tmp_path / "c.sqlite", rows=[], steps=0))
    core.install(module)
    engine = module.EngineCore()
    engine.scheduler.add_request(_Request("A", 1, 1.0))
    engine.scheduler.plan = [(RuntimeError("the scheduler failed"), None)]
    with pytest.raises(RuntimeError, match="the scheduler failed"):
        engine.step_fn()
    assert backend.open == []
    assert backend.events == [("push", "vllm.core_step"), ("push", "vllm.schedule"),
                              ("pop", "vllm.schedule"), ("pop", "vllm.core_step")]


def test_the_engine_cores_unfinished_requests_are_written_at_exit(writer):
    """A request still running when the process ends is a row with no finish."""
    from tokentrace._engines import VllmCore
    module = _stand_in_engine_core()
    core = VllmCore(_Backend(), None)
    core.install(module)
    engine = module.EngineCore()
    engine.scheduler.add_request(_Request("A", 3, 1.0))
    core.finish()  # the exit hook's
    trace = writer.read()
    assert trace.requests["A"].finish_reason is None
    assert trace.requests["A"].events["engine_core"]["finished_ns"] is None
    assert trace.meta["engine_core_requests_unfinished"] == "1"


def _stand_in_output_processor():
    """A module shaped as vllm.v1.engine.output_processor: OutputProcessor with add_request,
    process_outputs (a list of EngineCoreOutputs) and abort_requests (returns the ids)."""
    import types

    class OutputProcessor:
        def add_request(self, request, prompt, parent_req=None, request_index=0, queue=None):
            pass

        def process_outputs(self, engine_core_outputs, engine_core_timestamp=None,
                            iteration_stats=None):
            return "processed"

        def abort_requests(self, request_ids, internal):
            return list(request_ids)

    module = types.ModuleType("vllm.v1.engine.output_processor")
    module.OutputProcessor = OutputProcessor
    return module


class _EngineCoreRequest:
    def __init__(self, request_id, prompt_token_ids, arrival_time):
        self.request_id, self.prompt_token_ids = request_id, prompt_token_ids
        self.arrival_time = arrival_time


def test_the_front_ends_output_steps_are_tokens_and_each_request_is_a_row(writer):
    """The front end (LLM's process, or vllm serve's API server): each process_outputs with
    outputs is a step (a token, or a plain call when an engine core records in the process),
    and each request's row says when it was handed to the engine, got its first token and
    finished, as the front end saw it; an abort finishes one."""
    from tokentrace._engines import VllmFront
    module = _stand_in_output_processor()
    backend = _Backend()
    front = VllmFront(backend, None)
    assert front.install(module)
    processor = module.OutputProcessor()
    processor.add_request(_EngineCoreRequest("A", [1, 2, 3], 10.0), "a b c")
    processor.add_request(_EngineCoreRequest("B", [1, 2], 10.5), "a b")
    assert processor.process_outputs([]) == "processed"  # nothing came: no step
    assert processor.process_outputs([_Out("A", [5]), _Out("B", [6])]) == "processed"
    processor.process_outputs([_Out("A", [7], finish=_Reason(1))])
    assert processor.abort_requests(["B"], internal=True) == ["B"]
    assert backend.names == {1: ("vllm.front_step", "root")}
    assert backend.events == [("push", "vllm.front_step"), ("pop", "vllm.front_step")] * 2
    requests = writer.read().requests  # each handed to the writer as it finished
    a, b = requests["A"].events["front_end"], requests["B"].events["front_end"]
    assert (a["prompt_tokens"], a["output_tokens"], a["finish_reason"]) == (3, 2, "length")
    assert (a["first_token_step"], a["finished_step"], a["scheduled_ns"]) == (1, 2, None)
    assert (b["finish_reason"], b["output_tokens"], b["finished_step"]) == ("abort", 1, 0)
    assert requests["A"].first_token_ms >= 0 and requests["A"].queue_ms is None
    assert front.meta()["engine_front_steps"] == 2
    # the meta went with the rows: a process vLLM kills at shutdown still says what it was
    meta = writer.read().meta
    assert "front_end" in meta["role"].split(",") and meta["engine_front_steps"] == "2"
    front.remove()
    assert not hasattr(module.OutputProcessor.process_outputs, "__wrapped__")


def test_rows_handed_with_no_session_are_said_once_and_never_raise():
    """An adapter's rows with no session recording (nothing can take them): one line, and
    the engine goes on."""
    from tokentrace._common import RowsToWriter
    said = []
    rows = RowsToWriter("step_requests", "the steps' requests", said.append,
                        meta=lambda: {"role": "worker"})
    rows.add([(1, "A", 4, 0, 0)])
    rows.add([(2, "A", 0, 1, 4)])
    rows.flush()
    assert len(said) == 1 and "no session" in said[0] and "steps' requests" in said[0]


def test_rows_of_a_column_the_schema_lacks_are_refused_in_one_line(writer):
    from tokentrace._common import add_rows
    with pytest.raises(ValueError, match="request_events.*no column named nope"):
        add_rows("request_events", [{"role": "x", "nope": 1}])
    with pytest.raises(ValueError, match="not a table the Python layer fills"):
        add_rows("calls", [(1,)])
