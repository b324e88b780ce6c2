#include "cupti/activity_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/activity_sink.h"
#include "cupti/activity_convert.h"

namespace tokentrace::cupti {
namespace {

struct Walked {
  std::vector<GpuActivity> got;
  std::vector<std::string> names;
  std::vector<const char*> name_pointers;
};

Walked WalkAll(ActivityBuffer* b) {
  Walked w;
  b->ForEach([&](const GpuActivity& a) {
    w.got.push_back(a);
    w.names.push_back(a.name ? a.name : "");
    w.name_pointers.push_back(a.name);
  });
  return w;
}

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

// Records in a pool buffer as CUPTI would leave them (our stand-in layout), with the kernel's
// name stored in the buffer after its record. Returns the valid bytes.
size_t FillKernelsAndACopy(uint8_t* buffer, const char* name, uint32_t first_correlation) {
  std::vector<uint8_t> buf;
  KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = first_correlation;
  k.start = 10;
  k.end = 20;
  Append(&buf, k);
  KernelRecord other = {};
  other.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  Append(&buf, other);
  MemcpyRecord m = {};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.correlationId = first_correlation + 1;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.start = 30;
  m.end = 40;
  Append(&buf, m);
  const size_t valid = buf.size();
  std::memcpy(buffer, buf.data(), valid);
  char* stored = reinterpret_cast<char*>(buffer + valid);  // past the records: never walked
  std::strcpy(stored, name);
  reinterpret_cast<KernelRecord*>(buffer + 8)->name = stored;
  return valid;
}

TEST(PooledBuffer, ConvertsKeptKindsInOrderWithTheClockOffset) {
  BufferPool pool;
  uint8_t* data = pool.Take();
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 8, 0u);  // CUPTI's record alignment
  const size_t valid = FillKernelsAndACopy(data, "first", 1);
  ActivityBuffer* b = pool.Complete(data, valid, &FakeNext, 5);
  ASSERT_NE(b, nullptr);
  const Walked w = WalkAll(b);
  ASSERT_EQ(w.got.size(), 2u);  // the overhead record is not kept
  EXPECT_EQ(w.got[0].correlation_id, 1u);
  EXPECT_EQ(w.names[0], "first");
  EXPECT_EQ(w.got[0].begin_ns, 15);  // the clock offset (5) is applied
  EXPECT_EQ(w.got[1].kind, GpuOpKind::kMemcpy);
  EXPECT_EQ(w.got[1].copy_kind, 2u);
  EXPECT_EQ(w.got[1].end_ns, 45);
  b->Release();
}

// The name handed out is CUPTI's own pointer, read in place (no copy); once the buffer is
// given back, the pool hands the same memory to CUPTI again.
TEST(PooledBuffer, ARecordsNameIsReadInPlaceAndItsBufferGoesBackToThePool) {
  BufferPool pool;
  uint8_t* data = pool.Take();
  const size_t valid = FillKernelsAndACopy(data, "gemm_kernel_with_a_long_name", 7);
  ActivityBuffer* b = pool.Complete(data, valid, &FakeNext, 0);
  const Walked first = WalkAll(b);
  ASSERT_EQ(first.got.size(), 2u);
  EXPECT_EQ(first.name_pointers[0], reinterpret_cast<const char*>(data + valid));
  EXPECT_EQ(pool.free_buffers(), 0u);
  b->Release();
  EXPECT_EQ(pool.free_buffers(), 1u);
  uint8_t* again = pool.Take();
  ASSERT_EQ(again, data);  // reused, not allocated
  EXPECT_EQ(pool.allocated(), 1u);
  const size_t valid2 = FillKernelsAndACopy(again, "softmax", 9);
  ActivityBuffer* b2 = pool.Complete(again, valid2, &FakeNext, 0);
  EXPECT_EQ(b2, b);  // the same object, in front of the same buffer
  const Walked second = WalkAll(b2);
  EXPECT_EQ(second.names[0], "softmax");
  EXPECT_EQ(second.got[0].correlation_id, 9u);
  b2->Release();
}

TEST(PooledBuffer, EmptyOrUnwalkableBuffersHaveNoRecords) {
  BufferPool pool;
  uint8_t* data = pool.Take();
  ActivityBuffer* empty = pool.Complete(data, 0, &FakeNext, 0);  // as a forced flush may give
  EXPECT_EQ(WalkAll(empty).got.size(), 0u);
  empty->Release();
  data = pool.Take();
  ActivityBuffer* no_walker = pool.Complete(data, 64, nullptr, 0);
  EXPECT_EQ(WalkAll(no_walker).got.size(), 0u);
  no_walker->Release();
  EXPECT_EQ(pool.Complete(nullptr, 64, &FakeNext, 0), nullptr);
  EXPECT_EQ(pool.free_buffers(), 1u);
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
