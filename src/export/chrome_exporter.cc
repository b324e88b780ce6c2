#include "export/chrome_exporter.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/comm_kernels.h"
#include "core/records.h"
#include "core/text.h"

namespace tokentrace::exporters {

const char kChromeHelp[] =
    "Writes a Chrome trace-event file (open it in https://ui.perfetto.dev): module calls on\n"
    "one track per thread, GPU work on one track per (device, stream). Over the files of\n"
    "several ranks (files, a glob or a directory): one process per rank, on one time axis\n"
    "(each file's clock anchor).\n";

namespace {

using text::Fixed;
using text::JsonString;

std::string Metadata(const char* what, int64_t pid, int64_t tid, const std::string& name) {
  return "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + JsonString(name) + "}}";
}

class ChromeExporter : public Exporter {
 public:
  ~ChromeExporter() override {
    if (f_ != nullptr) std::fclose(f_);
  }

  bool Open(const std::string& path, int64_t origin_ns, std::string* error) override {
    path_ = path;
    origin_ns_ = origin_ns;
    f_ = std::fopen(path.c_str(), "w");
    if (f_ == nullptr) {
      *error = "tokentrace: cannot write '" + path + "': " + std::strerror(errno);
      return false;
    }
    std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f_);
    return true;
  }

  bool WriteFile(Reader& reader, uint32_t first, uint32_t last, const Tracks& tracks,
                 EventCounts* counts, std::string* error) override;

  bool Finish(std::string* error) override {
    std::fputs("\n]}\n", f_);
    bool write_failed = std::ferror(f_) != 0;
    write_failed = (std::fclose(f_) != 0) || write_failed;
    f_ = nullptr;
    if (write_failed) {
      *error = "tokentrace: cannot write '" + path_ + "': " + std::strerror(errno);
      return false;
    }
    return true;
  }

 private:
  // Events are comma-separated, one per line.
  void Event(const std::string& body) {
    std::fputs(first_event_ ? "\n" : ",\n", f_);
    std::fputs(body.c_str(), f_);
    first_event_ = false;
  }
  std::string Us(int64_t ns) const {
    return Fixed(static_cast<double>(ns - origin_ns_) / 1000.0, 3);
  }
  static std::string Dur(int64_t ns) { return Fixed(static_cast<double>(ns) / 1000.0, 3); }

  std::string path_;
  FILE* f_ = nullptr;
  int64_t origin_ns_ = 0;
  bool first_event_ = true;
};

bool ChromeExporter::WriteFile(Reader& reader, uint32_t first, uint32_t last, const Tracks& tracks,
                               EventCounts* counts, std::string* error) {
  const std::string pid = std::to_string(tracks.pid);
  const int64_t shift = tracks.shift_ns;
  std::set<uint32_t> threads;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  std::vector<CallEvent> open_calls;  // never closed: drawn up to the last event
  int64_t last_ns = INT64_MIN;
  // A token's slice (its root call) is named by the text it generated, where the file has it.
  std::map<uint32_t, TokenText> texts;
  bool ok = reader.TokenTextsIn(first, last, &texts, error);
  const auto name_of = [&texts](const CallEvent& c) {
    if (!c.is_token) return c.site;
    const auto it = texts.find(c.token);
    if (it == texts.end()) return c.site;
    return c.site + " " +
           (it->second.has_text ? JsonString(it->second.text)
                                : "id " + std::to_string(it->second.id));
  };
  ok = ok && reader.ForEachCall(
                 first, last,
                 [&](const CallEvent& c) {
                   threads.insert(c.thread);
                   last_ns = std::max(last_ns, std::max(c.cpu_begin_ns, c.cpu_end_ns));
                   if (c.cpu_end_ns < 0) {
                     open_calls.push_back(c);
                     return;
                   }
                   ++counts->calls;
                   Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(name_of(c)) +
                         ",\"pid\":" + pid + ",\"tid\":" + std::to_string(c.thread) +
                         ",\"ts\":" + Us(c.cpu_begin_ns + shift) +
                         ",\"dur\":" + Dur(c.cpu_end_ns - c.cpu_begin_ns) +
                         ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
                         ",\"token\":" + std::to_string(c.token) +
                         ",\"call_id\":" + std::to_string(c.id) + "}}");
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
                   Event("{\"ph\":\"X\",\"cat\":\"" + std::string(comm ? "comm" : kind) +
                         "\",\"name\":" + JsonString(k.name.empty() ? kind : k.name) +
                         ",\"pid\":" + std::to_string(tracks.gpu_pid_base + k.device) +
                         ",\"tid\":" + std::to_string(k.stream) +
                         ",\"ts\":" + Us(k.gpu_begin_ns + shift) +
                         ",\"dur\":" + Dur(k.gpu_end_ns - k.gpu_begin_ns) + ",\"args\":{\"site\":" +
                         JsonString(k.call) + ",\"token\":" + std::to_string(k.token) +
                         ",\"correlation_id\":" + std::to_string(k.correlation_id) + "}}");
                 },
                 error);
  for (const CallEvent& c : open_calls) {
    ++counts->calls;
    Event("{\"ph\":\"X\",\"cat\":\"call\",\"name\":" + JsonString(name_of(c)) + ",\"pid\":" + pid +
          ",\"tid\":" + std::to_string(c.thread) + ",\"ts\":" + Us(c.cpu_begin_ns + shift) +
          ",\"dur\":" + Dur(last_ns - c.cpu_begin_ns) +
          ",\"args\":{\"site\":" + JsonString(c.site + ":" + std::to_string(c.k)) +
          ",\"token\":" + std::to_string(c.token) + ",\"open\":true}}");
  }
  Event(Metadata("process_name", tracks.pid, 0, tracks.process_name));
  for (uint32_t t : threads) {
    Event(Metadata("thread_name", tracks.pid, t, "thread " + std::to_string(t)));
  }
  std::set<uint32_t> devices;
  for (auto [device, stream] : streams) {
    if (devices.insert(device).second) {
      Event(Metadata("process_name", tracks.gpu_pid_base + device, 0,
                     tracks.gpu_prefix + "GPU " + std::to_string(device)));
    }
    Event(Metadata("thread_name", tracks.gpu_pid_base + device, stream,
                   "stream " + std::to_string(stream)));
  }
  return ok;
}

}  // namespace

std::unique_ptr<Exporter> MakeChromeExporter() { return std::make_unique<ChromeExporter>(); }

}  // namespace tokentrace::exporters
