"""What a compiled call of the model costs the traced job on top of the call itself, when the job
compiles the model's __call__ (transformers' generate on CUDA with a static cache; see
python/tokentrace/_compiled/call.py): per call, the trace's wrappers and hooks go off every
module and back on (HookSet.hide and the function it returns), around the root's recording
wrapper. Measured on a Llama with the module tree of the Llama-1B shape (16 layers; narrow
tensors: only the number of modules matters), every module hooked (the default), and with a
user's forward hook on each layer (those layers get the hook pair, whose dict entries are
taken off and put back too). Prints a markdown table: median µs per compiled call over R
rounds of N calls, and the modules hidden.

    python bench/compiled_call_cost.py [--layers 16] [--calls 200] [--repeats 7]
"""

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tokentrace as tt
from tokentrace._compiled import attached_calls


def _measure(lm, calls, repeats):
    out = {}

    def job(x):
        hooks = attached_calls(lm).hooks  # the trace's HookSet on this model
        rounds = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                hooks.hide()()
            rounds.append((time.perf_counter_ns() - t0) / calls)
        out["ns"] = statistics.median(rounds)
        out["hidden"] = len(hooks.wrapped) + len(hooks.handles)
        lm(x)
    tt.trace(job, torch.tensor([[1, 2, 3]]), model=lm, kernels="off")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    if a.layers < 1 or a.calls < 1 or a.repeats < 1:
        ap.error("--layers, --calls and --repeats must be at least 1")
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=a.layers, num_attention_heads=2,
                                      num_key_value_heads=1)).eval()
    print("| setup | modules | wrappers + hook handles hidden | µs per compiled call |")
    print("|---|---|---|---|")
    modules = sum(1 for _ in lm.modules())
    r = _measure(lm, a.calls, a.repeats)
    print(f"| every module wrapped | {modules} | {r['hidden']} | {r['ns'] / 1e3:.1f} |")
    handles = [layer.register_forward_hook(lambda m, args, out: None)
               for layer in lm.model.layers]
    r = _measure(lm, a.calls, a.repeats)
    print(f"| a user's hook on each layer (hook pairs there) | {modules} | {r['hidden']} | "
          f"{r['ns'] / 1e3:.1f} |")
    for h in handles:
        h.remove()


if __name__ == "__main__":
    main()
