"""Running a callback right after a module's body has run, however the module is imported.

Used by the preload boot (sitecustomize.py: torch) and by tokentrace.preload (vLLM's engine
core, which calls no module: its adapter installs when vLLM's module is loaded). It lives
beside the boot, on the preloaded job's sys.path, under a name no job uses, and imports
nothing but the standard library.
"""

import sys


def _loaded(name):
    """True when `name`'s module body has run (it is in sys.modules, not being imported)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    return module is not None and not getattr(spec, "_initializing", False)


class AfterImport:
    """A meta path finder that calls `callback(module)` once, right after `name`'s body ran.

    It answers every lookup of `name` with the spec the other finders give, its loader's
    exec_module wrapped, and stays on sys.meta_path until that body has run: a lookup that
    imports nothing (importlib.util.find_spec, as transformers and vLLM probe) leaves it
    watching for the real import, however many times it is asked. Put on while `name` is being
    imported (its body imports what installs this), it calls back at the first import of
    anything after that body has run. An exception in the callback is the caller's to catch
    (it must not stop the job).
    """

    def __init__(self, name, callback):
        self.name, self.callback, self.done = name, callback, False

    def _fire(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        if not self.done:
            self.done = True
            self.callback(sys.modules[self.name])

    def find_spec(self, name, path=None, target=None):
        if self.done:
            return None
        if _loaded(self.name):  # it was being imported when this went on: done now
            self._fire()
            return None
        if name != self.name or self.name in sys.modules:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        watcher = self

        def exec_then_call(module):
            exec_module(module)
            watcher._fire()

        spec.loader.exec_module = exec_then_call
        return spec


def after_import(name, callback):
    """Calls callback(module) once `name` has been imported: now when its body has run, else as
    soon as it has (AfterImport). Returns the watcher, or None when called now."""
    if _loaded(name):
        callback(sys.modules[name])
        return None
    watcher = AfterImport(name, callback)
    sys.meta_path.insert(0, watcher)
    return watcher
