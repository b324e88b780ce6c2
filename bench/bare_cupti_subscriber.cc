// A bare CUPTI subscriber: the floor for kernel tracing, loaded with
//   CUDA_INJECTION64_PATH=/path/libbare_cupti_subscriber.so <program>
//
// It enables exactly the CUPTI features tokentrace enables (src/cupti/subscriber.cc): the
// same runtime/driver callback ids (the table kTracedCallbacks is compiled in from
// src/cupti/callback_classify.cc), the graph-node resource callbacks, and CONCURRENT_KERNEL +
// MEMCPY + MEMSET activity with buffers of BufferPool's size. The callback does nothing and
// completed buffers are handed back without being read: what remains is CUPTI's own cost. Comparing
// tokentrace with this isolates tokentrace's bookkeeping.
//
// This is a benchmark tool, not part of libtokentrace, so it includes cupti.h itself (the
// project rule "only src/cupti includes cupti.h" is about the library). libcupti is
// dlopen'ed, like tokentrace does: the copy already in the process (torch's) first, then the
// toolkit's; BARE_CUPTI_PATH overrides.
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "cupti/activity_buffers.h"
#include "cupti/callback_classify.h"

namespace {

struct Api {
  decltype(&cuptiSubscribe) Subscribe;
  decltype(&cuptiEnableCallback) EnableCallback;
  decltype(&cuptiActivityRegisterCallbacks) ActivityRegisterCallbacks;
  decltype(&cuptiActivityEnable) ActivityEnable;
  decltype(&cuptiActivityFlushAll) ActivityFlushAll;
  decltype(&cuptiActivityGetNumDroppedRecords) ActivityGetNumDroppedRecords;
};
Api g_api;
std::atomic<uint64_t> g_buffers{0};
std::atomic<uint64_t> g_dropped{0};

constexpr size_t kBufferBytes = tokentrace::cupti::BufferPool::kBufferBytes;

void* OpenCupti() {
  if (const char* p = getenv("BARE_CUPTI_PATH")) return dlopen(p, RTLD_NOW | RTLD_LOCAL);
  for (const char* name :
       {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
        "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13", "libcupti.so"}) {
    void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) return h;
  }
  return nullptr;
}

template <typename T>
bool Find(void* h, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(h, name));
  return *out != nullptr;
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(64, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI OnBufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t) {
  size_t dropped = 0;
  if (g_api.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) {
    g_dropped.fetch_add(dropped);
  }
  g_buffers.fetch_add(1);
  free(buffer);  // discarded unread
}

void AtExit() {
  g_api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  fprintf(stderr, "bare_cupti_subscriber: %llu buffers, %llu records dropped\n",
          static_cast<unsigned long long>(g_buffers.load()),
          static_cast<unsigned long long>(g_dropped.load()));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  void* h = OpenCupti();
  if (h == nullptr || !Find(h, "cuptiSubscribe", &g_api.Subscribe) ||
      !Find(h, "cuptiEnableCallback", &g_api.EnableCallback) ||
      !Find(h, "cuptiActivityRegisterCallbacks", &g_api.ActivityRegisterCallbacks) ||
      !Find(h, "cuptiActivityEnable", &g_api.ActivityEnable) ||
      !Find(h, "cuptiActivityFlushAll", &g_api.ActivityFlushAll) ||
      !Find(h, "cuptiActivityGetNumDroppedRecords", &g_api.ActivityGetNumDroppedRecords)) {
    fprintf(stderr, "bare_cupti_subscriber: libcupti not found; set BARE_CUPTI_PATH\n");
    return 0;
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  if (g_api.Subscribe(&subscriber, &OnCallback, nullptr) != CUPTI_SUCCESS) {
    fprintf(stderr, "bare_cupti_subscriber: cuptiSubscribe failed (another subscriber?)\n");
    return 0;
  }
  using tokentrace::cupti::kNumTracedCallbacks;
  using tokentrace::cupti::kTracedCallbacks;
  for (size_t i = 0; i < kNumTracedCallbacks; ++i) {
    g_api.EnableCallback(1, subscriber, kTracedCallbacks[i].domain, kTracedCallbacks[i].cbid);
  }
  for (size_t i = 0; i < tokentrace::cupti::kNumResourceCallbacks; ++i) {
    g_api.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                         tokentrace::cupti::kResourceCallbacks[i]);
  }
  g_api.ActivityRegisterCallbacks(&OnBufferRequested, &OnBufferCompleted);
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET}) {
    g_api.ActivityEnable(kind);
  }
  atexit(&AtExit);
  return 1;
}
