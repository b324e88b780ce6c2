// The subscriber's start/flush/stop path against stand-ins for libcupti and libcuda.so.1
// (fake_libcupti.cc, fake_libcuda.cc), so the sequence the GPU machine will see runs here.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cupti/activity_buffers.h"
#include "cupti/subscriber.h"
#include "session/activity_handoff.h"

namespace tokentrace::cupti {
namespace {

struct CountingSink : ActivitySink {
  void OnBuffer(ActivityBuffer* buffer) override { buffer->Release(); }
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

// The trace's meta says which libcupti recorded it and why that one.
TEST_F(FakeSubscriberTest, DescribeSaysWhichCuptiAndWhy) {
  EXPECT_EQ(Describe(), std::string(FAKE_CUPTI_PATH) + " (TOKENTRACE_CUPTI), API version " +
                            std::to_string(CUPTI_API_VERSION));
}

// Records CUPTI dropped after a queue's last completed buffer (the pool was empty, so no
// buffer completed after them) are counted by the final forced flush, for that queue and for
// CUPTI's global one.
TEST_F(FakeSubscriberTest, DropsAfterTheLastBufferAreCountedAtTheFinalFlush) {
  auto complete = Control<size_t (*)(CUcontext, uint32_t)>(cupti_, "fake_cupti_complete_buffer");
  auto drop = Control<void (*)(CUcontext, uint32_t, size_t)>(cupti_, "fake_cupti_drop");
  auto flushes = Control<int (*)(int)>(cupti_, "fake_cupti_flushes");
  const auto ctx = reinterpret_cast<CUcontext>(uintptr_t{0x10});
  const int forced_before = flushes(1);  // earlier tests' sessions in this process flushed too
  EXPECT_EQ(complete(ctx, 3), BufferPool::kBufferBytes);
  drop(ctx, 3, 5);
  drop(nullptr, 0, 2);
  Flush(false);  // the periodic flush: no buffer completes, nothing read
  EXPECT_EQ(sink_.dropped, 0u);
  Flush(true);
  EXPECT_EQ(sink_.dropped, 7u);
  EXPECT_EQ(flushes(1), forced_before + 1);
  drop(nullptr, 0, 1);  // between the session's last flush and Stop()
  Stop();
  EXPECT_EQ(sink_.dropped, 8u);
}

// The session's sink (session/activity_handoff.h) behind the subscriber and its pool: what the
// drain of a real session sees.
class FakeHandoffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(driver_, nullptr) << dlerror();
    Config config;
    config.cupti_path = FAKE_CUPTI_PATH;
    std::string why;
    ASSERT_TRUE(Start(config, &handoff_, &why)) << why;
    cupti_ = dlopen(FAKE_CUPTI_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(cupti_, nullptr);
    complete_ = Control<size_t (*)(CUcontext, uint32_t, size_t, uint32_t, const char*)>(
        cupti_, "fake_cupti_complete_kernels");
  }
  void TearDown() override { Stop(); }

  ActivityHandoff handoff_;
  void* driver_ = nullptr;
  void* cupti_ = nullptr;
  size_t (*complete_)(CUcontext, uint32_t, size_t, uint32_t, const char*) = nullptr;
};

// A buffer reaches the drain unread: its records are converted there, the kernel's name is
// CUPTI's own string inside the buffer, and a buffer given back is the next one CUPTI gets.
TEST_F(FakeHandoffTest, TheDrainReadsTheBufferInPlaceAndGivesItBack) {
  const auto ctx = reinterpret_cast<CUcontext>(uintptr_t{0x20});
  ASSERT_EQ(complete_(ctx, 1, 3, 100, "first_kernel_with_a_name_longer_than_a_short_string"), 3u);
  std::vector<uint64_t> correlations;
  std::vector<std::string> names;
  const char* first_name = nullptr;
  ActivityHandoff::Taken taken = handoff_.Take();
  EXPECT_EQ(taken.buffers(), 1u);
  taken.ForEach([&](const GpuActivity& a) {
    correlations.push_back(a.correlation_id);
    names.emplace_back(a.name);
    if (first_name == nullptr) first_name = a.name;
    EXPECT_EQ(a.end_ns - a.begin_ns, 1000);
  });
  EXPECT_EQ(correlations, (std::vector<uint64_t>{100, 101, 102}));
  EXPECT_EQ(names[2], "first_kernel_with_a_name_longer_than_a_short_string");
  // Given back once walked: the next buffer is the same memory, its name at the same place.
  ASSERT_EQ(complete_(ctx, 1, 1, 200, "second"), 1u);
  handoff_.Take().ForEach([&](const GpuActivity& a) {
    EXPECT_EQ(a.correlation_id, 200u);
    EXPECT_EQ(a.name, first_name);
    EXPECT_STREQ(a.name, "second");
  });
}

// CUPTI's threads complete buffers while the drain takes them, more buffers in all than the
// pool ever holds: every record arrives once, each thread's in order, and nothing is dropped,
// because each buffer goes back to the pool once walked.
TEST_F(FakeHandoffTest, BuffersFromSeveralThreadsWhileTheDrainTakes) {
  constexpr int kThreads = 4;
  constexpr uint32_t kBuffersPerThread = BufferPool::kMaxBuffers / 2;  // 2x the pool in all
  constexpr uint32_t kRecords = 40;
  std::atomic<int> done{0};
  std::atomic<bool> stuck{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto ctx = reinterpret_cast<CUcontext>(uintptr_t{0x100} + t);
      const std::string name = "kernel_of_thread_" + std::to_string(t);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (uint32_t b = 0; b < kBuffersPerThread && !stuck; ++b) {
        const uint32_t first = (static_cast<uint32_t>(t) << 24) | (b * kRecords);
        while (complete_(ctx, 0, kRecords, first, name.c_str()) == 0) {  // the pool is out
          if (std::chrono::steady_clock::now() > deadline) stuck = true;
          if (stuck) break;
          std::this_thread::yield();
        }
      }
      done.fetch_add(1);
    });
  }
  std::vector<int64_t> last(kThreads, -1);
  size_t records = 0, bad = 0;
  auto drain = [&] {
    records += handoff_.Take().ForEach([&](const GpuActivity& a) {
      const int t = static_cast<int>(a.correlation_id >> 24);
      const int64_t seq = static_cast<int64_t>(a.correlation_id & 0xffffff);
      if (t >= kThreads || seq != last[t] + 1 ||
          std::string(a.name) != "kernel_of_thread_" + std::to_string(t)) {
        ++bad;
      }
      if (t < kThreads) last[t] = seq;
    });
  };
  while (done.load() < kThreads) drain();
  for (std::thread& th : threads) th.join();
  drain();
  ASSERT_FALSE(stuck.load()) << "the pool never got its buffers back";
  EXPECT_EQ(records, size_t{kThreads} * kBuffersPerThread * kRecords);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(handoff_.TakeDropped(), 0u);
}

// What CUPTI dropped reaches the drain's count; a buffer completed after Stop() is not handed
// over (nobody would read it).
TEST_F(FakeHandoffTest, DropsAreCountedAndNothingArrivesAfterStop) {
  auto drop = Control<void (*)(CUcontext, uint32_t, size_t)>(cupti_, "fake_cupti_drop");
  const auto ctx = reinterpret_cast<CUcontext>(uintptr_t{0x30});
  drop(ctx, 2, 4);
  ASSERT_EQ(complete_(ctx, 2, 1, 1, "k"), 1u);
  EXPECT_EQ(handoff_.TakeDropped(), 4u);
  drop(ctx, 2, 6);
  Stop();  // the final flush reads every queue's count
  EXPECT_EQ(handoff_.TakeDropped(), 6u);
  EXPECT_EQ(complete_(ctx, 2, 1, 2, "late"), 1u);  // CUPTI got a buffer and gave it back
  size_t walked = handoff_.Take().ForEach([](const GpuActivity&) {});
  EXPECT_EQ(walked, 1u);  // only the record completed before Stop
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
