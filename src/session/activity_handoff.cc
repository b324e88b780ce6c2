#include "session/activity_handoff.h"

namespace tokentrace {

ActivityHandoff::Taken::~Taken() {
  while (first_ != nullptr) {
    ActivityBuffer* b = first_;
    first_ = b->next;
    b->Release();
  }
}

size_t ActivityHandoff::Taken::buffers() const {
  size_t n = 0;
  for (const ActivityBuffer* b = first_; b != nullptr; b = b->next) ++n;
  return n;
}

ActivityHandoff::~ActivityHandoff() {
  Taken left = Take();  // its destructor releases them
}

void ActivityHandoff::OnBuffer(ActivityBuffer* buffer) {
  if (buffer == nullptr) return;
  buffer->next = head_.load(std::memory_order_relaxed);
  while (!head_.compare_exchange_weak(buffer->next, buffer, std::memory_order_release,
                                      std::memory_order_relaxed)) {
  }
}

ActivityHandoff::Taken ActivityHandoff::Take() {
  ActivityBuffer* newest = head_.exchange(nullptr, std::memory_order_acquire);
  Taken taken;
  while (newest != nullptr) {  // reversed: oldest first
    ActivityBuffer* b = newest;
    newest = b->next;
    b->next = taken.first_;
    taken.first_ = b;
  }
  return taken;
}

}  // namespace tokentrace
