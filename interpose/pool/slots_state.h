// interpose/pool/slots_state.h: the slots' one table (docs/SLEEP.md): per
// slot, the region's part (region.cpp: its tag's name and policy, its open
// regions and begins) and the sleep's part (sleep.cpp, tags.cpp: asleep,
// the per-tag counters), with the regions' lock, their thread-exit key and
// the lock of sleep, wake and slot reuse. Held by the process object
// (interpose/pool/process_state.h, docs/DESIGN.md "Process state").
// Constant-initialised, never destroyed; a forked child makes its two
// mutexes anew (sleep_after_fork_child).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "interpose/pool/region.h"
#include "interpose/pool/sleep_state.h"

namespace pagefast::pool {

struct SlotsState {
  struct Slot {
    // The region's part, filled under `mutex` and published by `count`
    // (release); it changes (name, policy) only when an empty tag's slot
    // is reused (region.cpp take_over, under `mutex`). The name's last byte
    // stays 0 (names are at most kTagMaxChars): a lock-free reader racing
    // with the slot's reuse reads a name that ends.
    char name[region::kMaxNameBytes] = {};
    unsigned policy = 0;
    std::atomic<int> open{0};        // threads' regions of this slot open now
    std::atomic<int64_t> begins{0};  // regions of this slot begun so far (under `mutex`)
    SlotState sleep;                 // the sleep's part (sleep_state.h)
  };
  Slot slots[region::kMaxSlots];
  std::atomic<int> count{1};  // slots in use; slot 0 is outside any region
  std::mutex mutex;           // the regions' lock
  // Thread exit closes the thread's open regions: a pthread key, set at
  // the thread's first region, whose destructor ends them all.
  pthread_key_t exit_key{};
  pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
  std::mutex sleep_mutex;  // sleep_state.h sleep_mutex()
};

}  // namespace pagefast::pool
