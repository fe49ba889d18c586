// interpose/pool/device_memory.h: one device's memory, with one owner
// (docs/DESIGN.md "Who owns what"). A DeviceMemory owns the device's
// budget (policy/device_budget.h) and, once the device is pooled, its VMM
// provider, the budgeted provider the pool grows through, and the pool.
// The budget's holders are each pool of the device and the own-VMM
// cache's share of this device; the parts meet there and nowhere else:
//
//   hooks / glue ──> DeviceMemory ──> DeviceBudget ──> PoolShare (one a pool) ──> DevicePool
//                                                  └─> the own-VMM cache's DeviceShare
//   the own-VMM cache ──> CacheRoom (its budget view) ──> DeviceBudget::room_for
//   DevicePool ──> BudgetedProvider (the limit) ──> VmmProvider ──> driver seam
//   DevicePool ──> DeviceBudget (room, with none of its locks held)
//
// Made at the first need (an allocation, an out-of-memory answer, the
// client cache's first question), never destroyed: process exit leaks it,
// a device reset retires its pool and keeps the object.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "interpose/pool/region.h"
#include "interpose/pool/vmm_provider.h"
#include "policy/budgeted_provider.h"
#include "policy/device_budget.h"
#include "policy/device_pool.h"
#include "policy/own_vmm/device_share.h"

namespace pagefast::pool {

class DeviceMemory {
 public:
  // The device's budget, with its headroom and limit, and the own-VMM
  // cache's share as its first holder (its released pages go first: the
  // pool's idle memory is what its threads' next allocations hit).
  DeviceMemory(int device, const PoolConfig& config);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  int device() const { return device_; }
  policy::DeviceBudget& budget() { return budget_; }

  // The pool, or NULL while there is none (not made yet, the device is not
  // poolable, or retired). Lock-free.
  policy::DevicePool* pool() const { return pool_.load(std::memory_order_acquire); }
  // Whether making a pool here was tried and failed, or the pool retired.
  bool unpoolable() const { return unpoolable_.load(std::memory_order_acquire); }
  // REQUIRES: the process's create_mutex. Makes the provider and the pool
  // (prewarmed, with the peers granted so far); NULL with one info line
  // when the device cannot be pooled (marked unpoolable).
  policy::DevicePool* make_pool_locked(const RealDriver* real, CUdevice device, policy::Clock& clock,
                                       const int* peer_grants);
  // REQUIRES: the process's create_mutex. The context was reset: the pool
  // is dropped from here (the object leaks: another thread may be inside
  // it, and its chunks went with the context). Returns the pool it held.
  policy::DevicePool* retire_locked();

  VmmProvider* provider() const { return provider_; }
  // The provider the program's own VMM memory copies through at sleep and
  // wake (own_vmm_copy.cpp): the pool's, else one made for those copies
  // alone, which the pool takes when it is made. NULL when none can be
  // made. Takes the process's create_mutex the first time (lock order: the
  // own-VMM sleep mutex, then create_mutex).
  VmmProvider* copy_provider(const RealDriver* real);
  // copy_provider's if it was made (or the pool's), else NULL; no lock.
  VmmProvider* copy_provider_made() const { return copier_.load(std::memory_order_acquire); }
  // For a thread that cannot get a cache of its own (host out of memory),
  // under fallback_mutex().
  policy::ThreadCache* fallback_cache() const { return fallback_; }
  std::mutex& fallback_mutex() { return fallback_mutex_; }

  // Regions (interpose/pool/region.h, docs/SLEEP.md): the memory of a
  // region's slot lives in a pool of its own, beside the device's pool,
  // so that a tagged sleep releases whole chunks of that tag only. Such a
  // pool shares the provider, is a holder of the budget of its own, grows
  // from nothing (no prewarm) in steps that start at one granule and
  // double up to the chunk size, and has one cache shared by every thread
  // under its lock: a region's allocations are few and large (a KV cache,
  // weights, a caching allocator's segments).
  // The pool of `slot` (0: the device's pool), NULL while none; lock-free.
  policy::DevicePool* pool_at(int slot) const {
    if (slot == 0) return pool();
    if (slot < 0 || slot >= region::kMaxSlots || unpoolable()) return nullptr;
    return tagged_[slot].pool.load(std::memory_order_acquire);
  }
  // The pool of `slot`, made if there is none (takes the process's
  // create_mutex); NULL when the device is not pooled, or out of host
  // memory (the allocation then goes to the driver, untagged; logged once).
  policy::DevicePool* tagged_pool_made(int slot, policy::Clock& clock);
  // The cache of a pool of `slot` shared under its lock (slot 0: the
  // fallback cache).
  policy::ThreadCache* shared_cache(int slot) const { return slot == 0 ? fallback_ : tagged_[slot].cache; }
  std::mutex& shared_mutex(int slot) { return slot == 0 ? fallback_mutex_ : tagged_[slot].mutex; }
  // Calls f(slot, pool) for the device's pool and each region's pool.
  template <typename F>
  void each_pool(F f) const {
    for (int slot = 0; slot < region::kMaxSlots; ++slot)
      if (policy::DevicePool* p = pool_at(slot)) f(slot, p);
  }

  // The driver refused a call for lack of memory: everything idle here
  // goes back (DeviceBudget::reclaim). Returns the bytes released.
  uint64_t reclaim();
  // The trim thread's step: under the headroom, the shortfall goes back.
  uint64_t relieve();
  // A managed allocation of `bytes` is coming: keep it and the headroom
  // free. free_now: the driver's free memory, read by a caller that saw
  // the budget hold idle memory first.
  void relieve_for_managed(uint64_t bytes, uint64_t free_now);
  // REQUIRES: the process's create_mutex. Joins the own-VMM cache
  // (own_vmm::join, policy/own_vmm/device_share.h): the cache gets this
  // budget's view, and its holder of this device is added to the budget.
  // Once; made with the device's memory, or by the cache's configure when
  // this memory was made before the cache.
  void join_own_vmm();

  // The pool's stats with the budget's counters.
  policy::PoolStats stats();
  // The device's PCI bus id as the driver writes it ("0000:41:00.0"),
  // asked once; "" when the driver does not say. How processes that
  // number their devices differently name one GPU to each other.
  const char* bus_id();
  // Another process on the device ran short (ipc::ask_neighbours): every
  // idle byte here goes back. Returns the bytes released.
  uint64_t give_back_for_neighbour();

  // The one sleep of the device (device_sleep.cpp, docs/SLEEP.md), under
  // sleep's lock: first the own-VMM cache's idle memory of the device goes
  // back (once, through its holder of the budget); then for each slot asked
  // its pool (with CUDA IPC's bracket: what another process maps stays)
  // and the program's own VMM memory of the device in that slot
  // (own_vmm::sleep_device), which stays resident where the pool could
  // not sleep. Both sync every context that used the device, and copy on
  // the device's copy threads.
  // Each slot's answer is added to what the devices before this one said
  // (the caller zeroes it once, and loops over the devices).
  struct SlotSleep {
    int slot = 0;
    unsigned keep_modes = 0;  // policy::kSleepKeep with where; 0: discard
    unsigned fail = 0;        // policy::kSleepFail, or 0
    // The devices where the slot's pool refused (a capture or a failed
    // sync: nothing of the slot changed there), and where it slept;
    // answer: the others' folded (0, or 1: some memory stayed resident);
    // had: the slot holds memory on some device.
    int refused = 0;
    int slept = 0;
    int answer = 0;
    bool had = false;
  };
  void sleep(SlotSleep* slots, int count);
  // Wake of each slot asked: its own-VMM memory, then its pool. answer,
  // folded over the devices: 0, or -1 (something of the slot still asleep
  // on some device: call again); had: the slot has a pool on some device.
  struct SlotWake {
    int slot = 0;
    int answer = 0;
    bool had = false;
  };
  void wake(SlotWake* slots, int count);
  // The driver's own stream-ordered pool (cudaMallocAsync) holds memory on
  // the device, which pagefast cannot sleep: named in the log.
  bool driver_pool_resident();
  // The device's pools, and of them those asleep.
  void pools_asleep(int* pools, int* asleep) const;

 private:
  // The budget's holder for the pool of one slot (0: the device's pool):
  // each pool is a holder of its own, so that the idle memory of any pool
  // (a tag's or the device's) serves the growth or the wake of any other.
  class PoolShare final : public policy::Holder {
   public:
    PoolShare() = default;
    void set(const DeviceMemory* owner, int slot) {
      owner_ = owner;
      slot_ = slot;
    }
    // Before the share is added to the budget: the pool's mapped bytes are
    // its held word (a retired pool's stays: it is asked, and answers 0).
    void set_pool(const policy::DevicePool* pool) { set_held_word(pool->mapped_bytes_word(), false); }
    uint64_t held_bytes() override;
    uint64_t idle_bytes() override;
    void figures(uint64_t* held, uint64_t* idle) override;
    uint64_t release(uint64_t bytes) override;

   private:
    const DeviceMemory* owner_ = nullptr;
    int slot_ = 0;
  };
  // The budget as the own-VMM cache sees it: the cache holds at most
  // release_threshold, and under a limit no more than the budget leaves
  // its holder beside the pools (DeviceBudget::room_for).
  class CacheRoom final : public policy::own_vmm::BudgetView {
   public:
    CacheRoom(policy::DeviceBudget* budget, uint64_t threshold) : budget_(budget), threshold_(threshold) {}
    uint64_t room(const policy::Holder& share) override {
      const uint64_t left = budget_->room_for(&share);
      return left < threshold_ ? left : threshold_;
    }

   private:
    policy::DeviceBudget* const budget_;
    const uint64_t threshold_;
  };

  // The other pagefast processes on this device, asked over their
  // sockets (ipc::ask_neighbours) by the budget.
  class NeighbourShare final : public policy::Neighbours {
   public:
    explicit NeighbourShare(DeviceMemory* owner) : owner_(owner) {}
    uint64_t give_back(uint64_t bytes) override;

   private:
    DeviceMemory* const owner_;
  };

  const int device_;
  policy::DeviceBudget budget_;
  NeighbourShare neighbours_{this};
  std::once_flag bus_once_;
  char bus_id_[32] = {};
  CacheRoom cache_room_;
  policy::Holder* cache_holder_ = nullptr;    // the own-VMM cache's of this device, once joined
  PoolShare pool_shares_[region::kMaxSlots];  // [slot]
  std::atomic<policy::DevicePool*> pool_{nullptr};
  std::atomic<bool> unpoolable_{false};
  struct Tagged {
    std::atomic<policy::DevicePool*> pool{nullptr};
    policy::ThreadCache* cache = nullptr;  // set before pool is published
    std::mutex mutex;
  };
  Tagged tagged_[region::kMaxSlots];  // [0] unused: the device's pool is pool_
  std::atomic<bool> tagged_failed_{false};
  VmmProvider* provider_ = nullptr;
  std::atomic<VmmProvider*> copier_{nullptr};     // copy_provider's; provider_ once the pool is made
  policy::BudgetedProvider* budgeted_ = nullptr;  // every pool of the device grows through it
  policy::ThreadCache* fallback_ = nullptr;
  std::mutex fallback_mutex_;
  std::atomic<uint64_t> oom_retries_{0};
  std::atomic<uint64_t> peak_in_use_{0}, peak_mapped_{0};  // stats(): the device's, as read
};

}  // namespace pagefast::pool
