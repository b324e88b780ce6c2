// Patch tables as seen by the PyTorch operators (torch_ops.cc, torch_ops_cuda.cc).
//
// A table is named by an opaque int64 handle (the ops' `int table` argument), so the ops'
// schemas carry only tensors and ints: torch.compile traces them without a graph break, and a
// CUDA graph captures the handle's device pointer as a plain launch argument. A handle maps to
// one TableState in a process-wide registry; a table lives on one device (the CPU or one CUDA
// device), chosen when it is created, and its operands must already be there.
//
// Serialised entries (what table_create takes; python/tokentrace/_torch_ops.py writes them):
// entry i is
//   ints[i*kIntsPerEntry ...]:
//     0 site id   1 op (PatchOp)   2 selector kind (SelectorKind)   3 first   4 last
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
  std::vector<patch::PatchEntry> entries;       // operand pointers point into `operands`
  std::vector<at::Tensor> operands;             // keeps operand memory alive (undefined: none)
  std::unique_ptr<patch::HostPatchTable> host;  // set when device is the CPU
  std::shared_ptr<void> device_table;           // a patch::DevicePatchTable (torch_ops_cuda.cc)
};

// The table for `handle`, or an error naming the handle. Shared ownership, so a table freed by
// another thread while an op runs stays valid until that op returns.
std::shared_ptr<TableState> FindTable(int64_t handle);

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
patch::PatchCounters ReadCountersCuda(TableState& table);
#endif

}  // namespace tokentrace::torch_ops
