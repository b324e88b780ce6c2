// The tokentrace PyTorch operators: schemas, the table registry, and the CPU and Meta kernels.
// The CUDA kernel of apply_patches_ and the device side of the table ops are in
// torch_ops_cuda.cc; the element work is cuda/patch_apply_host.cc and cuda/patch_apply.cu.
//
// Why these schemas: apply_patches_ mutates its output in place (Tensor(a!)) and returns
// nothing, so functionalization and torch.compile see an ordinary in-place op and need no
// graph break. Every other argument is an int (the table handle, the site id), so a traced or
// captured call carries no Python object. The table ops have no tensor arguments (but
// set_row_mask's CPU rows); they are registered for CompositeExplicitAutograd (which also serves
// the "no tensor" dispatch) and the loader (python/tokentrace/_backend/torch_library.py) gives
// them fake kernels and marks them side-effectful, so advance_token or set_row_mask inside a
// compiled function stays in the graph, in order.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/torch/torch_table.h"

namespace tokentrace::torch_ops {
namespace {

using patch::DType;
using patch::PatchEntry;

// Registry. Lookups take a mutex (a few tens of ns uncontended); the op path allocates nothing
// else and never holds the lock while touching a table.
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<int64_t, std::shared_ptr<TableState>>& Registry() {
  static auto* tables = new std::unordered_map<int64_t, std::shared_ptr<TableState>>();
  return *tables;  // leaked on purpose: device tables must not be freed after CUDA teardown
}

// Decodes and checks every entry of a table_create / table_check call. On a bad entry returns
// its index (and *problem); else -1, with the entries and their operands in *state. With
// `own_operands` (table_create) each operand is copied into memory the table owns: the
// caller's tensor may be resized, set_() or freed later without the table reading freed
// memory (its entries keep raw data pointers for the device).
int64_t DecodeEntries(at::IntArrayRef ints, at::ArrayRef<double> floats,
                      const c10::List<std::optional<at::Tensor>>& operands, int64_t max_sites,
                      int64_t max_masks, int64_t max_rows, const c10::Device& device,
                      bool own_operands, TableState* state, EntryProblem* problem) {
  const size_t n = operands.size();
  TORCH_CHECK(ints.size() == n * kIntsPerEntry && floats.size() == n * kFloatsPerEntry,
              "tokentrace: table_create needs ", kIntsPerEntry, " ints and ", kFloatsPerEntry,
              " floats per entry (", n, " operands given, ", ints.size(), " ints, ", floats.size(),
              " floats)");
  TORCH_CHECK(max_sites >= 1 && max_sites <= (int64_t{1} << 24),
              "tokentrace: max_sites must be in 1..2^24, got ", max_sites);
  // Masks live in the table's arena, allocated once at their largest size: bounded so a typo
  // cannot ask for terabytes (2^30 bytes of rows at most).
  TORCH_CHECK(max_masks >= 0 && max_masks <= (int64_t{1} << 16),
              "tokentrace: max_masks must be "
              "in 0..2^16, got ",
              max_masks);
  TORCH_CHECK(
      max_rows >= 0 && max_rows <= (int64_t{1} << 30) && max_masks * max_rows <= (int64_t{1} << 30),
      "tokentrace: max_rows must be >= 0 with max_masks * max_rows <= 2^30 bytes of row "
      "masks, got max_masks ",
      max_masks, " and max_rows ", max_rows);
  TORCH_CHECK(device.is_cpu() || device.is_cuda(),
              "tokentrace: patch tables live on the CPU or a CUDA device, not ", device.str());
  for (size_t i = 0; i < n; ++i) {
    const std::optional<at::Tensor> operand = operands.get(i);
    at::Tensor keep = operand.has_value() ? *operand : at::Tensor();
    if (own_operands && keep.defined() && keep.device() == device) keep = keep.detach().clone();
    PatchEntry e{};
    *problem =
        DecodeAndCheckEntry(ints.data() + i * kIntsPerEntry, floats.data() + i * kFloatsPerEntry,
                            keep, device, max_sites, max_masks, &e);
    if (problem->code != 0) return static_cast<int64_t>(i);
    state->entries.push_back(e);
    state->operands.push_back(keep);
  }
  return -1;
}

c10::Device WithIndex(c10::Device device) {
  return device.is_cuda() && !device.has_index() ? c10::Device(c10::kCUDA, 0) : device;
}

// (entry, reason, message) of the first entry table_create would refuse, as data: reason is a
// patch::PatchError code (names in abi()); (-1, 0, "") when every entry is fine.
std::tuple<int64_t, int64_t, std::string> TableCheck(
    at::IntArrayRef ints, at::ArrayRef<double> floats,
    const c10::List<std::optional<at::Tensor>>& operands, int64_t max_sites, c10::Device device,
    int64_t max_masks, int64_t max_rows) {
  TableState scratch;
  EntryProblem problem;
  const int64_t bad = DecodeEntries(ints, floats, operands, max_sites, max_masks, max_rows,
                                    WithIndex(device), false, &scratch, &problem);
  return {bad, static_cast<int64_t>(problem.code), problem.message};
}

int64_t TableCreate(at::IntArrayRef ints, at::ArrayRef<double> floats,
                    const c10::List<std::optional<at::Tensor>>& operands, int64_t max_sites,
                    c10::Device device, int64_t max_masks, int64_t max_rows) {
  device = WithIndex(device);
  auto state = std::make_shared<TableState>();
  state->device = device;
  EntryProblem problem;
  const int64_t bad = DecodeEntries(ints, floats, operands, max_sites, max_masks, max_rows, device,
                                    true, state.get(), &problem);
  TORCH_CHECK(bad < 0, problem.message, " (patch entry ", bad, ")");
  state->max_sites = static_cast<uint32_t>(max_sites);  // all three in range: checked above
  state->max_masks = static_cast<uint32_t>(max_masks);
  state->max_rows = static_cast<uint32_t>(max_rows);
  if (device.is_cpu()) {
    std::string why;
    state->host = patch::HostPatchTable::Create(state->entries, state->max_sites, state->max_masks,
                                                state->max_rows, &why);
    TORCH_CHECK(state->host != nullptr, why);
  } else {
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
    UploadDeviceTable(*state);
#else
    TORCH_CHECK(false,
                "tokentrace: this libtokentrace_torch_ops was built without CUDA; "
                "rebuild it with cuda/torch/build.sh where nvcc is installed");
#endif
  }
  static int64_t next_handle = 1;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  state->handle = next_handle++;
  Registry()[state->handle] = state;
  return state->handle;
}

void TableFree(int64_t handle) {
  std::shared_ptr<TableState> gone;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(handle);
    TORCH_CHECK(it != Registry().end(), "tokentrace: no patch table with handle ", handle,
                " (already freed?)");
    gone = std::move(it->second);
    Registry().erase(it);
  }
  // Released here, outside the lock (a device table's cudaFree may wait for the device).
}

void ApplyCpu(const at::Tensor& out, int64_t handle, int64_t site) {
  const std::shared_ptr<TableState> t = FindTable(handle);
  CheckApplyArgs(*t, out, site);
  const std::vector<int64_t> shape(out.sizes().begin(), out.sizes().end());
  const std::vector<int64_t> strides(out.strides().begin(), out.strides().end());
  const patch::ApplyStatus s = patch::ApplyPatchesHost(
      t->host->table(), static_cast<uint32_t>(site), out.data_ptr(),
      ToPatchDType(out.scalar_type()), static_cast<int>(out.dim()), shape.data(), strides.data());
  // Entries that matched but did not fit are skipped and counted (as on the device); only a
  // refused call (call == 0) is an error here.
  TORCH_CHECK(s.ok || s.call != 0, s.message);
}

void ApplyMeta(const at::Tensor& out, int64_t handle, int64_t site) {
}  // in place: nothing to infer

void AdvanceToken(int64_t handle) {
  const std::shared_ptr<TableState> t = FindTable(handle);
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
  if (t->device.is_cuda()) return AdvanceTokenCuda(*t);
#endif
  patch::AdvanceTokenHost(t->host->table());
}

void SetToken(int64_t handle, int64_t token) {
  TORCH_CHECK(token >= 0 && token <= UINT32_MAX, "tokentrace: token ", token, " out of range");
  const std::shared_ptr<TableState> t = FindTable(handle);
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
  if (t->device.is_cuda()) return SetTokenCuda(*t, static_cast<uint32_t>(token));
#endif
  patch::SetTokenHost(t->host->table(), static_cast<uint32_t>(token));
}

void ResetCounters(int64_t handle) {
  const std::shared_ptr<TableState> t = FindTable(handle);
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
  if (t->device.is_cuda()) return ResetCountersCuda(*t);
#endif
  patch::ResetCountersHost(t->host->table());
}

// Row mask `slot` := `rows` (a 1-D CPU bool/uint8 tensor, nonzero = marked) for the table's
// next applies: at once for a CPU table, on the current stream for a CUDA one (not while it is
// being captured: a graph would replay this call's rows). The rows are copied first, into
// pageable memory, so the caller may reuse a pinned buffer at once.
void SetRowMask(int64_t handle, int64_t slot, const at::Tensor& rows) {
  const c10::ScalarType st = rows.scalar_type();
  TORCH_CHECK(rows.device().is_cpu() && rows.dim() == 1 && (st == at::kBool || st == at::kByte),
              "tokentrace: set_row_mask takes the rows as a 1-D CPU tensor of dtype bool or "
              "uint8 (nonzero = marked); got a ",
              rows.dim(), "-d ", DTypeWord(st), " tensor on ", rows.device().str());
  const std::shared_ptr<TableState> t = FindTable(handle);
  std::string why;
  TORCH_CHECK(patch::CheckRowMaskArgs(t->max_masks, t->max_rows, slot, rows.numel(), &why), why);
  const at::Tensor dense = rows.contiguous();
  const auto* bytes = static_cast<const uint8_t*>(dense.data_ptr());  // bool: 0/1 bytes
  std::vector<uint8_t> marks(bytes, bytes + dense.numel());
  uint32_t marked = 0;
  for (uint8_t& m : marks) marked += (m = m != 0 ? 1 : 0);
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
  if (t->device.is_cuda()) return SetRowMaskCuda(*t, static_cast<uint32_t>(slot), marks, marked);
#endif
  TORCH_CHECK(patch::SetRowMaskHost(t->host->table(), static_cast<uint32_t>(slot), marks.data(),
                                    static_cast<uint32_t>(marks.size()), &why),
              why);
}

patch::PatchCounters ReadCounters(TableState& t) {
#if defined(TOKENTRACE_TORCH_OPS_CUDA)
  if (t.device.is_cuda()) return ReadCountersCuda(t);
#endif
  return patch::ReadCountersHost(t.host->table());
}

at::Tensor Int64Tensor(const std::vector<int64_t>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t;
}

// (fires per entry, skips per entry, calls per site, token); CPU int64 tensors. Synchronizes
// the current stream for a device table.
std::tuple<at::Tensor, at::Tensor, at::Tensor, int64_t> TableCounters(int64_t handle) {
  const std::shared_ptr<TableState> t = FindTable(handle);
  const patch::PatchCounters c = ReadCounters(*t);
  return {Int64Tensor(std::vector<int64_t>(c.fires.begin(), c.fires.end())),
          Int64Tensor(std::vector<int64_t>(c.skips.begin(), c.skips.end())),
          Int64Tensor(std::vector<int64_t>(c.site_calls.begin(), c.site_calls.end())),
          static_cast<int64_t>(c.token)};
}

// The last error of each entry ("" when it never skipped), as FormatPatchError words it.
std::vector<std::string> TableErrors(int64_t handle) {
  const std::shared_ptr<TableState> t = FindTable(handle);
  const patch::PatchCounters c = ReadCounters(*t);
  std::vector<std::string> out;
  for (size_t i = 0; i < c.last_errors.size(); ++i)
    out.push_back(patch::FormatPatchError(c.last_errors[i], t->entries[i]));
  return out;
}

// Checks every entry of `site` against an output like `out` (any device, meta included):
// what a binder calls before model work, so a box or operand that cannot fit is an error now
// rather than a skip later.
void TableValidate(int64_t handle, int64_t site, const at::Tensor& out) {
  const std::shared_ptr<TableState> t = FindTable(handle);
  TORCH_CHECK(site >= 0 && site < t->max_sites, "tokentrace: site ", site,
              " is not in this patch table (sites 0..", t->max_sites - 1, ")");
  const std::vector<int64_t> shape(out.sizes().begin(), out.sizes().end());
  for (size_t i = 0; i < t->entries.size(); ++i) {
    if (t->entries[i].site_id != static_cast<uint32_t>(site)) continue;
    std::string why;
    TORCH_CHECK(patch::ValidateEntry(t->entries[i], static_cast<int>(out.dim()), shape.data(),
                                     ToPatchDType(out.scalar_type()), t->max_masks, &why),
                why, " (patch entry ", i, ")");
  }
}

}  // namespace

std::shared_ptr<TableState> FindTable(int64_t handle) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().find(handle);
  TORCH_CHECK(it != Registry().end(), "tokentrace: no patch table with handle ", handle,
              " (freed, or created in another process?)");
  return it->second;
}

DType ToPatchDType(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:  // not representable in the table; SetOperand and CheckApplyArgs reject these first
      return DType::kBool;
  }
}

void CheckApplyArgs(const TableState& t, const at::Tensor& out, int64_t site) {
  TORCH_CHECK(out.device() == t.device, "tokentrace: patch table ", t.handle, " lives on ",
              t.device.str(), " but the output is on ", out.device().str(),
              "; create the table for that device (PatchTable.upload)");
  TORCH_CHECK(site >= 0 && site < t.max_sites, "tokentrace: site ", site,
              " is not in this patch table (sites 0..", t.max_sites - 1, ")");
  const c10::ScalarType st = out.scalar_type();
  TORCH_CHECK(patch::IsFloatDType(static_cast<uint32_t>(ToPatchDType(st))),
              "tokentrace: apply_patches_ cannot take an output of dtype ", DTypeWord(st),
              patch::SupportedDTypesText());
  TORCH_CHECK(out.dim() <= patch::kMaxPatchDims, "tokentrace: the output has ", out.dim(),
              " dimensions; patches support up to ", patch::kMaxPatchDims);
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
              "tokentrace: the output has overlapping memory (an expanded view); patch a copy");
}

}  // namespace tokentrace::torch_ops

TORCH_LIBRARY(tokentrace, m) {
  using namespace tokentrace::torch_ops;
  m.def("apply_patches_(Tensor(a!) out, int table, int site) -> ()");
  m.def(
      "table_create(int[] ints, float[] floats, Tensor?[] operands, int max_sites, "
      "Device device, int max_masks=0, int max_rows=0) -> int");
  m.def("table_free(int table) -> ()");
  m.def("advance_token(int table) -> ()");
  m.def("set_token(int table, int token) -> ()");
  m.def("reset_counters(int table) -> ()");
  m.def("set_row_mask(int table, int slot, Tensor rows) -> ()");
  m.def("table_counters(int table) -> (Tensor fires, Tensor skips, Tensor site_calls, int token)");
  m.def("table_errors(int table) -> str[]");
  m.def("table_validate(int table, int site, Tensor out) -> ()");
  m.def(
      "table_check(int[] ints, float[] floats, Tensor?[] operands, int max_sites, "
      "Device device, int max_masks=0, int max_rows=0) -> (int entry, int reason, str message)");
  m.def("abi() -> (str[] names, int[] values)");
}

TORCH_LIBRARY_IMPL(tokentrace, CPU, m) {
  m.impl("apply_patches_", &tokentrace::torch_ops::ApplyCpu);
}

TORCH_LIBRARY_IMPL(tokentrace, Meta, m) {
  m.impl("apply_patches_", &tokentrace::torch_ops::ApplyMeta);
}

TORCH_LIBRARY_IMPL(tokentrace, CompositeExplicitAutograd, m) {
  using namespace tokentrace::torch_ops;
  m.impl("table_create", &TableCreate);
  m.impl("table_free", &TableFree);
  m.impl("advance_token", &AdvanceToken);
  m.impl("set_token", &SetToken);
  m.impl("reset_counters", &ResetCounters);
  m.impl("set_row_mask", &SetRowMask);
  m.impl("table_counters", &TableCounters);
  m.impl("table_errors", &TableErrors);
  m.impl("table_validate", &TableValidate);
  m.impl("table_check", &TableCheck);
  m.impl("abi", &AbiTable);
}
