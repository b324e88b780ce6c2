// Start() on machines without a GPU: it must fail cleanly with a reason. (The GPU path is
// in subscriber_gpu_test.cc, label `gpu`.)
#include "cupti/subscriber.h"

#include <gtest/gtest.h>

#include "tests/cupti/driver_probe.h"

namespace tokentrace::cupti {
namespace {

struct NullSink : ActivitySink {
  void OnBuffer(ActivityBuffer* buffer) override { buffer->Release(); }
  void OnDropped(uint64_t) override {}
};

TEST(Start, KernelsOffIsNotAnError) {
  Config config;
  config.kernels.kind = KernelMode::kOff;
  NullSink sink;
  std::string why;
  EXPECT_FALSE(Start(config, &sink, &why));
  EXPECT_EQ(why.rfind("tokentrace:", 0), 0u) << why;
  EXPECT_NE(why.find("TOKENTRACE_KERNELS=off"), std::string::npos) << why;
}

TEST(Start, BadCuptiPathIsNamed) {
  Config config;
  config.cupti_path = "/no/such/place/libcupti.so.13";
  NullSink sink;
  std::string why;
  EXPECT_FALSE(Start(config, &sink, &why));
  EXPECT_EQ(why.rfind("tokentrace:", 0), 0u) << why;
  EXPECT_NE(why.find("/no/such/place/libcupti.so.13"), std::string::npos) << why;
  Flush(false);  // harmless when not started
  Flush(true);
  Stop();
}

TEST(Start, WithoutDriverFailsCleanly) {
  testing_driver::Driver driver;
  if (driver.Available()) GTEST_SKIP() << "a GPU is present; see cupti_gpu_test";
  Config config;
  NullSink sink;
  std::string why;
  KernelsOff kind = KernelsOff::kNo;
  EXPECT_FALSE(Start(config, &sink, &why, &kind));
  EXPECT_EQ(why.rfind("tokentrace:", 0), 0u) << why;
  EXPECT_GT(why.size(), std::string("tokentrace: kernels are off: ").size()) << why;
  EXPECT_EQ(kind, KernelsOff::kNoGpu) << why;  // "no NVIDIA GPU here" to the user
  std::printf("why_off here: %s\n", why.c_str());
  Stop();
}

}  // namespace
}  // namespace tokentrace::cupti
