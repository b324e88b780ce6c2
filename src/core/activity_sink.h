// How GPU activity records leave the CUPTI seam: a completed CUPTI activity buffer, whole.
//
// src/cupti implements ActivityBuffer over the buffer CUPTI filled (cupti/activity_buffers.h)
// and hands each completed one to an ActivitySink; src/session implements the sink
// (session/activity_handoff.h) and the drain walks the buffer. Plain C++ on both sides, so
// tests hand-build buffers of records on any machine.
//
// A record is converted to a GpuActivity once, on the thread that walks the buffer, and a
// kernel's name is never copied: it points into memory the buffer keeps alive until Release().
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/records.h"

namespace tokentrace {

// One completed activity buffer. Owned by whoever it was handed to, until Release().
class ActivityBuffer {
 public:
  // Calls on_record(const GpuActivity&) for each record tokentrace keeps (kernels, memcpys,
  // memsets), in the order CUPTI wrote them, and returns how many. A record's name is valid
  // until Release(). Any thread, one at a time.
  template <typename F>
  size_t ForEach(F&& on_record) {
    using Fn = std::remove_reference_t<F>;
    return Walk([](void* f, const GpuActivity& a) { (*static_cast<Fn*>(f))(a); },
                const_cast<void*>(static_cast<const void*>(&on_record)));
  }
  // Gives the buffer back to where it came from (the pool CUPTI takes buffers from). Neither
  // the buffer nor a name it handed out may be used afterwards. Any thread.
  virtual void Release() = 0;

  // Free for the owner's use: the link of an intrusive list (session/activity_handoff.h).
  ActivityBuffer* next = nullptr;

 protected:
  using RecordFn = void (*)(void* context, const GpuActivity& activity);
  virtual size_t Walk(RecordFn on_record, void* context) = 0;
  ~ActivityBuffer() = default;  // Release() ends its life, never delete
};

// Where completed buffers go. Implementations must not throw (the caller is a C callback)
// and must not call back into CUDA.
class ActivitySink {
 public:
  virtual ~ActivitySink() = default;
  // A completed buffer; the sink owns it from now on and calls Release() on it once. Called
  // on CUPTI's buffer-completion thread or on a thread inside cupti::Flush/Stop, possibly on
  // two of them at once.
  virtual void OnBuffer(ActivityBuffer* buffer) = 0;
  // Records CUPTI could not store (no free buffer, or device-side overflow) since the last
  // report for the same context/stream. Called after every buffer, also with 0, and for
  // every queue after the final forced flush (cupti::Flush(true), cupti::Stop()). Any of the
  // threads above, possibly at once.
  virtual void OnDropped(uint64_t records) = 0;
};

}  // namespace tokentrace
