// interpose/pool/sleep_state.h: what the sleep glue (sleep.cpp) and the
// tags' glue (tags.cpp: the regions' C API, the per-tag figures, the reuse
// of an empty tag's slot) share: the lock of sleep, wake and slot reuse,
// and the state of each slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace pagefast::pool {

// One sleep, wake or slot reuse at a time: a tag's slots do not change
// hands while a sleep or wake acts on them.
std::mutex& sleep_mutex();

// Per slot: asleep (the last sleep of the slot went ahead and no wake has
// finished since), and the counters of the per-tag stats (zeroed when the
// slot goes to another tag).
struct SlotState {
  std::atomic<bool> asleep{false};
  std::atomic<uint64_t> sleeps{0};
  std::atomic<uint64_t> wakes{0};
};
SlotState& slot_state(int slot);

}  // namespace pagefast::pool
