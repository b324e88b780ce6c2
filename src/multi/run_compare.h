// `tokentrace report --runs A B ...`: two or more runs of the same job (before and after a
// change) compared site by site, prefill (token 1) and decode (tokens >= 2) apart.
//
// Per file, SQLite sums each site's inclusive host time and its children's by phase (two
// grouped scans of calls), so memory holds sites x runs, never calls. Self time = inclusive
// minus children's; shown per token of the phase (prefill: 1 token; decode: the run's number
// of decode tokens), so runs of different lengths compare.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "store/reader.h"

namespace tokentrace::multi {

struct PhaseTimes {
  int64_t prefill_ns = 0;  // sum over the phase's tokens
  int64_t decode_ns = 0;
};

struct RunProfile {
  std::string path;
  int64_t decode_tokens = 0;  // closed token calls after token 1
  bool has_prefill = false;
  PhaseTimes token;                        // token-call time
  std::map<std::string, PhaseTimes> self;  // site -> self time
};

bool ProfileRun(Reader& reader, RunProfile* out, std::string* error);

}  // namespace tokentrace::multi
