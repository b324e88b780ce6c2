// Activity buffers handed to CUPTI, and the walk over a completed buffer.
//
// CUPTI asks for a buffer (on whatever thread first needs one), fills it, and hands it back
// completed on its own worker thread (or on the thread that calls cuptiActivityFlushAll).
// Neither happens on the launch hot path, so the pool may lock and allocate.
//
//   pool: [free list of 1 MB buffers] --Take()--> CUPTI --completed--> DeliverRecords --Give()
//   At most kMaxBuffers exist; past that Take() returns null and CUPTI drops records, which
//   it counts (reported through ActivitySink::OnDropped).
//
// The buffer size bounds how late a record reaches the trace: a periodic (unforced) flush
// hands over only full buffers, so a record waits until ~kBufferBytes of later records were
// written (about 4,800 kernel records of 216 bytes), or the session ends. 8 MB held ~38,800:
// minutes for a job under a few hundred kernels a second.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cupti/activity_sink.h"

namespace tokentrace::cupti {

class BufferPool {
 public:
  static constexpr size_t kBufferBytes = 1u << 20;
  static constexpr size_t kAlignment = 64;    // CUPTI needs 8 (ACTIVITY_RECORD_ALIGNMENT)
  static constexpr size_t kMaxBuffers = 128;  // 128 MB at most, as 16 buffers of 8 MB were

  BufferPool() = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool();

  // A free buffer of kBufferBytes, or null when kMaxBuffers are already out.
  uint8_t* Take();
  void Give(uint8_t* buffer);
  size_t allocated() const;

 private:
  mutable std::mutex mutex_;
  std::vector<uint8_t*> free_;
  size_t allocated_ = 0;
};

using NextRecordFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);

// Walks `valid_bytes` of a completed buffer with `next` (cuptiActivityGetNextRecord),
// converts each record and delivers the ones tokentrace keeps. Returns how many were
// delivered. Stops at the first error other than "no more records".
size_t DeliverRecords(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                      int64_t clock_offset_ns, ActivitySink* sink);

}  // namespace tokentrace::cupti
