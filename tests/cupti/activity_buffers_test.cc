#include "cupti/activity_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cupti/activity_convert.h"

namespace tokentrace::cupti {
namespace {

struct CollectingSink : ActivitySink {
  std::vector<GpuActivity> got;
  std::vector<std::string> names;
  uint64_t dropped = 0;
  void OnActivity(const GpuActivity& a) override {
    got.push_back(a);
    names.push_back(a.name ? a.name : "");
  }
  void OnDropped(uint64_t n) override { dropped += n; }
};

// Stand-in for cuptiActivityGetNextRecord over a buffer of back-to-back records, each
// preceded by its size (our fabricated layout, not CUPTI's).
CUptiResult FakeNext(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  uint8_t* at = *record == nullptr
                    ? buffer
                    : reinterpret_cast<uint8_t*>(*record) +
                          *reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(*record) - 8);
  if (at + 8 > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(at + 8);
  return CUPTI_SUCCESS;
}

template <typename R>
void Append(std::vector<uint8_t>* buf, const R& r) {
  uint32_t size = sizeof(R);
  uint8_t header[8] = {};
  std::memcpy(header, &size, sizeof(size));
  buf->insert(buf->end(), header, header + 8);
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  buf->insert(buf->end(), p, p + sizeof(R));
}

TEST(DeliverRecords, ConvertsKeptKindsInOrder) {
  std::vector<uint8_t> buf;
  KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = 1;
  k.name = "first";
  k.start = 10;
  k.end = 20;
  Append(&buf, k);
  KernelRecord other = {};
  other.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  Append(&buf, other);
  MemcpyRecord m = {};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.correlationId = 2;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  Append(&buf, m);
  // 8-byte aligned copy, as CUPTI requires of its buffers.
  std::vector<uint64_t> aligned((buf.size() + 7) / 8);
  std::memcpy(aligned.data(), buf.data(), buf.size());

  CollectingSink sink;
  const size_t n =
      DeliverRecords(reinterpret_cast<uint8_t*>(aligned.data()), buf.size(), &FakeNext, 5, &sink);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(sink.got[0].correlation_id, 1u);
  EXPECT_EQ(sink.names[0], "first");
  EXPECT_EQ(sink.got[0].begin_ns, 15);  // the clock offset (5) is applied
  EXPECT_EQ(sink.got[1].kind, GpuOpKind::kMemcpy);
  EXPECT_EQ(sink.got[1].copy_kind, 2u);
}

TEST(DeliverRecords, EmptyOrMissingPiecesDeliverNothing) {
  CollectingSink sink;
  uint64_t word = 0;
  EXPECT_EQ(DeliverRecords(nullptr, 100, &FakeNext, 0, &sink), 0u);
  EXPECT_EQ(DeliverRecords(reinterpret_cast<uint8_t*>(&word), 0, &FakeNext, 0, &sink), 0u);
  EXPECT_EQ(DeliverRecords(reinterpret_cast<uint8_t*>(&word), 8, nullptr, 0, &sink), 0u);
  EXPECT_TRUE(sink.got.empty());
}

// A periodic flush hands over only full buffers: a record reaches the trace once about a
// buffer's worth of later records were written. 8 MB held ~38,800 kernel records, minutes of
// a slow job; the README states the bound this checks.
TEST(BufferPool, ABufferHoldsAtMostAboutFiveThousandKernelRecords) {
  EXPECT_LE(BufferPool::kBufferBytes / sizeof(CUpti_ActivityKernel10), 5000u);
  EXPECT_GE(BufferPool::kMaxBuffers * BufferPool::kBufferBytes, size_t{64} << 20);
}

TEST(BufferPool, ReusesAndCaps) {
  BufferPool pool;
  uint8_t* a = pool.Take();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 8, 0u);
  pool.Give(a);
  EXPECT_EQ(pool.Take(), a);
  EXPECT_EQ(pool.allocated(), 1u);
  std::vector<uint8_t*> out = {a};
  for (size_t i = 1; i < BufferPool::kMaxBuffers; ++i) out.push_back(pool.Take());
  for (uint8_t* b : out) EXPECT_NE(b, nullptr);
  EXPECT_EQ(pool.Take(), nullptr);  // CUPTI then drops and counts
  for (uint8_t* b : out) pool.Give(b);
  EXPECT_EQ(pool.allocated(), BufferPool::kMaxBuffers);
}

}  // namespace
}  // namespace tokentrace::cupti
