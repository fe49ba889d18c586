// interpose/pool/sleep.cpp: the glue of the footprint policy and of sleep
// and wake (docs/POOL.md "Footprint", "Sleep and wake"): the pagefast-trim
// thread that runs each pool's decay step, and pagefast_sleep /
// pagefast_wake of the C API (interpose/pagefast.h). The policy is in
// policy/footprint.* and policy/device_pool_footprint.cpp.
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <mutex>

#include "interpose/pagefast.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool_api.h"
#include "interpose/service_thread.h"
#include "policy/device_pool.h"

#define PF_EXPORT extern "C" __attribute__((visibility("default")))

namespace pagefast::pool {
namespace {

std::atomic<bool> g_trim_started{false};
std::mutex g_sleep_mutex;  // one pagefast_sleep/pagefast_wake at a time

void* trim_main(void*) {
  while (true) {
    uint64_t interval = policy::kFootprintMaxStepNs;
    for (int d = 0; d < kMaxDevices; ++d) {
      policy::DevicePool* pool = pool_for_device(d);
      if (!pool) continue;
      pool->decay_step();
      if (pool->footprint_interval_ns() < interval) interval = pool->footprint_interval_ns();
    }
    timespec ts{time_t(interval / 1000000000), long(interval % 1000000000)};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  return nullptr;
}

}  // namespace

void start_trim_thread(uint64_t release_delay_ns) {
  if (release_delay_ns == policy::kNoReleaseDelay || g_trim_started.exchange(true)) return;
  // No signal is ever delivered to it: the program's handlers stay on its
  // own threads.
  start_service_thread(nullptr, &trim_main, nullptr, "pagefast-trim");
}

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
      case policy::SleepStatus::Ok:
        break;
      case policy::SleepStatus::Partial:
        if (result == 0) result = 1;
        break;
      default:
        result = -1;
    }
  }
  return pools ? result : -1;
}

int sleep_all(unsigned flags) {
  return each_pool([flags](policy::DevicePool& pool) { return pool.sleep(flags); });
}

int wake_all() {
  // wake answers Ok or Failed (or Busy); never Partial.
  return each_pool([](policy::DevicePool& pool) { return pool.wake(); });
}

int control_op(uint16_t op, uint64_t arg) {
  switch (op) {
    case 3:  // kOpSleep (interpose/pool/ipc.cpp)
      return sleep_all(unsigned(arg) & (policy::kSleepKeep | policy::kSleepFail));
    case 4:
      return wake_all();
    case 5:
      return asleep_count();
    default:
      return -1;
  }
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
