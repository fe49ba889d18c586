// policy/own_vmm/handle_sleep.h: sleep and wake of the program's own VMM
// handles of one device (docs/OWN-VMM.md "Sleep and wake"), the pure core
// beside the pool's (Arena::sleep): the same provider (its sync, its copy
// threads and host memory) and the same rule, so that the fake provider
// and the policy tests drive both.
//
// Sleep of a device's handles of a slot, over the ledger (which handles,
// their mappings; the records asleep and the program's values):
// every context that used the device is synchronised first, as the pool
// does (Provider::synchronize; refused or failed: every handle stays
// resident); each handle's properties and each mapping's access are read;
// with keep its contents go to host memory through its mappings, in one
// batch of the provider's copies (the parts no mapping shows, and a
// mapping no device may read, are not kept); each mapping is unmapped and
// the driver's references released (one when the own-VMM cache held it;
// else the program's). Stays resident, with its reason: a handle exported
// or imported, one bound to a multicast object, one mapped nowhere, and
// one whose properties, copy or unmap the driver refused.
//
// Wake makes each handle of the device's slot again where it was, with its
// access, and copies the contents back in one batch: all or none (a
// refusal leaves nothing made and every handle asleep with its host copy
// whole: call again).
//
// Pure: handles, addresses, properties and access descriptors are numbers
// and bytes (SleepDriver's); the host copies are the provider's. One sleep
// or wake at a time, and none beside the program's calls on the handles it
// takes: the caller serialises them (the glue's sleep mutex); the ledger's
// calls take the ledger's lock, never held across a driver call or a copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/own_vmm/ledger.h"
#include "policy/provider.h"

namespace pagefast::policy::own_vmm {

// The driver as a sleep of the program's handles needs it: the glue's over
// the seam (interpose/pool/own_vmm_sleep.cpp), a fake in the tests. Each
// call answers whether the driver did it.
class SleepDriver {
 public:
  virtual ~SleepDriver() = default;
  // The handle's property bytes.
  virtual bool properties(uint64_t handle, std::string* prop) = 0;
  // A reference to the handle mapped at `addr` (cuMemRetainAllocationHandle).
  virtual bool retain_at(uint64_t addr, uint64_t* handle) = 0;
  // The access of the mapping at `addr`, as descriptors to set again.
  virtual std::string access_of(uint64_t addr) = 0;
  virtual bool create(uint64_t bytes, const std::string& prop, uint64_t* handle) = 0;
  virtual bool release(uint64_t handle) = 0;
  virtual bool map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle) = 0;
  virtual bool unmap(uint64_t addr, uint64_t bytes) = 0;
  // `access` empty: nothing to set (true).
  virtual bool set_access(uint64_t addr, uint64_t bytes, const std::string& access) = 0;
  // The copy back writes through the mapping: whether `access` lets a
  // device write; the descriptors that let `device` write; and `access`
  // with `device` closed where it does not name it (after the copy).
  virtual bool writable(const std::string& access) = 0;
  virtual std::string write_access(int device) = 0;
  virtual std::string after_copy(const std::string& access, int device) = 0;
  // The own-VMM cache let the handle go (it held the driver's one
  // reference: true) before it sleeps; a mapping of a woken handle.
  virtual bool disown(uint64_t handle) = 0;
  virtual void mapped_again(uint64_t addr) { (void)addr; }
  // A handle of `slot` stays resident (`why`), or the wake was refused.
  virtual void resident(int slot, uint64_t bytes, const char* why) = 0;
  virtual void wake_refused(int slot, const char* why) = 0;
};

struct HandleSleepAnswer {
  int status = 0;               // 0 done, 1 some memory stayed resident
  uint64_t slept_bytes = 0;     // released to the driver
  uint64_t kept_bytes = 0;      // of those, contents in host memory
  uint64_t resident_bytes = 0;  // what stayed (the driver's resident() says why)
};

class HandleSleep {
 public:
  // `provider`: the device's (the pool's, or one made for these copies):
  // its sync before a sleep, its copies and host memory.
  HandleSleep(Ledger& ledger, SleepDriver& driver, Provider& provider)
      : ledger_(ledger), driver_(driver), provider_(provider) {}

  // The program's handles of `device` in `slot`; keep_modes: kSleepKeep
  // (contents kept) with where (kSleepToDisk, kSleepHostRelease), 0
  // discards. Nothing of the device there: nothing is called.
  HandleSleepAnswer sleep(int device, int slot, unsigned keep_modes);
  // true: every handle of `device` in `slot` woke (also: none asleep).
  bool wake(int device, int slot);
  // A handle's host copy (the record's opaque `host`, null: nothing) given back.
  static void free_host(void* host);

 private:
  struct Going;
  struct Made;
  bool prepare(const SlotHandle& s, int slot, Going* out, const char** why);
  bool finish(Going& g, bool keep, const char** why);
  void copy_out(std::vector<Going>& going, unsigned mode);
  bool make_again(const SlotHandle& h, Made* made);
  void unmake(const Made& m);
  bool copy_in(const std::vector<SlotHandle>& handles);
  void settle_refs(const SlotHandle& h, uint64_t handle);

  Ledger& ledger_;
  SleepDriver& driver_;
  Provider& provider_;
};

}  // namespace pagefast::policy::own_vmm
