// Test helpers: run the built `tokentrace` program and capture its output, and build small
// trace files with the Store.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tokentrace::testing {

struct CliResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
  pid_t pid = 0;  // the process that ran (exec keeps it)
};

inline std::string TempDir() {
  char dir[] = "/tmp/tt_cli_test_XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  return dir;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs TOKENTRACE_CLI with `args`; `env` entries are set ("NAME=value") or, without '=',
// unset in the child.
inline CliResult RunCli(const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {}) {
  std::string dir = TempDir();
  std::string out = dir + "/out", err = dir + "/err";
  pid_t pid = fork();
  if (pid == 0) {
    for (const std::string& e : env) {
      size_t eq = e.find('=');
      if (eq == std::string::npos)
        unsetenv(e.c_str());
      else
        setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    std::vector<char*> argv = {const_cast<char*>(TOKENTRACE_CLI)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(99);
  }
  CliResult r;
  r.pid = pid;
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

// Collapses runs of spaces so table rows can be matched without caring about alignment.
inline std::string Squeeze(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' && !out.empty() && (out.back() == ' ' || out.back() == '\n')) continue;
    out += c;
  }
  return out;
}

inline size_t CountLines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace tokentrace::testing
