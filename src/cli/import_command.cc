// `tokentrace import TRACE`: a torch.profiler or Nsight Systems trace made into tokentrace
// files, one per recorded process (src/import).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/config.h"
#include "core/site_registry.h"
#include "import/readers.h"
#include "import/replay.h"
#include "store/store.h"

namespace tokentrace::cli {

const char kImportUsage[] =
    "usage: tokentrace import TRACE [options]\n"
    "\n"
    "Makes a trace another tool recorded into tokentrace files (one per recorded process that\n"
    "launched GPU work), joined as a live run joins: each GPU record to the launch with its\n"
    "correlation id, the launch to the innermost range open on its thread. TRACE is a\n"
    "torch.profiler trace (.json, .json.gz: module ranges from with_modules=True or\n"
    "with_stack=True, record_function ranges) or an Nsight Systems SQLite export\n"
    "(nsys profile -t cuda,nvtx; nsys export --type sqlite: NVTX push/pop ranges).\n"
    "\n"
    "options:\n"
    "  --out PATH        the file to write; %p is the recorded process's pid (needed when the\n"
    "                    trace holds several); default TRACE's name, less its extension, then\n"
    "                    .%p.sqlite, in the current directory. An existing file is replaced\n"
    "  --root NAME       the range whose calls are tokens (default: the outermost module range\n"
    "                    that began first; an nsys trace has none)\n"
    "  --token-range RE  the ranges that mark tokens, as for run\n"
    "  --kernels MODE    off | summary | full | sample:N (default full)\n";

namespace {

int Usage(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 2;
}

std::string DefaultOut(const std::string& trace) {
  std::string name = trace.substr(trace.find_last_of('/') + 1);
  for (const char* ext : {".gz", ".json", ".sqlite", ".pt.trace"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
    }
  }
  return name + ".%p.sqlite";
}

std::string WithPid(std::string out, int64_t pid) {
  for (size_t at; (at = out.find("%p")) != std::string::npos;) {
    out.replace(at, 2, std::to_string(pid));
  }
  return out;
}

}  // namespace

int ImportCommand(const std::vector<std::string>& args) {
  std::string trace, out, root, token_range, kernels = "full";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kImportUsage, stdout);
      return 0;
    }
    std::string* value = a == "--out"           ? &out
                         : a == "--root"        ? &root
                         : a == "--token-range" ? &token_range
                         : a == "--kernels"     ? &kernels
                                                : nullptr;
    if (value != nullptr) {
      if (i + 1 == args.size()) return Usage("tokentrace: " + a + " needs a value");
      *value = args[++i];
    } else if (!a.empty() && a[0] == '-') {
      return Usage("tokentrace: unknown option '" + a +
                   "' for import (accepted: --out, --root, --token-range, --kernels)");
    } else if (trace.empty()) {
      trace = a;
    } else {
      return Usage("tokentrace: import takes one trace; '" + a + "' is a second");
    }
  }
  if (trace.empty()) return Usage(std::string("tokentrace: import needs a trace\n") + kImportUsage);
  if (!root.empty() && !token_range.empty()) {
    return Usage("tokentrace: give --root or --token-range, not both");
  }
  std::string error;
  const auto mode = ParseKernelMode(kernels, "--kernels", &error);
  if (!mode) return Usage("tokentrace: " + error);
  if (!token_range.empty()) {
    if (!ValidateTokenRange(token_range, "--token-range", &error)) {
      return Usage("tokentrace: " + error);
    }
    sites::SetTokenRange(token_range);
  }
  if (out.empty()) out = DefaultOut(trace);

  struct stat info;
  if (stat(trace.c_str(), &info) == 0 && info.st_size > (int64_t{64} << 20)) {
    // A long read: say what is happening (a 1 GB trace takes tens of seconds).
    std::fprintf(stderr, "tokentrace: reading '%s' (%lld MB)...\n", trace.c_str(),
                 static_cast<long long>(info.st_size >> 20));
  }
  import::RecordedTrace recorded;
  if (!import::ReadRecorded(trace, &recorded, &error)) {
    std::fprintf(stderr, "tokentrace: %s\n", error.c_str());
    return 1;
  }
  if (recorded.processes.size() > 1 && out.find("%p") == std::string::npos) {
    return Usage("tokentrace: '" + trace + "' holds " + std::to_string(recorded.processes.size()) +
                 " processes: put %p (the pid) in --out for one file each");
  }
  for (const auto& [pid, process] : recorded.processes) {
    const std::string path = WithPid(out, pid);
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
    auto store = Store::Open(path, &error);
    if (store == nullptr) {
      std::fprintf(stderr, "tokentrace: %s\n", error.c_str());
      return 1;
    }
    import::ImportOptions options;
    options.mode = *mode;
    options.root = root;
    options.source = trace;
    options.format = recorded.format;
    options.token_range = token_range;
    import::ImportCounts counts;
    if (!import::ImportProcess(process, options, store.get(), &counts, &error)) {
      std::fprintf(stderr, "tokentrace: %s\n", error.c_str());
      return 1;
    }
    store->Close();
    std::printf(
        "tokentrace: %s process %lld -> %s: %llu calls, %u token%s%s, %llu GPU records "
        "(%llu without their launch in the trace, %llu launched outside every range)\n",
        recorded.format.c_str(), static_cast<long long>(pid), path.c_str(),
        static_cast<unsigned long long>(counts.calls), counts.tokens, counts.tokens == 1 ? "" : "s",
        counts.root.empty() ? "" : (" (root " + counts.root + ")").c_str(),
        static_cast<unsigned long long>(counts.records),
        static_cast<unsigned long long>(counts.no_launch),
        static_cast<unsigned long long>(counts.outside_ranges));
    if (counts.root.empty() && root.empty() && token_range.empty()) {
      // No tokens: say why, and how to get them (a profile recorded with with_modules=True
      // alone has no module ranges: Kineto writes them with the Python tracer, with_stack).
      const bool kineto = recorded.format == "torch.profiler";
      std::fprintf(stderr,
                   "tokentrace: process %lld of '%s' has no module ranges%s, so every call is "
                   "token 0's: %s\n",
                   static_cast<long long>(pid), trace.c_str(), kineto ? " (nn.Module: events)" : "",
                   kineto ? "record with torch.profiler.profile(..., with_stack=True), or give "
                            "--root NAME or --token-range REGEX"
                          : "give --root NAME or --token-range REGEX");
    }
  }
  return 0;
}

}  // namespace tokentrace::cli
