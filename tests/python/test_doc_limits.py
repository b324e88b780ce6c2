"""The docs state the limits the code sets, with the code's numbers: each number here is read
from the C++ constant that sets it and looked for in the sentences about it (the README and the
pages of docs/ it links), so a changed constant fails this test until the docs say the new
value."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = "\n".join(p.read_text()
                   for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _value(path, name):
    """The value of `name` as `path` defines it (`name = <expr>;` or `#define name <expr>`)."""
    text = (ROOT / path).read_text()
    m = re.search(rf"(?:\b{name}\s*=\s*|#define\s+{name}\s+)([^;\n]+?)\s*(?:;|\n|//)", text)
    assert m, f"{name} is not defined in {path}"
    expr = re.sub(r"int64_t\{(\d+)\}", r"\1", m.group(1))
    expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr).strip("() ")
    assert re.fullmatch(r"[\d\s<>*+()]+", expr), f"{name} = {m.group(1)!r} is not a plain number"
    return eval(expr)  # digits and << * + only, checked above


def _n(v):
    return f"{v:,}"


LIMITS = [
    # (file, constant, how the README writes it, the sentences that must carry it)
    ("src/cupti/activity_buffers.h", "kBufferBytes", lambda v: f"{v >> 20} MB",
     ["when the buffer is full\n({} , about", "waits until {} of later records"]),
    ("src/core/config.h", "flush_ms", lambda v: f"{v} ms",
     ["at least every {}.", "not only every {}."]),
    ("src/session/drainer.h", "chunk_events", _n, ["in chunks of at most {} events per thread"]),
    ("preload/session.cc", "kSignalDrainStep", _n, ["in steps of {} per thread"]),
    ("src/core/drain_budget.h", "kSignalDrainNs", lambda v: f"{v // 10**9} s",
     ["until they are empty or {} have passed", "from the buffers for {} and counts"]),
    ("src/core/drain_budget.h", "kSignalWaitNs", lambda v: f"{v // 10**9} s",
     ["at most ~{} after it", "waits {} on a monotonic deadline"]),
    ("src/store/store.h", "kReserveBytes", lambda v: f"{v >> 10} KiB", ["into {} set aside"]),
    ("src/cupti/subscriber.h", "kDeviceWaitMs", lambda v: f"{v // 1000} s",
     ["waits at most {} for the GPUs"]),
    ("include/tokentrace/tokentrace.h", "TOKENTRACE_MAX_CALL_NUMBER", _n,
     ["past {} (`TOKENTRACE_MAX_CALL_NUMBER`"]),
]


def _flat(text):
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("path,name,written,sentences", LIMITS, ids=[c[1] for c in LIMITS])
def test_the_readme_says_the_codes_limit(path, name, written, sentences):
    said = written(_value(path, name))
    for sentence in sentences:
        expected = _flat(sentence.format(said).replace(" ,", ","))
        assert expected in _flat(README), (
            f"README.md or docs/ should say {expected!r} ({name} in {path} is {said})")


def test_the_activity_buffer_size_is_stated_one_way():
    said = f"{_value('src/cupti/activity_buffers.h', 'kBufferBytes') >> 20} MB"
    sizes = re.findall(r"activity\s+buffers?[^.]{0,200}?(\d+\s*MB)", README)
    sizes += re.findall(r"(\d+\s*MB)[^.]{0,40}?(?:of later records|kernels\))", README)
    assert sizes and all(_flat(s) == said for s in sizes), sizes
