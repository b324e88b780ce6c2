// The serving section of the report, from hand-built step rows and step times: steps by kind,
// per-step figures, each request's first token and per-output-token times and its GPU share.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/serving_report.h"

namespace tokentrace::cli {
namespace {

// A's prompt of 4 in step 1; B's prompt of 5 in two chunks (steps 2 and 3); decodes after.
// Step k spans [10k, 10k + 8) ms; step 4 has 8 ms of GPU time.
std::vector<StepRequestRow> Rows() {
  return {{1, "A", 4, 0, 0}, {2, "A", 0, 1, 4}, {2, "B", 3, 0, 0},
          {3, "A", 0, 1, 5}, {3, "B", 2, 0, 3}, {4, "B", 0, 1, 5}};
}

std::map<uint32_t, StepTime> Steps(int n) {
  std::map<uint32_t, StepTime> steps;
  for (int k = 1; k <= n; ++k) {
    steps[k] = {k * 10'000'000LL, k * 10'000'000LL + 8'000'000LL, k == 4 ? 8'000'000 : 0};
  }
  return steps;
}

TEST(ServingTest, StepsByKindAndPerStepFigures) {
  const std::string text = ServingSection(Rows(), Steps(5), false);
  EXPECT_NE(text.find("steps with requests: 4 (prefill-only 1, decode-only 1, mixed 2); 1 "
                      "without (left out below)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("requests: 2; tokens computed: prefill 9, decode 3"), std::string::npos)
      << text;
  // tokens per step 4, 4, 3, 1: nearest-rank p50 3, max 4
  EXPECT_NE(text.find("tokens per step: p50 3.000, p90 4.000, max 4.000"), std::string::npos)
      << text;
}

// The words of the request table's row of `request`.
std::vector<std::string> RowOf(const std::string& text, const std::string& request) {
  const size_t at = text.find("\n    " + request + " ");
  if (at == std::string::npos) return {};
  std::istringstream line(text.substr(at + 1, text.find('\n', at + 1) - at - 1));
  std::vector<std::string> words;
  for (std::string w; line >> w;) words.push_back(w);
  return words;
}

TEST(ServingTest, FirstTokenIsTheEndOfTheStepThatFinishedThePrompt) {
  const std::string text = ServingSection(Rows(), Steps(5), false);
  // A: first step 1 (begins at 10 ms), first token at its end (18 ms): 8 ms; then steps 2, 3
  // end at 28 and 38 ms: 10 ms per output token. B: begins at 20 ms, its prompt ends in step
  // 3 (38 ms): 18 ms; step 4 ends at 48 ms: 10 ms.
  EXPECT_EQ(RowOf(text, "A"), (std::vector<std::string>{"A", "3", "4", "2", "8.000", "10.000"}))
      << text;
  EXPECT_EQ(RowOf(text, "B"), (std::vector<std::string>{"B", "3", "5", "1", "18.000", "10.000"}))
      << text;
}

TEST(ServingTest, AStepsGpuTimeIsSharedByTokens) {
  std::vector<StepRequestRow> rows = Rows();
  rows.push_back({4, "A", 0, 3, 6});  // step 4: B 1 token, A 3 tokens of its 8 ms
  const std::string text = ServingSection(rows, Steps(4), true);
  EXPECT_NE(text.find("gpu ms (shared)"), std::string::npos) << text;
  EXPECT_EQ(RowOf(text, "A").back(), "6.000") << text;  // A: 3/4 of step 4's 8 ms
  EXPECT_EQ(RowOf(text, "B").back(), "2.000") << text;  // B: 1/4
}

TEST(ServingTest, NoRowsNoSection) { EXPECT_EQ(ServingSection({}, Steps(3), true), ""); }

}  // namespace
}  // namespace tokentrace::cli
