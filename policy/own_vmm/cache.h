// policy/own_vmm/cache.h: the own-VMM cache, the physical-memory cache for
// the program's own VMM calls (docs/OWN-VMM.md): programs that call
// cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease
// themselves (PyTorch's expandable segments, JAX's platform allocator,
// vLLM's CuMemAllocator).
//
// Pure C++ (no CUDA header): every driver call goes through Driver
// (policy/own_vmm/driver.h). A handle's bytes, device, the program's
// references and mappings are the ledger's (policy/own_vmm/ledger.h): the
// cache decides with them and notes there every call it answers, under
// its lock; what it keeps itself is what is its own (the key, cached
// handles, deferred mappings, access, reservations and kept ranges). The
// cache drives growth ahead (policy/own_vmm/growth_ahead.h), which hands
// its pages back through one callback.
//
// What it does, and why it is exact (each rule is a test in
// tests/policy/own_vmm/):
// - Released handles: cuMemRelease of a handle the program created with
//   cacheable properties (the glue decides: pinned device memory, flags
//   0), once no mapping of it is live, keeps the handle (the driver still
//   holds it) in a FIFO keyed by the exact property bytes and size (its
//   key, policy/own_vmm/key.h). A later cuMemCreate with the same
//   bytes and size gets it back without a driver call. A reference that
//   an import of the handle's own export added (ledger `imports`) is the
//   driver's: its release is forwarded.
// - Deferred mappings: cuMemUnmap of a range made exactly of live mappings
//   of tracked, never-exported handles is deferred: the mapping stays
//   (mapped and accessible) and is marked deferred. A later cuMemMap of
//   the same handle at the same address, size and offset (flags 0) revives
//   it without the driver; cuMemSetAccess over a range made exactly of
//   live mappings whose access for each location named is already the
//   flags asked (every access call since the map covered the whole
//   mapping) with the same descriptor bytes is answered without the
//   driver: applying the same descriptors again changes nothing. Access is
//   kept per location (a descriptor's first `location_bytes`), so
//   PyTorch's one call per device (its own, then each peer) is recognised
//   too.
// - Growth ahead (prefetch_pages > 0): a cuMemSetAccess the driver
//   performed that ends with a fresh whole-handle mapping inside a
//   reservation the program made grows the next pages of its key ahead;
//   they arrive as cached handles with deferred mappings.
// - Kept ranges: cuMemAddressFree of a whole reservation holding only
//   deferred mappings of tracked handles keeps it with them; the next
//   cuMemAddressReserve of its size (take_range) gets it back.
// - Trim and decay: cached memory goes back when the device needs it
//   (trim) and after release_delay unused (decay_step).
// - Anything else that touches a deferred mapping's addresses (a map there,
//   access over it, a different offset or size, cuMemAddressFree, a pointer
//   query, cuMemRetainAllocationHandle) first unmaps it for real, so the
//   driver sees what the program believes.
// - A handle the program released (refs 0) is refused (kInvalidValue) by
//   map / release / export / property queries, as the driver refuses a
//   released handle.
//
// Thread-safe: one mutex, the ledger's (one lock over the program's
// handles), held across the driver calls made for the program (these
// calls cost tens of microseconds; none is on a hot path), and shared
// with growth ahead (one lock, one order). The mutex is never
// held while calling into the device pool.
//
// Files: cache.cpp (handles, mappings, access), cache_ahead.cpp (where
// growth ahead may go, its pages published), cache_reclaim.cpp (kept
// ranges, trim, decay, forgetting, stats).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/own_vmm/device_share.h"
#include "policy/own_vmm/driver.h"
#include "policy/own_vmm/growth_ahead.h"
#include "policy/own_vmm/ledger.h"

namespace pagefast::policy::own_vmm {

struct CacheStats {
  uint64_t cached_bytes = 0;       // released by the program, held by the cache
  uint64_t create_hits = 0;        // cuMemCreate served from the cache
  uint64_t create_misses = 0;      // eligible cuMemCreate that went to the driver
  uint64_t deferred_unmaps = 0;    // cuMemUnmap answered without the driver
  uint64_t revived_maps = 0;       // cuMemMap answered without the driver
  uint64_t access_skipped = 0;     // cuMemSetAccess answered without the driver
  uint64_t real_unmaps = 0;        // deferred mappings unmapped for real later
  uint64_t trimmed_bytes = 0;      // cached memory given back to the driver
  uint64_t prefetched = 0;         // handles created, mapped and opened ahead of the program
  uint64_t ahead_waits = 0;        // program calls that waited for the worker's page
  uint64_t ahead_wait_ns = 0;      // how long they waited, in all
  uint64_t ahead_cancelled = 0;    // pages planned ahead and dropped (the program came first)
  uint64_t ahead_misdirected = 0;  // pages made ahead that the program mapped at another address
  uint64_t ranges_kept = 0;        // cuMemAddressFree of a range of deferred mappings, kept with them
  uint64_t ranges_reused = 0;      // cuMemAddressReserve answered with a kept range
  uint64_t decayed_bytes = 0;      // cached memory given back after release_delay unused (part of trimmed_bytes)
};

class Cache {
 public:
  // An access descriptor is `desc_bytes` long; its first `location_bytes`
  // name the location it sets (sizeof(CUmemAccessDesc) and
  // sizeof(CUmemLocation) in production). `prefetch_pages`, `ahead_on_worker`:
  // growth ahead's (policy/own_vmm/growth_ahead.h). `ledger`: the
  // program's handles (ledger.h), which the cache reads and updates for
  // every call it answers; without one, the cache has a ledger of its own.
  Cache(Driver& driver, Ledger& ledger, size_t desc_bytes, size_t location_bytes, int prefetch_pages = 0,
        bool ahead_on_worker = false)
      : Cache(driver, nullptr, &ledger, desc_bytes, location_bytes, prefetch_pages, ahead_on_worker) {}
  Cache(Driver& driver, size_t desc_bytes, size_t location_bytes, int prefetch_pages = 0, bool ahead_on_worker = false)
      : Cache(driver, std::make_unique<Ledger>(), nullptr, desc_bytes, location_bytes, prefetch_pages,
              ahead_on_worker) {}

  // Growth ahead's worker (GrowthAhead::work_one, wait_for_work,
  // pending_pages): the glue's pagefast-vmm thread and the tests run it.
  bool work_one() { return ahead_.work_one(); }
  bool wait_for_work(uint64_t timeout_ns) { return ahead_.wait_for_work(timeout_ns); }
  uint64_t pending_pages() { return ahead_.pending_pages(); }

  // cuMemAddressReserve succeeded: the program's range (prefetch stays in it).
  void note_reserved(uint64_t base, uint64_t bytes);

  // cuMemCreate, before the driver: a cached handle of exactly `bytes` and
  // `prop` (the property bytes), or false.
  bool take(uint64_t bytes, const std::string& prop, uint64_t* handle);
  // cuMemCreate succeeded at the driver with a cacheable property set.
  void note_created(uint64_t handle, uint64_t bytes, const std::string& prop, int device);

  int release(uint64_t handle);
  int map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle, uint64_t flags);
  int unmap(uint64_t addr, uint64_t bytes);
  int set_access(uint64_t addr, uint64_t bytes, const std::string& descs);
  int address_free(uint64_t addr, uint64_t bytes);
  // cuMemAddressReserve, before the driver: a range the program freed
  // while only deferred mappings were left in it, of exactly `bytes`
  // (alignment met, no flags, no address hint or the range's own), is
  // handed out again with them. A hint into another kept range frees that
  // range for real first (false: the driver answers, and can honour it).
  bool take_range(uint64_t bytes, uint64_t alignment, uint64_t hint, uint64_t flags, uint64_t* base);

  // cuMemRetainAllocationHandle: true with *handle when `addr` lies in a
  // live mapping of a tracked handle (answered here: the driver's count
  // stays ours); false: forward (a deferred mapping there is unmapped first).
  bool retain(uint64_t addr, uint64_t* handle);
  // cuMemGetAllocationPropertiesFromHandle / cuMemExportToShareableHandle:
  // true with *result when the cache answers (a released handle); false:
  // forward. `exporting` marks the handle shared: never cached or deferred
  // again (another process may hold its memory).
  bool check_handle(uint64_t handle, bool exporting, int* result);
  // Before a pointer query at `addr`: a deferred mapping there is unmapped
  // for real (the program believes it is). One relaxed load when none.
  void before_query(uint64_t addr) {
    if (deferred_count_.load(std::memory_order_relaxed) != 0 || ahead_.busy()) flush_at(addr);
  }

  // Gives cached memory of `device` back to the driver, oldest first,
  // until `bytes` are freed (UINT64_MAX: all). Returns the bytes freed.
  uint64_t trim(int device, uint64_t bytes);
  // The pagefast-trim thread's step (release_delay, docs/POOL.md
  // "Footprint"): handles cached (released by the program, or made ahead
  // and not taken) for at least `delay_ns` before `now_ns` go back to the
  // driver, at most `max_handles` a step, while more than `floor_bytes`
  // stay cached; kept ranges left empty are freed. `now_ns` is the
  // caller's clock; a handle's age counts from the first step that saw it
  // cached (so it is known within one step). Returns the bytes released.
  uint64_t decay_step(uint64_t now_ns, uint64_t delay_ns, uint64_t floor_bytes, int max_handles);
  uint64_t cached_bytes(int device);
  // A device's memory joins the cache when it is made (device_share.h):
  // `view` is its budget's, which the cache asks for its room on the
  // device; the answer is the cache's holder of the device, for that
  // budget (it lives as long as the cache). NULL for an ordinal past
  // the cache's devices. Joining again replaces the view.
  Holder* join(int device, BudgetView* view);
  // Tests: every handle's deferred_maps equals its deferred mappings in
  // maps_ (flush_handle trusts it).
  bool deferred_counts_consistent();
  CacheStats stats();

  // The device's primary context was reset or destroyed: its handles may be
  // gone with it. Every record of the device is dropped without a driver
  // call; the program's later calls on them reach the driver. The ledger's
  // records of the device are its owner's to forget, after this.
  void forget_device(int device);
  // Sleep by region slot takes a handle the program holds (docs/OWN-VMM.md "Sleep
  // and wake"): its deferred mappings are unmapped for real, and every
  // record of it and of its mappings is dropped (the caller unmaps its
  // live mappings and releases it). Returns whether the cache tracked it:
  // then the driver holds one reference of it, the cache's, whatever the
  // program retained.
  bool disown(uint64_t handle);
  // Wake mapped a handle the cache does not track at `addr`: the
  // reservation there is never kept whole (as a map the cache forwards).
  void note_foreign(uint64_t addr);
  // The cache stops for good (the glue calls it after an exception, e.g.
  // out of host memory): deferred mappings are unmapped and cached handles
  // released for real, so that the driver's view is the program's again;
  // every record is dropped. No allocation.
  void abandon();

 private:
  Cache(Driver& driver, std::unique_ptr<Ledger> owned, Ledger* ledger, size_t desc_bytes, size_t location_bytes,
        int prefetch_pages, bool ahead_on_worker)
      : driver_(driver),
        owned_ledger_(std::move(owned)),
        ledger_(ledger ? *ledger : *owned_ledger_),
        desc_bytes_(desc_bytes ? desc_bytes : 1),
        location_bytes_(location_bytes),
        mutex_(ledger_.mutex()),
        ahead_(driver, mutex_, prefetch_pages, ahead_on_worker,
               [this](const AheadPage& page) { publish_ahead(page); }) {}

  // What the cache keeps of a handle it tracks (created with cacheable
  // properties, or made ahead) is the cache part of the handle's one
  // record in the ledger (ledger.h CachePart); its bytes, device, the
  // program's references and mappings are the same record's.
  using Handle = CachePart;
  // REQUIRES: mutex_. The cache part of a handle the cache tracks, else null.
  Handle* tracked(uint64_t handle) { return ledger_.cache_part(handle); }
  struct Mapping {
    uint64_t bytes = 0;
    uint64_t offset = 0;
    uint64_t handle = 0;
    // The order in which the program last grew into it (its own map, or
    // the revive of a deferred mapping; a page made ahead and not taken
    // yet: GrowthAhead::kAheadOrder + the order it was queued in): cached
    // handles go back lowest first, so that two segments growing in turns
    // get their own pages back in the order they grew.
    uint64_t seq = 0;
    bool deferred = false;
    bool ahead = false;  // made ahead of the program (growth ahead), not yet taken
    // False once a call covered only part of the mapping, or failed: what
    // the driver holds is then not known here.
    bool access_known = true;
    std::map<std::string, std::string> access;  // location bytes -> flag bytes
  };
  using MapIt = std::map<uint64_t, Mapping>::iterator;

  // Live mappings that make up [addr, addr + bytes) exactly, in order.
  bool exact_cover(uint64_t addr, uint64_t bytes, std::vector<MapIt>* out);
  // Unmaps for real every deferred mapping overlapping the range; false if
  // one refused (it stays recorded).
  bool flush_overlap(uint64_t addr, uint64_t bytes);
  bool flush_mapping(MapIt it);
  void flush_handle(uint64_t handle);
  void flush_at(uint64_t addr);
  // A handle with no reference and no live mapping left: cached, or
  // released for real. Returns the driver's answer (kOk if cached).
  int retire(uint64_t handle);
  // After an unmap: retires those of `unmapped` (handles that lost a
  // mapping, repeats allowed) the program holds nothing of any more.
  void retire_orphans(std::vector<uint64_t>* unmapped);
  int release_for_real(uint64_t handle);
  // The deferred mapping of `handle` that its last deferred unmap noted
  // (rec.deferred_at), if it is still that handle's and deferred; else
  // maps_.end().
  MapIt noted_deferred(uint64_t handle, const Handle& rec);

  // The access the descriptors set, applied to `m`; false if they would
  // change anything (or `m`'s access is not known).
  bool access_already(const Mapping& m, const std::string& descs) const;
  void apply_access(Mapping& m, const std::string& descs) const;

  // Growth ahead (cache_ahead.cpp). After a successful access call over
  // [addr, end): grow ahead of it.
  void maybe_prefetch(uint64_t addr, uint64_t end, const std::string& descs);
  // How many pages of `page` bytes may be made from `from` for `device`
  // (the reservation, the cache's room, the program's maps, queued jobs).
  uint64_t pages_ahead(uint64_t from, uint64_t page, int device, uint64_t want);
  // Growth ahead's one callback: records a page made ahead as a cached
  // handle with a deferred, open mapping.
  void publish_ahead(const AheadPage& page);
  // The program's revive of a page made ahead: queue the next batch, behind
  // the pages still ahead, when those are at most half a batch.
  void maybe_continue(uint64_t addr, const Mapping& m);
  // A map of a tracked handle that is not the revive of its deferred
  // mapping: if that mapping was made ahead, the page was misdirected.
  void note_misdirected(uint64_t handle, uint64_t addr);

  // How many bytes the cache may hold on `device` now: its budget's view.
  uint64_t room_on(int device) { return device >= 0 && device < PerDevice::kDevices ? shares_[device].room() : 0; }
  // Whether the ledger places `handle` on `device`.
  bool on_device(uint64_t handle, int device);
  // Frees kept ranges with no mapping left, for real.
  void free_empty_kept_ranges();

  Driver& driver_;
  std::unique_ptr<Ledger> owned_ledger_;  // the constructor without a ledger's
  Ledger& ledger_;
  const size_t desc_bytes_;
  const size_t location_bytes_;
  // The ledger's mutex: one lock over the program's handles, the cache's
  // records and growth ahead's (ledger.h).
  std::mutex& mutex_;
  std::map<uint64_t, uint64_t> reservations_;  // base -> bytes
  // Reservations where the program mapped a handle the cache does not
  // track: never kept at cuMemAddressFree (what is mapped there is unknown).
  std::set<uint64_t> foreign_;
  // Freed by the program, kept with their deferred mappings (base -> bytes).
  std::map<uint64_t, uint64_t> kept_ranges_;
  std::map<uint64_t, Mapping> maps_;  // by address; tracked handles only
  // Per key, the cached handles by (order of a deferred mapping of theirs
  // (Mapping::seq), or UINT64_MAX; arrival): lowest first, because a
  // program grows its segments again in the order it first grew them (from
  // each one's start), so each handle meets its own mapping again.
  using FreeQueue = std::map<std::pair<uint64_t, uint64_t>, uint64_t>;
  // Takes a cached handle out of its queue and releases it for real (trim,
  // decay): the bytes freed, 0 if the driver refused.
  uint64_t drop_cached(FreeQueue& queue, FreeQueue::iterator it);
  std::unordered_map<std::string, FreeQueue> free_;
  uint64_t arrivals_ = 0;
  uint64_t map_seq_ = 0;  // Mapping::seq of the program's last map or revive
  // Per device, what the cache holds: written under mutex_, read without
  // it (cached_bytes: cuMemGetInfo and the budget ask it on every call).
  class PerDevice {
   public:
    static constexpr int kDevices = 64;  // ordinals past it share the last entry
    std::atomic<uint64_t>& operator[](int device) {
      return bytes_[device >= 0 && device < kDevices ? device : kDevices];
    }
    uint64_t total() const {
      uint64_t sum = 0;
      for (const auto& b : bytes_) sum += b.load(std::memory_order_relaxed);
      return sum;
    }
    void clear() {
      for (auto& b : bytes_) b.store(0, std::memory_order_relaxed);
    }

   private:
    std::atomic<uint64_t> bytes_[kDevices + 1] = {};
  };
  PerDevice cached_bytes_;
  // Per device, the cache's holder of its budget, with the budget's view.
  DeviceShare shares_[PerDevice::kDevices];
  std::atomic<uint64_t> deferred_count_{0};
  CacheStats stats_;
  // Last: it holds a reference to mutex_ and calls publish_ahead.
  GrowthAhead ahead_;
};

}  // namespace pagefast::policy::own_vmm
