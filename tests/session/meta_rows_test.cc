#include "session/meta_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>

#include "core/launch_meta.h"
#include "store/schema.h"
#include "tokentrace/kinds.h"

namespace tokentrace {
namespace {

std::map<std::string, std::string> AsMap(const MetaRowList& rows) {
  std::map<std::string, std::string> m;
  for (const auto& [key, value] : rows) EXPECT_TRUE(m.emplace(key, value).second) << key;
  return m;
}

SessionFacts Facts() {
  SessionFacts f;
  f.tool_version = "9.8.7";
  f.pid = 4242;
  f.kernel_mode = "sample:4";
  f.kernels_status = "no CUDA work";
  f.kernels_off = KernelsOff::kNoCudaWork;
  f.cupti = "";
  f.token_range = "step.*";
  f.preload = true;
  f.out_path = "/tmp/x.sqlite";
  f.events = 1234;
  f.start_anchor = ClockAnchor{100, 250};
  f.launch.rank = "3";
  f.launch.launch_id = "L1";
  return f;
}

TEST(MetaRowsTest, SayWhatTheSessionIs) {
  const auto m = AsMap(SessionMetaRows(Facts()));
  EXPECT_EQ(m.at("tool_version"), "9.8.7");
  EXPECT_EQ(m.at("pid"), "4242");
  EXPECT_EQ(m.at("kernel_mode"), "sample:4");
  EXPECT_EQ(m.at("kernels_status"), "no CUDA work");
  EXPECT_EQ(m.at("kernels_off"), KernelsOffPhrase(KernelsOff::kNoCudaWork));
  EXPECT_EQ(m.at("token_range"), "step.*");
  EXPECT_EQ(m.at("mode"), "preload");
  EXPECT_EQ(m.at("out_path"), "/tmp/x.sqlite");
  EXPECT_EQ(m.at("events"), "1234");
  EXPECT_EQ(m.at(kMetaAnchorStart), FormatAnchor(ClockAnchor{100, 250}));
  // The launch's rows follow (core/launch_meta.h), each once.
  for (const auto& [key, value] : LaunchMetaRows(Facts().launch)) EXPECT_EQ(m.at(key), value);
}

TEST(MetaRowsTest, AnInProcessSessionSaysSo) {
  SessionFacts f = Facts();
  f.preload = false;
  EXPECT_EQ(AsMap(SessionMetaRows(f)).at("mode"), "in-process");
}

// Every key the writer writes is in the one list of meta keys (kinds.h), which the Python
// layer's hand-overs are checked against too.
TEST(MetaRowsTest, EveryKeyTheWriterWritesIsListed) {
  std::set<std::string> listed;
#define TT_META_(name, text) listed.insert(text);
  TOKENTRACE_META_KEYS(TT_META_)
#undef TT_META_
  SessionFacts facts = Facts();
  facts.launch.local_rank = "1";
  facts.launch.world_size = "4";
  facts.launch.group_rank = "0";
  facts.launch.host = "h";
  facts.launch.launch_id_from = "TORCHELASTIC_RUN_ID";
  for (const auto& [key, value] : SessionMetaRows(facts)) EXPECT_EQ(listed.count(key), 1u) << key;
  for (const char* key : {"schema_version", kMetaSummaries, kMetaTokenBlock, kMetaAnchorLast,
                          kMetaAnchorExit, "exit_signal", "exit_exec", "run_id"}) {
    EXPECT_EQ(listed.count(key), 1u) << key;
  }
}

}  // namespace
}  // namespace tokentrace
