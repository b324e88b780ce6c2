// `tokentrace export FILE --chrome OUT.json [--tokens A:B]`: Chrome trace-event JSON, which
// Perfetto UI and chrome://tracing open.
//
// Track layout:
//   pid = the traced process (meta.pid), tid = thread index  -> calls, nested by time
//   pid = kGpuPidBase + device,          tid = stream        -> kernels, memcpys, memsets
// Names come from "M" (metadata) events. Timestamps are microseconds relative to the first
// exported event. Rows are streamed from SQLite to the file, never held in memory.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/records.h"
#include "store/reader.h"

namespace tokentrace::cli {

const char kExportUsage[] =
    "usage: tokentrace export FILE --chrome OUT.json [--tokens A:B]\n"
    "\n"
    "Writes a Chrome trace-event file (open it in https://ui.perfetto.dev): module calls on\n"
    "one track per thread, GPU work on one track per (device, stream).\n"
    "  --tokens A:B   only tokens A..B (inclusive, 1 = prefill)\n";

namespace {

constexpr int64_t kGpuPidBase = 1000000000;  // above any Linux pid (pid_max <= 2^22)

class JsonWriter {
 public:
  JsonWriter(FILE* f, int64_t origin_ns) : f_(f), origin_ns_(origin_ns) {}
  void Event(const std::string& body) {
    std::fputs(first_ ? "\n" : ",\n", f_);
    std::fputs(body.c_str(), f_);
    first_ = false;
  }
  std::string Us(int64_t ns) const {
    return Fixed(static_cast<double>(ns - origin_ns_) / 1000.0, 3);
  }
  static std::string Dur(int64_t ns) { return Fixed(static_cast<double>(ns) / 1000.0, 3); }

 private:
  FILE* f_;
  int64_t origin_ns_;
  bool first_ = true;
};

std::string Metadata(const char* what, int64_t pid, int64_t tid, const std::string& name) {
  return "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + JsonString(name) + "}}";
}

bool ParseTokens(const std::string& s, uint32_t* first, uint32_t* last) {
  size_t colon = s.find(':');
  return colon != std::string::npos && ParseU32(s.substr(0, colon), first) &&
         ParseU32(s.substr(colon + 1), last) && *first <= *last;
}

}  // namespace

int ExportCommand(const std::vector<std::string>& args) {
  std::string file, out_path;
  uint32_t first = 0, last = UINT32_MAX;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kExportUsage, stdout);
      return 0;
    }
    auto value = [&](const std::string& flag, std::string* v) {
      if (a == flag && i + 1 < args.size()) {
        *v = args[++i];
        return true;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        *v = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string tokens;
    if (value("--chrome", &out_path)) continue;
    if (value("--tokens", &tokens)) {
      if (!ParseTokens(tokens, &first, &last)) {
        std::fprintf(stderr, "tokentrace: --tokens '%s' is not a token range (accepted: A:B "
                             "with A <= B, e.g. 2:10)\n", tokens.c_str());
        return 2;
      }
      continue;
    }
    if (a.rfind("-", 0) == 0 || !file.empty()) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for export\n%s", a.c_str(),
                   kExportUsage);
      return 2;
    }
    file = a;
  }
  if (file.empty() || out_path.empty()) {
    std::fprintf(stderr, "tokentrace: export needs a trace FILE and --chrome OUT.json\n%s",
                 kExportUsage);
    return 2;
  }

  // The JSON is written over OUT: never over a trace (the input itself, or another one).
  struct stat in_st, out_st;
  std::string out_version;
  if (stat(out_path.c_str(), &out_st) == 0 &&
      ((stat(file.c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino) ||
       (ReadMetaValue(out_path, "schema_version", &out_version) && !out_version.empty()))) {
    std::fprintf(stderr,
                 "tokentrace: --chrome '%s' is a trace file, which the JSON would overwrite; "
                 "name a new .json file\n",
                 out_path.c_str());
    return 2;
  }

  std::string error;
  auto reader = Reader::Open(file, &error);
  std::vector<std::pair<std::string, std::string>> meta;
  int64_t origin = 0;
  bool found = false;
  if (reader == nullptr || !reader->Meta(&meta, &error) ||
      !reader->FirstTimestamp(first, last, &origin, &found, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  int64_t pid = 1;
  for (const auto& [k, v] : meta) {
    uint32_t p = 0;
    if (k == "pid" && ParseU32(v, &p) && p > 0) pid = p;
  }

  FILE* f = std::fopen(out_path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "tokentrace: cannot write '%s': %s\n", out_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
  JsonWriter w(f, origin);
  std::set<uint32_t> threads;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  std::vector<CallEvent> open_calls;  // never closed: drawn up to the last event
  int64_t last_ns = origin;
  int64_t n_calls = 0, n_gpu = 0;

  bool ok = reader->ForEachCall(first, last, [&](const CallEvent& c) {
    threads.insert(c.thread);
    last_ns = std::max(last_ns, std::max(c.cpu_begin_ns, c.cpu_end_ns));
    if (c.cpu_end_ns < 0) {
      open_calls.push_back(c);
      return;
    }
    ++n_calls;
    w.Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(c.site) +
            ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(c.thread) +
            ",\"ts\":" + w.Us(c.cpu_begin_ns) + ",\"dur\":" + w.Dur(c.cpu_end_ns - c.cpu_begin_ns) +
            ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
            ",\"token\":" + std::to_string(c.token) + ",\"call_id\":" + std::to_string(c.id) + "}}");
  }, &error);
  ok = ok && reader->ForEachKernel(first, last, [&](const KernelEvent& k) {
    streams.insert({k.device, k.stream});
    last_ns = std::max(last_ns, k.gpu_end_ns);
    ++n_gpu;
    const char* kind = GpuOpKindName(static_cast<GpuOpKind>(k.kind));
    w.Event("{\"ph\":\"X\",\"cat\":\"" + std::string(kind) + "\",\"name\":" +
            JsonString(k.name.empty() ? kind : k.name) + ",\"pid\":" +
            std::to_string(kGpuPidBase + k.device) + ",\"tid\":" + std::to_string(k.stream) +
            ",\"ts\":" + w.Us(k.gpu_begin_ns) + ",\"dur\":" + w.Dur(k.gpu_end_ns - k.gpu_begin_ns) +
            ",\"args\":{\"site\":" + JsonString(k.call) + ",\"token\":" + std::to_string(k.token) +
            ",\"correlation_id\":" + std::to_string(k.correlation_id) + "}}");
  }, &error);
  for (const CallEvent& c : open_calls) {
    ++n_calls;
    w.Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(c.site) + ",\"pid\":" +
            std::to_string(pid) + ",\"tid\":" + std::to_string(c.thread) + ",\"ts\":" +
            w.Us(c.cpu_begin_ns) + ",\"dur\":" + w.Dur(last_ns - c.cpu_begin_ns) +
            ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
            ",\"token\":" + std::to_string(c.token) + ",\"open\":true}}");
  }
  w.Event(Metadata("process_name", pid, 0, "tokentrace pid " + std::to_string(pid)));
  for (uint32_t t : threads) w.Event(Metadata("thread_name", pid, t, "thread " + std::to_string(t)));
  std::set<uint32_t> devices;
  for (auto [device, stream] : streams) {
    if (devices.insert(device).second) {
      w.Event(Metadata("process_name", kGpuPidBase + device, 0, "GPU " + std::to_string(device)));
    }
    w.Event(Metadata("thread_name", kGpuPidBase + device, stream,
                     "stream " + std::to_string(stream)));
  }
  std::fputs("\n]}\n", f);
  bool write_failed = std::ferror(f) != 0;
  write_failed = (std::fclose(f) != 0) || write_failed;
  if (!ok) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (write_failed) {
    std::fprintf(stderr, "tokentrace: cannot write '%s': %s\n", out_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::printf("wrote %lld calls and %lld GPU events to %s\n", static_cast<long long>(n_calls),
              static_cast<long long>(n_gpu), out_path.c_str());
  return 0;
}

}  // namespace tokentrace::cli
