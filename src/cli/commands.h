// Entry points of the `tokentrace` subcommands. Each takes the arguments after the
// subcommand name and returns the process exit status (run: only when exec fails).
//
// Exit statuses: 0 ok, 1 the file or the environment is not usable, 2 bad usage (an option
// is wrong), 127 the command of `run` cannot be executed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokentrace::cli {

int RunCommand(const std::vector<std::string>& args);
int ReportCommand(const std::vector<std::string>& args);
int ExportCommand(const std::vector<std::string>& args);
int InfoCommand(const std::vector<std::string>& args);
int PlotCommand(const std::vector<std::string>& args);  // execs python -m tokentrace.plot
int MergeCommand(const std::vector<std::string>& args);
int ImportCommand(const std::vector<std::string>& args);  // recorded traces (src/import)

// report / export over the files of several ranks (report_ranks.cc, export_ranks.cc): taken
// when the arguments name more than one file, a directory or a glob.
bool NamesSeveralFiles(const std::vector<std::string>& args);
int RanksReportCommand(const std::vector<std::string>& args);
int RanksExportCommand(const std::vector<std::string>& args);
// report --runs FILE FILE...: runs of one job compared site by site (report_runs.cc).
int RunsReport(const std::vector<std::string>& files, uint32_t top);
// The files of one serving engine's processes (meta role): the worker's report and the engine
// core's requests beside it (report_engine.cc); -1 when no file has a role (ranks instead).
int EngineReport(const std::vector<std::string>& inputs, uint32_t top);

// Directory to put on PYTHONPATH so `import tokentrace` finds the package that belongs to
// this program ("" when it is already importable, e.g. installed).
std::string PythonPackageParent();

// Usage texts (printed by --help, and after a usage error).
extern const char kRunUsage[];
extern const char kReportUsage[];
extern const char kInfoUsage[];
extern const char kPlotUsage[];
extern const char kMergeUsage[];
extern const char kImportUsage[];
extern const char kRanksReportUsage[];

}  // namespace tokentrace::cli
