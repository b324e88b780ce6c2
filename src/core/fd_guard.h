// File descriptors the recorder must keep open: the trace file's (SQLite's database, -wal
// and -shm descriptors, the "being written" lock, the disk reserve) and the background
// thread's wake-up eventfd. A job that closes descriptors it did not open (Python's
// os.closerange(3, N), a daemon's close-everything loop, subprocess children before exec)
// would close them under the writer, and the next write would land in whatever file then
// reuses the number. The shim's close, close_range and closefrom (preload/shim.cc) leave the
// guarded ones open and behave for the job as if they did not exist; what gets past them (a
// raw syscall, a dup2 over one) is caught by the writer, which checks before each write that
// its descriptors still name its files (store/store.cc) and never writes through one that
// does not.
//
// Lock-free: close() asks IsGuarded on every call, so with nothing guarded that is one
// relaxed load, and otherwise a scan of kSlots atomics. Guard and Unguard are called by the
// writer thread (a few times per file).
#pragma once

namespace tokentrace::fd_guard {

constexpr int kSlots = 16;

// Guards `fd`; false when every slot is taken (the fd is then only checked, not kept).
bool Guard(int fd);
// The writer is about to close `fd` itself (or it was never guarded): no-op when unguarded.
void Unguard(int fd);
bool IsGuarded(int fd);
// In a forked child: the parent's descriptors are the child's copies, its to close.
void UnguardAll();

// For each maximal range [lo, hi] inside [first, last] that holds no guarded descriptor,
// calls close_range(lo, hi) and returns 0, or the first nonzero result. last may be ~0u.
template <typename CloseRange>
int ForEachUnguardedRange(unsigned first, unsigned last, CloseRange close_range);

// The guarded descriptors inside [first, last], sorted (at most kSlots); returns the count.
int GuardedIn(unsigned first, unsigned last, int (&out)[kSlots]);

template <typename CloseRange>
int ForEachUnguardedRange(unsigned first, unsigned last, CloseRange close_range) {
  int guarded[kSlots];
  const int n = GuardedIn(first, last, guarded);
  unsigned lo = first;
  for (int i = 0; i < n; ++i) {
    const unsigned fd = static_cast<unsigned>(guarded[i]);
    if (fd > lo) {
      if (const int rc = close_range(lo, fd - 1); rc != 0) return rc;
    }
    lo = fd + 1;
    if (fd == last) return 0;
  }
  return lo <= last ? close_range(lo, last) : 0;
}

}  // namespace tokentrace::fd_guard
