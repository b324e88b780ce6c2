"""What recording a call's inputs adds per call (the root's always; other sites' with inputs_of=).

Times the recorder itself (tokentrace._record.InputRecorder, as the native forward wrapper
calls it: inside the call, with the call's arguments) on three argument sets: one tensor (a
module's `x`), and a Llama decoding step's root call (input_ids, a DynamicCache of L layers
holding 128 positions, use_cache) for L = 2 and 32, with the native walk (what a site whose
inputs are not saved gets, the root's by default; python/src/inputs_walk.cc) and with the
Python one (the reference, what saved sites get). Sites not recorded pay nothing: the wrapper
skips a null callback (see hook_overhead.py for that path). The rows are drained after each
repeat, outside the timing (the recorder does that when it writes them, off the call path).
With --writer, the native walk runs as in a trace: a session records, each call is open, and
the walk hands each call's rows to the session's writer as the call is recorded (what a trace
does since the Python layer's rows go through the one writer); the writer's thread writes them.
Prints a markdown table: median ns per recorded call (wall and this thread's CPU time), and
CPU ns per tensor recorded.

    python bench/input_overhead.py [--calls 2000] [--repeats 7] [--writer]
"""

import argparse
import statistics
import time

import torch

from tokentrace._record import InputRecorder


def _cache(layers):
    from transformers import DynamicCache
    cache = DynamicCache()
    for i in range(layers):
        cache.update(torch.zeros(1, 8, 128, 64), torch.zeros(1, 8, 128, 64), i)
    return cache


def _forward(input_ids=None, past_key_values=None, use_cache=None, x=None):
    return None


def _time(recorder, on_input, args, kwargs, calls, repeats):
    """(wall, CPU) ns per call, medians over repeats. The CPU time is this thread's: on a
    shared VM the wall time also holds the time other jobs had the core."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(calls):
            on_input(*args, **kwargs)
        cpu.append((time.thread_time_ns() - c0) / calls)
        wall.append((time.perf_counter_ns() - t0) / calls)
        recorder.rows.clear()  # drains the native walk's buffer, then drops the rows
    return statistics.median(wall), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--writer", action="store_true",
                    help="native walk, rows handed to a recording session's writer per call")
    a = ap.parse_args()
    if a.writer:
        return _with_writer(a)
    cases = _cases()
    print(f"## Input recording per call (median of {a.repeats} x {a.calls} calls)\n")
    print("| arguments | tensors | walk | ns per call | CPU ns per call | CPU ns per tensor |")
    print("|---|---|---|---|---|---|")
    for name, args, kwargs, tensors in cases:
        for native in (True, False):
            recorder = InputRecorder(lambda: (1, 1, 1), native=native)
            on_input = recorder.hook(_forward, False)
            ns, cpu = _time(recorder, on_input, args, kwargs, a.calls, a.repeats)
            walk = "native" if type(on_input).__name__ == "InputWalker" else "Python"
            print(f"| {name} | {tensors} | {walk} | {ns:.0f} | {cpu:.0f} | {cpu / tensors:.0f} |")


def _with_writer(a):
    import os
    import tempfile

    from tokentrace._common import loader
    native = loader.load()
    path = os.path.join(tempfile.mkdtemp(), "inputs.sqlite")
    native.start(path, "off", None)
    root = native.site("self", native.SITE_KINDS["root"])
    print(f"## Input recording per call, rows handed to the writer (median of {a.repeats} x "
          f"{a.calls} calls)\n")
    print("| arguments | tensors | ns per call | CPU ns per call | CPU ns per tensor |")
    print("|---|---|---|---|---|")
    try:
        for name, args, kwargs, tensors in _cases():
            recorder = InputRecorder(native.current, None, lambda: path)
            on_input = recorder.hook(_forward, False)
            native.push(root)  # the call whose inputs these are
            try:
                ns, cpu = _time(recorder, on_input, args, kwargs, a.calls, a.repeats)
            finally:
                native.pop()
            print(f"| {name} | {tensors} | {ns:.0f} | {cpu:.0f} | {cpu / tensors:.0f} |")
    finally:
        native.stop()


def _cases():
    cases = [("one tensor (x)", (), {"x": torch.zeros(1, 1, 4096)}, 1)]
    for layers in (2, 32):
        cases.append((f"Llama step root: DynamicCache of {layers} layers", (torch.zeros(1, 1),),
                      {"past_key_values": _cache(layers), "use_cache": True}, 2 * layers + 1))
    return cases


if __name__ == "__main__":
    main()
