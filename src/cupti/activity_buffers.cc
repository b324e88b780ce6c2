#include "cupti/activity_buffers.h"

#include <cstdlib>

#include "cupti/activity_convert.h"

namespace tokentrace::cupti {

BufferPool::~BufferPool() {
  for (uint8_t* b : free_) std::free(b);
}

uint8_t* BufferPool::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!free_.empty()) {
    uint8_t* b = free_.back();
    free_.pop_back();
    return b;
  }
  if (allocated_ >= kMaxBuffers) return nullptr;
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, kBufferBytes));
  if (b != nullptr) ++allocated_;
  return b;
}

void BufferPool::Give(uint8_t* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(buffer);
}

size_t BufferPool::allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

size_t DeliverRecords(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                      int64_t clock_offset_ns, ActivitySink* sink) {
  if (buffer == nullptr || valid_bytes == 0 || next == nullptr || sink == nullptr) return 0;
  size_t delivered = 0;
  CUpti_Activity* record = nullptr;
  GpuActivity activity;
  while (next(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (ConvertActivity(record, clock_offset_ns, &activity)) {
      sink->OnActivity(activity);
      ++delivered;
    }
  }
  return delivered;
}

}  // namespace tokentrace::cupti
