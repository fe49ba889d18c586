// policy/page_map.h: from a device address to the pool object that owns its
// granule, in O(1) and without a lock (TCMalloc's pagemap, mimalloc's
// segment map). cuMemFree and the address queries start here; a NULL entry
// means "not pool memory" and the call goes to the real driver.
//
// Two levels of 18 bits over 2 MiB granules cover a 57-bit address space
// (5-level paging included). The root is 2 MiB of zeroed .bss, touched only
// where ranges live; each leaf (512 GiB of address space) is 2 MiB of
// lazily committed anonymous memory, made when a range is first mapped and
// never freed, so a reader can never see a leaf go away.
//
// What an entry holds (kept so by the arena and the slab code, under the
// device lock): every granule of a live, cached or quarantined large block
// and of a slab points to it; the first and last granule of a free block
// point to that block; the interior of a free block may point to any
// earlier owner. Owners are type-stable (never returned to malloc), so a
// stale entry is always a valid object and callers validate what they read
// (a free is accepted only if the object says "live block starting here").
#pragma once

#include <atomic>
#include <cstdint>

#include "policy/units.h"

namespace pagefast::policy {

class DevicePool;

enum class SpanKind : uint8_t { Block, Slab };

// The common head of every object a page-map entry can point to.
struct Span {
  SpanKind kind;
  DevicePool* pool;
};

class PageMap {
 public:
  static constexpr int kRootBits = 18;
  static constexpr int kLeafBits = 18;
  static constexpr int kAddressBits = kRootBits + kLeafBits + kGranuleShift;

  constexpr PageMap() : root_{} {}
  PageMap(const PageMap&) = delete;
  PageMap& operator=(const PageMap&) = delete;

  // Lock-free; NULL for any address that was never mapped by a pool.
  Span* lookup(uint64_t addr) const {
    const uint64_t index = granule_index(addr);
    if (index >> (kRootBits + kLeafBits)) return nullptr;
    const Leaf* leaf = root_[index >> kLeafBits].load(std::memory_order_acquire);
    if (!leaf) return nullptr;
    return leaf->entry[index & (kLeafEntries - 1)].load(std::memory_order_acquire);
  }

  // Makes the leaves for [addr, addr + granules). false: out of host memory
  // (nothing was changed that matters: leaves made so far stay).
  bool ensure(uint64_t addr, Granules granules);
  // REQUIRES: ensure() covered the range.
  void set(uint64_t addr, Granules granules, Span* span);
  void set_one(uint64_t addr, Span* span) { entry(granule_index(addr)).store(span, std::memory_order_release); }

  // Tests only: unmaps every leaf (no reader may be running). The global
  // map never does this; leaves live as long as the process.
  void destroy_leaves_for_tests();

 private:
  static constexpr uint64_t kLeafEntries = uint64_t(1) << kLeafBits;
  struct Leaf {
    std::atomic<Span*> entry[kLeafEntries];
  };
  std::atomic<Span*>& entry(uint64_t index) {
    return root_[index >> kLeafBits].load(std::memory_order_relaxed)->entry[index & (kLeafEntries - 1)];
  }
  std::atomic<Leaf*> root_[uint64_t(1) << kRootBits];
};

// The process-wide map that the driver entry points consult is policy's
// state's (policy/state.h global_page_map). Constant-initialised: a
// constexpr constructor and a trivial destructor.

}  // namespace pagefast::policy
