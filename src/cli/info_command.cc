// `tokentrace info FILE`: what a trace file holds (meta, row counts, losses, size).
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "store/reader.h"

namespace tokentrace::cli {

const char kInfoUsage[] =
    "usage: tokentrace info FILE\n"
    "\n"
    "Prints the recording settings (meta), row counts, losses and the file size.\n";

int InfoCommand(const std::vector<std::string>& args) {
  std::string file;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kInfoUsage, stdout);
      return 0;
    }
    if (a.rfind("-", 0) == 0 || !file.empty()) {
      std::fprintf(stderr, "tokentrace: unexpected argument '%s' for info\n%s", a.c_str(),
                   kInfoUsage);
      return 2;
    }
    file = a;
  }
  if (file.empty()) {
    std::fprintf(stderr, "tokentrace: info needs a trace FILE\n%s", kInfoUsage);
    return 2;
  }
  std::string error;
  auto reader = Reader::Open(file, &error);
  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<std::pair<std::string, int64_t>> losses;
  TraceCounts counts;
  if (reader != nullptr) {
    if (const std::string notice = reader->ScanNotice(); !notice.empty()) {
      std::fprintf(stderr, "%s\n", notice.c_str());
    }
  }
  if (reader == nullptr || !reader->Meta(&meta, &error) || !reader->Losses(&losses, &error) ||
      !reader->Counts(&counts, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  // Size on disk includes a WAL that a running (or killed) writer has not checkpointed.
  int64_t bytes = 0;
  for (const char* suffix : {"", "-wal"}) {
    struct stat st;
    if (stat((file + suffix).c_str(), &st) == 0) bytes += st.st_size;
  }
  std::string out =
      "file " + file + " (" + Fixed(static_cast<double>(bytes) / 1048576.0, 2) + " MiB)\n\nmeta:\n";
  // A value far longer than a screen (a crafted file's 100 MB value) is cut, with its size.
  constexpr size_t kMaxMetaChars = 2000;
  for (auto& [key, value] : meta) {
    if (value.size() <= kMaxMetaChars) continue;
    const size_t bytes = value.size();
    value = ForTerminal(value, kMaxMetaChars) + " (" + std::to_string(bytes) + " bytes; sqlite3 " +
            "prints it whole)";
  }
  out += FormatKeyValues(meta);  // left-aligned: one long value must not push the others
  std::vector<std::vector<std::string>> rows;
  out += "\ncounts:\n";
  out += FormatTable({{"sites", std::to_string(counts.sites)},
                      {"calls", std::to_string(counts.calls)},
                      {"tokens", std::to_string(counts.tokens)},
                      {"kernels", std::to_string(counts.kernels)},
                      {"escapes", std::to_string(counts.escapes)},
                      {"kernel names", std::to_string(counts.strings)}});
  out += "\nlosses:";
  rows.clear();
  for (const auto& [kind, count] : losses) {
    if (count != 0) rows.push_back({kind, std::to_string(count)});
  }
  out += rows.empty() ? " none\n" : "\n" + FormatTable(rows);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace tokentrace::cli
