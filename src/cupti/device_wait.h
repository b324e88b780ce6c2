// Waiting for every device's GPU work at the end of a session, bounded in time.
//
// CUPTI records a kernel only once it finished, so the final forced flush must come after the
// GPU work of every context the job used: each device's active primary context (what torch
// and the runtime use) and the context current on the stopping thread. The wait runs on its
// own thread through the driver's entry points (looked up in the already loaded libcuda), so
// a hung GPU costs the job's exit at most the timeout: the thread is then left behind.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <mutex>

namespace tokentrace::cupti {

class DeviceWaiter {
 public:
  // Driver entry points (dlsym names in device_wait.cc). The first two are required.
  struct Driver {
    CUresult (*get_current)(CUcontext*) = nullptr;
    CUresult (*synchronize)() = nullptr;
    CUresult (*push)(CUcontext) = nullptr;
    CUresult (*pop)(CUcontext*) = nullptr;
    CUresult (*device_count)(int*) = nullptr;
    CUresult (*device_get)(CUdevice*, int) = nullptr;
    CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
    CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
    CUresult (*primary_release)(CUdevice) = nullptr;
  };
  // Looks the entry points up in `driver` (a dlopen handle of libcuda). False without the
  // required ones.
  static bool Resolve(void* driver, Driver* out);

  // `current`: the stopping thread's current context (null if none).
  DeviceWaiter(const Driver& driver, CUcontext current) : d_(driver), current_(current) {}

  // Synchronizes every context (on the calling thread, the waiting one).
  void Run();
  // Waits for Run() to finish, at most `timeout_ms`. Returns the number of contexts not
  // known to be finished then (at least 1 when Run() had not even listed them yet).
  int WaitFor(int timeout_ms);

 private:
  bool SyncOne(CUcontext context);

  const Driver d_;
  const CUcontext current_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  int planned_ = -1;  // contexts to synchronize, once listed
  int synced_ = 0;
};

}  // namespace tokentrace::cupti
