"""Scalar escapes seen from Python: host reads of tensor values while a trace records.

While installed, torch.Tensor.item/__bool__/__int__/__float__/__index__/tolist are wrapped so
that each read is counted with the current token and the Python line that made it. On the
CPU this is the only source of escapes (and each one is also reported to the shim as escape
kind host_read); on CUDA the shim counts the real synchronizing copies and this table only says
where they came from. The wrappers are removed on exit, even when the traced code raised.
"""

import os
import sys
import threading
import warnings
from collections import Counter

import torch

from .._common import PACKAGE_DIR
from .._errors import ScalarEscapeWarning

_METHODS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist")


def _short(filename):
    """transformers/generation/utils.py for .../site-packages/transformers/generation/utils.py."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        i = filename.rfind(marker)
        if i >= 0:
            return filename[i + len(marker):]
    return filename


class EscapeCounter:
    def __init__(self, current_token):
        self._current_token = current_token  # () -> int
        self._report = None                  # set_report(): e.g. the backend's escape()
        self.counts = Counter()              # (token, location) -> reads
        self._saved = {}
        self._busy = threading.local()

    def set_report(self, report):
        """Where each read is also reported (None: counted here only)."""
        self._report = report

    def _hit(self, frame):
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            # Skip frames inside tokentrace and torch's own wrappers (torch/_tensor.py) so
            # the location is the user's or the library's line that asked for the value.
            while frame is not None and (frame.f_code.co_filename.startswith(PACKAGE_DIR)
                                         or frame.f_code.co_filename.endswith("torch/_tensor.py")):
                frame = frame.f_back
            where = (f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"
                     if frame is not None else "?")
            self.counts[(self._current_token(), where)] += 1
            if self._report is not None:
                self._report()
        except Exception:
            pass  # never disturb the traced job
        finally:
            self._busy.on = False

    def install(self):
        for name in _METHODS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = (name in torch.Tensor.__dict__, original)
            setattr(torch.Tensor, name, self._wrap(original))

    def _wrap(self, original):
        hit = self._hit
        getframe = sys._getframe

        def wrapper(tensor, *args, **kwargs):
            hit(getframe(1))
            return original(tensor, *args, **kwargs)
        wrapper.__name__ = getattr(original, "__name__", "escape")
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def remove(self):
        for name, (own, original) in self._saved.items():
            if own:
                setattr(torch.Tensor, name, original)
            else:
                try:
                    delattr(torch.Tensor, name)
                except AttributeError:
                    pass
        self._saved = {}

    def rows(self):
        """(token, location, count) rows for the escape_sites table."""
        return [(t, loc, n) for (t, loc), n in sorted(self.counts.items())]


def warn_once(total, tokens, locations, stacklevel=3):
    """One ScalarEscapeWarning for a finished trace (no-op when total == 0)."""
    if total <= 0:
        return
    per = total / max(tokens, 1)
    where = ", ".join(f"{loc} ({n}x)" for loc, n in locations[:3]) or "unknown locations"
    more = f" and {len(locations) - 3} more" if len(locations) > 3 else ""
    warnings.warn(ScalarEscapeWarning(
        f"tokentrace: the traced code read device values on the host {total} times over "
        f"{tokens} tokens ({per:.1f} per token) at {where}{more}; decisions made from them "
        f"(such as generate's stopping check) are not part of the recorded trace"),
        stacklevel=stacklevel)
