// libtokentrace.so's process hooks: the ELF constructor (preload mode), exit, fork, _exit,
// and the CUDA injection entry point.
#include "preload/shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/config.h"
#include "core/deadline_wait.h"
#include "core/drain_budget.h"
#include "core/recorder.h"
#include "preload/injection.h"
#include "preload/session.h"

namespace tokentrace::shim {
namespace {

struct State {
  std::mutex mutex;
  std::unique_ptr<Session> session;
  Config config;
  bool preload = false;
  pid_t owner = 0;  // pid that owns `session` (vfork children must not touch it)
  std::string last_out_path;
};

State& S() {
  static State* s = new State();  // never destroyed: exit hooks run late
  return *s;
}

std::string SelfPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&SelfPath), &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

bool PreloadedIntoThisProcess(const std::string& self) {
  const char* preload = getenv("LD_PRELOAD");
  if (preload == nullptr || self.empty()) return false;
  const char* base = strrchr(self.c_str(), '/');
  base = base != nullptr ? base + 1 : self.c_str();
  return strstr(preload, base) != nullptr;
}

void StopAtExit() {
  std::string error;
  if (!StopSession(&error) && !error.empty()) fprintf(stderr, "%s\n", error.c_str());
}

// SIGTERM and SIGHUP (what `kill`, `timeout`, batch schedulers and a closed terminal send)
// end a job without atexit. When the job has no handler of its own for them, ours asks the
// background thread to write what fits and close the file, waits for that (at most
// kSignalWaitNs: the interrupted thread may hold a lock the writer needs; the writer stops
// taking rows at kSignalDrainNs and counts the rest, core/drain_budget.h), then restores the
// default action and re-raises, so the job still ends by that signal. The wait is a deadline
// on CLOCK_MONOTONIC, not a count of naps (core/deadline_wait.h). Only async-signal-safe
// calls here. SIGINT is left alone: Python turns it into KeyboardInterrupt (and then exits
// through atexit) only when it finds SIGINT at its default at start-up.

void OnTerminationSignal(int sig) {
  if (Session::RequestStopFromSignal(sig)) {
    const timespec step{0, 1000000};  // 1 ms
    WaitUntilDone([] { return Session::StopFromSignalDone(); }, &MonotonicNs,
                  [&step] { nanosleep(&step, nullptr); }, kSignalWaitNs);
  }
  signal(sig, SIG_DFL);
  raise(sig);  // delivered when this handler returns (the signal is blocked until then)
}

void InstallSignalHandlers() {
  for (int sig : {SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO) != 0) {
      continue;  // the job handles (or ignores) it: its handler exits through atexit or _exit
    }
    struct sigaction ours {};
    ours.sa_handler = &OnTerminationSignal;
    sigemptyset(&ours.sa_mask);
    sigaddset(&ours.sa_mask, SIGTERM);
    sigaddset(&ours.sa_mask, SIGHUP);
    sigaction(sig, &ours, nullptr);
  }
}

void ForkChild() {
  State& s = S();
  Session::AfterForkInChild();
  // The parent's background thread does not exist here and its locks may be held: the
  // parent's session object is abandoned (leaked), never touched again.
  new (&s.mutex) std::mutex();
  if (!s.session) return;
  (void)s.session.release();
  recorder::EndSession();
  recorder::ResetAfterFork();
  if (!s.preload) return;  // in-process tracing does not follow into children
  Config child = s.config;
  if (child.out_path.find("%p") == std::string::npos) child.out_path += ".%p";
  std::string error;
  s.session = Session::Start(child, true, &error);
  s.owner = getpid();
  if (!s.session) fprintf(stderr, "%s\n", error.c_str());
}

__attribute__((constructor)) void OnLoad() {
  const std::string self = SelfPath();
  NoteInjectionVariables(self);  // before we set them: who held them is the job's setting
  // NVTX instances initialise lazily on their first call, which comes after this: pointing
  // NVTX at us here is early enough for every producer, torch included.
  if (!self.empty()) setenv("NVTX_INJECTION64_PATH", self.c_str(), 0);
  if (!PreloadedIntoThisProcess(self)) return;  // loaded by the Python extension
  if (getenv("TOKENTRACE_DISABLE") != nullptr) return;
  // The first preloaded process of a job names the run; the processes it starts inherit it.
  // (`tokentrace run` sets it, since a shell passes on only the variables it knows of.)
  if (getenv(kRunIdVariable) == nullptr) setenv(kRunIdVariable, NewRunId().c_str(), 0);
  std::string error;
  auto config = ConfigFromEnvironment(&error);
  if (!config) {
    fprintf(stderr, "tokentrace: %s\n", error.c_str());
    _exit(2);  // bad configuration stops the job before it starts work
  }
  if (config->kernels.kind != KernelMode::kOff && !self.empty()) {
    const char* other = getenv("CUDA_INJECTION64_PATH");
    if (other == nullptr || *other == '\0') setenv("CUDA_INJECTION64_PATH", self.c_str(), 1);
  }
  if (!StartSession(*config, true, &error)) {
    fprintf(stderr, "%s\n", error.c_str());
    _exit(2);
  }
}

}  // namespace

bool StartSession(const Config& config, bool preload, std::string* error) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.session) {
    *error = "tokentrace: a session is already recording to '" + s.session->out_path() +
             "'; stop it first";
    return false;
  }
  s.session = Session::Start(config, preload, error);
  if (!s.session) return false;
  static bool hooks_installed = false;
  if (!hooks_installed) {
    hooks_installed = true;
    pthread_atfork(&Session::BeforeFork, &Session::AfterForkInParent, &ForkChild);
    atexit(&StopAtExit);
    InstallSignalHandlers();
  }
  s.config = config;
  s.preload = preload;
  s.owner = getpid();
  s.last_out_path = s.session->out_path();
  return true;
}

bool StopSession(std::string* error) {
  State& s = S();
  if (s.owner != getpid()) return true;  // checked before locking: a vfork child shares memory
  std::unique_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.session || s.owner != getpid()) return true;
    session = std::move(s.session);
    s.last_out_path = session->out_path();
  }
  const bool ok = session->Stop(error);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.last_out_path = session->out_path();  // the file it wrote (settled at its first write)
  return ok;
}

bool FlushSession(std::string* error) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.session || s.owner != getpid()) return true;
  return s.session->Flush(error);
}

bool SessionActive() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.session != nullptr;
}

std::string OutPath() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.session ? s.session->out_path() : s.last_out_path;  // settled at the first write
}

std::string KernelsStatus() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.session ? s.session->kernels_status() : "no session";
}

// CUDA driver injection (CUDA_INJECTION64_PATH): called once at cuInit.
void StartKernelsFromInjection() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.session || s.owner != getpid()) return;
  s.session->StartKernels();
  // The atexit handler from StartSession was registered before the job touched CUDA, so it
  // runs after the CUDA runtime's own exit handlers, when the context (and with it the
  // records still inside CUPTI) may be gone. One registered now, from inside cuInit, runs
  // before them, as NVIDIA's injection samples do; the later one then finds nothing to stop.
  static bool registered = false;
  if (!registered) {
    registered = true;
    atexit(&StopAtExit);
  }
}

}  // namespace tokentrace::shim

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  tokentrace::shim::StartKernelsFromInjection();
  return 1;
}

// os._exit() and other direct _exit calls skip atexit; flush what we have first. A vfork
// child (shares the parent's memory) or a child without a session exits untouched.
extern "C" __attribute__((visibility("default"))) void _exit(int status) {
  std::string error;
  tokentrace::shim::StopSession(&error);  // no-op in a child that does not own the session
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
