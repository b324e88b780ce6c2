// Which released patch tables may be freed (cuda/released_tables.h): a table a captured
// graph may still read is never freed.
#include "cuda/released_tables.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tokentrace::patch {
namespace {

void* Addr(uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(ReleasedTablesTest, ATableUsedByACapturedGraphIsKeptAfterRelease) {
  ReleasedTables t;
  t.NoteCaptured(Addr(0x2000));  // the decode graph was captured with table 0x2000
  t.NoteCaptured(Addr(0x2000));  // several launches of the same capture
  t.Release(Addr(0x1000), 512);  // an eager-only table
  t.Release(Addr(0x2000), 768);  // re-upload (the model moved device): the graph lives on
  const auto freeable = t.TakeFreeable();
  ASSERT_EQ(freeable.size(), 1u);
  EXPECT_EQ(freeable[0], Addr(0x1000));
  EXPECT_EQ(t.kept(), 1u);
  EXPECT_EQ(t.kept_bytes(), 768u);
  EXPECT_TRUE(t.TakeFreeable().empty());  // kept for good, never freed later either
  t.Release(nullptr, 0);
  EXPECT_EQ(t.kept(), 1u);
}

}  // namespace
}  // namespace tokentrace::patch
