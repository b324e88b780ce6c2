#include "cupti/cupti_api.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace tokentrace::cupti {
namespace {

// Oldest CUPTI we accept: activity_convert.cc reads the CUDA 13 record layouts
// (CUpti_ActivityKernel10, Memcpy6, Memset4). CUDA 12 libcupti reports small API
// versions (< 100) and emits older layouts, so it is refused rather than misread.
constexpr uint32_t kMinCuptiVersion = 130000;

std::mutex g_mutex;         // guards loading only; never taken on a callback path
CuptiApi* g_api = nullptr;  // published once, never freed (libcupti stays loaded)
std::atomic<const CuptiApi*> g_published{nullptr};

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsCudaRuntime(const std::string& base) { return base.find("libcudart") != std::string::npos; }

bool IsCudaLibrary(const std::string& base) {
  return IsCudaRuntime(base) || base.find("libcublas") != std::string::npos ||
         base.find("libcuda") != std::string::npos ||
         base.find("libtorch_cuda") != std::string::npos;
}

template <typename Fn>
bool Lookup(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}

// Opens `path` and resolves every entry point. On failure closes it and says why.
bool TryLoad(const CuptiCandidate& candidate, CuptiApi* api, std::string* why) {
  const std::string& path = candidate.path;
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    if (path.find('/') != std::string::npos && access(path.c_str(), F_OK) != 0) {
      *why = "not found";
    } else {
      const char* err = dlerror();
      *why = err != nullptr ? err : "dlopen failed";
    }
    return false;
  }
  CuptiApi a;
  a.handle = handle;
  a.path = path;
  a.reason = candidate.reason;
  const char* missing = nullptr;
#define TT_REQUIRE(field, sym) \
  if (missing == nullptr && !Lookup(handle, #sym, &a.field)) missing = #sym
  TT_REQUIRE(GetVersion, cuptiGetVersion);
  TT_REQUIRE(GetResultString, cuptiGetResultString);
  TT_REQUIRE(Subscribe, cuptiSubscribe);
  TT_REQUIRE(Unsubscribe, cuptiUnsubscribe);
  TT_REQUIRE(EnableCallback, cuptiEnableCallback);
  TT_REQUIRE(ActivityEnable, cuptiActivityEnable);
  TT_REQUIRE(ActivityDisable, cuptiActivityDisable);
  TT_REQUIRE(ActivityRegisterCallbacks, cuptiActivityRegisterCallbacks);
  TT_REQUIRE(ActivityGetNextRecord, cuptiActivityGetNextRecord);
  TT_REQUIRE(ActivityGetNumDroppedRecords, cuptiActivityGetNumDroppedRecords);
  TT_REQUIRE(ActivityFlushAll, cuptiActivityFlushAll);
  TT_REQUIRE(GetTimestamp, cuptiGetTimestamp);
#undef TT_REQUIRE
  if (missing != nullptr) {
    *why = std::string("has no ") + missing;
    dlclose(handle);
    return false;
  }
  Lookup(handle, "cuptiSubscribe_v2", &a.SubscribeV2);
  Lookup(handle, "cuptiActivityRegisterTimestampCallback", &a.ActivityRegisterTimestampCallback);
  Lookup(handle, "cuptiGetGraphExecId", &a.GetGraphExecId);
  Lookup(handle, "cuptiGetGraphId", &a.GetGraphId);
  Lookup(handle, "cuptiGetGraphNodeId", &a.GetGraphNodeId);

  if (a.GetVersion(&a.version) != CUPTI_SUCCESS || a.version < kMinCuptiVersion) {
    *why = "CUPTI API version " + std::to_string(a.version) + " is older than CUDA 13 (" +
           std::to_string(kMinCuptiVersion) + ")";
    dlclose(handle);
    return false;
  }
  *api = std::move(a);
  return true;
}

}  // namespace

std::vector<CuptiCandidate> CuptiCandidates(const std::string& explicit_path,
                                            const std::vector<std::string>& loaded_objects) {
  std::vector<CuptiCandidate> out;
  auto add = [&out](const std::string& p, const std::string& reason) {
    if (p.empty()) return;
    for (const CuptiCandidate& c : out) {
      if (c.path == p) return;
    }
    out.push_back(CuptiCandidate{p, reason});
  };
  if (!explicit_path.empty()) {
    add(explicit_path, "TOKENTRACE_CUPTI");
    return out;
  }
  for (const std::string& obj : loaded_objects) {
    if (BaseName(obj).find("libcupti.so") != std::string::npos) add(obj, "already loaded");
  }
  // The runtime's neighbours first: the job's CUDA release is the runtime's, and the driver
  // (libcuda in /usr/lib) or another library may come from elsewhere.
  auto add_neighbours = [&](const std::string& obj, const std::string& reason) {
    const std::string dir = DirName(obj);
    if (dir.empty()) return;
    for (const char* rel : {"", "/../../nvidia/cu13/lib", "/../../nvidia/cuda_cupti/lib"}) {
      add(dir + rel + "/libcupti.so.13", reason);
      add(dir + rel + "/libcupti.so", reason);
    }
  };
  for (const std::string& obj : loaded_objects) {
    if (IsCudaRuntime(BaseName(obj))) {
      add_neighbours(obj, "next to the CUDA runtime the job loaded, " + obj);
    }
  }
  for (const std::string& obj : loaded_objects) {
    const std::string base = BaseName(obj);
    if (IsCudaLibrary(base) && !IsCudaRuntime(base)) {
      add_neighbours(obj, "next to " + obj + ", a CUDA library the job loaded");
    }
  }
  add("/usr/local/cuda/lib64/libcupti.so.13", "the CUDA toolkit");
  add("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13", "the CUDA toolkit");
  add("libcupti.so.13", "the loader's search path");
  return out;
}

std::vector<std::string> LoadedObjectPaths() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
          static_cast<std::vector<std::string>*>(data)->emplace_back(info->dlpi_name);
        }
        return 0;
      },
      &out);
  return out;
}

const CuptiApi* LoadCuptiApi(const std::string& explicit_path, std::string* why) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_api != nullptr) return g_api;
  std::string tried;
  for (const CuptiCandidate& candidate : CuptiCandidates(explicit_path, LoadedObjectPaths())) {
    CuptiApi api;
    std::string reason;
    if (TryLoad(candidate, &api, &reason)) {
      g_api = new CuptiApi(std::move(api));
      g_published.store(g_api, std::memory_order_release);
      return g_api;
    }
    if (!tried.empty()) tried += "; ";
    tried += candidate.path + " (" + reason + ")";
  }
  if (why != nullptr) {
    *why = explicit_path.empty() ? "libcupti not found (tried: " + tried +
                                       "); set TOKENTRACE_CUPTI=/path/to/libcupti.so.13"
                                 : "cannot load TOKENTRACE_CUPTI=" + tried;
  }
  return nullptr;
}

const CuptiApi* LoadedCuptiApi() { return g_published.load(std::memory_order_acquire); }

std::string ResultText(CUptiResult result) {
  const CuptiApi* api = LoadedCuptiApi();
  const char* text = nullptr;
  if (api != nullptr && api->GetResultString(result, &text) == CUPTI_SUCCESS && text != nullptr) {
    return text;
  }
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

void LogCuptiFailure(const char* call_text, CUptiResult result) {
  std::fprintf(stderr, "tokentrace: %s failed: %s\n", call_text, ResultText(result).c_str());
}

}  // namespace tokentrace::cupti
