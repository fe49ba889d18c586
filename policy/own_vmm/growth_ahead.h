// policy/own_vmm/growth_ahead.h: growth ahead for the own-VMM cache
// (policy/own_vmm/cache.h; docs/OWN-VMM.md, "What it does").
//
// When a cuMemSetAccess the driver performed ends with a fresh
// whole-handle mapping inside a reservation the program made, the cache
// asks for the next pages of the same properties: they are created,
// mapped right after it and opened with ONE access call with the same
// descriptors, and handed back to the cache (ONE callback, Publish) as
// cached handles with deferred mappings. A segment that grows page by
// page then meets its next pages already mapped and open (2, 4, ... up
// to prefetch_pages per growth; the cache bounds each batch by its room;
// a failed step undoes the prefetch).
//
// With a worker (on_worker, and the glue's pagefast-vmm thread running
// work_one()), the pages are made off the program's thread, in order, a
// page per work_one(), each published as soon as it is open: the pages
// not yet published are *pending*. A program's call over a pending page
// cancels the rest of that job and waits for the pages in flight
// (settle); cuMemCreate of the job's properties waits for its next page,
// in address order, rather than creating one (wait_for_key). When the
// pages ahead of the one the program takes (made, or queued in a live
// job) are at most half a batch, the cache queues the next batch behind
// them (queue_next), at most prefetch_pages ahead in all.
//
// What the cache decides (where pages may go: its reservations, its room,
// the program's mappings) stays in the cache; what lives here is the
// jobs, the worker's step, the per-key batch and the keys that stopped
// growing ahead (two segments of the same properties growing in turns).
//
// Locking: one lock, the cache's. The cache passes its mutex; every call
// REQUIRES it held except work_one, wait_for_work and pending_pages, which
// take it. Publish runs under it. The worker makes a page without it
// (its address is pending: no call of the program touches it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "policy/own_vmm/driver.h"

namespace pagefast::policy::own_vmm {

// A page made ahead: created, mapped at `at` and opened with `descs`.
struct AheadPage {
  uint64_t at = 0;
  // Its place in the order of growth (GrowthAhead::kAheadOrder and up:
  // after every page the program grew into, in the order queued).
  uint64_t seq = 0;
  uint64_t bytes = 0;
  uint64_t handle = 0;
  const std::string& key;
  int device = 0;
  const std::string& descs;
};

struct AheadStats {
  uint64_t waits = 0;      // program calls that waited for the worker's page
  uint64_t wait_ns = 0;    // how long they waited, in all
  uint64_t cancelled = 0;  // pages planned ahead and dropped (the program came first)
};

class GrowthAhead {
 public:
  // Hands a page made ahead to the cache. Runs under the shared lock.
  using Publish = std::function<void(const AheadPage&)>;

  // Pages made ahead and not taken yet come after every page the program
  // grew into, in the order they were queued.
  static constexpr uint64_t kAheadOrder = uint64_t(1) << 62;

  GrowthAhead(Driver& driver, std::mutex& mutex, int prefetch_pages, bool on_worker, Publish publish)
      : driver_(driver),
        mutex_(mutex),
        prefetch_pages_(prefetch_pages),
        on_worker_(on_worker),
        publish_(std::move(publish)) {}

  bool enabled() const { return prefetch_pages_ > 0; }
  int prefetch_pages() const { return prefetch_pages_; }
  // The program's revive of a page made ahead may queue the next batch.
  bool continues() const { return on_worker_ && prefetch_pages_ > 0; }
  // A job lives (one relaxed load; any lock).
  bool busy() const { return jobs_count_.load(std::memory_order_relaxed) != 0; }

  // The pages the next batch of `key` makes (2 at first).
  int batch(const std::string& key);
  // `key` grows nothing ahead any more (misdirected pages).
  bool off(const std::string& key) const {
    auto it = misdirected_.find(key);
    return it != misdirected_.end() && it->second >= kMisdirectedLimit;
  }
  // A page made ahead for `key` was mapped somewhere else than where it
  // was made. True once the key reached the limit: its jobs stopped, and
  // the cache puts its untaken pages last.
  bool note_misdirected(const std::string& key);

  // Grows `pages` pages of `page` bytes from `from`, of the key's
  // properties, opened with `descs`: queued for the worker, or (no worker)
  // made now on the caller and published. The key's batch doubles when
  // anything was queued or made.
  void grow(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device, const std::string& descs);
  // A job of `key` was queued once: queue_next knows its descriptors.
  bool has_descs(const std::string& key) const { return descs_.count(key) != 0; }
  // Queues the next batch for the worker, opened as the key's last job
  // was (false: none was, or no worker can run); the batch doubles.
  bool queue_next(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device);
  // `pages` clamped so that [from, from + pages * page) meets no queued job.
  uint64_t clamp_to_jobs(uint64_t from, uint64_t page, uint64_t pages) const;
  // A live job of `key` holding `*at`: moves `*at` to its end and adds
  // the pages from `*at` on to `*left`. False if none did.
  bool skip_queued(const std::string& key, uint64_t* at, uint64_t* left) const;

  // Over [addr, addr + bytes): every job there stops, and the caller waits
  // for a page in flight. REQUIRES: `lock` holds the shared mutex.
  void settle(std::unique_lock<std::mutex>& lock, uint64_t addr, uint64_t bytes);
  void settle_all(std::unique_lock<std::mutex>& lock) { settle(lock, 0, UINT64_MAX); }
  // cuMemCreate of `key`: while a job of it will publish a page that
  // comes before `lowest()` (the order of the first cached page of the
  // key) in the order of growth, wait for it (the program maps in
  // order). A worker that does not deliver within a second (it never
  // should) is not waited for again: the key's jobs stop.
  template <class Lowest>
  void wait_for_key(std::unique_lock<std::mutex>& lock, const std::string& key, Lowest lowest);

  // The worker thread's step: makes one pending page (create, map, open)
  // without the lock, then publishes it. False when no page waits.
  // REQUIRES: one thread at a time (the one worker): a job's pages are
  // made and published in address order.
  bool work_one();
  // The worker's wait for a job, at most timeout_ns. True if one waits.
  bool wait_for_work(uint64_t timeout_ns);
  // Queued pages not yet begun (tests).
  uint64_t pending_pages();

  const AheadStats& stats() const { return stats_; }

 private:
  // Jobs of the worker. The pages from the first one not yet published
  // to the end are pending while the job lives; while `inflight`, page
  // `begun - 1` is being made now (a job is never erased under it). The
  // one worker makes a job's pages in order: the first `published` are.
  struct AheadJob {
    uint64_t start = 0, page = 0, pages = 0;
    uint64_t begun = 0;
    uint64_t published = 0;
    bool inflight = false;
    bool stop = false;
    std::string key, descs;
    int device = 0;
    uint64_t context = 0;
    uint64_t seq_base = 0;  // the order of its first page (kAheadOrder + seq_, when queued)
    uint64_t first_unpublished() const { return start + published * page; }
    uint64_t first_unpublished_seq() const { return seq_base + published; }
    bool pending_overlaps(uint64_t addr, uint64_t end) const {
      const uint64_t lo = first_unpublished(), hi = start + pages * page;
      return !stop || inflight ? lo < end && addr < hi && lo < hi : false;
    }
  };
  // A program call's wait for the worker's pages: its first wait counts
  // (waits), and end() adds how long it lasted (wait_ns).
  struct Wait {
    GrowthAhead& ahead;
    bool waiting = false;
    uint64_t from = 0;
    void begin() {
      if (waiting) return;
      waiting = true;
      ++ahead.stats_.waits;
      from = ahead.driver_.now_ns();
    }
    void end() {
      if (waiting) ahead.stats_.wait_ns += ahead.driver_.now_ns() - from;
      waiting = false;
    }
  };

  // Queues a job for the worker; false if no worker can run.
  bool queue(uint64_t from, uint64_t page, uint64_t pages, const std::string& key, int device,
             const std::string& descs);
  void double_batch(const std::string& key);
  void stop_jobs_of(const std::string& key);
  void erase_finished_jobs();
  // Waits at most a second for a job's news; false on the timeout.
  bool wait_a_second(std::unique_lock<std::mutex>& lock);

  Driver& driver_;
  std::mutex& mutex_;
  const int prefetch_pages_;
  const bool on_worker_;
  const Publish publish_;
  std::list<AheadJob> jobs_;
  std::atomic<uint64_t> jobs_count_{0};
  std::condition_variable jobs_cv_;                     // a job queued, a page published, a job ended
  uint64_t seq_ = 0;                                    // pages ordered so far (kAheadOrder + seq_ is the next)
  std::unordered_map<std::string, int> next_batch_;     // key -> pages the next batch makes
  std::unordered_map<std::string, std::string> descs_;  // key -> descriptors its pages are opened with
  // Key -> pages made ahead that the program took and mapped somewhere
  // else than where they were made (two segments of the same properties
  // growing in turns: cuMemCreate cannot tell which one a page is for).
  // From kMisdirectedLimit on, that key grows nothing ahead any more.
  std::unordered_map<std::string, int> misdirected_;
  static constexpr int kMisdirectedLimit = 2;
  AheadStats stats_;
};

template <class Lowest>
void GrowthAhead::wait_for_key(std::unique_lock<std::mutex>& lock, const std::string& key, Lowest lowest) {
  Wait timer{*this};
  while (busy()) {
    const uint64_t before = lowest();
    bool wait = false;
    for (const AheadJob& j : jobs_)
      if (j.key == key && !j.stop && (j.inflight || j.begun < j.pages) && j.first_unpublished_seq() < before)
        wait = true;
    if (!wait) break;
    timer.begin();
    if (!wait_a_second(lock)) {
      stop_jobs_of(key);
      break;
    }
  }
  timer.end();
}

}  // namespace pagefast::policy::own_vmm
