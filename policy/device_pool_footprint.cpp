// policy/device_pool_footprint.cpp: what the pool holds over time: the
// decay step of the footprint policy (footprint.h) and sleep/wake
// (docs/POOL.md "Footprint" and "Sleep and wake"). Nothing here is on the
// hit path: sleep empties the thread caches, so while asleep every
// allocation reaches a slow path, whose gate (enter_slow) waits or fails.
#include <sched.h>

#include <cinttypes>
#include <climits>
#include <cstdio>

#include "policy/device_pool.h"

namespace pagefast::policy {

bool DevicePool::enter_slow() {
  while (true) {
    slow_in_flight_.fetch_add(1, std::memory_order_seq_cst);
    if (__builtin_expect(!asleep_.load(std::memory_order_seq_cst), 1)) return true;
    leave_slow();
    if (sleep_flags_.load(std::memory_order_relaxed) & kSleepFail) return false;
    std::unique_lock<std::mutex> lock(sleep_wait_mutex_);
    sleep_wait_cv_.wait(lock, [&] { return !asleep_.load(std::memory_order_acquire); });
  }
}

uint64_t DevicePool::decay_step() {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (asleep_.load(std::memory_order_acquire)) return 0;
  uint64_t growths;
  {
    std::lock_guard<std::mutex> arena_guard(arena_mutex_);
    growths = arena_.counters().growths;
  }
  const bool grew = growths != growths_seen_;
  growths_seen_ = growths;
  const uint64_t now = clock_.now_ns();
  const uint64_t releasable = footprint_.step(now, idle_bytes(), grew);
  if (!releasable) return 0;
  auto release_some = [&](uint64_t want) {
    uint64_t released = 0;
    for (int i = 0; i < kDecayStepChunks && released < want; ++i) {
      // One chunk per hold of the device lock: allocations that need it
      // wait for one release at most.
      std::lock_guard<std::mutex> arena_guard(arena_mutex_);
      const uint64_t start = clock_.now_ns();
      const uint64_t before = arena_.resident().bytes();
      if (!arena_.release_free_chunks(1)) break;
      release_ns_.fetch_add(clock_.now_ns() - start, std::memory_order_relaxed);
      released += before - arena_.resident().bytes();
      mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
    }
    return released;
  };
  uint64_t released = release_some(releasable);
  // Not enough lies in whole free chunks: idle memory also sits in thread
  // caches, the quarantine and empty slabs. Gather it, at most once per
  // window (each thread then refills its cache once).
  if (released < releasable && now - last_decay_drain_ns_ >= footprint_.release_delay_ns()) {
    last_decay_drain_ns_ = now;
    std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
    drain_all();
    sync_and_retire(nullptr, false);
    release_all_empty_slabs();
    {
      std::lock_guard<std::mutex> arena_guard(arena_mutex_);
      arena_.dissolve_free_stitches();
    }
    released += release_some(releasable - released);
  }
  footprint_.note_released(released);
  return released;
}

uint64_t DevicePool::kept_bytes() {
  std::lock_guard<std::mutex> guard(arena_mutex_);
  return arena_.kept_bytes();
}

namespace {

// GiB/s of `bytes` moved in `ns`, for the log (0 when nothing moved).
double gib_per_s(uint64_t bytes, uint64_t ns) { return ns ? double(bytes) / double(kGiB) / (double(ns) * 1e-9) : 0.0; }

}  // namespace

SleepStatus DevicePool::sleep(unsigned flags, const std::vector<ChunkHandle>& shared) {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (asleep_.load(std::memory_order_acquire)) return SleepStatus::Ok;
  const uint64_t start = clock_.now_ns();
  sleep_flags_.store(flags, std::memory_order_relaxed);
  asleep_.store(true, std::memory_order_seq_cst);
  // Slow paths already past the gate finish first (they may be growing or
  // refilling a cache); new ones wait or fail at the gate.
  while (slow_in_flight_.load(std::memory_order_seq_cst) != 0) sched_yield();
  auto undo = [&] {
    {
      std::lock_guard<std::mutex> lock(sleep_wait_mutex_);
      asleep_.store(false, std::memory_order_seq_cst);
    }
    sleep_wait_cv_.notify_all();
  };
  // Every cached block goes central: from now on each allocation misses.
  // (No slow path runs now; a give-back on another thread may.)
  std::unique_lock<std::mutex> reclaim(reclaim_mutex_);
  drain_all();
  // Device work on pool memory must be over before memory goes (and
  // before its contents are copied): one sync that begins now proves it,
  // and retires the whole quarantine (it used to be two, the first counted
  // even when it failed).
  if (!sync_and_retire(nullptr, false)) {
    undo();
    return SleepStatus::Busy;
  }
  release_all_empty_slabs();
  reclaim.unlock();
  const uint64_t synced_ns = clock_.now_ns() - start;
  Arena::SleepResult result;
  uint64_t idle_released = 0, idle_ns = 0;
  {
    std::lock_guard<std::mutex> arena_guard(arena_mutex_);
    // Idle memory is released rather than kept: nothing to copy for it.
    const uint64_t idle_start = clock_.now_ns();
    const uint64_t before = arena_.resident().bytes();
    arena_.dissolve_free_stitches();
    arena_.release_free_chunks(INT_MAX);
    idle_released = before - arena_.resident().bytes();
    idle_ns = clock_.now_ns() - idle_start;
    if (log_ && (flags & kSleepKeep) && arena_.resident().bytes() >= kSleepProgressBytes) {
      char line[192];
      std::snprintf(line, sizeof line, "device %d: going to sleep: copying %" PRIu64 " MiB to host memory",
                    settings_.device, arena_.resident().bytes() / kMiB);
      log_(LogLevel::Info, line);
    }
    result = arena_.sleep(flags & kSleepKeep, clock_, shared);
    mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
  }
  if (log_) {
    // Where the time went: one line per sleep, so that one run on a GPU
    // shows it (docs/POOL.md "Sleep and wake": what a sleep costs).
    const uint64_t ms = (clock_.now_ns() - start) / 1000000;
    char shared_note[128] = "";
    if (result.shared_chunks)
      std::snprintf(shared_note, sizeof shared_note,
                    " (%" PRIu64 " of them, %" PRIu64 " MiB, mapped by another process through CUDA IPC)",
                    result.shared_chunks, result.shared_bytes / kMiB);
    char line[640];
    std::snprintf(line, sizeof line,
                  "device %d asleep in %" PRIu64 " ms: %" PRIu64 " chunks released, %" PRIu64
                  " MiB kept in host memory, %" PRIu64 " MiB idle released, %" PRIu64
                  " chunks resident%s; sync and drain %" PRIu64 " ms, idle release %" PRIu64 " ms, copy %" PRIu64
                  " MiB in %" PRIu64 " ms (%.1f GiB/s), unmap and release %" PRIu64 " ms",
                  settings_.device, ms, result.slept_chunks, result.kept_bytes / kMiB, idle_released / kMiB,
                  result.resident_chunks, shared_note, synced_ns / 1000000, idle_ns / 1000000, result.kept_bytes / kMiB,
                  result.copy_ns / 1000000, gib_per_s(result.kept_bytes, result.copy_ns), result.unmap_ns / 1000000);
    log_(result.resident_chunks ? LogLevel::Warn : LogLevel::Info, line);
  }
  return result.resident_chunks ? SleepStatus::Partial : SleepStatus::Ok;
}

SleepStatus DevicePool::wake() {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (!asleep_.load(std::memory_order_acquire)) return SleepStatus::Ok;
  const uint64_t start = clock_.now_ns();
  ProviderStatus status;
  Arena::WakeResult result;
  {
    std::lock_guard<std::mutex> arena_guard(arena_mutex_);
    status = arena_.wake(clock_, &result);
    mapped_bytes_.store(arena_.resident().bytes(), std::memory_order_relaxed);
  }
  if (status != ProviderStatus::Ok) {
    if (log_) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "device %d: wake failed (out of device memory, or a mapping or copy refused) after %" PRIu64
                    " chunks; still asleep, wake again",
                    settings_.device, result.woken_chunks);
      log_(LogLevel::Warn, line);
    }
    return SleepStatus::Failed;
  }
  {
    std::lock_guard<std::mutex> lock(sleep_wait_mutex_);
    asleep_.store(false, std::memory_order_seq_cst);
  }
  sleep_wait_cv_.notify_all();
  // A growth right after wake is no sign of a working set to keep.
  last_growth_ns_.store(clock_.now_ns(), std::memory_order_relaxed);
  if (log_) {
    char line[384];
    std::snprintf(line, sizeof line,
                  "device %d awake in %" PRIu64 " ms: %" PRIu64 " chunks; create, map and access %" PRIu64
                  " ms, copy %" PRIu64 " MiB in %" PRIu64 " ms (%.1f GiB/s), host memory freed in %" PRIu64 " ms",
                  settings_.device, (clock_.now_ns() - start) / 1000000, result.woken_chunks, result.map_ns / 1000000,
                  result.copied_bytes / kMiB, result.copy_ns / 1000000, gib_per_s(result.copied_bytes, result.copy_ns),
                  result.free_ns / 1000000);
    log_(LogLevel::Info, line);
  }
  return SleepStatus::Ok;
}

}  // namespace pagefast::policy
