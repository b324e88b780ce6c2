#include "session/drainer.h"

#include <time.h>

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
    Batch batch;
    AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, TakeRings(&batch, &chunks), &batch);
    const bool more =
        chunks.Again() && !slowed && (final || !parts_.interrupted || !parts_.interrupted());
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
    if (!more) break;
  }
  if (slowed) SleepSlow();
  return ok;
}

uint64_t Drainer::TakeRings(Batch* batch, DrainBudget* budget) {
  const uint8_t generation = parts_.generation();
  uint64_t dropped = 0;
  parts_.rings([&](ThreadBuffer& ring) {
    auto on_event = [&](const Event& e) {
      if (e.generation == generation) parts_.joiner->OnEvent(ring.thread_index(), e, batch);
    };
    counts_.drained += budget != nullptr ? budget->Take(ring, on_event) : ring.Drain(on_event);
    dropped += ring.TakeDropped();
  });
  counts_.dropped += dropped;
  return dropped;
}

void Drainer::DrainSteps(DrainBudget* budget) {
  const auto step = [&] {
    Batch batch;
    AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, TakeRings(&batch, budget), &batch);
    const uint64_t left = budget->TakeLeft();
    counts_.left += left;
    AddLoss(TOKENTRACE_LOSS_SIGNAL_DEADLINE, left, &batch);
    parts_.joiner->EndDrain(&batch);
    std::string error;
    Write(batch, &error);  // a failed write is counted (Unwritten) and retried at the end
  };
  budget->Run(step, [&] { SleepSlow(); });
}

bool Drainer::Write(Batch& batch, std::string* error) {
  // Sites are emitted only once the file exists (preload creates it on first use).
  const bool has_work = !batch.calls.empty() || !batch.kernels.empty() || !batch.escapes.empty() ||
                        !batch.outputs.empty() || !batch.links.empty() || !batch.call_gpu.empty() ||
                        !batch.losses.empty();
  if (!store_) {
    if (!has_work) return true;
    store_ = parts_.open_store(error);
    if (!store_) {
      unwritten_.Add(std::move(batch));
      return false;
    }
    meta_written_ = false;
  }
  if (!meta_written_) {
    batch.meta = parts_.meta(counts_);
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
  Batch meta;
  meta.meta = parts_.meta(counts_);  // the final kernels status
  meta.meta.insert(meta.meta.end(), extra_meta.begin(), extra_meta.end());
  meta.meta.emplace_back(kMetaAnchorExit, FormatAnchor(TakeClockAnchor()));
  std::string meta_error;
  if (store_ && !Write(meta, &meta_error)) {
    if (ok) *error = meta_error;
    ok = false;
  }
  if (!unwritten_.empty() && store_) {
    // Still no room for the rows: the smallest write, the counts alone, into the space the
    // store set aside for it if need be.
    Batch losses = unwritten_.LossesOnly();
    std::string ignored;
    if (store_->Write(losses, &ignored) ||
        (store_->ReleaseReserve() && store_->Write(losses, &ignored))) {
      unwritten_ = Unwritten();
    } else {
      *error = "tokentrace: '" + store_->path() + "' misses " + std::to_string(unwritten_.calls()) +
               " calls that could not be written, and cannot say so itself (" + ignored + ")";
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
