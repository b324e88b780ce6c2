// The subscriber's start/flush/stop path against stand-ins for libcupti and libcuda.so.1
// (fake_libcupti.cc, fake_libcuda.cc), so the sequence the GPU machine will see runs here.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cupti/activity_buffers.h"
#include "cupti/subscriber.h"

namespace tokentrace::cupti {
namespace {

struct CountingSink : ActivitySink {
  void OnActivity(const GpuActivity&) override {}
  void OnDropped(uint64_t records) override { dropped += records; }
  uint64_t dropped = 0;
};

template <typename Fn>
Fn Control(void* handle, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(handle, name));
  EXPECT_NE(fn, nullptr) << name;
  return fn;
}

// A libcupti that crashes in its first call when there is no driver (as CUPTI 13.2 does) is
// never called on such a machine: Start says there is no GPU and the process lives.
TEST(FakeCuptiWithoutDriver, IsNeverCalled) {
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr) {
    GTEST_SKIP() << "a driver is loaded in this process";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Config config;
        config.cupti_path = FAKE_CUPTI_PATH;
        CountingSink sink;
        std::string why;
        KernelsOff kind = KernelsOff::kNo;
        const bool started = Start(config, &sink, &why, &kind);
        std::fprintf(stderr, "%s\n", why.c_str());
        std::exit(!started && kind == KernelsOff::kNoGpu ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "no NVIDIA driver");
}

class FakeSubscriberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A driver first, as on a GPU machine: libcupti is opened only when one is there.
    driver_ = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(driver_, nullptr) << dlerror();
    Config config;
    config.cupti_path = FAKE_CUPTI_PATH;
    std::string why;
    ASSERT_TRUE(Start(config, &sink_, &why)) << why;
    cupti_ = dlopen(FAKE_CUPTI_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(cupti_, nullptr);
  }
  void TearDown() override { Stop(); }

  CountingSink sink_;
  void* driver_ = nullptr;
  void* cupti_ = nullptr;
};

// Records CUPTI dropped after a queue's last completed buffer (the pool was empty, so no
// buffer completed after them) are counted by the final forced flush, for that queue and for
// CUPTI's global one.
TEST_F(FakeSubscriberTest, DropsAfterTheLastBufferAreCountedAtTheFinalFlush) {
  auto complete = Control<size_t (*)(CUcontext, uint32_t)>(cupti_, "fake_cupti_complete_buffer");
  auto drop = Control<void (*)(CUcontext, uint32_t, size_t)>(cupti_, "fake_cupti_drop");
  auto flushes = Control<int (*)(int)>(cupti_, "fake_cupti_flushes");
  const auto ctx = reinterpret_cast<CUcontext>(uintptr_t{0x10});
  EXPECT_EQ(complete(ctx, 3), BufferPool::kBufferBytes);
  drop(ctx, 3, 5);
  drop(nullptr, 0, 2);
  Flush(false);  // the periodic flush: no buffer completes, nothing read
  EXPECT_EQ(sink_.dropped, 0u);
  Flush(true);
  EXPECT_EQ(sink_.dropped, 7u);
  EXPECT_EQ(flushes(1), 1);
  drop(nullptr, 0, 1);  // between the session's last flush and Stop()
  Stop();
  EXPECT_EQ(sink_.dropped, 8u);
}

class FakeDriverTest : public FakeSubscriberTest {
 protected:
  void SetUp() override {
    FakeSubscriberTest::SetUp();
    cuda_ = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(cuda_, nullptr) << dlerror();
    // WaitForDevice finds the driver by its soname, as it finds the real one.
    void* by_soname = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_EQ(by_soname, cuda_);
    dlclose(by_soname);
    setup_ = Control<void (*)(int, unsigned, int)>(cuda_, "fake_cuda_setup");
    syncs_ = Control<int (*)(int)>(cuda_, "fake_cuda_syncs");
  }
  void* cuda_ = nullptr;
  void (*setup_)(int, unsigned, int) = nullptr;
  int (*syncs_)(int) = nullptr;
};

// The stopping thread has no current context (an exit handler, a Python finalizer thread):
// every device the job made active is still waited for; an unused one is not touched.
TEST_F(FakeDriverTest, WaitsForEveryActiveDevice) {
  setup_(3, 0b101, -1);
  EXPECT_EQ(WaitForDevice(5000), 0);
  EXPECT_EQ(syncs_(0), 1);
  EXPECT_EQ(syncs_(1), 0);
  EXPECT_EQ(syncs_(2), 1);
  EXPECT_EQ(Control<int (*)(int)>(cuda_, "fake_cuda_retained")(0), 0);  // released again
  // The current context is one of them: synchronized once, not twice.
  setup_(3, 0b101, -1);
  Control<void (*)(int)>(cuda_, "fake_cuda_make_current")(2);
  EXPECT_EQ(WaitForDevice(5000), 0);
  EXPECT_EQ(syncs_(2), 1);
}

// A hung GPU costs the job's exit the timeout, not forever; what was not waited for is said.
TEST_F(FakeDriverTest, AHungDeviceCostsAtMostTheTimeout) {
  setup_(2, 0b11, /*hang=*/1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(WaitForDevice(200), 1);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(waited, std::chrono::seconds(3));
  EXPECT_EQ(syncs_(0), 1);
  EXPECT_EQ(TakeDeviceWaitTimeouts(), 1u);
  EXPECT_EQ(TakeDeviceWaitTimeouts(), 0u);
  Control<void (*)()>(cuda_, "fake_cuda_release")();
}

}  // namespace
}  // namespace tokentrace::cupti
