#include "cupti/subscriber.h"

#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <system_error>
#include <thread>

#include "core/clock.h"
#include "cupti/activity_buffers.h"
#include "cupti/callback_classify.h"
#include "cupti/callback_dispatch.h"
#include "cupti/cupti_api.h"
#include "cupti/device_wait.h"

namespace tokentrace::cupti {
namespace {

// ---- State. Written by Start/Stop (one thread); read by callbacks. ----
const CuptiApi* g_api = nullptr;
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_started = false;
// Added to CUPTI timestamps: 0 when the timestamp callback puts them on our clock.
std::atomic<int64_t> g_clock_offset_ns{0};
// Never destroyed: a buffer may be given back (ActivityBuffer::Release) by a session that
// ends after static destructors ran.
BufferPool& Pool() {
  static BufferPool* pool = new BufferPool();
  return *pool;
}

// The buffer-completion callback takes no lock (CUPTI may complete buffers on its worker
// thread and inside a Flush at the same time). g_sink is set by Start before activity is
// enabled and cleared by Stop, which then waits until no callback is still inside the sink:
// each callback counts itself in g_in_callback before it reads g_sink. With both sides
// sequentially consistent, either the callback reads the null or Stop sees its count.
std::atomic<ActivitySink*> g_sink{nullptr};
std::atomic<int> g_in_callback{0};

// The (context, stream) queues buffers were completed for: their dropped counts are read once
// more after the final forced flush, since records dropped after a queue's last completed
// buffer are otherwise never read. Null context: CUPTI's global queue, always read. Slots are
// claimed by the completion callbacks (fetch_add) and published with `ready`; two callbacks
// racing on a new queue may both add it, which is harmless: CUPTI resets a count when it is
// read, so the second read gives 0.
constexpr size_t kMaxQueues = 256;
struct QueueSlot {
  std::atomic<CUcontext> context{nullptr};
  std::atomic<uint32_t> stream{0};
  std::atomic<bool> ready{false};
};
QueueSlot g_queues[kMaxQueues];
std::atomic<size_t> g_queue_count{0};  // slots claimed (may pass kMaxQueues: clamp on read)

// Contexts WaitForDevice could not confirm finished, until the session takes the count.
std::atomic<uint64_t> g_wait_timeouts{0};

constexpr CUpti_ActivityKind kActivityKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// Buffer callbacks run on CUPTI's worker thread or inside Flush(); this only catches a
// completion that would recurse into itself.
thread_local bool t_in_buffer_callback = false;

struct Guard {
  bool& flag;
  explicit Guard(bool& f) : flag(f) { flag = true; }
  ~Guard() { flag = false; }
};

uint64_t CUPTIAPI HostClock() { return static_cast<uint64_t>(clock::HostNowNs()); }

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = Pool().Take();
  *size = *buffer != nullptr ? BufferPool::kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void ReportDropped(ActivitySink* sink, CUcontext context, uint32_t stream_id) {
  size_t dropped = 0;
  if (TT_CUPTI_CALL(g_api->ActivityGetNumDroppedRecords(context, stream_id, &dropped)) ==
      CUPTI_SUCCESS) {
    sink->OnDropped(dropped);
  }
}

size_t QueueCount() { return std::min(g_queue_count.load(std::memory_order_acquire), kMaxQueues); }

void NoteQueue(CUcontext context, uint32_t stream_id) {
  if (context == nullptr) return;
  const size_t n = QueueCount();
  for (size_t i = 0; i < n; ++i) {
    const QueueSlot& q = g_queues[i];
    if (q.ready.load(std::memory_order_acquire) &&
        q.context.load(std::memory_order_relaxed) == context &&
        q.stream.load(std::memory_order_relaxed) == stream_id) {
      return;
    }
  }
  if (n >= kMaxQueues) return;
  const size_t slot = g_queue_count.fetch_add(1, std::memory_order_acq_rel);
  if (slot >= kMaxQueues) return;
  g_queues[slot].context.store(context, std::memory_order_relaxed);
  g_queues[slot].stream.store(stream_id, std::memory_order_relaxed);
  g_queues[slot].ready.store(true, std::memory_order_release);
}

// Hands the completed buffer, unread, to the sink (the drain walks it: activity_buffers.h),
// then reports what CUPTI dropped for its queue. No lock, no copy, no allocation.
void CUPTIAPI OnBufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                size_t /*size*/, size_t valid_bytes) {
  if (buffer == nullptr) return;
  if (t_in_buffer_callback) {  // never expected; keep the buffer rather than recurse
    Pool().Give(buffer);
    return;
  }
  Guard guard(t_in_buffer_callback);
  g_in_callback.fetch_add(1);
  ActivitySink* sink = g_sink.load();
  if (sink != nullptr) {
    sink->OnBuffer(Pool().Complete(buffer, valid_bytes, g_api->ActivityGetNextRecord,
                                   g_clock_offset_ns.load(std::memory_order_relaxed)));
    ReportDropped(sink, context, stream_id);
    NoteQueue(context, stream_id);
  } else {
    Pool().Give(buffer);  // after Stop: nobody to read it
  }
  g_in_callback.fetch_sub(1);
}

// After a forced flush: what every queue dropped since its last completed buffer (CUPTI
// resets a count when it is read, so nothing is counted twice). The controlling thread.
void ReportAllDropped() {
  ActivitySink* sink = g_sink.load();
  if (sink == nullptr || g_api == nullptr) return;
  ReportDropped(sink, nullptr, 0);
  const size_t n = QueueCount();
  for (size_t i = 0; i < n; ++i) {
    const QueueSlot& q = g_queues[i];
    if (!q.ready.load(std::memory_order_acquire)) continue;
    ReportDropped(sink, q.context.load(std::memory_order_relaxed),
                  q.stream.load(std::memory_order_relaxed));
  }
}

// Clears g_sink and returns once no completion callback is still inside it.
void DetachSink() {
  g_sink.store(nullptr);
  while (g_in_callback.load() != 0) std::this_thread::yield();
}

std::string SubscribeFailure(CUptiResult r, const char* other_subscriber) {
  switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: {
      std::string s = "another CUPTI subscriber is active (torch.profiler or Nsight Systems?)";
      if (other_subscriber != nullptr && other_subscriber[0] != '\0') {
        s += std::string(": ") + other_subscriber;
      }
      return s + "; stop it or set TOKENTRACE_KERNELS=off";
    }
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INVALID_DEVICE:
      return "CUPTI could not initialize (no NVIDIA driver or GPU visible?): " + ResultText(r);
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_NOT_SUPPORTED:
      return "CUPTI does not support this driver/GPU (driver too old for CUDA 13?): " +
             ResultText(r);
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return "CUPTI is not allowed to trace here (insufficient privileges): " + ResultText(r);
    default:
      return "cuptiSubscribe failed: " + ResultText(r);
  }
}

KernelsOff SubscribeFailureKind(CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return KernelsOff::kOtherProfiler;
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INVALID_DEVICE:
      return KernelsOff::kNoGpu;
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return KernelsOff::kNotAllowed;
    default:
      return KernelsOff::kFailed;
  }
}

// True when libcuda.so.1 is (or can be) loaded. Asked before libcupti is opened: some CUPTI
// builds crash in their first call when there is no driver (13.2's cuptiGetVersion recurses
// until the stack overflows), so a machine without one never calls into CUPTI.
bool DriverLoadable(std::string* why) {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h != nullptr) {
    dlclose(h);
    return true;
  }
  const char* err = dlerror();
  *why = err != nullptr ? err : "libcuda.so.1 not found";
  return false;
}

bool Subscribe(std::string* why, KernelsOff* reason) {
  CUptiResult r;
  char other[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = {};
  if (g_api->SubscribeV2 != nullptr) {
    CUpti_SubscriberParams params = {};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "tokentrace";
    params.oldSubscriberName = other;
    params.oldSubscriberSize = sizeof(other);
    r = g_api->SubscribeV2(&g_subscriber, &DispatchCallback, const_cast<CuptiApi*>(g_api), &params);
  } else {
    r = g_api->Subscribe(&g_subscriber, &DispatchCallback, const_cast<CuptiApi*>(g_api));
  }
  if (r == CUPTI_SUCCESS) return true;
  g_subscriber = nullptr;
  other[sizeof(other) - 1] = '\0';
  *why = SubscribeFailure(r, other);
  *reason = SubscribeFailureKind(r);  // the driver was found before libcupti was opened
  return false;
}

// Puts CUPTI's timestamps on HostNowNs(), or measures the offset to apply instead.
void SetUpClock() {
  if (g_api->ActivityRegisterTimestampCallback != nullptr &&
      TT_CUPTI_CALL(g_api->ActivityRegisterTimestampCallback(&HostClock)) == CUPTI_SUCCESS) {
    g_clock_offset_ns.store(0, std::memory_order_relaxed);
    return;
  }
  // Bracket cuptiGetTimestamp between two host reads and use the midpoint.
  uint64_t cupti_ts = 0;
  const int64_t before = clock::HostNowNs();
  const CUptiResult r = g_api->GetTimestamp(&cupti_ts);
  const int64_t after = clock::HostNowNs();
  g_clock_offset_ns.store(
      r == CUPTI_SUCCESS ? before + (after - before) / 2 - static_cast<int64_t>(cupti_ts) : 0,
      std::memory_order_relaxed);
}

bool EnableCallbacks(std::string* why) {
  for (size_t i = 0; i < kNumTracedCallbacks; ++i) {
    const TracedCallback& cb = kTracedCallbacks[i];
    // An id this libcupti does not know is skipped; a broken subscription is not.
    const CUptiResult r = g_api->EnableCallback(1, g_subscriber, cb.domain, cb.cbid);
    if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INVALID_PARAMETER) {
      *why = "cuptiEnableCallback failed: " + ResultText(r);
      return false;
    }
  }
  for (size_t i = 0; i < kNumResourceCallbacks; ++i) {
    TT_CUPTI_CALL(
        g_api->EnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, kResourceCallbacks[i]));
  }
  return true;
}

bool EnableActivity(std::string* why) {
  CUptiResult r =
      TT_CUPTI_CALL(g_api->ActivityRegisterCallbacks(&OnBufferRequested, &OnBufferCompleted));
  if (r != CUPTI_SUCCESS) {
    *why = "cuptiActivityRegisterCallbacks failed: " + ResultText(r);
    return false;
  }
  for (CUpti_ActivityKind kind : kActivityKinds) {
    r = g_api->ActivityEnable(kind);
    if (r != CUPTI_SUCCESS && kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      *why = "cuptiActivityEnable(CONCURRENT_KERNEL) failed: " + ResultText(r);
      return false;
    }
    if (r != CUPTI_SUCCESS) LogCuptiFailure("cuptiActivityEnable(MEMCPY/MEMSET)", r);
  }
  return true;
}

void Teardown() {
  if (g_subscriber != nullptr) {
    for (CUpti_ActivityKind kind : kActivityKinds) g_api->ActivityDisable(kind);
    TT_CUPTI_CALL(g_api->Unsubscribe(g_subscriber));
    g_subscriber = nullptr;
  }
}

}  // namespace

bool Start(const Config& config, ActivitySink* sink, std::string* why_off, KernelsOff* kind) {
  std::string why;
  KernelsOff off = KernelsOff::kFailed;
  auto fail = [&](const std::string& reason) {
    if (why_off != nullptr) *why_off = "tokentrace: kernels are off: " + reason;
    if (kind != nullptr) *kind = off;
    return false;
  };
  if (kind != nullptr) *kind = KernelsOff::kNo;
  if (g_started) return true;
  if (config.kernels.kind == KernelMode::kOff) {
    off = KernelsOff::kByConfig;
    return fail("TOKENTRACE_KERNELS=off");
  }
  if (sink == nullptr) return fail("no activity sink (internal error)");
  if (!config.cupti_path.empty() && access(config.cupti_path.c_str(), F_OK) != 0) {
    off = KernelsOff::kNoCupti;  // named without opening anything
    return fail("cannot load TOKENTRACE_CUPTI=" + config.cupti_path + " (not found)");
  }
  std::string no_driver;
  if (!DriverLoadable(&no_driver)) {
    off = KernelsOff::kNoGpu;
    return fail("no NVIDIA driver (" + no_driver + "); libcupti was not opened");
  }
  g_api = LoadCuptiApi(config.cupti_path, &why);
  if (g_api == nullptr) {
    off = KernelsOff::kNoCupti;
    return fail(why);
  }
  if (!Subscribe(&why, &off)) return fail(why);
  SetUpClock();
  g_sink.store(sink);
  if (!EnableCallbacks(&why) || !EnableActivity(&why)) {
    Teardown();
    DetachSink();
    return fail(why);
  }
  g_started = true;
  return true;
}

void Flush(bool forced) {
  if (!g_started) return;
  TT_CUPTI_CALL(g_api->ActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0));
  if (forced) ReportAllDropped();
}

int WaitForDevice(int timeout_ms) {
  if (!g_started) return 0;
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return 0;
  DeviceWaiter::Driver d;
  if (!DeviceWaiter::Resolve(driver, &d)) {
    dlclose(driver);
    return 0;
  }
  // The waiting thread keeps the state (and the driver handle) alive: after a timeout it is
  // left behind, still inside the driver, and the job's exit goes on without it.
  CUcontext current = nullptr;
  if (d.get_current(&current) != CUDA_SUCCESS) current = nullptr;
  auto waiter = std::make_shared<DeviceWaiter>(d, current);
  try {
    std::thread([waiter] { waiter->Run(); }).detach();
  } catch (const std::system_error&) {  // no thread to spare: wait here, unbounded
    waiter->Run();
  }
  const int left = waiter->WaitFor(timeout_ms);
  if (left == 0) dlclose(driver);  // else the thread may still call into it
  g_wait_timeouts.fetch_add(static_cast<uint64_t>(left), std::memory_order_relaxed);
  return left;
}

uint64_t TakeDeviceWaitTimeouts() { return g_wait_timeouts.exchange(0); }

std::string Describe() {
  if (!g_started || g_api == nullptr) return "";
  std::string s = g_api->path;
  if (!g_api->reason.empty()) s += " (" + g_api->reason + ")";
  return s + ", API version " + std::to_string(g_api->version);
}

void Stop() {
  if (!g_started) return;
  TT_CUPTI_CALL(g_api->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  ReportAllDropped();
  Teardown();
  DetachSink();
  // No callback reads the slots now; a later session starts with none.
  for (QueueSlot& q : g_queues) q.ready.store(false, std::memory_order_relaxed);
  g_queue_count.store(0, std::memory_order_release);
  g_started = false;
}

}  // namespace tokentrace::cupti
