// policy/budgeted_provider.h: a Provider that makes room in the device's
// budget (policy/device_budget.h) before it creates physical memory, so
// that the pool's growth and the other holders of the device meet in the
// budget and nowhere else. Under a limit, the other holders first release
// what the growth would take over it; when the driver refuses the memory,
// they release what the growth needs and it is tried once more. Every other
// call goes to the provider underneath unchanged.
#pragma once

#include "policy/device_budget.h"
#include "policy/provider.h"

namespace pagefast::policy {

class BudgetedProvider final : public Provider {
 public:
  // `self`: the holder that grows through this provider (the pool's share
  // of the budget), left out when the budget asks for room. `capped`
  // (may be NULL): the holders whose memory together stays under the
  // budget's limit, each pool's arena keeping only its own under it: a
  // growth that would take their sum over the limit, once the others made
  // room, is refused (out of memory).
  BudgetedProvider(Provider& inner, DeviceBudget& budget, const Holder* self, Holder* const* capped = nullptr,
                   int capped_count = 0)
      : inner_(inner), budget_(budget), self_(self), capped_(capped), capped_count_(capped_count) {}

  ProviderStatus create_chunk(Granules granules, ChunkHandle* chunk) override;

  ProviderStatus reserve_address(uint64_t bytes, uint64_t* base_addr) override {
    return inner_.reserve_address(bytes, base_addr);
  }
  bool release_chunk(ChunkHandle chunk) override { return inner_.release_chunk(chunk); }
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
  void host_free(void* host, uint64_t bytes) override { inner_.host_free(host, bytes); }

 private:
  Provider& inner_;
  DeviceBudget& budget_;
  const Holder* const self_;
  Holder* const* const capped_;
  const int capped_count_;
};

}  // namespace pagefast::policy
