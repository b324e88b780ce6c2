"""The vLLM job of tests/vllm: LLM.generate of 4 prompts x 16 greedy tokens on the tiny model,
printing the token ids as JSON. With STEP_COUNT_FILE set, every call of the model runner's
execute_model that schedules a token (in the worker process) appends a line to that file
("step <ns in execute_model> <tokens scheduled>"): the engine steps, counted and timed by a
plain wrapper the test can compare with the trace (at module level,
so that the engine's spawned processes, which import this file as __mp_main__, install it
too). In the engine core's process each busy-loop step that ran the model appends
"core <ns>" (EngineCoreProc._process_engine_step, which calls the step and queues its
outputs): bench/vllm_step_cost.py reads both.

Requests as a serving user sends them (tests/vllm/test_vllm_requests.py): JOB_PROMPTS (a JSON
list of prompts, instead of PROMPTS), JOB_TAGS (a JSON list, per prompt: its tokentrace tag, a
list of tags, or null: SamplingParams(extra_args={"tokentrace": ...})), JOB_ROUNDS (a JSON list
of lists of prompt indices: one LLM.generate each, in order, so a later round may find an
earlier one's prompt in vLLM's prefix cache), JOB_BLOCK_SIZE (vLLM's KV block size) and
JOB_HOOK_PREFILL (a plain forward hook's edit of the prefill, the reference of a tokentrace
edit). The result also has each request's num_cached_tokens (prompt tokens read from the
cache) and request id."""

import json
import os
import sys
import time

if os.environ.get("STEP_COUNT_FILE"):
    from vllm.v1.worker import gpu_model_runner

    def _append(line):
        fd = os.open(os.environ["STEP_COUNT_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    _execute = gpu_model_runner.GPUModelRunner.execute_model

    def _counted(self, scheduler_output, *args, **kwargs):
        if not scheduler_output.total_num_scheduled_tokens:  # a step that computes nothing
            return _execute(self, scheduler_output, *args, **kwargs)
        begin = time.perf_counter_ns()
        try:
            return _execute(self, scheduler_output, *args, **kwargs)
        finally:  # "step <execute_model ns> <tokens>": what bench/vllm_step_cost.py reads
            _append(f"step {time.perf_counter_ns() - begin} "
                    f"{scheduler_output.total_num_scheduled_tokens}\n")

    gpu_model_runner.GPUModelRunner.execute_model = _counted

    from vllm.v1.engine import core as engine_core

    _process = engine_core.EngineCoreProc._process_engine_step

    def _core_step(self):
        begin = time.perf_counter_ns()
        executed = _process(self)
        if executed:
            _append(f"core {time.perf_counter_ns() - begin}\n")
        return executed

    engine_core.EngineCoreProc._process_engine_step = _core_step

if os.environ.get("JOB_HOOK_PREFILL"):
    # "<module name suffix>:<value>": a plain PyTorch forward hook, in the worker, on every
    # model.layers.N.<suffix>, filling its output with value in steps that compute more than
    # one row: the prefill, when the prompts are served one at a time (JOB_ROUNDS [[0], [1]]).
    try:  # vLLM's CPU build: its runner loads the model itself
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner as _Runner
    except ImportError:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner as _Runner

    _suffix, _value = os.environ["JOB_HOOK_PREFILL"].split(":")
    _load = _Runner.load_model

    def _load_hooked(self, *args, **kwargs):
        out = _load(self, *args, **kwargs)

        def fill(module, args, output):
            if output.shape[0] > 1:
                output.fill_(float(_value))

        for name, module in self.model.named_modules():
            if name.startswith("model.layers.") and name.endswith("." + _suffix):
                module.register_forward_hook(fill)
        return out

    _Runner.load_model = _load_hooked

PROMPTS = ["the cat sat on", "a dog ran to the", "birds sang in", "the quiet river"]


def main():
    from vllm import LLM, SamplingParams
    model, mode = sys.argv[1], sys.argv[2]
    prompts = json.loads(os.environ.get("JOB_PROMPTS", "null")) or PROMPTS
    prompts = prompts * int(os.environ.get("JOB_PROMPT_COPIES", "1"))
    new_tokens = int(os.environ.get("JOB_NEW_TOKENS", "16"))
    tags = json.loads(os.environ.get("JOB_TAGS", "null")) or [None] * len(prompts)
    rounds = json.loads(os.environ.get("JOB_ROUNDS", "null")) or [list(range(len(prompts)))]
    if os.environ.get("JOB_BLOCK_SIZE"):
        extra_block = {"block_size": int(os.environ["JOB_BLOCK_SIZE"])}
    else:
        extra_block = {}
    # disable_log_stats=False: each RequestOutput carries vLLM's own request timestamps
    # (metrics: the engine core's time.monotonic() when it scheduled the request and when its
    # first token came back), which the test compares with the trace's steps.
    # mode "in-process": the engine core and the worker in this process (VLLM_ENABLE_V1_
    # MULTIPROCESSING=0 from the caller, the uniprocess executor), as vLLM runs on one GPU
    extra = {"distributed_executor_backend": "uni"} if mode == "in-process" else {}
    llm = LLM(model=model, enforce_eager=mode != "compiled", max_model_len=128, max_num_seqs=4,
              dtype="float32", disable_log_stats=False, **extra, **extra_block)

    def params(tag):
        return SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True,
                              **({"extra_args": {"tokentrace": tag}} if tag is not None else {}))

    outs = []
    for chosen in rounds:
        outs += llm.generate([prompts[i] for i in chosen], [params(tags[i]) for i in chosen])
    metrics = [{"request_id": o.request_id,
                **{k: getattr(o.metrics, k, None)
                   for k in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")}}
               for o in outs if o.metrics is not None]
    print("RESULT " + json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outs],
                                  "prompt_lengths": [len(o.prompt_token_ids) for o in outs],
                                  "cached": [o.num_cached_tokens for o in outs],
                                  "request_ids": [o.request_id for o in outs],
                                  "metrics": metrics}))


if __name__ == "__main__":
    main()
