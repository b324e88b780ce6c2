// `tokentrace report IN...` over the files of several ranks: per token, which rank was slow
// and by how much, and the sites where it lost the time (multi/rank_compare.h defines time,
// wait, work and lead). Ranks whose token counts differ are named, with the token they
// stopped at.
#include <sys/stat.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/rank_inputs.h"
#include "export/exporter.h"
#include "multi/rank_compare.h"
#include "multi/rank_files.h"

namespace tokentrace::cli {

const char kRanksReportUsage[] =
    "usage: tokentrace report IN... [--top N]\n"
    "       tokentrace report --runs FILE FILE... [--top N]\n"
    "\n"
    "Over the trace files of the ranks of one launch (several files, a glob or a directory\n"
    "of *.sqlite files): each rank's token time, its time in collectives (wait) and the rest\n"
    "(work); the N tokens (default 10) where one rank's work most exceeded the median of the\n"
    "others, and the sites where that rank lost the time. Ranks with fewer tokens are named\n"
    "with the token they stopped at.\n"
    "--runs: two or more runs of the same job (one file each, before and after a change)\n"
    "compared site by site, prefill and decode apart: self time per token, last run vs first.\n"
    "The files of one serving engine's processes (vLLM: engine core and worker, meta role):\n"
    "the worker's report, then the engine core's steps and requests, each request's steps\n"
    "and GPU time in the worker beside its queue and first-token times.\n";

namespace {

// Options of report/export that take a value: their value is not an input. Each export format
// is an option of its own (--chrome OUT), named by the registry (export/formats.cc).
bool TakesValue(const std::string& a) {
  if (a == "--top" || a == "--tokens" || a == "--percentiles") return true;
  for (const exporters::Format& f : exporters::Formats()) {
    if (a == std::string("--") + f.name) return true;
  }
  return false;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string RankName(const multi::RankFile& f) { return "rank " + std::to_string(f.rank); }

// One line per rank whose tokens stop short of the others', or that did not exit cleanly.
std::string EndingLines(const std::vector<multi::RankFile>& files, const multi::Comparison& c) {
  std::string out;
  int64_t most = 0;
  for (const auto& r : c.ranks) most = std::max(most, r.tokens);
  for (size_t i = 0; i < files.size(); ++i) {
    const multi::RankTotals& r = c.ranks[i];
    const multi::RankFile& f = files[i];
    std::string how = !f.exit_signal.empty() ? "it was ended by " + f.exit_signal
                      : f.exited             ? "it exited normally"
                                             : "it wrote no exit record: killed (e.g. SIGKILL) "
                                               "or still running";
    if (r.last_token < c.max_token) {
      out += "  " + RankName(f) + " stopped after token " + std::to_string(r.last_token) +
             " (tokens " + std::to_string(r.last_token + 1) + ".." + std::to_string(c.max_token) +
             " missing); " + how + "\n";
    } else if (r.tokens < most) {
      out += "  " + RankName(f) + " has " + std::to_string(r.tokens) + " tokens, others up to " +
             std::to_string(most) + " (gaps, or token calls left open)\n";
    } else if (!f.exited) {
      out += "  " + RankName(f) + ": " + how + "\n";
    }
  }
  return out;
}

}  // namespace

bool NamesSeveralFiles(const std::vector<std::string>& args) {
  size_t inputs = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (TakesValue(a)) {
      ++i;
      continue;
    }
    if (a == "--runs") return true;
    if (a.rfind("-", 0) == 0) continue;
    ++inputs;
    if (IsDir(a) || a.find_first_of("*?[") != std::string::npos) return true;
  }
  return inputs > 1;
}

int RanksReportCommand(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  uint32_t top = 10;
  bool runs = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--runs") {
      runs = true;
    } else if (a == "--top" && i + 1 < args.size()) {
      if (!ParseU32(args[++i], &top) || top == 0) {
        std::fprintf(stderr, "tokentrace: --top '%s' is not a count (accepted: N >= 1)\n",
                     args[i].c_str());
        return 2;
      }
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for report\n%s", a.c_str(),
                   kRanksReportUsage);
      return 2;
    } else {
      inputs.push_back(a);
    }
  }
  if (runs) return RunsReport(inputs, top);
  if (const int rc = EngineReport(inputs, top); rc >= 0) return rc;
  std::string error;
  std::vector<multi::RankFile> ranks;
  multi::Comparison cmp;
  if (!OpenRankInputs(inputs, &ranks)) return 1;
  if (!multi::CompareRanks(ranks, top, &cmp, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }

  std::set<std::string> hosts;
  for (const auto& f : ranks) hosts.insert(f.host.empty() ? "?" : f.host);
  std::string out = "tokentrace report: " + std::to_string(ranks.size()) + " ranks of launch '" +
                    ranks.front().launch_id + "' on " + std::to_string(hosts.size()) +
                    " host(s), tokens 1.." + std::to_string(cmp.max_token) + "\n";
  std::vector<std::vector<std::string>> rows = {{"rank", "host", "pid", "tokens", "token ms",
                                                 "wait ms", "work ms", "gpu ms", "gpu coll ms",
                                                 "slowest in", "file"}};
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = cmp.ranks[i];
    rows.push_back({std::to_string(ranks[i].rank), ranks[i].host, ranks[i].pid,
                    std::to_string(r.tokens), Ms(r.time_ns), Ms(r.wait_ns),
                    Ms(r.time_ns - r.wait_ns), Ms(r.gpu_ns), Ms(r.gpu_collective_ns),
                    std::to_string(r.slowest) + " tokens", ranks[i].path});
  }
  out += FormatTable(rows);
  const std::string endings = EndingLines(ranks, cmp);
  out += endings.empty() ? "every rank has every token and exited normally\n" : endings;

  if (cmp.top.empty()) {
    out += "\nno straggler: at every token compared (" + std::to_string(cmp.compared_tokens) +
           ") the ranks did the same work\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  out += "\nstragglers: the " + std::to_string(cmp.top.size()) +
         " tokens where one rank's work (token time minus time in collectives) most exceeded\n"
         "the median of the other ranks (" +
         std::to_string(cmp.compared_tokens) + " tokens compared):\n";
  rows = {{"token", "slowest rank", "lead ms", "its work ms", "others' work ms", "others' wait ms",
           "token ms"}};
  for (const multi::Straggler& s : cmp.top) {
    rows.push_back({std::to_string(s.token), std::to_string(ranks[s.slow].rank), Ms(s.lead_ns),
                    Ms(s.work_ns), Ms(s.others_work_ns), Ms(s.others_wait_ns), Ms(s.time_ns)});
  }
  out += FormatTable(rows);

  out +=
      "\nwhere the slowest rank lost the time (self time per site, vs the median of the "
      "others):\n";
  for (const multi::Straggler& s : cmp.top) {
    std::vector<multi::SiteLoss> losses;
    if (!multi::SiteLosses(ranks, s.slow, s.token, 5, &losses, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    out += "  token " + std::to_string(s.token) + ", " + RankName(ranks[s.slow]) + ":\n";
    rows = {{"site", "rank ms", "others ms", "lost ms"}};
    for (const multi::SiteLoss& l : losses) {
      rows.push_back({l.site, Ms(l.slow_ns), Ms(l.others_ns), Ms(l.slow_ns - l.others_ns)});
    }
    out += losses.empty() ? "    no site above the others' median\n" : FormatTable(rows, "    ");
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace tokentrace::cli
