// interpose/pool/own_vmm_ledger.cpp: the glue of the ledger of the
// program's own VMM handles (policy/own_vmm/ledger.h, own_vmm.h): the
// hooks note the program's successful calls while the pool is on, unless
// the own-VMM cache answered and noted the call itself; sleep (sleep.cpp)
// reads what stays resident. Not on any hot path: each note follows a
// driver call of microseconds. The hooks note only the calls they forward
// with the cache off; with it on, the cache's glue (own_vmm.cpp) notes
// what the cache forwarded, and the cache what it answered.
#include <sys/stat.h>

#include <cstdint>

#include "interpose/driver.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/real_driver.h"

namespace pagefast::pool::own_vmm {
namespace {

// Whether a note goes into the ledger (the pool on).
bool noting() { return active(); }

// The file behind a POSIX descriptor; false for any other handle type.
bool share_key(int fd, CUmemAllocationHandleType type, policy::own_vmm::ShareKey* key) {
  struct stat st;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0 || fstat(fd, &st) != 0) return false;
  key->device = uint64_t(st.st_dev);
  key->inode = uint64_t(st.st_ino);
  return true;
}

}  // namespace

policy::own_vmm::Ledger& ledger() {
  // Never destroyed: the program's VMM calls may come during exit.
  static policy::own_vmm::Ledger* own = new policy::own_vmm::Ledger();
  return *own;
}

void created(CUmemGenericAllocationHandle handle, size_t bytes, const CUmemAllocationProp* prop, bool by_cache) {
  // Device memory only: pinned host memory through cuMemCreate is no
  // device's, and sleep has nothing to say about it.
  // The region it was made in: also when the cache noted the creation
  // (a cached handle taken again belongs to the region that takes it).
  const bool note = !by_cache;
  if (!active() || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  const int slot = region::current_own_vmm();
  if (note) ledger().created(handle, bytes, prop->location.id, slot);
  else ledger().tag(handle, slot);
  // Every device with the program's memory has its memory record: the
  // device's sleep (DeviceMemory::sleep) is where that memory sleeps. Memory
  // of a region that keeps its contents: the provider its copies go through
  // is made now, on the program's thread (its context: where the copies
  // run), so that the trim thread page-locks ahead for it (prelock.cpp
  // walks the records made).
  DeviceMemory* memory = device_memory(prop->location.id);
  if (!memory) memory = device_memory_made(prop->location.id);
  if (slot > 0 && region::slot_policy(slot) == region::kKeep && memory && !memory->copy_provider_made())
    memory->copy_provider(real_driver());
}

void exported(CUmemGenericAllocationHandle handle, const void* shareable, CUmemAllocationHandleType type) {
  policy::own_vmm::ShareKey key;
  if (!noting()) return;
  if (shareable && share_key(*static_cast<const int*>(shareable), type, &key)) ledger().exported(handle, key);
  else ledger().shared(handle);
}

void imported(CUmemGenericAllocationHandle handle, void* os_handle, CUmemAllocationHandleType type) {
  if (!noting()) return;
  // The device its memory lives on: the properties the exporter gave it.
  CUmemAllocationProp prop{};
  if (driver::handle_properties(real_driver(), &prop, handle) != CUDA_SUCCESS ||
      prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return;
  policy::own_vmm::ShareKey key;
  const bool known = share_key(int(reinterpret_cast<uintptr_t>(os_handle)), type, &key);
  ledger().imported(handle, known ? &key : nullptr, prop.location.id);
  if (!device_memory(prop.location.id)) device_memory_made(prop.location.id);
}

void retained(CUmemGenericAllocationHandle handle) {
  if (noting()) ledger().retained(handle);
}

void released(CUmemGenericAllocationHandle handle) {
  if (noting()) ledger().released(handle);
}

void mapped(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle, size_t offset) {
  if (noting()) ledger().mapped(ptr, bytes, handle, offset);
}

void unmapped(CUdeviceptr ptr, size_t bytes) {
  if (noting()) ledger().unmapped(ptr, bytes);
}

void bound(CUmemGenericAllocationHandle handle) {
  if (!active()) return;
  ledger().bound(handle);
  if (on()) mark_shared(handle);  // never cached or deferred again: its memory stays as bound
}

void bound_at(CUdeviceptr ptr, size_t bytes) {
  if (!active()) return;
  try {
    for (uint64_t handle : ledger().bound_at(ptr, bytes))
      if (on()) mark_shared(handle);
  } catch (...) {
    // Out of host memory for the list: the ledger marked them all the same.
  }
}

uint64_t resident_bytes(int device) { return active() ? ledger().resident(device).bytes : 0; }

}  // namespace pagefast::pool::own_vmm
