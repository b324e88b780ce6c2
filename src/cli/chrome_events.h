// Chrome trace-event output shared by `export` (one file) and `export` over several ranks:
// the JSON writer and the events of one trace file on its own tracks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/format.h"
#include "store/reader.h"

namespace tokentrace::cli {

// Writes comma-separated events; timestamps in microseconds relative to `origin_ns`.
class JsonWriter {
 public:
  JsonWriter(FILE* f, int64_t origin_ns) : f_(f), origin_ns_(origin_ns) {}
  void Event(const std::string& body) {
    std::fputs(first_ ? "\n" : ",\n", f_);
    std::fputs(body.c_str(), f_);
    first_ = false;
  }
  std::string Us(int64_t ns) const {
    return Fixed(static_cast<double>(ns - origin_ns_) / 1000.0, 3);
  }
  static std::string Dur(int64_t ns) { return Fixed(static_cast<double>(ns) / 1000.0, 3); }

 private:
  FILE* f_;
  int64_t origin_ns_;
  bool first_ = true;
};

// Where one file's events go. Calls: pid `pid`, tid = thread index. GPU work: pid
// `gpu_pid_base + device`, tid = stream. `shift_ns` is added to every timestamp (the file's
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

// Streams the calls and GPU rows of tokens [first, last] of `reader` into `w`, then the track
// names. Calls never closed are drawn up to the file's last event. False with a one-line
// message when a query fails.
bool WriteFileEvents(Reader& reader, uint32_t first, uint32_t last, const Tracks& tracks,
                     JsonWriter& w, EventCounts* counts, std::string* error);

// Creates `path` and writes the JSON header; nullptr after printing a one-line error.
FILE* OpenTraceFile(const std::string& path);
// Writes the JSON trailer and closes `f`. False after printing one line: `error` when the
// events failed (!events_ok), else the write error.
bool CloseTraceFile(FILE* f, const std::string& path, bool events_ok, const std::string& error);

// Parses the --tokens value "A:B" (A <= B) into a token range; false otherwise, after saying on
// stderr, in one line, what was wrong and what is accepted.
bool ParseTokenRange(const std::string& s, uint32_t* first, uint32_t* last);

}  // namespace tokentrace::cli
