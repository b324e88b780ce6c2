// `tokentrace report --runs A B ...`: runs of the same job compared site by site, prefill and
// decode apart (multi/run_compare.h): the table people build by hand when they benchmark a
// change. Runs are labelled A, B, C... in the order given; "vs A" is the last run against A.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "multi/run_compare.h"

namespace tokentrace::cli {
namespace {

std::string Label(size_t i) { return std::string(1, static_cast<char>('A' + i % 26)); }

// Milliseconds per token of a phase ("-" when the run has no such token).
std::string PerToken(int64_t ns, int64_t tokens) {
  return tokens == 0 ? "-" : Fixed(static_cast<double>(ns) / 1e6 / static_cast<double>(tokens), 3);
}

double PerTokenValue(int64_t ns, int64_t tokens) {
  return tokens == 0 ? 0 : static_cast<double>(ns) / static_cast<double>(tokens);
}

std::string Change(double first, double last) {
  if (first <= 0) return "-";
  const double pct = (last - first) / first * 100.0;
  return (pct >= 0 ? "+" : "") + Fixed(pct, 1) + "%";
}

}  // namespace

int RunsReport(const std::vector<std::string>& files, uint32_t top) {
  if (files.size() < 2 || files.size() > 26) {
    std::fprintf(stderr,
                 "tokentrace: report --runs needs 2 to 26 trace files, one per run "
                 "(got %zu)\n",
                 files.size());
    return 2;
  }
  std::vector<multi::RunProfile> runs(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    std::string error;
    auto reader = Reader::Open(files[i], &error);
    if (!reader || !multi::ProfileRun(*reader, &runs[i], &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
  }
  auto prefill = [](const multi::RunProfile& r) { return r.has_prefill ? int64_t{1} : 0; };
  std::string out = "tokentrace report --runs: " + std::to_string(runs.size()) + " runs\n";
  std::vector<std::vector<std::string>> rows = {
      {"run", "prefill ms", "decode tokens", "decode ms/token", "file"}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const multi::RunProfile& r = runs[i];
    rows.push_back({Label(i), PerToken(r.token.prefill_ns, prefill(r)),
                    std::to_string(r.decode_tokens), PerToken(r.token.decode_ns, r.decode_tokens),
                    r.path});
  }
  const multi::RunProfile &a = runs.front(), &z = runs.back();
  rows.push_back({Label(runs.size() - 1) + " vs A",
                  Change(PerTokenValue(a.token.prefill_ns, prefill(a)),
                         PerTokenValue(z.token.prefill_ns, prefill(z))),
                  "",
                  Change(PerTokenValue(a.token.decode_ns, a.decode_tokens),
                         PerTokenValue(z.token.decode_ns, z.decode_tokens)),
                  ""});
  out += FormatTable(rows);

  // Sites ranked by their largest decode self time per token in any run.
  std::set<std::string> names;
  for (const auto& r : runs) {
    for (const auto& [site, t] : r.self) names.insert(site);
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const std::string& site : names) {
    double most = 0;
    for (const auto& r : runs) {
      auto it = r.self.find(site);
      if (it == r.self.end()) continue;
      most = std::max({most, PerTokenValue(it->second.decode_ns, r.decode_tokens),
                       PerTokenValue(it->second.prefill_ns, prefill(r))});
    }
    ranked.push_back({-most, site});
  }
  std::sort(ranked.begin(), ranked.end());
  if (ranked.size() > top) ranked.resize(top);
  out += "\nsites by self time, ms per token (top " + std::to_string(ranked.size()) +
         "; prefill = token 1, decode = tokens >= 2):\n";
  std::vector<std::string> header = {"site"};
  for (const char* phase : {"prefill", "decode"}) {
    for (size_t i = 0; i < runs.size(); ++i) header.push_back(std::string(phase) + " " + Label(i));
    header.push_back(Label(runs.size() - 1) + " vs A");
  }
  rows = {header};
  for (const auto& [unused, site] : ranked) {
    std::vector<std::string> row = {site};
    for (int phase = 0; phase < 2; ++phase) {
      std::vector<double> v;
      for (const auto& r : runs) {
        auto it = r.self.find(site);
        const multi::PhaseTimes t = it == r.self.end() ? multi::PhaseTimes{} : it->second;
        const int64_t n = phase == 0 ? prefill(r) : r.decode_tokens;
        const int64_t ns = phase == 0 ? t.prefill_ns : t.decode_ns;
        row.push_back(PerToken(ns, n));
        v.push_back(PerTokenValue(ns, n));
      }
      row.push_back(Change(v.front(), v.back()));
    }
    rows.push_back(row);
  }
  out += FormatTable(rows);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace tokentrace::cli
