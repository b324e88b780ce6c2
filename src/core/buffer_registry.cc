#include "core/buffer_registry.h"

#include <memory>
#include <mutex>
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
  r.rings.push_back(std::make_unique<ThreadBuffer>(capacity, r.next_thread_index++));
  return r.rings.back().get();
}

void ForEach(const std::function<void(ThreadBuffer&)>& fn) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& ring : r.rings) fn(*ring);
  // A retired ring's producer is gone; it was drained just above, so it can go.
  std::erase_if(r.rings, [](const std::unique_ptr<ThreadBuffer>& ring) {
    return ring->retired.load(std::memory_order_acquire);
  });
}

void ResetAllUnsafe() {
  Registry& r = R();
  // The fork child has one thread; the lock may have been held by a parent thread at fork
  // time, so it is re-created rather than taken.
  new (&r.mutex) std::mutex();
  // Every ring belonged to a thread of the parent; the child re-registers its own.
  for (auto& ring : r.rings) {
    ring->ResetUnsafe();
    ring->retired.store(true, std::memory_order_release);
  }
}

}  // namespace tokentrace::buffers
