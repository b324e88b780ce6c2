#include "cupti/device_wait.h"

#include <dlfcn.h>

#include <chrono>
#include <type_traits>
#include <vector>

namespace tokentrace::cupti {

bool DeviceWaiter::Resolve(void* driver, Driver* out) {
  auto get = [driver](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(driver, name));
  };
  get(&out->get_current, "cuCtxGetCurrent");
  get(&out->synchronize, "cuCtxSynchronize");
  get(&out->push, "cuCtxPushCurrent_v2");
  get(&out->pop, "cuCtxPopCurrent_v2");
  get(&out->device_count, "cuDeviceGetCount");
  get(&out->device_get, "cuDeviceGet");
  get(&out->primary_state, "cuDevicePrimaryCtxGetState");
  get(&out->primary_retain, "cuDevicePrimaryCtxRetain");
  get(&out->primary_release, "cuDevicePrimaryCtxRelease_v2");
  return out->get_current != nullptr && out->synchronize != nullptr;
}

bool DeviceWaiter::SyncOne(CUcontext context) {
  if (d_.push == nullptr || d_.pop == nullptr) return false;
  if (d_.push(context) != CUDA_SUCCESS) return false;
  // An error (a sticky fault) leaves nothing better to do: the flush takes what there is.
  d_.synchronize();
  CUcontext popped = nullptr;
  d_.pop(&popped);
  return true;
}

void DeviceWaiter::Run() {
  // List first, so a timeout can say how many are left.
  std::vector<CUcontext> contexts;
  std::vector<CUdevice> retained;
  if (current_ != nullptr) contexts.push_back(current_);
  int count = 0;
  const bool primaries = d_.device_count != nullptr && d_.device_get != nullptr &&
                         d_.primary_state != nullptr && d_.primary_retain != nullptr &&
                         d_.primary_release != nullptr;
  if (primaries && d_.device_count(&count) != CUDA_SUCCESS) count = 0;
  for (int i = 0; primaries && i < count; ++i) {
    CUdevice device = 0;
    unsigned flags = 0;
    int active = 0;
    if (d_.device_get(&device, i) != CUDA_SUCCESS) continue;
    // Only contexts the job made active: never create one at exit.
    if (d_.primary_state(device, &flags, &active) != CUDA_SUCCESS || active == 0) continue;
    CUcontext context = nullptr;
    if (d_.primary_retain(&context, device) != CUDA_SUCCESS) continue;
    retained.push_back(device);
    bool listed = false;
    for (CUcontext c : contexts) listed = listed || c == context;
    if (!listed) contexts.push_back(context);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    planned_ = static_cast<int>(contexts.size());
  }
  for (CUcontext context : contexts) {
    SyncOne(context);
    std::lock_guard<std::mutex> lock(mutex_);
    ++synced_;
  }
  for (CUdevice device : retained) d_.primary_release(device);
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
  done_cv_.notify_all();
}

int DeviceWaiter::WaitFor(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done_; })) {
    return 0;
  }
  return planned_ < 0 ? 1 : planned_ - synced_;
}

}  // namespace tokentrace::cupti
