// interpose/pool/own_vmm_sleep.h: what sleep of the program's own VMM
// memory (own_vmm_sleep.cpp, over policy/own_vmm/handle_sleep.h), its
// driver and copies (own_vmm_copy.cpp) and the translation of its handle
// values (own_vmm_translate.cpp) share: the sleep mutex, held across a
// sleep, a wake and every translated call, so that no call on a handle
// runs while a sleep or wake takes it apart or makes it again. It guards
// no state: the records asleep and the program's values are the ledger's
// (policy/own_vmm/ledger.h), under the ledger's lock, taken under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "interpose/real_driver.h"
#include "policy/own_vmm/handle_sleep.h"
#include "policy/provider.h"

namespace pagefast::pool {
class DeviceMemory;
}

namespace pagefast::pool::own_vmm {

std::mutex& sleep_mutex();
// The provider a device's handles sync and copy through: the device's
// (DeviceMemory::copy_provider); where none can be made, one that copies
// with the driver's page-locked host memory, a mapping at a time, and
// syncs the calling thread's context (own_vmm_copy.cpp).
policy::Provider& copies_of(DeviceMemory& memory, const RealDriver* real);
// A handle's host copy (the engine's; null: nothing), given back.
inline void free_host_copy(void* host) { policy::own_vmm::HandleSleep::free_host(host); }

// The context of `device` current on this thread for a scope: sleep and
// wake may run on a thread with none (pagefast-ctl's, on pagefast-ipc-bg),
// and the copies and the driver's calls need one. Pushed when another (or
// none) is current, popped at the end.
class DeviceContext {
 public:
  DeviceContext(const RealDriver* real, DeviceMemory& memory);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  bool pushed() const { return pushed_; }
  ~DeviceContext();

 private:
  const RealDriver* real_;
  bool pushed_ = false;
};
// REQUIRES: sleep_mutex() held. The aliases of those of `driver` (the
// driver's values) the program holds nothing of any more (the ledger
// says) go.
void prune_aliases(const uint64_t* driver, size_t count);
// REQUIRES: sleep_mutex() held. Translation on while the ledger has
// anything to translate (a handle asleep, an alias), off again once it has
// none: the hooks then make their calls directly, as before any sleep.
void settle_translating();

}  // namespace pagefast::pool::own_vmm
