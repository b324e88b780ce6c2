#include "session/meta_rows.h"

namespace tokentrace {

MetaRowList SessionMetaRows(const SessionFacts& facts) {
  MetaRowList rows = {{"tool_version", facts.tool_version},
                      {"pid", std::to_string(facts.pid)},
                      {"kernel_mode", facts.kernel_mode},
                      {"kernels_status", facts.kernels_status},
                      {"kernels_off", KernelsOffPhrase(facts.kernels_off)},
                      {"cupti", facts.cupti},
                      {"token_range", facts.token_range},
                      {"mode", facts.preload ? "preload" : "in-process"},
                      {"out_path", facts.out_path},
                      {"events", std::to_string(facts.events)},
                      {kMetaAnchorStart, FormatAnchor(facts.start_anchor)}};
  for (auto& row : LaunchMetaRows(facts.launch)) rows.push_back(std::move(row));
  return rows;
}

}  // namespace tokentrace
