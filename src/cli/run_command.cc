// `tokentrace run`: validate every option, set the TOKENTRACE_* environment (the contract with
// libtokentrace.so and the Python boot code), preload the shim, then exec the command in this
// process so the job keeps our pid (%p in --out names the job's own pid).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/config.h"
#include "core/launch_meta.h"
#include "store/reader.h"
#include "tokentrace/tokentrace.h"

namespace tokentrace::cli {

const char kRunUsage[] =
    "usage: tokentrace run [options] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD with libtokentrace.so preloaded; the exit status is CMD's.\n"
    "\n"
    "options (each also read from the environment variable in brackets):\n"
    "  --out F           output file; %p pid, %r rank, %h host [TOKENTRACE_OUT]\n"
    "                    (default tokentrace-%p.sqlite)\n"
    "  --kernels MODE    off | summary | full | sample:N [TOKENTRACE_KERNELS] (default summary)\n"
    "  --sites GLOBS     comma-separated globs of module sites to hook [TOKENTRACE_SITES]\n"
    "  --save GLOBS      sites whose outputs are saved [TOKENTRACE_SAVE]\n"
    "  --inputs GLOBS    sites whose inputs are recorded besides the root's [TOKENTRACE_INPUTS]\n"
    "  --root X          the root (one call = one token): a module path of the model or a\n"
    "                    class name [TOKENTRACE_ROOT] (default: the model whose generate is\n"
    "                    called, else the first module called or the model it is part of)\n"
    "  --edits FILE      JSON edit spec to install (docs/edits.md) [TOKENTRACE_EDITS]\n"
    "  --token-range RE  regex naming the NVTX range that marks a token [TOKENTRACE_TOKEN_RANGE]\n"
    "  --on-full P       drop | wait: when a thread's buffer is full, drop and count its events\n"
    "                    (the job never slows down) or wait for the writer (complete traces)\n"
    "                    [TOKENTRACE_ON_FULL] (default drop)\n"
    "  --ops             record every ATen op as a call in its module's call [TOKENTRACE_OPS=1]\n"
    "  --tokenizer PATH  the tokenizer of each token's text: a saved tokenizer's directory or a\n"
    "                    .gguf file [TOKENTRACE_TOKENIZER] (default: the one saved next to the\n"
    "                    model, or inside the GGUF file it was loaded from; else ids only)\n"
    "\n"
    "The shim is $TOKENTRACE_LIB, else libtokentrace.so next to this program or in ../lib.\n"
    "--patches and TOKENTRACE_PATCHES still work, deprecated: use --edits, TOKENTRACE_EDITS.\n";

namespace {

struct Option {
  const char* flag;
  const char* env;
  std::string value;
  bool given = false;
};

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool IsFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string ExeDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string exe(buf, static_cast<size_t>(n));
  size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

std::string Absolute(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
}

// `p` against the current directory when it is relative (not resolved: an output pattern's
// file does not exist yet). The job's processes may run elsewhere (torch.compile's and vLLM's
// compiler children run in temporary directories): a relative path would name another file,
// or a directory that is not there, in each of them.
std::string FromHere(const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + (p.rfind("./", 0) == 0 ? p.substr(2) : p);
}

// The directory of the output file must exist and accept a new file (tried for real: access()
// is wrong for root and for read-only mounts).
bool CheckOutDir(const std::string& pattern, const std::string& what, std::string* error) {
  const LaunchInfo launch = LaunchFromEnvironment();
  std::string path = ExpandOutPath(pattern, static_cast<long>(getpid()), launch.rank, launch.host);
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  // What the job could not write, or would write somewhere unexpected, is refused now, not
  // found out at the job's end. Room is left for the "<name>.<pid>-wal" a second process of
  // the run may write.
  std::string why;
  if (name.empty() || IsDir(path)) {
    why = "it names a directory, not a file (accepted: a file path, e.g. dir/trace-%p.sqlite)";
  } else if (name.size() + 16 > NAME_MAX) {
    why = "the file name is " + std::to_string(name.size()) + " bytes long (accepted: at most " +
          std::to_string(NAME_MAX - 16) + ")";
  } else if (path.rfind("/dev/", 0) == 0) {
    why = "it is under /dev (accepted: a file path on a disk)";
  } else if (const std::string what = OutPathNotAFile(path); !what.empty()) {
    why = "it is " + what + ", not a file (accepted: a regular file path)";
  }
  std::string version;  // a file there that is not a trace is the user's, and never replaced
  if (why.empty() && IsFile(path) &&
      (!ReadMetaValue(path, "schema_version", &version) || version.empty())) {
    why = "'" + path + "' exists and is not a tokentrace trace, so it is kept (accepted: a " +
          "new file, or an earlier trace to replace)";
  }
  if (!why.empty()) {
    *error = "tokentrace: " + what + "='" + pattern + "': " + why;
    return false;
  }
  if (!IsDir(dir)) {
    *error = "tokentrace: " + what + "='" + pattern + "': the directory '" + dir +
             "' does not exist (accepted: a file path in an existing, writable directory)";
    return false;
  }
  std::string probe = dir + "/.tokentrace-probe-XXXXXX";
  int fd = mkstemp(probe.data());
  if (fd < 0) {
    *error = "tokentrace: " + what + "='" + pattern + "': the directory '" + dir +
             "' is not writable (" + std::strerror(errno) + ")";
    return false;
  }
  close(fd);
  unlink(probe.c_str());
  return true;
}

bool FindShim(std::string* shim, std::string* error) {
  std::string env = Getenv("TOKENTRACE_LIB");
  if (!env.empty()) {
    if (!IsFile(env)) {
      *error = "tokentrace: TOKENTRACE_LIB='" + env + "' is not a file";
      return false;
    }
    *shim = Absolute(env);
    return true;
  }
  std::string dir = ExeDir();
  for (const std::string& p : {dir + "/libtokentrace.so", dir + "/../lib/libtokentrace.so"}) {
    if (IsFile(p)) {
      *shim = Absolute(p);
      return true;
    }
  }
  *error = "tokentrace: cannot find libtokentrace.so (looked in " + dir + " and " + dir +
           "/../lib); set TOKENTRACE_LIB=/path/to/libtokentrace.so";
  return false;
}

std::string BootDir() {
  std::string env = Getenv("TOKENTRACE_BOOT_DIR");
  if (!env.empty()) return env;
  std::string next_to_exe = ExeDir() + "/python_boot";
  if (IsDir(next_to_exe)) return next_to_exe;
  if (IsDir(TOKENTRACE_SOURCE_BOOT_DIR)) return TOKENTRACE_SOURCE_BOOT_DIR;
  return "";
}

}  // namespace

std::string PythonPackageParent() {
  const std::string boot = BootDir();
  const std::string source_suffix = "/tokentrace/boot";
  if (boot.size() > source_suffix.size() &&
      boot.compare(boot.size() - source_suffix.size(), source_suffix.size(), source_suffix) == 0) {
    return boot.substr(0, boot.size() - source_suffix.size());  // <repo>/python
  }
  if (boot == ExeDir() + "/python_boot") return ExeDir() + "/..";  // installed: site-packages
  return "";
}

namespace {

void Prepend(const char* var, const std::string& value, char sep) {
  std::string old = Getenv(var);
  std::string joined = old.empty() ? value : value + sep + old;
  setenv(var, joined.c_str(), 1);
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 2;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  Option opts[] = {{"--out", "TOKENTRACE_OUT", "", false},
                   {"--kernels", "TOKENTRACE_KERNELS", "", false},
                   {"--sites", "TOKENTRACE_SITES", "", false},
                   {"--save", "TOKENTRACE_SAVE", "", false},
                   {"--edits", "TOKENTRACE_EDITS", "", false},
                   {"--token-range", "TOKENTRACE_TOKEN_RANGE", "", false},
                   {"--inputs", "TOKENTRACE_INPUTS", "", false},
                   {"--on-full", "TOKENTRACE_ON_FULL", "", false},
                   {"--root", "TOKENTRACE_ROOT", "", false},
                   {"--tokenizer", "TOKENTRACE_TOKENIZER", "", false}};
  Option& out = opts[0];
  Option& kernels = opts[1];
  Option& edits = opts[4];
  Option& token_range = opts[5];
  Option& on_full = opts[7];
  Option& tokenizer = opts[9];

  bool ops = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--patches" || a.rfind("--patches=", 0) == 0) {  // the old name of --edits
      std::fputs("tokentrace: --patches is deprecated; use --edits\n", stderr);
      a.replace(0, 9, "--edits");
    }
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--ops") {  // a flag: no value
      ops = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(kRunUsage, stdout);
      return 0;
    }
    if (a.rfind("-", 0) != 0) break;  // the command starts here (no "--")
    bool known = false;
    for (Option& o : opts) {
      std::string flag = o.flag;
      if (a == flag) {
        if (i + 1 >= args.size()) return UsageError("tokentrace: " + flag + " needs a value");
        o.value = args[++i];
      } else if (a.rfind(flag + "=", 0) == 0) {
        o.value = a.substr(flag.size() + 1);
      } else {
        continue;
      }
      o.given = known = true;
      break;
    }
    if (!known) {
      return UsageError("tokentrace: unknown option '" + a +
                        "' for run (accepted: --out, --kernels, --sites, --save, --edits, "
                        "--token-range, --inputs, --on-full, --root, --tokenizer, --ops, "
                        "--help)");
    }
  }
  std::vector<std::string> command(args.begin() + static_cast<long>(i), args.end());
  if (command.empty()) {
    std::fputs(kRunUsage, stderr);
    return UsageError("tokentrace: run needs a command after '--'");
  }

  // Options not given fall back to the inherited environment; both are validated, so a bad
  // value stops here and not inside the job.
  for (Option& o : opts) {
    if (!o.given) o.value = Getenv(o.env);
  }
  if (!edits.given && edits.value.empty() && !Getenv("TOKENTRACE_PATCHES").empty()) {
    std::fputs("tokentrace: TOKENTRACE_PATCHES is deprecated; use TOKENTRACE_EDITS\n", stderr);
    edits.env = "TOKENTRACE_PATCHES";  // what errors name; the job gets TOKENTRACE_EDITS
    edits.value = Getenv(edits.env);
    setenv("TOKENTRACE_EDITS", edits.value.c_str(), 1);
  }
  auto what = [](const Option& o) { return std::string(o.given ? o.flag : o.env); };
  std::string error;
  if (!kernels.value.empty() && !ParseKernelMode(kernels.value, what(kernels), &error)) {
    return UsageError("tokentrace: " + error);
  }
  if (!token_range.value.empty() &&
      !ValidateTokenRange(token_range.value, what(token_range), &error)) {
    return UsageError("tokentrace: " + error);
  }
  bool wait = false;
  if (!on_full.value.empty() && !ParseOnFull(on_full.value, what(on_full), &wait, &error)) {
    return UsageError("tokentrace: " + error);
  }
  if (!CheckOutDir(out.value.empty() ? Config().out_path : out.value, what(out), &error)) {
    return UsageError(error);
  }
  const std::string cupti = Getenv("TOKENTRACE_CUPTI");
  if (!cupti.empty() && !IsFile(cupti)) {
    return UsageError("tokentrace: TOKENTRACE_CUPTI='" + cupti +
                      "' is not a file (accepted: the path of a libcupti.so to load)");
  }
  const std::string ops_env = Getenv("TOKENTRACE_OPS");
  if (!ops && !ops_env.empty() && ops_env != "0" && ops_env != "1") {
    return UsageError("tokentrace: TOKENTRACE_OPS='" + ops_env +
                      "' is not accepted (accepted: 1 to record ATen ops, 0 or unset for not)");
  }
  if (!tokenizer.value.empty() && access(tokenizer.value.c_str(), R_OK) != 0) {
    return UsageError("tokentrace: " + what(tokenizer) + "='" + tokenizer.value +
                      "' is not there (accepted: a saved tokenizer's directory or a .gguf file)");
  }
  if (!edits.value.empty() && !IsFile(edits.value)) {
    return UsageError("tokentrace: " + what(edits) + "='" + edits.value +
                      "' is not a file (accepted: a JSON edit spec file)");
  }
  std::string shim;
  if (!FindShim(&shim, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }

  // Paths as the command's directory reads them, for every process of the job wherever it
  // runs; the output pattern always (its default is relative too).
  for (Option* o : {&edits, &tokenizer}) {
    if (!o->value.empty()) {
      o->value = FromHere(o->value);
      o->given = true;
    }
  }
  out.value = FromHere(out.value.empty() ? Config().out_path : out.value);
  out.given = true;
  for (const Option& o : opts) {
    if (o.given) setenv(o.env, o.value.c_str(), 1);
  }
  if (ops) setenv("TOKENTRACE_OPS", "1", 1);
  if ((ops || ops_env == "1") && Getenv("TOKENTRACE_BUFFER_EVENTS").empty()) {
    setenv("TOKENTRACE_BUFFER_EVENTS", std::to_string(TOKENTRACE_OPS_BUFFER_EVENTS).c_str(), 1);
  }
  setenv(kRunIdVariable, NewRunId().c_str(), 1);  // one run: every process the command starts
  Prepend("LD_PRELOAD", shim, ':');
  std::string boot = BootDir();
  if (!boot.empty()) Prepend("PYTHONPATH", boot, ':');

  std::vector<char*> argv;
  for (std::string& s : command) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "tokentrace: cannot run '%s': %s\n", command[0].c_str(),
               std::strerror(errno));
  return 127;
}

}  // namespace tokentrace::cli
