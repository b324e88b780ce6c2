// torch.profiler's (Kineto's) trace-event JSON, read into a RecordedTrace (readers.h).
#include "import/readers.h"

#if TOKENTRACE_HAVE_JSON
#include <zlib.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

namespace tokentrace::import {
namespace {

using nlohmann::json;

constexpr std::string_view kModulePrefix = "nn.Module: ";

// The whole file, gunzipped when it is gzip (zlib reads a plain file as it is).
bool Slurp(const std::string& path, std::string* text, std::string* error) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = "cannot open '" + path + "'";
    return false;
  }
  char buffer[1 << 16];
  int n;
  while ((n = gzread(f, buffer, sizeof buffer)) > 0) text->append(buffer, n);
  int code = Z_OK;
  const char* message = gzerror(f, &code);
  const bool ok = n == 0 && (code == Z_OK || code == Z_STREAM_END);
  if (!ok) {
    *error = "'" + path + "' is truncated or damaged (" +
             (code == Z_ERRNO ? std::string("read error") : std::string(message)) +
             "): expected a torch.profiler trace (.json or .json.gz)";
  }
  gzclose(f);
  return ok;
}

int64_t Ns(double us) { return std::llround(us * 1000.0); }

// A pid or tid: a number, or (some exporters) a string such as "stream 7".
uint64_t Id(const json& v) {
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number()) return static_cast<uint64_t>(std::llround(v.get<double>()));
  if (v.is_string()) return std::hash<std::string>{}(v.get<std::string>());
  return 0;
}

uint64_t Uint(const json& args, const char* key) {
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return 0;
  return it->is_number_integer() ? static_cast<uint64_t>(it->get<int64_t>())
                                 : static_cast<uint64_t>(std::llround(it->get<double>()));
}

uint8_t CopyKind(std::string_view name) {
  if (name.find("HtoD") != std::string_view::npos) return 1;
  if (name.find("DtoH") != std::string_view::npos) return 2;
  if (name.find("DtoD") != std::string_view::npos) return 8;
  return 0;
}

}  // namespace

bool ReadKineto(const std::string& path, RecordedTrace* out, std::string* error) {
  std::string text;
  if (!Slurp(path, &text, error)) return false;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    *error = "'" + path + "' is not a torch.profiler trace: not JSON (" + e.what() + ")";
    return false;
  }
  text = std::string();
  const json* events = nullptr;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it != doc.end() && it->is_array()) events = &*it;
  } else if (doc.is_array()) {
    events = &doc;  // the bare array form of the trace-event format
  }
  if (events == nullptr) {
    *error = "'" + path + "' is JSON but no torch.profiler trace: it has no traceEvents list";
    return false;
  }
  out->format = "torch.profiler";
  // Records are placed in their launch's process; Kineto's GPU events carry the device as pid.
  std::vector<RecordedGpu> gpu;
  std::unordered_map<uint64_t, int64_t> launch_pid;  // correlation -> pid
  try {
    for (const json& e : *events) {
      if (!e.is_object()) continue;
      auto cat_it = e.find("cat");
      auto ph_it = e.find("ph");
      if (cat_it == e.end() || !cat_it->is_string() || ph_it == e.end() || *ph_it != "X") {
        continue;
      }
      const std::string& cat = cat_it->get_ref<const std::string&>();
      const bool range = cat == "python_function" || cat == "user_annotation";
      const bool api = cat == "cuda_runtime" || cat == "cuda_driver";
      const bool record = cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset";
      if (!range && !api && !record) continue;
      const std::string name = e.value("name", std::string());
      const double ts = e.value("ts", 0.0);
      const double dur = e.value("dur", 0.0);
      static const json kNoArgs = json::object();
      auto args_it = e.find("args");
      const json& args = args_it != e.end() && args_it->is_object() ? *args_it : kNoArgs;
      const int64_t pid = static_cast<int64_t>(Id(e.value("pid", json(0))));
      const uint64_t tid = Id(e.value("tid", json(0)));
      if (range) {
        RecordedRange r;
        if (cat == "python_function") {
          if (name.compare(0, kModulePrefix.size(), kModulePrefix) != 0) continue;
          r.name = name.substr(kModulePrefix.size());
          r.kind = SiteKind::kModule;
        } else {
          r.name = name;
        }
        r.thread = tid;
        r.begin_ns = Ns(ts);
        r.end_ns = Ns(ts + dur);
        out->processes[pid].ranges.push_back(std::move(r));
      } else if (api) {
        if (args.find("correlation") == args.end()) continue;
        RecordedLaunch l;
        l.thread = tid;
        l.begin_ns = Ns(ts);
        l.correlation = Uint(args, "correlation");
        l.graph = name == "cudaGraphLaunch" || name == "cuGraphLaunch";
        l.api = name;
        l.driver = cat == "cuda_driver";
        launch_pid[l.correlation] = pid;
        out->processes[pid].launches.push_back(l);
      } else {
        RecordedGpu r;
        GpuActivity& g = r.activity;
        g.kind = cat == "kernel"       ? GpuOpKind::kKernel
                 : cat == "gpu_memcpy" ? GpuOpKind::kMemcpy
                                       : GpuOpKind::kMemset;
        if (g.kind == GpuOpKind::kKernel) r.name = name;
        if (g.kind == GpuOpKind::kMemcpy) g.copy_kind = CopyKind(name);
        g.begin_ns = Ns(ts);
        g.end_ns = Ns(ts + dur);
        g.device = static_cast<uint32_t>(Uint(args, "device"));
        g.stream = static_cast<uint32_t>(Uint(args, "stream"));
        g.correlation_id = Uint(args, "correlation");
        g.bytes = Uint(args, "bytes");
        gpu.push_back(std::move(r));
      }
    }
  } catch (const json::exception& e) {
    *error = "'" + path + "' is not a torch.profiler trace: " + e.what();
    return false;
  }
  if (gpu.empty()) {
    *error = "'" + path + "' has no GPU records (kernel, gpu_memcpy, gpu_memset events): " +
             "record it with torch.profiler's ProfilerActivity.CUDA";
    return false;
  }
  // Kineto records one process. A record whose launch is not in the trace (launched before
  // the profiler started) goes to the process that launched the others.
  int64_t main_pid = 0;
  size_t most = 0;
  for (const auto& [pid, p] : out->processes) {
    if (p.launches.size() > most) {
      most = p.launches.size();
      main_pid = pid;
    }
  }
  for (RecordedGpu& g : gpu) {
    auto it = launch_pid.find(g.activity.correlation_id);
    out->processes[it != launch_pid.end() ? it->second : main_pid].gpu.push_back(std::move(g));
  }
  out->records = gpu.size();
  // Processes that only hold ranges (a dataloader's) launched nothing: no file for them.
  std::erase_if(out->processes, [](const auto& kv) { return kv.second.gpu.empty(); });
  return true;
}

}  // namespace tokentrace::import

#else  // built without nlohmann-json or zlib (src/import/CMakeLists.txt)

namespace tokentrace::import {

bool ReadKineto(const std::string& path, RecordedTrace*, std::string* error) {
  *error = "cannot read '" + path + "': this tokentrace was built without a JSON reader " +
           "(nlohmann-json and zlib were missing); it imports Nsight Systems exports only";
  return false;
}

}  // namespace tokentrace::import
#endif
