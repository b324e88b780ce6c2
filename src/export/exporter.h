// Trace exporters: one output format = one Exporter (a file in this folder) + one line in
// formats.cc. The CLI (src/cli/export_command.cc, export_ranks.cc) parses the arguments,
// opens the trace files, places each on its tracks and time axis, and drives one exporter:
//
//   Open(path, origin) -> WriteFile(reader, tokens, tracks) per trace file -> Finish()
//
// Rows are streamed from the readers to the output, never held in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "store/reader.h"

namespace tokentrace::exporters {

// Where one file's events go. Calls: process `pid`, thread = thread index. GPU work: process
// `gpu_pid_base + device`, thread = stream. `shift_ns` is added to every timestamp (the file's
// place on a common time axis, 0 for a single file).
struct Tracks {
  int64_t pid = 1;
  int64_t gpu_pid_base = 0;
  std::string process_name;  // "tokentrace pid 42", "rank 3 (host, pid 42)"
  std::string gpu_prefix;    // before "GPU <device>": "" or "rank 3 "
  int64_t shift_ns = 0;
};

struct EventCounts {
  int64_t calls = 0, gpu = 0;
};

class Exporter {
 public:
  virtual ~Exporter() = default;
  // Creates the output at `path`. Timestamps are written relative to `origin_ns` (the first
  // exported event, on the common axis). False with a one-line message.
  virtual bool Open(const std::string& path, int64_t origin_ns, std::string* error) = 0;
  // Streams the calls and GPU rows of tokens [first, last] of one trace file onto `tracks`;
  // calls never closed are drawn up to the file's last event. False with a one-line message
  // when a query fails.
  virtual bool WriteFile(Reader& reader, uint32_t first, uint32_t last, const Tracks& tracks,
                         EventCounts* counts, std::string* error) = 0;
  // Completes and closes the output; called after a failed WriteFile too. False with a
  // one-line message when the output could not be written.
  virtual bool Finish(std::string* error) = 0;
};

// A registered format: the CLI takes `--<name> OUT` for it.
struct Format {
  const char* name;         // "chrome"
  const char* extension;    // of the file written: ".json" (the usage says OUT.json)
  const char* output_noun;  // what is written, in messages: "JSON"
  const char* help;         // the usage's paragraph about it (lines end in '\n')
  std::unique_ptr<Exporter> (*make)();
};

// Every format, in the order the usage lists them (formats.cc).
std::span<const Format> Formats();

}  // namespace tokentrace::exporters
