#include "session/activity_queue.h"

namespace tokentrace {

void ActivityQueue::Push(const GpuActivity& activity) {
  std::lock_guard<std::mutex> lock(mutex_);
  Queued& q = queued_.emplace_back();
  q.activity = activity;
  q.activity.name = nullptr;
  q.has_name = activity.name != nullptr;
  if (q.has_name) q.name = activity.name;
}

ActivityQueue::Taken ActivityQueue::Take() {
  Taken taken;
  std::lock_guard<std::mutex> lock(mutex_);
  taken.records_.swap(queued_);
  return taken;
}

}  // namespace tokentrace
