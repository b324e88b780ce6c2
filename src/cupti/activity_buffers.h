// Activity buffers handed to CUPTI, and a completed one as an ActivityBuffer
// (core/activity_sink.h) that the drain walks.
//
// CUPTI asks for a buffer (on whatever thread first needs one), fills it, and hands it back
// completed on its own worker thread (or on the thread that calls cuptiActivityFlushAll). The
// completed buffer goes to the sink as it is; the drain walks it later with
// cuptiActivityGetNextRecord, CUPTI's helper that parses a buffer its caller owns (Kineto
// walks its buffers off CUPTI's threads the same way), and gives it back here:
//
//   pool: [free list] --Take()--> CUPTI fills --completed--> Complete() --sink--> drain walks
//     ^                                                                               |
//     +------------------------------- Release() -> Give() ---------------------------+
//
// So nothing is copied on CUPTI's thread, and a kernel's name (CUPTI's string, valid at least
// as long as the buffer) is read in place by the drain. At most kMaxBuffers exist; past that
// Take() returns null and CUPTI drops records, which it counts (ActivitySink::OnDropped): a
// drain stalled until all of them wait makes CUPTI drop, not tokentrace's memory grow.
//
// Each allocation carries its ActivityBuffer object in front of the bytes CUPTI writes, so
// completing a buffer allocates nothing and takes no lock:
//
//   aligned_alloc(kAlignment, kHeaderBytes + kBufferBytes)
//   +----------------------------+--------------------------------------------+
//   | PooledBuffer (<= 64 bytes) | kBufferBytes of CUPTI records              |
//   +----------------------------+--------------------------------------------+
//                                ^ what Take() returns and CUPTI fills
//
// Take() and Give() lock the free list: once per 1 MB buffer, off the launch hot path.
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

#include "core/activity_sink.h"

namespace tokentrace::cupti {

using NextRecordFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);

class BufferPool {
 public:
  static constexpr size_t kBufferBytes = 1u << 20;
  static constexpr size_t kAlignment = 64;    // CUPTI needs 8 (ACTIVITY_RECORD_ALIGNMENT)
  static constexpr size_t kHeaderBytes = 64;  // the PooledBuffer in front of each buffer
  static constexpr size_t kMaxBuffers = 128;  // 128 MB at most, as 16 buffers of 8 MB were

  // The free list never grows past kMaxBuffers: reserved at once, so giving a buffer back
  // never allocates (a drain with no memory left still returns its buffers).
  BufferPool() { free_.reserve(kMaxBuffers); }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // Frees the free buffers; the pool must outlive every buffer taken from it.
  ~BufferPool();

  // A free buffer of kBufferBytes for CUPTI, or null when kMaxBuffers are already out.
  uint8_t* Take();
  // Back to the free list, unread (null is ignored).
  void Give(uint8_t* buffer);
  // `buffer` (from Take) was completed by CUPTI with `valid_bytes` of records: it as an
  // ActivityBuffer whose ForEach walks it with `next` (cuptiActivityGetNextRecord), adding
  // `clock_offset_ns` to every time, and whose Release() gives it back here. No lock, no
  // allocation: any thread.
  ActivityBuffer* Complete(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                           int64_t clock_offset_ns);

  size_t allocated() const;
  size_t free_buffers() const;

 private:
  mutable std::mutex mutex_;
  std::vector<uint8_t*> free_;  // buffer (data) pointers
  size_t allocated_ = 0;
};

}  // namespace tokentrace::cupti
