#include "session/drainer.h"

#include <time.h>

#include <algorithm>
#include <new>

#include "core/launch_meta.h"
#include "core/site_registry.h"

namespace tokentrace {

bool Drainer::Drain(bool final, std::string* error) {
  parts_.calibrate();
  // Activities are joined in the last chunk, after every launch event this drain takes (a
  // record in a buffer handed over by now had its launch event written before). Each buffer
  // goes back to CUPTI's pool once walked.
  ActivityHandoff::Taken activities = parts_.activities->Take();
  // The rings go to the file in chunks of at most chunk_events per ring, each written before
  // the next is taken: no batch grows with the rings' size, a kill loses at most one chunk,
  // and a stop requested by a signal waits for one chunk, not for every ring to empty.
  // The test-only slow writer takes one step of each ring per drain, and sleeps.
  const bool slowed = parts_.slow_drain_ms > 0 && !final;
  DrainBudget chunks(
      INT64_MAX, [] { return int64_t{0}; }, slowed ? parts_.step_events : parts_.chunk_events);
  bool ok = true;
  for (;;) {
    bool more = false;
    const uint64_t drained_before = counts_.drained;
    uint64_t no_memory = 0;
    try {
      Batch batch;
      no_memory = AddNoMemory(&batch);
      AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, TakeRings(&batch, &chunks), &batch);
      parts_.added(&batch);
      more = chunks.Again() && !slowed && (final || !parts_.interrupted || !parts_.interrupted());
      if (!more) {
        activities.ForEach([&](const GpuActivity& a) { parts_.joiner->OnActivity(a, &batch); });
        if (final) {
          parts_.joiner->Finish(&batch);
        } else {
          parts_.joiner->EndDrain(&batch);
        }
        AddLoss(TOKENTRACE_LOSS_CUPTI_DROPPED, parts_.activities->TakeDropped(), &batch);
        TakeLosses(parts_.loss_sources, &batch);
      }
      std::string chunk_error;
      if (!Write(batch, &chunk_error)) {  // counted (Unwritten) and retried with the next write
        if (ok) *error = chunk_error;
        ok = false;
      }
      no_memory_ -= no_memory;  // in the file, or kept by Unwritten with the batch's losses
    } catch (const std::bad_alloc&) {
      // The chunk is dropped: its events are counted, and the next drain (the loop's next
      // turn) tries again with what the rings hold then.
      no_memory_ += std::max<uint64_t>(1, counts_.drained - drained_before);
      if (ok) error->clear();  // no memory to say more; the loop says the count at exit
      ok = false;
      break;
    }
    if (!more) break;
  }
  if (slowed) SleepSlow();
  return ok;
}

uint64_t Drainer::AddNoMemory(Batch* batch) {
  const uint64_t n = no_memory_;
  if (n > 0) AddLoss(TOKENTRACE_LOSS_NO_MEMORY, n, batch);
  return n;
}

uint64_t Drainer::TakeRings(Batch* batch, DrainBudget* budget) {
  const uint8_t generation = parts_.generation();
  uint64_t dropped = 0;
  parts_.rings([&](ThreadBuffer& ring) {
    auto on_event = [&](const Event& e) {
      if (e.generation != generation) return;
      try {
        parts_.joiner->OnEvent(ring.thread_index(), e, batch);
      } catch (const std::bad_alloc&) {
        ++no_memory_;  // the ring moves on: this event is dropped, never read twice
      }
    };
    counts_.drained += budget != nullptr ? budget->Take(ring, on_event) : ring.Drain(on_event);
    dropped += ring.TakeDropped();
  });
  counts_.dropped += dropped;
  return dropped;
}

void Drainer::DrainSteps(DrainBudget* budget) {
  const auto step = [&] {
    const uint64_t drained_before = counts_.drained;
    try {
      Batch batch;
      const uint64_t no_memory = AddNoMemory(&batch);
      AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, TakeRings(&batch, budget), &batch);
      parts_.added(&batch);
      const uint64_t left = budget->TakeLeft();
      counts_.left += left;
      AddLoss(TOKENTRACE_LOSS_SIGNAL_DEADLINE, left, &batch);
      parts_.joiner->EndDrain(&batch);
      std::string error;
      Write(batch, &error);  // a failed write is counted (Unwritten) and retried at the end
      no_memory_ -= no_memory;
    } catch (const std::bad_alloc&) {
      no_memory_ += std::max<uint64_t>(1, counts_.drained - drained_before);
    }
  };
  budget->Run(step, [&] { SleepSlow(); });
}

bool Drainer::Write(Batch& batch, std::string* error) {
  // Sites are emitted only once the file exists (preload creates it on first use).
  const bool has_work = !batch.calls.empty() || !batch.kernels.empty() || !batch.escapes.empty() ||
                        !batch.outputs.empty() || !batch.links.empty() || !batch.call_gpu.empty() ||
                        !batch.added.empty() || !batch.losses.empty();
  if (!store_) {
    if (!has_work) return true;
    store_ = parts_.open_store(error);
    if (!store_) {
      unwritten_.Add(std::move(batch));
      return false;
    }
    meta_written_ = false;
  }
  if (!meta_written_) {  // the session's first, before any the batch carries (handed over)
    MetaRowList first = parts_.meta(counts_);
    batch.meta.insert(batch.meta.begin(), first.begin(), first.end());
    meta_written_ = true;
  }
  for (uint32_t id : parts_.joiner->TakeNewSites()) batch.sites.push_back(sites::Row(id));
  unwritten_.MoveInto(&batch);
  if (batch.empty()) return true;
  // The periodic clock anchor rides on batches that are written anyway (launch_meta.h).
  batch.meta.emplace_back(kMetaAnchorLast, FormatAnchor(TakeClockAnchor()));
  const bool written = store_->Write(batch, error);
  if (std::string notice = store_->TakeNotice(); !notice.empty()) parts_.say(notice);
  if (written) {
    unwritten_.Written(batch);
    return true;
  }
  // A full disk (or another write error): the rows are counted and the counts retried with
  // the next write. The background loop says it once.
  *error += "; what cannot be written is counted in the file's losses (write_failed_*)";
  unwritten_.Add(std::move(batch));
  return false;
}

bool Drainer::WriteFinal(const MetaRowList& extra_meta, std::string* error) {
  bool ok = Drain(true, error);  // closes open calls (counted as unclosed_range)
  try {
    Batch meta;
    AddNoMemory(&meta);
    meta.meta = parts_.meta(counts_);  // the final kernels status
    meta.meta.insert(meta.meta.end(), extra_meta.begin(), extra_meta.end());
    meta.meta.emplace_back(kMetaAnchorExit, FormatAnchor(TakeClockAnchor()));
    std::string meta_error;
    if (store_ && !Write(meta, &meta_error)) {
      if (ok) *error = meta_error;
      ok = false;
    }
    no_memory_ = 0;  // in the file, or kept by Unwritten for the write below
  } catch (const std::bad_alloc&) {
    ok = false;  // the file is left unclosed (no exit anchor): readers say it was not finished
  }
  if (!unwritten_.empty() && store_) {
    // Still no room for the rows: the smallest write, the counts alone, into the space the
    // store set aside for it if need be.
    try {
      Batch losses = unwritten_.LossesOnly();
      AddNoMemory(&losses);
      std::string ignored;
      if (store_->Write(losses, &ignored) ||
          (store_->ReleaseReserve() && store_->Write(losses, &ignored))) {
        unwritten_ = Unwritten();
        no_memory_ = 0;
      } else {
        *error = "tokentrace: '" + store_->path() + "' misses " +
                 std::to_string(unwritten_.calls()) +
                 " calls that could not be written, and cannot say so itself (" + ignored + ")";
      }
    } catch (const std::bad_alloc&) {
      ok = false;
    }
  }
  return ok;
}

void Drainer::SleepSlow() const {
  const int ms = parts_.slow_drain_ms;
  if (ms <= 0) return;
  const timespec t{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, nullptr);
}

}  // namespace tokentrace
