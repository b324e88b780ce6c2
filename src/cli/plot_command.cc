// `tokentrace plot FILE -o OUT.png`: the plot is drawn by matplotlib in the Python package
// (tokentrace.plot); this command finds that package and an interpreter and execs it. Each way
// it can fail is one line on stderr: no interpreter (here), an interpreter that cannot import
// the package (kPlotMain), no matplotlib or a bad file (tokentrace.plot itself).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace tokentrace::cli {

const char kPlotUsage[] =
    "usage: tokentrace plot FILE -o OUT.png\n"
    "  per-token latency stacked by the top sites (prefill marked) and GPU time per layer.\n"
    "  Needs Python with matplotlib: $TOKENTRACE_PYTHON, else python3.\n";

namespace {

// What the interpreter runs (python -c): `python -m tokentrace.plot` would answer a Python
// without the package with its own line, which does not say what to do about it.
constexpr char kPlotMain[] =
    "import sys\n"
    "try:\n"
    "    from tokentrace.plot import main\n"
    "except ImportError as exc:\n"
    "    sys.exit(f'tokentrace: plot runs the Python package tokentrace, which {sys.executable} '\n"
    "             f'cannot import ({exc}); set TOKENTRACE_PYTHON to a Python that has it')\n"
    "sys.exit(main(sys.argv[1:]))\n";

}  // namespace

int PlotCommand(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(kPlotUsage, stdout);
      return 0;
    }
  }
  if (args.empty()) {
    std::fprintf(stderr, "tokentrace: plot needs a trace FILE\n%s", kPlotUsage);
    return 2;
  }
  const char* python = std::getenv("TOKENTRACE_PYTHON");
  std::string interpreter = python != nullptr && *python != '\0' ? python : "python3";
  std::string parent = PythonPackageParent();
  if (!parent.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    std::string joined = old != nullptr && *old != '\0' ? parent + ":" + old : parent;
    setenv("PYTHONPATH", joined.c_str(), 1);
  }
  std::vector<std::string> argv_strings = {interpreter, "-c", kPlotMain};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "tokentrace: cannot run '%s' for plot: %s (set TOKENTRACE_PYTHON)\n",
               interpreter.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace tokentrace::cli
