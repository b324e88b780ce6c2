// Writer of a tokentrace file (schema: schema.sql). Owned by the background thread: one Store per
// output file, used from one thread at a time, never from the hot path.
//
// Durability: WAL mode with synchronous=NORMAL. Every Write() is one transaction, so after a
// crash (or SIGKILL) a reader sees every committed batch and nothing of a half-written one;
// at most the batches not yet handed to Write() are lost. Other processes can read the file
// while it is being written.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/records.h"
#include "store/summaries.h"
#include "store/token_digest.h"

struct sqlite3;

namespace tokentrace {

class Statement;

// The directory a file path names ("." for a bare name, "/" for a file in the root).
std::string DirOf(const std::string& path);

class Store {
 public:
  // Creates (or truncates) the file at `path`; the parent directory must exist. Applies the
  // schema and writes meta.schema_version. On failure returns nullptr and a one-line message
  // "tokentrace: cannot write '<path>': <reason>" in *error.
  static std::unique_ptr<Store> Open(const std::string& path, std::string* error);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Writes the batch in one transaction (prepared statements are reused across calls), with
  // the summaries it adds to (store/summaries.h). On failure rolls the batch back and
  // returns false with a one-line message.
  bool Write(const Batch& batch, std::string* error);

  // True while a Store of some process has `path` open: a writer holds a shared flock on its
  // file for its whole life (readers take none). Open refuses to replace such a file.
  static bool BeingWritten(const std::string& path);

  // Folds the WAL into the main file as far as readers allow (a passive checkpoint): run on
  // a schedule, so a copy of the main file alone, or one whose -wal was lost after the
  // writer was killed, still holds all but the last moments.
  void Checkpoint();

  // A full disk must still take the loss counts at the end. Open sets aside kReserveBytes of
  // disk (an anonymous file in the trace's directory, gone with the process); this gives
  // them back, for the last, smallest write. False when there was no reserve.
  static constexpr off_t kReserveBytes = 256 << 10;  // a few 16 KiB WAL frames, with margin
  bool ReleaseReserve();

  // Final checkpoint (the WAL is folded into the main file and truncated) and close.
  // Idempotent; the destructor calls it.
  void Close();

  const std::string& path() const { return path_; }

  // What happened to the file that the job should hear of, said once ("" when nothing):
  // the file was deleted while being written and was written again at its path.
  std::string TakeNotice() { return std::move(notice_); }

 private:
  struct Statements;
  // A descriptor of the file (SQLite's database, -wal and -shm ones, the lock, the reserve)
  // and the file it named when opened.
  struct Held {
    int fd;
    dev_t dev;
    ino_t ino;
  };
  explicit Store(std::string path);
  // Opens the connection to path_ (the file exists or is created), applies the schema,
  // prepares the statements, takes the lock and the reserve, and guards the descriptors.
  bool Connect(std::string* error);
  bool Prepare(std::string* error);
  bool WriteRows(const Batch& batch, std::string* error);
  // The Python layer's rows of one table (a statement prepared once per table and columns).
  bool WriteAdded(const AddedRows& rows, std::string* error);
  // The summaries of the batch just folded (store/summaries.h), in its transaction.
  bool WriteSummaries(std::string* error);
  // Before each use of the connection: its descriptors still name its files (else the
  // connection is abandoned, never touched again, and false), and a file deleted from its
  // directory is written again at its path (false when that fails).
  bool CheckFiles(std::string* error);
  // The descriptors still name their files (else Abandon and false); *deleted: the file is
  // no longer in its directory.
  bool Intact(bool* deleted);
  // Finds the descriptors Connect opened (those naming the file that `before` lacks).
  void HoldDescriptors(const std::vector<int>& before);
  std::vector<int> DescriptorsOfPath() const;
  // The connection's descriptors were closed or reused by the job: leaves them and the
  // connection as they are (closing them would close the job's files).
  void Abandon(const std::string& why);
  bool WriteAgainAtPath(std::string* error);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Statements> st_;
  std::unique_ptr<Summaries> summaries_;      // what the file's summaries need between batches
  std::unique_ptr<TokenDigestDelta> digest_;  // a batch's difference to the token digest
  std::vector<TokenRowState> digest_before_, digest_after_;  // its token_stats rows
  std::vector<TokenRowState> digest_reread_;                 // (those updated, read back)
  std::vector<std::pair<uint32_t, Summaries::TokenDelta>> digest_updated_;
  int64_t slowest_floor_ns_ = -1;  // token_slowest's entry bar (store.cc); -1: read it again
  uint32_t slowest_floor_token_ = UINT32_MAX;
  int reserve_fd_ = -1;
  int lock_fd_ = -1;  // the shared flock that says "being written" (BeingWritten)
  std::vector<Held> held_;
  std::string lost_;  // why the file cannot be written any more ("" while it can)
  std::string notice_;
};

}  // namespace tokentrace
