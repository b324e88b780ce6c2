#include "core/site_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tokentrace {
namespace {

TEST(SiteRegistryTest, SameNameAndKindSameId) {
  uint32_t a = sites::Intern("reg.a", SiteKind::kModule);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(sites::Intern("reg.a", SiteKind::kModule), a);
  EXPECT_NE(sites::Intern("reg.a", SiteKind::kRange), a);
  std::string copy = "reg.a";
  EXPECT_EQ(sites::Intern(copy.c_str(), SiteKind::kModule), a);
  EXPECT_EQ(sites::Intern("reg.abc", 5, SiteKind::kModule), a);
}

TEST(SiteRegistryTest, RowHasNamesKindsAndTokenFlag) {
  uint32_t root = sites::Intern("reg.root", SiteKind::kRoot);
  uint32_t mod = sites::Intern("reg.mod", SiteKind::kModule);
  const SiteRow rows[] = {sites::Row(root), sites::Row(mod)};
  EXPECT_EQ(rows[0].id, root);
  EXPECT_EQ(rows[0].name, "reg.root");
  EXPECT_EQ(rows[0].kind, SiteKind::kRoot);
  EXPECT_TRUE(rows[0].is_token);
  EXPECT_EQ(rows[1].id, mod);
  EXPECT_FALSE(rows[1].is_token);
}

TEST(SiteRegistryTest, TokenRangeRegexMarksMatchingRanges) {
  uint32_t step = sites::Intern("engine_step", SiteKind::kRange);
  uint32_t layer = sites::Intern("layer_3", SiteKind::kRange);
  uint32_t module = sites::Intern("engine_step", SiteKind::kModule);
  sites::SetTokenRange("engine_.*");
  EXPECT_TRUE(sites::IsToken(step));
  EXPECT_FALSE(sites::IsToken(layer));
  EXPECT_FALSE(sites::IsToken(module));  // only foreign ranges are matched
  uint32_t later = sites::Intern("engine_decode", SiteKind::kRange);
  EXPECT_TRUE(sites::IsToken(later));
  sites::SetTokenRange("");
  EXPECT_FALSE(sites::IsToken(step));
}

// The pattern runs on the job's thread for each new name: a huge name and a pattern that makes
// a backtracking engine explode must both finish at once (std::regex crashed the job with the
// first and stalled it for seconds with the second).
TEST(SiteRegistryTest, TokenRangeIsSafeOnHugeNamesAndPathologicalPatterns) {
  sites::SetTokenRange(".*token.*");
  const std::string huge = std::string(50000, 'x') + "token" + std::string(50000, 'y');
  EXPECT_TRUE(sites::IsToken(sites::Intern(huge.c_str(), SiteKind::kRange)));
  sites::SetTokenRange("(a+)+b");
  EXPECT_FALSE(sites::IsToken(sites::Intern(std::string(40, 'a').c_str(), SiteKind::kRange)));
  EXPECT_TRUE(
      sites::IsToken(sites::Intern((std::string(40, 'a') + "b").c_str(), SiteKind::kRange)));
  sites::SetTokenRange("");
}

TEST(SiteRegistryTest, ConcurrentInternAgreesOnIds) {
  constexpr int kThreads = 4;
  constexpr int kNames = 500;
  std::vector<std::vector<uint32_t>> ids(kThreads, std::vector<uint32_t>(kNames));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kNames; ++i) {
        int n = (i * 7 + t * 13) % kNames;
        ids[t][n] = sites::Intern(("conc." + std::to_string(n)).c_str(), SiteKind::kRange);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint32_t> distinct;
  for (int i = 0; i < kNames; ++i) {
    for (int t = 1; t < kThreads; ++t) EXPECT_EQ(ids[t][i], ids[0][i]);
    distinct.insert(ids[0][i]);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kNames));
}

}  // namespace
}  // namespace tokentrace
