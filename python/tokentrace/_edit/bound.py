"""BoundModel: a model with an edit spec installed per run (EditSpec.bind)."""

from __future__ import annotations

import contextlib

from .._errors import fail
from .hooks import EditHooks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    import torch

    from .._backend import torch_library
    from .report import EditReport
    from .spec import EditSpec


class BoundModel:
    """The model with edits installed per run. bound(...) = forward, bound.generate(...).

    Each call of bound(...) or bound.generate(...) is one run: the hooks go on, every counter
    starts from zero (token 1 = the first root call), and last_report describes the run. Inside
    `with bound.installed():` the hooks stay on across calls of the model (bound or not) and
    counting continues: what a serving loop or a CUDA graph replayed step by step needs."""

    def __init__(self, model: torch.nn.Module, spec: EditSpec) -> None:
        self._hooks = EditHooks(model, spec)  # resolves and validates now: errors before any run
        self._model = model
        self._inside = False
        self.last_report: EditReport | None = None

    @property
    def model(self) -> torch.nn.Module:
        return self._model

    @property
    def patch_table(self) -> torch_library.PatchTable | None:
        """The native PatchTable of the declarative rules (None when there are none)."""
        return self._hooks.table

    def _run(self, fn, args, kwargs):
        if self._inside:
            return fn(*args, **kwargs)
        with self.installed():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def installed(self) -> Iterator[BoundModel]:
        """Installs the edits on the model for the whole block (one run); last_report covers
        it. Counters continue across calls inside the block."""
        if self._inside:
            fail("the edits of this bound model are already installed (nested installed())")
        hooks = self._hooks
        hooks.begin_run()
        hooks.install()
        self._inside = True
        try:
            yield self
        finally:
            self._inside = False
            hooks.remove()
            self.last_report = hooks.report()
        hooks.warn_unfired_labels()  # a run that ended without an exception

    def reset_counters(self) -> None:
        """Every call, token and fire counter back to zero (inside installed(): e.g. after
        warming up and capturing a CUDA graph, before replaying it)."""
        self._hooks.reset_counters()

    def report(self) -> EditReport:
        """A report of the counters so far (inside installed(), or of the last run)."""
        return self._hooks.report()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self._model, args, kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self._model.generate, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __repr__(self):
        return f"<tokentrace bound {type(self._model).__name__} {self._hooks.spec!r}>"
