"""python -m tokentrace.demo [-o DIR] [--device cpu|cuda] [--tokens N]

Traces a tiny GPT-2 `generate` (random weights), prints the report and writes the plot.
scripts/demo.sh can simply run this module.
"""

import argparse
import os
import sys
import warnings


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tokentrace.demo")
    parser.add_argument("-o", "--out-dir", default=".")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args(argv)

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import tokentrace as tt

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    # GPT2Config's default bos/eos token is 50256, outside this vocabulary (transformers warns
    # about it); a random model has no end-of-text token anyway.
    config = GPT2Config(vocab_size=512, n_embd=64, n_layer=4, n_head=4, bos_token_id=None,
                        eos_token_id=None)
    lm = GPT2LMHeadModel(config).eval()
    lm.to(device)
    prompt = torch.tensor([[3, 17, 42, 8, 99, 7, 12, 64]], device=device)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "demo.sqlite")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tt.ScalarEscapeWarning)
        trace = tt.trace(lm.generate, prompt, out=path,
                         input_kwargs={"max_new_tokens": args.tokens,
                                       "min_new_tokens": args.tokens, "do_sample": False})
    print(trace.report())
    for w in caught:
        if issubclass(w.category, tt.ScalarEscapeWarning):
            print(f"\nScalarEscapeWarning: {w.message}")
    from .plot import plot
    try:
        png = plot(path, os.path.join(args.out_dir, "demo.png"))
    except tt.TokentraceError as exc:  # e.g. no matplotlib: the demo's trace still stands
        png = f"not written: {exc}"
    print(f"\ntrace: {path}\nplot:  {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
