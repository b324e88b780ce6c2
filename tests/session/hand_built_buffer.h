// A completed activity buffer built by hand, standing for the CUPTI buffer that
// cupti/activity_buffers.cc hands over: its records' names live in the buffer itself, and
// Release() overwrites them before freeing it, so a name read after its buffer was given back
// shows as garbage (or as a use after free under a sanitizer).
#pragma once

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/activity_sink.h"

namespace tokentrace::testing_buffers {

class HandBuiltBuffer final : public ActivityBuffer {
 public:
  // `released`, when given, counts the Release() calls of every buffer that shares it.
  explicit HandBuiltBuffer(std::atomic<int>* released = nullptr) : released_(released) {}

  // A kernel record named `name` (null: no name).
  HandBuiltBuffer* Kernel(uint64_t correlation, const char* name, int64_t begin = 1000,
                          int64_t end = 1100) {
    GpuActivity a;
    a.correlation_id = correlation;
    a.begin_ns = begin;
    a.end_ns = end;
    records_.push_back(a);
    names_.push_back(name != nullptr ? std::make_unique<std::string>(name) : nullptr);
    return this;
  }
  HandBuiltBuffer* Add(const GpuActivity& a) {
    records_.push_back(a);
    names_.push_back(a.name != nullptr ? std::make_unique<std::string>(a.name) : nullptr);
    records_.back().name = nullptr;
    return this;
  }

  void Release() override {
    for (auto& n : names_) {
      if (n) std::memset(n->data(), 'X', n->size());
    }
    if (released_ != nullptr) released_->fetch_add(1);
    delete this;
  }

 protected:
  size_t Walk(RecordFn on_record, void* context) override {
    for (size_t i = 0; i < records_.size(); ++i) {
      GpuActivity a = records_[i];
      a.name = names_[i] ? names_[i]->c_str() : nullptr;
      on_record(context, a);
    }
    return records_.size();
  }

 private:
  ~HandBuiltBuffer() = default;
  std::atomic<int>* released_;
  std::vector<GpuActivity> records_;
  std::vector<std::unique_ptr<std::string>> names_;
};

}  // namespace tokentrace::testing_buffers
