// `tokentrace report` over the files of one serving engine's processes (vLLM: the engine core,
// meta role engine_core, and its worker(s), role worker): the worker's report, then the engine
// core's section with each request's steps and GPU time in the worker beside its queue and
// first-token times. Every file's times are its host's CLOCK_MONOTONIC: one time axis.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/serving_report.h"
#include "core/launch_meta.h"
#include "multi/rank_files.h"
#include "store/reader.h"

namespace tokentrace::cli {
namespace {

struct EngineFile {
  std::string path, role, launch_id, pid;
  int64_t rank = 0;
  std::unique_ptr<Reader> reader;
  std::vector<std::pair<std::string, std::string>> meta;
};

std::string Value(const EngineFile& f, const std::string& key) {
  for (const auto& [k, v] : f.meta) {
    if (k == key) return v;
  }
  return "";
}

bool Has(const std::string& roles, const char* role) {
  return ("," + roles + ",").find(std::string(",") + role + ",") != std::string::npos;
}

}  // namespace

int EngineReport(const std::vector<std::string>& inputs, uint32_t top) {
  std::string error;
  std::vector<std::string> paths;
  if (!multi::ResolveInputs(inputs, &paths, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::vector<EngineFile> files;
  bool any_role = false;
  for (const std::string& p : paths) {
    EngineFile f;
    f.path = p;
    f.reader = Reader::Open(p, &error);
    if (f.reader == nullptr || !f.reader->Meta(&f.meta, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    f.role = Value(f, "role");
    f.launch_id = Value(f, kMetaLaunchId);
    f.pid = Value(f, "pid");
    f.rank = std::atoll(Value(f, kMetaRank).c_str());
    any_role = any_role || !f.role.empty();
    files.push_back(std::move(f));
  }
  if (!any_role) return -1;  // not an engine's files: the ranks' report
  const EngineFile* core = nullptr;
  const EngineFile* front = nullptr;
  std::vector<const EngineFile*> workers;
  for (const EngineFile& f : files) {
    if (f.role.empty() || f.launch_id != files.front().launch_id) {
      std::fprintf(stderr,
                   "tokentrace: %s is not a file of the same serving engine as %s (role '%s', "
                   "launch '%s' vs '%s'); give one engine's files (tokentrace run writes one "
                   "per process, with its role), or ranks of one launch\n",
                   ForTerminal(f.path, 300).c_str(), ForTerminal(files.front().path, 300).c_str(),
                   ForTerminal(f.role, 40).c_str(), ForTerminal(f.launch_id, 60).c_str(),
                   ForTerminal(files.front().launch_id, 60).c_str());
      return 2;
    }
    if (Has(f.role, "engine_core")) {
      if (core != nullptr) {
        std::fprintf(stderr,
                     "tokentrace: %s and %s are both an engine core; give one engine's files "
                     "(each engine of a data-parallel launch is reported on its own)\n",
                     ForTerminal(core->path, 300).c_str(), ForTerminal(f.path, 300).c_str());
        return 2;
      }
      core = &f;
    }
    if (Has(f.role, "front_end")) front = &f;
    if (Has(f.role, "worker") && !Has(f.role, "engine_core")) workers.push_back(&f);
  }
  std::stable_sort(workers.begin(), workers.end(),
                   [](const EngineFile* a, const EngineFile* b) { return a->rank < b->rank; });
  std::string head = "tokentrace report: a vLLM engine of launch '" +
                     ForTerminal(files.front().launch_id, 60) + "':\n";
  std::vector<std::vector<std::string>> rows = {{"role", "pid", "file"}};
  for (const EngineFile& f : files) {
    rows.push_back({ForTerminal(f.role, 40), ForTerminal(f.pid, 20), ForTerminal(f.path, 300)});
  }
  head += FormatTable(rows);
  std::fputs(head.c_str(), stdout);
  std::fflush(stdout);

  // The worker's own report (the first rank's; the others have the same steps), else the
  // engine core's when it holds the worker too (one process).
  const EngineFile* shown = !workers.empty() ? workers.front() : core;
  std::map<std::string, WorkerRequest> by_request;
  if (shown != nullptr) {
    std::printf("\n== %s ==\n", ForTerminal(shown->role, 40).c_str());
    std::fflush(stdout);
    const int rc = ReportCommand({shown->path, "--top", std::to_string(top)});
    if (rc != 0) return rc;
    std::vector<StepRequestRow> steps;
    std::map<uint32_t, StepTime> times;
    if (!ReadSteps(*shown->reader, 0, UINT32_MAX, &steps, &times, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    by_request = WorkerRequests(steps, times);
  }
  std::string out;
  // The engine core's section beside the worker's requests, unless the report above was the
  // engine core's own file (one process: it has the section already).
  if (core != nullptr && core != shown) {
    std::vector<RequestEventRow> events;
    CoreSteps core_steps;
    if (!ReadLives(*core->reader, &events, &core_steps, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    const bool gpu = shown != nullptr && Value(*shown, "kernels_status").empty() &&
                     Value(*shown, "kernel_mode") != "off";
    out += EngineCoreSection(events, core_steps, &by_request, gpu);
    out += "  (the engine core's own report: tokentrace report " + ForTerminal(core->path, 300) +
           ")\n";
  } else if (core == nullptr) {
    out +=
        "\nno engine core's file among these (its requests' queue and finish are there: "
        "give it too)\n";
  }
  if (front != nullptr && front != shown) {
    std::vector<RequestEventRow> events;
    CoreSteps front_steps;
    if (!ReadLives(*front->reader, &events, &front_steps, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    out += FrontEndSection(events, front_steps);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace tokentrace::cli
