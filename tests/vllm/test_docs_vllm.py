"""The docs blocks marked `# docs-test: needs=vllm expected=...` (the commands a
vLLM user types, on the tiny model), run in the vLLM environment as tests/python/test_docs.py
runs the others: from the repository's root, with this environment's `tokentrace` on PATH."""

import os
import sys

import pytest

pytest.importorskip("vllm", reason="the vLLM environment (scripts/setup-vllm.sh)")
pytestmark = pytest.mark.vllm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from tt_testutil import PYDIR, ROOT, doc_blocks, run_doc_block  # noqa: E402

# The blocks import the tokentrace pip-installed here (with its native extension built
# against this torch), not the source tree that tt_testutil puts first on the path.
while PYDIR in sys.path:
    sys.path.remove(PYDIR)

BLOCKS = [pytest.param(path, line, code, expected, id=f"{os.path.relpath(path, ROOT)}:{line}")
          for path, line, code, expected, needs in doc_blocks() if needs == "vllm"]


def test_the_serving_page_has_a_vllm_example():
    assert any(os.path.join("docs", "serving.md") in p.id for p in BLOCKS)


@pytest.mark.parametrize("path,line,code,expected", BLOCKS)
def test_vllm_doc_block(path, line, code, expected, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep +
                       os.environ.get("PATH", ""))
    run_doc_block(path, line, code, expected)
