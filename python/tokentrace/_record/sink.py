"""Saved outputs: tensors streamed to safetensors shards next to the SQLite file.

Layout: for a trace file `run.sqlite`, shards are `run.sqlite.tensors/shard-00000.safetensors`,
each holding tensors keyed by call id ("1234") for outputs and by "call id:path" for inputs
("1234:past_key_values.layers[0].keys"); the saved_outputs table maps call ids to (shard file,
key), call_inputs rows name their own. Memory is bounded by `shard_bytes`: pending tensors are
written out and released whenever that many bytes are waiting.

CUDA: a saved output is copied into pinned host memory with non_blocking=True on the current
stream and an event is recorded; nothing waits per step. The events are waited on only when a
shard is written (every `shard_bytes`), by which time the copies have long finished.
"""

import os
import shutil

import torch

DEFAULT_SHARD_BYTES = 64 << 20  # tt.trace's shard_mb=64, and the preloaded job's


class TensorSink:
    def __init__(self, sqlite_path, shard_bytes=DEFAULT_SHARD_BYTES):
        """sqlite_path: the trace file, or a callable giving it when the first shard is
        written (preload mode: the file's name is settled only once the shim creates it)."""
        self._path = sqlite_path
        self.directory = None if callable(sqlite_path) else self._directory_for(sqlite_path)
        self._shard_bytes = max(int(shard_bytes), 1)
        self._pending = {}   # key -> host tensor
        self._outputs = set()  # the keys in _pending that are outputs
        self._events = []
        self._bytes = 0
        self._shard = 0
        self.rows = []       # (call_id, file, key) of outputs, written to saved_outputs
        self.files = {}      # key -> shard file, of every tensor written (inputs' too)
        self.failed = 0      # tensors queued but not written (a shard could not be written)
        self.errors = []     # why
        self.peak_pending_bytes = 0

    def _directory_for(self, sqlite_path):
        directory = os.path.abspath(sqlite_path) + ".tensors"
        shutil.rmtree(directory, ignore_errors=True)  # a previous run's
        return directory

    def save(self, call_id, tensor, key=None):
        """Queues `tensor` as call `call_id`'s saved output, or under `key` (an input). Raises
        ValueError for a tensor safetensors cannot store (the caller counts it as a failed
        save)."""
        t = tensor.detach()
        if t.is_nested or t.layout != torch.strided or t.device.type == "meta":
            kind = ("nested" if t.is_nested else "meta" if t.device.type == "meta"
                    else str(t.layout).replace("torch.", ""))
            raise ValueError(f"a {kind} tensor cannot be saved: the tensor files hold dense "
                             f"tensors with data (its shape and dtype are still recorded)")
        if t.is_cuda:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._events.append(event)
        else:
            host = t.clone(memory_format=torch.contiguous_format)
        if key is None:
            key = str(int(call_id))
            self._outputs.add(key)
        self._pending[key] = host
        self._bytes += host.numel() * host.element_size()
        self.peak_pending_bytes = max(self.peak_pending_bytes, self._bytes)
        if self._bytes >= self._shard_bytes:
            self.flush()

    def flush(self):
        if not self._pending:
            return
        from safetensors.torch import save_file

        for event in self._events:
            event.synchronize()  # once per shard, not per step
        name = f"shard-{self._shard:05d}.safetensors"
        try:
            if self.directory is None:
                self.directory = self._directory_for(self._path())
            os.makedirs(self.directory, exist_ok=True)
            save_file(self._pending, os.path.join(self.directory, name))
        except Exception as exc:  # e.g. the disk is full: these tensors are lost, and counted
            self.failed += len(self._pending)
            self.errors.append(f"{type(exc).__name__}: {exc}")
        else:
            rel = f"{os.path.basename(self.directory)}/{name}"
            self.rows.extend((int(k), rel, k) for k in self._pending if k in self._outputs)
            self.files.update((k, rel) for k in self._pending)
            self._shard += 1
        self._pending = {}
        self._outputs = set()
        self._events = []
        self._bytes = 0

    def close(self):
        """Writes what is pending; returns the saved_outputs rows. Never raises: a shard that
        cannot be written is counted in `failed` (and its reason kept in `errors`)."""
        self.flush()
        return self.rows
