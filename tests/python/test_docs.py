"""Runs the code blocks of README.md and docs/*.md that start with `# docs-test: expected=...`.

Each block runs in a fresh namespace and must leave `RESULT == expected`.
"""

import ast
import glob
import os
import re
import warnings

import pytest

from tt_testutil import ROOT

_FENCE = re.compile(r"```python\n(# docs-test: expected=(.*?)\n.*?)```", re.S)


def _blocks():
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files = [os.path.join(ROOT, "README.md")] + docs
    for path in files:
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8").read()
        for i, m in enumerate(_FENCE.finditer(text)):
            line = text[:m.start()].count("\n") + 2
            yield pytest.param(path, line, m.group(1), m.group(2),
                               id=f"{os.path.relpath(path, ROOT)}:{line}")


@pytest.mark.parametrize("path,line,code,expected", list(_blocks()))
def test_doc_block(path, line, code, expected):
    namespace = {"__name__": "__docs_test__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)
    assert "RESULT" in namespace, f"{path}:{line} sets no RESULT"
    assert namespace["RESULT"] == ast.literal_eval(expected)


def test_seed_examples_are_documented():
    ids = [p.id for p in _blocks()]
    assert sum("generation.md" in i for i in ids) >= 2
