// `tokentrace report FILE [--top N] [--tokens A:B]`: what each token cost on the CPU and the GPU.
//
// Reads the summaries the writer kept (one row per token in token_stats, a few per site in
// site_stats: store/summaries.h), meta and losses; never the kernels table, and the calls
// only for a window of tokens (--tokens, through calls_by_token) or, in a file without
// summaries, in one scan. Long traces (> kFullListMax tokens) are summarised instead of
// listed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/export_options.h"
#include "cli/format.h"
#include "store/reader.h"

namespace tokentrace::cli {

const char kReportUsage[] =
    "usage: tokentrace report FILE [--top N] [--tokens A:B]\n"
    "\n"
    "Per-token CPU and GPU time, prefill vs decode, the top N sites by GPU self time\n"
    "(default 10), with op records the top N ops per token, losses and how the trace was\n"
    "recorded. --tokens A:B: only tokens A..B (inclusive, 1 = prefill), their sites from\n"
    "their calls.\n";

namespace {

constexpr size_t kFullListMax = 40;  // longer traces: first 10, slowest 10, percentiles
constexpr size_t kHeadRows = 10;

bool Closed(const TokenStat& t) { return t.cpu_end_ns >= 0; }

std::vector<std::string> TokenRow(const TokenStat& t) {
  return {std::to_string(t.token),
          t.graph_replay ? "graph"
          : Closed(t)    ? Ms(t.cpu_end_ns - t.cpu_begin_ns)
                         : "open",
          Ms(t.gpu_busy_ns), std::to_string(t.kernels), std::to_string(t.escapes)};
}

std::string TokenTable(const std::vector<TokenStat>& tokens) {
  std::vector<std::vector<std::string>> rows = {
      {"token", "cpu ms", "gpu busy ms", "kernels", "escapes"}};
  for (const TokenStat& t : tokens) rows.push_back(TokenRow(t));
  return FormatTable(rows);
}

std::string PercentileTable(const std::vector<TokenStat>& tokens) {
  std::vector<double> cpu, gpu;
  for (const TokenStat& t : tokens) {
    if (Closed(t)) cpu.push_back(static_cast<double>(t.cpu_end_ns - t.cpu_begin_ns) / 1e6);
    gpu.push_back(static_cast<double>(t.gpu_busy_ns) / 1e6);
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(gpu.begin(), gpu.end());
  std::vector<std::vector<std::string>> rows = {{"", "p50", "p90", "p99", "max"}};
  for (auto [name, v] : {std::pair{"cpu ms", &cpu}, std::pair{"gpu busy ms", &gpu}}) {
    rows.push_back({name, Fixed(Percentile(*v, 50), 3), Fixed(Percentile(*v, 90), 3),
                    Fixed(Percentile(*v, 99), 3), Fixed(v->empty() ? 0 : v->back(), 3)});
  }
  return FormatTable(rows);
}

// Op records: each op's outermost calls per token, token 1 (prefill) beside the mean decode
// token, so a decode step's ops read as what one step runs.
std::string OpsPerToken(const std::vector<OpPhases>& ops, size_t decode_tokens) {
  const double n = decode_tokens == 0 ? 1.0 : static_cast<double>(decode_tokens);
  std::vector<std::vector<std::string>> rows = {{"op", "prefill calls", "prefill cpu ms",
                                                 "prefill gpu ms", "decode calls/token",
                                                 "decode cpu ms/token", "decode gpu ms/token"}};
  for (const OpPhases& o : ops) {
    rows.push_back({o.name, std::to_string(o.prefill_calls), Ms(o.prefill_cpu_ns),
                    Ms(o.prefill_gpu_ns), Fixed(static_cast<double>(o.decode_calls) / n, 1),
                    Fixed(static_cast<double>(o.decode_cpu_ns) / n / 1e6, 3),
                    Fixed(static_cast<double>(o.decode_gpu_ns) / n / 1e6, 3)});
  }
  return "\ntop ops per token (op records; outermost ops, by decode GPU then CPU time):\n" +
         FormatTable(rows);
}

// The tokens of one phase: token 1 (prefill) or the others (decode).
std::vector<std::string> PhaseRow(const std::string& name, const std::vector<TokenStat>& all,
                                  bool prefill) {
  std::vector<double> cpu, gpu, kernels;
  size_t n = 0;
  for (const TokenStat& t : all) {
    if ((t.token == 1) != prefill) continue;
    ++n;
    if (Closed(t)) cpu.push_back(static_cast<double>(t.cpu_end_ns - t.cpu_begin_ns) / 1e6);
    gpu.push_back(static_cast<double>(t.gpu_busy_ns) / 1e6);
    kernels.push_back(static_cast<double>(t.kernels));
  }
  std::sort(cpu.begin(), cpu.end());
  return {name,
          std::to_string(n),
          Fixed(Mean(cpu), 3),
          Fixed(Median(cpu), 3),
          Fixed(Mean(gpu), 3),
          Fixed(Mean(kernels), 1)};
}

std::string MetaValue(const std::vector<std::pair<std::string, std::string>>& meta,
                      const std::string& key) {
  for (const auto& [k, v] : meta) {
    if (k == key) return v;
  }
  return "unknown";
}

// Which tokentrace wrote the file; when that is not this one, both, so that a difference in
// what the report shows can be traced to the version that recorded it.
std::string WrittenBy(const std::string& version) {
  if (version == TOKENTRACE_VERSION) return "written by tokentrace " + version;
  if (version == "unknown") {
    return "written by a tokentrace that did not record its version (this is " +
           std::string(TOKENTRACE_VERSION) + ")";
  }
  return "written by tokentrace " + version + " (this is " + TOKENTRACE_VERSION + ")";
}

}  // namespace

int ReportCommand(const std::vector<std::string>& args) {
  std::string file;
  uint32_t top = 10;
  bool window = false;
  uint32_t first = 0, last = UINT32_MAX;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kReportUsage, stdout);
      return 0;
    }
    std::string value;
    if (a == "--tokens" || a.rfind("--tokens=", 0) == 0) {
      if (a == "--tokens") {
        if (i + 1 >= args.size()) {
          std::fprintf(stderr, "tokentrace: --tokens needs a value (A:B, e.g. 2:10)\n");
          return 2;
        }
        value = args[++i];
      } else {
        value = a.substr(9);
      }
      if (!ParseTokenRange(value, &first, &last)) return 2;
      window = true;
    } else if (a == "--top" || a.rfind("--top=", 0) == 0) {
      if (a == "--top") {
        if (i + 1 >= args.size()) {
          std::fprintf(stderr, "tokentrace: --top needs a value (a count >= 1)\n");
          return 2;
        }
        value = args[++i];
      } else {
        value = a.substr(6);
      }
      if (!ParseU32(value, &top) || top == 0) {
        std::fprintf(stderr, "tokentrace: --top '%s' is not a count (accepted: N >= 1)\n",
                     value.c_str());
        return 2;
      }
    } else if (a.rfind("-", 0) == 0 || !file.empty()) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for report\n%s", a.c_str(),
                   kReportUsage);
      return 2;
    } else {
      file = a;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "tokentrace: report needs a trace FILE\n%s", kReportUsage);
    return 2;
  }

  std::string error;
  auto reader = Reader::Open(file, &error);
  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<std::pair<std::string, int64_t>> losses;
  std::vector<TokenStat> tokens;
  std::vector<SiteGpu> sites;
  BeforeTokens before;
  std::vector<OpPhases> ops;
  if (reader != nullptr) {
    if (const std::string notice = reader->ScanNotice(); !notice.empty()) {
      std::fprintf(stderr, "%s\n", notice.c_str());
    }
  }
  if (reader == nullptr || !reader->Meta(&meta, &error) || !reader->Losses(&losses, &error) ||
      !reader->Tokens(&tokens, &error) ||
      !(window ? reader->TopSitesOf(first, last, static_cast<int>(top), &sites, &error)
               : reader->TopSites(static_cast<int>(top), &sites, &error)) ||
      (first == 0 && !reader->Before(&before, &error)) ||
      !reader->TopOps(static_cast<int>(top), &ops, &error, first, last)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (window) {
    std::erase_if(tokens, [&](const TokenStat& t) { return t.token < first || t.token > last; });
  }

  // Meta values come from the file: printed made safe (ForTerminal), like every table cell.
  for (auto& [key, value] : meta) value = ForTerminal(value, 200);
  std::string out = "trace " + ForTerminal(file, 400) + "\n";
  const std::string status = MetaValue(meta, "kernels_status");
  out += "  kernel mode " + MetaValue(meta, "kernel_mode") + ", pid " + MetaValue(meta, "pid") +
         ", schema " + std::to_string(reader->schema_version()) + ", " +
         WrittenBy(MetaValue(meta, "tool_version")) + "\n";
  std::string kernels_line;
  if (MetaValue(meta, "kernel_mode") == "off") {
    kernels_line = "not recorded (kernel mode off)";
  } else if (status.empty()) {
    kernels_line = "recorded";
  } else if (status == "unknown") {
    kernels_line = "unknown (the file does not say)";
  } else if (const std::string off = MetaValue(meta, "kernels_off");
             !off.empty() && off != "unknown") {
    kernels_line = "not recorded: " + off + " (`tokentrace info` has the detail)";
  } else {
    std::string why = status.rfind("tokentrace: ", 0) == 0 ? status.substr(12) : status;
    kernels_line = "not recorded: " + why;
  }
  out += "  GPU kernels: " + kernels_line + "\n";
  // Which module's calls are the tokens, and why it was chosen (python/tokentrace/_record/root.py).
  if (const std::string root = MetaValue(meta, "root"); root != "unknown") {
    out += "  root: " + root + "\n";
    if (const std::string assistant = MetaValue(meta, "assistant"); assistant != "unknown") {
      out += "  assistant: " + assistant + "\n";
    }
  }
  // Compiled graphs that ran with no kernel map (python/tokentrace/_compiled/join.py).
  if (const std::string unmapped = MetaValue(meta, "compiled_unmapped"); unmapped != "unknown") {
    out += "  compiled regions without a kernel map (compiled before the trace): " + unmapped +
           "; their ops and kernels are counted as compiled_unattributed\n";
  }
  const std::string signal = MetaValue(meta, "exit_signal");
  if (!signal.empty() && signal != "unknown") {
    out += "  the job was ended by " + signal +
           ": what it recorded until then is here; kernel records still inside CUPTI were not "
           "waited for\n";
  }
  out += "\n";

  if (window) {
    out += "window: tokens " + std::to_string(first) + " to " +
           (last == UINT32_MAX ? std::string("the last") : std::to_string(last)) +
           " (--tokens); the sites below are those tokens' calls\n";
  }
  out += "tokens: " + std::to_string(tokens.size());
  const auto replays = std::count_if(tokens.begin(), tokens.end(),
                                     [](const TokenStat& t) { return t.graph_replay; });
  if (replays > 0) {
    out += " (" + std::to_string(replays) +
           " ran as CUDA-graph replays: no host-side token call, cpu ms shows \"graph\")";
  }
  out += "\n";
  if (tokens.size() <= kFullListMax) {
    out += TokenTable(tokens);
  } else {
    out += "first " + std::to_string(kHeadRows) + " tokens:\n";
    out += TokenTable({tokens.begin(), tokens.begin() + kHeadRows});
    // The slowest by cpu ms, then token: sorted as indices (a million-token trace is not
    // copied).
    std::vector<uint32_t> order(tokens.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
    auto cpu_ns = [&](uint32_t i) {
      const TokenStat& t = tokens[i];
      return Closed(t) ? t.cpu_end_ns - t.cpu_begin_ns : -1;
    };
    std::partial_sort(order.begin(), order.begin() + kHeadRows, order.end(),
                      [&](uint32_t a, uint32_t b) {
                        const int64_t da = cpu_ns(a), db = cpu_ns(b);
                        return da != db ? da > db : tokens[a].token < tokens[b].token;
                      });
    std::vector<TokenStat> slow;
    for (size_t i = 0; i < kHeadRows; ++i) slow.push_back(tokens[order[i]]);
    std::vector<uint32_t>().swap(order);
    out += "slowest " + std::to_string(kHeadRows) + " tokens (by cpu ms):\n";
    out += TokenTable(slow);
    out += "percentiles over " + std::to_string(tokens.size()) + " tokens:\n";
    out += PercentileTable(tokens);
  }

  if (before.calls > 0) {
    out += "before token 1 (token 0): " + std::to_string(before.calls) + " call" +
           (before.calls == 1 ? "" : "s") + " (" + ForTerminal(before.sites, 200) +
           (before.calls > 3 ? ", ..." : "") + "), cpu " + Ms(before.cpu_ns) + " ms, gpu busy " +
           Ms(before.gpu_busy_ns) + " ms, " + std::to_string(before.kernels) +
           " kernels: modules called before the root's first call (an encoder-decoder's "
           "encoder, a module called by hand)\n";
  }

  const size_t decode_tokens = static_cast<size_t>(
      std::count_if(tokens.begin(), tokens.end(), [](const TokenStat& t) { return t.token != 1; }));
  out += "\nprefill vs decode:\n";
  out += FormatTable(
      {{"phase", "tokens", "mean cpu ms", "median cpu ms", "mean gpu ms", "kernels/token"},
       PhaseRow("prefill (token 1)", tokens, true),
       PhaseRow("decode (tokens >= 2)", tokens, false)});

  // Self times: kernels go to the innermost open call, and a call's CPU self time leaves out
  // the calls inside it, so the columns add up across sites.
  out += "\ntop sites by GPU self time (then CPU self time):\n";
  if (sites.empty()) {
    out += "  none\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"site", "kind", "calls", "kernels", "gpu self ms", "cpu self ms"}};
    for (const SiteGpu& s : sites) {
      rows.push_back({s.name, s.kind, std::to_string(s.calls), std::to_string(s.kernels),
                      Ms(s.gpu_busy_ns), Ms(s.cpu_self_ns)});
    }
    out += FormatTable(rows);
  }
  if (!ops.empty()) out += OpsPerToken(ops, decode_tokens);

  out += "\nlosses:";
  bool any = false;
  for (const auto& [kind, count] : losses) any = any || count != 0;
  if (reader->misses_its_wal()) {
    out +=
        "\n  not counted: the writer never closed this file and its -wal is not beside it, "
        "so what it wrote after its last checkpoint (about the last second) is missing; "
        "copy '" +
        ForTerminal(reader->path()) + "-wal' with it";
  }
  if (!any && !reader->misses_its_wal()) {
    out += " none\n";
  } else {
    out += "\n";
    // The share lost, where the file has its base: events the job's threads produced.
    const long long events = std::atoll(MetaValue(meta, "events").c_str());
    for (const auto& [kind, count] : losses) {
      if (count == 0) continue;
      out += "  " + ForTerminal(kind) + ": " + std::to_string(count);
      if (kind == "buffer_full" && events >= count) {
        char share[64];
        std::snprintf(share, sizeof share, " (%.1f%% of %lld events)",
                      100.0 * static_cast<double>(count) / static_cast<double>(events), events);
        out += share;
      }
      out += "\n";
    }
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace tokentrace::cli
