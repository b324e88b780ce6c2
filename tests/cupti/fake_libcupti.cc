// A stand-in libcupti for subscriber tests on machines without a GPU: the entry points
// cupti_api.cc looks up, recording what the subscriber asked for. Tests drive it through the
// fake_cupti_* functions (looked up with dlsym), e.g. to complete a buffer or drop records.
//
// It also serves a recorded trace as CUPTI would (tests/import/cupti_replay.cc): API callbacks
// to the subscriber's callback function, for the callback ids it enabled only, with a
// CUpti_CallbackData per call; and GPU records written into buffers the subscriber gave,
// a buffer per (context, stream), handed back completed when the test says, in an order it
// picks (out of order, late), and all of them at a forced flush, as CUPTI does.
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace {
using Queue = std::pair<CUcontext, uint32_t>;  // (context, stream)

std::mutex g_mutex;
CUpti_BuffersCallbackRequestFunc g_requested = nullptr;
CUpti_BuffersCallbackCompleteFunc g_completed = nullptr;
std::map<Queue, size_t> g_dropped;  // per queue, reset on read
int g_flushes[2] = {0, 0};          // unforced, forced
CUpti_CallbackFunc g_callback = nullptr;
void* g_userdata = nullptr;
std::set<std::pair<int, uint32_t>> g_enabled;  // (domain, cbid) the subscriber enabled

// A buffer the subscriber gave, being filled with one queue's records.
struct Filling {
  Queue queue;
  uint8_t* data = nullptr;
  size_t size = 0, valid = 0, records = 0;
};
std::map<Queue, Filling> g_filling;
std::vector<Filling> g_full;      // filled, not yet handed back
size_t g_records_per_buffer = 0;  // 0: as many as fit

// Hands `buffers` back to the subscriber (never under g_mutex: its callback calls in here).
void Complete(const std::vector<Filling>& buffers) {
  CUpti_BuffersCallbackCompleteFunc completed;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    completed = g_completed;
  }
  for (const Filling& b : buffers) {
    if (completed != nullptr) completed(b.queue.first, b.queue.second, b.data, b.size, b.valid);
  }
}
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
CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_callback = callback;
  g_userdata = userdata;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(uintptr_t{1});
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_callback = nullptr;
  g_enabled.clear();
  return CUPTI_SUCCESS;
}
CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (enable != 0) {
    g_enabled.insert({domain, cbid});
  } else {
    g_enabled.erase({domain, cbid});
  }
  return CUPTI_SUCCESS;
}
// The records this fake writes carry the times its caller gives, as if this clock gave them.
CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc) {
  return CUPTI_SUCCESS;
}
// A graph exec's id: the fake's handles are their ids.
CUptiResult CUPTIAPI cuptiGetGraphExecId(CUgraphExec exec, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(exec));
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
// Hands back the filled buffers; a forced flush also the ones being filled.
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  std::vector<Filling> done;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const bool forced = flag == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED;
    ++g_flushes[forced ? 1 : 0];
    done.swap(g_full);
    if (forced) {
      for (auto& [queue, b] : g_filling) done.push_back(b);
      g_filling.clear();
    }
  }
  Complete(done);
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
// ---- Serving a recorded trace (tests/import/cupti_replay.cc). ----

// Calls the subscriber's callback as CUPTI does for an API call's enter (site 0) or exit
// (site 1) on this thread, when it enabled (domain, cbid). Returns 1 when it was called.
int fake_cupti_api_callback(int domain, uint32_t cbid, int site, uint32_t correlation,
                            const char* function_name, const void* params) {
  CUpti_CallbackFunc callback;
  void* userdata;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_callback == nullptr || g_enabled.count({domain, cbid}) == 0) return 0;
    callback = g_callback;
    userdata = g_userdata;
  }
  thread_local uint64_t correlation_data = 0;
  CUpti_CallbackData data = {};
  data.callbackSite = site == 0 ? CUPTI_API_ENTER : CUPTI_API_EXIT;
  data.functionName = function_name;
  data.functionParams = params;
  data.correlationId = correlation;
  data.correlationData = &correlation_data;
  callback(userdata, static_cast<CUpti_CallbackDomain>(domain), cbid, &data);
  return 1;
}

// At most `n` records per buffer from now on (0: as many as fit), so a trace comes in chunks.
void fake_cupti_set_buffer_records(size_t n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records_per_buffer = n;
}

// Writes one GPU record (a CUpti_Activity* struct of `size` bytes; a kernel's name is copied
// after it and its name pointer set to the copy) into the buffer of (context, stream), asking
// the subscriber for one when there is none. A full buffer waits to be handed back. Returns 1,
// or 0 when the subscriber gave no buffer (the record is dropped and counted, as CUPTI does).
int fake_cupti_add_record(CUcontext context, uint32_t stream, const void* record, size_t size,
                          const char* name) {
  CUpti_BuffersCallbackRequestFunc requested;
  const Queue queue{context, stream};
  const size_t name_bytes = name != nullptr ? (std::strlen(name) + 1 + 7) / 8 * 8 : 0;
  const size_t body = (size + 7) / 8 * 8 + name_bytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      requested = g_requested;
      auto it = g_filling.find(queue);
      if (it != g_filling.end()) {
        Filling& b = it->second;
        const bool fits = b.valid + 8 + body <= b.size &&
                          (g_records_per_buffer == 0 || b.records < g_records_per_buffer);
        if (fits) {
          uint8_t* at = b.data + b.valid;
          std::memset(at, 0, 8 + body);
          const uint32_t length = static_cast<uint32_t>(body);
          std::memcpy(at, &length, sizeof length);
          std::memcpy(at + 8, record, size);
          if (name != nullptr) {
            char* copy = reinterpret_cast<char*>(at + 8 + (size + 7) / 8 * 8);
            std::strcpy(copy, name);
            const auto kind = reinterpret_cast<const CUpti_Activity*>(record)->kind;
            if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
                kind == CUPTI_ACTIVITY_KIND_KERNEL) {
              reinterpret_cast<CUpti_ActivityKernel10*>(at + 8)->name = copy;
            }
          }
          b.valid += 8 + body;
          ++b.records;
          return 1;
        }
        g_full.push_back(b);  // full: handed back later
        g_filling.erase(it);
      }
    }
    if (requested == nullptr) break;
    Filling b;
    b.queue = queue;
    size_t max_records = 0;
    requested(&b.data, &b.size, &max_records);
    if (b.data == nullptr || b.size < 8 + body) break;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_filling[queue] = b;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dropped[queue] += 1;
  return 0;
}

// Hands back up to `n` of the full buffers, the one at `pick` modulo their number first, then
// on from there (so a caller that varies `pick` completes them out of order). Returns how many.
size_t fake_cupti_complete_full(size_t n, size_t pick) {
  std::vector<Filling> done;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    while (done.size() < n && !g_full.empty()) {
      const size_t at = pick % g_full.size();
      done.push_back(g_full[at]);
      g_full.erase(g_full.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  Complete(done);
  return done.size();
}

int fake_cupti_flushes(int forced) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_flushes[forced ? 1 : 0];
}

}  // extern "C"
