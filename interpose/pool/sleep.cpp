// interpose/pool/sleep.cpp: the glue of sleep and wake (docs/POOL.md
// "Sleep and wake"): pagefast_sleep / pagefast_wake of the C API
// (interpose/pagefast.h) over every pool, and pagefast-ctl's requests
// that reach them through the control socket (interpose/ipc/). The policy
// is in policy/device_pool.h.
#include <cstdint>
#include <mutex>

#include "interpose/ipc/ipc.h"
#include "interpose/pagefast.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"

#define PF_EXPORT extern "C" __attribute__((visibility("default")))

namespace pagefast::pool {
namespace {

std::mutex g_sleep_mutex;  // one pagefast_sleep/pagefast_wake at a time

}  // namespace

// Runs `step` on every pool under the sleep lock and folds the answers:
// 0 all Ok, 1 some Partial (asleep, some chunks resident), -1 a failure
// or no pool at all.
template <typename Step>
int each_pool(Step step) {
  std::lock_guard<std::mutex> guard(g_sleep_mutex);
  int pools = 0, result = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    policy::DevicePool* pool = pool_for_device(d);
    if (!pool) continue;
    ++pools;
    switch (step(*pool)) {
      case policy::SleepStatus::Ok: break;
      case policy::SleepStatus::Partial:
        if (result == 0) result = 1;
        break;
      default: result = -1;
    }
  }
  return pools ? result : -1;
}

// Memory another process maps through CUDA IPC stays resident and shared
// across the sleep (docs/IPC.md "Sleep and wake"): chunks importers hold,
// and blocks this process imported. Either makes the answer 1.
//
// The program's own VMM memory: what pagefast keeps idle of the handles the
// program released (the own-VMM cache) goes back with the pools'; what
// the program still holds or maps stays resident, and sleep says so (one
// line per device naming the bytes, and the answer 1), never 0.
int sleep_all(unsigned flags) {
  int answer = each_pool([flags](policy::DevicePool& pool) {
    const policy::SleepStatus status = pool.sleep(flags, ipc::begin_sleep(pool.device()));
    if (!pool.asleep()) ipc::end_sleep(pool.device());
    return status;
  });
  if (answer < 0) return answer;
  if (answer == 0 && ipc::imports_across_sleep() > 0) answer = 1;
  // Every device, not only those with a pool: the program's VMM memory may
  // live where pagefast never allocated.
  for (int d = 0; d < kMaxDevices; ++d) {
    if (own_vmm::on()) own_vmm::trim(d, UINT64_MAX);
    const uint64_t resident = own_vmm::resident_bytes(d);
    if (!resident) continue;
    answer = 1;
    log_line(LogLevel::Warn,
             "device %d: %.1f MiB of the program's own VMM memory (its cuMemCreate: PyTorch's expandable "
             "segments, JAX) stay resident: sleep covers the pool's memory, not that",
             d, double(resident) / double(1 << 20));
  }
  return answer;
}

int wake_all() {
  // wake answers Ok or Failed (or Busy); never Partial.
  return each_pool([](policy::DevicePool& pool) {
    const policy::SleepStatus status = pool.wake();
    if (!pool.asleep()) ipc::end_sleep(pool.device());
    return status;
  });
}

int control_op(uint16_t op, uint64_t arg) {
  switch (op) {
    case 3:  // kOpSleep (interpose/ipc/ipc_wire.h)
      return sleep_all(unsigned(arg) & (policy::kSleepKeep | policy::kSleepFail));
    case 4: return wake_all();
    case 5: return asleep_count();
    default: return -1;
  }
}

bool device_asleep(int device) {
  const policy::DevicePool* pool = pool_for_device(device);
  return pool && pool->asleep();
}

int asleep_count() {
  int n = 0;
  for (int d = 0; d < kMaxDevices; ++d)
    if (policy::DevicePool* pool = pool_for_device(d)) n += pool->asleep() ? 1 : 0;
  return n;
}

}  // namespace pagefast::pool

PF_EXPORT int pagefast_sleep(unsigned flags) { return pagefast::pool::sleep_all(flags); }
PF_EXPORT int pagefast_wake(void) { return pagefast::pool::wake_all(); }
PF_EXPORT int pagefast_asleep(void) { return pagefast::pool::asleep_count(); }

static_assert(PAGEFAST_SLEEP_KEEP == pagefast::policy::kSleepKeep, "sleep flags out of step");
static_assert(PAGEFAST_SLEEP_FAIL == pagefast::policy::kSleepFail, "sleep flags out of step");
