// `tokentrace report FILE [--top N] [--tokens A:B]`: what each token cost on the CPU and the GPU.
//
// Reads the summaries the writer kept (one row per token in token_stats, a few per site in
// site_stats: store/summaries.h), meta and losses; never the kernels table, and the calls
// only for a window of tokens (--tokens: a range of call ids, Reader::CallsOfTokens) or, in a file
// without summaries, in one scan. Long traces (> kFullListMax tokens) are summarised instead of
// listed. Longer than kExactTokens tokens (schema 5 files), the summary comes from the writer's
// token digest (store/token_digest.h: totals, histograms, the slowest tokens) instead of one
// row per token, so reading a 10,000,000-token file costs what a 1,000,000-token one does;
// its medians and percentiles are then within 0.4 % (said in the report; --percentiles=exact
// reads every token).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/export_options.h"
#include "cli/format.h"
#include "cli/serving_report.h"
#include "core/launch_meta.h"
#include "store/reader.h"
#include "store/store.h"

namespace tokentrace::cli {

const char kReportUsage[] =
    "usage: tokentrace report FILE [--top N] [--tokens A:B] [--percentiles auto|exact|digest]\n"
    "\n"
    "Per-token CPU and GPU time, prefill vs decode, the top N sites by GPU self time\n"
    "(default 10), with op records the top N ops per token, losses and how the trace was\n"
    "recorded. --tokens A:B: only tokens A..B (inclusive, 1 = prefill), their sites from\n"
    "their calls. --percentiles: medians and percentiles from every token (exact) or from\n"
    "the file's histogram of token times (digest: within 0.4 %, read in constant time);\n"
    "auto (default) uses the digest above 1,000,000 tokens.\n";

namespace {

constexpr size_t kFullListMax = 40;  // longer traces: first 10, slowest 10, percentiles
constexpr size_t kHeadRows = 10;
constexpr int64_t kExactTokens = 1000000;  // --percentiles=auto: the digest above this

bool Closed(const TokenStat& t) { return t.cpu_end_ns >= 0; }

// A token's text as a cell: its first sequence's text quoted (JSON escapes: a newline or an
// escape character shows as \n, \u001b, never reaches the terminal), or its id without a
// tokenizer; "+N" counts the batch's other sequences.
constexpr size_t kTokenTextChars = 24;

// The last `max_bytes` or so of `text` (whole UTF-8 characters), marked "…" when cut: a chat
// prompt's end is its question, after the template's system part.
std::string TailOf(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t at = text.size() - max_bytes;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return "\xE2\x80\xA6" + text.substr(at);
}
std::string TokenCell(const TokenText& t) {
  std::string cell =
      t.has_text ? ForTerminal(JsonString(t.text), kTokenTextChars) : "id " + std::to_string(t.id);
  if (t.sequences > 1) cell += " (+" + std::to_string(t.sequences - 1) + ")";
  return cell;
}

std::vector<std::string> TokenRow(const TokenStat& t, const std::map<uint32_t, TokenText>& texts) {
  std::vector<std::string> row = {std::to_string(t.token),
                                  t.graph_replay ? "graph"
                                  : Closed(t)    ? Ms(t.cpu_end_ns - t.cpu_begin_ns)
                                                 : "open",
                                  Ms(t.gpu_busy_ns), std::to_string(t.kernels),
                                  std::to_string(t.escapes)};
  if (!texts.empty()) {
    const auto it = texts.find(t.token);
    row.push_back(it != texts.end() ? TokenCell(it->second) : "-");
  }
  return row;
}

// The token rows, with the text each token generated when the file has it (token_text).
std::string TokenTable(const std::vector<TokenStat>& tokens,
                       const std::map<uint32_t, TokenText>& texts) {
  std::vector<std::vector<std::string>> rows = {
      {"token", "cpu ms", "gpu busy ms", "kernels", "escapes"}};
  if (!texts.empty()) rows[0].push_back("generated");
  for (const TokenStat& t : tokens) rows.push_back(TokenRow(t, texts));
  return FormatTable(rows);
}

bool Slower(const TokenStat& a, const TokenStat& b) {
  const int64_t da = Closed(a) ? a.cpu_end_ns - a.cpu_begin_ns : -1;
  const int64_t db = Closed(b) ? b.cpu_end_ns - b.cpu_begin_ns : -1;
  return da != db ? da > db : a.token < b.token;
}

// What the report shows of the tokens, taken one at a time (Reader::ForEachToken): the
// tokens themselves up to kFullListMax + 1 (then the first kHeadRows) and the slowest
// kHeadRows, and of every token only its cpu and gpu ms (16 bytes a token) for the
// percentiles and the phase rows.
struct TokenDigest {
  struct Phase {
    size_t tokens = 0;
    std::vector<double> cpu;  // closed tokens' cpu ms
    double cpu_sum = 0, gpu_sum = 0, kernels_sum = 0;
  };
  size_t count = 0, replays = 0;
  std::vector<TokenStat> head, slow;  // slow: a heap, the least slow in front
  std::vector<double> gpu;            // every token's gpu busy ms
  Phase prefill, decode;              // token 1; the others

  void Add(const TokenStat& t) {
    ++count;
    if (t.graph_replay) ++replays;
    if (head.size() <= kFullListMax) head.push_back(t);
    if (slow.size() < kHeadRows) {
      slow.push_back(t);
      std::push_heap(slow.begin(), slow.end(), Slower);
    } else if (Slower(t, slow.front())) {
      std::pop_heap(slow.begin(), slow.end(), Slower);
      slow.back() = t;
      std::push_heap(slow.begin(), slow.end(), Slower);
    }
    const double gpu_ms = static_cast<double>(t.gpu_busy_ns) / 1e6;
    gpu.push_back(gpu_ms);
    Phase& p = t.token == 1 ? prefill : decode;
    ++p.tokens;
    p.gpu_sum += gpu_ms;
    p.kernels_sum += static_cast<double>(t.kernels);
    if (Closed(t)) {
      const double ms = static_cast<double>(t.cpu_end_ns - t.cpu_begin_ns) / 1e6;
      p.cpu.push_back(ms);
      p.cpu_sum += ms;
    }
  }
};

// What a phase row and the percentile table show, from every token or from the digest.
struct PhaseFigures {
  size_t tokens = 0;
  double mean_cpu = 0, median_cpu = 0, mean_gpu = 0, kernels = 0;
};
struct Quantiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

std::vector<std::string> PhaseRow(const std::string& name, const PhaseFigures& f) {
  return {name,
          std::to_string(f.tokens),
          Fixed(f.mean_cpu, 3),
          Fixed(f.median_cpu, 3),
          Fixed(f.mean_gpu, 3),
          Fixed(f.kernels, 1)};
}

std::string PercentileTable(const Quantiles& cpu, const Quantiles& gpu) {
  std::vector<std::vector<std::string>> rows = {{"", "p50", "p90", "p99", "max"}};
  for (auto [name, q] : {std::pair{"cpu ms", &cpu}, std::pair{"gpu busy ms", &gpu}}) {
    rows.push_back({name, Fixed(q->p50, 3), Fixed(q->p90, 3), Fixed(q->p99, 3), Fixed(q->max, 3)});
  }
  return FormatTable(rows);
}

// From every token.
PhaseFigures FiguresOf(TokenDigest::Phase& p) {
  std::sort(p.cpu.begin(), p.cpu.end());
  const double n = p.tokens == 0 ? 1.0 : static_cast<double>(p.tokens);
  return {p.tokens, p.cpu.empty() ? 0.0 : p.cpu_sum / static_cast<double>(p.cpu.size()),
          Median(p.cpu), p.gpu_sum / n, p.kernels_sum / n};
}
Quantiles QuantilesOf(const std::vector<double>& sorted) {
  return {Percentile(sorted, 50), Percentile(sorted, 90), Percentile(sorted, 99),
          sorted.empty() ? 0 : sorted.back()};
}

// From the digest: phases 1 (prefill) and 0 + 2 (decode, as TokenDigest::Add splits them).
using Buckets = std::vector<std::pair<int64_t, int64_t>>;
Buckets Merged(std::initializer_list<const Buckets*> parts) {
  std::map<int64_t, int64_t> sum;
  for (const Buckets* part : parts) {
    for (const auto& [bucket, count] : *part) sum[bucket] += count;
  }
  return {sum.begin(), sum.end()};
}
PhaseFigures FiguresOf(const TokenDigestRead& d, std::initializer_list<int> phases) {
  TokenTotals t;
  std::map<int64_t, int64_t> cpu;
  for (int p : phases) {
    t.tokens += d.totals[p].tokens;
    t.closed += d.totals[p].closed;
    t.cpu_ns += d.totals[p].cpu_ns;
    t.gpu_busy_ns += d.totals[p].gpu_busy_ns;
    t.kernels += d.totals[p].kernels;
    for (const auto& [bucket, count] : d.cpu[p]) cpu[bucket] += count;
  }
  const double n = t.tokens == 0 ? 1.0 : static_cast<double>(t.tokens);
  return {static_cast<size_t>(t.tokens),
          t.closed == 0 ? 0.0 : static_cast<double>(t.cpu_ns) / 1e6 / static_cast<double>(t.closed),
          static_cast<double>(DigestPercentile({cpu.begin(), cpu.end()}, 50)) / 1e6,
          static_cast<double>(t.gpu_busy_ns) / 1e6 / n, static_cast<double>(t.kernels) / n};
}
Quantiles QuantilesOf(const Buckets& buckets, double max_ms) {
  auto ms = [&](double p) { return static_cast<double>(DigestPercentile(buckets, p)) / 1e6; };
  return {ms(50), ms(90), ms(99), max_ms};
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
  std::string percentiles = "auto";
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
    } else if (a == "--percentiles" || a.rfind("--percentiles=", 0) == 0) {
      if (a == "--percentiles") {
        if (i + 1 >= args.size()) {
          std::fprintf(stderr, "tokentrace: --percentiles needs a value (auto, exact or digest)\n");
          return 2;
        }
        percentiles = args[++i];
      } else {
        percentiles = a.substr(14);
      }
      if (percentiles != "auto" && percentiles != "exact" && percentiles != "digest") {
        std::fprintf(stderr, "tokentrace: --percentiles '%s' is not one of auto, exact, digest\n",
                     ForTerminal(percentiles, 80).c_str());
        return 2;
      }
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
  TokenDigest tokens;
  std::vector<SiteGpu> sites;
  BeforeTokens before;
  std::vector<OpPhases> ops;
  if (reader != nullptr) {
    if (const std::string notice = reader->ScanNotice(); !notice.empty()) {
      std::fprintf(stderr, "%s\n", notice.c_str());
    }
  }
  // The tokens: every one (exact), or the digest's figures and the rows it names.
  TokenDigestRead digest;
  bool use_digest = false;
  auto read_tokens = [&]() {
    if (!window && percentiles != "exact" && reader->has_digest()) {
      if (!reader->Digest(&digest, &error)) return false;
      use_digest = percentiles == "digest" || digest.tokens() > kExactTokens;
    }
    if (!use_digest) {
      return reader->ForEachToken(
          first, last, [&](const TokenStat& t) { tokens.Add(t); }, &error);
    }
    tokens.count = static_cast<size_t>(digest.tokens());
    for (const TokenTotals& t : digest.totals) tokens.replays += static_cast<size_t>(t.replays);
    auto keep = [&](std::vector<TokenStat>* v) {
      return [v](const TokenStat& t) { v->push_back(t); };
    };
    if (!reader->ForEachToken(0, UINT32_MAX, keep(&tokens.head), &error, kFullListMax + 1)) {
      return false;
    }
    for (uint32_t t : digest.slowest) {
      if (!reader->ForEachToken(t, t, keep(&tokens.slow), &error)) return false;
    }
    std::make_heap(tokens.slow.begin(), tokens.slow.end(), Slower);
    return true;
  };
  // Each listed token's generated text, the prompt (token 0) and the answer so far.
  std::map<uint32_t, TokenText> texts;
  std::string generated;
  bool generated_more = false;
  auto read_texts = [&]() {
    std::vector<uint32_t> listed = {0};
    for (const TokenStat& t : tokens.head) listed.push_back(t.token);
    for (const TokenStat& t : tokens.slow) listed.push_back(t.token);
    return reader->TokenTexts(listed, &texts, &error) &&
           (window || reader->GeneratedText(2000, &generated, &generated_more, &error));
  };
  if (reader == nullptr || !reader->Meta(&meta, &error) || !reader->Losses(&losses, &error) ||
      !read_tokens() ||
      !(window ? reader->TopSitesOf(first, last, static_cast<int>(top), &sites, &error)
               : reader->TopSites(static_cast<int>(top), &sites, &error)) ||
      (first == 0 && !reader->Before(&before, &error)) ||
      !reader->TopOps(static_cast<int>(top), &ops, &error, first, last) || !read_texts()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  // A serving engine's steps (step_requests), with the times of the steps they name.
  std::string serving;
  {
    std::vector<StepRequestRow> rows;
    std::map<uint32_t, StepTime> step_times;
    if (!ReadSteps(*reader, first, last, &rows, &step_times, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    if (window) {  // only the steps of the window
      rows.erase(std::remove_if(
                     rows.begin(), rows.end(),
                     [&](const StepRequestRow& r) { return r.token < first || r.token > last; }),
                 rows.end());
    }
    serving = ServingSection(rows, step_times, MetaValue(meta, "kernels_status").empty());
    // An engine core's steps and requests (vllm.core_step, request_events).
    std::vector<RequestEventRow> events;
    CoreSteps core;
    if (!ReadLives(*reader, &events, &core, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    serving += EngineCoreSection(events, core, nullptr) + FrontEndSection(events, core);
    ServedEdits served;
    if (!ReadServedEdits(*reader, &served, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    serving += EditsSection(served);
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
  if (const std::string from = MetaValue(meta, "imported_from"); from != "unknown") {
    out += "  imported from " + from + " (" + MetaValue(meta, "import_format") +
           "; `tokentrace import`: times and names as recorded there)\n";
  }
  // Which module's calls are the tokens, and why it was chosen (python/tokentrace/_record/root.py).
  if (const std::string root = MetaValue(meta, "root"); root != "unknown") {
    out += "  root: " + root + "\n";
    if (const std::string assistant = MetaValue(meta, "assistant"); assistant != "unknown") {
      out += "  assistant: " + assistant + "\n";
    }
  }
  // Compiled graphs that ran with no kernel map, and those whose map was recovered with
  // kernels that ran unrecorded (python/tokentrace/_compiled/join.py).
  if (const std::string unmapped = MetaValue(meta, "compiled_unmapped"); unmapped != "unknown") {
    out += "  compiled regions without a kernel map (compiled before the trace): " + unmapped +
           "; their ops and kernels are counted as compiled_unattributed\n";
  }
  if (const std::string unrecorded = MetaValue(meta, "compiled_unrecorded_regions");
      unrecorded != "unknown") {
    out +=
        "  compiled before the trace (kernel map recovered), generated kernels that ran "
        "unrecorded (compiled without profiling; their time is their region's own): " +
        unrecorded + "\n";
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
  out += "tokens: " + std::to_string(tokens.count);
  if (tokens.replays > 0) {
    out += " (" + std::to_string(tokens.replays) +
           " ran as CUDA-graph replays: no host-side token call, cpu ms shows \"graph\")";
  }
  out += "\n";
  // Before the percentiles: FiguresOf sorts the phases' cpu ms.
  const PhaseFigures prefill = use_digest ? FiguresOf(digest, {1}) : FiguresOf(tokens.prefill);
  const PhaseFigures decode = use_digest ? FiguresOf(digest, {0, 2}) : FiguresOf(tokens.decode);
  // A serving engine's token is a step of many requests: its first is no prefill of its own
  // (the serving section below counts prefill and decode by tokens).
  const bool engine = MetaValue(meta, "engine") != "unknown";
  std::vector<std::string> prefill_row = PhaseRow(engine ? "step 1" : "prefill (token 1)", prefill);
  std::vector<std::string> decode_row =
      PhaseRow(engine ? "steps >= 2" : "decode (tokens >= 2)", decode);
  if (const auto prompt = texts.find(0); prompt != texts.end() && prompt->second.has_text) {
    out += "  prompt: " + ForTerminal(JsonString(TailOf(prompt->second.text, 120)), 200) +
           (prompt->second.sequences > 1
                ? " (and " + std::to_string(prompt->second.sequences - 1) + " more sequences)"
                : "") +
           "\n";
  }
  if (!generated.empty()) {
    out += "  generated: " + ForTerminal(JsonString(generated), 160) +
           (generated_more ? " ..." : "") + "\n";
  }
  if (tokens.count <= kFullListMax) {
    out += TokenTable(tokens.head, texts);
  } else {
    out += "first " + std::to_string(kHeadRows) + " tokens:\n";
    out += TokenTable({tokens.head.begin(), tokens.head.begin() + kHeadRows}, texts);
    std::sort_heap(tokens.slow.begin(), tokens.slow.end(), Slower);
    out += "slowest " + std::to_string(kHeadRows) + " tokens (by cpu ms):\n";
    out += TokenTable(tokens.slow, texts);
    out += "percentiles over " + std::to_string(tokens.count) + " tokens" +
           (use_digest ? " (from the file's histogram of token times: within 0.4 %; "
                         "--percentiles=exact reads every token)"
                       : "") +
           ":\n";
    if (use_digest) {
      double max_gpu = 0;
      for (const TokenTotals& t : digest.totals) {
        max_gpu = std::max(max_gpu, static_cast<double>(t.max_gpu_busy_ns) / 1e6);
      }
      const double max_cpu = tokens.slow.empty()
                                 ? 0.0
                                 : static_cast<double>(tokens.slow.front().cpu_end_ns -
                                                       tokens.slow.front().cpu_begin_ns) /
                                       1e6;
      out += PercentileTable(
          QuantilesOf(Merged({&digest.cpu[0], &digest.cpu[1], &digest.cpu[2]}), max_cpu),
          QuantilesOf(Merged({&digest.gpu[0], &digest.gpu[1], &digest.gpu[2]}), max_gpu));
    } else {
      std::vector<double>& cpu = tokens.decode.cpu;  // joined with the prefill's, in order
      for (double ms : tokens.prefill.cpu) {
        cpu.insert(std::upper_bound(cpu.begin(), cpu.end(), ms), ms);
      }
      std::sort(tokens.gpu.begin(), tokens.gpu.end());
      out += PercentileTable(QuantilesOf(cpu), QuantilesOf(tokens.gpu));
    }
  }

  if (before.calls > 0) {
    out += "before token 1 (token 0): " + std::to_string(before.calls) + " call" +
           (before.calls == 1 ? "" : "s") + " (" + ForTerminal(before.sites, 200) +
           (before.calls > 3 ? ", ..." : "") + "), cpu " + Ms(before.cpu_ns) + " ms, gpu busy " +
           Ms(before.gpu_busy_ns) + " ms, " + std::to_string(before.kernels) +
           " kernels: modules called before the root's first call (an encoder-decoder's "
           "encoder, a module called by hand)\n";
  }

  const size_t decode_tokens = tokens.decode.tokens;
  out += engine ? "\nfirst step vs the rest (prefill and decode by tokens: the serving section):\n"
                : "\nprefill vs decode:\n";
  out += FormatTable(
      {{"phase", "tokens", "mean cpu ms", "median cpu ms", "mean gpu ms", "kernels/token"},
       prefill_row,
       decode_row});

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
  if (!serving.empty()) out += serving;

  out += "\nlosses:";
  bool any = false;
  for (const auto& [kind, count] : losses) any = any || count != 0;
  // Never closed, its -wal beside it (a file the shim wrote, not one made by hand), no writer
  // now: its process ended without its exit (killed; a serving engine SIGKILLs its workers at
  // shutdown), so what it held unwritten is gone.
  const bool closed = std::any_of(meta.begin(), meta.end(),
                                  [](const auto& kv) { return kv.first == kMetaAnchorExit; });
  const bool unclosed = !closed && access((reader->path() + "-wal").c_str(), F_OK) == 0 &&
                        !Store::BeingWritten(reader->path());
  if (reader->misses_its_wal()) {
    out +=
        "\n  not counted: the writer never closed this file and its -wal is not beside it, "
        "so what it wrote after its last checkpoint (about the last second) is missing; "
        "copy '" +
        ForTerminal(reader->path()) + "-wal' with it";
  } else if (unclosed) {
    out +=
        "\n  not counted: the writer never closed this file (its process ended without exiting: "
        "killed, e.g. by a serving engine's shutdown), so what it recorded after its last "
        "commit (at most ~200 ms of calls) is missing";
  }
  if (!any && !reader->misses_its_wal() && !unclosed) {
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
