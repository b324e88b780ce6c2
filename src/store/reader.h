// Read-side queries over a tokentrace file, used by the CLI (report, export, info) and tests.
//
// Open() accepts a file that is still being written (WAL) and one whose writer was killed.
// Every query returns false with a one-line "tokentrace: ..." message instead of throwing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "store/statement.h"
#include "store/token_digest.h"

struct sqlite3;

namespace tokentrace {

struct TokenStat {
  uint32_t token = 0;
  int64_t cpu_begin_ns = 0;
  int64_t cpu_end_ns = -1;  // -1: the token's root call never closed
  int64_t kernels = 0;
  int64_t gpu_busy_ns = 0;
  int64_t escapes = 0;
  bool graph_replay = false;  // no token call of its own: a CUDA-graph replay (one launch)
};

// One ATen op's outermost calls (op records), split by phase: token 1 (prefill) and the
// tokens after it (decode).
struct OpPhases {
  std::string name;
  int64_t prefill_calls = 0, prefill_cpu_ns = 0, prefill_gpu_ns = 0;
  int64_t decode_calls = 0, decode_cpu_ns = 0, decode_gpu_ns = 0;
};

// GPU time attributed to the calls of one site (self time: kernels go to the innermost call).
struct SiteGpu {
  std::string name;  // "(outside any call)" for call id 0
  std::string kind;
  int64_t calls = 0;
  int64_t kernels = 0;
  int64_t gpu_busy_ns = 0;
  int64_t cpu_self_ns = 0;  // closed calls' host time minus their children's
};

// What ran before the first token (token 0): the outermost module calls made before the
// root's first call (an encoder-decoder's encoder, a module the job called by hand).
struct BeforeTokens {
  int64_t calls = 0;
  int64_t cpu_ns = 0;  // their closed calls' host time
  int64_t kernels = 0;
  int64_t gpu_busy_ns = 0;
  std::string sites;  // the first few of their site names, comma-separated
};

// The writer's token digest (store/token_digest.h), as read: per phase (0 = token 0, 1 =
// token 1, 2 = tokens >= 2) the totals and the CPU (closed tokens) and GPU busy histograms
// ((bucket, count), in bucket order), and the slowest tokens, slowest first.
struct TokenDigestRead {
  TokenTotals totals[3];
  std::vector<std::pair<int64_t, int64_t>> cpu[3], gpu[3];
  std::vector<uint32_t> slowest;
  int64_t tokens() const { return totals[0].tokens + totals[1].tokens + totals[2].tokens; }
};

struct TraceCounts {
  int64_t sites = 0, calls = 0, kernels = 0, tokens = 0, escapes = 0, strings = 0;
};

// One call as export needs it.
struct CallEvent {
  uint64_t id = 0;
  std::string site;  // site name
  uint32_t k = 0;
  uint32_t token = 0;
  uint32_t thread = 0;
  int64_t cpu_begin_ns = 0;
  int64_t cpu_end_ns = -1;
  bool is_token = false;  // a call of the token site (the root): one token
};

// One kernel / memcpy / memset row as export needs it.
struct KernelEvent {
  std::string name;  // the interned name, or "" when the string is missing
  std::string call;  // "site:k" of the launching call, "" outside any call
  int kind = 0;      // GpuOpKind value
  uint32_t token = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  int64_t gpu_begin_ns = 0;
  int64_t gpu_end_ns = 0;
  uint64_t correlation_id = 0;
};

// A token's generated text as token_text holds it (the first sequence's), and its batch.
struct TokenText {
  int64_t id = -1;        // the token id; -1: none (the prompt's row)
  bool has_text = false;  // a tokenizer was known: `text` is its text
  std::string text;
  uint32_t sequences = 0;  // sequences with a row for this token
};

class Reader {
 public:
  // Errors (one line): missing file, not a SQLite file, not a tokentrace file, a schema
  // version outside kOldestReadableSchema..kSchemaVersion.
  static std::unique_ptr<Reader> Open(const std::string& path, std::string* error);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool Meta(std::vector<std::pair<std::string, std::string>>* out, std::string* error);
  bool Losses(std::vector<std::pair<std::string, int64_t>>* out, std::string* error);
  bool Counts(TraceCounts* out, std::string* error);
  // One row per call of a token site, ordered by token.
  bool Tokens(std::vector<TokenStat>* out, std::string* error);
  // The same rows of tokens [first, last], one at a time (a long run's tokens are never all
  // held; with summaries a window reads only its rows).
  // limit >= 0: the first `limit` of them only.
  bool ForEachToken(uint32_t first, uint32_t last, const std::function<void(const TokenStat&)>& fn,
                    std::string* error, int64_t limit = -1);
  // The token digest; only for a file that has one (has_digest()).
  bool Digest(TokenDigestRead* out, std::string* error);
  // Sites by GPU self time, descending (then CPU self time); the call-0 bucket is included
  // when it has kernels. Sites without GPU work are listed too, after those with. Read from
  // the summaries where the file has them, else one scan of the calls.
  bool TopSites(int limit, std::vector<SiteGpu>* out, std::string* error);
  // The same over the calls of tokens [first, last] only (a scan of those tokens' calls; the
  // call-0 bucket, kept for the whole run, is left out).
  bool TopSitesOf(uint32_t first, uint32_t last, int limit, std::vector<SiteGpu>* out,
                  std::string* error);
  bool Before(BeforeTokens* out, std::string* error);
  // Op sites (kind "op") by decode GPU then decode CPU time, then prefill CPU time; outermost
  // op calls only (an op's inner ops count towards it), of tokens [first, last] (token 0
  // never counts). Empty without op records (then nothing is scanned).
  bool TopOps(int limit, std::vector<OpPhases>* out, std::string* error, uint32_t first = 1,
              uint32_t last = UINT32_MAX);
  // The text of the tokens in `tokens` (token_text, schema 8): their first sequence's id and
  // text, and how many sequences the token has; token 0 is the prompt. Tokens without rows are
  // left out (an older file, or a job whose root read no token ids).
  bool TokenTexts(const std::vector<uint32_t>& tokens, std::map<uint32_t, TokenText>* out,
                  std::string* error);
  // The same for every token in [first, last].
  bool TokenTextsIn(uint32_t first, uint32_t last, std::map<uint32_t, TokenText>* out,
                    std::string* error);
  // Sequence 0's generated text, in token order (the tokens' texts joined), at most
  // `max_bytes` of it (*more: there was more); "" when the file has none.
  bool GeneratedText(size_t max_bytes, std::string* text, bool* more, std::string* error);
  // Earliest call begin or GPU begin among tokens [first, last]; false in *found when none.
  bool FirstTimestamp(uint32_t first, uint32_t last, int64_t* ns, bool* found, std::string* error);
  // Streams calls / GPU rows whose token is in [first, last], in storage order.
  bool ForEachCall(uint32_t first, uint32_t last, const std::function<void(const CallEvent&)>& fn,
                   std::string* error);
  bool ForEachKernel(uint32_t first, uint32_t last,
                     const std::function<void(const KernelEvent&)>& fn, std::string* error);

  const std::string& path() const { return path_; }
  // The schema version that wrote the file (meta.schema_version): 1 has no call_inputs.
  int schema_version() const { return schema_version_; }
  // True when the writer kept summaries in the file (meta.summaries: store/summaries.h), so
  // tokens, sites and counts are read from them instead of scanning the calls.
  bool has_summaries() const { return has_summaries_; }
  // True when the writer also kept the token digest (schema 5 and later, with summaries), so
  // the report of a long run reads it instead of one row per token.
  bool has_digest() const;
  // The calls of tokens between the SQL expressions `a` and `b` (parameters or literals), as a
  // subquery "(SELECT * FROM calls WHERE ...)": with summaries a range of the calls' rowids
  // (token_stats' first and last call ids: schema 4 files have no index on calls), else
  // through calls_by_token.
  std::string CallsOfTokens(const std::string& a, const std::string& b) const;
  // For a file written before summaries (schema < 4): one line saying it is read by scanning
  // its calls, which takes time with its size; "" otherwise (a file built by hand without
  // summaries is scanned too, silently).
  std::string ScanNotice() const;
  // True when the writer never closed the file (no clock_anchor_exit in its meta) and no -wal
  // is beside it: a copy made without its write-ahead log, whose rows written after the last
  // checkpoint (about the last second of the run) are not in it, uncounted.
  bool misses_its_wal() const { return misses_its_wal_; }
  // The one query skeleton of the readers: prepares `sql`, lets `bind` bind its parameters,
  // calls `row` for each row, and says a failure in one line naming the file. For the
  // readers here and their callers (the CLI's serving report, src/multi).
  bool Rows(const std::string& sql, const std::function<void(Statement&)>& bind,
            const std::function<void(const Statement&)>& row, std::string* error);
  bool Rows(const std::string& sql, const std::function<void(const Statement&)>& row,
            std::string* error) {
    return Rows(sql, nullptr, row, error);
  }
  // Whether the file has table `name` (older files lack the newer tables).
  bool HasTable(const std::string& name, std::string* error, bool* present);
  // The open connection, for cross-file readers (src/multi) that stream their own queries.
  sqlite3* db() const { return db_; }

 private:
  Reader(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  std::string Fail(const std::string& what) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  // The -shm this reader made beside a -wal (a killed writer's file): removed at close when
  // no writer has the file, so the reader leaves the files as it found them.
  bool made_shm_ = false;
  int schema_version_ = 0;
  bool has_summaries_ = false;
  bool misses_its_wal_ = false;
};

// The value of `key` in the meta table of the trace file at `path` ("" when there is no such
// file, or no such key). False when a file is there but its meta could not be read (not a
// tokentrace file, or locked past the busy timeout).
bool ReadMetaValue(const std::string& path, const std::string& key, std::string* value);

}  // namespace tokentrace
