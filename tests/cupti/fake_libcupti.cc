// A stand-in libcupti for subscriber tests on machines without a GPU: just the entry points
// cupti_api.cc requires, recording what the subscriber asked for. Tests drive it through the
// fake_cupti_* functions (looked up with dlsym), e.g. to complete a buffer or drop records.
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
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
// The fake's buffer layout (not CUPTI's): each record is an 8-byte header holding the size of
// what follows, then the record, then (kernels) its name, NUL-terminated and padded to 8.
CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  if (buffer == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* at = buffer;
  if (*record != nullptr) {
    uint8_t* body = reinterpret_cast<uint8_t*>(*record);
    uint32_t size = 0;
    std::memcpy(&size, body - 8, sizeof size);
    at = body + size;
  }
  if (at + 8 > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(at + 8);
  return CUPTI_SUCCESS;
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
// CUPTI asks for a buffer, writes `n` kernel records into it (correlation ids from
// `first_correlation`, times 1000 + id .. 2000 + id, each followed by a copy of `name` that
// its record's name points to), and hands it back completed for (context, stream). Returns
// the records written, 0 when the subscriber had no buffer to give.
size_t fake_cupti_complete_kernels(CUcontext context, uint32_t stream, size_t n,
                                   uint32_t first_correlation, const char* name) {
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
  const size_t name_bytes = (std::strlen(name) + 1 + 7) / 8 * 8;
  const uint32_t body = static_cast<uint32_t>(sizeof(CUpti_ActivityKernel10) + name_bytes);
  size_t valid = 0;
  size_t written = 0;
  for (; written < n && valid + 8 + body <= size; ++written) {
    uint8_t* at = buffer + valid;
    std::memset(at, 0, 8 + body);
    std::memcpy(at, &body, sizeof body);
    char* copy = reinterpret_cast<char*>(at + 8 + sizeof(CUpti_ActivityKernel10));
    std::strcpy(copy, name);
    CUpti_ActivityKernel10 k = {};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.correlationId = first_correlation + static_cast<uint32_t>(written);
    k.start = 1000 + k.correlationId;
    k.end = 2000 + k.correlationId;
    k.streamId = stream;
    k.name = copy;
    std::memcpy(at + 8, &k, sizeof k);
    valid += 8 + body;
  }
  completed(context, stream, buffer, size, valid);
  return written;
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
