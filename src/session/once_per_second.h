// The background loop's flush policy: the loop turns every TOKENTRACE_FLUSH_MS (1 to 1000 ms,
// sooner when woken) and drains each turn; work that costs more than a drain is done on
// about every second's worth of turns instead: flushing CUPTI's partly filled activity
// buffers (it hands one over only when it is full, 1 MB, or flushed) and checkpointing the
// WAL into the main file (so a killed job's .sqlite copied alone still holds its data).
#pragma once

namespace tokentrace {

class OncePerSecond {
 public:
  explicit OncePerSecond(int turn_ms) : turn_ms_(turn_ms > 0 ? turn_ms : 1) {}

  // Counts one turn; true on the turn that completes a second's worth (then starts over).
  bool Turn() {
    if (++turns_ * turn_ms_ < 1000) return false;
    turns_ = 0;
    return true;
  }

 private:
  const int turn_ms_;
  int turns_ = 0;
};

}  // namespace tokentrace
