"""Installs and removes the recording hooks on one model; shared by trace, record and preload.

Per hooked site, the module's `forward` is replaced by a native wrapper (an instance attribute
over the class's forward; see python/src/native.cc): each call opens a tokentrace call, runs
the original forward, records the output and closes the call, also when forward raises. torch
keeps calling such modules through its fast path, which is why this costs far less than a
forward pre-hook and hook pair.

A module that already has forward hooks or pre-hooks when the trace starts (the user's, or an
edit spec's from tt.when) gets that pair instead (pre-hook prepended, post-hook appended with
always_call=True), so the other hooks run inside the recorded call: their kernels count
towards it, and the recorded and saved output is the one after the edits. torch runs such
modules through its slow path anyway. A module whose forward cannot be replaced gets the pair
as well.

Sites in `inputs` (an InputRecorder records them) also record what each call was given: the
wrapper hands the arguments to the recorder inside the call, before forward runs; with the
hook pair, a forward pre-hook after all others does (so both record what forward receives,
after any input edits). Sites not in `inputs` pay nothing for it.

remove() restores each module's forward as it was. If someone else replaced forward over ours
in the meantime, ours stays in their chain as a pass-through. Models holding an
nn.DataParallel get the hook pairs everywhere: its replicas are shallow copies of each
module's __dict__, and a wrapped forward would call the original module from them.
"""

import functools
import threading
import warnings

import torch
from torch.nn import DataParallel

from .._common import ROOT, op_groups, site_names
from .._compiled import compiled_layout

_MISSING = object()


def _both(first, then):
    """An input callable that runs `first` (None: nothing), then `then`."""
    if first is None:
        return then

    def both(*args, **kwargs):
        first(*args, **kwargs)
        then(*args, **kwargs)
    return both


def original_forward(forward):
    """What a pickled or deep-copied forward wrapper becomes: the forward it wrapped."""
    return forward



def _carrying(native, compiled):
    """The recording wrapper of a compiled method a module holds in an attribute of its own
    (compiled_entry): a function that calls `native` and carries `compiled`'s attributes, which
    the module's own code may read (vLLM asks its compiled callable for `aot_compile`)."""
    def held(*args, **kwargs):
        return native(*args, **kwargs)
    return functools.update_wrapper(held, compiled)


def _output_tensors(value, depth=0, found=None):
    """The tensors in a module's output: in tuples, lists, dict values (a ModelOutput) and the
    attributes of other objects (a KV cache), depth-first, at most 5 deep and 4096 tensors."""
    found = [] if found is None else found
    if isinstance(value, torch.Tensor):
        found.append(value)
        return found
    if depth >= 5 or len(found) >= 4096 or isinstance(value, (str, bytes, int, float, bool)):
        return found
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    elif isinstance(value, torch.nn.Module) or not hasattr(value, "__dict__"):
        items = []
    else:
        items = list(vars(value).values())
    for item in items:
        _output_tensors(item, depth + 1, found)
    return found


class HookSet:
    def __init__(self, backend, model, hooked, saved=(), sink=None, inputs=(), recorder=None,
                 names=None, root_is_token=True, link_outputs=False, root_input=None):
        self.backend = backend
        # root_input(forward) -> callable(*args, **kwargs): what else reads the root's inputs,
        # inside each root call (the token ids: token_text.py)
        self.root_input = root_input
        backend.set_forward_identity(original_forward)  # what a pickled wrapper becomes
        # With op records: the root's output tensors by identity (the ops whose outputs never
        # reach them are orphans to op labels, as TorchLens's: _read/op_loops.py)
        self.link_outputs = link_outputs
        # False: the tokens are another site's calls (RootChoice.token), the model's are plain
        self.root_is_token = root_is_token
        self.model = model
        self.names = names if names is not None else site_names(model)  # {site: module}
        self.hooked = list(hooked)
        self.saved = set(saved)
        self.sink = sink
        self.inputs = set(inputs) if recorder is not None else set()
        self.recorder = recorder
        self.handles = []
        self.wrapped = []   # (module, wrapper, the instance attribute it replaced or _MISSING,
        #                    that attribute: "forward", or a compiled module's entry)
        self._natives = {}  # id(wrapper) -> its native wrapper, where the two differ (_wrap)
        self.not_hooked = []  # sites asked for that run inside a compiled region
        self.entries = []  # root wrappers around compiled calls the job made (entry())
        self._root = None  # (site id, kind, saver, on_input) of the root, when it is recorded
        self._plan = None  # hide()'s, see _hide_plan
        self.site_ids = {}
        self._save_errors = 0
        self._warned = False
        self._lock = threading.Lock()

    @property
    def save_errors(self):
        """Outputs of saved sites that could not be saved (also after remove())."""
        return (self._save_errors + sum(w.output_errors for w in self._wrappers())
                + (self.sink.failed if self.sink is not None else 0))

    def _wrappers(self):
        """The native wrappers (their counters, their `enabled`)."""
        return [self._natives.get(id(w), w) for _, w, _, _ in self.wrapped] + self.entries

    def install(self):
        """Installs the hooks (before the root's first call)."""
        names = self.names
        # nn.DataParallel copies each module's __dict__ into its replicas: a wrapped forward
        # would run the original module there. Such models get the hook pairs throughout.
        replicated = any(isinstance(m, DataParallel) for m in names.values())
        # Compiled modules are wrapped at their entry, outside the compiled region, and what
        # runs inside it is left alone (_compiled/entry.py).
        entries, inside = compiled_layout(names)
        self.not_hooked = [n for n in self.hooked if n in inside]
        try:
            for name in self.hooked:
                if name in inside:
                    continue
                mod = names[name]
                kind = self.backend.site_kind(
                    "root" if name == ROOT and self.root_is_token else "module")
                sid = self.backend.site(name, kind)
                self.site_ids[name] = sid
                saver = self._saver(name) if name in self.saved and self.sink is not None else None
                if name == ROOT and self.link_outputs:
                    saver = self._output_links(saver)
                on_input = (self.recorder.hook(mod.forward, name in self.saved)
                            if name in self.inputs else None)
                if name == ROOT and self.root_input is not None:
                    on_input = _both(on_input, self.root_input(mod.forward))
                wrapped = False
                if name in entries:
                    wrapped = self._wrap(mod, sid, name, kind, saver, on_input, entries[name])
                elif not (replicated or mod._forward_hooks or mod._forward_pre_hooks):
                    wrapped = self._wrap(mod, sid, name, kind, saver, on_input)
                if not wrapped:
                    self._hook(mod, sid, name, kind, saver, on_input)
                if name == ROOT:
                    self._root = (sid, kind, saver, on_input)
        except BaseException:
            self.remove()
            raise

    @property
    def input_errors(self):
        """Calls whose inputs could not be recorded (also after remove())."""
        if self.recorder is None:
            return 0
        return self.recorder.failed + sum(w.input_errors for w in self._wrappers())

    def _wrap(self, mod, sid, name, kind, saver, on_input, attr="forward"):
        """Wraps `mod`'s `attr` in the native recording wrapper; False when it cannot be."""
        previous = mod.__dict__.get(attr, _MISSING)
        forward = getattr(mod, attr)
        native = self.backend.wrap_forward(sid, name, kind, forward, saver, on_input)
        wrapper = native
        if attr not in ("forward", "_compiled_call_impl"):
            wrapper = _carrying(native, forward)
        try:
            object.__setattr__(mod, attr, wrapper)
        except Exception:
            return False
        self.wrapped.append((mod, wrapper, previous, attr))
        if wrapper is not native:
            self._natives[id(wrapper)] = native
        return True

    def _hook(self, mod, sid, name, kind, saver, on_input):
        pre = self.backend.pre_hook(sid, name, kind)
        post = self.backend.post_hook(sid, True)
        if saver is not None:
            inner = post

            def post(module, args, output):
                saver(output)
                return inner(module, args, output)
        record_inputs = self.recorder.safe(on_input) if on_input is not None else None
        if record_inputs is not None:  # after every other pre-hook: what forward receives
            self.handles.append(mod.register_forward_pre_hook(record_inputs, with_kwargs=True))
        self.handles.append(mod.register_forward_pre_hook(pre, prepend=True))
        self.handles.append(mod.register_forward_hook(post, always_call=True))

    def _output_links(self, saver):
        """`saver` (or None) after linking the call's output tensors: every tensor in its
        tuples, lists and dicts (a ModelOutput is one), outputs [0], [1], ... of the open
        call."""
        link, handle = self.backend.link, op_groups.tensor_handle

        def save(output):
            try:
                for index, tensor in enumerate(_output_tensors(output)):
                    link(1, index, handle(tensor))
            except Exception:  # an odd output: no orphans found, the job runs on
                pass
            if saver is not None:
                saver(output)
        return save

    def _saver(self, site):
        current = self.backend.current
        first_tensor = self.backend.first_tensor  # the tensor whose shape the call records
        sink = self.sink

        def save(output):
            try:
                tensor, _ = first_tensor(output)
                if tensor is not None:
                    call_id = current()[0]
                    if call_id:
                        sink.save(call_id, tensor)
            except Exception as exc:  # never crash the traced job
                self._save_failed(site, exc)
        return save

    def _save_failed(self, site, exc):
        with self._lock:
            self._save_errors += 1
            if self._warned:
                return
            self._warned = True
        warnings.warn(f"tokentrace: could not save an output of '{site}': {exc}. Saving "
                      f"continues; failures are counted in the trace's losses (save_failed)",
                      RuntimeWarning)

    def remove(self):
        for handle in self.handles:
            try:
                handle.remove()
            except Exception:
                pass
        self.handles = []
        self._save_errors += sum(w.output_errors for w in self._wrappers())  # kept
        if self.recorder is not None:
            self.recorder.failed += sum(w.input_errors for w in self._wrappers())  # kept
        for wrapper in self.entries:  # held by the job (a compiled call): passes through now
            wrapper.enabled = 0
        self.entries = []
        self._plan = None  # nothing left to hide: keep no module dicts alive
        for mod, wrapper, previous, attr in reversed(self.wrapped):
            if mod.__dict__.get(attr) is wrapper:
                if previous is _MISSING:
                    del mod.__dict__[attr]
                else:
                    mod.__dict__[attr] = previous
            else:  # wrapped over by someone else: stay in their chain, doing nothing
                self._natives.get(id(wrapper), wrapper).enabled = 0
        self.wrapped = []
        self._natives = {}

    @property
    def records_root(self):
        return self._root is not None

    @property
    def hooked_inside_root(self):
        """How many recorded sites other than the root a compiled call of the root hides."""
        return len(self.site_ids) - (1 if ROOT in self.site_ids else 0)

    def entry(self, fn):
        """A recording wrapper of the root around `fn`, a compiled call of the root that the
        job made (_compiled/call.py): a call of it is a root call, with
        the root's inputs and saved output as its own wrapper records them."""
        sid, kind, saver, on_input = self._root
        wrapper = self.backend.wrap_forward(sid, ROOT, kind, fn, saver, on_input)
        self.entries.append(wrapper)
        return wrapper

    def _hide_plan(self):
        """What hide() goes through, made once per set of wrappers and handles: (each wrapped
        module's __dict__, the attribute, our wrapper, what it replaced), and (each hook dict
        our handles are in, their ids in it)."""
        key = (len(self.wrapped), len(self.handles))
        if self._plan is None or self._plan[0] != key:
            swap = [(m.__dict__, attr, w, p) for m, w, p, attr in self.wrapped]
            dicts = {}
            for handle in self.handles:
                for ref in (handle.hooks_dict_ref,) + tuple(handle.extra_dict_ref):
                    d = ref()
                    if d is not None:
                        dicts.setdefault(id(d), (d, set()))[1].add(handle.id)
            self._plan = (key, swap, list(dicts.values()))
        return self._plan[1], self._plan[2]

    def hide(self):
        """Takes this set's wrappers and hooks off the modules, leaving them as they were
        before install(), and returns the function that puts them back, each where it was.
        For a compiled call of the model (TorchDynamo would break its graph at each of
        them); the modules look the same to it at every call, so its guards hold. It runs
        at every such call: the wrappers in C over a plan made once, the hook pairs (modules
        that had hooks of their own) here (bench/compiled_call_cost.py measures both). A
        hide() inside a hidden stretch (a compiled call in another) finds nothing to take."""
        swap, dicts = self._hide_plan()
        shown = self.backend.hide_attributes(swap, _MISSING)
        hidden = []  # (hook dict, its items in their order, our ids in it, the keys left)
        for d, ids in dicts:
            present = ids.intersection(d)
            if present:
                items = list(d.items())
                for k in present:
                    del d[k]
                hidden.append((d, items, present, list(d)))

        def show():
            for d, items, ours, left in hidden:
                if list(d) == left:  # untouched while hidden: as it was
                    d.clear()
                    d.update(items)
                    continue
                now = dict(d)  # the job changed its hooks meanwhile: ours back, theirs kept
                d.clear()
                d.update((k, v) for k, v in items if k in ours or k in now)
                d.update((k, v) for k, v in now.items() if k not in d)
            self.backend.show_attributes(shown)
        return show
