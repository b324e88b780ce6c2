// The set of per-thread rings. A job thread registers its ring on its first event (one
// allocation and one short lock per thread, never again); the background thread drains all
// rings under the same lock and frees the rings of threads that have exited.
#pragma once

#include <cstdint>
#include <functional>

#include "core/thread_buffer.h"

namespace tokentrace::buffers {

// Around fork() (recorder::BeforeFork): no ring is being registered or drained in the child.
void LockForFork();
void UnlockAfterFork();  // in the parent and in the child (the forking thread holds it)

// Creates and registers a ring for the calling thread; nullptr when it cannot be allocated.
ThreadBuffer* Register(uint32_t capacity);

// Calls fn(ring) for every ring (drain them there), then frees the rings that were retired
// before their drain began (so none is freed with events unread).
void ForEach(const std::function<void(ThreadBuffer&)>& fn);

// Empties every ring (fork child, where no other thread exists).
void ResetAllUnsafe();

}  // namespace tokentrace::buffers
