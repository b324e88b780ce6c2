// Configuration of a tracing session, parsed from the TOKENTRACE_* environment (preload mode)
// or filled in by the C API (in-process mode). Parsing never throws: a bad value yields an
// error message that names the variable and the accepted values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tokentrace {

struct KernelMode {
  enum Kind : uint8_t { kOff, kSummary, kFull, kSample };
  Kind kind = kSummary;
  uint32_t sample_every = 0;  // kSample only: full rows on tokens 1, 1+N, 1+2N, ...

  // True when kernel rows (not just the per-call summary) are stored for `token`.
  bool FullRowsFor(uint32_t token) const {
    if (kind == kFull) return true;
    if (kind == kSample) return sample_every != 0 && token != 0 && (token - 1) % sample_every == 0;
    return false;
  }
  std::string ToString() const;  // "off" | "summary" | "full" | "sample:N"
};

// The accepted kernel modes, as error messages say them. This parser is the one judge of a
// kernel mode: Python asks it through the extension (python/src/native.cc,
// python/tokentrace/_backend/recorder.py).
constexpr char kAcceptedKernelModes[] = "accepted: off, summary, full, sample:N with N >= 1";

// Parses "off" | "summary" | "full" | "sample:N" (N >= 1). On failure returns nullopt and
// writes a one-line message (naming `what`, e.g. "TOKENTRACE_KERNELS") to *error.
std::optional<KernelMode> ParseKernelMode(const std::string& text, const std::string& what,
                                          std::string* error);

// Identifies one traced job: the first preloaded process sets it (shim.cc) and every process
// it starts inherits it, so processes of one run can tell their files apart (session.cc).
constexpr char kRunIdVariable[] = "TOKENTRACE_RUN_ID";
// A new run id: "<pid>-<microseconds since the epoch>".
std::string NewRunId();

struct Config {
  std::string out_path = "tokentrace-%p.sqlite";  // %p = pid, %r = rank, %h = host
  KernelMode kernels;
  std::string
      token_range;  // RE2 regex (core/token_pattern.h); empty = only our root site marks tokens
  std::string cupti_path;             // TOKENTRACE_CUPTI: explicit libcupti to load
  int flush_ms = 200;                 // background flush period (TOKENTRACE_FLUSH_MS)
  uint32_t buffer_events = 1u << 16;  // per-thread ring capacity (TOKENTRACE_BUFFER_EVENTS)
  bool wait_when_full = false;        // TOKENTRACE_ON_FULL: "drop" (false) or "wait"
};

// Reads TOKENTRACE_OUT, _KERNELS, _TOKEN_RANGE, _SITES, _SAVE, _CUPTI, _FLUSH_MS, _BUFFER_EVENTS,
// _ON_FULL (TOKENTRACE_EDITS is the Python layer's: preload.py). Validates every value (the
// regex compiles, the mode parses, numbers are in range). Returns nullopt with a message on
// the first bad value.
std::optional<Config> ConfigFromEnvironment(std::string* error);

// Expands %p (pid), %r (rank: core/launch_meta.h LaunchInfo::rank) and %h (host name) in an
// output path; %% is a literal %.
std::string ExpandOutPath(const std::string& pattern, long pid, const std::string& rank,
                          const std::string& host);

// `pattern` (an output path, before ExpandOutPath) made absolute against the current
// directory (a '%' in that directory is escaped), so a job that changes directory later keeps
// writing the file it started with. An absolute pattern comes back unchanged.
std::string AbsoluteOutPattern(const std::string& pattern);

// Why `path` cannot be a trace file to write: "" when nothing is there or it is a regular
// file (or a link to one); else what is there ("a FIFO", "a socket", "a device", "a
// directory"), which SQLite would block on or fail to open.
std::string OutPathNotAFile(const std::string& path);

// Parses "drop" | "wait" (what a thread does when its ring is full) into *wait; error names
// `what`.
bool ParseOnFull(const std::string& text, const std::string& what, bool* wait, std::string* error);

// Checks that a token-range regex compiles; error names `what`.
bool ValidateTokenRange(const std::string& re, const std::string& what, std::string* error);

}  // namespace tokentrace
