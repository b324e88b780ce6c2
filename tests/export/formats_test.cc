#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "export/exporter.h"

namespace tokentrace::exporters {
namespace {

TEST(FormatsTest, EachFormatIsUsableFromItsRegistration) {
  std::set<std::string> names;
  for (const Format& f : Formats()) {
    const std::string name = f.name;
    EXPECT_TRUE(names.insert(name).second) << name << " registered twice";
    ASSERT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE(std::islower(static_cast<unsigned char>(c))) << name;
    EXPECT_EQ(f.extension[0], '.') << name;
    EXPECT_NE(std::string(f.output_noun), "") << name;
    const std::string help = f.help;
    EXPECT_TRUE(!help.empty() && help.back() == '\n') << name;
    EXPECT_NE(f.make(), nullptr) << name;
  }
  EXPECT_EQ(names.count("chrome"), 1u);
}

}  // namespace
}  // namespace tokentrace::exporters
