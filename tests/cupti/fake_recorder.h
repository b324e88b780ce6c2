// Test-local recorder:: definitions: every hot-path call from src/cupti is appended to a
// vector so tests can assert exactly what the callbacks did. The real recorder (tt_core)
// is never linked into the CUPTI tests.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/records.h"

namespace tokentrace::fake {

struct RecorderCall {
  enum What {
    kLaunch,
    kGraphLaunch,
    kEscape,
    kNodeCreated,
    kNodeCloned,
    kExecCreated,
    kGraphCloned
  } what;
  uint64_t a = 0;  // correlation id / graph id / original node id
  uint64_t b = 0;  // graph exec id / node id / escape kind
  uint64_t c = 0;  // cloned: new node id
};

void SetActive(bool active);
std::vector<RecorderCall> TakeCalls();

}  // namespace tokentrace::fake
