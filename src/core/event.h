// The fixed-size record the hot path writes into a thread's ring.
//
// clang-format off
//   offset  field      push/mark        pop        launch/escape/graph launch   node created / cloned
//   0       ticks      raw clock ticks (core/clock.h), converted on the background thread
//   8       call_id    the new call     the call   innermost open call (0 none) innermost open call
//   16      a          parent call id   output 0 *   correlation id               node id / original node id
//   24      b          -                -          -                            - / new node id
//   32      site_id    site             site       graph exec id (graph launch) graph id / graph exec id
//   36      k          0 (see below)    -          escape kind (escape)         -
//   40      token      token            -          token                        token
//   44      kind       EventKind
//   45      generation low 8 bits of the session generation (stale events are skipped)
// clang-format on
// * A pop's a: the identity of an op's output tensor 0 (op data flow; recorder::PopWithOutput),
// or 0.
// A push or mark writes k = 0: calls are numbered per site by the joiner (core/joiner.h), on
// the background thread, so the hot path needs no per-site counter.
#pragma once

#include <cstdint>

namespace tokentrace {

enum class EventKind : uint8_t {
  kPush = 1,
  kPop = 2,
  kMark = 3,
  kLaunch = 4,
  kGraphLaunch = 5,
  kEscape = 6,
  kGraphNodeCreated = 7,
  kGraphNodeCloned = 8,
  kOutput = 9,  // call_id; a = dims 0,1 and b = dims 2,3 (int32 pairs); token = dim 4;
                // site_id = path text id; k = dtype text id | ndim << 24
  kLink = 10,   // call_id; a, b = two tensors' identities (TensorImpl addresses); site_id,
                // k = their slots (recorder.h kLinkOutput, kNoLink: b holds none); ticks =
                // their shape hashes (a's in the low 32 bits; 0: none), not a time
};

struct Event {
  uint64_t ticks;
  uint64_t call_id;
  uint64_t a;
  uint64_t b;
  uint32_t site_id;
  uint32_t k;
  uint32_t token;
  EventKind kind;
  uint8_t generation;
  uint8_t pad[2];
};
static_assert(sizeof(Event) == 48, "Event layout is part of the ring's cost model");

// One event, every field given (padding zeroed): the hot path's writer and the tests and
// benches that fabricate events all build them here. Fields an event kind does not use are 0.
inline Event MakeEvent(EventKind kind, uint64_t ticks, uint64_t call_id, uint64_t a, uint64_t b,
                       uint32_t site_id, uint32_t k, uint32_t token, uint8_t generation) {
  return Event{ticks, call_id, a, b, site_id, k, token, kind, generation, {0, 0}};
}

}  // namespace tokentrace
