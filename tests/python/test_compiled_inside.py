"""Code the job compiled with fullgraph=True inside an eager model stays compiled while traced:
a decoder stack compiled in its own __init__ (as vLLM's compile decorator does, `self.
_compiled_callable = torch.compile(self.forward, fullgraph=True)` called from the class's
__call__), and a compiled helper function that calls a module. With the trace's wrappers inside
their regions TorchDynamo refused to compile them (Unsupported: ForwardWrapper) and the job
failed."""

import json
import os
import subprocess
import sys
import textwrap

import torch

import tokentrace as tt
from tt_testutil import PYDIR

MODEL = textwrap.dedent("""
    import torch
    from torch import nn
    torch.set_num_threads(1)

    class Stack(nn.Module):
        # Compiled as vLLM's @support_torch_compile compiles its decoder stack.
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
            self._compiled_callable = torch.compile(self.forward, fullgraph=True,
                                                    backend="eager")

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

        def __call__(self, *args, **kwargs):
            # vLLM reads attributes of its compiled callable (`aot_compile`): still there
            assert callable(self._compiled_callable.get_compiler_config)
            return self._compiled_callable(*args, **kwargs)

    @torch.compile(fullgraph=True, backend="eager")
    def scaled(module, x):  # a compiled helper that calls a module
        return module(x) * 0.5

    class Top(nn.Module):  # eager
        def __init__(self, helper=True):
            super().__init__()
            self.embed = nn.Linear(4, 8)
            self.stack = Stack()
            self.norm = nn.LayerNorm(8)
            self.head = nn.Linear(8, 4)
            self.helper = helper

        def forward(self, x):
            x = self.stack(self.embed(x))
            return self.head(scaled(self.norm, x) if self.helper else self.norm(x))

    def run(model, steps=3):
        x = torch.linspace(-1, 1, 8).reshape(2, 4)
        outs = []
        with torch.no_grad():
            for _ in range(steps):
                x = model(x)
                outs.append(x)
        return torch.stack(outs)
""")

JOB = MODEL + textwrap.dedent("""
    torch.manual_seed(0)
    top = Top().eval()
    print("RESULT", json.dumps(run(top).tolist()))
""")


def _space():
    space = {}
    exec(compile(MODEL, "compiled_inside_model", "exec"), space)
    return space


def test_a_stack_compiled_with_fullgraph_inside_an_eager_model_is_traced_from_outside():
    space = _space()
    torch.manual_seed(0)
    top = space["Top"](helper=False).eval()  # made before the trace: its Stack compiled so
    plain = space["run"](top)
    trace = tt.trace(lambda: space["run"](top), kernels="off")
    assert torch.equal(space["run"](top), plain)
    assert len(trace.tokens) == 3
    assert trace["stack"].num_calls == 3  # from outside its compiled region
    assert trace["embed"].num_calls == 3 and trace["head"].num_calls == 3
    assert "stack.layers.0" not in trace.sites  # inside the region: left alone


def test_tokentrace_run_of_a_job_with_fullgraph_regions_equals_the_untraced_job(tmp_path):
    from test_preload import _native_dir
    native = _native_dir()
    job = tmp_path / "job.py"
    job.write_text("import json\n" + JOB)
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=native)
    plain = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "t.sqlite"
    traced = subprocess.run([os.path.join(native, "tokentrace"), "run", "--out", str(out), "--",
                             sys.executable, str(job)], env=env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    result = [x for x in traced.stdout.splitlines() if x.startswith("RESULT ")]
    assert result and json.loads(result[0][7:]) == json.loads(
        [x for x in plain.stdout.splitlines() if x.startswith("RESULT ")][0][7:])
    trace = tt.load(out)
    assert len(trace.tokens) == 3 and trace["stack"].num_calls == 3
    # The helper's region ran with the hooks off: said once, and its module call not recorded.
    assert traced.stderr.count("is compiled with fullgraph=True") == 1, traced.stderr
    assert "norm" not in trace.sites  # called only inside the helper's region
