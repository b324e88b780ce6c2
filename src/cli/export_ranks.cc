// `tokentrace export IN... --chrome OUT.json [--tokens A:B]` over the files of several ranks:
// one trace in a registered export format (src/export) with one process per rank, every rank's
// timestamps moved onto the common time axis by its clock anchor (multi/rank_files.h AxisShifts).
//
// Track layout: rank r's calls are pid r + 1 (tid = thread index), its GPU work pid
// kRankGpuPidBase + r * kDevicesPerRank + device (tid = stream).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/export_options.h"
#include "cli/rank_inputs.h"
#include "multi/rank_files.h"

namespace tokentrace::cli {
namespace {

constexpr int64_t kRankGpuPidBase = 1000000000;
constexpr int64_t kDevicesPerRank = 1024;

}  // namespace

int RanksExportCommand(const std::vector<std::string>& args) {
  ExportOptions options;
  if (const int status = ParseExportOptions(args, true, &options); status >= 0) return status;
  const std::vector<std::string>& inputs = options.inputs;
  const uint32_t first = options.first, last = options.last;
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
  ExportFiles files;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const multi::RankFile& r = ranks[i];
    // One engine's processes are named by their role (engine_core, worker) as well.
    const std::string rank =
        (r.role.empty() ? "" : r.role + ", ") + "rank " + std::to_string(r.rank);
    exporters::Tracks tracks;
    tracks.pid = r.rank + 1;
    tracks.gpu_pid_base = kRankGpuPidBase + r.rank * kDevicesPerRank;
    tracks.process_name = rank + " (" + r.host + ", pid " + r.pid + ")";
    tracks.gpu_prefix = rank + " ";
    tracks.shift_ns = shifts[i];
    files.emplace_back(r.reader.get(), std::move(tracks));
  }
  exporters::EventCounts n;
  if (!RunExporter(options, origin, files, &n)) return 1;
  std::printf("wrote %zu ranks: %lld calls and %lld GPU events to %s\n", ranks.size(),
              static_cast<long long>(n.calls), static_cast<long long>(n.gpu),
              options.out_path.c_str());
  return 0;
}

}  // namespace tokentrace::cli
