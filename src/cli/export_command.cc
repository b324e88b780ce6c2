// `tokentrace export FILE --chrome OUT.json [--tokens A:B]`: one trace file in a registered
// export format (src/export; Chrome trace-event JSON, which Perfetto UI opens).
//
// Track layout: pid = the traced process (meta.pid), tid = thread index -> calls;
// pid = kGpuPidBase + device, tid = stream -> kernels, memcpys, memsets. Timestamps are
// relative to the first exported event.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/export_options.h"
#include "cli/format.h"
#include "store/reader.h"

namespace tokentrace::cli {

namespace {

constexpr int64_t kGpuPidBase = 1000000000;  // above any Linux pid (pid_max <= 2^22)

}  // namespace

int ExportCommand(const std::vector<std::string>& args) {
  ExportOptions options;
  if (const int status = ParseExportOptions(args, false, &options); status >= 0) return status;
  const std::string& file = options.inputs[0];
  const std::string& out_path = options.out_path;
  const uint32_t first = options.first, last = options.last;

  // The JSON is written over OUT: never over a trace (the input itself, or another one).
  struct stat in_st, out_st;
  std::string out_version;
  if (stat(out_path.c_str(), &out_st) == 0 &&
      ((stat(file.c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino) ||
       (ReadMetaValue(out_path, "schema_version", &out_version) && !out_version.empty()))) {
    std::fprintf(stderr,
                 "tokentrace: --%s '%s' is a trace file, which the %s would overwrite; "
                 "name a new %s file\n",
                 options.format->name, out_path.c_str(), options.format->output_noun,
                 options.format->extension);
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

  exporters::Tracks tracks;
  tracks.pid = pid;
  tracks.gpu_pid_base = kGpuPidBase;
  tracks.process_name = "tokentrace pid " + std::to_string(pid);
  exporters::EventCounts n;
  if (!RunExporter(options, origin, {{reader.get(), tracks}}, &n)) return 1;
  std::printf("wrote %lld calls and %lld GPU events to %s\n", static_cast<long long>(n.calls),
              static_cast<long long>(n.gpu), out_path.c_str());
  return 0;
}

}  // namespace tokentrace::cli
