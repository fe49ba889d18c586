// interpose/pool/own_vmm_copy.cpp: the provider the program's own VMM
// memory of a device syncs and copies through at sleep and wake
// (docs/OWN-VMM.md "Sleep and wake"): the device's (the pool's, or one made
// for these copies where no pool was made: DeviceMemory::copy_provider),
// so that its copies run on the same copy threads, into the same host
// memory page-locked once and kept for the next sleep (sleep_host_keep),
// or the region's own place (kSleepToDisk, kSleepHostRelease), as the
// pool's chunks. A device with none (the provider refused: no VMM) copies
// the old way: page-locked host memory of the driver's, one synchronous
// copy per mapping, freed after wake (DirectCopies below).
#include <vector>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/own_vmm_sleep.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/real_driver.h"
#include "policy/provider.h"

namespace pagefast::pool::own_vmm {
namespace {

using policy::HostCopy;
using policy::ProviderStatus;

// The copies of a device without a VMM provider: the driver's page-locked
// host memory, one synchronous copy each; the sync is the calling
// thread's context. Nothing else of a provider is asked of it.
class DirectCopies final : public policy::Provider {
 public:
  ProviderStatus reserve_address(uint64_t, uint64_t*) override { return ProviderStatus::Failed; }
  ProviderStatus create_chunk(policy::Granules, policy::ChunkHandle*) override { return ProviderStatus::Failed; }
  bool release_chunk(policy::ChunkHandle) override { return false; }
  ProviderStatus map(uint64_t, policy::ChunkHandle, policy::Granules, policy::Granules) override {
    return ProviderStatus::Failed;
  }
  bool unmap(uint64_t, policy::Granules) override { return false; }
  ProviderStatus set_access(uint64_t, policy::Granules, const policy::AccessSet&) override {
    return ProviderStatus::Failed;
  }
  policy::SyncStatus synchronize() override {
    return driver::ctx_synchronize(real_driver()) == CUDA_SUCCESS ? policy::SyncStatus::Done
                                                                  : policy::SyncStatus::Failed;
  }
  void copy_to_host(HostCopy* copies, uint64_t count) override {
    const RealDriver* real = real_driver();
    for (uint64_t i = 0; i < count; ++i) {
      HostCopy& c = copies[i];
      c.status = ProviderStatus::Failed;
      c.host = nullptr;
      void* host = nullptr;
      if (driver::host_alloc(real, &host, c.bytes, 0) != CUDA_SUCCESS || !host) continue;
      if (driver::copy_dtoh(real, host, c.addr, c.bytes) != CUDA_SUCCESS) {
        driver::free_host(real, host);
        continue;
      }
      c.host = host;
      c.status = ProviderStatus::Ok;
    }
  }
  void copy_from_host(HostCopy* copies, uint64_t count) override {
    for (uint64_t i = 0; i < count; ++i)
      copies[i].status =
          driver::copy_htod(real_driver(), copies[i].addr, copies[i].host, copies[i].bytes) == CUDA_SUCCESS
              ? ProviderStatus::Ok
              : ProviderStatus::Failed;
  }
  void host_free(void* host, uint64_t) override { driver::free_host(real_driver(), host); }
};

// Made at the first sleep that needs it and never destroyed (a provider's
// destructor at exit would run after the driver's): no static constructor.
policy::Provider& direct_copies() {
  static DirectCopies* const made = new DirectCopies;
  return *made;
}

}  // namespace

policy::Provider& copies_of(DeviceMemory& memory, const RealDriver* real) {
  if (VmmProvider* provider = memory.copy_provider(real)) return *provider;
  return direct_copies();
}

DeviceContext::DeviceContext(const RealDriver* real, DeviceMemory& memory) : real_(real) {
  VmmProvider* provider = memory.copy_provider(real);
  const CUcontext want = provider ? provider->copy_context() : nullptr;
  CUcontext current = nullptr;
  driver::ctx_get_current(real, &current);
  if (want && want != current && driver::has_context_push(real)) pushed_ = driver::ctx_push(real, want) == CUDA_SUCCESS;
}

DeviceContext::~DeviceContext() {
  CUcontext popped = nullptr;
  if (pushed_) driver::ctx_pop(real_, &popped);
}

void keep_sizes(int device, std::vector<uint64_t>* sizes) {
  if (!active()) return;
  for (int slot = 1; slot < region::slot_count(); ++slot) {
    if (region::slot_policy(slot) != region::kKeep) continue;
    for (const policy::own_vmm::SlotHandle& h : ledger().program_handles(slot)) {
      if (h.device != device || h.shared || h.multicast) continue;
      for (const policy::own_vmm::SlotMapping& m : h.maps) sizes->push_back(m.bytes);
    }
  }
}

}  // namespace pagefast::pool::own_vmm
