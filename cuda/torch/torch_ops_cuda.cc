// The CUDA side of the tokentrace operators: apply_patches_ for CUDA tensors and the device
// half of the table ops. Plain C++ compiled by the host compiler; the kernels are in
// cuda/patch_apply.cu (which includes no torch header), reached through cuda/patch_device.h.
//
// Stream discipline: every launch goes to the current torch stream of the output's (or the
// table's) device, so apply and advance_token are ordered with the model's own kernels and are
// captured by torch.cuda.graph like any other kernel. Nothing here synchronizes except
// table_create (one copy) and the counter read-back.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/patch_device.h"
#include "cuda/torch/torch_table.h"

namespace tokentrace::torch_ops {
namespace {

patch::DevicePatchTable& Dev(TableState& t) {
  TORCH_CHECK(t.device.is_cuda() && t.device_table != nullptr, "tokentrace: patch table ", t.handle,
              " is not a CUDA table");
  return *static_cast<patch::DevicePatchTable*>(t.device_table.get());
}

void CheckLaunch(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "tokentrace: ", what, " failed: ", cudaGetErrorString(e));
}

cudaStream_t CurrentStream(const c10::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

void ApplyCuda(const at::Tensor& out, int64_t handle, int64_t site) {
  const std::shared_ptr<TableState> t = FindTable(handle);
  CheckApplyArgs(*t, out, site);
  const c10::cuda::CUDAGuard guard(out.device());
  // Fixed arrays: the launcher copies them into the kernel's parameters, nothing is allocated.
  int64_t shape[patch::kMaxPatchDims] = {};
  int64_t strides[patch::kMaxPatchDims] = {};
  for (int64_t d = 0; d < out.dim(); ++d) {
    shape[d] = out.size(d);
    strides[d] = out.stride(d);
  }
  CheckLaunch(
      patch::ApplyPatchesDevice(Dev(*t), static_cast<uint32_t>(site), out.data_ptr(),
                                ToPatchDType(out.scalar_type()), static_cast<int>(out.dim()), shape,
                                strides, CurrentStream(out.device())),
      "launching the patch kernel");
}

}  // namespace

void UploadDeviceTable(TableState& t) {
  const c10::cuda::CUDAGuard guard(t.device);
  auto table = std::make_shared<patch::DevicePatchTable>();
  std::string why;
  TORCH_CHECK(
      patch::UploadPatchTable(t.entries, t.max_sites, t.max_masks, t.max_rows, table.get(), &why),
      why);
  t.device_table = std::move(table);
}

void AdvanceTokenCuda(TableState& t) {
  const c10::cuda::CUDAGuard guard(t.device);
  CheckLaunch(patch::AdvanceTokenDevice(Dev(t).device(), CurrentStream(t.device)),
              "launching the token kernel");
}

void SetTokenCuda(TableState& t, uint32_t token) {
  const c10::cuda::CUDAGuard guard(t.device);
  CheckLaunch(patch::SetTokenDevice(Dev(t).device(), token, CurrentStream(t.device)),
              "launching the token kernel");
}

void ResetCountersCuda(TableState& t) {
  const c10::cuda::CUDAGuard guard(t.device);
  CheckLaunch(patch::ResetCountersDevice(Dev(t).device(), CurrentStream(t.device)),
              "launching the counter reset kernel");
}

void SetRowMaskCuda(TableState& t, uint32_t slot, const std::vector<uint8_t>& rows,
                    uint32_t marked) {
  const c10::cuda::CUDAGuard guard(t.device);
  const cudaStream_t stream = CurrentStream(t.device);
  const cudaError_t e = patch::SetRowMaskDevice(Dev(t).device(), slot, rows.data(),
                                                static_cast<uint32_t>(rows.size()), marked, stream);
  TORCH_CHECK(e != cudaErrorStreamCaptureUnsupported,
              "tokentrace: set_row_mask cannot run while the current CUDA stream is being "
              "captured (a graph would replay this call's rows); write the masks before each "
              "replay, outside the capture");
  CheckLaunch(e, "copying the row mask to the device");
}

patch::PatchCounters ReadCountersCuda(TableState& t) {
  const c10::cuda::CUDAGuard guard(t.device);
  // A whole-device sync, not just the current stream's: a graph may have been replayed on a
  // side stream. Reports are rare; correctness beats the extra wait.
  c10::cuda::device_synchronize();
  patch::PatchCounters counters;
  std::string why;
  TORCH_CHECK(patch::ReadCountersDevice(Dev(t), CurrentStream(t.device), &counters, &why), why);
  return counters;
}

}  // namespace tokentrace::torch_ops

TORCH_LIBRARY_IMPL(tokentrace, CUDA, m) {
  m.impl("apply_patches_", &tokentrace::torch_ops::ApplyCuda);
}
