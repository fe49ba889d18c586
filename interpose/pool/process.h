// interpose/pool/process.h: the process object (process_state.h) and the
// pool glue's inline reads of it.
#pragma once

#include <atomic>
#include <string>

#include "interpose/pool/process_state.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/format.h"

namespace pagefast::pool {

inline bool active() { return g_process.active.load(std::memory_order_acquire); }

// The loaded driver, found once.
inline const RealDriver* loaded_driver() { return real_driver(); }

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
