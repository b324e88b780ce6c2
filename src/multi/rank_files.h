// The trace files of the ranks of one multi-process launch, opened and checked together.
//
// Inputs are files, globs (expanded here when the shell did not) or directories (their
// *.sqlite files). Every check yields one line that names the file(s) and what is accepted:
// a file that is not a trace, an empty directory, files of different launches (meta
// launch_id), two files claiming the same rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/launch_meta.h"
#include "store/reader.h"

namespace tokentrace::multi {

struct RankFile {
  std::string path;
  // The file's rank; for one serving engine's processes (meta role), whose ranks repeat (an
  // engine core and its worker both say 0), its place among them: see OpenRankFiles.
  int64_t rank = 0;
  std::string role;  // meta role (engine_core, worker, ...); empty for a plain rank's file
  std::string host;
  std::string launch_id;
  std::string world_size;
  std::string pid;
  bool has_anchor = false;
  ClockAnchor anchor;   // the start anchor (else the last one)
  bool exited = false;  // wrote its exit record (clock_anchor_exit); false: killed or running
  std::string exit_signal;
  std::unique_ptr<Reader> reader;
};

// Expands `inputs` into trace file paths, sorted and without repeats. Errors: a pattern that
// matches nothing, a directory without *.sqlite files, a path that does not exist.
bool ResolveInputs(const std::vector<std::string>& inputs, std::vector<std::string>* files,
                   std::string* error);

// Opens every file, reads its meta and checks that they form one launch with distinct ranks
// (sorted by rank on return). The processes of one serving engine (every file has a meta role)
// may repeat a rank: they are then numbered 0.. in the order (role: engine core first, rank,
// pid), and `role` says which is which. `allow_mixed_launches` skips the launch check (report
// --runs). Non-fatal findings (a file without clock anchors or rank meta) go to *warnings.
bool OpenRankFiles(const std::vector<std::string>& files, bool allow_mixed_launches,
                   std::vector<RankFile>* out, std::vector<std::string>* warnings,
                   std::string* error);

// Nanoseconds to add to a file's timestamps to put it on the common axis: its anchor's
// wall-clock offset minus the smallest such offset of the set (so the axis starts near the
// earliest file's clock). 0 for a file without an anchor.
std::vector<int64_t> AxisShifts(const std::vector<RankFile>& files);

}  // namespace tokentrace::multi
