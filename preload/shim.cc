// libtokentrace.so's process hooks: the ELF constructor (preload mode), exit, fork, _exit,
// and the CUDA injection entry point.
#include "preload/shim.h"

#include <dlfcn.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/config.h"
#include "core/deadline_wait.h"
#include "core/drain_budget.h"
#include "core/fd_guard.h"
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

// SIGTERM and SIGHUP (what `kill`, `timeout`, batch schedulers and a closed terminal send),
// and SIGINT (Ctrl-C), end a job without atexit. When the job has no handler of its own for them,
// ours asks the background thread to write what fits and close the file, waits for that (at most
// kSignalWaitNs: the interrupted thread may hold a lock the writer needs; the writer stops
// taking rows at kSignalDrainNs and counts the rest, core/drain_budget.h), then restores the
// default action and re-raises, so the job still ends by that signal. The wait is a deadline
// on CLOCK_MONOTONIC, not a count of naps (core/deadline_wait.h). Only async-signal-safe
// calls here. Python turns SIGINT into KeyboardInterrupt only when it finds SIGINT at its
// default at start-up: it asks through the sigaction below, which says SIG_DFL where ours
// stands, so Python installs its own handler, as without tokentrace. A KeyboardInterrupt
// that ends Python re-raises SIGINT at its default after finalizing (no atexit of C): that
// default is ours, so the run is written then.

//
// A job that sets its own handler keeps it; when it puts the default back (Python's
// signal.signal(SIGTERM, SIG_DFL), often inside its handler just before re-raising), ours is
// put back instead, standing for the default (sigaction below), so that re-raise is still
// written first. The job is told SIG_DFL when it asks.

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);

// libc's sigaction, under ours (set before any handler of ours is installed).
std::atomic<SigactionFn> g_real_sigaction{nullptr};
// The signals that end a job without atexit when left at their default: SIGTERM and SIGHUP
// (kill, timeout, batch schedulers, a closed terminal) and SIGINT (Ctrl-C in a program that
// does not handle it; Python does, as KeyboardInterrupt, and exits through atexit).
constexpr int kTerminationSignals[] = {SIGTERM, SIGHUP, SIGINT};
// They are managed here once ours was installed for them (or for any of them).
std::atomic<bool> g_manages_termination{false};

SigactionFn RealSigaction() {
  SigactionFn real = g_real_sigaction.load();
  if (real == nullptr) {
    real = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
    g_real_sigaction.store(real);
  }
  return real;
}

void OnTerminationSignal(int sig) {
  if (Session::RequestStopFromSignal(sig)) {
    const timespec step{0, 1000000};  // 1 ms
    WaitUntilDone([] { return Session::StopFromSignalDone(); }, &MonotonicNs,
                  [&step] { nanosleep(&step, nullptr); }, kSignalWaitNs);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  g_real_sigaction.load()(sig, &dfl, nullptr);  // the default itself, not ours standing for it
  raise(sig);  // delivered when this handler returns (the signal is blocked until then)
}

struct sigaction OurTerminationAction() {
  struct sigaction ours {};
  ours.sa_handler = &OnTerminationSignal;
  sigemptyset(&ours.sa_mask);
  for (int sig : kTerminationSignals) sigaddset(&ours.sa_mask, sig);
  return ours;
}

bool IsTermination(int sig) {
  for (int s : kTerminationSignals) {
    if (s == sig) return true;
  }
  return false;
}

bool IsDefault(const struct sigaction* act) {
  return act->sa_handler == SIG_DFL && (act->sa_flags & SA_SIGINFO) == 0;
}

void InstallSignalHandlers() {
  SigactionFn real = RealSigaction();
  if (real == nullptr) return;
  for (int sig : kTerminationSignals) {
    struct sigaction current {};
    if (real(sig, nullptr, &current) != 0 || !IsDefault(&current)) {
      continue;  // the job handles (or ignores) it: its handler exits through atexit or _exit
    }
    const struct sigaction ours = OurTerminationAction();
    real(sig, &ours, nullptr);
  }
  g_manages_termination.store(true);
}

}  // namespace

// The job's sigaction for SIGTERM/SIGHUP once ours are installed: the default the job asks for
// is ours (which ends the job by the signal, at its default, after the final write), and the
// job sees SIG_DFL wherever ours stands. Every other signal, and every other action, is libc's.
int ManagedSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  SigactionFn real = RealSigaction();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (!IsTermination(sig) || !g_manages_termination.load()) return real(sig, act, old);
  struct sigaction current {};
  if (real(sig, nullptr, &current) != 0) return real(sig, act, old);
  if (act != nullptr) {
    const struct sigaction ours = OurTerminationAction();
    const int rc = real(sig, IsDefault(act) ? &ours : act, nullptr);
    if (rc != 0) return rc;
  }
  if (old != nullptr) {
    *old = current;
    if (current.sa_handler == &OnTerminationSignal) {
      old->sa_handler = SIG_DFL;
      old->sa_flags = 0;
      sigemptyset(&old->sa_mask);
    }
  }
  return 0;
}

namespace {

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
  // The path is made absolute now: a job that changes directory keeps writing this file, and
  // a fork child's own file lands beside it.
  Config absolute = config;
  absolute.out_path = AbsoluteOutPattern(config.out_path);
  s.session = Session::Start(absolute, preload, error);
  if (!s.session) return false;
  static bool hooks_installed = false;
  if (!hooks_installed) {
    hooks_installed = true;
    pthread_atfork(&Session::BeforeFork, &Session::AfterForkInParent, &ForkChild);
    atexit(&StopAtExit);
    InstallSignalHandlers();
  }
  s.config = absolute;
  s.preload = preload;
  s.owner = getpid();
  s.last_out_path = s.session->out_path();
  return true;
}

bool StopSession(std::string* error, const MetaRowList& extra_meta) {
  State& s = S();
  if (s.owner != getpid()) return true;  // checked before locking: a vfork child shares memory
  std::unique_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.session || s.owner != getpid()) return true;
    session = std::move(s.session);
    s.last_out_path = session->out_path();
  }
  const bool ok = session->Stop(error, extra_meta);
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

// exec*() replaces the process image: what the rings hold and the file's last rows would be
// gone (a job that execs soon after its last events left no file at all). The session is
// stopped first, as at exit, with the program's path in the meta (exit_exec); if the exec
// fails, a preloaded process records on in a new session (the same file name is now this
// run's, so it writes '<out>.<pid>' and says so).
namespace tokentrace::shim {
namespace {

bool g_restart_after_exec = false;

void BeforeExec(const char* program) {
  State& s = S();
  if (s.owner != getpid()) return;  // a vfork child: the session is the parent's
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.session) return;
    g_restart_after_exec = s.preload;
  }
  std::string error;
  if (!StopSession(&error, {{"exit_exec", program != nullptr ? program : ""}}) && !error.empty()) {
    fprintf(stderr, "%s\n", error.c_str());
  }
}

void AfterFailedExec() {
  if (!g_restart_after_exec) return;
  g_restart_after_exec = false;
  State& s = S();
  Config config;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.session) return;
    config = s.config;
  }
  std::string error;
  if (!StartSession(config, true, &error)) fprintf(stderr, "%s\n", error.c_str());
}

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// Calls the real exec `fn` (looked up once) between BeforeExec and AfterFailedExec.
template <typename Fn, typename... Args>
int Exec(Fn real, const char* program, Args... args) {
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  BeforeExec(program);
  const int rc = real(args...);
  const int saved = errno;
  AfterFailedExec();
  errno = saved;
  return rc;
}

// The arguments of execl/execlp/execle after `first`, up to the terminating null pointer.
std::vector<char*> ArgList(const char* first, va_list* ap) {
  std::vector<char*> argv{const_cast<char*>(first)};
  while (argv.back() != nullptr) argv.push_back(va_arg(*ap, char*));
  return argv;
}

}  // namespace
}  // namespace tokentrace::shim

#define TT_EXPORT extern "C" __attribute__((visibility("default")))

TT_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  static auto real = tokentrace::shim::Next<decltype(&execve)>("execve");
  return tokentrace::shim::Exec(real, path, path, argv, envp);
}
TT_EXPORT int execv(const char* path, char* const argv[]) {
  static auto real = tokentrace::shim::Next<decltype(&execv)>("execv");
  return tokentrace::shim::Exec(real, path, path, argv);
}
TT_EXPORT int execvp(const char* file, char* const argv[]) {
  static auto real = tokentrace::shim::Next<decltype(&execvp)>("execvp");
  return tokentrace::shim::Exec(real, file, file, argv);
}
TT_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  static auto real = tokentrace::shim::Next<decltype(&execvpe)>("execvpe");
  return tokentrace::shim::Exec(real, file, file, argv, envp);
}
TT_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  static auto real = tokentrace::shim::Next<decltype(&fexecve)>("fexecve");
  return tokentrace::shim::Exec(real, argv[0], fd, argv, envp);  // argv is nonnull in libc
}
TT_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = tokentrace::shim::ArgList(arg, &ap);
  va_end(ap);
  return execv(path, argv.data());
}
TT_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = tokentrace::shim::ArgList(arg, &ap);
  va_end(ap);
  return execvp(file, argv.data());
}
TT_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = tokentrace::shim::ArgList(arg, &ap);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv.data(), envp);
}

// Descriptors the recorder keeps (core/fd_guard.h) are, for the job, as if they did not
// exist: close() of one fails with EBADF, close_range and closefrom skip them.
TT_EXPORT int close(int fd) {
  static auto real = tokentrace::shim::Next<int (*)(int)>("close");
  if (tokentrace::fd_guard::IsGuarded(fd)) {
    errno = EBADF;
    return -1;
  }
  return real(fd);
}
TT_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  static auto real = tokentrace::shim::Next<int (*)(unsigned, unsigned, int)>("close_range");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (first > last || (flags & CLOSE_RANGE_CLOEXEC) != 0) return real(first, last, flags);
  return tokentrace::fd_guard::ForEachUnguardedRange(
      first, last, [&](unsigned lo, unsigned hi) { return real(lo, hi, flags); });
}
TT_EXPORT void closefrom(int lowfd) {
  static auto real = tokentrace::shim::Next<void (*)(int)>("closefrom");
  if (lowfd < 0) lowfd = 0;
  int guarded[tokentrace::fd_guard::kSlots];
  if (tokentrace::fd_guard::GuardedIn(static_cast<unsigned>(lowfd), ~0u, guarded) == 0) {
    if (real != nullptr) real(lowfd);
    return;
  }
  tokentrace::fd_guard::ForEachUnguardedRange(
      static_cast<unsigned>(lowfd), ~0u, [](unsigned lo, unsigned hi) {
        if (syscall(SYS_close_range, lo, hi, 0) == 0) {
          return 0;
        }
        // No close_range (Linux < 5.9): one by one.
        const long max = sysconf(_SC_OPEN_MAX);
        for (long fd = lo; fd <= max && fd <= long{hi}; ++fd) {
          syscall(SYS_close, fd);
        }
        return 0;
      });
}

TT_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  return tokentrace::shim::ManagedSigaction(sig, act, old);
}
// signal() as glibc gives it (BSD semantics: SA_RESTART), through the sigaction above.
TT_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act {
  }, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (tokentrace::shim::ManagedSigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

// os._exit() and other direct _exit calls skip atexit; flush what we have first. A vfork
// child (shares the parent's memory) or a child without a session exits untouched.
extern "C" __attribute__((visibility("default"))) void _exit(int status) {
  std::string error;
  tokentrace::shim::StopSession(&error);  // no-op in a child that does not own the session
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
