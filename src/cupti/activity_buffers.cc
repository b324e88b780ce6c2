#include "cupti/activity_buffers.h"

#include <cstdlib>
#include <new>
#include <type_traits>

#include "cupti/activity_convert.h"

namespace tokentrace::cupti {
namespace {

// A completed CUPTI buffer: lives in the kHeaderBytes in front of the buffer's data, made
// once when the buffer is allocated and reused for every completion of it.
class PooledBuffer final : public ActivityBuffer {
 public:
  explicit PooledBuffer(BufferPool* pool) : pool_(pool) {}

  static PooledBuffer* Of(uint8_t* data) {
    return std::launder(reinterpret_cast<PooledBuffer*>(data - BufferPool::kHeaderBytes));
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(this) + BufferPool::kHeaderBytes; }

  void Set(size_t valid_bytes, NextRecordFn next, int64_t clock_offset_ns) {
    this->next = nullptr;
    valid_bytes_ = valid_bytes;
    next_record_ = next;
    clock_offset_ns_ = clock_offset_ns;
  }

  void Release() override { pool_->Give(data()); }

 protected:
  size_t Walk(RecordFn on_record, void* context) override {
    if (valid_bytes_ == 0 || next_record_ == nullptr) return 0;
    size_t kept = 0;
    CUpti_Activity* record = nullptr;
    GpuActivity activity;
    // Stops at the first error other than "no more records" too: the rest is unreadable.
    while (next_record_(data(), valid_bytes_, &record) == CUPTI_SUCCESS) {
      if (ConvertActivity(record, clock_offset_ns_, &activity)) {
        on_record(context, activity);
        ++kept;
      }
    }
    return kept;
  }

 private:
  BufferPool* const pool_;
  size_t valid_bytes_ = 0;
  NextRecordFn next_record_ = nullptr;
  int64_t clock_offset_ns_ = 0;
};

static_assert(sizeof(PooledBuffer) <= BufferPool::kHeaderBytes);
static_assert(BufferPool::kHeaderBytes % BufferPool::kAlignment == 0);  // the data stays aligned
static_assert(alignof(PooledBuffer) <= BufferPool::kAlignment);
static_assert(std::is_trivially_destructible_v<PooledBuffer>);  // freed without ending it

}  // namespace

BufferPool::~BufferPool() {
  for (uint8_t* b : free_) std::free(b - kHeaderBytes);
}

uint8_t* BufferPool::Take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!free_.empty()) {
    uint8_t* b = free_.back();
    free_.pop_back();
    return b;
  }
  if (allocated_ >= kMaxBuffers) return nullptr;
  void* block = std::aligned_alloc(kAlignment, kHeaderBytes + kBufferBytes);
  if (block == nullptr) return nullptr;
  ++allocated_;
  return (new (block) PooledBuffer(this))->data();
}

void BufferPool::Give(uint8_t* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(buffer);
}

ActivityBuffer* BufferPool::Complete(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                                     int64_t clock_offset_ns) {
  if (buffer == nullptr) return nullptr;
  PooledBuffer* b = PooledBuffer::Of(buffer);
  b->Set(valid_bytes, next, clock_offset_ns);
  return b;
}

size_t BufferPool::allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

size_t BufferPool::free_buffers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_.size();
}

}  // namespace tokentrace::cupti
