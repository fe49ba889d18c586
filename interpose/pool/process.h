// interpose/pool/process.h: the pool glue's process-wide state in one
// object (docs/DESIGN.md "Who owns what"): the configuration, the on-switch,
// the clock, and one entry per device ordinal holding that device's
// DeviceMemory (interpose/pool/device_memory.h), made at the first need and
// never destroyed. The capture gate stands apart (interpose/pool_api.h
// CaptureGate), so that the hooks' capture bookkeeping is inline.
//
// Constant-initialised (no dynamic initialiser may run: a hook can be
// reached from another library's constructor before ours), never destroyed
// (hooks run during exit too). A forked child switches the glue off in
// after_fork_child(), called by the process's one fork handler
// (interpose/runtime.cpp): the child has the parent's memory but not its
// CUDA contexts, and forwards everything.
#pragma once

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <string>

#include "interpose/ipc/ipc_state.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime_state.h"
#include "interpose/stats_state.h"
#include "interpose/trace_state.h"
#include "policy/clock.h"
#include "policy/config.h"
#include "policy/format.h"

namespace pagefast::policy {
class DeviceBudget;
}

namespace pagefast::pool {

class DeviceMemory;

struct Process {
  std::atomic<bool> active{false};  // configured on, and not a forked child
  PoolConfig config;
  LogSink log = nullptr;
  std::atomic<const RealDriver*> real{nullptr};
  // Taken to make a device's memory or its pool, to retire it, and around
  // the peer grants.
  std::mutex create_mutex;
  std::atomic<DeviceMemory*> devices[kMaxDevices] = {};
  // Devices whose primary context was reset or destroyed: their pool is
  // retired for good (on_device_reset) and never touched again. Apart from
  // the entries, so that the hot path reads one flag.
  std::atomic<bool> retired[kMaxDevices] = {};
  // The devices the driver shows (cuDeviceGetCount), once asked; 0 before.
  std::atomic<int> device_count{0};
  // The budget cuMemGetInfo answers from without asking for the device
  // (devices.cpp mem_info): device 0's, once the driver showed one device
  // and that device's memory was made; NULL before, once the device was
  // reset, and in a forked child. Set and cleared under create_mutex.
  std::atomic<policy::DeviceBudget*> info_budget{nullptr};
  policy::MonotonicClock* clock = nullptr;
  // Peer access granted: peer_grants[owner][accessor] counts the context
  // pairs (accessor's context -> owner's context) with peer access
  // enabled. Under create_mutex, so a pool being made sees every grant.
  int peer_grants[kMaxDevices][kMaxDevices] = {};
  // The thread states' key (pool.cpp), made once.
  pthread_key_t thread_key{};
  pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

  // Each module's state (docs/DESIGN.md "Process state").
  ipc::State ipc;
  trace::State trace;
  stats::State stats;
  runtime::State runtime;
};

extern Process g_process;

inline bool active() { return g_process.active.load(std::memory_order_acquire); }

// The loaded driver, found once.
inline const RealDriver* loaded_driver() {
  const RealDriver* real = g_process.real.load(std::memory_order_acquire);
  if (__builtin_expect(!real, 0)) {
    real = real_driver();
    g_process.real.store(real, std::memory_order_release);
  }
  return real;
}

inline bool retired_device(int device) {
  return device >= 0 && device < kMaxDevices && g_process.retired[device].load(std::memory_order_relaxed);
}

// The device's memory, or NULL when none was made yet (or out of range).
inline DeviceMemory* device_memory(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_process.devices[device].load(std::memory_order_acquire);
}
// The device's memory, made (with its budget, without a pool) if there is
// none; NULL out of range or on host out of memory. Takes create_mutex.
DeviceMemory* device_memory_made(int device);

// The bytes as the pool's log lines write them.
inline std::string human_bytes(uint64_t bytes) { return format_bytes(bytes, ByteStyle::Exact); }

}  // namespace pagefast::pool
