#include "core/buffer_registry.h"

#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace tokentrace::buffers {
namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ThreadBuffer>> rings;
  uint32_t next_thread_index = 0;
};
Registry& R() {
  static Registry* r = new Registry();  // never destroyed: threads may log during exit
  return *r;
}
}  // namespace

ThreadBuffer* Register(uint32_t capacity) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mutex);
  // Out of memory (a `ulimit -v`, a big TOKENTRACE_BUFFER_EVENTS): no ring, and the caller
  // counts what it drops; an exception must never reach the job's thread.
  try {
    r.rings.reserve(r.rings.size() + 1);
    r.rings.push_back(std::make_unique<ThreadBuffer>(capacity, r.next_thread_index));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  ++r.next_thread_index;
  return r.rings.back().get();
}

void ForEach(const std::function<void(ThreadBuffer&)>& fn) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mutex);
  // A ring may be freed only if its thread had retired it before this drain began: the
  // retire flag is published after the thread's last append, so a drain that starts after
  // seeing it reads everything. A thread that exits during the drain may still have written
  // after it; its ring stays for the next drain.
  size_t kept = 0;
  for (size_t i = 0; i < r.rings.size(); ++i) {
    const bool retired_before = r.rings[i]->retired.load(std::memory_order_acquire);
    fn(*r.rings[i]);
    // A drain in steps (core/drain_budget.h) may leave events in it: kept for the next step.
    if (!retired_before || r.rings[i]->Pending() > 0) r.rings[kept++] = std::move(r.rings[i]);
  }
  r.rings.resize(kept);
}

void LockForFork() { R().mutex.lock(); }
void UnlockAfterFork() { R().mutex.unlock(); }

void ResetAllUnsafe() {
  Registry& r = R();
  // The fork child has one thread, and no other held the lock at the fork (LockForFork).
  // Every ring belonged to a thread of the parent; the child re-registers its own.
  for (auto& ring : r.rings) {
    ring->ResetUnsafe();
    ring->retired.store(true, std::memory_order_release);
  }
}

}  // namespace tokentrace::buffers
