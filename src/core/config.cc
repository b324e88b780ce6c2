#include "core/config.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/token_pattern.h"

namespace tokentrace {

std::string KernelMode::ToString() const {
  switch (kind) {
    case kOff:
      return "off";
    case kSummary:
      return "summary";
    case kFull:
      return "full";
    case kSample:
      return "sample:" + std::to_string(sample_every);
  }
  return "?";
}

namespace {
bool ParseUint(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 12) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}
}  // namespace

std::optional<KernelMode> ParseKernelMode(const std::string& text, const std::string& what,
                                          std::string* error) {
  KernelMode mode;
  if (text == "off") {
    mode.kind = KernelMode::kOff;
  } else if (text == "summary") {
    mode.kind = KernelMode::kSummary;
  } else if (text == "full") {
    mode.kind = KernelMode::kFull;
  } else if (text.rfind("sample:", 0) == 0) {
    uint64_t n = 0;
    if (!ParseUint(text.substr(7), 1000000000ull, &n) || n == 0) {
      *error = what + "='" + text + "' has a bad sample period (" + kAcceptedKernelModes + ")";
      return std::nullopt;
    }
    mode.kind = KernelMode::kSample;
    mode.sample_every = static_cast<uint32_t>(n);
  } else {
    *error = what + "='" + text + "' is not a kernel mode (" + kAcceptedKernelModes + ")";
    return std::nullopt;
  }
  return mode;
}

bool ParseOnFull(const std::string& text, const std::string& what, bool* wait, std::string* error) {
  if (text != "drop" && text != "wait") {
    *error = what + "='" + text +
             "' is not accepted (accepted: drop, to drop and count events when a thread's buffer "
             "is full, or wait, to wait for the writer)";
    return false;
  }
  *wait = text == "wait";
  return true;
}

bool ValidateTokenRange(const std::string& re, const std::string& what, std::string* error) {
  std::string why;
  if (TokenPattern::Compile(re, &why)) return true;
  *error =
      what + "='" + re + "' is not accepted (" + why + "); accepted: " + TokenPattern::kAccepted;
  return false;
}

std::string NewRunId() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count());
}

std::string AbsoluteOutPattern(const std::string& pattern) {
  if (pattern.empty() || pattern[0] == '/') return pattern;
  char buf[PATH_MAX];
  if (getcwd(buf, sizeof buf) == nullptr) return pattern;
  std::string dir;
  for (const char* c = buf; *c != '\0'; ++c) {
    if (*c == '%') dir += '%';
    dir += *c;
  }
  if (dir != "/") dir += '/';
  return dir + (pattern.rfind("./", 0) == 0 ? pattern.substr(2) : pattern);
}

std::string OutPathNotAFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return "not a regular file";
}

std::string ExpandOutPath(const std::string& pattern, long pid, const std::string& rank,
                          const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'p') {
        out += std::to_string(pid);
        ++i;
        continue;
      }
      if (c == 'r') {
        out += rank;
        ++i;
        continue;
      }
      if (c == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

std::optional<Config> ConfigFromEnvironment(std::string* error) {
  Config config;
  if (const char* v = Env("TOKENTRACE_OUT")) config.out_path = v;
  if (const char* v = Env("TOKENTRACE_KERNELS")) {
    auto mode = ParseKernelMode(v, "TOKENTRACE_KERNELS", error);
    if (!mode) return std::nullopt;
    config.kernels = *mode;
  }
  if (const char* v = Env("TOKENTRACE_TOKEN_RANGE")) {
    if (!ValidateTokenRange(v, "TOKENTRACE_TOKEN_RANGE", error)) return std::nullopt;
    config.token_range = v;
  }
  if (const char* v = Env("TOKENTRACE_CUPTI")) config.cupti_path = v;
  if (const char* v = Env("TOKENTRACE_FLUSH_MS")) {
    uint64_t n = 0;
    if (!ParseUint(v, 1000, &n) || n < 1) {
      *error = std::string("TOKENTRACE_FLUSH_MS='") + v +
               "' is not accepted (accepted: an integer number of milliseconds, 1 to 1000)";
      return std::nullopt;
    }
    config.flush_ms = static_cast<int>(n);
  }
  if (const char* v = Env("TOKENTRACE_BUFFER_EVENTS")) {
    uint64_t n = 0;
    if (!ParseUint(v, 1u << 24, &n) || n < 64) {
      *error = std::string("TOKENTRACE_BUFFER_EVENTS='") + v +
               "' is not accepted (accepted: an integer from 64 to 16777216)";
      return std::nullopt;
    }
    config.buffer_events = static_cast<uint32_t>(n);
  }
  if (const char* v = Env("TOKENTRACE_ON_FULL")) {
    if (!ParseOnFull(v, "TOKENTRACE_ON_FULL", &config.wait_when_full, error)) return std::nullopt;
  }
  return config;
}

}  // namespace tokentrace
