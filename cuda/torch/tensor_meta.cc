// tokentrace_tensor_meta: a torch.Tensor's sizes, dtype and device read from its C++ tensor,
// for the native input walk (python/src/inputs_walk.cc), which records these for every tensor
// a decoding step's root call is given (2 x layers cache tensors). Through Python, tensor.shape,
// .dtype and .device cost ~300 ns a tensor (a torch.Size and a torch.device made each time);
// here a few ns. The extension does not link torch, so it gets this function's address from
// this library (python/tokentrace/_record/inputs.py) and calls it only for objects whose type is
// exactly torch.Tensor or torch.nn.Parameter; anything else keeps the Python attributes.
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

// Fills sizes[0..ndim) and the codes of the dtype (c10::ScalarType) and device (type << 8 |
// index + 1); returns ndim, or -1 where the caller must read the Python attributes instead:
// more than max_dims dimensions, or symbolic sizes (a tensor traced by torch.compile).
extern "C" __attribute__((visibility("default"))) int tokentrace_tensor_meta(
    PyObject* tensor, int64_t* sizes, int max_dims, int32_t* dtype, int32_t* device) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  if (!t.defined() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return -1;
  const int ndim = static_cast<int>(t.dim());
  if (ndim > max_dims) return -1;
  const auto dims = t.sizes();
  for (int d = 0; d < ndim; ++d) sizes[d] = dims[d];
  *dtype = static_cast<int32_t>(t.scalar_type());
  const c10::Device where = t.device();
  *device = (static_cast<int32_t>(where.type()) << 8) | static_cast<int32_t>(where.index() + 1);
  return ndim;
}
