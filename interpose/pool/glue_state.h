// interpose/pool/glue_state.h: the pool glue's process-wide state apart
// from the devices' entries: the tracked contexts (contexts.cpp), the
// service threads (service_threads.cpp) and the page-locking ahead
// (prelock.cpp), each a struct of its own, held by the process object
// (interpose/pool/process_state.h, docs/DESIGN.md "Process state").
// Constant-initialised, never destroyed: pthread's objects, not
// std::condition_variable (one destroyed at exit would wait there for the
// thread that waits on it).
#pragma once

#include <cuda.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "interpose/pool_api.h"
#include "policy/blocks.h"

namespace pagefast::pool {

// The contexts the pool has seen, each with its tag (contexts.cpp), under
// `mutex`.
struct ContextsState {
  static constexpr int kTracked = 64;
  struct Tracked {
    CUcontext context;
    int device;
    policy::ContextTag tag;
  };
  std::mutex mutex;
  Tracked tracked[kTracked] = {};
  int count = 0;
  uint32_t next_tag = 1;
  bool full_logged = false;
};

// The trim thread, the grow thread and the exit stop (service_threads.cpp).
struct ServiceState {
  std::atomic<bool> trim_started{false};
  std::atomic<bool> steps_stop{false};  // raised at exit
  // Steps under way on pagefast's threads that call the driver: the trim
  // thread's and the pagefast-vmm worker's (own_vmm.cpp).
  std::atomic<int> steps_busy{0};
  pthread_once_t exit_once = PTHREAD_ONCE_INIT;
  std::atomic<int> grow_state{0};                          // 0 not started, 1 running, -1 could not start
  pthread_mutex_t grow_mutex = PTHREAD_MUTEX_INITIALIZER;  // guards grow_wanted and the start
  pthread_cond_t grow_cv = PTHREAD_COND_INITIALIZER;
  bool grow_wanted = false;
};

// Page-locking ahead (prelock.cpp): the trim thread's alone.
struct PrelockState {
  uint64_t last_digest[kMaxDevices] = {};  // each device's digest of the round before
  uint64_t host_bytes = 0;                 // the host's memory, once asked (0 before)
};

}  // namespace pagefast::pool
