// The Chrome trace-event JSON exporter, which Perfetto UI (https://ui.perfetto.dev) and
// chrome://tracing open.
//
// Track layout (exporter.h Tracks):
//   pid = tracks.pid,                          tid = thread index -> calls, nested by time
//   pid = tracks.gpu_pid_base + device,        tid = stream       -> kernels, memcpys, memsets
// Names come from "M" (metadata) events, written after each file's events. Timestamps are
// microseconds (3 decimals) relative to the origin given to Open.
#pragma once

#include <memory>

#include "export/exporter.h"

namespace tokentrace::exporters {

extern const char kChromeHelp[];
std::unique_ptr<Exporter> MakeChromeExporter();

}  // namespace tokentrace::exporters
