// What a merge of several trace files needs from each file's meta table: who the process was
// in a multi-process launch (rank, local rank, world size, node, host, launch id) and clock
// anchors that put its timestamps on a common axis.
//
// One source of truth for the meta key names: the writers (src/session/meta_rows.cc,
// drainer.cc) and the cross-file readers (src/multi) both use the constants below.
//
// Clock anchors: every timestamp in a file is CLOCK_MONOTONIC of its host (core/clock.h),
// which has an arbitrary origin per boot. An anchor is a pair (trace clock, wall clock) read
// back to back; wall - trace is the offset that maps the file's timestamps onto wall-clock
// time, which hosts keep in step (NTP/PTP). Anchors are taken at start, at every write of the
// background thread (`clock_anchor_last`, so a killed process still has a recent one) and at
// exit. Each value is "<trace_ns> <wall_ns>".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokentrace/tokentrace.h"

namespace tokentrace {

inline constexpr char kMetaRank[] = "rank";
inline constexpr char kMetaLocalRank[] = "local_rank";
inline constexpr char kMetaWorldSize[] = "world_size";
inline constexpr char kMetaGroupRank[] = "group_rank";
inline constexpr char kMetaHost[] = "host";
inline constexpr char kMetaLaunchId[] = "launch_id";
inline constexpr char kMetaLaunchIdFrom[] = "launch_id_from";  // the variable it came from
inline constexpr char kMetaAnchorStart[] = "clock_anchor_start";
inline constexpr char kMetaAnchorLast[] = "clock_anchor_last";
inline constexpr char kMetaAnchorExit[] = TOKENTRACE_META_CLOSED;  // the file was closed

// A process's place in a launch, from the variables torchrun, Open MPI, MPICH/PMI and Slurm
// set (the first one set wins; see launch_meta.cc for the order). Empty when unknown, except
// rank, which is "0" when nothing names it (a single-process job is rank 0).
struct LaunchInfo {
  std::string rank = "0";
  std::string local_rank;
  std::string world_size;
  std::string group_rank;  // node index (torchrun GROUP_RANK, Slurm SLURM_NODEID)
  std::string host;
  std::string launch_id;       // shared by every rank of one launch
  std::string launch_id_from;  // which variable gave launch_id
};

LaunchInfo LaunchFromEnvironment();
std::vector<std::pair<std::string, std::string>> LaunchMetaRows(const LaunchInfo& launch);

// gethostname(), "localhost" when it fails.
std::string HostName();

struct ClockAnchor {
  int64_t trace_ns = 0;  // core/clock.h HostNowNs()
  int64_t wall_ns = 0;   // CLOCK_REALTIME
  int64_t offset_ns() const { return wall_ns - trace_ns; }
};

// Reads both clocks; the wall clock is read between two trace-clock reads and paired with
// their midpoint, so the pair is off by at most half of one clock read.
ClockAnchor TakeClockAnchor();
std::string FormatAnchor(const ClockAnchor& anchor);
// False when `text` is not "<int> <int>".
bool ParseAnchor(const std::string& text, ClockAnchor* anchor);

}  // namespace tokentrace
