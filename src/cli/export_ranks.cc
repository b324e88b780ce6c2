// `tokentrace export IN... --chrome OUT.json [--tokens A:B]` over the files of several ranks:
// one Chrome/Perfetto trace with one process per rank, every rank's timestamps moved onto the
// common time axis by its clock anchor (multi/rank_files.h AxisShifts).
//
// Track layout: rank r's calls are pid r + 1 (tid = thread index), its GPU work pid
// kRankGpuPidBase + r * kDevicesPerRank + device (tid = stream).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/chrome_events.h"
#include "cli/commands.h"
#include "cli/rank_inputs.h"
#include "multi/rank_files.h"

namespace tokentrace::cli {
namespace {

constexpr int64_t kRankGpuPidBase = 1000000000;
constexpr int64_t kDevicesPerRank = 1024;

}  // namespace

int RanksExportCommand(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string out_path;
  uint32_t first = 0, last = UINT32_MAX;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--chrome" && i + 1 < args.size()) {
      out_path = args[++i];
    } else if (a == "--tokens" && i + 1 < args.size()) {
      if (!ParseTokenRange(args[++i], &first, &last)) return 2;
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for export\n%s", a.c_str(),
                   kExportUsage);
      return 2;
    } else {
      inputs.push_back(a);
    }
  }
  if (out_path.empty()) {
    std::fprintf(stderr, "tokentrace: export needs --chrome OUT.json\n%s", kExportUsage);
    return 2;
  }
  std::string error;
  std::vector<multi::RankFile> ranks;
  if (!OpenRankInputs(inputs, &ranks)) return 1;
  const std::vector<int64_t> shifts = multi::AxisShifts(ranks);
  int64_t origin = 0;
  bool any = false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    int64_t ns = 0;
    bool found = false;
    if (!ranks[i].reader->FirstTimestamp(first, last, &ns, &found, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    if (found && (!any || ns + shifts[i] < origin)) origin = ns + shifts[i];
    any = any || found;
  }
  FILE* f = OpenTraceFile(out_path);
  if (f == nullptr) return 1;
  JsonWriter w(f, origin);
  EventCounts n;
  bool ok = true;
  for (size_t i = 0; ok && i < ranks.size(); ++i) {
    const multi::RankFile& r = ranks[i];
    const std::string rank = "rank " + std::to_string(r.rank);
    Tracks tracks;
    tracks.pid = r.rank + 1;
    tracks.gpu_pid_base = kRankGpuPidBase + r.rank * kDevicesPerRank;
    tracks.process_name = rank + " (" + r.host + ", pid " + r.pid + ")";
    tracks.gpu_prefix = rank + " ";
    tracks.shift_ns = shifts[i];
    ok = WriteFileEvents(*r.reader, first, last, tracks, w, &n, &error);
  }
  if (!CloseTraceFile(f, out_path, ok, error)) return 1;
  std::printf("wrote %zu ranks: %lld calls and %lld GPU events to %s\n", ranks.size(),
              static_cast<long long>(n.calls), static_cast<long long>(n.gpu), out_path.c_str());
  return 0;
}

}  // namespace tokentrace::cli
