"""The vLLM job of tests/vllm: LLM.generate of 4 prompts x 16 greedy tokens on the tiny model,
printing the token ids as JSON. With STEP_COUNT_FILE set, every call of the model runner's
execute_model that schedules a token (in the worker process) appends a line to that file
("step <ns in execute_model> <tokens scheduled>"): the engine steps, counted and timed by a
plain wrapper the test can compare with the trace (at module level,
so that the engine's spawned processes, which import this file as __mp_main__, install it
too). In the engine core's process each busy-loop step that ran the model appends
"core <ns>" (EngineCoreProc._process_engine_step, which calls the step and queues its
outputs): bench/vllm_step_cost.py reads both."""

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

PROMPTS = ["the cat sat on", "a dog ran to the", "birds sang in", "the quiet river"]


def main():
    from vllm import LLM, SamplingParams
    model, mode = sys.argv[1], sys.argv[2]
    prompts = PROMPTS * int(os.environ.get("JOB_PROMPT_COPIES", "1"))
    new_tokens = int(os.environ.get("JOB_NEW_TOKENS", "16"))
    # disable_log_stats=False: each RequestOutput carries vLLM's own request timestamps
    # (metrics: the engine core's time.monotonic() when it scheduled the request and when its
    # first token came back), which the test compares with the trace's steps.
    # mode "in-process": the engine core and the worker in this process (VLLM_ENABLE_V1_
    # MULTIPROCESSING=0 from the caller, the uniprocess executor), as vLLM runs on one GPU
    extra = {"distributed_executor_backend": "uni"} if mode == "in-process" else {}
    llm = LLM(model=model, enforce_eager=mode != "compiled", max_model_len=128, max_num_seqs=4,
              dtype="float32", disable_log_stats=False, **extra)
    outs = llm.generate(prompts, SamplingParams(max_tokens=new_tokens, temperature=0.0,
                                                ignore_eos=True))
    metrics = [{"request_id": o.request_id,
                **{k: getattr(o.metrics, k, None)
                   for k in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")}}
               for o in outs if o.metrics is not None]
    print("RESULT " + json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outs],
                                  "prompt_lengths": [len(o.prompt_token_ids) for o in outs],
                                  "metrics": metrics}))


if __name__ == "__main__":
    main()
