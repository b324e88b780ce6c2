// `tokentrace merge`: the rank files of one launch copied into one SQLite file that plain SQL
// can query across ranks.
//
// Layout of the merged file: every table of the inputs, with a leading `rank` column; a row's
// key is (rank, its id), so call ids stay unique across ranks (calls_key). Added:
//   ranks(rank, path, host, launch_id, pid, exited, shift_ns): one row per input; shift_ns
//     puts a rank's timestamps on the common axis (rank_files.h AxisShifts).
//   rank_tokens: per rank and token, the token call's begin/end, on the rank's own clock and
//     on the common axis (axis_begin_ns, axis_end_ns).
// Tables are copied as the inputs define them, so a newer schema merges as long as every input
// has the same columns.
#pragma once

#include <string>
#include <vector>

#include "multi/rank_files.h"

namespace tokentrace::multi {

// Writes `out` (replacing it). False with a one-line message when an input cannot be copied
// (different columns in one table, unreadable file) or `out` cannot be written.
bool MergeFiles(const std::vector<RankFile>& files, const std::string& out, std::string* error);

}  // namespace tokentrace::multi
