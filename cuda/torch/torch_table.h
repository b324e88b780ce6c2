// Patch tables as seen by the PyTorch operators (torch_ops.cc, torch_ops_cuda.cc).
//
// A table is named by an opaque int64 handle (the ops' `int table` argument), so the ops'
// schemas carry only tensors and ints: torch.compile traces them without a graph break, and a
// CUDA graph captures the handle's device pointer as a plain launch argument. A handle maps to
// one TableState in a process-wide registry; a table lives on one device (the CPU or one CUDA
// device), chosen when it is created, and its operands must already be there.
//
// Serialised entries (what table_create and table_check take;
// python/tokentrace/_backend/torch_library.py writes them, reading kIntsPerEntry, the codes and the
// version from abi()); changing this layout changes patch::kPatchTableVersion: entry i is
//   ints[i*kIntsPerEntry ...]:
//     0 site id   1 op (PatchOp)   2 selector kind (SelectorKind)   3 first   4 last
//       (rows selector: first = the row mask slot, last ignored)
//     5 box ndim (0..6)   then per box dim d (6 of them): start, stop, step, flags
//       (flags: 1 has start, 2 has stop, 4 integer index; see DimSlice in cuda/patch_table.h)
//   floats[i*kFloatsPerEntry ...]: value, lo, hi
//   operands[i]: the operand tensor or None
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/patch_apply.h"
#include "cuda/patch_table.h"

namespace tokentrace::torch_ops {

inline constexpr int kIntsPerEntry = 6 + 4 * patch::kMaxPatchDims;  // 30
inline constexpr int kFloatsPerEntry = 3;

struct TableState {
  int64_t handle = 0;
  c10::Device device = c10::Device(c10::kCPU);
  uint32_t max_sites = 0;
  uint32_t max_masks = 0;  // row mask slots (set_row_mask), max_rows rows each
  uint32_t max_rows = 0;
  std::vector<patch::PatchEntry> entries;       // operand pointers point into `operands`
  std::vector<at::Tensor> operands;             // keeps operand memory alive (undefined: none)
  std::unique_ptr<patch::HostPatchTable> host;  // set when device is the CPU
  std::shared_ptr<void> device_table;           // a patch::DevicePatchTable (torch_ops_cuda.cc)
};

// The table for `handle`, or an error naming the handle. Shared ownership, so a table freed by
// another thread while an op runs stays valid until that op returns.
std::shared_ptr<TableState> FindTable(int64_t handle);

// Why a serialised entry cannot go in a table: code is a patch::PatchError (0: it can), message
// one line, "tokentrace: ...", without the entry's index (the caller knows it).
struct EntryProblem {
  uint32_t code = 0;
  std::string message;
};

// Decodes entry `ints`/`floats` (kIntsPerEntry, kFloatsPerEntry values) into `entry`, with
// `operand` (undefined: none) as its operand, and checks what can be checked before an output
// is seen: the site id, a rows selector's slot (< max_masks), the operand's device, dtype and
// rank, ValidateEntryStatic.
EntryProblem DecodeAndCheckEntry(const int64_t* ints, const double* floats,
                                 const at::Tensor& operand, const c10::Device& device,
                                 int64_t max_sites, int64_t max_masks, patch::PatchEntry* entry);

// The codes and limits Python reads (tokentrace::abi()): ("version", kPatchTableVersion),
// ("max_dims", ...), ("ints_per_entry", ...), ("floats_per_entry", ...), ("open_end", ...), then
// every X-macro list of cuda/patch_table.h as "dtype.float32", "op.zero", "selector.calls",
// "dim.has_start", "error.bad_step", ...
std::tuple<std::vector<std::string>, std::vector<int64_t>> AbiTable();

// The table's dtype names ("float64", "int32"), torch's for the rest.
std::string DTypeWord(c10::ScalarType st);

// Maps a torch dtype to the patch table's; unsupported dtypes map to a value the table rejects
// with a readable message (DTypeName knows them).
patch::DType ToPatchDType(c10::ScalarType t);

// Checks shared by the CPU and CUDA kernels of apply_patches_: the output is on the table's
// device, the site exists, the dtype and rank are supported, the memory does not overlap.
void CheckApplyArgs(const TableState& table, const at::Tensor& out, int64_t site);

#if defined(TOKENTRACE_TORCH_OPS_CUDA)
// Implemented in torch_ops_cuda.cc (the only TU that sees CUDA headers). Each throws
// c10::Error with a "tokentrace:" message on failure.
void UploadDeviceTable(TableState& table);
void AdvanceTokenCuda(TableState& table);
void SetTokenCuda(TableState& table, uint32_t token);
void ResetCountersCuda(TableState& table);
// Row mask `slot` := rows (0/1 bytes, pageable host memory), on the current stream; refuses a
// capturing stream.
void SetRowMaskCuda(TableState& table, uint32_t slot, const std::vector<uint8_t>& rows,
                    uint32_t marked);
patch::PatchCounters ReadCountersCuda(TableState& table);
#endif

}  // namespace tokentrace::torch_ops
