"""Tests of the tokentrace PyTorch operators (cuda/torch/).

Build first:  bash scripts/setup.sh && source build/env.sh (builds build/torch-ops), or
              cuda/torch/build.sh <dir> and
              TOKENTRACE_TORCH_OPS_LIB=<dir>/libtokentrace_torch_ops.so
Run:          $TOKENTRACE_PY -m pytest tests/torch_op
The loader is the package's (python/tokentrace/_backend/torch_library.py), which finds the
library the same way a bound model does. Without the library every test here is skipped, with
the reason.
"""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(_ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(_ROOT, "python"))
if not os.environ.get("TOKENTRACE_TORCH_OPS_LIB") and not os.environ.get("TOKENTRACE_NATIVE_DIR"):
    _dev = os.path.join(_ROOT, "build", "torch-ops", "libtokentrace_torch_ops.so")
    if os.path.isfile(_dev):  # scripts/setup.sh's build, without build/env.sh sourced
        os.environ["TOKENTRACE_TORCH_OPS_LIB"] = _dev

from tokentrace._backend import torch_library  # noqa: E402

LIB, _LOOKED = torch_library.find_library()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [i for i in items if str(i.fspath).startswith(here)]
    if LIB is None:
        skip = pytest.mark.skip(
            reason=f"tokentrace torch ops library not built (looked in {', '.join(_LOOKED)}); "
                   f"{torch_library.HOW_TO_BUILD}")
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
    torch_library.load_library(LIB)
    return torch_library
