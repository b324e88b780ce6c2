"""The vLLM job of tests/vllm: LLM.generate of 4 prompts x 16 greedy tokens on the tiny model,
printing the token ids as JSON. With STEP_COUNT_FILE set, every call of the model runner's
execute_model that schedules a token (in the worker process) appends a line to that file: the
engine steps, counted by a plain wrapper the test can compare with the trace (at module level,
so that the engine's spawned processes, which import this file as __mp_main__, install it
too)."""

import json
import os
import sys

if os.environ.get("STEP_COUNT_FILE"):
    from vllm.v1.worker import gpu_model_runner

    _execute = gpu_model_runner.GPUModelRunner.execute_model

    def _counted(self, scheduler_output, *args, **kwargs):
        if scheduler_output.total_num_scheduled_tokens:  # a step that computes something
            fd = os.open(os.environ["STEP_COUNT_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, b"step\n")
            finally:
                os.close(fd)
        return _execute(self, scheduler_output, *args, **kwargs)

    gpu_model_runner.GPUModelRunner.execute_model = _counted

PROMPTS = ["the cat sat on", "a dog ran to the", "birds sang in", "the quiet river"]


def main():
    from vllm import LLM, SamplingParams
    model, mode = sys.argv[1], sys.argv[2]
    llm = LLM(model=model, enforce_eager=mode == "eager", max_model_len=128, max_num_seqs=4,
              dtype="float32")
    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=16, temperature=0.0,
                                                ignore_eos=True))
    print("RESULT " + json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outs],
                                  "prompt_lengths": [len(o.prompt_token_ids) for o in outs]}))


if __name__ == "__main__":
    main()
