// interpose/pool/prelock.cpp: host memory page-locked ahead of a sleep
// (docs/SLEEP.md "Page-locked ahead"). Page-locking host memory runs at
// about 5 GiB/s, a tenth of the host link: a first sleep that page-locks
// as it copies is bound by it. So, on the trim thread, the regions that
// keep their contents at sleep have the buffers of their next sleep's
// copies (their live blocks, HostMemory::prelock) mapped and page-locked
// ahead, a few GiB a round (rounds back to back while there is more), as
// they grow; the sleep then copies into them
// at once, once the region's layout stood still for a round. All of it
// together stays under sleep_prelock percent of the host's memory, a bound
// that a sleep of another region also keeps them under instead of giving
// them back.
#include <unistd.h>

#include <vector>

#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "policy/device_pool.h"

namespace pagefast::pool {
namespace {

// Page-locked per round at most (about 0.4 s of the trim thread's time).
constexpr uint64_t kPrelockStepBytes = 2ull << 30;

uint64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// The sizes of the next keep sleep's copies of each region of `memory`
// that keeps its contents in host memory kept between sleeps (awake ones;
// not those that keep them in files or give the host memory back at wake):
// its pool's live blocks, then the program's own VMM memory of it.
bool keep_sizes(const DeviceMemory& memory, std::vector<uint64_t>* sizes) {
  for (int slot = 1; slot < region::kMaxSlots; ++slot) {
    policy::DevicePool* pool = memory.pool_at(slot);
    if (!pool || pool->asleep() || region::slot_policy(slot) != region::kKeep) continue;
    if (!pool->keep_sizes(sizes)) return false;
  }
  own_vmm::keep_sizes(memory.device(), sizes);
  return true;
}

// A digest of a device's sizes (order included: the arena lists its
// chunks by address).
uint64_t digest(const std::vector<uint64_t>& sizes) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t s : sizes) h = (h ^ s) * 1099511628211ull;
  return h ^ sizes.size();
}

}  // namespace

bool prelock_step() {
  const PoolConfig& config = g_process.config;
  if (config.sleep_prelock_percent <= 0 || !config.sleep_host_keep) return false;
  PrelockState& state = g_process.prelock;  // the trim thread's alone
  if (!state.host_bytes) state.host_bytes = host_memory_bytes();
  const uint64_t host_bytes = state.host_bytes;
  const uint64_t bound = host_bytes / 100 * uint64_t(config.sleep_prelock_percent);
  // What every device's sleeps hold now: the bound is the process's.
  uint64_t held = 0;
  for (int d = 0; d < kMaxDevices; ++d)
    if (const DeviceMemory* memory = device_memory(d))
      if (VmmProvider* copier = memory->copy_provider_made()) held += copier->host_memory_figures().mapped_bytes;
  std::vector<uint64_t> sizes;
  bool more = false;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceMemory* memory = retired_device(d) ? nullptr : device_memory(d);
    if (!memory) continue;
    sizes.clear();
    try {
      if (!keep_sizes(*memory, &sizes)) continue;
    } catch (const std::bad_alloc&) {
      continue;  // host out of memory: nothing ahead this round
    }
    // The pool's provider, or the one the program's own VMM memory copies
    // through (made here for a device with no pool, as its sleep would).
    VmmProvider* provider = memory->copy_provider_made();
    if (!provider && !sizes.empty()) provider = memory->copy_provider(real_driver());
    if (!provider) continue;
    const uint64_t now = digest(sizes);
    // Each device's digest of the round before: a layout page-locked for is
    // one that stood still for a round (a region still growing, its blocks'
    // runs merging, would otherwise have buffers made for every size its
    // runs pass through).
    const bool settled = now == state.last_digest[d];
    state.last_digest[d] = now;
    if (!settled && !sizes.empty()) continue;
    // This device may hold what it holds now and what the others leave.
    const uint64_t mine = provider->host_memory_figures().mapped_bytes;
    const uint64_t room = bound > held ? bound - held : 0;
    // A device with no region to keep: no bound (a sleep gives back the
    // idle buffers it does not use, as without).
    const uint64_t ready =
        provider->prelock(sizes.data(), sizes.size(), kPrelockStepBytes, sizes.empty() ? 0 : mine + room);
    held += ready;
    more |= ready >= kPrelockStepBytes;  // a whole step: maybe more to do
    if (ready)
      log_line(LogLevel::Debug,
               "device %d: %s page-locked ahead of the next sleep of the regions that keep their contents (%s in all)",
               d, human_bytes(ready).c_str(), human_bytes(mine + ready).c_str());
  }
  return more;
}

}  // namespace pagefast::pool
