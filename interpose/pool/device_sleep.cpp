// interpose/pool/device_sleep.cpp: the one sleep and wake of a device
// (DeviceMemory::sleep, wake; docs/SLEEP.md): the pool of each slot asked
// (policy/device_pool.h, over the arena's sleep) and the program's own VMM
// memory of the device in that slot (own_vmm::sleep_device, over
// policy/own_vmm/handle_sleep.h), through the device's provider: the same
// sync (every context that used the device), the same copy threads and
// host memory. sleep.cpp loops over the devices and folds their answers.
#include <cstdint>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"

namespace pagefast::pool {
namespace {

int answer_of(policy::SleepStatus status) {
  switch (status) {
    case policy::SleepStatus::Ok: return 0;
    case policy::SleepStatus::Partial: return 1;
    default: return -1;
  }
}

// The answers of the parts folded into one: -1 beats 1 beats 0.
int fold(int answer, int part) {
  if (answer < 0 || part < 0) return -1;
  return answer > part ? answer : part;
}

}  // namespace

void DeviceMemory::pools_asleep(int* pools, int* asleep) const {
  *pools = *asleep = 0;
  each_pool([&](int, policy::DevicePool* p) {
    ++*pools;
    *asleep += p->asleep() ? 1 : 0;
  });
}

void DeviceMemory::sleep(SlotSleep* slots, int count) {
  // What the own-VMM cache keeps idle goes back with the pools' idle
  // memory, before a handle sleeps: every handle left is the program's.
  if (own_vmm::on() && cache_holder_) cache_holder_->release(policy::kAllIdle);
  for (int i = 0; i < count; ++i) {
    SlotSleep& s = slots[i];
    int answer = 0;
    bool had = false;
    if (policy::DevicePool* pool = retired_device(device_) ? nullptr : pool_at(s.slot)) {
      had = true;
      answer = answer_of(pool->sleep(s.keep_modes | s.fail, ipc::begin_sleep(device_, pool)));
      int pools = 0, asleep = 0;
      pools_asleep(&pools, &asleep);
      if (asleep == 0) ipc::end_sleep(device_);
      if (answer < 0) {  // the program's memory of the slot here stays with it
        s.had = true;
        ++s.refused;
        continue;
      }
    }
    const own_vmm::SleepAnswer vmm = own_vmm::sleep_device(*this, s.slot, s.keep_modes);
    had = had || vmm.slept_bytes || vmm.resident_bytes;
    if (!had) continue;
    s.had = true;
    ++s.slept;
    s.answer = fold(s.answer, fold(answer, vmm.status));
  }
}

void DeviceMemory::wake(SlotWake* slots, int count) {
  for (int i = 0; i < count; ++i) {
    SlotWake& s = slots[i];
    int answer = own_vmm::wake_device(*this, s.slot) < 0 ? -1 : 0;
    if (policy::DevicePool* pool = retired_device(device_) ? nullptr : pool_at(s.slot)) {
      s.had = true;
      // wake answers Ok or Failed (or Busy); never Partial.
      answer = fold(answer, answer_of(pool->wake()));
      int pools = 0, asleep = 0;
      pools_asleep(&pools, &asleep);
      if (asleep == 0) ipc::end_sleep(device_);
    }
    s.answer = fold(s.answer, answer);
  }
}

bool DeviceMemory::driver_pool_resident() {
  if (retired_device(device_)) return false;
  const RealDriver* real = loaded_driver();
  CUmemoryPool pool = nullptr;
  cuuint64_t reserved = 0;
  if (driver::default_mem_pool(real, &pool, device_) != CUDA_SUCCESS ||
      driver::mem_pool_attribute(real, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
      reserved == 0)
    return false;
  log_line(LogLevel::Warn,
           "device %d: %.1f MiB of the driver's own stream-ordered pool (cudaMallocAsync) stay resident: "
           "pagefast cannot sleep that memory",
           device_, double(reserved) / double(1 << 20));
  return true;
}

}  // namespace pagefast::pool
