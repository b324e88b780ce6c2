#include "core/thread_buffer.h"

namespace tokentrace {
namespace {
uint64_t RoundUpPow2(uint32_t n) {
  uint64_t c = 64;
  while (c < n) c <<= 1;
  return c;
}
}  // namespace

ThreadBuffer::ThreadBuffer(uint32_t capacity, uint32_t thread_index)
    : capacity_(RoundUpPow2(capacity)),
      mask_(capacity_ - 1),
      thread_index_(thread_index),
      slots_(new Event[capacity_]) {}

}  // namespace tokentrace
