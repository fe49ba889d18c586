// policy/budgeted_provider.h: the Provider every pool of one device grows
// through (the device's pool and each region's), which keeps what they
// hold together under the device's limit (policy/device_budget.h): a
// create_chunk that would take the bytes its chunks hold over the limit is
// refused (out of memory), before the driver is asked. It asks the budget
// its limit alone (immutable, no lock), never for room: create_chunk runs
// under the growing pool's device lock, and the budget's holders are pools
// whose locks another growing pool may hold (device_budget.h "Lock
// rule"). Making room is the pool's own step,
// outside its locks, before it tries again (DevicePool::obtain). Every
// other call goes to the provider underneath unchanged.
//
// Lock: mutex_, held only to count (never across a driver call); the
// innermost lock of the pools: nothing else is taken under it.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "policy/device_budget.h"
#include "policy/provider.h"

namespace pagefast::policy {

class BudgetedProvider final : public Provider {
 public:
  // The cap is the budget's limit (none: no cap), read at each growth.
  BudgetedProvider(Provider& inner, const DeviceBudget& budget) : inner_(inner), budget_(budget) {}

  ProviderStatus create_chunk(Granules granules, ChunkHandle* chunk) override;
  bool release_chunk(ChunkHandle chunk) override;
  // The bytes of the chunks created through this provider and not
  // released: what the pools hold of the device.
  uint64_t held_bytes() {
    std::lock_guard<std::mutex> guard(mutex_);
    return held_bytes_;
  }

  ProviderStatus reserve_address(uint64_t bytes, uint64_t* base_addr) override {
    return inner_.reserve_address(bytes, base_addr);
  }
  ProviderStatus map(uint64_t addr, ChunkHandle chunk, Granules offset, Granules granules) override {
    return inner_.map(addr, chunk, offset, granules);
  }
  bool unmap(uint64_t addr, Granules granules) override { return inner_.unmap(addr, granules); }
  ProviderStatus set_access(uint64_t addr, Granules granules, const AccessSet& access) override {
    return inner_.set_access(addr, granules, access);
  }
  bool maps_at_offset() override { return inner_.maps_at_offset(); }
  bool device_free_bytes(uint64_t* free_bytes) override { return inner_.device_free_bytes(free_bytes); }
  SyncStatus synchronize() override { return inner_.synchronize(); }
  void copy_to_host(HostCopy* copies, uint64_t count) override { inner_.copy_to_host(copies, count); }
  void copy_from_host(HostCopy* copies, uint64_t count) override { inner_.copy_from_host(copies, count); }
  void copy_from_host_made(HostCopy* copies, uint64_t count, CopyPreparer& preparer) override {
    inner_.copy_from_host_made(copies, count, preparer);
  }
  void host_free(void* host, uint64_t bytes) override { inner_.host_free(host, bytes); }

 private:
  Provider& inner_;
  const DeviceBudget& budget_;
  std::mutex mutex_;
  uint64_t held_bytes_ = 0;                        // under mutex_
  std::unordered_map<uint64_t, uint64_t> chunks_;  // handle -> bytes, under mutex_
};

}  // namespace pagefast::policy
