"""Runs the code blocks of README.md and docs/*.md that start with `# docs-test: expected=...`.

Each block runs in a fresh namespace and must leave `RESULT == expected`. Blocks marked
`# docs-test: needs=vllm expected=...` run in the vLLM environment (tests/vllm/test_docs_vllm.py).
"""

import os

import pytest

from tt_testutil import ROOT, doc_blocks, run_doc_block


def _blocks(needs=None):
    for path, line, code, expected, need in doc_blocks():
        if need == needs:
            yield pytest.param(path, line, code, expected,
                               id=f"{os.path.relpath(path, ROOT)}:{line}")


@pytest.mark.parametrize("path,line,code,expected", list(_blocks()))
def test_doc_block(path, line, code, expected):
    run_doc_block(path, line, code, expected)


def test_seed_examples_are_documented():
    ids = [p.id for p in _blocks()]
    assert sum("generation.md" in i for i in ids) >= 2


def test_every_docs_test_block_is_run_somewhere():
    """A block that names an environment no suite runs would never be tested."""
    needs = {need for _, _, _, _, need in doc_blocks()}
    assert needs <= {None, "vllm"}, needs
