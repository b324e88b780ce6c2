// Fault injection, end to end without a GPU or root: nvtx_generate runs under the preloaded
// libtokentrace.so while a thread exits mid-drain or the disk fills (disk_full_vfs.cc), and
// the file it leaves must hold, or count, every call.
#include <string>

#include "preload_util.h"

namespace {

// A thread's last events, written just before it exits (sometimes while a drain is running),
// are read before its ring is freed: every call of 320 short-lived threads is in the file.
// (The race itself is pinned down by BufferRegistryTest; this is the end-to-end check.)
TEST(FaultTest, ShortLivedThreadsLoseNothing) {
  for (int run = 0; run < 5; ++run) {
    const std::string out = RunPreloaded("short_threads 20", "TOKENTRACE_FLUSH_MS=1");
    ASSERT_EQ(One(out, "SELECT COUNT(*) FROM calls"), std::to_string(64 * 14 * 20 * 5)) << "run " << run;
    EXPECT_EQ(One(out, "SELECT COALESCE(SUM(count),0) FROM losses"), "0");
  }
}

}  // namespace
