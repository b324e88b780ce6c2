// A stand-in libcuda.so.1 (its soname) for cupti::WaitForDevice tests: a few devices whose
// primary contexts are active or not, a per-thread context stack, and a device whose
// synchronize hangs until released. Tests drive it through the fake_cuda_* functions.
#include <cuda.h>

#include <condition_variable>
#include <mutex>
#include <vector>

namespace {
std::mutex g_mutex;
std::condition_variable g_cv;
int g_devices = 0;
unsigned g_active = 0;  // bit d: device d's primary context is active
int g_hang = -1;        // device whose synchronize blocks until fake_cuda_release()
int g_syncs[8] = {};
int g_retained[8] = {};
thread_local std::vector<CUcontext> t_stack;

CUcontext ContextOf(int device) { return reinterpret_cast<CUcontext>(uintptr_t(device + 1)); }
int DeviceOf(CUcontext c) { return static_cast<int>(reinterpret_cast<uintptr_t>(c)) - 1; }
}  // namespace

extern "C" {

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* c) {
  *c = t_stack.empty() ? nullptr : t_stack.back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext c) {
  t_stack.push_back(c);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* c) {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *c = t_stack.back();
  t_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize() {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  const int d = DeviceOf(t_stack.back());
  std::unique_lock<std::mutex> lock(g_mutex);
  if (d == g_hang) g_cv.wait(lock, [] { return g_hang < 0; });
  if (d >= 0 && d < 8) ++g_syncs[d];
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *n = g_devices;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *flags = 0;
  *active = (g_active >> device) & 1u;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_retained[device];
  *c = ContextOf(device);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_retained[device];
  return CUDA_SUCCESS;
}

// ---- Controls for the tests. ----
void fake_cuda_setup(int devices, unsigned active, int hang) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_devices = devices;
  g_active = active;
  g_hang = hang;
  for (int& s : g_syncs) s = 0;
}
// Makes `device`'s primary context current on the calling thread (as torch does).
void fake_cuda_make_current(int device) { t_stack.push_back(ContextOf(device)); }
int fake_cuda_syncs(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_syncs[device];
}
int fake_cuda_retained(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_retained[device];
}
void fake_cuda_release() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_hang = -1;
  g_cv.notify_all();
}

}  // extern "C"
