// The queue from CUPTI's buffer thread to the background drain: GPU activity records wait
// here until the next drain joins them to calls (core/joiner.h), and so does the count of the
// records CUPTI dropped.
//
// A record's kernel name points into a CUPTI buffer that is given back once the delivering
// call returns, so the queue keeps its own copy: one copy per record, made by Push and owned
// by the queued record itself. Push takes a mutex: CUPTI's buffer thread is not the job's
// hot path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/records.h"

namespace tokentrace {

class ActivityQueue {
  struct Queued {
    GpuActivity activity;  // its .name is set only while a Taken hands it over
    std::string name;      // the one copy of the kernel name
    bool has_name = false;
  };

 public:
  // What one Take() took, in the order pushed.
  class Taken {
   public:
    // Hands each record to `on_record`; a record's name is valid during its call only.
    template <typename F>
    void ForEach(F&& on_record) {
      for (Queued& q : records_) {
        // Set here, not in Push: a growing vector moves its strings (short ones inline).
        q.activity.name = q.has_name ? q.name.c_str() : nullptr;
        on_record(static_cast<const GpuActivity&>(q.activity));
      }
    }
    size_t size() const { return records_.size(); }

   private:
    friend class ActivityQueue;
    std::vector<Queued> records_;
  };

  // Any thread. Copies `activity`, its name included.
  void Push(const GpuActivity& activity);
  // The drain's thread: everything queued so far. Taken before the rings are drained, so
  // that a record's launch event (written before the record was queued) is in the same drain.
  Taken Take();

  // Any thread: CUPTI dropped `records` (counted as cupti_dropped by the next drain).
  void AddDropped(uint64_t records) { dropped_.fetch_add(records, std::memory_order_relaxed); }
  // The drain's thread: the records dropped since the last call.
  uint64_t TakeDropped() { return dropped_.exchange(0, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> dropped_{0};
  std::mutex mutex_;
  std::vector<Queued> queued_;
};

}  // namespace tokentrace
