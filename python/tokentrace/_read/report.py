"""trace.report(): the `tokentrace report` program's text, plus the Python layer's escape sites.

The per-token report is written once, in C++ (src/cli/report_command.cc), and read here from
the program that is built and installed next to the extension. It stays a process on purpose:
through the extension, the extension would link the CLI, the store and SQLite, a second copy
of the core next to libtokentrace.so in the traced process, to save the spawn (a report()
takes 6 to 8 ms, 1 to 4 of them the spawn). Its failures are one line (the program's own, or
how to build it): tests/python/test_cross_language.py.
"""

import subprocess

from .._common import loader
from .._errors import fail


def render_report(path, escape_sites=(), top=15):
    """The report of the trace file at `path`, as `tokentrace report FILE --top N` prints it,
    and the escape sites after it."""
    program = loader.find_program()
    if program is None:
        fail("the `tokentrace` program is not built, so there is no report; build it: "
             "pip install . , or scripts/setup.sh (then `tokentrace report FILE` works too)")
    res = subprocess.run([program, "report", str(path), "--top", str(int(top))],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        fail(res.stderr.strip().removeprefix("tokentrace: ") or
             f"tokentrace report exited with status {res.returncode}")
    lines = [res.stdout.rstrip("\n")]
    if escape_sites:
        total = sum(n for _, n in escape_sites)
        lines.append(f"\nhost reads of device values (escapes): {total}, where:")
        lines.extend(f"  {n:>6}x  {loc}" for loc, n in escape_sites[:top])
    return "\n".join(lines)
