#include "cupti/cupti_api.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tokentrace::cupti {
namespace {

size_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(CuptiCandidates, ExplicitPathIsTheOnlyCandidate) {
  const auto c = CuptiCandidates("/opt/x/libcupti.so.13", {"/usr/lib/libcudart.so.13"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], "/opt/x/libcupti.so.13");
}

TEST(CuptiCandidates, OrderFollowsWhatIsLoaded) {
  const std::string sp = "/venv/lib/python3.12/site-packages";
  const std::vector<std::string> loaded = {
      "/lib/x86_64-linux-gnu/libc.so.6",
      sp + "/torch/lib/libtorch_cuda.so",
      sp + "/nvidia/cu13/lib/libcudart.so.13",
      "/elsewhere/libcupti.so.13.0.1",
  };
  const auto c = CuptiCandidates("", loaded);
  // Already-loaded libcupti first.
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "/elsewhere/libcupti.so.13.0.1");
  // torch/lib/../../nvidia/cu13/lib is where torch wheels keep libcupti.
  const size_t torch_rel = IndexOf(c, sp + "/torch/lib/../../nvidia/cu13/lib/libcupti.so.13");
  const size_t next_to_cudart = IndexOf(c, sp + "/nvidia/cu13/lib/libcupti.so.13");
  const size_t toolkit = IndexOf(c, "/usr/local/cuda/lib64/libcupti.so.13");
  const size_t extras = IndexOf(c, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  ASSERT_LT(torch_rel, c.size());
  ASSERT_LT(next_to_cudart, c.size());
  EXPECT_LT(torch_rel, toolkit);
  EXPECT_LT(next_to_cudart, toolkit);
  EXPECT_LT(toolkit, extras);
  EXPECT_EQ(c.back(), "libcupti.so.13");
  // Nothing is derived from libc's directory, and nothing repeats.
  EXPECT_EQ(IndexOf(c, "/lib/x86_64-linux-gnu/libcupti.so.13"), c.size());
  auto sorted = c;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
}

TEST(CuptiCandidates, FallbacksWithNothingLoaded) {
  const auto c = CuptiCandidates("", {});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], "/usr/local/cuda/lib64/libcupti.so.13");
}

TEST(LoadedObjectPaths, SeesTheCLibrary) {
  const auto objs = LoadedObjectPaths();
  EXPECT_TRUE(std::any_of(objs.begin(), objs.end(), [](const std::string& p) {
    return p.find("libc.so") != std::string::npos;
  }));
}

TEST(LoadCuptiApi, MissingExplicitPathIsNamed) {
  std::string why;
  EXPECT_EQ(LoadCuptiApi("/nonexistent/dir/libcupti.so.13", &why), nullptr);
  EXPECT_NE(why.find("/nonexistent/dir/libcupti.so.13"), std::string::npos) << why;
  EXPECT_NE(why.find("TOKENTRACE_CUPTI"), std::string::npos) << why;
}

TEST(LoadCuptiApi, NotASharedObjectSaysWhy) {
  std::string why;
  EXPECT_EQ(LoadCuptiApi("/etc/hostname", &why), nullptr);
  EXPECT_NE(why.find("/etc/hostname"), std::string::npos) << why;
}

TEST(CuptiCall, EvaluatesToTheResult) {
  int calls = 0;
  auto fake = [&calls]() {
    ++calls;
    return CUPTI_ERROR_INVALID_PARAMETER;
  };
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(TT_CUPTI_CALL(fake()), CUPTI_ERROR_INVALID_PARAMETER);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls, 3);
  // Logged once, with the call text.
  EXPECT_EQ(err.find("tokentrace: fake() failed: "), 0u) << err;
  EXPECT_EQ(err.find("tokentrace:", 1), std::string::npos) << err;
  EXPECT_EQ(TT_CUPTI_CALL(CUPTI_SUCCESS), CUPTI_SUCCESS);
}

}  // namespace
}  // namespace tokentrace::cupti
