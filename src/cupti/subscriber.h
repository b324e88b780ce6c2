// The CUPTI subscriber: launch/sync/graph callbacks into recorder::, completed activity
// buffers into an ActivitySink (core/activity_sink.h; the drain walks them). The public face
// of src/cupti (no CUPTI type appears here).
//
// Without libcupti, without a driver, or with another CUPTI subscriber present, Start()
// returns false and says why in one line starting "tokentrace:"; calls and tokens are
// still recorded by the rest of tokentrace.
#pragma once

#include <string>

#include "core/activity_sink.h"
#include "core/config.h"
#include "core/kernels_off.h"

namespace tokentrace::cupti {

// Loads libcupti, subscribes, puts CUPTI timestamps on clock::HostNowNs(), enables the
// callbacks (callback_classify.h) and CONCURRENT_KERNEL / MEMCPY / MEMSET activity.
// `sink` must outlive Stop() (buffers it was handed stay its own: it releases them). Not
// thread-safe against Stop(); call from one thread.
// On failure `why_off` gets the detail and `kind` (when given) the category of core/kernels_off.h.
bool Start(const Config& config, ActivitySink* sink, std::string* why_off,
           KernelsOff* kind = nullptr);
// Delivers buffered records now. Not forced (the periodic flush while the job runs): only
// buffers whose records are all complete; a forced flush would hand over records whose
// timestamps are not filled in yet, and CUPTI cannot complete them later. Forced: every
// buffer, for the end of a session, after WaitForDevice(); then also reports what CUPTI
// dropped since the last completed buffer of each queue (ActivitySink::OnDropped).
void Flush(bool forced);
// Flushes, disables activity, unsubscribes. After it returns the sink is not called again.
void Stop();
// Waits for the GPU work of every device the job used (each active primary context, and the
// calling thread's current context), so that a final Flush() sees the records of kernels
// still running. At most `timeout_ms`: a hung GPU must not hang the job's exit. Returns the
// number of contexts not known to be finished then (their records may be missing: the
// caller counts them). Uses the already loaded driver; never loads one, never initialises
// CUDA.
constexpr int kDeviceWaitMs = 10000;
int WaitForDevice(int timeout_ms = kDeviceWaitMs);
// What WaitForDevice could not confirm since the last call (the "gpu_wait_timeout" loss).
uint64_t TakeDeviceWaitTimeouts();
// "<path> (<why it was a candidate>), API version <n>" once Start() succeeded ("" before),
// e.g. "/v/nvidia/cu13/lib/libcupti.so.13 (next to the CUDA runtime the job loaded,
// /v/nvidia/cu13/lib/libcudart.so.13), API version 130001": the trace's meta key `cupti`, so
// a run says which CUPTI recorded it and why that one.
std::string Describe();

}  // namespace tokentrace::cupti
