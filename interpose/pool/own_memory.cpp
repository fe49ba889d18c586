// interpose/pool/own_memory.cpp: the glue of the ledger of the program's
// own VMM memory (policy/own_memory.h, interpose/pool_api.h): the hooks
// note the program's successful calls while the pool is on; sleep
// (sleep.cpp) reads what stays resident. Not on any hot path: each note
// follows a driver call of microseconds.
#include "policy/own_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool_api.h"

namespace pagefast::pool {
namespace {

// Never destroyed: the program's VMM calls may come during exit.
policy::OwnMemory& ledger() {
  static policy::OwnMemory* own = new policy::OwnMemory();
  return *own;
}

bool noting() { return pool_active(); }

}  // namespace

void own_created(CUmemGenericAllocationHandle handle, size_t bytes, const CUmemAllocationProp* prop) {
  // Device memory only: pinned host memory through cuMemCreate is no
  // device's, and sleep has nothing to say about it.
  if (!noting() || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  ledger().created(handle, bytes, prop->location.id);
}

void own_retained(CUmemGenericAllocationHandle handle) {
  if (noting()) ledger().retained(handle);
}

void own_released(CUmemGenericAllocationHandle handle) {
  if (noting()) ledger().released(handle);
}

void own_mapped(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle) {
  if (noting()) ledger().mapped(ptr, bytes, handle);
}

void own_unmapped(CUdeviceptr ptr, size_t bytes) {
  if (noting()) ledger().unmapped(ptr, bytes);
}

uint64_t own_resident_bytes(int device) { return noting() ? ledger().resident(device).bytes : 0; }

void own_forget_device(int device) { ledger().forget_device(device); }

}  // namespace pagefast::pool
