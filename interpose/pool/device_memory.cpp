#include <cstdio>
// interpose/pool/device_memory.cpp: see device_memory.h.
#include "interpose/pool/device_memory.h"

#include <cstring>
#include <new>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "policy/page_map.h"

namespace pagefast::pool {
namespace {

// What the provider tells the IPC: whether the device's chunks can be
// shared, and that a chunk went back to the driver.
constexpr VmmProvider::Events kIpcEvents{&ipc::set_device_shareable, &ipc::forget_chunk};

// keep_idle's bound: that percent of the device (of the budget's limit,
// under one), never under a chunk or the prewarm (which is meant to stay).
uint64_t idle_limit(const PoolConfig& config, const policy::DeviceBudget& budget, uint64_t device_bytes) {
  if (config.keep_idle_percent >= 100) return policy::kNoLimit;
  const uint64_t memory = budget.within_limit(device_bytes);
  uint64_t bytes = memory / 100 * uint64_t(config.keep_idle_percent);
  if (bytes < config.chunk_bytes) bytes = config.chunk_bytes;
  return bytes < config.prewarm_bytes ? config.prewarm_bytes : bytes;
}

}  // namespace

// The device's limit and headroom are the budget's from here on: every
// part asks it (policy/device_budget.h), none keeps its own.
DeviceMemory::DeviceMemory(int device, const PoolConfig& config)
    : device_(device),
      budget_(config.headroom_bytes, config.limit_bytes),
      cache_room_(&budget_, config.release_threshold_bytes) {
  for (int slot = 0; slot < region::kMaxSlots; ++slot) pool_shares_[slot].set(this, slot);
  join_own_vmm();
}

void DeviceMemory::join_own_vmm() {
  if (cache_holder_) return;
  cache_holder_ = own_vmm::join(device_, &cache_room_);
  if (cache_holder_) budget_.add(cache_holder_);
}

policy::DevicePool* DeviceMemory::make_pool_locked(const RealDriver* real, CUdevice device, policy::Clock& clock,
                                                   const int* peer_grants) {
  if (policy::DevicePool* made = pool()) return made;
  if (unpoolable()) return nullptr;
  const PoolConfig& config = g_process.config;
  std::string why;
  VmmProvider* provider = copier_.load(std::memory_order_acquire);
  if (!provider) provider = VmmProvider::create(real, device, &g_capture_gate, g_process.log, &kIpcEvents, &why);
  auto* budgeted = provider ? new (std::nothrow) policy::BudgetedProvider(*provider, budget_) : nullptr;
  if (!budgeted) {
    unpoolable_.store(true, std::memory_order_release);
    log_line(LogLevel::Info, "device %d is not pooled: %s; its allocations go to the driver", device_,
             provider ? "out of host memory" : why.c_str());
    return nullptr;
  }
  policy::PoolSettings settings;
  settings.config = config;
  settings.device_total_bytes = provider->device_total_bytes();
  settings.device = device_;
  auto* made = new (std::nothrow)
      policy::DevicePool(*budgeted, clock, policy::global_page_map(), settings, budget_, g_process.log);
  policy::ThreadCache* fallback = made ? made->attach_thread() : nullptr;
  if (!fallback) {
    unpoolable_.store(true, std::memory_order_release);
    log_line(LogLevel::Info, "device %d is not pooled: out of host memory", device_);
    return nullptr;  // leaked: a few bytes, once
  }
  provider_ = provider;
  copier_.store(provider, std::memory_order_release);
  budgeted_ = budgeted;
  fallback_ = fallback;
  made->join_budget(&pool_shares_[0]);
  made->set_grow_ahead(&wake_grow_ahead);
  pool_shares_[0].set_pool(made);
  budget_.add(&pool_shares_[0]);
  budget_.set_idle_limit(idle_limit(config, budget_, settings.device_total_bytes), config.release_delay_ns);
  budget_.set_neighbours(&neighbours_);
  for (int accessor = 0; accessor < kMaxDevices; ++accessor)
    if (peer_grants[accessor] > 0) made->add_peer(accessor);  // no mapping yet: no driver call
  made->prewarm();
  pool_.store(made, std::memory_order_release);
  log_line(LogLevel::Info, "device %d pooled: chunk %s, release threshold %s, limit %s, prewarm %s, reserve %s",
           device_, human_bytes(config.chunk_bytes).c_str(), human_bytes(config.release_threshold_bytes).c_str(),
           budget_.limit_bytes() ? human_bytes(budget_.limit_bytes()).c_str() : "none",
           human_bytes(config.prewarm_bytes).c_str(),
           config.reserve_bytes ? human_bytes(config.reserve_bytes).c_str() : "auto");
  return made;
}

VmmProvider* DeviceMemory::copy_provider(const RealDriver* real) {
  if (VmmProvider* made = copier_.load(std::memory_order_acquire)) return made;
  std::lock_guard<std::mutex> guard(g_process.create_mutex);
  if (VmmProvider* made = copier_.load(std::memory_order_acquire)) return made;
  std::string why;
  VmmProvider* made =
      provider_ ? provider_
                : VmmProvider::create(real, CUdevice(device_), &g_capture_gate, g_process.log, &kIpcEvents, &why);
  // The calling thread's context (the program's) is where its copies run
  // when no pool noted one: also from a thread with none (the trim
  // thread's page-locking ahead, pagefast-ctl's sleep).
  CUcontext current = nullptr;
  if (made && !provider_ && driver::ctx_get_current(real, &current) == CUDA_SUCCESS && current)
    made->note_context(current);
  copier_.store(made, std::memory_order_release);
  return made;
}

policy::DevicePool* DeviceMemory::tagged_pool_made(int slot, policy::Clock& clock) {
  if (slot <= 0 || slot >= region::kMaxSlots) return nullptr;
  if (policy::DevicePool* made = pool_at(slot)) return made;
  std::lock_guard<std::mutex> guard(g_process.create_mutex);
  if (policy::DevicePool* made = pool_at(slot)) return made;
  if (!budgeted_ || unpoolable()) return nullptr;
  policy::PoolSettings settings;
  settings.config = g_process.config;
  settings.config.prewarm_bytes = 0;
  settings.device_total_bytes = provider_->device_total_bytes();
  settings.device = device_;
  settings.slot = slot;
  auto* made = new (std::nothrow)
      policy::DevicePool(*budgeted_, clock, policy::global_page_map(), settings, budget_, g_process.log);
  policy::ThreadCache* cache = made ? made->attach_thread() : nullptr;
  if (cache) pool_shares_[slot].set_pool(made);
  if (!cache || !budget_.add(&pool_shares_[slot])) {
    if (!tagged_failed_.exchange(true))
      log_line(LogLevel::Warn,
               "device %d: no pool for a region (out of host memory): its allocations go to the "
               "driver, and a sleep of their tag leaves them resident",
               device_);
    return nullptr;  // leaked: a few bytes
  }
  // The peers granted so far, as the device's pool was made with them
  // (create_mutex is held, so no grant changes meanwhile).
  for (int accessor = 0; accessor < kMaxDevices; ++accessor)
    if (g_process.peer_grants[device_][accessor] > 0) made->add_peer(accessor);  // no mapping yet: no driver call
  made->join_budget(&pool_shares_[slot]);
  tagged_[slot].cache = cache;
  tagged_[slot].pool.store(made, std::memory_order_release);
  const char* name = "";
  bool keep = false;
  region::slot_info(slot, &name, &keep);
  if (keep) start_trim_thread(g_process.config, true);  // page-locked ahead (prelock.cpp)
  log_line(LogLevel::Debug, "device %d: a pool for the region \"%s\" (%s at sleep)", device_, name,
           keep ? "contents kept" : "contents discarded");
  return made;
}

policy::DevicePool* DeviceMemory::retire_locked() {
  unpoolable_.store(true, std::memory_order_release);
  return pool_.exchange(nullptr, std::memory_order_acq_rel);
}

uint64_t DeviceMemory::reclaim() {
  const uint64_t given = budget_.reclaim();
  if (given) oom_retries_.fetch_add(1, std::memory_order_relaxed);
  return given;
}

const char* DeviceMemory::bus_id() {
  std::call_once(bus_once_, [this] {
    char id[sizeof bus_id_] = {};
    if (driver::device_pci_bus_id(loaded_driver(), id, int(sizeof id - 1), CUdevice(device_)) == CUDA_SUCCESS)
      std::memcpy(bus_id_, id, sizeof id);
  });
  return bus_id_;
}

uint64_t DeviceMemory::give_back_for_neighbour() { return budget_.reclaim(); }

uint64_t DeviceMemory::NeighbourShare::give_back(uint64_t bytes) {
  return ipc::ask_neighbours(owner_->bus_id(), bytes);
}

uint64_t DeviceMemory::relieve() {
  if (!budget_.headroom_bytes() || !provider_ || budget_.idle_bytes() == 0) return 0;
  uint64_t free_now = 0;
  if (!provider_->device_free_bytes(&free_now)) return 0;
  const uint64_t given = budget_.relieve(free_now);
  if (given)
    log_line(LogLevel::Debug, "device %d: %s free, under the headroom of %s: %s of idle memory given back", device_,
             human_bytes(free_now).c_str(), human_bytes(budget_.headroom_bytes()).c_str(), human_bytes(given).c_str());
  return given;
}

void DeviceMemory::relieve_for_managed(uint64_t bytes, uint64_t free_now) {
  // As if the managed pages were on the device already.
  budget_.relieve(free_now > bytes ? free_now - bytes : 0);
}

namespace {

// The figures of two pools of one device, as one: every field is a sum
// (bytes and counters), but the peaks, of which the larger is the nearest
// bound a sum can give.
void add_stats(policy::PoolStats& to, const policy::PoolStats& from) {
  const uint64_t peak_in_use = to.peak_in_use_bytes, peak_mapped = to.peak_mapped_bytes;
#define PF_ADD_FIELD(name, meaning) to.name += from.name;
  PAGEFAST_POOL_STATS_FIELDS(PF_ADD_FIELD)
  PAGEFAST_POOL_STATS_JSON_FIELDS(PF_ADD_FIELD)
#undef PF_ADD_FIELD
  to.peak_in_use_bytes = peak_in_use > from.peak_in_use_bytes ? peak_in_use : from.peak_in_use_bytes;
  to.peak_mapped_bytes = peak_mapped > from.peak_mapped_bytes ? peak_mapped : from.peak_mapped_bytes;
}

// The larger of a kept peak, a bound and a figure now, kept.
uint64_t raise_peak(std::atomic<uint64_t>& kept, uint64_t bound, uint64_t now) {
  uint64_t peak = bound > now ? bound : now;
  uint64_t seen = kept.load(std::memory_order_relaxed);
  while (seen < peak && !kept.compare_exchange_weak(seen, peak, std::memory_order_relaxed)) {
  }
  return seen > peak ? seen : peak;
}

}  // namespace

policy::PoolStats DeviceMemory::stats() {
  policy::PoolStats s{};
  each_pool([&s](int, policy::DevicePool* p) {
    policy::PoolStats ps = p->stats();
    // An asleep pool's blocks are still the program's but not on the
    // device: in use counts what is mapped of them (memory that stayed
    // resident), so that in use never reads above mapped. The tag's own
    // figures keep its whole in-use (docs/STATS.md "Tags").
    if (p->asleep() && ps.in_use_bytes > ps.mapped_bytes) ps.in_use_bytes = ps.mapped_bytes;
    add_stats(s, ps);
  });
  // The device's peaks: never below what its pools hold together now, nor
  // below what an earlier reading saw (each pool's own peak is a bound
  // from below too).
  s.peak_in_use_bytes = raise_peak(peak_in_use_, s.peak_in_use_bytes, s.in_use_bytes);
  s.peak_mapped_bytes = raise_peak(peak_mapped_, s.peak_mapped_bytes, s.mapped_bytes);
  const policy::DeviceBudget::Counters c = budget_.counters();
  s.headroom_relieved_bytes = c.relieved_bytes;
  s.oom_released_bytes = c.released_bytes;
  s.given_back_bytes = c.given_back_bytes;
  s.neighbour_released_bytes = c.neighbour_bytes;
  s.oom_retries = oom_retries_.load(std::memory_order_relaxed);
  return s;
}

uint64_t DeviceMemory::PoolShare::held_bytes() {
  const policy::DevicePool* p = owner_->pool_at(slot_);
  // Resident: asleep chunks went back; a retired pool's went with its context.
  return p && !retired_device(owner_->device()) ? p->mapped_bytes() : 0;
}

uint64_t DeviceMemory::PoolShare::idle_bytes() {
  policy::DevicePool* p = owner_->pool_at(slot_);
  return p && !retired_device(owner_->device()) ? p->idle_bytes() : 0;
}

void DeviceMemory::PoolShare::figures(uint64_t* held, uint64_t* idle) {
  policy::DevicePool* p = owner_->pool_at(slot_);
  const bool resident = p && !retired_device(owner_->device());
  *held = resident ? p->mapped_bytes() : 0;
  *idle = resident ? p->idle_bytes() : 0;
}

uint64_t DeviceMemory::PoolShare::release(uint64_t bytes) {
  policy::DevicePool* p = owner_->pool_at(slot_);
  return p && !retired_device(owner_->device()) ? p->release(bytes) : 0;
}

}  // namespace pagefast::pool
