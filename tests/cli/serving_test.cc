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

// The engine core's requests: A queued at 0 and scheduled at 2 ms, first token at 10 ms,
// finished (length) at 40 ms after 4 output tokens; B queued at 1 ms, scheduled at 12 ms, first
// token at 30 ms, aborted at 35 ms after 1 token; C still running, never scheduled.
std::vector<RequestEventRow> Events() {
  auto ms = [](double v) { return static_cast<int64_t>(v * 1e6); };
  RequestEventRow a{"A", 5, ms(0), ms(2), ms(10), ms(40), 1, 1, 4, "length", 4, 4};
  RequestEventRow b{"B", 6, ms(1), ms(12), ms(30), ms(35), 2, 3, 4, "abort", 5, 1};
  RequestEventRow c{"C", 7, ms(3), -1, -1, -1, -1, -1, -1, "", 6, 0};
  return {a, b, c};
}

TEST(ServingTest, EngineCoreRequestsQueueFirstTokenAndFinish) {
  CoreSteps steps{{5, 6, 7, 8}, {0.5, 0.5, 1, 1}, {0.25, 0.25, 0.25, 0.5}, {}, 1};
  const std::string text = EngineCoreSection(Events(), steps, nullptr);
  EXPECT_NE(text.find("steps: 4 (1 scheduled nothing)"), std::string::npos) << text;
  EXPECT_NE(text.find("requests: 3; finished: abort 1, length 1; still running at the end: 1"),
            std::string::npos)
      << text;
  // A: queue 2, first token 10 (from queued), (40 - 10) / 3 per output token.
  EXPECT_EQ(RowOf(text, "A"),
            (std::vector<std::string>{"A", "4", "4", "2.000", "10.000", "10.000", "length"}))
      << text;
  // B: one output token, so no per-output-token time.
  EXPECT_EQ(RowOf(text, "B"),
            (std::vector<std::string>{"B", "5", "1", "11.000", "29.000", "-", "abort"}))
      << text;
  EXPECT_EQ(RowOf(text, "C"), (std::vector<std::string>{"C", "6", "0", "-", "-", "-", "running"}))
      << text;
}

TEST(ServingTest, EngineCoreRequestsWithTheWorkersStepsAndGpuTime) {
  const std::vector<StepRequestRow> rows = {
      {1, "A", 4, 0, 0}, {2, "A", 0, 1, 4}, {2, "B", 5, 0, 0}};
  std::map<uint32_t, StepTime> times = Steps(2);
  times[2].gpu_busy_ns = 6'000'000;  // step 2: A 1 token, B 5 tokens
  const auto worker = WorkerRequests(rows, times);
  const std::string text = EngineCoreSection(Events(), CoreSteps{}, &worker, true);
  EXPECT_EQ(RowOf(text, "A").size(), 9u) << text;
  EXPECT_EQ(RowOf(text, "A")[7], "2") << text;      // its steps in the worker
  EXPECT_EQ(RowOf(text, "A")[8], "1.000") << text;  // 1/6 of step 2's 6 ms
  EXPECT_EQ(RowOf(text, "B")[8], "5.000") << text;
  EXPECT_EQ(RowOf(text, "C")[7], "-") << text;  // not in the worker's file
  // without kernels in the worker's file: its steps, no GPU column
  EXPECT_EQ(RowOf(EngineCoreSection(Events(), CoreSteps{}, &worker, false), "A").size(), 8u);
}

TEST(ServingTest, FrontEndRequestsFirstTokenAndFinishWithoutQueue) {
  // The same lives seen by the front end: no scheduling, so no queue column; the engine core's
  // rows are not its.
  std::vector<RequestEventRow> events = Events();
  for (RequestEventRow& r : events) r.role = "front_end";
  events.push_back({"D", 1, 0, 1, 2, 3, 1, 1, 1, "stop", 1, 1});  // an engine core's row
  CoreSteps steps;
  steps.front_ms = {0.5, 0.25};
  const std::string text = FrontEndSection(events, steps);
  EXPECT_NE(text.find("steps: 2; output processing ms per step: p50 0.250"), std::string::npos)
      << text;
  EXPECT_NE(text.find("requests: 3; finished: abort 1, length 1"), std::string::npos) << text;
  EXPECT_EQ(RowOf(text, "A"),
            (std::vector<std::string>{"A", "4", "4", "10.000", "10.000", "length"}))
      << text;
  EXPECT_EQ(RowOf(text, "D"), std::vector<std::string>{}) << text;
  EXPECT_EQ(EngineCoreSection(events, CoreSteps{}, nullptr).find("\n    A "), std::string::npos);
}

TEST(ServingTest, NoEngineCoreNoSection) {
  EXPECT_EQ(EngineCoreSection({}, CoreSteps{}, nullptr), "");
}

// The edits of served requests: per rule the requests it edited (steps and rows each), a rule
// that edited none, a list cut after five, and why the rows could not be read.
TEST(ServingTest, EditsSectionSaysWhichRequestsEachRuleEdited) {
  ServedEdits served;
  served.rules = {0, 1, 2};
  served.requests = 8;
  served.edits = {{0, "0-a", 17, 21}, {0, "2-c", 16, 20}};
  for (int i = 0; i < 7; ++i) served.edits.push_back({2, "r" + std::to_string(i), 1, 1});
  const std::string text = EditsSection(served);
  EXPECT_NE(text.find("  rule 0: 2 of 8 requests, 33 steps, 41 rows: 0-a (17 steps, 21 rows), "
                      "2-c (16 steps, 20 rows)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  rule 1: no request (of 8)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("r4 (1 steps, 1 rows) and 2 more\n"), std::string::npos) << text;
  EXPECT_EQ(EditsSection(ServedEdits{}), "");
  ServedEdits unread;
  unread.unread = "this SQLite has no JSON functions (no such function: json_each)";
  EXPECT_NE(EditsSection(unread).find("not read: this SQLite has no JSON"), std::string::npos);
}

}  // namespace
}  // namespace tokentrace::cli
