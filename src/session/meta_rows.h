// The meta rows a session writes about itself: at the first write, and again, with the final
// kernels status, when it stops. Built from plain facts so that what the file says is tested
// without a process to describe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels_off.h"
#include "core/launch_meta.h"

namespace tokentrace {

using MetaRowList = std::vector<std::pair<std::string, std::string>>;

struct SessionFacts {
  std::string tool_version;
  long pid = 0;
  std::string kernel_mode;     // KernelMode::ToString()
  std::string kernels_status;  // why kernels are off ("" when on)
  KernelsOff kernels_off = KernelsOff::kNo;
  std::string cupti;  // cupti::Describe()
  std::string token_range;
  bool preload = false;
  std::string out_path;
  // Events the job's threads produced (recorded, dropped, or left at a signal stop's
  // deadline): the base of loss shares.
  uint64_t events = 0;
  ClockAnchor start_anchor;
  LaunchInfo launch;
};

MetaRowList SessionMetaRows(const SessionFacts& facts);

}  // namespace tokentrace
