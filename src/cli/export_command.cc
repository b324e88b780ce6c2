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
#include <string>
#include <utility>
#include <vector>

#include "cli/chrome_events.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "store/reader.h"

namespace tokentrace::cli {

const char kExportUsage[] =
    "usage: tokentrace export FILE --chrome OUT.json [--tokens A:B]\n"
    "       tokentrace export IN... --chrome OUT.json [--tokens A:B]\n"
    "\n"
    "Writes a Chrome trace-event file (open it in https://ui.perfetto.dev): module calls on\n"
    "one track per thread, GPU work on one track per (device, stream). Over the files of\n"
    "several ranks (files, a glob or a directory): one process per rank, on one time axis\n"
    "(each file's clock anchor).\n"
    "  --tokens A:B   only tokens A..B (inclusive, 1 = prefill)\n";

namespace {

constexpr int64_t kGpuPidBase = 1000000000;  // above any Linux pid (pid_max <= 2^22)

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
      if (!ParseTokenRange(tokens, &first, &last)) return 2;
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

  FILE* f = OpenTraceFile(out_path);
  if (f == nullptr) return 1;
  JsonWriter w(f, origin);
  Tracks tracks;
  tracks.pid = pid;
  tracks.gpu_pid_base = kGpuPidBase;
  tracks.process_name = "tokentrace pid " + std::to_string(pid);
  EventCounts n;
  const bool ok = WriteFileEvents(*reader, first, last, tracks, w, &n, &error);
  if (!CloseTraceFile(f, out_path, ok, error)) return 1;
  std::printf("wrote %lld calls and %lld GPU events to %s\n", static_cast<long long>(n.calls),
              static_cast<long long>(n.gpu), out_path.c_str());
  return 0;
}

}  // namespace tokentrace::cli
