// policy/own_vmm/driver.h: the driver as the own-VMM cache
// (policy/own_vmm/cache.h) and its growth ahead
// (policy/own_vmm/growth_ahead.h) need it, and the result codes they
// produce themselves. Pure C++ (no CUDA header): handles, addresses and
// access descriptors are opaque numbers and bytes, so the test
// constructor and the production one differ only in the driver passed
// (interpose/pool/own_vmm.cpp's SeamDriver; the fakes in
// tests/policy/own_vmm/).
#pragma once

#include <cstdint>
#include <string>

namespace pagefast::policy::own_vmm {

// The driver's result codes the cache produces itself (the glue checks
// they equal CUDA_SUCCESS and CUDA_ERROR_INVALID_VALUE).
constexpr int kOk = 0;
constexpr int kInvalidValue = 1;

// The driver, as the cache needs it. Results are the driver's codes and go
// back to the program untouched.
class Driver {
 public:
  virtual ~Driver() = default;
  // `prop`: the property bytes a program's cuMemCreate gave (for prefetch).
  virtual int create(uint64_t bytes, const std::string& prop, uint64_t* handle) = 0;
  virtual int release(uint64_t handle) = 0;
  virtual int map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags) = 0;
  virtual int unmap(uint64_t addr, uint64_t bytes) = 0;
  // `descs`: the program's descriptor array, as bytes.
  virtual int set_access(uint64_t addr, uint64_t bytes, const std::string& descs) = 0;
  virtual int address_free(uint64_t addr, uint64_t bytes) = 0;
  // Growth ahead on a worker: the calling thread's context when a job is
  // queued, made current on the worker before it works on the job.
  virtual uint64_t current_context() { return 0; }
  virtual void use_context(uint64_t /*context*/) {}
  // A job was queued: the worker must run (started on first use). False:
  // no worker can run; the cache grows ahead on the caller instead.
  // Called under the cache's lock: it may start a thread, never wait.
  virtual bool wake_worker() { return false; }
  // A monotonic clock (ns), read only around the program's waits for a
  // worker's page (the ahead_wait_ns stat).
  virtual uint64_t now_ns() { return 0; }
};

}  // namespace pagefast::policy::own_vmm
