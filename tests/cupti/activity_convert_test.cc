#include "cupti/activity_convert.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tokentrace::cupti {
namespace {

TEST(ActivityConvert, ConcurrentKernel) {
  KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = 77;
  k.start = 1000;
  k.end = 1600;
  k.deviceId = 1;
  k.streamId = 13;
  k.graphId = 5;
  k.graphNodeId = 0x1234567890ull;
  k.name = "ampere_sgemm_128x64";
  GpuActivity a;
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&k), 0, &a));
  EXPECT_EQ(a.kind, GpuOpKind::kKernel);
  EXPECT_EQ(a.correlation_id, 77u);
  EXPECT_EQ(a.begin_ns, 1000);
  EXPECT_EQ(a.end_ns - a.begin_ns, 600);
  EXPECT_EQ(a.device, 1u);
  EXPECT_EQ(a.stream, 13u);
  EXPECT_EQ(a.graph_id, 5u);
  EXPECT_EQ(a.graph_node_id, 0x1234567890ull);
  EXPECT_STREQ(a.name, "ampere_sgemm_128x64");
  EXPECT_EQ(a.bytes, 0u);
}

TEST(ActivityConvert, SerialKernelKindAndClockOffset) {
  KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  k.start = 100;
  k.end = 150;
  k.name = "k";
  GpuActivity a;
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&k), -40, &a));
  EXPECT_EQ(a.begin_ns, 60);
  EXPECT_EQ(a.end_ns, 110);
  EXPECT_EQ(a.graph_id, 0u);
  EXPECT_EQ(a.graph_node_id, 0u);
}

// CUPTI writes start = end = 0 when it could not time a record: not a time at all.
TEST(ActivityConvert, MissingOrBackwardTimesAreFlagged) {
  KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "k";
  GpuActivity a;
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&k), 5000, &a));
  EXPECT_FALSE(a.timed);
  EXPECT_EQ(a.begin_ns, 0);
  EXPECT_EQ(a.end_ns, 0);
  k.start = 200;
  k.end = 100;
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&k), 5000, &a));
  EXPECT_FALSE(a.timed);
  k.end = 200;  // a zero-length record is a time
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&k), 5000, &a));
  EXPECT_TRUE(a.timed);
  EXPECT_EQ(a.begin_ns, 5200);
}

TEST(ActivityConvert, Memcpy) {
  struct Case {
    uint8_t cupti;
    uint8_t ours;
  } cases[] = {{CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 1}, {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 2},
               {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, 8}, {CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, 0},
               {CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, 0}, {CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN, 0}};
  for (const Case& c : cases) {
    MemcpyRecord m = {};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = c.cupti;
    m.bytes = 4096;
    m.start = 5000;
    m.end = 7500;
    m.deviceId = 0;
    m.streamId = 7;
    m.correlationId = 9;
    m.graphId = 3;
    m.graphNodeId = 11;
    GpuActivity a;
    ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&m), 0, &a));
    EXPECT_EQ(a.kind, GpuOpKind::kMemcpy);
    EXPECT_EQ(a.copy_kind, c.ours) << int(c.cupti);
    EXPECT_EQ(a.bytes, 4096u);
    EXPECT_EQ(a.end_ns - a.begin_ns, 2500);
    EXPECT_EQ(a.stream, 7u);
    EXPECT_EQ(a.correlation_id, 9u);
    EXPECT_EQ(a.graph_id, 3u);
    EXPECT_EQ(a.graph_node_id, 11u);
    EXPECT_EQ(a.name, nullptr);
  }
}

TEST(ActivityConvert, Memset) {
  MemsetRecord m = {};
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.bytes = 256;
  m.start = 10;
  m.end = 30;
  m.deviceId = 2;
  m.streamId = 4;
  m.correlationId = 21;
  GpuActivity a;
  ASSERT_TRUE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&m), 0, &a));
  EXPECT_EQ(a.kind, GpuOpKind::kMemset);
  EXPECT_EQ(a.bytes, 256u);
  EXPECT_EQ(a.end_ns - a.begin_ns, 20);
  EXPECT_EQ(a.device, 2u);
  EXPECT_EQ(a.stream, 4u);
  EXPECT_EQ(a.correlation_id, 21u);
  EXPECT_EQ(a.copy_kind, 0u);
}

TEST(ActivityConvert, IgnoredKindsAndNull) {
  GpuActivity a;
  EXPECT_FALSE(ConvertActivity(nullptr, 0, &a));
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_MARKER,
        CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION}) {
    KernelRecord r = {};  // big enough for any header
    r.kind = kind;
    EXPECT_FALSE(ConvertActivity(reinterpret_cast<const CUpti_Activity*>(&r), 0, &a)) << kind;
  }
}

}  // namespace
}  // namespace tokentrace::cupti
