"""BoundModel: a model with an edit spec installed per run (EditSpec.bind)."""

import contextlib

from ._edit_hooks import EditHooks
from ._errors import fail


class BoundModel:
    """The model with edits installed per run. bound(...) = forward, bound.generate(...).

    Each call of bound(...) or bound.generate(...) is one run: the hooks go on, every counter
    starts from zero (token 1 = the first root call), and last_report describes the run. Inside
    `with bound.installed():` the hooks stay on across calls of the model (bound or not) and
    counting continues: what a serving loop or a CUDA graph replayed step by step needs."""

    def __init__(self, model, spec):
        self._hooks = EditHooks(model, spec)  # resolves and validates now: errors before any run
        self._model = model
        self._inside = False
        self.last_report = None

    @property
    def model(self):
        return self._model

    @property
    def patch_table(self):
        """The native PatchTable of the declarative rules (None when there are none)."""
        return self._hooks.table

    def _run(self, fn, args, kwargs):
        if self._inside:
            return fn(*args, **kwargs)
        with self.installed():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def installed(self):
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

    def reset_counters(self):
        """Every call, token and fire counter back to zero (inside installed(): e.g. after
        warming up and capturing a CUDA graph, before replaying it)."""
        self._hooks.reset_counters()

    def report(self):
        """A report of the counters so far (inside installed(), or of the last run)."""
        return self._hooks.report()

    def __call__(self, *args, **kwargs):
        return self._run(self._model, args, kwargs)

    def generate(self, *args, **kwargs):
        return self._run(self._model.generate, args, kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __repr__(self):
        return f"<tokentrace bound {type(self._model).__name__} {self._hooks.spec!r}>"
