// policy/owner_add.h: owner_add, for counters that one thread writes and
// others read (a thread cache's figures, a thread's call counters).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define PF_OWNER_ADD_ASM 1
#else
#define PF_OWNER_ADD_ASM 0
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#undef PF_OWNER_ADD_ASM
#define PF_OWNER_ADD_ASM 0
#endif
#endif

namespace pagefast::policy {

// Adds to a counter that only its owner writes: no locked read-modify-
// write; readers on other threads see a recent value. On x86-64 one
// unlocked add to memory (an aligned 8-byte store is never torn), which
// the compiler does not make of an atomic load and store; elsewhere, and
// under ThreadSanitizer (which must see the store), the load and store.
inline void owner_add(std::atomic<uint64_t>& counter, uint64_t delta) {
#if PF_OWNER_ADD_ASM
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t), "a counter is one word");
  __asm__("addq %1, %0" : "+m"(counter) : "er"(delta) : "cc");
#else
  counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
#endif
}

}  // namespace pagefast::policy
