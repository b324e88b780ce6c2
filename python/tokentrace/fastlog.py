"""TorchLens's tl.fastlog namespace: Recorder (forwards logged one by one into one recording)
and record (tt.record)."""

from ._api import Recorder, record
from ._read import Recording

__all__ = ["Recorder", "Recording", "record"]
