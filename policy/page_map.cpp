// policy/page_map.cpp: leaf allocation for the page map. Leaves come from
// mmap, not malloc: 2 MiB each, committed page by page as entries are set.
#include "policy/page_map.h"

#include <sys/mman.h>

#include "policy/state.h"

namespace pagefast::policy {

bool PageMap::ensure(uint64_t addr, Granules granules) {
  if (granules.count() == 0) return true;
  const uint64_t first = granule_index(addr), last = first + granules.count() - 1;
  if (last >> (kRootBits + kLeafBits)) return false;
  for (uint64_t r = first >> kLeafBits; r <= (last >> kLeafBits); ++r) {
    if (root_[r].load(std::memory_order_acquire)) continue;
    void* memory =
        mmap(nullptr, sizeof(Leaf), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return false;
    Leaf* expected = nullptr;
    // Zero-filled by the kernel: every atomic entry reads as NULL.
    if (!root_[r].compare_exchange_strong(expected, static_cast<Leaf*>(memory), std::memory_order_acq_rel))
      munmap(memory, sizeof(Leaf));  // another pool made it first
  }
  return true;
}

void PageMap::set(uint64_t addr, Granules granules, Span* span) {
  const uint64_t first = granule_index(addr);
  for (uint64_t i = 0; i < granules.count(); ++i) entry(first + i).store(span, std::memory_order_release);
}

void PageMap::destroy_leaves_for_tests() {
  for (auto& root : root_)
    if (Leaf* leaf = root.exchange(nullptr, std::memory_order_acq_rel)) munmap(leaf, sizeof(Leaf));
}

State g_state;

}  // namespace pagefast::policy
