// interpose/pool/process_state.h: the process-wide state in one object (docs/DESIGN.md "Who owns what"): the configuration, the on-switch,
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

#include "interpose/driver_state.h"
#include "interpose/hooks_state.h"
#include "interpose/ipc/ipc_state.h"
#include "interpose/live/publisher_state.h"
#include "interpose/log_state.h"
#include "interpose/pool/glue_state.h"
#include "interpose/pool/own_vmm_state.h"
#include "interpose/pool/slots_state.h"
#include "interpose/pool_api.h"
#include "interpose/runtime_state.h"
#include "interpose/stats_state.h"
#include "interpose/trace_state.h"
#include "policy/clock.h"
#include "policy/config.h"

namespace pagefast::policy {
class DeviceBudget;
}

namespace pagefast::pool {

class DeviceMemory;

struct Process {
  std::atomic<bool> active{false};  // configured on, and not a forked child
  PoolConfig config;
  LogSink log = nullptr;
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
  driver::State driver;
  log::State logger;  // the log (log.cpp); `log` above is the pool glue's sink
  live::State live;
  hook::State hook;
  ContextsState contexts;
  ServiceState service;
  PrelockState prelock;
  SlotsState slots;
  own_vmm::State vmm;  // the own-VMM glue (own_vmm_state.h)
  ipc::State ipc;
  trace::State trace;
  stats::State stats;
  runtime::State runtime;
};

extern Process g_process;

}  // namespace pagefast::pool
