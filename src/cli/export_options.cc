#include "cli/export_options.h"

#include <cstdio>

#include "cli/format.h"

namespace tokentrace::cli {
namespace {

using exporters::Format;
using exporters::Formats;

// "--chrome OUT.json" (" or "-joined when there are several formats).
std::string OutputChoices() {
  std::string s;
  for (const Format& f : Formats()) {
    if (!s.empty()) s += " or ";
    s += std::string("--") + f.name + " OUT" + f.extension;
  }
  return s;
}

}  // namespace

std::string ExportUsage() {
  std::string usage;
  for (const Format& f : Formats()) {
    const std::string out = std::string("--") + f.name + " OUT" + f.extension + " [--tokens A:B]\n";
    usage += (usage.empty() ? "usage: " : "       ") + std::string("tokentrace export FILE ") + out;
    usage += "       tokentrace export IN... " + out;
  }
  usage += "\n";
  for (const Format& f : Formats()) usage += f.help;
  usage += "  --tokens A:B   only tokens A..B (inclusive, 1 = prefill)\n";
  return usage;
}

int ParseExportOptions(const std::vector<std::string>& args, bool several, ExportOptions* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(ExportUsage().c_str(), stdout);
      return 0;
    }
    auto value = [&](const std::string& flag, std::string* v) {
      if (a == flag && i + 1 < args.size()) {
        *v = args[++i];
        return true;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        *v = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string tokens;
    bool was_format = false;
    for (const Format& f : Formats()) {
      if (value(std::string("--") + f.name, &out->out_path)) {
        out->format = &f;
        was_format = true;
        break;
      }
    }
    if (was_format) continue;
    if (value("--tokens", &tokens)) {
      if (!ParseTokenRange(tokens, &out->first, &out->last)) return 2;
      continue;
    }
    if (a.rfind("-", 0) == 0 || (!several && !out->inputs.empty())) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for export\n%s", a.c_str(),
                   ExportUsage().c_str());
      return 2;
    }
    out->inputs.push_back(a);
  }
  if ((!several && out->inputs.empty()) || out->out_path.empty()) {
    std::fprintf(stderr, "tokentrace: export needs %s%s\n%s", several ? "" : "a trace FILE and ",
                 OutputChoices().c_str(), ExportUsage().c_str());
    return 2;
  }
  return -1;
}

bool ParseTokenRange(const std::string& s, uint32_t* first, uint32_t* last) {
  size_t colon = s.find(':');
  if (colon != std::string::npos && ParseU32(s.substr(0, colon), first) &&
      ParseU32(s.substr(colon + 1), last) && *first <= *last) {
    return true;
  }
  std::fprintf(stderr,
               "tokentrace: --tokens '%s' is not a token range (accepted: A:B with A <= B, "
               "e.g. 2:10)\n",
               s.c_str());
  return false;
}

bool RunExporter(const ExportOptions& options, int64_t origin_ns, const ExportFiles& files,
                 exporters::EventCounts* counts) {
  auto exporter = options.format->make();
  std::string error;
  if (!exporter->Open(options.out_path, origin_ns, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return false;
  }
  bool ok = true;
  for (size_t i = 0; ok && i < files.size(); ++i) {
    ok = exporter->WriteFile(*files[i].first, options.first, options.last, files[i].second, counts,
                             &error);
  }
  std::string finish_error;
  const bool finished = exporter->Finish(&finish_error);
  if (!ok || !finished) std::fprintf(stderr, "%s\n", (ok ? finish_error : error).c_str());
  return ok && finished;
}

}  // namespace tokentrace::cli
