#include "core/config.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tokentrace {
namespace {

TEST(KernelModeTest, ParsesEveryMode) {
  std::string error;
  EXPECT_EQ(ParseKernelMode("off", "X", &error)->kind, KernelMode::kOff);
  EXPECT_EQ(ParseKernelMode("summary", "X", &error)->kind, KernelMode::kSummary);
  EXPECT_EQ(ParseKernelMode("full", "X", &error)->kind, KernelMode::kFull);
  auto sample = ParseKernelMode("sample:16", "X", &error);
  ASSERT_TRUE(sample);
  EXPECT_EQ(sample->sample_every, 16u);
  EXPECT_EQ(sample->ToString(), "sample:16");
}

TEST(KernelModeTest, RejectsBadModesNamingTheVariable) {
  for (const char* bad : {"fast", "sample:", "sample:0", "sample:x", "FULL", ""}) {
    std::string error;
    EXPECT_FALSE(ParseKernelMode(bad, "TOKENTRACE_KERNELS", &error)) << bad;
    EXPECT_NE(error.find("TOKENTRACE_KERNELS"), std::string::npos) << error;
    EXPECT_NE(error.find("accepted"), std::string::npos) << error;
  }
}

TEST(KernelModeTest, SampleSelectsEveryNthTokenStartingWithPrefill) {
  KernelMode m;
  m.kind = KernelMode::kSample;
  m.sample_every = 4;
  EXPECT_TRUE(m.FullRowsFor(1));
  EXPECT_FALSE(m.FullRowsFor(2));
  EXPECT_TRUE(m.FullRowsFor(5));
  EXPECT_FALSE(m.FullRowsFor(0));
  m.kind = KernelMode::kSummary;
  EXPECT_FALSE(m.FullRowsFor(1));
  m.kind = KernelMode::kFull;
  EXPECT_TRUE(m.FullRowsFor(0));
}

// Backreferences cannot be matched in linear time: refused up front, saying what is accepted.
TEST(ConfigTest, TokenRangeRefusesWhatCannotMatchInLinearTime) {
  std::string error;
  EXPECT_FALSE(ValidateTokenRange("(a)\\1", "--token-range", &error));
  EXPECT_NE(error.find("--token-range='(a)\\1' is not accepted"), std::string::npos) << error;
  EXPECT_NE(error.find("no backreferences"), std::string::npos) << error;
  EXPECT_TRUE(ValidateTokenRange("decode_step_[0-9]+", "--token-range", &error));
}

TEST(ConfigTest, OnFullIsDropOrWait) {
  setenv("TOKENTRACE_ON_FULL", "stall", 1);
  std::string error;
  EXPECT_FALSE(ConfigFromEnvironment(&error));
  EXPECT_NE(error.find("TOKENTRACE_ON_FULL='stall' is not accepted (accepted: drop"),
            std::string::npos)
      << error;
  setenv("TOKENTRACE_ON_FULL", "wait", 1);
  auto config = ConfigFromEnvironment(&error);
  ASSERT_TRUE(config);
  EXPECT_TRUE(config->wait_when_full);
  unsetenv("TOKENTRACE_ON_FULL");
  EXPECT_FALSE(ConfigFromEnvironment(&error)->wait_when_full);  // drop is the default
}

TEST(ConfigTest, ExpandsPidAndRank) {
  EXPECT_EQ(ExpandOutPath("/t/run-%p-%r.sqlite", 42, "3", "h"), "/t/run-42-3.sqlite");
  EXPECT_EQ(ExpandOutPath("100%%-%p", 7, "0", "h"), "100%-7");
  EXPECT_EQ(ExpandOutPath("/t/%h-r%r.sqlite", 7, "2", "node-a"), "/t/node-a-r2.sqlite");
}

TEST(ConfigTest, EnvironmentErrorsNameTheVariable) {
  setenv("TOKENTRACE_TOKEN_RANGE", "([unclosed", 1);
  std::string error;
  EXPECT_FALSE(ConfigFromEnvironment(&error));
  EXPECT_NE(error.find("TOKENTRACE_TOKEN_RANGE"), std::string::npos);
  unsetenv("TOKENTRACE_TOKEN_RANGE");
  setenv("TOKENTRACE_KERNELS", "sample:8", 1);
  setenv("TOKENTRACE_OUT", "/tmp/x-%p.sqlite", 1);
  auto config = ConfigFromEnvironment(&error);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->kernels.ToString(), "sample:8");
  EXPECT_EQ(config->out_path, "/tmp/x-%p.sqlite");
  setenv("TOKENTRACE_BUFFER_EVENTS", "12", 1);
  EXPECT_FALSE(ConfigFromEnvironment(&error));
  EXPECT_NE(error.find("TOKENTRACE_BUFFER_EVENTS"), std::string::npos);
  unsetenv("TOKENTRACE_BUFFER_EVENTS");
  unsetenv("TOKENTRACE_KERNELS");
  unsetenv("TOKENTRACE_OUT");
}

}  // namespace
}  // namespace tokentrace
