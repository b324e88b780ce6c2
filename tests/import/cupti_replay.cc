// The live CUPTI path driven by a recorded GPU trace: one process of a torch.profiler or Nsight
// Systems trace is performed again, as its job did it, under the preloaded shim, with the fake
// libcupti (tests/cupti/fake_libcupti.cc) standing in for CUPTI and the fake libcuda.so.1 for
// the driver. Run by tests/python/test_import_live.py:
//
//   LD_PRELOAD=libtokentrace.so TOKENTRACE_CUPTI=libfake_cupti.so TOKENTRACE_OUT=F
//   cupti_replay TRACE PID FAKE_LIBCUDA [RECORDS_PER_BUFFER]
//
// What it does, in the trace's order (import::Schedule, the order `tokentrace import` joins in):
// - cuInit's call of InitializeInjection first (kernels start as in a CUDA job);
// - one thread per recorded thread; each step runs on its own thread, one at a time, so the
//   threads interleave as the trace says;
// - ranges through the real NVTX injection path: module ranges (Kineto's `nn.Module: X`) in the
//   tokentrace domain as the Python hooks push them (the root, chosen as import chooses it,
//   with the root category), the others as plain nvtxRangePushA;
// - every API call of the trace as CUPTI's enter and exit callbacks on its thread, with the
//   trace's correlation id and the callback id its name has in CUPTI's headers (a runtime
//   kernel launch also makes the driver's cuLaunchKernel inside it, as the runtime does);
// - each call's GPU records, after its exit, into per-(device, stream) buffers of at most
//   RECORDS_PER_BUFFER records (default: a 16th of the process's records), which a "CUPTI"
//   thread of this program hands back out of order and late; what is left goes at the shim's
//   final forced flush. Records whose launch is not in the trace (launched before it began)
//   come first.
// Exit: 0; 2 bad arguments or an unreadable trace; 3 kernels did not start (the shim said why).
// It prints how many calls of each API it made ("call NAME N"), and the calls it could not
// make: "unknown NAME N calls R records" for a name CUPTI's headers do not have (Kineto writes
// INVALID for a call it could not name).
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <semaphore>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cupti.h"
#include "import/readers.h"
#include "import/replay.h"
#include "nvtx3/nvToolsExt.h"
#include "tokentrace/tokentrace.h"

namespace {

using tokentrace::GpuActivity;
using tokentrace::GpuOpKind;
using tokentrace::SiteKind;
using namespace tokentrace::import;

// CUPTI's callback ids by name, read from its headers (cupti_runtime_cbid.h and
// cupti_driver_cbid.h), so no table of them is kept here.
std::map<std::string, uint32_t> ReadCbids(const char* path, const char* prefix) {
  std::map<std::string, uint32_t> out;
  std::ifstream in(path);
  const std::regex line(std::string("^\\s*") + prefix + "(\\w+)\\s*=\\s*(\\d+)");
  std::string text;
  std::smatch m;
  while (std::getline(in, text)) {
    if (std::regex_search(text, m, line)) out[m[1]] = static_cast<uint32_t>(std::stoul(m[2]));
  }
  return out;
}

// The id of an API called `name` in `table`: the name itself (Nsight Systems writes
// "cudaLaunchKernel_v7000"), else its newest versioned form ("cudaLaunchKernel" ->
// cudaLaunchKernel_v7000, not the _ptsz one). 0: none.
uint32_t Cbid(const std::map<std::string, uint32_t>& table, const std::string& name) {
  auto exact = table.find(name);
  if (exact != table.end()) return exact->second;
  uint32_t best = 0;
  long best_version = -1;
  const std::string stem = name + "_v";
  for (auto it = table.lower_bound(stem); it != table.end() && it->first.rfind(stem, 0) == 0;
       ++it) {
    const std::string rest = it->first.substr(stem.size());
    if (rest.empty() || rest.find_first_not_of("0123456789") != std::string::npos) continue;
    const long version = std::stol(rest);
    if (version > best_version) {
      best_version = version;
      best = it->second;
    }
  }
  return best;
}

template <typename Fn>
Fn Control(void* handle, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) {
    std::fprintf(stderr, "cupti_replay: the fake libcupti has no %s\n", name);
    std::exit(2);
  }
  return fn;
}

struct Fake {
  int (*api)(int, uint32_t, int, uint32_t, const char*, const void*);
  int (*add)(CUcontext, uint32_t, const void*, size_t, const char*);
  size_t (*complete)(size_t, size_t);
  void (*per_buffer)(size_t);
};

CUcontext ContextOf(uint32_t device) { return reinterpret_cast<CUcontext>(uintptr_t{device} + 1); }

// A recorded GPU record as CUPTI writes it (the layouts src/cupti/activity_convert.h reads).
void AddRecord(const Fake& fake, const RecordedGpu& g) {
  const GpuActivity& a = g.activity;
  auto common = [&](auto* r) {
    r->correlationId = static_cast<uint32_t>(a.correlation_id);
    r->start = static_cast<uint64_t>(a.begin_ns);
    r->end = static_cast<uint64_t>(a.end_ns);
    r->deviceId = a.device;
    r->streamId = a.stream;
    r->contextId = a.device + 1;
    r->graphId = a.graph_id;
    r->graphNodeId = a.graph_node_id;
  };
  if (a.kind == GpuOpKind::kKernel) {
    CUpti_ActivityKernel10 k = {};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    common(&k);
    fake.add(ContextOf(a.device), a.stream, &k, sizeof k, g.name.c_str());
  } else if (a.kind == GpuOpKind::kMemcpy) {
    CUpti_ActivityMemcpy6 m = {};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    common(&m);
    m.bytes = a.bytes;
    m.copyKind = a.copy_kind == 1   ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
                 : a.copy_kind == 2 ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
                 : a.copy_kind == 8 ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
                                    : CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN;
    fake.add(ContextOf(a.device), a.stream, &m, sizeof m, nullptr);
  } else {
    CUpti_ActivityMemset4 m = {};
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    common(&m);
    m.bytes = a.bytes;
    fake.add(ContextOf(a.device), a.stream, &m, sizeof m, nullptr);
  }
}

// Runs each step on the thread it belongs to, one step at a time.
class Threads {
 public:
  explicit Threads(size_t n) : slots_(n) {
    for (size_t i = 0; i < n; ++i) {
      slots_[i].thread = std::thread([this, i] { Loop(i); });
    }
  }
  // Runs `work` on thread `i` and waits for it.
  template <typename Fn>
  void Run(size_t i, Fn&& work) {
    slots_[i].work = std::forward<Fn>(work);
    slots_[i].go.release();
    done_.acquire();
  }
  void Join() {
    for (Slot& s : slots_) {
      s.quit = true;
      s.go.release();
      s.thread.join();
    }
  }

 private:
  struct Slot {
    std::thread thread;
    std::binary_semaphore go{0};
    std::function<void()> work;
    bool quit = false;
  };
  void Loop(size_t i) {
    for (;;) {
      slots_[i].go.acquire();
      if (slots_[i].quit) return;
      slots_[i].work();
      done_.release();
    }
  }
  std::vector<Slot> slots_;
  std::binary_semaphore done_{0};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: cupti_replay TRACE PID FAKE_LIBCUDA [RECORDS_PER_BUFFER]\n");
    return 2;
  }
  RecordedTrace trace;
  std::string error;
  if (!ReadRecorded(argv[1], &trace, &error)) {
    std::fprintf(stderr, "cupti_replay: %s\n", error.c_str());
    return 2;
  }
  auto found = trace.processes.find(std::atoll(argv[2]));
  if (found == trace.processes.end()) {
    std::fprintf(stderr, "cupti_replay: %s has no process %s\n", argv[1], argv[2]);
    return 2;
  }
  const RecordedProcess& p = found->second;
  // Small enough that each trace comes in 16 or more buffers; large enough that the
  // subscriber's pool (128 buffers, each of room for thousands of records, as CUPTI fills
  // them) is not run dry by a replay that goes faster than the job did.
  const size_t per_buffer = argc > 4 ? std::strtoul(argv[4], nullptr, 10)
                                     : std::clamp<size_t>(p.gpu.size() / 16, 4, 4096);

  // The driver, then cuInit's call of the injection entry: the shim starts CUPTI (the fake).
  if (dlopen(argv[3], RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cupti_replay: %s\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "InitializeInjection"));
  const char* cupti_path = std::getenv("TOKENTRACE_CUPTI");
  if (init == nullptr || cupti_path == nullptr) {
    std::fprintf(stderr,
                 "cupti_replay: run it with LD_PRELOAD=libtokentrace.so and "
                 "TOKENTRACE_CUPTI=<the fake libcupti>\n");
    return 2;
  }
  init();
  void* cupti = dlopen(cupti_path, RTLD_NOW | RTLD_NOLOAD);
  if (cupti == nullptr) {
    std::fprintf(stderr, "cupti_replay: the shim did not load %s (kernels are off)\n", cupti_path);
    return 3;
  }
  Fake fake{Control<decltype(Fake::api)>(cupti, "fake_cupti_api_callback"),
            Control<decltype(Fake::add)>(cupti, "fake_cupti_add_record"),
            Control<decltype(Fake::complete)>(cupti, "fake_cupti_complete_full"),
            Control<decltype(Fake::per_buffer)>(cupti, "fake_cupti_set_buffer_records")};
  fake.per_buffer(per_buffer);

  const auto runtime = ReadCbids(TT_CUPTI_RUNTIME_CBID_H, "CUPTI_RUNTIME_TRACE_CBID_");
  const auto driver = ReadCbids(TT_CUPTI_DRIVER_CBID_H, "CUPTI_DRIVER_TRACE_CBID_");
  const uint32_t driver_launch = Cbid(driver, "cuLaunchKernel");
  if (runtime.empty() || driver_launch == 0) {
    std::fprintf(stderr, "cupti_replay: cannot read CUPTI's callback ids from %s\n",
                 TT_CUPTI_RUNTIME_CBID_H);
    return 2;
  }

  // Each launch's records, in time order; those of no launch first.
  std::unordered_map<uint64_t, std::vector<uint32_t>> records_of;
  for (uint32_t i = 0; i < p.gpu.size(); ++i) {
    records_of[p.gpu[i].activity.correlation_id].push_back(i);
  }
  for (auto& [correlation, list] : records_of) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return p.gpu[a].activity.begin_ns < p.gpu[b].activity.begin_ns;
    });
  }
  {
    std::unordered_set<uint64_t> launched;
    for (const RecordedLaunch& l : p.launches) launched.insert(l.correlation);
    for (const auto& [correlation, list] : records_of) {
      if (launched.count(correlation) != 0) continue;
      for (uint32_t i : list) AddRecord(fake, p.gpu[i]);
    }
  }

  // "CUPTI's" thread: hands full buffers back now and then, in no particular order.
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    std::mt19937 random(7);
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200 + random() % 800));
      fake.complete(random() % 3, random());
    }
  });

  const std::string root = ChooseRoot(p);
  const ReplaySchedule schedule = Schedule(p, /*all_launches=*/true);
  nvtxDomainHandle_t domain = nvtxDomainCreateA(TOKENTRACE_NVTX_DOMAIN);
  std::map<std::string, nvtxStringHandle_t> strings;
  std::vector<std::vector<bool>> in_domain(schedule.threads.size());  // per thread's open ranges
  std::map<std::string, uint64_t> calls;
  std::map<std::string, std::pair<uint64_t, uint64_t>> unknown;  // name -> (calls, records)
  Threads threads(schedule.threads.size());
  std::mt19937 random(11);
  size_t step_count = 0;
  for (const ReplayStep& s : schedule.steps) {
    if (s.kind == ReplayStep::kRecord) continue;  // each launch hands over its own
    std::vector<bool>& open = in_domain[s.thread];
    if (s.kind == ReplayStep::kPush) {
      const RecordedRange& r = p.ranges[s.index];
      const bool module = r.kind == SiteKind::kModule;
      nvtxStringHandle_t handle = nullptr;
      if (module) {
        auto it = strings.find(r.name);
        if (it == strings.end()) {
          it = strings.emplace(r.name, nvtxDomainRegisterStringA(domain, r.name.c_str())).first;
        }
        handle = it->second;
      }
      const uint32_t category =
          r.name == root ? TOKENTRACE_NVTX_CATEGORY_ROOT : TOKENTRACE_NVTX_CATEGORY_MODULE;
      threads.Run(s.thread, [&, module, handle, category] {
        if (module) {
          nvtxEventAttributes_t attr = {};
          attr.version = NVTX_VERSION;
          attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
          attr.category = category;
          attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
          attr.message.registered = handle;
          nvtxDomainRangePushEx(domain, &attr);
        } else {
          nvtxRangePushA(r.name.c_str());
        }
      });
      open.push_back(module);
    } else if (s.kind == ReplayStep::kPop) {
      const bool module = open.back();
      open.pop_back();
      threads.Run(s.thread, [&, module] {
        if (module) {
          nvtxDomainRangePop(domain);
        } else {
          nvtxRangePop();
        }
      });
    } else {
      const RecordedLaunch& l = p.launches[s.index];
      const uint32_t cbid = Cbid(l.driver ? driver : runtime, l.api);
      const int api_domain = l.driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
      if (cbid == 0) {
        auto& [unknown_calls, unknown_records] = unknown[l.api];
        ++unknown_calls;
        auto it = records_of.find(l.correlation);
        if (it != records_of.end()) unknown_records += it->second.size();
      } else {
        ++calls[l.api];
        const bool runtime_kernel = !l.driver && l.api.rfind("cudaLaunchKernel", 0) == 0;
        const auto correlation = static_cast<uint32_t>(l.correlation);
        threads.Run(s.thread, [&, cbid, api_domain, runtime_kernel, correlation] {
          // The parameters: a graph launch's first is its exec (the fake's handles are ids);
          // the rest read as zero (a copy of kind cudaMemcpyHostToHost, stream 0).
          alignas(16) unsigned char params[512] = {};
          const uintptr_t exec = l.graph ? 1 : 0;
          std::memcpy(params, &exec, sizeof exec);
          fake.api(api_domain, cbid, 0, correlation, l.api.c_str(), params);
          if (runtime_kernel) {  // the driver call the runtime makes, with its own id
            const uint32_t inner = correlation | 0x80000000u;
            fake.api(CUPTI_CB_DOMAIN_DRIVER_API, driver_launch, 0, inner, "cuLaunchKernel", params);
            fake.api(CUPTI_CB_DOMAIN_DRIVER_API, driver_launch, 1, inner, "cuLaunchKernel", params);
          }
          fake.api(api_domain, cbid, 1, correlation, l.api.c_str(), params);
        });
      }
      auto it = records_of.find(l.correlation);
      if (it != records_of.end()) {
        for (uint32_t i : it->second) AddRecord(fake, p.gpu[i]);
        records_of.erase(it);  // a correlation id's records are handed over once
      }
    }
    if (++step_count % 97 == 0) fake.complete(random() % 4, random());
  }
  threads.Join();
  stop.store(true);
  worker.join();
  for (const auto& [name, n] : calls)
    std::printf("call %s %llu\n", name.c_str(), static_cast<unsigned long long>(n));
  for (const auto& [name, n] : unknown) {
    std::printf("unknown %s %llu calls %llu records\n", name.c_str(),
                static_cast<unsigned long long>(n.first),
                static_cast<unsigned long long>(n.second));
  }
  return 0;  // the shim's exit handler flushes the rest and writes the file
}
