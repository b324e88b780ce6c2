#include "core/fd_guard.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace tokentrace::fd_guard {
namespace {

using Ranges = std::vector<std::pair<unsigned, unsigned>>;

Ranges Unguarded(unsigned first, unsigned last) {
  Ranges ranges;
  ForEachUnguardedRange(first, last, [&](unsigned lo, unsigned hi) {
    ranges.emplace_back(lo, hi);
    return 0;
  });
  return ranges;
}

// Each test leaves nothing guarded (the registry is process-wide).
struct Guarded {
  explicit Guarded(std::vector<int> fds) : fds(std::move(fds)) {
    for (int fd : this->fds) EXPECT_TRUE(Guard(fd));
  }
  ~Guarded() {
    for (int fd : fds) Unguard(fd);
  }
  std::vector<int> fds;
};

TEST(FdGuardTest, NothingGuardedClosesTheWholeRange) {
  EXPECT_FALSE(IsGuarded(3));
  EXPECT_EQ(Unguarded(3, 1023), (Ranges{{3, 1023}}));
}

TEST(FdGuardTest, AJobsCloseRangeSkipsEachGuardedDescriptor) {
  Guarded g({7, 5});
  EXPECT_TRUE(IsGuarded(5));
  EXPECT_TRUE(IsGuarded(7));
  EXPECT_FALSE(IsGuarded(6));
  EXPECT_EQ(Unguarded(3, 10), (Ranges{{3, 4}, {6, 6}, {8, 10}}));
  EXPECT_EQ(Unguarded(5, 7), (Ranges{{6, 6}}));  // guarded at both ends
  EXPECT_EQ(Unguarded(5, 5), Ranges{});
  EXPECT_EQ(Unguarded(8, ~0u), (Ranges{{8, ~0u}}));  // closefrom(8)
  EXPECT_EQ(Unguarded(0, ~0u), (Ranges{{0, 4}, {6, 6}, {8, ~0u}}));
}

TEST(FdGuardTest, AnUnguardedDescriptorIsClosedAgain) {
  {
    Guarded g({9});
    EXPECT_EQ(Unguarded(9, 9), Ranges{});
  }
  EXPECT_FALSE(IsGuarded(9));
  EXPECT_EQ(Unguarded(9, 9), (Ranges{{9, 9}}));
}

TEST(FdGuardTest, GuardingIsBoundedAndSaysWhenFull) {
  std::vector<int> fds;
  for (int i = 0; i < kSlots; ++i) fds.push_back(100 + i);
  Guarded g(fds);
  EXPECT_FALSE(Guard(500));  // only checked by the writer, not kept
  EXPECT_FALSE(IsGuarded(500));
  EXPECT_TRUE(Guard(100));  // already guarded: still true, no second slot
  EXPECT_FALSE(Guard(-1));
}

TEST(FdGuardTest, TheFirstFailedCloseIsReturned) {
  Guarded g({5});
  int calls = 0;
  const int rc = ForEachUnguardedRange(3, 9, [&](unsigned, unsigned) {
    ++calls;
    return -1;
  });
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tokentrace::fd_guard
