// The input step of report / export / merge over several rank files: resolve the arguments,
// open and check the files, print the warnings. Errors are printed as one line.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "multi/rank_files.h"

namespace tokentrace::cli {

inline bool OpenRankInputs(const std::vector<std::string>& inputs,
                           std::vector<multi::RankFile>* ranks) {
  std::string error;
  std::vector<std::string> files, warnings;
  if (!multi::ResolveInputs(inputs, &files, &error) ||
      !multi::OpenRankFiles(files, false, ranks, &warnings, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return false;
  }
  for (const std::string& w : warnings) std::fprintf(stderr, "%s\n", w.c_str());
  return true;
}

}  // namespace tokentrace::cli
