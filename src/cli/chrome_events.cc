#include "cli/chrome_events.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "core/comm_kernels.h"
#include "core/records.h"

namespace tokentrace::cli {
namespace {

std::string Metadata(const char* what, int64_t pid, int64_t tid, const std::string& name) {
  return "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + JsonString(name) + "}}";
}

}  // namespace

bool WriteFileEvents(Reader& reader, uint32_t first, uint32_t last, const Tracks& tracks,
                     JsonWriter& w, EventCounts* counts, std::string* error) {
  const std::string pid = std::to_string(tracks.pid);
  const int64_t shift = tracks.shift_ns;
  std::set<uint32_t> threads;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  std::vector<CallEvent> open_calls;  // never closed: drawn up to the last event
  int64_t last_ns = INT64_MIN;
  bool ok = reader.ForEachCall(
      first, last,
      [&](const CallEvent& c) {
        threads.insert(c.thread);
        last_ns = std::max(last_ns, std::max(c.cpu_begin_ns, c.cpu_end_ns));
        if (c.cpu_end_ns < 0) {
          open_calls.push_back(c);
          return;
        }
        ++counts->calls;
        w.Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(c.site) +
                ",\"pid\":" + pid + ",\"tid\":" + std::to_string(c.thread) + ",\"ts\":" +
                w.Us(c.cpu_begin_ns + shift) + ",\"dur\":" + w.Dur(c.cpu_end_ns - c.cpu_begin_ns) +
                ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
                ",\"token\":" + std::to_string(c.token) + ",\"call_id\":" + std::to_string(c.id) +
                "}}");
      },
      error);
  ok = ok && reader.ForEachKernel(
                 first, last,
                 [&](const KernelEvent& k) {
                   streams.insert({k.device, k.stream});
                   last_ns = std::max(last_ns, k.gpu_end_ns);
                   ++counts->gpu;
                   const char* kind = GpuOpKindName(static_cast<GpuOpKind>(k.kind));
                   // NCCL's kernels are communication (waiting for peers), not work.
                   const bool comm =
                       k.kind == static_cast<int>(GpuOpKind::kKernel) && IsCommKernel(k.name);
                   w.Event("{\"ph\":\"X\",\"cat\":\"" + std::string(comm ? "comm" : kind) +
                           "\",\"name\":" + JsonString(k.name.empty() ? kind : k.name) +
                           ",\"pid\":" + std::to_string(tracks.gpu_pid_base + k.device) +
                           ",\"tid\":" + std::to_string(k.stream) +
                           ",\"ts\":" + w.Us(k.gpu_begin_ns + shift) +
                           ",\"dur\":" + w.Dur(k.gpu_end_ns - k.gpu_begin_ns) +
                           ",\"args\":{\"site\":" + JsonString(k.call) +
                           ",\"token\":" + std::to_string(k.token) +
                           ",\"correlation_id\":" + std::to_string(k.correlation_id) + "}}");
                 },
                 error);
  for (const CallEvent& c : open_calls) {
    ++counts->calls;
    w.Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(c.site) + ",\"pid\":" + pid +
            ",\"tid\":" + std::to_string(c.thread) + ",\"ts\":" + w.Us(c.cpu_begin_ns + shift) +
            ",\"dur\":" + w.Dur(last_ns - c.cpu_begin_ns) +
            ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
            ",\"token\":" + std::to_string(c.token) + ",\"open\":true}}");
  }
  w.Event(Metadata("process_name", tracks.pid, 0, tracks.process_name));
  for (uint32_t t : threads) {
    w.Event(Metadata("thread_name", tracks.pid, t, "thread " + std::to_string(t)));
  }
  std::set<uint32_t> devices;
  for (auto [device, stream] : streams) {
    if (devices.insert(device).second) {
      w.Event(Metadata("process_name", tracks.gpu_pid_base + device, 0,
                       tracks.gpu_prefix + "GPU " + std::to_string(device)));
    }
    w.Event(Metadata("thread_name", tracks.gpu_pid_base + device, stream,
                     "stream " + std::to_string(stream)));
  }
  return ok;
}

FILE* OpenTraceFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "tokentrace: cannot write '%s': %s\n", path.c_str(), std::strerror(errno));
    return nullptr;
  }
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
  return f;
}

bool CloseTraceFile(FILE* f, const std::string& path, bool events_ok, const std::string& error) {
  std::fputs("\n]}\n", f);
  bool write_failed = std::ferror(f) != 0;
  write_failed = (std::fclose(f) != 0) || write_failed;
  if (!events_ok) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return false;
  }
  if (write_failed) {
    std::fprintf(stderr, "tokentrace: cannot write '%s': %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

bool ParseTokenRange(const std::string& s, uint32_t* first, uint32_t* last) {
  size_t colon = s.find(':');
  if (colon != std::string::npos && ParseU32(s.substr(0, colon), first) &&
      ParseU32(s.substr(colon + 1), last) && *first <= *last) {
    return true;
  }
  std::fprintf(stderr,
               "tokentrace: --tokens '%s' is not a token range (accepted: A:B with A <= B, "
               "e.g. 2:10)\n",
               s.c_str());
  return false;
}

}  // namespace tokentrace::cli
