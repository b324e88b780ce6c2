"""Tests of the tokentrace PyTorch operators (cuda/torch/).

Build first:  cuda/torch/build.sh build-torchop   (or set TOKENTRACE_TORCH_OPS_LIB=<lib path>)
Run:          <venv python> -m pytest tests/torch_op
Without the library every test here is skipped, with the reason above.
"""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DEFAULT_LIB = os.path.join(_ROOT, "build-torchop", "libtokentrace_torch_ops.so")
LIB = os.environ.get("TOKENTRACE_TORCH_OPS_LIB") or _DEFAULT_LIB
sys.path.insert(0, os.path.join(_ROOT, "cuda", "torch"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [i for i in items if str(i.fspath).startswith(here)]
    if not os.path.exists(LIB):
        skip = pytest.mark.skip(
            reason=f"tokentrace torch ops library not built ({LIB}); run cuda/torch/build.sh "
                   "build-torchop or set TOKENTRACE_TORCH_OPS_LIB")
        for item in mine:
            item.add_marker(skip)
        return
    import torch
    if not torch.cuda.is_available():
        skip_gpu = pytest.mark.skip(reason="no CUDA device")
        for item in mine:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tto():
    import tokentrace_ops
    tokentrace_ops.load_library(LIB)
    return tokentrace_ops
