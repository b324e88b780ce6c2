#include "cupti/cupti_api.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tokentrace::cupti {
namespace {

size_t IndexOf(const std::vector<CuptiCandidate>& v, const std::string& path) {
  return static_cast<size_t>(
      std::find_if(v.begin(), v.end(), [&](const CuptiCandidate& c) { return c.path == path; }) -
      v.begin());
}

TEST(CuptiCandidates, ExplicitPathIsTheOnlyCandidate) {
  const auto c = CuptiCandidates("/opt/x/libcupti.so.13", {"/usr/lib/libcudart.so.13"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].path, "/opt/x/libcupti.so.13");
  EXPECT_EQ(c[0].reason, "TOKENTRACE_CUPTI");
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
  EXPECT_EQ(c[0].path, "/elsewhere/libcupti.so.13.0.1");
  EXPECT_EQ(c[0].reason, "already loaded");
  // torch/lib/../../nvidia/cu13/lib is where torch wheels keep libcupti.
  const size_t torch_rel = IndexOf(c, sp + "/torch/lib/../../nvidia/cu13/lib/libcupti.so.13");
  const size_t next_to_cudart = IndexOf(c, sp + "/nvidia/cu13/lib/libcupti.so.13");
  const size_t toolkit = IndexOf(c, "/usr/local/cuda/lib64/libcupti.so.13");
  const size_t extras = IndexOf(c, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  ASSERT_LT(torch_rel, c.size());
  ASSERT_LT(next_to_cudart, c.size());
  EXPECT_LT(next_to_cudart, torch_rel);  // the runtime's neighbour before libtorch_cuda's
  EXPECT_LT(torch_rel, toolkit);
  EXPECT_LT(toolkit, extras);
  EXPECT_EQ(c[toolkit].reason, "the CUDA toolkit");
  EXPECT_EQ(c.back().path, "libcupti.so.13");
  EXPECT_EQ(c.back().reason, "the loader's search path");
  EXPECT_EQ(c[torch_rel].reason,
            "next to " + sp + "/torch/lib/libtorch_cuda.so, a CUDA library the job loaded");
  // Nothing is derived from libc's directory, and nothing repeats.
  EXPECT_EQ(IndexOf(c, "/lib/x86_64-linux-gnu/libcupti.so.13"), c.size());
  std::vector<std::string> sorted;
  for (const CuptiCandidate& x : c) sorted.push_back(x.path);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
}

// The driver comes from the system (/usr/lib) and is loaded first; the runtime from the job's
// wheel. The CUPTI next to the runtime is the one of the job's CUDA release, so it comes
// before anything next to the driver, whatever the load order.
TEST(CuptiCandidates, TheRuntimesNeighbourWinsOverTheDrivers) {
  const std::string wheel = "/venv/lib/python3.12/site-packages/nvidia/cu13/lib";
  const std::vector<std::string> loaded = {
      "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
      "/usr/lib/x86_64-linux-gnu/libcublas.so.13",
      wheel + "/libcudart.so.13",
  };
  const auto c = CuptiCandidates("", loaded);
  ASSERT_GE(c.size(), 2u);
  EXPECT_EQ(c[0].path, wheel + "/libcupti.so.13");
  EXPECT_EQ(c[0].reason, "next to the CUDA runtime the job loaded, " + wheel + "/libcudart.so.13");
  const size_t next_to_driver = IndexOf(c, "/usr/lib/x86_64-linux-gnu/libcupti.so.13");
  ASSERT_LT(next_to_driver, c.size());
  EXPECT_GT(next_to_driver, IndexOf(c, wheel + "/../../nvidia/cuda_cupti/lib/libcupti.so"));
  // The driver's directory is also the cuBLAS one here: named once, after the driver, which
  // was loaded first.
  EXPECT_EQ(c[next_to_driver].reason,
            "next to /usr/lib/x86_64-linux-gnu/libcuda.so.1, a CUDA library the job loaded");
  EXPECT_LT(next_to_driver, IndexOf(c, "/usr/local/cuda/lib64/libcupti.so.13"));
}

TEST(CuptiCandidates, FallbacksWithNothingLoaded) {
  const auto c = CuptiCandidates("", {});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].path, "/usr/local/cuda/lib64/libcupti.so.13");
  EXPECT_EQ(c[0].reason, "the CUDA toolkit");
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
