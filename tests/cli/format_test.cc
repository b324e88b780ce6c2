#include "cli/format.h"

#include <gtest/gtest.h>

namespace tokentrace::cli {
namespace {

// Range names are stored as the job gave them, bytes that are not UTF-8 included; the JSON
// gets a replacement character for each such byte and stays valid.
TEST(FormatTest, JsonStringReplacesBytesThatAreNotUtf8) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(JsonString("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");  // valid: kept
  EXPECT_EQ(JsonString("a\xFF"
                       "b"),
            "\"a" + fffd + "b\"");
  EXPECT_EQ(JsonString("\xC3"), "\"" + fffd + "\"");                        // cut short
  EXPECT_EQ(JsonString("\xC0\xAF"), "\"" + fffd + fffd + "\"");             // overlong
  EXPECT_EQ(JsonString("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");  // surrogate
}

TEST(FormatTest, JsonStringEscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(JsonString("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(JsonString("void k<float>(int*)"), "\"void k<float>(int*)\"");
}

TEST(FormatTest, PercentileIsNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile({7}, 90), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Median({1, 2, 3, 10}), 2.5);
  EXPECT_EQ(Median({1, 2, 10}), 2);
}

TEST(FormatTest, TableAlignsNumbersRight) {
  EXPECT_EQ(FormatTable({{"site", "ms"}, {"a", "1.5"}, {"long.name", "12.25"}}, ""),
            "site          ms\n"
            "a            1.5\n"
            "long.name  12.25\n");
}

TEST(FormatTest, KeyValuesAreLeftAlignedAndLongValuesWrap) {
  EXPECT_EQ(FormatKeyValues({{"pid", "42"}, {"kernel_mode", "summary"}, {"cupti", ""}}, 100, ""),
            "pid          42\n"
            "kernel_mode  summary\n"
            "cupti\n");
  // Width 30, value column 5: 25 columns of value per line; a longer word stays whole.
  EXPECT_EQ(FormatKeyValues({{"why",
                              "no NVIDIA driver (libcuda.so.1: cannot open shared "
                              "object file) /a/very/long/path/to/libcupti.so.13"}},
                            30, ""),
            "why  no NVIDIA driver\n"
            "     (libcuda.so.1: cannot\n"
            "     open shared object file)\n"
            "     /a/very/long/path/to/libcupti.so.13\n");
}

TEST(FormatTest, ParseU32RejectsJunkAndOverflow) {
  uint32_t v = 0;
  EXPECT_TRUE(ParseU32("4294967295", &v));
  EXPECT_EQ(v, 4294967295u);
  EXPECT_FALSE(ParseU32("4294967296", &v));
  EXPECT_FALSE(ParseU32("-1", &v));
  EXPECT_FALSE(ParseU32("", &v));
  EXPECT_FALSE(ParseU32("3x", &v));
}

}  // namespace
}  // namespace tokentrace::cli
