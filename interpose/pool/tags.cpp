// interpose/pool/tags.cpp: the tags' glue (docs/SLEEP.md): what the
// regions' C API calls, a tag's state and per-tag figures, and the reuse of an empty
// tag's slot. Regions and slots are region.cpp's; sleep and wake of a tag
// are sleep.cpp's.
//
// A process has kMaxTags slots of (name, policy) (policy/tags.h). Once every slot is made, a
// region of a new (name, policy) takes over the slot of an empty tag: no
// region of it open, nothing of it allocated (no live block in its pool on
// any device, no own-VMM memory of it) and not asleep. The pool of that
// slot on each device (DeviceMemory's, never destroyed) then serves the
// new tag: it holds no live block, only idle memory; the per-tag counters
// start again. The reuse runs under the sleep's lock, so that no sleep or
// wake acts on the slot while it changes hands, and region.cpp checks
// under its own lock that no region of the slot began meanwhile.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "interpose/pagefast.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool/sleep_state.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"

namespace pagefast::pool {
namespace {

// REQUIRES: sleep_mutex(). Whether a slot holds nothing: no live block in
// its pool on any device (nor a pool asleep) and no own-VMM memory. In a
// forked child (pool off) the pools are the parent's: not looked at (their
// locks may have been held at the fork).
bool slot_empty(int slot) {
  if (slot_state(slot).asleep.load(std::memory_order_acquire)) return false;
  for (int d = 0; d < kMaxDevices && active(); ++d) {
    const DeviceMemory* memory = device_memory(d);
    policy::DevicePool* pool = memory ? memory->pool_at(slot) : nullptr;
    if (pool && (pool->asleep() || pool->in_use_bytes() != 0)) return false;
  }
  const own_vmm::SlotBytes vmm = own_vmm::slot_bytes(slot);
  return vmm.resident == 0 && vmm.asleep == 0;
}

}  // namespace

int reuse_tag_slot(const char* name, unsigned policy) {
  const bool keep = (policy & region::kKeep) != 0;
  std::lock_guard<std::mutex> guard(sleep_mutex());
  for (int slot = 1; slot < region::kMaxSlots; ++slot) {
    const int64_t begins = region::idle_since(slot);
    if (begins < 0 || !slot_empty(slot)) continue;
    char old[region::kMaxNameBytes] = "";
    const char* was = "";
    bool was_keep = false;
    if (region::slot_info(slot, &was, &was_keep)) std::snprintf(old, sizeof old, "%s", was);
    const int got = region::take_over(slot, begins, name, policy);
    if (got == slot) {
      SlotState& state = slot_state(slot);
      state.asleep.store(false, std::memory_order_release);
      state.sleeps.store(0, std::memory_order_relaxed);
      state.wakes.store(0, std::memory_order_relaxed);
      log_line(LogLevel::Debug, "the tag \"%s\" (%s) holds nothing: its slot goes to \"%s\" (%s)", old,
               was_keep ? "keep" : "discard", name, keep ? "keep" : "discard");
    }
    if (got) return got;
  }
  return 0;
}

int tag_asleep(const char* tag) {
  int slots[region::kMaxPolicies];
  const int n = region::slots_of(tag, slots);
  if (!n) return policy::kUnknownTag;
  bool asleep = false;
  for (int i = 0; i < n; ++i) asleep = asleep || slot_state(slots[i]).asleep.load(std::memory_order_acquire);
  return asleep ? 1 : 0;
}

int tag_figures(TagFigures* out, int max) {
  const int count = region::slot_count();
  for (int slot = 1; slot < count; ++slot) {
    if (slot - 1 >= max || !out) continue;
    TagFigures f;
    f.slot = slot;
    region::slot_info(slot, &f.name, &f.keep);
    f.asleep = slot_state(slot).asleep.load(std::memory_order_acquire);
    f.sleeps = slot_state(slot).sleeps.load(std::memory_order_relaxed);
    f.wakes = slot_state(slot).wakes.load(std::memory_order_relaxed);
    for (int d = 0; d < kMaxDevices && active(); ++d) {
      const DeviceMemory* memory = device_memory(d);
      policy::DevicePool* pool = memory ? memory->pool_at(slot) : nullptr;
      if (!pool) continue;
      const policy::DevicePool::SleepFigures s = pool->sleep_figures();
      const uint64_t mapped = pool->mapped_bytes();
      f.resident_bytes += mapped > s.asleep_bytes ? mapped - s.asleep_bytes : 0;
      f.asleep_bytes += s.asleep_bytes;
      f.kept_bytes += s.kept_bytes;
      f.in_use_bytes += pool->in_use_bytes();
    }
    const own_vmm::SlotBytes vmm = own_vmm::slot_bytes(slot);
    f.resident_bytes += vmm.resident;
    f.asleep_bytes += vmm.asleep;
    f.kept_bytes += vmm.kept;
    out[slot - 1] = f;
  }
  return count - 1;
}

int region_begin(const char* tag, unsigned flags) {
  const char* why = "";
  if (region::begin(tag, region::policy_of(flags), (flags & PAGEFAST_REGION_POOL_ONLY) != 0, &why) > 0) return 0;
  log_line(LogLevel::Warn, "pagefast_region_begin(\"%.64s\"): refused: %s", tag ? tag : "(null)", why);
  return -1;
}

int region_end() { return region::end(); }

const char* region_current() {
  const char* name = nullptr;
  return region::slot_info(region::current(), &name, nullptr) ? name : nullptr;
}

static_assert(PAGEFAST_REGION_KEEP_DISK == policy::kSleepToDisk, "region flags out of step");
static_assert(PAGEFAST_REGION_HOST_RELEASE == policy::kSleepHostRelease, "region flags out of step");
static_assert(PAGEFAST_REGION_KEEP == region::kKeep, "region flags out of step");
static_assert(PAGEFAST_REGION_KEEP_DISK == region::kToDisk, "region flags out of step");
static_assert(PAGEFAST_REGION_HOST_RELEASE == region::kHostRelease, "region flags out of step");

}  // namespace pagefast::pool
