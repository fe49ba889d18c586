// interpose/pool/own_memory.cpp: the glue of the ledger of the program's
// own VMM memory (policy/own_memory.h, interpose/pool_api.h): the hooks
// note the program's successful calls while the pool is on; sleep
// (sleep.cpp) reads what stays resident. Not on any hot path: each note
// follows a driver call of microseconds.
#include "policy/own_memory.h"

#include <sys/stat.h>

#include <cstdint>

#include "interpose/driver.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"

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

namespace {

// The file behind a POSIX descriptor; false for any other handle type.
bool share_key(int fd, CUmemAllocationHandleType type, policy::ShareKey* key) {
  struct stat st;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0 || fstat(fd, &st) != 0) return false;
  key->device = uint64_t(st.st_dev);
  key->inode = uint64_t(st.st_ino);
  return true;
}

}  // namespace

void own_exported(CUmemGenericAllocationHandle handle, const void* shareable, CUmemAllocationHandleType type) {
  policy::ShareKey key;
  if (noting() && shareable && share_key(*static_cast<const int*>(shareable), type, &key))
    ledger().exported(handle, key);
}

void own_imported(CUmemGenericAllocationHandle handle, void* os_handle, CUmemAllocationHandleType type) {
  if (!noting()) return;
  // The device its memory lives on: the properties the exporter gave it.
  CUmemAllocationProp prop{};
  if (driver::handle_properties(real_driver(), &prop, handle) != CUDA_SUCCESS ||
      prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return;
  policy::ShareKey key;
  const bool known = share_key(int(reinterpret_cast<uintptr_t>(os_handle)), type, &key);
  ledger().imported(handle, known ? &key : nullptr, prop.location.id);
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
