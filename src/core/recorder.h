// The hot path: what NVTX handlers, CUPTI callbacks and the C API call on the job's threads.
//
// Every function here is lock-free, allocation-free and I/O-free after a thread's first call
// (which registers the thread's ring buffer once). Each call appends one fixed-size Event to
// the calling thread's own ring (core/thread_buffer.h); when the ring is full the event is
// dropped and counted. All joining happens later on the background thread (core/joiner.h).
//
// Re-entrancy: entry points called by foreign libraries must not re-enter; each is guarded
// by a thread-local flag (a CUPTI callback fired from inside our own CUDA call is ignored).
#pragma once

#include <cstdint>

#include "core/records.h"

namespace tokentrace::recorder {

// True while a session is recording. Cheap (one relaxed atomic load).
bool Active();

// Opens a call of `site_id` (from sites::Intern*) on this thread.
void Push(uint32_t site_id);
// Closes this thread's innermost call. With no open call, counts an "unbalanced_pop" loss.
void Pop();
// The same for an op of op records whose output 0 is the tensor of identity `output` (its
// data flow, as LinksOfCurrent's entry kLinkOutput | 0 would say, in the pop's event: one
// event fewer an op). 0: none.
void PopWithOutput(uint64_t output);
// A named NVTX mark: recorded as a zero-length call of the site.
void Mark(uint32_t site_id);

// CUPTI launch callback (API entry on the launching thread): remembers which call and token
// the correlation id belongs to.
void Launch(uint64_t correlation_id);
// cudaGraphLaunch / cuGraphLaunch on this thread. If the graph was captured around a token
// site (see GraphNodeCreated), the launch starts a new token itself.
void GraphLaunch(uint64_t correlation_id, uint32_t graph_exec_id);
// The host read or waited for device state inside the current call.
void Escape(uint64_t correlation_id, EscapeKind kind);
// CUPTI resource callback: a node was added to `graph_id` on this thread (during stream
// capture or explicit construction); the innermost open call owns the node.
void GraphNodeCreated(uint32_t graph_id, uint64_t node_id);
// CUPTI resource callback: instantiation cloned `original_node_id` into `node_id` of
// `graph_exec_id`; the clone inherits the original's call.
void GraphNodeCloned(uint64_t original_node_id, uint32_t graph_exec_id, uint64_t node_id);

// CUPTI resource callback: `graph_exec_id` was instantiated from `graph_id` (and CUPTI's
// `original_graph_id`, when it reports the graph as a clone; 0 if not). An exec made from a
// graph captured inside a token call, or from a clone of one, is a token graph: each launch
// is one token.
void GraphExecCreated(uint32_t graph_id, uint32_t original_graph_id, uint32_t graph_exec_id);
// CUPTI resource callback: `clone_graph_id` was cloned from `original_graph_id` (a clone of
// a token graph is one too).
void GraphCloned(uint32_t original_graph_id, uint32_t clone_graph_id);

// The Python hooks saw `call_id`'s first output tensor: its path in the output, dtype and
// shape. The event holds 5 dims of 32 bits, or up to kMaxOutputDims dims when every one is
// below 65536 (16 bits each); a shape that fits neither keeps its first 5 dims and is
// counted as "output_dims_truncated". Strings are interned (lock-free once known), so a
// call costs no allocation.
constexpr int kMaxWideOutputDims = 5;
constexpr int kMaxOutputDims = 10;
void Output(uint64_t call_id, const char* path, const char* dtype, int ndim, const int64_t* shape);
// The same for the innermost open call on this thread, with the path and dtype already
// interned (sites::Intern(..., SiteKind::kText)): the Python hooks' per-call path, which
// costs no string work. Nothing is recorded when no call is open.
void OutputOfCurrent(uint32_t path_id, uint32_t dtype_id, int ndim, const int64_t* shape);
// The tensors the innermost open call on this thread (an op of op records) read or returned,
// by identity (the TensorImpl address): entry i is tensors[i] in slots[i], an argument's
// index (a list's tensors share their argument's), or kLinkOutput | an output's index, with
// shapes[i] a hash of an input's shape (0: not known; shapes may be null). Two entries go in
// one event (their shape hashes in its ticks). The reader joins an input to the op that last
// returned the same tensor (op data flow). Nothing when no call is open; n <= 0 or null
// slots or tensors: nothing.
constexpr uint32_t kLinkOutput = TOKENTRACE_LINK_OUTPUT;
constexpr uint32_t kNoLink = 0xffffffffu;  // an event's second slot when it holds one entry
void LinksOfCurrent(int n, const uint32_t* slots, const uint64_t* tensors, const uint32_t* shapes);

// Innermost open call on this thread (0 = none) and its token. For the Python layer.
// There is no call number k here: calls are numbered per site by the background thread
// (core/joiner.cc), as the hot path keeps no shared per-site counter.
struct CurrentCall {
  uint64_t call_id = 0;
  uint32_t site_id = 0;
  uint32_t token = 0;
};
CurrentCall Current();

// ---- Session control (preload/session.cc); not for the hot path ----
// Starts recording with fresh counters (call ids, per-site k, tokens) and a new generation.
void BeginSession(uint32_t ring_capacity);
// Stops recording; events already in rings stay there for the final drain.
void EndSession();
// Low 8 bits of the current session generation (events carry it).
uint8_t Generation();
// Pops with no open call, ranges deeper than the stack limit (since the last call).
uint64_t TakeUnbalancedPops();
uint64_t TakeDepthOverflows();
// Events dropped because their thread's thread-local state was already destroyed: an NVTX
// range or a launch from a thread-local object's destructor that runs after ours. (The
// main thread keeps its state to the end, for atexit handlers and static destructors.)
uint64_t TakeAfterThreadExit();
// Events dropped because a thread's state or ring could not be allocated (no_memory).
uint64_t TakeNoMemory();
// Counts `n` more of them (rows handed to the writer that could not be copied).
void CountNoMemory(uint64_t n);
// Around fork() (pthread_atfork, in the forking thread): BeforeFork takes the core's locks
// (ring registry, site registry, clock), so no other thread holds one half-way through an
// update when the child is made; AfterFork releases them, in the parent and in the child.
void BeforeFork();
void AfterFork();
// In a fork child, after AfterFork: forget the parent's open calls and rings (only the forking
// thread exists).
void ResetAfterFork();

}  // namespace tokentrace::recorder
