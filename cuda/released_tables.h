// When a released device patch table may be freed. Plain C++ (no CUDA), tested on the CPU.
//
// A CUDA graph captured while a table was in use holds the table's address in its kernels'
// parameters, and replays read it for as long as the graph lives, which the host does not
// see (torch keeps its graphs in Python objects). So a table that any captured launch used is
// never freed: it is kept, and counted (a few KB each; the Python layer re-uploads only when
// the model changes device or the edits change). Other released tables are freed at the next
// upload, not at release, since a release may come during a capture (a Python finalizer),
// which a cudaFree would invalidate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

namespace tokentrace::patch {

class ReleasedTables {
 public:
  // A launch reading `table` was captured into a graph. Called only while capturing.
  void NoteCaptured(const void* table) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(captured_.begin(), captured_.end(), table) == captured_.end()) {
      captured_.push_back(table);
    }
  }
  // The owner let `table` go (it is no longer launched with).
  void Release(void* table, size_t bytes) {
    if (table == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find(captured_.begin(), captured_.end(), table);
    if (it == captured_.end()) {
      freeable_.push_back(table);
      return;
    }
    captured_.erase(it);  // kept for good: its address is never handed out again
    ++kept_;
    kept_bytes_ += bytes;
  }
  // The released tables no graph may use: the caller frees them.
  std::vector<void*> TakeFreeable() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<void*> out;
    out.swap(freeable_);
    return out;
  }
  size_t kept() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_;
  }
  size_t kept_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return kept_bytes_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<const void*> captured_;  // live tables a captured launch used
  std::vector<void*> freeable_;
  size_t kept_ = 0;
  size_t kept_bytes_ = 0;
};

}  // namespace tokentrace::patch
