// The arguments of `tokentrace export`, shared by one file (export_command.cc) and several
// ranks (export_ranks.cc), and the loop that drives an exporter (src/export) over the files.
// The formats are the registered ones (export/formats.cc): `--<format> OUT` picks one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "export/exporter.h"

namespace tokentrace::cli {

// The usage text, with a pair of lines and a paragraph per registered format.
std::string ExportUsage();

struct ExportOptions {
  std::vector<std::string> inputs;
  const exporters::Format* format = nullptr;
  std::string out_path;
  uint32_t first = 0, last = UINT32_MAX;  // --tokens A:B
};

// Parses the arguments (`several`: the inputs may be many files, a glob or a directory).
// Returns -1 to go on, or the exit status: 0 after --help, 2 after one line of usage error.
int ParseExportOptions(const std::vector<std::string>& args, bool several, ExportOptions* out);

// Parses the --tokens value "A:B" (A <= B) into a token range; false otherwise, after saying on
// stderr, in one line, what was wrong and what is accepted.
bool ParseTokenRange(const std::string& s, uint32_t* first, uint32_t* last);

// Runs the chosen format over `files` (each a reader and its tracks) with timestamps from
// `origin_ns`: creates the output, writes every file in order, completes it. False after one
// line on stderr.
using ExportFiles = std::vector<std::pair<Reader*, exporters::Tracks>>;
bool RunExporter(const ExportOptions& options, int64_t origin_ns, const ExportFiles& files,
                 exporters::EventCounts* counts);

}  // namespace tokentrace::cli
