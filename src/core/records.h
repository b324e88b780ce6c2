// Plain records that cross module boundaries inside libtokentrace.
//
// These structs are the contract between the hardware seams (src/nvtx, src/cupti), the
// background joiner (src/core/joiner.*) and the SQLite store (src/store). None of them
// mentions a CUDA, CUPTI or NVTX type, so every consumer is testable with hand-built values.
//
// Clock: every *_ns field is nanoseconds on one host clock (core/clock.h, HostNowNs()).
// Tokens are 1-based (token 1 = the prefill); token 0 means "before the first token".
// Call ids are 1-based; call id 0 means "no open call" (e.g. a kernel launched outside any
// range).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tokentrace/kinds.h"

namespace tokentrace {

// Values and names of site, escape and loss kinds are include/tokentrace/kinds.h's.
enum class SiteKind : uint8_t {
  kRoot = TOKENTRACE_SITE_ROOT,      // our hooks' root module call (`self`): one call = one token
  kModule = TOKENTRACE_SITE_MODULE,  // one of our hooks' module calls
  kRange = TOKENTRACE_SITE_RANGE,    // a named NVTX range from any other producer
  kOp = TOKENTRACE_SITE_OP,          // an ATen op (op records: cuda/torch/op_observer.cc)
  kText = 4,  // not a site: a short string interned for output records (paths, dtypes)
};
const char* SiteKindName(SiteKind kind);  // "root" | "module" | "range" | "op"

enum class GpuOpKind : uint8_t { kKernel = 0, kMemcpy = 1, kMemset = 2 };
const char* GpuOpKindName(GpuOpKind kind);  // "kernel" | "memcpy" | "memset"

// Where the host waited for, or read, device state.
enum class EscapeKind : uint8_t {
  kMemcpyDtoHSync = TOKENTRACE_ESCAPE_MEMCPY_DTOH_SYNC,
  kStreamSync = TOKENTRACE_ESCAPE_STREAM_SYNC,
  kDeviceSync = TOKENTRACE_ESCAPE_DEVICE_SYNC,
  kEventSync = TOKENTRACE_ESCAPE_EVENT_SYNC,
  kHostRead = TOKENTRACE_ESCAPE_HOST_READ,
};
const char* EscapeKindName(EscapeKind kind);

// A loss kind (tokentrace_loss_kind); its name is the key in the losses table.
using LossKind = tokentrace_loss_kind;
const char* LossKindName(LossKind kind);

// One GPU activity record as the CUPTI adapter hands it over (converted at the boundary).
struct GpuActivity {
  GpuOpKind kind = GpuOpKind::kKernel;
  uint64_t correlation_id = 0;
  int64_t begin_ns = 0;  // already on the host clock
  int64_t end_ns = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint32_t graph_id = 0;       // 0 when not launched from a CUDA graph
  uint64_t graph_node_id = 0;  // 0 when not launched from a CUDA graph
  uint64_t bytes = 0;          // memcpy / memset only
  const char* name = nullptr;  // kernel name (valid only during the call that delivers it);
                               // memcpy/memset: nullptr (the joiner names them)
  uint8_t copy_kind = 0;       // memcpy: 1 HtoD, 2 DtoH, 8 DtoD, 0 other
  bool timed = true;           // false: CUPTI could not time it (start 0, or end < start);
                               // the joiner counts it as "gpu_time_missing" and drops it
};

// ---- Rows for the store (produced by the joiner, consumed by src/store) ----

struct SiteRow {
  uint32_t id = 0;
  std::string name;
  SiteKind kind = SiteKind::kRange;
  bool is_token = false;  // calls of this site are token boundaries
};

struct StringRow {
  uint32_t id = 0;
  std::string text;
};

struct CallRow {
  uint64_t id = 0;
  uint32_t site_id = 0;
  uint32_t k = 0;  // 1-based call index within the site
  uint32_t token = 0;
  uint64_t parent_id = 0;  // 0 = no parent
  uint32_t thread = 0;     // small per-process thread index (0, 1, ...)
  int64_t cpu_begin_ns = 0;
  int64_t cpu_end_ns = -1;  // -1: still open when the process ended (counted as a loss kind)
};

struct KernelRow {
  uint64_t call_id = 0;
  uint32_t token = 0;
  uint32_t name_id = 0;  // strings.id
  GpuOpKind kind = GpuOpKind::kKernel;
  uint32_t device = 0;
  uint32_t stream = 0;
  int64_t gpu_begin_ns = 0;
  int64_t gpu_end_ns = 0;
  uint64_t correlation_id = 0;
  uint32_t graph_id = 0;
  uint64_t graph_node_id = 0;
};

// A site id no site has: "not known".
inline constexpr uint32_t kNoSite = UINT32_MAX;

// Summary contribution for one call at one token; the store adds deltas for the same call
// together (records of one call can arrive in several batches, and a call captured in a CUDA
// graph gets records at every token that replays it).
struct CallGpuDelta {
  uint64_t call_id = 0;  // 0 = kernels launched outside any call (still counted per token)
  uint32_t token = 0;    // the token the records ran in (a replay's, for a captured call)
  uint32_t kernels = 0;
  int64_t busy_ns = 0;
  int64_t first_begin_ns = 0;
  int64_t last_end_ns = 0;
  int64_t comm_ns = 0;  // the part of busy_ns in communication kernels (core/comm_kernels.h)
  // The call itself, as the joiner knew it when the launch (or the graph node's creation)
  // came: its site (kNoSite: its push was dropped) and its own token, and whether it had
  // closed by the end of the drain (so its row was handed to the writer before or with this
  // delta). The writer's summaries attribute the records to the call's site from these,
  // without reading the call back from the file.
  uint32_t site_id = kNoSite;
  uint32_t call_token = 0;
  bool call_closed = false;
};

// The first output tensor of a call, as the Python hooks saw it.
struct OutputRow {
  uint64_t call_id = 0;
  std::string path;   // where the tensor sat in the output ("" = the output itself)
  std::string shape;  // JSON list, e.g. "[1, 5, 32]"
  std::string dtype;  // e.g. "float32"
};

// The tensors an op call read and returned (op data flow; recorder::LinksOfCurrent), as
// space-separated entries: inputs "slot:identity:shape hash" (an argument's slot, or
// TOKENTRACE_LINK_ARGS with the non-tensor arguments' hash), outputs "index:identity". One row a
// call, or more when a drain ended while the call was open (a reader joins them).
struct LinkRow {
  uint64_t call_id = 0;
  std::string inputs;
  std::string outputs;
};

struct EscapeRow {
  uint64_t call_id = 0;
  uint32_t token = 0;
  uint32_t thread = 0;
  int64_t ts_ns = 0;
  EscapeKind kind = EscapeKind::kStreamSync;
};

// A value of a row the Python layer adds (SQLite's storage classes).
struct RowValue {
  enum class Type : uint8_t { kNull, kInt, kReal, kText };
  Type type = Type::kNull;
  int64_t i = 0;
  double d = 0;
  std::string s;
};

// Rows the Python layer handed to the writer (tokentrace_add_rows): one table, the columns
// named (checked against the schema when handed over), `columns.size()` values a row.
using RowTable = tokentrace_row_table;
const char* RowTableName(RowTable table);  // "call_inputs", ...
LossKind RowTableLoss(RowTable table);     // what a failed write of its rows counts
struct AddedRows {
  RowTable table = TOKENTRACE_ROWS_CALL_INPUTS;
  std::vector<std::string> columns;
  std::vector<RowValue> values;  // row-major
  size_t rows() const { return columns.empty() ? 0 : values.size() / columns.size(); }
};

// What one drain of the buffers produced; the store writes it in one transaction.
struct Batch {
  std::vector<SiteRow> sites;
  std::vector<StringRow> strings;
  std::vector<CallRow> calls;  // a call appears once, when it closes (or at exit, open)
  std::vector<KernelRow> kernels;
  std::vector<CallGpuDelta> call_gpu;
  std::vector<EscapeRow> escapes;
  std::vector<OutputRow> outputs;
  std::vector<LinkRow> links;
  std::vector<AddedRows> added;                           // the Python layer's rows
  std::map<std::string, int64_t> losses;                  // kind -> count to add
  std::vector<std::pair<std::string, std::string>> meta;  // upserted

  bool empty() const {
    return sites.empty() && strings.empty() && calls.empty() && kernels.empty() &&
           call_gpu.empty() && escapes.empty() && outputs.empty() && links.empty() &&
           added.empty() && losses.empty() && meta.empty();
  }
};

}  // namespace tokentrace
