// `tokentrace`: dispatches to a subcommand (commands.h). No exception escapes: every error
// is a one-line "tokentrace: ..." message and an exit status.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: tokentrace <command> [options]\n"
    "\n"
    "tokentrace " TOKENTRACE_VERSION
    "\n"
    "Per-token traces of a PyTorch job: module calls (NVTX ranges) joined with the GPU\n"
    "kernels they launched, stored in one SQLite file.\n"
    "\n"
    "commands:\n"
    "  run     run a command under the tracer (LD_PRELOAD): tokentrace run [opts] -- CMD...\n"
    "  report  per-token table, prefill vs decode, top sites by GPU time, losses;\n"
    "          over several rank files (files, a glob, a directory): stragglers per token\n"
    "  export  write a Chrome trace-event JSON (open it in https://ui.perfetto.dev);\n"
    "          over several rank files: one process per rank on one time axis\n"
    "  info    what a trace file holds\n"
    "  merge   the files of several ranks in one SQLite file: tokentrace merge OUT IN...\n"
    "  plot    per-token latency and GPU time per layer as a PNG (matplotlib)\n"
    "  import  a torch.profiler or Nsight Systems trace as tokentrace files\n"
    "\n"
    "`tokentrace <command> --help` describes a command's options; `tokentrace --version`\n"
    "prints the version.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace tokentrace::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("tokentrace %s\n", TOKENTRACE_VERSION);
    return 0;
  }
  if (cmd == "run") return RunCommand(args);
  if (cmd == "report" && !args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("%s\n%s", kReportUsage, kRanksReportUsage);
    return 0;
  }
  if (cmd == "report") {
    return NamesSeveralFiles(args) ? RanksReportCommand(args) : ReportCommand(args);
  }
  if (cmd == "export") {
    return NamesSeveralFiles(args) ? RanksExportCommand(args) : ExportCommand(args);
  }
  if (cmd == "info") return InfoCommand(args);
  if (cmd == "plot") return PlotCommand(args);
  if (cmd == "merge") return MergeCommand(args);
  if (cmd == "import") return ImportCommand(args);
  std::fprintf(stderr,
               "tokentrace: unknown command '%s' (accepted: run, report, export, info, merge, "
               "plot, import)\n",
               cmd.c_str());
  return 2;
}
