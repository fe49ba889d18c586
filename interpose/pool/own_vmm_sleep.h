// interpose/pool/own_vmm_sleep.h: what sleep of the program's own VMM
// memory (own_vmm_sleep.cpp, over policy/own_vmm/handle_sleep.h), its
// driver and copies (own_vmm_copy.cpp) and the translation of its handle
// values (own_vmm_translate.cpp) share: the book
// (policy/own_vmm/sleep_book.h) and the one mutex that guards it, held
// across sleep, wake and every translated call (the book's, then the
// ledger's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "interpose/real_driver.h"
#include "policy/own_vmm/handle_sleep.h"
#include "policy/own_vmm/sleep_book.h"
#include "policy/provider.h"

namespace pagefast::pool {
class DeviceMemory;
}

namespace pagefast::pool::own_vmm {

std::mutex& book_mutex();
// REQUIRES: book_mutex() held.
policy::own_vmm::SleepBook& book();
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
// REQUIRES: book_mutex() held. The aliases of those of `driver` (the
// driver's values) the program holds nothing of any more (the ledger
// says) go.
void prune_aliases(const uint64_t* driver, size_t count);
// REQUIRES: book_mutex() held. Translation on while the book has
// anything to translate (a handle asleep, an alias), off again once it has
// none: the hooks then make their calls directly, as before any sleep.
void settle_translating();
// REQUIRES: book_mutex() held. After the book changed (sleep, wake, a
// handle asleep released or unmapped for good): the per-slot figures that
// slot_bytes reads without the lock (status and stats never wait for a
// sleep's copy) are set from it.
void mirror_figures();

}  // namespace pagefast::pool::own_vmm
