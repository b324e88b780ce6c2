"""Shared fixtures for the Python layer's tests.

Layout: PYTHONPATH gets <repo>/python so the source package is imported; the native extension
comes from TOKENTRACE_NATIVE_DIR (build/env.sh sets it) or an installed package. Every test
records through it: there is no other recorder. Models are tiny (2 cores, CPU).
"""

import pytest
import torch

from tt_testutil import PYDIR, ROOT, make_trace_file  # noqa: F401  (puts python/ on sys.path)

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu mark)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval()


@pytest.fixture(scope="session")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2)).eval()


@pytest.fixture
def prompt():
    return torch.tensor([[3, 17, 42, 8, 99]])


@pytest.fixture
def trace_file(tmp_path):
    return make_trace_file(str(tmp_path / "hand.sqlite"))
