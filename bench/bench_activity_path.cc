// The CUPTI record path from a completed activity buffer to joined rows, in kernel records
// per second. A producer thread plays CUPTI's buffer-completion thread: it takes a buffer from
// the pool, fills it with kernel records (standing for CUPTI writing it) and completes it the
// way subscriber.cc's OnBufferCompleted does (hands it to the session's ActivityHandoff). The
// benchmark's own thread plays the drain: it takes what was handed over, walks each buffer and
// joins its records (Joiner::OnActivity, then EndDrain), as session/drainer.cc does, until
// every record of the iteration was joined; each buffer goes back to the pool once walked.
// Wall time, both threads running at once.
//
// An iteration is kBuffers full 1 MB buffers of CONCURRENT_KERNEL records whose launch
// events the joiner has already seen (fed untimed), spread over 48 calls, with eight kernel
// names of the lengths torch's mangled names have (all interned after the first buffer). The
// records are walked with a stand-in for cuptiActivityGetNextRecord (size-prefixed records):
// libcupti's own walk is not in the number.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/event.h"
#include "core/joiner.h"
#include "core/records.h"
#include "cupti/activity_buffers.h"
#include "cupti/activity_convert.h"
#include "session/activity_handoff.h"

namespace tokentrace {
namespace {

constexpr int kBuffers = 8;
constexpr size_t kHeader = 8;  // the stand-in layout's size prefix
constexpr size_t kRecordBytes = kHeader + sizeof(cupti::KernelRecord);
constexpr size_t kRecordsPerBuffer = cupti::BufferPool::kBufferBytes / kRecordBytes;

const char* const kNames[] = {
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false, false>(flash::Flash_fwd_params)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >",
    "triton_poi_fused_add_mul_0",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>"
    " > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)",
};

int64_t IdentityNs(uint64_t ticks) { return static_cast<int64_t>(ticks); }

// Stand-in for cuptiActivityGetNextRecord over size-prefixed records (tests/cupti's layout).
CUptiResult FakeNext(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  uint8_t* at =
      *record == nullptr ? buffer : reinterpret_cast<uint8_t*>(*record) + kRecordBytes - kHeader;
  if (at + kRecordBytes > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(at + kHeader);
  return CUPTI_SUCCESS;
}

// What CUPTI writes into a buffer: kRecordsPerBuffer kernel records with correlation ids
// from `first_correlation`. Returns the valid bytes.
size_t FillBuffer(uint8_t* buffer, uint64_t first_correlation) {
  cupti::KernelRecord k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.deviceId = 0;
  k.streamId = 7;
  const uint32_t size = sizeof(cupti::KernelRecord);
  for (size_t i = 0; i < kRecordsPerBuffer; ++i) {
    const uint64_t c = first_correlation + i;
    k.correlationId = static_cast<uint32_t>(c);
    k.start = 1000 + c * 10;
    k.end = k.start + 5000;
    k.name = kNames[c % (sizeof kNames / sizeof kNames[0])];
    uint8_t* at = buffer + i * kRecordBytes;
    std::memcpy(at, &size, sizeof size);
    std::memcpy(at + kHeader, &k, sizeof k);
  }
  return kRecordsPerBuffer * kRecordBytes;
}

void BM_ActivityPath(benchmark::State& state) {
  KernelMode mode;
  mode.kind = static_cast<KernelMode::Kind>(state.range(0));
  Joiner joiner(mode, &IdentityNs);
  cupti::BufferPool pool;
  ActivityHandoff handoff;
  uint64_t next_correlation = 1;
  uint64_t ticks = 1;
  int64_t records = 0;
  Batch batch;
  for (auto _ : state) {
    state.PauseTiming();
    const uint64_t first = next_correlation;
    const uint64_t count = uint64_t{kBuffers} * kRecordsPerBuffer;
    next_correlation += count;
    batch = Batch();
    for (uint64_t c = first; c < first + count; ++c) {
      const uint64_t call = 1 + (c / 15) % 48;
      joiner.OnEvent(0, MakeEvent(EventKind::kLaunch, ticks++, call, c, 0, 0, 0, 1, 1), &batch);
    }
    batch = Batch();
    state.ResumeTiming();

    std::thread producer([&] {
      for (int b = 0; b < kBuffers; ++b) {
        uint8_t* buffer;
        while ((buffer = pool.Take()) == nullptr) std::this_thread::yield();
        const size_t valid = FillBuffer(buffer, first + b * kRecordsPerBuffer);
        // subscriber.cc's OnBufferCompleted: hand the buffer over, report drops.
        handoff.OnBuffer(pool.Complete(buffer, valid, &FakeNext, 0));
        handoff.OnDropped(0);
      }
    });
    uint64_t joined = 0;
    while (joined < count) {
      ActivityHandoff::Taken taken = handoff.Take();
      if (taken.empty()) {
        std::this_thread::yield();
        continue;
      }
      joined += taken.ForEach([&](const GpuActivity& a) { joiner.OnActivity(a, &batch); });
      joiner.EndDrain(&batch);
    }
    producer.join();
    records += static_cast<int64_t>(joined);
  }
  state.SetItemsProcessed(records);
  state.counters["records_per_s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ActivityPath)
    ->ArgName("mode")  // 1 summary, 2 full (KernelMode::Kind)
    ->Arg(KernelMode::kSummary)
    ->Arg(KernelMode::kFull)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tokentrace

BENCHMARK_MAIN();
