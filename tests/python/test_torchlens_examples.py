"""TorchLens's documented examples in tokentrace's scope (generation, record, selectors, edits,
save, containers), each run as written with `import tokentrace as tl` in place of `import
torchlens as tl` (and `from tokentrace.x import ...` for `from torchlens.x import ...`).

The fences are written down here from TorchLens 2.36's README, its fast-paths guide, its
intervention API reference, its containers guide and its episode-capture reference (the source
of each is named). Where a fence uses a model or input it leaves to the reader (`model`, `x`,
`prompt_ids`), a small stand-in is defined before it (SETUPS): the fence itself is unchanged.
The ones that use a TorchLens feature tokentrace does not have are listed with the reason
(MISSING) and checked to fail with tokentrace's one-line error naming it, not with a stack
trace from inside tokentrace.

TOKENTRACE_TORCHLENS_COUNT=1 also runs every fence under TorchLens itself (in a subprocess,
as `import torchlens as tl`) and checks that tokentrace passes at least as many.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import tokentrace as tt

# --- the stand-ins for what the docs leave to the reader ---------------------------------
_CNN = '''
import torch
from torch import nn
torch.manual_seed(0)


class Net(nn.Module):  # stands in for the docs' torchvision model
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 10), nn.ReLU(),
                                        nn.Linear(10, 4))
        self.block = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU())
        self.encoder = nn.Identity()  # the module the fences of an encoder model name

    def forward(self, x):
        return self.classifier(self.block(self.encoder(self.features(x))))


model = Net().eval()
x = torch.randn(1, 3, 16, 16)
'''

_RELU_MODEL = '''
import torch
from torch import nn
torch.manual_seed(0)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.fc(x))


model = Small()
x = torch.randn(2, 4)
'''

_LOGS = _CNN + '''
import tokentrace as tl
clean_log = tl.trace(model, x, save=tl.func("relu"))
patched_log = tl.trace(model, x, save=tl.func("relu"),
                       intervene=tl.when(tl.func("relu"), tl.zero_ablate()))
log = clean_log
'''

_STEPPED = '''
import torch
torch.manual_seed(0)


class TinyLM(torch.nn.Module):  # logits of the last position: what GreedyRunner steps
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, ids):
        return self.head(self.embed(ids)[:, -1])


model = TinyLM()
prompt_ids = torch.tensor([[1, 2, 3]])
'''

_PAIRBOX = '''
class PairBox:
    def __init__(self, left, right):
        self.left, self.right = left, right
'''

SETUPS = {"cnn": _CNN, "relu": _RELU_MODEL, "logs": _LOGS, "stepped": _STEPPED,
          "pairbox": _PAIRBOX, "none": ""}

# --- the fences: (name, where in TorchLens's docs, setup, code) --------------------------
EXAMPLES = [
    ("readme-quickstart", "README.md, Quickstart", "cnn", '''
import tokentrace as tl

log = tl.trace(model, x)
print(log.summary())
'''),
    ("readme-index", "README.md, Quickstart (module path and ordinal for the stand-in)", "cnn", '''
import tokentrace as tl
log = tl.trace(model, x)
log['relu_1_2'].out.shape      # torch.Size([1, 8, 14, 14])
log['features.2'].out.shape    # the module's output
log[7].func_name
log['conv2d_2'].out.shape      # short name (ordinal suffix optional)
'''),
    ("readme-index-output", "README.md, Quickstart (the output layer by ordinal)", "cnn", '''
import tokentrace as tl
log = tl.trace(model, x)
log[-1].layer_label            # 'output_1'
'''),
    ("readme-extraction", "README.md, 1. Flexible feature extraction", "cnn", '''
import tokentrace as tl
# Save only relu activations
log = tl.trace(model, x, save=tl.func('relu'))

# Save all ops inside the 'classifier' submodule
log = tl.trace(model, x, save=tl.in_module('classifier'))

# Save conv2d ops that are immediately followed by a relu, keeping a 4-op lookback window
conv_before_relu = tl.func('conv2d') & tl.followed_by(tl.func('relu'))
log = tl.trace(model, x, save=conv_before_relu,
               lookback=4, lookback_payload_policy='detached_raw')

# Stop capture early (can be faster than a plain forward pass)
log = tl.trace(model, x, save=tl.in_module('features.2'), halt=tl.in_module('features.2'))
'''),
    ("readme-record", "README.md, 1. Flexible feature extraction (tl.record)", "cnn", '''
import tokentrace as tl
recording = tl.record(model, x, save=tl.func('relu'))
trace = recording.to_trace()
'''),
    ("readme-save-load", "README.md, Save and load traces portably", "cnn", '''
import tokentrace as tl
log = tl.trace(model, x)
tl.save(log, 'my_trace')
loaded = tl.load('my_trace')
'''),
    ("readme-recurrent", "README.md, 4. Automatic visualization (SimpleRecurrent)", "none", '''
import torch
import tokentrace as tl


class SimpleRecurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(in_features=5, out_features=5)
    def forward(self, x):
        for r in range(4):
            x = self.fc(x)
            x = x + 1
            x = x * 2
        return x

recurrent_model = SimpleRecurrent()
seq = torch.randn(6, 5)
recurrent_log = tl.trace(recurrent_model, seq)
print(recurrent_log['linear_1:2'].out)     # second pass of the linear layer
recurrent_log.draw(vis_mode='rolled')
'''),
    ("readme-interventions", "README.md, 5. Interventions", "cnn", '''
import tokentrace as tl
# Zero-ablate all relu activations inline during capture
ablated = tl.trace(model, x, save=tl.func('relu'),
                   intervene=tl.when(tl.func('relu'), tl.zero_ablate()))
print(ablated['relu_1_2'].out.abs().max())  # tensor(0.)

# Scale relus to 50%
scaled = tl.trace(model, x, save=tl.func('relu'),
                  intervene=tl.when(tl.func('relu'), tl.scale(0.5)))
'''),
    ("readme-bundle", "README.md, 5. Interventions (tl.bundle)", "cnn", '''
import tokentrace as tl
clean_log = tl.trace(model, x)
patched_log = tl.trace(model, x,
                       intervene=tl.when(tl.func('relu'), tl.zero_ablate()))
bundle = tl.bundle({'clean': clean_log, 'patched': patched_log}, baseline='clean')
bundle.compare_at('relu_1_2')   # one site; a multi-site selector must resolve uniquely
'''),
    ("readme-recorder", "README.md, 7. Profile it (Recorder, list_modules, list_ops)", "cnn", '''
import torch
import tokentrace as tl
from tokentrace.fastlog import Recorder
from tokentrace.utils import list_modules, list_ops

with Recorder(model, save=tl.func('relu')) as rec:
    for step in range(2):                    # your optimizer loop
        rec.log(torch.rand(1, 3, 16, 16))    # sparse capture of this step

print(list_modules(model)[:3])               # every module address + class
print(list_ops(model, torch.randn(1, 3, 16, 16))[:3])   # op counts per forward
'''),
    ("readme-nvtx", "README.md, 7. Profile it (emit_nvtx)", "cnn", '''
import torch
import tokentrace as tl
nvtx_log = tl.trace(model, torch.randn(1, 3, 16, 16),
                    capture=tl.options.CaptureOptions(emit_nvtx=True))
'''),
    ("api-selectors-compose", "intervention_api.md, Selectors", "logs", '''
candidate = tl.in_module("block") & tl.func("relu")
sites = log.find_sites(candidate, max_fanout=8)
exact = tl.label(sites.labels()[0])
'''),
    ("api-selectors-capture", "intervention_api.md, Selectors (capture-time)", "cnn", '''
import tokentrace as tl
saved = tl.trace(model, x, save=tl.func("relu"))
windowed = tl.trace(
    model,
    x,
    save=tl.func("conv2d") & tl.followed_by(tl.func("relu")),
    lookback=4,
    lookback_payload_policy="detached_raw",
)
patched = tl.trace(
    model,
    x,
    save=tl.func("relu"),
    intervene=tl.when(tl.func("relu"), tl.scale(0.5)),
)
conditional = tl.trace(
    model,
    x,
    intervene=tl.when(tl.func("relu") & tl.preceded_by(tl.in_module("block")), tl.zero_ablate()),
    lookback=4,
)
'''),
    ("api-raw-hooks", "intervention_api.md, Raw PyTorch Forward Hooks", "relu", '''
import tokentrace as tl
def halve_relu(module, args, output):
    return output * 0.5

handle = model.relu.register_forward_hook(halve_relu)
try:
    log = tl.trace(model, x)
finally:
    handle.remove()
'''),
    ("api-record", "intervention_api.md, Capture-Time Recording", "cnn", '''
import tokentrace as tl
recording = tl.record(model, x, save=tl.func("relu"))
trace = recording.to_trace()
streamed = tl.trace(model, x, save=tl.in_module("encoder"), storage=tl.to_disk("run.tlspec"))
'''),
    ("api-bundle", "intervention_api.md, Bundle", "logs", '''
bundle = tl.bundle({"clean": clean_log, "patched": patched_log}, baseline="clean")
'''),
    ("fast-bind", "guides/fast_paths.md, bind", "none", '''
import torch
from torch import nn
import tokentrace as tl


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
direction = torch.randn(8)
spec = tl.when(tl.module("1"), tl.steer(direction, magnitude=4.0, feature_axis=-1))

# Build the binding once and reuse it for every forward.
bound = spec.bind(model)
inputs = [torch.randn(2, 8) for _ in range(3)]
steered = [bound(x) for x in inputs]


# The same edit as a plain forward hook, for comparison.
def add_direction(module, args, output):
    return output + direction * 4.0


handle = model[1].register_forward_hook(add_direction)
try:
    reference = [model(x) for x in inputs]
finally:
    handle.remove()

assert all(torch.equal(a, b) for a, b in zip(steered, reference))
assert bound.last_report.fire_count == 1  # the ledger of the most recent call
'''),
    ("fast-steer-generate", "guides/fast_paths.md, Generation with HF generate()", "none", '''
import torch
import tokentrace as tl
from tokentrace.intervention import steer_generate
from transformers import LlamaConfig, LlamaForCausalLM


torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
lm = LlamaForCausalLM(config).eval()
ids = torch.randint(0, 128, (1, 6))
direction = torch.randn(32)
spec = tl.when(
    tl.module("model.layers.0.mlp"), tl.steer(direction, magnitude=8.0, feature_axis=-1)
)
gen_kwargs = {"max_new_tokens": 5, "do_sample": False, "use_cache": True, "pad_token_id": 0}

steered = spec.bind(lm).generate(ids, **gen_kwargs)
result = steer_generate(lm, ids, spec, **gen_kwargs)
assert torch.equal(result.outputs, steered)


def add_direction(module, args, output):
    return output + direction * 8.0


handle = lm.model.layers[0].mlp.register_forward_hook(add_direction)
try:
    reference = lm.generate(ids, **gen_kwargs)
finally:
    handle.remove()

assert torch.equal(steered, reference)
'''),
    ("fast-record-evidence", "guides/fast_paths.md, Steering with evidence: tl.record", "none", '''
import torch
from torch import nn
import tokentrace as tl


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
x = torch.randn(2, 8)
direction = torch.randn(8)
spec = tl.when(tl.module("1"), tl.steer(direction, magnitude=4.0, feature_axis=-1))

output, recording = tl.record(
    model, x, save=tl.func("linear"), intervene=spec, return_output=True
)

assert torch.equal(output, spec.bind(model)(x))  # the same steered output as bind
print(recording.n_records)
'''),
    ("fast-cut-cost", "guides/fast_paths.md, Cut the cost of a trace", "none", '''
import torch
from torch import nn
import tokentrace as tl
from tokentrace.options import CaptureOptions


model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
x = torch.randn(2, 8)

trace = tl.trace(
    model,
    x,
    save=tl.func("relu"),
    capture=CaptureOptions(inference_only=True),
)

print(trace.num_ops)
relu = trace.find_sites(tl.func("relu")).first()
assert relu.out.shape == (2, 8)
'''),
    ("fast-steered-rerun", "guides/fast_paths.md, Fast steered rerun", "none", '''
import torch
import tokentrace as tl
from transformers import LlamaConfig, LlamaForCausalLM


torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
lm = LlamaForCausalLM(config).eval()
ids = torch.randint(0, 128, (1, 6))
direction = torch.randn(32)
site = tl.module("model.layers.1.mlp")
head = tl.module("lm_head")
spec = tl.when(site, tl.steer(direction, magnitude=4.0, feature_axis=-1))

trace = tl.trace(lm, ids, save=site | head, intervene=spec)
bound = spec.bind(lm)
for _ in range(3):
    trace.run(lm, ids)  # the steered forward on the longer input, saved sites refreshed
    assert trace.last_run["engine"] == "guarded_fast"
    assert trace.last_run["fast_refused"] is None
    logits = trace.find_sites(head).first().out
    assert torch.equal(logits, bound(ids).logits)
    ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=-1)
'''),
    ("episode-greedy-runner", "reference/episode_capture.md", "stepped", '''
import torch
import tokentrace as tl
from tokentrace.options import EpisodeSpec

class GreedyRunner(torch.nn.Module):
    def __init__(self, model, n_steps):
        super().__init__()
        self.model = model          # the stepped model
        self.n_steps = n_steps

    def forward(self, ids):
        tokens = []
        current = ids
        for _ in range(self.n_steps):
            next_token = self.model(current).argmax(-1, keepdim=True)
            tokens.append(next_token)
            current = torch.cat([current, next_token], dim=1)
        return torch.cat(tokens, dim=1)   # one integer tensor of emitted tokens

log = tl.trace(
    GreedyRunner(model, 20), prompt_ids,
    episode=EpisodeSpec(stepped_module=model, n_steps=20),
)
ledger_payload = log.annotations["episode"]     # header + per-step rows
'''),
    ("containers-runtime-view", "containers.md, Runtime View", "cnn", '''
import tokentrace as tl
trace = tl.trace(model, x, capture=tl.options.CaptureOptions(capture_container_structure=True))
container = trace.ops[trace.output_layers[0]].container
'''),
    ("containers-custom", "containers.md, Custom Containers", "pairbox", '''
import tokentrace as tl
tl.register_container(
    PairBox,
    lambda value: ([value.left, value.right], None),
    lambda aux, children: PairBox(children[0], children[1]),
)
'''),
    ("containers-output-at", "containers.md, Nested Output Selection", "cnn", '''
import tokentrace as tl
trace = tl.trace(model, x, capture_container_structure=True)
site = trace.resolve_sites(tl.output_at(("past_key_values", 0, 1))).first()
'''),
]

# Fences that use what tokentrace does not have: the name its one-line error gives.
MISSING = {
    "readme-recurrent": "draw",              # no graph drawing
    "readme-bundle": "no saved output",      # tl.trace saves no output unless save= says
    "containers-output-at": "selects a leaf of the model's output",  # an edit's, not a site
}


def _source(name):
    for entry in EXAMPLES:
        if entry[0] == name:
            return SETUPS[entry[2]] + textwrap.dedent(entry[3])
    raise KeyError(name)


def _run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what a fence writes (tl.save) lands here
    code = compile(_source(name), f"<torchlens example {name}>", "exec")
    exec(code, {"__name__": f"torchlens_example_{name.replace('-', '_')}"})


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", [e[0] for e in EXAMPLES if e[0] not in MISSING])
def test_a_torchlens_example_runs_with_the_import_changed(name, tmp_path, monkeypatch):
    if name in ("fast-steer-generate", "fast-steered-rerun"):
        pytest.importorskip("transformers")
    _run(name, tmp_path, monkeypatch)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", sorted(MISSING))
def test_an_example_of_what_tokentrace_lacks_fails_with_one_line(name, tmp_path, monkeypatch):
    with pytest.raises((tt.TokentraceError, AttributeError)) as caught:
        _run(name, tmp_path, monkeypatch)
    text = str(caught.value)
    assert "\n" not in text and MISSING[name] in text, text


def test_every_example_is_listed_once():
    names = [e[0] for e in EXAMPLES]
    assert len(names) == len(set(names)) and set(MISSING) <= set(names)
    assert len(names) - len(MISSING) >= len(names) * 3 // 4  # most of them run


_RUNNER = '''
import sys, textwrap, traceback, warnings
warnings.simplefilter("ignore")
src = sys.stdin.read()
try:
    exec(compile(src, "<example>", "exec"), {"__name__": "torchlens_example"})
except Exception:
    traceback.print_exc()
    sys.exit(1)
'''


@pytest.mark.skipif(os.environ.get("TOKENTRACE_TORCHLENS_COUNT") != "1",
                    reason="runs every example under TorchLens too (minutes): "
                           "TOKENTRACE_TORCHLENS_COUNT=1")
def test_tokentrace_passes_at_least_as_many_as_torchlens(tmp_path):
    pytest.importorskip("torchlens")
    passed = {"tokentrace": [], "torchlens": []}
    for name, _, _, _ in EXAMPLES:
        for lib in passed:
            src = _source(name)
            if lib == "torchlens":
                src = src.replace("import tokentrace as tl", "import torchlens as tl")
                src = src.replace("from tokentrace.", "from torchlens.")
            where = tmp_path / lib / name  # each its own folder: what one writes (tl.save)
            where.mkdir(parents=True)   # is not in the way of the other
            run = subprocess.run([sys.executable, "-c", _RUNNER], input=src, text=True,
                                 capture_output=True, cwd=where, timeout=600)
            if run.returncode == 0:
                passed[lib].append(name)
    print({lib: (len(names), names) for lib, names in passed.items()})
    assert len(passed["tokentrace"]) >= len(passed["torchlens"]), passed
