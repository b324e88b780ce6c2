// A host program shaped like a 3-token `generate`, emitting NVTX the way our Python hooks
// (domain "tokentrace", registered strings, root category) and other producers (plain
// nvtxRangePushA) do. Run under LD_PRELOAD=libtokentrace.so by preload_test.
//
//   nvtx_generate hooks [tokens]   our domain: self > transformer.h.{0,1} > .mlp, per token
//   nvtx_generate foreign [tokens] plain ranges only: decode_step > layer_{0,1}
//   nvtx_generate fork             2 tokens, fork; the child records 1 token of its own
//   nvtx_generate hang             1 token, then sleeps (the test SIGKILLs or SIGTERMs it)
//   nvtx_generate busy             tokens without end (the test SIGTERMs it)
//   nvtx_generate hang_in_token    1 token, then a second one's root and a block, then sleeps
//                                  inside that token (the test SIGKILLs it)
//   nvtx_generate hang_own_handler the same with its own SIGTERM handler, which calls exit(7)
//   nvtx_generate hang_reraise     the same with a handler that puts the default back and
//                                  re-raises (as Python jobs' cleanup handlers do)
//   nvtx_generate quick_exit       1 token, then _exit(3) (like Python's os._exit)
//   nvtx_generate unbalanced       pops with nothing open, leaves a range open at exit
//   nvtx_generate injected         like a CUDA job: an exit handler registered before the
//                                  first CUDA call (the CUDA runtime registers its own then),
//                                  then cuInit's call of InitializeInjection, 2 tokens, exit;
//                                  that handler prints whether tokentrace still records;
//                                  one registered after cuInit emits a third token
//   nvtx_generate fork_late        1 token, then forks half a second later (while the first
//                                  write may still be creating the file); the child records 1
//   nvtx_generate thread_exit      a thread records 1 token; a thread-local object made
//                                  before that emits another from its destructor, too late
//   nvtx_generate fork_busy N      a thread records foreign tokens without pause while the
//                                  main thread forks N children one after another; each
//                                  child records 1 token and exits
//   nvtx_generate exec N PROG      N hooks tokens, then execv(PROG) at once (PROG "" : a path
//                                  that does not exist, so the exec fails) and, when it
//                                  failed, N more tokens
//   nvtx_generate chdir N DIR      1 hooks token, chdir to DIR, N more
//   nvtx_generate paced N          N hooks tokens, one a millisecond
//   nvtx_generate short_threads N  64 waves of 4 threads that record N foreign tokens (5 calls
//                                  each) and exit, and one that records 10 N
//   nvtx_generate inputs N         N hooks tokens (0: without end, "ready" after the first),
//                                  one a millisecond; each transformer.h.* call hands the
//                                  writer a call_inputs row of its own, as the Python hooks do
//                                  (tokentrace_add_rows), and each token a step_requests row
//   nvtx_generate exhaust          4 threads record a token each, then the job takes all the
//                                  address space it may (RLIMIT_AS: its size + 256 MiB) while
//                                  they record 20000 more each; then it gives it back, records
//                                  one hooks token and exits 0
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nvtx3/nvToolsExt.h"
#include "tokentrace/tokentrace.h"

namespace {

constexpr uint32_t kCategoryModule = 1;  // TOKENTRACE_NVTX_CATEGORY_MODULE
constexpr uint32_t kCategoryRoot = 2;    // TOKENTRACE_NVTX_CATEGORY_ROOT

nvtxDomainHandle_t g_domain;

void PushRegistered(const char* name, uint32_t category) {
  static nvtxStringHandle_t handles[16];
  static const char* names[16];
  int slot = 0;
  while (slot < 16 && names[slot] != nullptr && strcmp(names[slot], name) != 0) ++slot;
  if (names[slot] == nullptr) {
    names[slot] = name;
    handles[slot] = nvtxDomainRegisterStringA(g_domain, name);
  }
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.category = category;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = handles[slot];
  nvtxDomainRangePushEx(g_domain, &attr);
}

// The preloaded library's entries, for the modes that hand rows over as the Python layer does.
template <typename Fn>
Fn Entry(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

// One call_inputs row for the innermost open call (the block just pushed).
void HandInputRow(const char* path) {
  static auto current = Entry<void (*)(uint64_t*, uint32_t*)>("tokentrace_current");
  static auto add = Entry<decltype(&tokentrace_add_rows)>("tokentrace_add_rows");
  if (current == nullptr || add == nullptr) return;
  uint64_t call = 0;
  current(&call, nullptr);
  const char* columns[] = {"call_id", "path", "kind", "shape"};
  tokentrace_value row[4] = {{TOKENTRACE_VALUE_INT, static_cast<int64_t>(call), 0, nullptr},
                             {TOKENTRACE_VALUE_TEXT, 0, 0, path},
                             {TOKENTRACE_VALUE_TEXT, 0, 0, "tensor"},
                             {TOKENTRACE_VALUE_TEXT, 0, 0, "[1, 8]"}};
  char err[256];
  if (add(TOKENTRACE_ROWS_CALL_INPUTS, 4, columns, 1, row, err, sizeof err) != 0) {
    fprintf(stderr, "add_rows: %s\n", err);
  }
}

bool g_hand_inputs = false;  // mode "inputs"

void HookToken() {
  PushRegistered("self", kCategoryRoot);
  const char* blocks[2][2] = {{"transformer.h.0", "transformer.h.0.mlp"},
                              {"transformer.h.1", "transformer.h.1.mlp"}};
  for (const auto& block : blocks) {
    PushRegistered(block[0], kCategoryModule);
    if (g_hand_inputs) HandInputRow("hidden_states");
    PushRegistered(block[1], kCategoryModule);
    nvtxRangePushA("aten::addmm");  // another producer inside our module (torch's ranges)
    nvtxRangePop();
    nvtxDomainRangePop(g_domain);
    nvtxDomainRangePop(g_domain);
  }
  nvtxDomainRangePop(g_domain);
}

void ForeignToken() {
  nvtxRangePushA("decode_step");
  for (const char* layer : {"layer_0", "layer_1"}) {
    nvtxRangePushA(layer);
    nvtxMarkA("tick");
    nvtxRangePop();
  }
  nvtxRangePop();
}

// Forks a child that records one token and exits; prints its pid and returns its status.
int ForkOneTokenChild() {
  pid_t child = fork();
  if (child == 0) {
    HookToken();
    exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("child=%d\n", static_cast<int>(child));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (getenv("NVTX_GENERATE_DEFAULT_SIGINT") != nullptr) signal(SIGINT, SIG_DFL);
  const std::string mode = argc > 1 ? argv[1] : "hooks";
  const int tokens = argc > 2 ? atoi(argv[2]) : 3;
  g_domain = nvtxDomainCreateA("tokentrace");
  if (mode == "hooks") {
    for (int t = 0; t < tokens; ++t) HookToken();
  } else if (mode == "foreign") {
    for (int t = 0; t < tokens; ++t) ForeignToken();
  } else if (mode == "fork") {
    HookToken();
    HookToken();
    return ForkOneTokenChild();
  } else if (mode == "hang") {
    HookToken();
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  } else if (mode == "busy") {
    HookToken();
    printf("ready\n");
    fflush(stdout);
    for (;;) HookToken();  // until a signal ends it
  } else if (mode == "hang_in_token") {
    HookToken();
    PushRegistered("self", kCategoryRoot);  // a second token, killed before its root closes
    PushRegistered("transformer.h.0", kCategoryModule);
    nvtxDomainRangePop(g_domain);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  } else if (mode == "hang_own_handler") {
    signal(SIGTERM, [](int) { exit(7); });  // exit(): atexit handlers run
    HookToken();
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  } else if (mode == "hang_reraise") {
    signal(SIGTERM, [](int sig) {
      signal(sig, SIG_DFL);
      raise(sig);  // delivered when this handler returns
    });
    HookToken();
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
  } else if (mode == "quick_exit") {
    HookToken();
    _exit(3);
  } else if (mode == "unbalanced") {
    nvtxRangePop();
    nvtxRangePop();
    HookToken();
    nvtxRangePushA("left_open");
  } else if (mode == "injected") {
    // Registered before "cuInit", like the CUDA runtime's teardown: it runs after handlers
    // registered later, and says whether tokentrace was still recording when it ran.
    atexit([] {
      auto active = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "tokentrace_active"));
      printf("recording when the earlier exit handler ran: %d\n", active ? active() : -1);
    });
    HookToken();
    auto init = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "InitializeInjection"));
    if (init == nullptr) return 4;
    init();  // what the driver does at cuInit with CUDA_INJECTION64_PATH
    HookToken();
    atexit([] { HookToken(); });  // registered after cuInit: runs while tokentrace records
  } else if (mode == "fork_late") {
    HookToken();
    usleep(500 * 1000);  // the first write (creating the file) has begun by now
    return ForkOneTokenChild();
  } else if (mode == "thread_exit") {
    std::thread([] {
      struct LateToken {
        ~LateToken() { HookToken(); }  // destroyed after tokentrace's own thread-local
      };
      static thread_local LateToken late;
      (void)&late;
      HookToken();
    }).join();
  } else if (mode == "fork_busy") {
    // The drain is nearly always inside SQLite when a fork comes: the child must not inherit
    // its locks (it would block forever, holding the directory lock every later child needs).
    std::atomic<bool> stop{false};
    std::thread busy([&stop] {
      while (!stop.load()) ForeignToken();
    });
    int failed = 0;
    for (int i = 0; i < tokens; ++i) failed += ForkOneTokenChild() != 0;
    stop.store(true);
    busy.join();
    return failed;
  } else if (mode == "exec") {
    for (int t = 0; t < tokens; ++t) HookToken();
    const char* prog = argc > 3 && argv[3][0] != '\0' ? argv[3] : "/no/such/program";
    char* const args[] = {const_cast<char*>(prog), nullptr};
    execv(prog, args);
    printf("exec failed\n");
    for (int t = 0; t < tokens; ++t) HookToken();
  } else if (mode == "chdir") {
    HookToken();  // before the first write: the file is not created yet
    if (argc < 4 || chdir(argv[3]) != 0) return 5;
    for (int t = 0; t < tokens; ++t) HookToken();
  } else if (mode == "closerange" || mode == "closerange_raw") {
    // Closes every descriptor from 3 up once the file is written (Python's os.closerange),
    // through libc or by a raw syscall the shim cannot see; then opens files that take the
    // freed numbers (in the directory argv[3]) and records as many tokens again.
    for (int t = 0; t < tokens; ++t) HookToken();
    usleep(200 * 1000);  // a few drains: the file exists
    const int rc = mode == "closerange" ? close_range(3, ~0u, 0)
                                        : static_cast<int>(syscall(SYS_close_range, 3, ~0u, 0));
    if (rc != 0) return 6;
    for (int i = 0; argc > 3 && i < 8; ++i) {
      const std::string path = std::string(argv[3]) + "/job_file_" + std::to_string(i);
      if (open(path.c_str(), O_RDWR | O_CREAT, 0600) < 0) return 7;
    }
    for (int t = 0; t < tokens; ++t) HookToken();
    usleep(200 * 1000);
  } else if (mode == "delete") {
    // Deletes the trace file (argv[3]) and its -wal and -shm between two runs of tokens.
    for (int t = 0; t < tokens; ++t) HookToken();
    usleep(200 * 1000);
    if (argc < 4) return 5;
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((std::string(argv[3]) + suffix).c_str());
    for (int t = 0; t < tokens; ++t) HookToken();
    usleep(200 * 1000);
  } else if (mode == "paced") {
    for (int t = 0; t < tokens; ++t) {  // one token a millisecond: many drains, many writes
      HookToken();
      usleep(1000);
    }
  } else if (mode == "short_threads") {
    // Waves of short-lived threads, each records `tokens` foreign tokens and exits at once:
    // its last events are written just before its exit, often during a drain. A busier
    // thread started after them (its ring is drained after theirs) keeps each drain long.
    for (int wave = 0; wave < 64; ++wave) {
      std::thread workers[5];
      for (int i = 0; i < 5; ++i) {
        const int n = i < 4 ? tokens : 10 * tokens;
        workers[i] = std::thread([n] {
          for (int t = 0; t < n; ++t) ForeignToken();
        });
      }
      for (auto& w : workers) w.join();
    }
  } else if (mode == "inputs") {
    g_hand_inputs = true;
    static auto add = Entry<decltype(&tokentrace_add_rows)>("tokentrace_add_rows");
    for (int t = 0; tokens == 0 || t < tokens; ++t) {
      HookToken();
      // a step's row, with the token it belongs to (as _engines/vllm/steps.py hands them)
      const char* columns[] = {"token", "request"};
      tokentrace_value row[2] = {{TOKENTRACE_VALUE_INT, t + 1, 0, nullptr},
                                 {TOKENTRACE_VALUE_TEXT, 0, 0, "A"}};
      char err[256];
      if (add != nullptr) add(TOKENTRACE_ROWS_STEP_REQUESTS, 2, columns, 1, row, err, sizeof err);
      if (t == 0) {
        printf("ready\n");
        fflush(stdout);
      }
      usleep(1000);
    }
  } else if (mode == "exhaust") {
    // Threads that record before (their rings are made) and while the address space is full.
    std::atomic<int> phase{0};
    std::thread workers[4];
    for (auto& w : workers) {
      w = std::thread([&phase] {
        ForeignToken();
        phase.fetch_add(1);
        while (phase.load() < 100) usleep(1000);
        for (int t = 0; t < 20000; ++t) ForeignToken();
        phase.fetch_add(1);
      });
    }
    while (phase.load() < 4) usleep(1000);
    long pages = 0;
    if (FILE* f = fopen("/proc/self/statm", "r")) {
      if (fscanf(f, "%ld", &pages) != 1) pages = 0;
      fclose(f);
    }
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (256u << 20);
    if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) return 3;
    // Take it all: the heap (a chain through the blocks themselves), then mappings of any size.
    void* heap = nullptr;
    for (void* b; (b = malloc(64 << 10)) != nullptr; heap = b) *static_cast<void**>(b) = heap;
    struct Map {
      void* at;
      size_t size;
    };
    Map* maps = nullptr;  // a list kept in the first mapping of each size
    size_t held = 0;
    for (size_t size = size_t{1} << 30; size >= 4096; size /= 2) {
      for (void* m; (m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0)) != MAP_FAILED;) {
        static Map list[4096];
        if (held < 4096) list[held++] = Map{m, size};
        maps = list;
      }
    }
    phase.store(100);  // the threads record now, with no memory left to anyone
    while (phase.load() < 104) usleep(1000);
    usleep(300 * 1000);  // a few more drains with nothing to spare
    for (size_t i = 0; i < held; ++i) munmap(maps[i].at, maps[i].size);
    while (heap != nullptr) {
      void* next = *static_cast<void**>(heap);
      free(heap);
      heap = next;
    }
    for (auto& w : workers) w.join();
    HookToken();  // recorded and written once memory is back
  } else if (mode == "threads16") {
    // 16 busy threads, each records `tokens` foreign tokens (a burst: with
    // --on-full wait every call is kept, with drop the share lost is counted).
    std::thread workers[16];
    for (auto& w : workers) {
      w = std::thread([tokens] {
        for (int t = 0; t < tokens; ++t) ForeignToken();
      });
    }
    for (auto& w : workers) w.join();
  } else {
    fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  return 0;
}
