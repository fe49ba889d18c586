// policy/device_pool_footprint.cpp: what the pool holds over time: the
// decay step of the footprint policy (ReleasePolicy decides, LargeBlocks
// releases) and sleep/wake (docs/POOL.md "Footprint" and "Sleep and
// wake"). Nothing here is on the hit path: sleep empties the thread
// caches, so while asleep every allocation reaches a slow path, whose gate
// (SleepGate) waits or fails.
#include <sched.h>

#include <cinttypes>
#include <climits>
#include <cstdio>
#include <new>

#include "policy/device_pool.h"

namespace pagefast::policy {

uint64_t DevicePool::decay_step() {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (sleep_.asleep()) return 0;
  const uint64_t growths = large_.growths();
  const uint64_t now = clock_.now_ns();
  const uint64_t releasable = release_.decay(now, idle_bytes(), growths);
  if (!releasable) return 0;
  uint64_t released = decay_release(releasable);
  // Not enough lies in whole free chunks: idle memory also sits in thread
  // caches, the quarantine and empty slabs. Gather it, at most once per
  // window (each thread then refills its cache once).
  if (released < releasable && release_.claim_drain(now)) {
    std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
    drain_all();
    gate_.sync_and_retire(nullptr, false);
    small_.release_all_empty();
    large_.dissolve_free_stitches();
    released += decay_release(releasable - released);
  }
  release_.note_released(released);
  return released;
}

uint64_t DevicePool::decay_release(uint64_t want) {
  uint64_t released = 0;
  for (int i = 0; i < kDecayStepChunks && released < want; ++i) {
    const uint64_t bytes = large_.decay_chunk();
    if (!bytes) break;
    released += bytes;
  }
  return released;
}

uint64_t DevicePool::kept_bytes() {
  return large_.locked([](const Arena& arena) { return arena.kept_bytes(); });
}

Arena::KeptRead DevicePool::read_kept(uint64_t addr, uint64_t bytes, void* out) {
  return large_.locked([=](const Arena& arena) { return arena.read_kept(addr, bytes, out); });
}

void DevicePool::note_sleep_figures() {
  const SleepFigures f = large_.locked([](const Arena& arena) {
    return SleepFigures{(arena.mapped() - arena.resident()).bytes(), arena.kept_bytes()};
  });
  asleep_bytes_.store(f.asleep_bytes, std::memory_order_release);
  asleep_kept_bytes_.store(f.kept_bytes, std::memory_order_release);
}

namespace {

// GiB/s of `bytes` moved in `ns`, for the log (0 when nothing moved).
double gib_per_s(uint64_t bytes, uint64_t ns) { return ns ? double(bytes) / double(kGiB) / (double(ns) * 1e-9) : 0.0; }

// The line of one sleep: where the time went, so that one run on a GPU
// shows it (docs/POOL.md "Sleep and wake": what a sleep costs).
void log_asleep(const LogSink& log, int device, uint64_t ms, const Arena::SleepResult& result, uint64_t synced_ns,
                uint64_t idle_released, uint64_t idle_ns) {
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
                device, ms, result.slept_chunks, result.kept_bytes / kMiB, idle_released / kMiB, result.resident_chunks,
                shared_note, synced_ns / 1000000, idle_ns / 1000000, result.kept_bytes / kMiB, result.copy_ns / 1000000,
                gib_per_s(result.kept_bytes, result.copy_ns), result.unmap_ns / 1000000);
  log(result.resident_chunks ? LogLevel::Warn : LogLevel::Info, line);
}

void log_awake(const LogSink& log, int device, uint64_t ms, const Arena::WakeResult& result) {
  char line[384];
  std::snprintf(line, sizeof line,
                "device %d awake in %" PRIu64 " ms: %" PRIu64 " chunks; create, map and access %" PRIu64
                " ms, copy %" PRIu64 " MiB in %" PRIu64 " ms (%.1f GiB/s), host memory freed in %" PRIu64 " ms",
                device, ms, result.woken_chunks, result.map_ns / 1000000, result.copied_bytes / kMiB,
                result.copy_ns / 1000000, gib_per_s(result.copied_bytes, result.copy_ns), result.free_ns / 1000000);
  log(LogLevel::Info, line);
}

}  // namespace

SleepStatus DevicePool::sleep(unsigned flags, const std::vector<ChunkHandle>& shared) {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (sleep_.asleep()) return sleep_again(flags, shared);
  const uint64_t start = clock_.now_ns();
  sleep_.close(flags);
  // Every cached block goes central: from now on each allocation misses.
  // (No slow path runs now; a give-back on another thread may.)
  std::unique_lock<std::mutex> reclaim(reclaim_mutex_);
  drain_all();
  // Device work on pool memory must be over before memory goes (and
  // before its contents are copied): one sync that begins now proves it,
  // and retires the whole quarantine.
  if (!gate_.sync_and_retire(nullptr, false)) {
    sleep_.open();
    return SleepStatus::Busy;
  }
  small_.release_all_empty();
  reclaim.unlock();
  const uint64_t synced_ns = clock_.now_ns() - start;
  uint64_t idle_released = 0, idle_ns = 0;
  const Arena::SleepResult result = large_.sleep(flags & kSleepKeepModes, shared, &idle_released, &idle_ns);
  note_sleep_figures();
  if (log_)
    log_asleep(log_, settings_.device, (clock_.now_ns() - start) / 1000000, result, synced_ns, idle_released, idle_ns);
  return result.resident_chunks ? SleepStatus::Partial : SleepStatus::Ok;
}

// Asleep already: the chunks that stayed resident (kept for importers,
// or refused by the driver) go now unless `shared` still names them; the
// device work on them is over first.
SleepStatus DevicePool::sleep_again(unsigned flags, const std::vector<ChunkHandle>& shared) {
  if (large_.mapped_bytes() == 0) return SleepStatus::Ok;  // nothing stayed resident
  const uint64_t start = clock_.now_ns();
  {
    std::lock_guard<std::mutex> reclaim(reclaim_mutex_);
    if (!gate_.sync_and_retire(nullptr, false)) return SleepStatus::Busy;
  }
  uint64_t idle_released = 0, idle_ns = 0;
  const Arena::SleepResult result = large_.sleep(flags & kSleepKeepModes, shared, &idle_released, &idle_ns);
  note_sleep_figures();
  if (log_) log_asleep(log_, settings_.device, (clock_.now_ns() - start) / 1000000, result, 0, idle_released, idle_ns);
  return result.resident_chunks ? SleepStatus::Partial : SleepStatus::Ok;
}

bool DevicePool::keep_sizes(std::vector<uint64_t>* out) {
  try {
    large_.locked([out](const Arena& arena) { arena.keep_sizes(out); });
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

SleepStatus DevicePool::wake() {
  // The memory comes back through the budget as a growth does: under a
  // limit the device's other pools make room first, and when the limit or
  // the driver refused it they release what it needs, and wake tries once
  // more; each with no lock of this pool held (device_budget.h).
  if (budget_self_ && sleep_.asleep()) budget_.make_room(budget_self_, asleep_bytes_.load(std::memory_order_acquire));
  Arena::WakeResult result;
  const uint64_t start = clock_.now_ns();
  ProviderStatus woken = wake_once(&result);
  if (woken == ProviderStatus::OutOfMemory && room_from_budget(asleep_bytes_.load(std::memory_order_acquire)) > 0)
    woken = wake_once(&result);
  if (woken != ProviderStatus::Ok) {
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
  if (log_) log_awake(log_, settings_.device, (clock_.now_ns() - start) / 1000000, result);
  return SleepStatus::Ok;
}

ProviderStatus DevicePool::wake_once(Arena::WakeResult* result) {
  std::lock_guard<std::mutex> guard(footprint_mutex_);
  if (!sleep_.asleep()) return ProviderStatus::Ok;
  const ProviderStatus woken = large_.wake(result);
  note_sleep_figures();
  if (woken != ProviderStatus::Ok) return woken;
  sleep_.open();
  large_.restart_growth_clock();
  return ProviderStatus::Ok;
}

}  // namespace pagefast::policy
