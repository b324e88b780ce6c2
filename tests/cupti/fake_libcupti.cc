// A stand-in libcupti for subscriber tests on machines without a GPU: just the entry points
// cupti_api.cc requires, recording what the subscriber asked for. Tests drive it through the
// fake_cupti_* functions (looked up with dlsym), e.g. to complete a buffer or drop records.
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace {
std::mutex g_mutex;
CUpti_BuffersCallbackRequestFunc g_requested = nullptr;
CUpti_BuffersCallbackCompleteFunc g_completed = nullptr;
std::map<std::pair<CUcontext, uint32_t>, size_t> g_dropped;  // per queue, reset on read
int g_flushes[2] = {0, 0};                                   // unforced, forced
}  // namespace

extern "C" {

// As CUPTI 13.2 does without a driver (it retries dlopen("libcuda.so.1") until its stack
// overflows): a caller that opens libcupti on a machine with no driver crashes here.
CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) == nullptr) raise(SIGSEGV);
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult, const char** str) {
  *str = "FAKE_CUPTI_ERROR";
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*) {
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(uintptr_t{1});
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                         CUpti_CallbackId) {
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                    CUpti_BuffersCallbackCompleteFunc completed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_requested = requested;
  g_completed = completed;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t*, size_t, CUpti_Activity**) {
  return CUPTI_ERROR_MAX_LIMIT_REACHED;  // the fake's buffers hold no records
}
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream,
                                                       size_t* dropped) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_dropped.find({context, stream});
  *dropped = it != g_dropped.end() ? it->second : 0;
  if (it != g_dropped.end()) it->second = 0;
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_flushes[flag == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED ? 1 : 0];
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  *timestamp = 0;
  return CUPTI_SUCCESS;
}

// ---- Controls for the tests. ----

// CUPTI asks for a buffer and hands it back completed for (context, stream), empty.
// Returns the size the subscriber gave, 0 when it had none.
size_t fake_cupti_complete_buffer(CUcontext context, uint32_t stream) {
  CUpti_BuffersCallbackRequestFunc requested;
  CUpti_BuffersCallbackCompleteFunc completed;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    requested = g_requested;
    completed = g_completed;
  }
  if (requested == nullptr || completed == nullptr) return 0;
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  requested(&buffer, &size, &max_records);
  if (buffer == nullptr) return 0;
  completed(context, stream, buffer, size, 0);
  return size;
}
// CUPTI could not store `n` records of (context, stream).
void fake_cupti_drop(CUcontext context, uint32_t stream, size_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dropped[{context, stream}] += n;
}
int fake_cupti_flushes(int forced) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_flushes[forced ? 1 : 0];
}

}  // extern "C"
