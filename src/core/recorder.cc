#include "core/recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <new>

#include "core/buffer_registry.h"
#include "core/clock.h"
#include "core/site_registry.h"

// Thread-local state is reached through one initial-exec pointer: no __tls_get_addr call on
// the hot path. libtokentrace.so is either preloaded or loaded as a dependency of the Python
// extension; a single pointer fits glibc's static TLS surplus in both cases.
#define TT_TLS __attribute__((tls_model("initial-exec"))) thread_local

namespace tokentrace::recorder {
namespace {

constexpr uint32_t kMaxDepth = 256;
// Call ids are made per thread, without a shared counter: (thread index + 1) << 40 | n.
// Two atomic adds per push (a global id and a per-site k) cost more than the rest of the
// push on some hosts; k is numbered by the background thread instead (core/joiner.cc).
constexpr int kThreadShift = 40;
constexpr uint32_t kGraphSlots = 4096;  // token-graph ids (open addressing, insert-only)

struct OpenCall {
  uint64_t call_id;
  uint32_t site_id;
  uint32_t token;
  bool is_token;
};

// Owned by one job thread. `generation` tells whether the state belongs to the current
// session; a stale state is reset in place (its ring is reused).
struct ThreadState {
  ThreadBuffer* ring = nullptr;
  uint64_t id_base = 0;      // (ring's thread index + 1) << kThreadShift
  uint64_t local_calls = 0;  // calls opened by this thread this session
  uint32_t generation = 0;
  uint32_t depth = 0;        // may exceed kMaxDepth; entries above it are not stored
  uint32_t token_depth = 0;  // open token calls on this thread
  // This thread's open calls now, so that a push names its parent and a launch its call at
  // once, on the job's thread. One of three open-call stacks: the drain rebuilds its own from
  // the events later, on its thread (core/joiner.h stacks_), and the Python extension keeps
  // the sites it opened itself (python/src/native.cc t_open), in another library behind NVTX,
  // whether or not a session records.
  OpenCall stack[kMaxDepth];
};

std::atomic<bool> g_active{false};
std::atomic<uint32_t> g_generation{1};
std::atomic<uint32_t> g_ring_capacity{1u << 16};
std::atomic<uint32_t> g_token{0};
std::atomic<uint64_t> g_unbalanced_pops{0};
std::atomic<uint64_t> g_depth_overflows{0};
// Events from a thread whose thread-local state is already destroyed: its TLS destructors
// ran (for the main thread: exit() runs them before atexit handlers and static destructors).
std::atomic<uint64_t> g_after_thread_exit{0};
// Events of a thread whose state or ring could not be allocated (out of memory, a `ulimit -v`):
// dropped and counted, never thrown into the job. The allocation is tried again at the next
// event, so a thread records again once memory is there.
std::atomic<uint64_t> g_no_memory{0};
// Insert-only set of 32-bit ids (0 = empty slot), lock-free.
struct IdSet {
  std::atomic<uint32_t> slots[kGraphSlots];

  void Add(uint32_t id) {
    if (id == 0) return;
    for (uint32_t i = (id * 2654435761u) & (kGraphSlots - 1), n = 0; n < kGraphSlots;
         i = (i + 1) & (kGraphSlots - 1), ++n) {
      uint32_t cur = slots[i].load(std::memory_order_relaxed);
      if (cur == id) return;
      if (cur == 0) {
        if (slots[i].compare_exchange_strong(cur, id)) return;
        if (cur == id) return;
      }
    }
  }

  bool Has(uint32_t id) const {
    if (id == 0) return false;
    for (uint32_t i = (id * 2654435761u) & (kGraphSlots - 1), n = 0; n < kGraphSlots;
         i = (i + 1) & (kGraphSlots - 1), ++n) {
      const uint32_t cur = slots[i].load(std::memory_order_relaxed);
      if (cur == id) return true;
      if (cur == 0) return false;
    }
    return false;
  }

  void Clear() {
    for (auto& s : slots) s.store(0, std::memory_order_relaxed);
  }
};
// Graphs captured inside a token call (CUPTI graph ids), and the executable graphs made from
// them (CUPTI graph-exec ids). Two sets: CUPTI may number graphs and execs separately, and a
// plain exec must not be taken for a token graph that happens to share its number.
IdSet g_token_graphs;
IdSet g_token_execs;

TT_TLS ThreadState* t_state = nullptr;
TT_TLS bool t_exiting = false;

// Marks the ring retired when the thread exits, so the background thread frees it.
// Not for the main thread: there, exit() destroys thread-locals before it runs atexit
// handlers and static destructors, which may still emit ranges and launch work (and which
// include our own stop). Its state stays until the process ends; the final drain reads its
// ring like any other.
struct ThreadExit {
  ~ThreadExit() {
    if (static_cast<pid_t>(syscall(SYS_gettid)) == getpid()) return;
    t_exiting = true;
    if (t_state != nullptr) {
      if (t_state->ring != nullptr) t_state->ring->retired.store(true, std::memory_order_release);
      delete t_state;
      t_state = nullptr;
    }
  }
};

ThreadState* SlowState() {
  if (t_exiting) {
    g_after_thread_exit.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (t_state == nullptr) {
    static thread_local ThreadExit exit_hook;  // registers the destructor on first use
    (void)&exit_hook;
    t_state = new (std::nothrow) ThreadState();
    if (t_state == nullptr) {
      g_no_memory.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  ThreadState* s = t_state;
  const uint32_t gen = g_generation.load(std::memory_order_acquire);
  // A session that wants larger rings than this thread's (op records after a plain trace in
  // one process): the old ring is retired (freed after a drain reads what is left) and a new
  // one registered. Rings only grow: a later smaller session keeps the larger one.
  if (s->ring != nullptr && s->ring->capacity() < g_ring_capacity.load(std::memory_order_relaxed)) {
    s->ring->retired.store(true, std::memory_order_release);
    s->ring = nullptr;
  }
  if (s->ring == nullptr) {
    s->ring = buffers::Register(g_ring_capacity.load(std::memory_order_relaxed));
    if (s->ring == nullptr) {
      g_no_memory.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  s->id_base = static_cast<uint64_t>(s->ring->thread_index() + 1) << kThreadShift;
  s->local_calls = 0;
  s->generation = gen;
  s->depth = 0;
  s->token_depth = 0;
  return s;
}

inline ThreadState* State() {
  ThreadState* s = t_state;
  if (s != nullptr && s->ring != nullptr &&
      s->generation == g_generation.load(std::memory_order_relaxed)) {
    return s;
  }
  return SlowState();
}

inline void Write(ThreadState* s, EventKind kind, uint64_t call_id, uint64_t a, uint64_t b,
                  uint32_t site_id, uint32_t k, uint32_t token) {
  s->ring->Append(MakeEvent(kind, clock::RawTicks(), call_id, a, b, site_id, k, token,
                            static_cast<uint8_t>(s->generation)));
}

inline const OpenCall* Top(const ThreadState* s) {
  if (s->depth == 0) return nullptr;
  return s->depth <= kMaxDepth ? &s->stack[s->depth - 1] : &s->stack[kMaxDepth - 1];
}

}  // namespace

bool Active() { return g_active.load(std::memory_order_relaxed); }

void Push(uint32_t site_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  const uint64_t id = s->id_base | ++s->local_calls;
  const uint32_t k = 0;  // numbered by the joiner
  const bool is_token = sites::IsToken(site_id);
  uint32_t token;
  if (is_token && s->token_depth == 0) {
    token = g_token.fetch_add(1, std::memory_order_relaxed) + 1;
  } else {
    token = g_token.load(std::memory_order_relaxed);
  }
  if (is_token) ++s->token_depth;
  const OpenCall* parent = Top(s);
  const uint64_t parent_id = parent != nullptr ? parent->call_id : 0;
  if (s->depth < kMaxDepth) {
    s->stack[s->depth] = OpenCall{id, site_id, token, is_token};
  } else {
    g_depth_overflows.fetch_add(1, std::memory_order_relaxed);
  }
  ++s->depth;
  Write(s, EventKind::kPush, id, parent_id, 0, site_id, k, token);
}

void Pop() { PopWithOutput(0); }

void PopWithOutput(uint64_t output) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  if (s->depth == 0) {
    g_unbalanced_pops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  --s->depth;
  if (s->depth >= kMaxDepth) return;  // its push was not stored either
  const OpenCall& c = s->stack[s->depth];
  if (c.is_token && s->token_depth > 0) --s->token_depth;
  Write(s, EventKind::kPop, c.call_id, output, 0, c.site_id, 0, c.token);
}

void Mark(uint32_t site_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  const uint64_t id = s->id_base | ++s->local_calls;
  const OpenCall* parent = Top(s);
  const uint32_t k = 0;  // numbered by the joiner
  Write(s, EventKind::kMark, id, parent != nullptr ? parent->call_id : 0, 0, site_id, k,
        g_token.load(std::memory_order_relaxed));
}

void Launch(uint64_t correlation_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  const OpenCall* top = Top(s);
  Write(s, EventKind::kLaunch, top != nullptr ? top->call_id : 0, correlation_id, 0, 0, 0,
        top != nullptr ? top->token : g_token.load(std::memory_order_relaxed));
}

void GraphLaunch(uint64_t correlation_id, uint32_t graph_exec_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  const OpenCall* top = Top(s);
  uint32_t token;
  // A replay of a graph captured around a token call is itself a token, unless a token call
  // is open right now (then the replay happens inside that token).
  if (s->token_depth == 0 && g_token_execs.Has(graph_exec_id)) {
    token = g_token.fetch_add(1, std::memory_order_relaxed) + 1;
  } else {
    token = top != nullptr ? top->token : g_token.load(std::memory_order_relaxed);
  }
  Write(s, EventKind::kGraphLaunch, top != nullptr ? top->call_id : 0, correlation_id, 0,
        graph_exec_id, 0, token);
}

void Escape(uint64_t correlation_id, EscapeKind kind) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  const OpenCall* top = Top(s);
  Write(s, EventKind::kEscape, top != nullptr ? top->call_id : 0, correlation_id, 0, 0,
        static_cast<uint32_t>(kind),
        top != nullptr ? top->token : g_token.load(std::memory_order_relaxed));
}

void GraphNodeCreated(uint32_t graph_id, uint64_t node_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  if (s->token_depth > 0) g_token_graphs.Add(graph_id);
  const OpenCall* top = Top(s);
  Write(s, EventKind::kGraphNodeCreated, top != nullptr ? top->call_id : 0, node_id, 0, graph_id, 0,
        top != nullptr ? top->token : 0);
}

void GraphNodeCloned(uint64_t original_node_id, uint32_t graph_exec_id, uint64_t node_id) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  Write(s, EventKind::kGraphNodeCloned, 0, original_node_id, node_id, graph_exec_id, 0, 0);
}

void GraphExecCreated(uint32_t graph_id, uint32_t original_graph_id, uint32_t graph_exec_id) {
  if (g_token_graphs.Has(graph_id) || g_token_graphs.Has(original_graph_id)) {
    g_token_execs.Add(graph_exec_id);
  }
}

void GraphCloned(uint32_t original_graph_id, uint32_t clone_graph_id) {
  if (g_token_graphs.Has(original_graph_id)) g_token_graphs.Add(clone_graph_id);
}

namespace {
void WriteOutput(ThreadState* s, uint64_t call_id, uint32_t path_id, uint32_t dtype_id, int ndim,
                 const int64_t* shape) {
  // ndim (bits 24..30 of k, up to 127: torch allows 64) is stored as given, so the joiner
  // can count truncated shapes; bit 31 says the dims are 16 bits each.
  const uint32_t n = ndim < 0 ? 0 : ndim > 127 ? 127 : static_cast<uint32_t>(ndim);
  uint32_t dims[kMaxWideOutputDims] = {};
  bool narrow = n > kMaxWideOutputDims && n <= kMaxOutputDims;
  for (uint32_t i = 0; narrow && i < n; ++i) narrow = shape[i] >= 0 && shape[i] <= 0xffff;
  if (narrow) {
    for (uint32_t i = 0; i < n; ++i) {
      dims[i / 2] |= static_cast<uint32_t>(shape[i]) << (16 * (i % 2));
    }
  } else {
    const uint32_t kept = n > kMaxWideOutputDims ? kMaxWideOutputDims : n;
    for (uint32_t i = 0; i < kept; ++i) {
      dims[i] =
          shape[i] < 0 || shape[i] > 0x7fffffff ? 0x7fffffffu : static_cast<uint32_t>(shape[i]);
    }
  }
  const uint32_t packed = dtype_id | (n << 24) | (narrow ? 0x80000000u : 0u);
  Write(s, EventKind::kOutput, call_id, dims[0] | (static_cast<uint64_t>(dims[1]) << 32),
        dims[2] | (static_cast<uint64_t>(dims[3]) << 32), path_id, packed, dims[4]);
}
}  // namespace

void Output(uint64_t call_id, const char* path, const char* dtype, int ndim, const int64_t* shape) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = State();
  if (s == nullptr) return;
  WriteOutput(s, call_id, sites::Intern(path != nullptr ? path : "", SiteKind::kText),
              sites::Intern(dtype != nullptr ? dtype : "", SiteKind::kText), ndim, shape);
}

void OutputOfCurrent(uint32_t path_id, uint32_t dtype_id, int ndim, const int64_t* shape) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadState* s = t_state;
  if (s == nullptr || s->generation != g_generation.load(std::memory_order_relaxed)) return;
  const OpenCall* top = Top(s);
  if (top == nullptr) return;
  WriteOutput(s, top->call_id, path_id, dtype_id, ndim, shape);
}

void LinksOfCurrent(int n, const uint32_t* slots, const uint64_t* tensors, const uint32_t* shapes) {
  if (!g_active.load(std::memory_order_relaxed) || n <= 0 || slots == nullptr ||
      tensors == nullptr) {
    return;
  }
  ThreadState* s = t_state;
  if (s == nullptr || s->generation != g_generation.load(std::memory_order_relaxed)) return;
  const OpenCall* top = Top(s);
  if (top == nullptr) return;
  // The two entries' shape hashes ride in the event's ticks (a link has no time of its own)
  const auto write = [&](uint64_t a, uint64_t b, uint32_t slot_a, uint32_t slot_b,
                         uint64_t hashes) {
    s->ring->Append(MakeEvent(EventKind::kLink, hashes, top->call_id, a, b, slot_a, slot_b,
                              top->token, static_cast<uint8_t>(s->generation)));
  };
  uint32_t held_slot = kNoLink;  // an entry waiting for a second in its event
  uint64_t held = 0;
  uint32_t held_shape = 0;
  for (int i = 0; i < n; ++i) {
    if (slots[i] == kNoLink) continue;  // no entry's slot (an output's index is below 2^31 - 1)
    const uint32_t shape = shapes != nullptr ? shapes[i] : 0;
    if (held_slot == kNoLink) {
      held_slot = slots[i];
      held = tensors[i];
      held_shape = shape;
      continue;
    }
    write(held, tensors[i], held_slot, slots[i], held_shape | (static_cast<uint64_t>(shape) << 32));
    held_slot = kNoLink;
  }
  if (held_slot != kNoLink) write(held, 0, held_slot, kNoLink, held_shape);
}

CurrentCall Current() {
  CurrentCall c;
  if (!g_active.load(std::memory_order_relaxed)) return c;
  ThreadState* s = t_state;
  if (s == nullptr || s->generation != g_generation.load(std::memory_order_relaxed)) return c;
  const OpenCall* top = Top(s);
  if (top == nullptr) return c;
  c.call_id = top->call_id;
  c.site_id = top->site_id;
  c.token = top->token;
  return c;
}

void BeginSession(uint32_t ring_capacity) {
  g_ring_capacity.store(ring_capacity, std::memory_order_relaxed);
  g_token.store(0, std::memory_order_relaxed);
  g_unbalanced_pops.store(0, std::memory_order_relaxed);
  g_depth_overflows.store(0, std::memory_order_relaxed);
  g_after_thread_exit.store(0, std::memory_order_relaxed);
  g_no_memory.store(0, std::memory_order_relaxed);
  g_token_graphs.Clear();
  g_token_execs.Clear();
  g_generation.fetch_add(1, std::memory_order_release);
  g_active.store(true, std::memory_order_release);
}

void EndSession() { g_active.store(false, std::memory_order_release); }

uint8_t Generation() { return static_cast<uint8_t>(g_generation.load(std::memory_order_acquire)); }

uint64_t TakeUnbalancedPops() { return g_unbalanced_pops.exchange(0); }
uint64_t TakeDepthOverflows() { return g_depth_overflows.exchange(0); }
uint64_t TakeAfterThreadExit() { return g_after_thread_exit.exchange(0); }
uint64_t TakeNoMemory() { return g_no_memory.exchange(0); }

void CountNoMemory(uint64_t n) { g_no_memory.fetch_add(n, std::memory_order_relaxed); }

void BeforeFork() {
  buffers::LockForFork();
  sites::LockForFork();
  clock::LockForFork();
}

void AfterFork() {
  clock::UnlockAfterFork();
  sites::UnlockAfterFork();
  buffers::UnlockAfterFork();
}

void ResetAfterFork() {
  if (t_state != nullptr) {
    t_state->ring = nullptr;  // the registry retired it; a new one is registered lazily
    t_state->depth = 0;
    t_state->token_depth = 0;
  }
  buffers::ResetAllUnsafe();
}

}  // namespace tokentrace::recorder
