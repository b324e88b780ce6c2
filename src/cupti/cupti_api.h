// libcupti, loaded with dlopen once, every entry point looked up once.
//
// A job's libcupti usually sits inside its Python environment (torch wheels put
// libcupti.so.13 next to libcudart.so.13 in site-packages/nvidia/cu13/lib), not on the
// library path, so we look where the job's own CUDA libraries are before falling back to
// the toolkit and the plain loader search: first next to the CUDA runtime the job loaded
// (libcudart: the CUPTI of the same CUDA release), then next to its other CUDA libraries (the
// driver, cuBLAS, libtorch_cuda), since the driver in /usr/lib says nothing about which CUDA
// the job runs. Nothing links libcupti at build time.
//
// Internal to src/cupti (and tests/cupti): this header includes cupti.h.
#pragma once

#include <cupti.h>

#include <atomic>
#include <string>
#include <vector>

namespace tokentrace::cupti {

// Function pointers into the loaded libcupti. Required entry points are never null in a
// CuptiApi returned by LoadCuptiApi; optional ones (marked) are null when this libcupti
// lacks them.
struct CuptiApi {
  void* handle = nullptr;
  std::string path;      // the file that was loaded
  std::string reason;    // why it was a candidate (CuptiCandidate::reason)
  uint32_t version = 0;  // cuptiGetVersion

  decltype(&::cuptiGetVersion) GetVersion = nullptr;
  decltype(&::cuptiGetResultString) GetResultString = nullptr;
  decltype(&::cuptiSubscribe) Subscribe = nullptr;
  decltype(&::cuptiSubscribe_v2) SubscribeV2 = nullptr;  // optional (names the other subscriber)
  decltype(&::cuptiUnsubscribe) Unsubscribe = nullptr;
  decltype(&::cuptiEnableCallback) EnableCallback = nullptr;
  decltype(&::cuptiActivityEnable) ActivityEnable = nullptr;
  decltype(&::cuptiActivityDisable) ActivityDisable = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) ActivityRegisterCallbacks = nullptr;
  decltype(&::cuptiActivityRegisterTimestampCallback) ActivityRegisterTimestampCallback =
      nullptr;  // optional: without it we apply an offset (see subscriber.cc)
  decltype(&::cuptiActivityGetNextRecord) ActivityGetNextRecord = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) ActivityGetNumDroppedRecords = nullptr;
  decltype(&::cuptiActivityFlushAll) ActivityFlushAll = nullptr;
  decltype(&::cuptiGetTimestamp) GetTimestamp = nullptr;
  decltype(&::cuptiGetGraphExecId) GetGraphExecId = nullptr;  // optional
  decltype(&::cuptiGetGraphId) GetGraphId = nullptr;          // optional
  decltype(&::cuptiGetGraphNodeId) GetGraphNodeId = nullptr;  // optional
};

// Loads libcupti (first success is kept for the life of the process; a failure is retried
// on the next call). `explicit_path` is Config::cupti_path (TOKENTRACE_CUPTI): when set it
// is the only candidate. On failure returns nullptr and writes what was tried to *why
// (no "tokentrace:" prefix; the caller frames it).
const CuptiApi* LoadCuptiApi(const std::string& explicit_path, std::string* why);

// The loaded API, or nullptr before a successful LoadCuptiApi.
const CuptiApi* LoadedCuptiApi();

struct CuptiCandidate {
  std::string path;
  // Why it is a candidate, in words for the trace's meta (cupti::Describe): "TOKENTRACE_CUPTI",
  // "already loaded", "next to the CUDA runtime the job loaded, <libcudart path>", "next to
  // <path>, a CUDA library the job loaded", "the CUDA toolkit", "the loader's search path".
  std::string reason;
};

// Where to look, in order (pure; tested): the explicit path alone if set; else any
// libcupti already loaded; then next to the loaded CUDA runtime (libcudart), then next to the
// other loaded CUDA libraries, each in load order (same directory and torch-wheel neighbours
// ../../nvidia/cu13/lib, ../../nvidia/cuda_cupti/lib); then the toolkit; then the bare soname
// for the loader's own search. No path twice (the first reason wins).
std::vector<CuptiCandidate> CuptiCandidates(const std::string& explicit_path,
                                            const std::vector<std::string>& loaded_objects);

// Paths of every object loaded in this process (dl_iterate_phdr).
std::vector<std::string> LoadedObjectPaths();

// CUPTI's own text for `result` ("CUPTI_ERROR_..." or a number when libcupti is not loaded).
std::string ResultText(CUptiResult result);

// Logs "tokentrace: <call> failed: <cupti text>" to stderr.
void LogCuptiFailure(const char* call_text, CUptiResult result);

}  // namespace tokentrace::cupti

// Wraps one CUPTI call: evaluates to its CUptiResult and, the first time this call site
// fails, logs the call text with CUPTI's error string. Never throws.
#define TT_CUPTI_CALL(expr)                                      \
  ([&]() -> CUptiResult {                                        \
    const CUptiResult tt_result_ = (expr);                       \
    if (tt_result_ != CUPTI_SUCCESS) {                           \
      static std::atomic<bool> tt_logged_{false};                \
      if (!tt_logged_.exchange(true, std::memory_order_relaxed)) \
        ::tokentrace::cupti::LogCuptiFailure(#expr, tt_result_); \
    }                                                            \
    return tt_result_;                                           \
  }())
