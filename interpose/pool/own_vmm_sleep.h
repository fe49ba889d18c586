// interpose/pool/own_vmm_sleep.h: what sleep by slot of the program's own
// VMM memory (own_vmm_sleep.cpp) and the translation of its handle values
// (own_vmm_translate.cpp) share: the book (policy/own_vmm/sleep_book.h)
// and the one mutex that guards it, held across sleep, wake and every
// translated call (the book, then the cache's lock, then the ledger's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include <vector>

#include "interpose/real_driver.h"
#include "policy/own_vmm/sleep_book.h"

namespace pagefast::pool::own_vmm {

std::mutex& book_mutex();
// REQUIRES: book_mutex() held.
policy::own_vmm::SleepBook& book();
// The contents of each handle (its mappings a device reads) into host
// memory, one batch per device on its provider's copy threads
// (own_vmm_copy.cpp); `mode`: where (0, policy::kSleepToDisk,
// policy::kSleepHostRelease). Sets each handle's `host` (null: its copy
// failed, nothing of it kept).
void copy_out(const RealDriver* real, const std::vector<policy::own_vmm::AsleepHandle*>& handles, unsigned mode);
// Back through the mappings made again; (*ok)[i]: handle i's contents are
// all back. Its host copy is unchanged either way (free_host_copy after).
void copy_in(const RealDriver* real, const std::vector<const policy::own_vmm::AsleepHandle*>& handles,
             std::vector<char>* ok);
// The mapping's recorded access set again (none recorded: nothing done).
CUresult set_mapping_access(const RealDriver* real, const policy::own_vmm::AsleepMapping& m);
// A handle's host copy (copy_out's; null: nothing), given back.
void free_host_copy(void* host);

// The context of `device` current on this thread for a scope: sleep and
// wake may run on a thread with none (pagefast-ctl's, on pagefast-ipc-bg),
// and the copies and the sync need one. Pushed when another (or none) is
// current, popped at the end.
class DeviceContext {
 public:
  DeviceContext(const RealDriver* real, int device);
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
