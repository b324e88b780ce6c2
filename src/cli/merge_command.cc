// `tokentrace merge OUT IN...`: the rank files of one launch in one SQLite file (multi/merge.h
// describes its layout; docs/ranks.md has the queries).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/rank_inputs.h"
#include "multi/merge.h"

namespace tokentrace::cli {

const char kMergeUsage[] =
    "usage: tokentrace merge OUT IN...\n"
    "\n"
    "Copies the trace files of the ranks of one launch (files, globs or directories of\n"
    "*.sqlite files) into OUT, one SQLite file in which every table has a `rank` column.\n"
    "Added: ranks (one row per input: host, pid, whether it exited, its clock shift, its role)\n"
    "and rank_tokens (each rank's token times, also on the common time axis). The files of one\n"
    "serving engine's processes (a vLLM engine core and its workers: meta role) are merged the\n"
    "same way, numbered 0.. engine core first; ranks.role says which is which.\n";

int MergeCommand(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kMergeUsage, stdout);
      return 0;
    }
    if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "tokentrace: unexpected option '%s' for merge\n%s", a.c_str(),
                   kMergeUsage);
      return 2;
    }
    positional.push_back(a);
  }
  if (positional.size() < 2) {
    std::fprintf(stderr, "tokentrace: merge needs OUT and at least one IN\n%s", kMergeUsage);
    return 2;
  }
  const std::string out = positional.front();
  positional.erase(positional.begin());
  std::string error;
  std::vector<multi::RankFile> ranks;
  if (!OpenRankInputs(positional, &ranks)) return 1;
  if (!multi::MergeFiles(ranks, out, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::printf("merged %zu rank file(s) of launch '%s' into %s\n", ranks.size(),
              ranks.front().launch_id.c_str(), out.c_str());
  return 0;
}

}  // namespace tokentrace::cli
