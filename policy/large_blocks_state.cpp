// policy/large_blocks_state.cpp: LargeBlocks (large_blocks.h) beside
// allocation: peer access, sleep and wake of the chunks, and the figures
// (stats, the memory report, the consistency check).
#include <cinttypes>
#include <climits>
#include <cstdio>

#include "policy/large_blocks.h"
#include "policy/spin.h"

namespace pagefast::policy {

// ---- peer access -------------------------------------------------------------

int LargeBlocks::add_peer(int peer) {
  if (peer < 0 || peer >= kMaxPeerDevices || peer == settings_.device) return 0;
  DeviceLock guard(*this);
  const uint64_t peers = arena_.peers() | (uint64_t(1) << peer);
  return peers == arena_.peers() ? 0 : arena_.set_peers(peers);
}

int LargeBlocks::remove_peer(int peer) {
  if (peer < 0 || peer >= kMaxPeerDevices || peer == settings_.device) return 0;
  DeviceLock guard(*this);
  const uint64_t peers = arena_.peers() & ~(uint64_t(1) << peer);
  return peers == arena_.peers() ? 0 : arena_.set_peers(peers);
}

uint64_t LargeBlocks::peers() {
  DeviceLock guard(*this);
  return arena_.peers();
}

// ---- sleep and wake ------------------------------------------------------------

Arena::SleepResult LargeBlocks::sleep(unsigned keep, const std::vector<ChunkHandle>& shared, uint64_t* idle_released,
                                      uint64_t* idle_ns) {
  DeviceLock guard(*this);
  // Idle memory is released rather than kept: nothing to copy for it.
  const uint64_t idle_start = clock_.now_ns();
  const uint64_t before = arena_.resident().bytes();
  arena_.dissolve_free_stitches();
  arena_.release_free_chunks(INT_MAX);
  *idle_released = before - arena_.resident().bytes();
  *idle_ns = clock_.now_ns() - idle_start;
  if (log_ && (keep & kSleepKeep) && arena_.resident().bytes() >= kSleepProgressBytes) {
    char line[192];
    std::snprintf(line, sizeof line, "device %d: going to sleep: copying %" PRIu64 " MiB to host memory",
                  settings_.device, arena_.resident().bytes() / kMiB);
    log_(LogLevel::Info, line);
  }
  const Arena::SleepResult result = arena_.sleep(keep, clock_, shared);
  mirror_mapped();
  return result;
}

ProviderStatus LargeBlocks::wake(Arena::WakeResult* result) {
  DeviceLock guard(*this);
  const ProviderStatus status = arena_.wake(clock_, result);
  mirror_mapped();
  return status;
}

// ---- figures -------------------------------------------------------------------

void LargeBlocks::mirror_figures() {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  mirror_mapped();
  free_bytes_.store(arena_.free_home().bytes(), kRelaxed);
  shown_.reserved_bytes.store(arena_.reserved_bytes(), kRelaxed);
  shown_.growths.store(arena_.counters().growths, kRelaxed);
  shown_.stitches.store(arena_.counters().stitches, kRelaxed);
  shown_.releases.store(arena_.counters().releases, kRelaxed);
}

void LargeBlocks::read_figures(PoolStats* s) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  s->mapped_bytes = mapped_bytes_.load(kRelaxed);
  s->reserved_bytes = shown_.reserved_bytes.load(kRelaxed);
  s->growths = shown_.growths.load(kRelaxed);
  s->stitches = shown_.stitches.load(kRelaxed);
  s->releases = shown_.releases.load(kRelaxed);
  s->peak_mapped_bytes = peak_mapped_bytes_.load(kRelaxed);
  s->headroom_releases = headroom_releases_.load(kRelaxed);
  s->ahead_growths = ahead_growths_.load(kRelaxed);
  s->growth_ns = growth_ns_.load(kRelaxed);
  s->release_ns = release_ns_.load(kRelaxed);
}

bool LargeBlocks::try_figures(ArenaFigures* out) {
  // A few tries, yielding between them (as the registry's figures): a
  // release on the trim thread holds the device lock for a chunk or two.
  if (!try_lock_patiently(mutex_)) return false;
  std::unique_lock<std::mutex> guard(mutex_, std::adopt_lock);
  out->chunks = arena_.chunk_count();
  out->mapped = arena_.mapped();
  out->free_home = arena_.free_home();
  out->free_stitched = arena_.free_stitched();
  out->lent = arena_.lent();
  out->free_blocks = arena_.free_block_count();
  out->largest_free_run = arena_.largest_free();
  return true;
}

std::string LargeBlocks::check() {
  DeviceLock guard(*this);
  std::string problem = arena_.check();
  if (!problem.empty()) return problem;
  if (mapped_bytes_.load() != arena_.resident().bytes()) return "mapped mirror differs";
  return "";
}

}  // namespace pagefast::policy
