// Decoding and checking serialised entries (torch_table.h), and the codes Python reads from
// the library (abi()): what table_create and table_check share, so a bad entry gets the same
// words whether Python asks first (table_check: data) or a direct caller creates a table
// (table_create: an error).
#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>
#include <vector>

#include "cuda/patch_ops.h"
#include "cuda/torch/torch_table.h"
#include "tokentrace/tokentrace.h"

namespace tokentrace::torch_ops {
namespace {

using patch::PatchEntry;
using patch::PatchError;

static_assert(TOKENTRACE_MAX_CALL_NUMBER <= UINT32_MAX, "call numbers fit CallSelector's fields");

bool Representable(c10::ScalarType st) {
  return st == at::kFloat || st == at::kHalf || st == at::kBFloat16 || st == at::kDouble ||
         st == at::kInt || st == at::kLong || st == at::kByte || st == at::kBool;
}

PatchEntry DecodeEntry(const int64_t* v, const double* f) {
  PatchEntry e{};
  e.site_id = static_cast<uint32_t>(v[0]);
  e.op = static_cast<uint32_t>(v[1]);
  e.selector.kind = static_cast<uint32_t>(v[2]);
  e.selector.first = static_cast<uint32_t>(v[3]);
  e.selector.last = static_cast<uint32_t>(v[4]);
  e.box.ndim = static_cast<int32_t>(v[5]);
  for (int d = 0; d < patch::kMaxPatchDims; ++d) {
    const int64_t* s = v + 6 + 4 * d;
    e.box.dims[d] = patch::DimSlice{s[0], s[1], s[2], static_cast<uint32_t>(s[3]), 0};
  }
  e.params.value = static_cast<float>(f[0]);
  e.params.lo = static_cast<float>(f[1]);
  e.params.hi = static_cast<float>(f[2]);
  return e;
}

EntryProblem Problem(PatchError code, std::string message) {
  return EntryProblem{static_cast<uint32_t>(code), "tokentrace: " + std::move(message)};
}

// Points `e.operand` at `t` (shape, strides, dtype, data pointer), or says why it cannot.
EntryProblem SetOperand(const at::Tensor& t, const c10::Device& device, PatchEntry& e) {
  if (t.device() != device) {
    return Problem(PatchError::kOperandDevice, "the operand is on " + t.device().str() +
                                                   " but the table is for " + device.str() +
                                                   "; move it with .to(\"" + device.str() + "\")");
  }
  const c10::ScalarType st = t.scalar_type();
  if (!Representable(st)) {
    return Problem(PatchError::kOperandDtype,
                   "the operand has dtype " + DTypeWord(st) + patch::SupportedDTypesText());
  }
  if (t.dim() > patch::kMaxPatchDims) {
    return Problem(PatchError::kOperandShape, "the operand has " + std::to_string(t.dim()) +
                                                  " dimensions; the patch table takes up to " +
                                                  std::to_string(patch::kMaxPatchDims));
  }
  e.operand.data = t.data_ptr();
  e.operand.dtype = static_cast<uint32_t>(ToPatchDType(st));
  e.operand.ndim = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    e.operand.shape[d] = t.size(d);
    e.operand.strides[d] = t.stride(d);
  }
  return {};
}

}  // namespace

std::string DTypeWord(c10::ScalarType st) {
  return Representable(st) ? patch::DTypeName(ToPatchDType(st)) : c10::toString(st);
}

EntryProblem DecodeAndCheckEntry(const int64_t* ints, const double* floats,
                                 const at::Tensor& operand, const c10::Device& device,
                                 int64_t max_sites, int64_t max_masks, PatchEntry* entry) {
  *entry = DecodeEntry(ints, floats);
  if (ints[0] < 0 || ints[0] >= max_sites) {
    return Problem(PatchError::kBadSite, "the entry is for site " + std::to_string(ints[0]) +
                                             " but the table has sites 0.." +
                                             std::to_string(max_sites - 1));
  }
  const bool rows = ints[2] == static_cast<int64_t>(patch::SelectorKind::kRows);
  if (rows && (ints[3] < 0 || ints[3] >= max_masks)) {  // the slot, before it is cut to 32 bits
    const auto info = patch::MakeError(PatchError::kBadMaskSlot, -1, ints[3], max_masks);
    return EntryProblem{info.code, patch::FormatPatchError(info, *entry)};
  }
  for (int i : {3, 4}) {  // the selector's first and last call or token: 32 bits, never wrapped
    if (rows) break;      // a slot, checked above; last is ignored
    if (ints[i] < 0 || ints[i] > static_cast<int64_t>(TOKENTRACE_MAX_CALL_NUMBER)) {
      return Problem(PatchError::kBadSelector, "the entry selects call or token " +
                                                   std::to_string(ints[i]) +
                                                   "; calls and tokens are numbered 1.." +
                                                   std::to_string(TOKENTRACE_MAX_CALL_NUMBER));
    }
  }
  if (operand.defined()) {
    EntryProblem p = SetOperand(operand, device, *entry);
    if (p.code != 0) return p;
  }
  const uint32_t masks = static_cast<uint32_t>(max_masks);
  const patch::PatchErrorInfo info = patch::CheckEntryStatic(*entry, masks);
  if (info.code != 0) {
    std::string why;
    patch::ValidateEntryStatic(*entry, masks, &why);  // the same check, worded
    return EntryProblem{info.code, why};
  }
  return {};
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> AbiTable() {
  std::vector<std::string> names = {"version", "max_dims", "ints_per_entry", "floats_per_entry",
                                    "open_end"};
  std::vector<int64_t> values = {patch::kPatchTableVersion, patch::kMaxPatchDims, kIntsPerEntry,
                                 kFloatsPerEntry, patch::kOpenEnd};
  const auto add = [&](const char* prefix, const char* name, int64_t value) {
    names.push_back(std::string(prefix) + "." + name);
    values.push_back(value);
  };
  // Each list of patch_table.h, under its prefix: "op.zero", "error.bad_step", ...
#define TT_ABI_ROW_(name, value, text) add(kind, text, value);
  const char* kind = "dtype";
  TT_PATCH_DTYPES(TT_ABI_ROW_)
  kind = "op";
  TT_PATCH_OPS(TT_ABI_ROW_)
  kind = "selector";
  TT_PATCH_SELECTORS(TT_ABI_ROW_)
  kind = "dim";
  TT_PATCH_DIM_FLAGS(TT_ABI_ROW_)
  kind = "error";
  TT_PATCH_ERRORS(TT_ABI_ROW_)
#undef TT_ABI_ROW_
  // "editable.float32", ...: the dtypes the ops edit, by their dtype code.
#define TT_ABI_EDITABLE_(name) \
  add("editable", patch::DTypeName(patch::DType::name), static_cast<int64_t>(patch::DType::name));
  TT_PATCH_EDITABLE_DTYPES(TT_ABI_EDITABLE_)
#undef TT_ABI_EDITABLE_
  return {names, values};
}

}  // namespace tokentrace::torch_ops
