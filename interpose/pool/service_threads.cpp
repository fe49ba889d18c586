// interpose/pool/service_threads.cpp: pagefast's service threads that call
// the driver, and their exit stop (docs/POOL.md "Footprint", "Process
// lifetime"): the pagefast-trim thread that runs each pool's decay step,
// keeps the headroom and lets the program's released VMM memory decay;
// and the stop at process exit that it shares with the pagefast-vmm
// worker (own_vmm.cpp). The policy is in policy/footprint.* and
// policy/device_pool_footprint.cpp.
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdlib>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "interpose/service_thread.h"
#include "policy/device_pool.h"

namespace pagefast::pool {
namespace {

ServiceState& state() { return g_process.service; }

// Process exit is no place for driver calls (the runtime tears the context
// down in its own exit handler): the service threads' steps, which call
// the driver, stop at exit. The handler is registered with the first
// thread, after the CUDA runtime registered its own (it initialised before
// the first allocation), so it runs first: it raises `stop` and waits for
// a step under way (a sync ends once the device's queue drains), at most
// kExitWaitMs, then leaves the thread be. (Flags rather than a timed mutex:
// pthread_mutex_clocklock would need glibc 2.30, docs/PACKAGING.md.)
constexpr int kExitWaitMs = 2000;

void sleep_ns(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void stop_steps_at_exit() {
  state().steps_stop.store(true, std::memory_order_seq_cst);
  for (int ms = 0; ms < kExitWaitMs; ++ms) {
    if (state().steps_busy.load(std::memory_order_seq_cst) == 0) return;
    sleep_ns(1000 * 1000);
  }
}

}  // namespace

// A forked child has none of these threads (a step under way in the parent
// at the fork left the count raised there): its exit must not wait for one.
void service_threads_after_fork_child() { state().steps_busy.store(0, std::memory_order_relaxed); }

void register_exit_stop() {
  pthread_once(&state().exit_once, [] { std::atexit(&stop_steps_at_exit); });
}

// The count is raised before the stop is read, and the stop raised before
// the count is read (both seq_cst): either the exit handler sees the step,
// or the step sees the stop.
bool enter_step() {
  state().steps_busy.fetch_add(1, std::memory_order_seq_cst);
  return !state().steps_stop.load(std::memory_order_seq_cst);
}

void leave_step() { state().steps_busy.fetch_sub(1, std::memory_order_seq_cst); }

bool exit_stopping() { return state().steps_stop.load(std::memory_order_relaxed); }

namespace {

// A service thread: one step over every pool, then the least wait any pool
// asked for (at most `longest`), until the exit stop (enter_step).
struct ServiceLoop {
  uint64_t longest;
  uint64_t (*step)(policy::DevicePool& pool);  // returns the pool's wait
  uint64_t (*once)();                          // after the pools, once a round (or NULL); returns its wait
};

void* service_main(void* arg) {
  const ServiceLoop& loop = *static_cast<const ServiceLoop*>(arg);
  while (true) {
    uint64_t wait = loop.longest;
    const bool on = enter_step();
    if (on)
      for (int d = 0; d < kMaxDevices; ++d) {
        const DeviceMemory* memory = pool_for_device(d) ? device_memory(d) : nullptr;
        if (!memory) continue;
        memory->each_pool([&wait, &loop](int, policy::DevicePool* pool) {
          const uint64_t w = loop.step(*pool);
          if (w < wait) wait = w;
        });
      }
    if (on && loop.once) {
      const uint64_t w = loop.once();
      if (w < wait) wait = w;
    }
    leave_step();
    if (!on) return nullptr;
    sleep_ns(wait);
  }
}

// Once a round the trim thread also keeps the headroom (relieve_headroom,
// docs/POOL.md "Headroom"), at least every kHeadroomStepNs, page-locks host
// memory ahead of the keep regions' sleep (prelock_step: the next round
// at once while it page-locks whole steps), and lets the
// program's released VMM memory decay (own_vmm::decay_step,
// docs/OWN-VMM.md).
constexpr uint64_t kHeadroomStepNs = 100ull * 1000 * 1000;
uint64_t trim_round_once() {
  relieve_headroom();
  const bool more = prelock_step();
  const uint64_t decay = own_vmm::decay_step();
  const uint64_t wait = more ? 0 : decay;
  return wait < kHeadroomStepNs ? wait : kHeadroomStepNs;
}
constexpr ServiceLoop kTrimLoop{policy::kFootprintMaxStepNs,
                                [](policy::DevicePool& pool) {
                                  pool.decay_step();
                                  return pool.footprint_interval_ns();
                                },
                                &trim_round_once};

}  // namespace

// No signal is ever delivered to these threads: the program's handlers
// stay on its own threads.
void start_trim_thread(const PoolConfig& config, bool for_prelock) {
  if (config.release_delay_ns == policy::kNoReleaseDelay && !config.headroom_bytes &&
      !(for_prelock && config.sleep_prelock_percent && config.sleep_host_keep))
    return;
  if (state().trim_started.exchange(true)) return;
  register_exit_stop();
  start_service_thread(nullptr, &service_main, const_cast<ServiceLoop*>(&kTrimLoop), "pagefast-trim");
}

// ---- growth ahead: the pagefast-grow thread (policy/grow_ahead.h) ----------

namespace {

// Started by the first ask (a pool's slow path, no pool lock held), never
// in a constructor; all signals blocked. It sleeps until asked, then makes
// each asked pool's step under the exit stop (enter_step): the driver's
// create, map and access of a chunk, which the program's thread then does
// not wait for (DevicePool::grow_ahead holds no pool lock across them).
// pthread's objects, not std::condition_variable: nothing of ours has a
// destructor at exit (one would wait there for the thread that waits on it):
// ServiceState's grow_*.

void* grow_main(void*) {
  while (true) {
    pthread_mutex_lock(&state().grow_mutex);
    while (!state().grow_wanted) pthread_cond_wait(&state().grow_cv, &state().grow_mutex);
    state().grow_wanted = false;
    pthread_mutex_unlock(&state().grow_mutex);
    const bool on = enter_step();
    if (on)
      for (int d = 0; d < kMaxDevices; ++d) {
        DeviceMemory* memory = pool_for_device(d) ? device_memory(d) : nullptr;
        if (!memory) continue;
        // The device's context current on this thread for the driver's
        // calls, as the program's thread would have it.
        const RealDriver* real = real_driver();
        const CUcontext want = memory->provider() ? memory->provider()->copy_context() : nullptr;
        CUcontext current = nullptr;
        driver::ctx_get_current(real, &current);
        if (want && want != current) driver::ctx_set_current(real, want);
        memory->each_pool([](int, policy::DevicePool* pool) {
          if (pool->ahead_asked()) pool->grow_ahead();
        });
      }
    leave_step();
    if (!on) return nullptr;
  }
}

}  // namespace

void wake_grow_ahead() {
  pthread_mutex_lock(&state().grow_mutex);
  if (state().grow_state.load(std::memory_order_relaxed) == 0) {
    register_exit_stop();
    const bool started = start_service_thread(nullptr, &grow_main, nullptr, "pagefast-grow") == 0;
    state().grow_state.store(started ? 1 : -1, std::memory_order_relaxed);
  }
  // Not started: the pool grows on demand only.
  const bool running = state().grow_state.load(std::memory_order_relaxed) > 0;
  if (running) state().grow_wanted = true;
  pthread_mutex_unlock(&state().grow_mutex);
  if (running) pthread_cond_signal(&state().grow_cv);
}

}  // namespace pagefast::pool
