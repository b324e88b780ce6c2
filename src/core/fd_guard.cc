#include "core/fd_guard.h"

#include <algorithm>
#include <atomic>

namespace tokentrace::fd_guard {
namespace {

std::atomic<int> g_slots[kSlots] = {};  // fd + 1; 0 = free
std::atomic<int> g_count{0};            // slots in use: close() looks no further when 0

}  // namespace

bool Guard(int fd) {
  if (fd < 0) return false;
  if (IsGuarded(fd)) return true;
  for (auto& slot : g_slots) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1)) {
      g_count.fetch_add(1);
      return true;
    }
  }
  return false;
}

void Unguard(int fd) {
  for (auto& slot : g_slots) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0)) {
      g_count.fetch_sub(1);
      return;
    }
  }
}

void UnguardAll() {
  for (auto& slot : g_slots) slot.store(0);
  g_count.store(0);
}

bool IsGuarded(int fd) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  for (const auto& slot : g_slots) {
    if (slot.load(std::memory_order_acquire) == fd + 1) return true;
  }
  return false;
}

int GuardedIn(unsigned first, unsigned last, int (&out)[kSlots]) {
  int n = 0;
  if (g_count.load(std::memory_order_relaxed) == 0) return 0;
  for (const auto& slot : g_slots) {
    const int v = slot.load(std::memory_order_acquire);
    if (v == 0) continue;
    const unsigned fd = static_cast<unsigned>(v - 1);
    if (fd >= first && fd <= last) out[n++] = static_cast<int>(fd);
  }
  std::sort(out, out + n);
  return n;
}

}  // namespace tokentrace::fd_guard
