// interpose/hooks_own_vmm.cpp: the hooks of the program's own VMM calls,
// answered by the own-VMM cache (interpose/pool/own_vmm.h) or forwarded,
// and the VMM queries that must not see pool memory.
#include "interpose/hooks.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/hooks_common.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"
#include "interpose/trace.h"

namespace pagefast::hook {

// The program's own VMM calls: the own-VMM cache answers them
// (interpose/pool/own_vmm.h); with vmm_cache:off or the pool off they
// are counted and forwarded: one relaxed load and a branch more.
// The calls that make, hold and drop the program's memory are also noted,
// once they succeeded, in the ledger that sleep's answer reads
// (policy/own_vmm/ledger.h): here when forwarded with the cache off (one
// acquire load more with the pool off), by the cache and its glue when on.
// PF_OWN_VMM_BODY is that call as a lambda of the driver's handle value
// (`*hp`: in for most, out for cuMemCreate): the hook makes it directly
// until a handle of the program's slept, and through the translation after
// (pool::own_vmm::translating(), own_vmm.h).
#define PF_OWN_VMM_BODY(symbol, call, args, note)                                  \
  [&]([[maybe_unused]] CUmemGenericAllocationHandle* hp) -> CUresult {           \
    if (active(Entry::symbol) && pool::own_vmm::on()) return pool::own_vmm::call args; \
    const RealDriver* real = real_driver();                                       \
    if (!real || !real->symbol) return kMissing;                                  \
    const CUresult result = real->symbol args;                                    \
    if (result == CUDA_SUCCESS) note;                                             \
    return result;                                                                \
  }

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  const auto plain =
      PF_OWN_VMM_BODY(cuMemCreate, create, (hp, bytes, prop, flags), pool::own_vmm::created(*hp, bytes, prop));
  if (!pool::own_vmm::translating()) return plain(handle);
  return pool::own_vmm::translated_create(handle, pool::own_vmm::handle_call(plain));
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const auto plain = PF_OWN_VMM_BODY(cuMemRelease, release, (*hp), pool::own_vmm::released(*hp));
  if (!pool::own_vmm::translating()) return plain(&handle);
  return pool::own_vmm::translated_release(handle, pool::own_vmm::handle_call(plain));
}

CUresult cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  const auto plain = PF_OWN_VMM_BODY(cuMemMap, map, (ptr, bytes, offset, *hp, flags),
                                     pool::own_vmm::mapped(ptr, bytes, *hp, offset));
  if (!pool::own_vmm::translating()) return plain(&handle);
  return pool::own_vmm::translated_map(ptr, bytes, handle, pool::own_vmm::handle_call(plain));
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t bytes) {
  const auto plain = PF_OWN_VMM_BODY(cuMemUnmap, unmap, (ptr, bytes), pool::own_vmm::unmapped(ptr, bytes));
  if (!pool::own_vmm::translating()) return plain(nullptr);
  return pool::own_vmm::translated_unmap(ptr, bytes, pool::own_vmm::handle_call(plain));
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  const auto plain = PF_OWN_VMM_BODY(cuMemExportToShareableHandle, export_handle, (shareable, *hp, type, flags),
                                     pool::own_vmm::exported(*hp, shareable, type));
  if (!pool::own_vmm::translating()) return plain(&handle);
  return pool::own_vmm::translated_export(handle, pool::own_vmm::handle_call(plain));
}
#undef PF_OWN_VMM_BODY

// Memory bound to a multicast object cannot leave the device: the ledger
// marks the handle (sleep leaves it resident and names it). The handle is
// the program's value (translated after a sleep).
CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                            CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                            unsigned long long flags) {
  const bool on = active(Entry::cuMulticastBindMem);
  const auto plain = [&](CUmemGenericAllocationHandle* hp) -> CUresult {
    const RealDriver* real = real_driver();
    const CUresult result = PF_CALL_REAL(cuMulticastBindMem, (mcHandle, mcOffset, *hp, memOffset, size, flags));
    if (on && result == CUDA_SUCCESS) pool::own_vmm::bound(*hp);
    return result;
  };
  if (!pool::own_vmm::translating()) return plain(&memHandle);
  return pool::own_vmm::translated_bind(memHandle, pool::own_vmm::handle_call(plain));
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size,
                             unsigned long long flags) {
  const bool on = active(Entry::cuMulticastBindAddr);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuMulticastBindAddr, (mcHandle, mcOffset, memptr, size, flags));
  if (on && result == CUDA_SUCCESS) pool::own_vmm::bound_at(memptr, size);
  return result;
}

// Pool memory is cuMemAlloc memory to the program: no handle of it is
// handed out (pool_api.h owns_address), as the driver hands out none for
// memory cuMemAlloc made.
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  const bool on = active(Entry::cuMemRetainAllocationHandle);
  if (on && pool::owns_address(reinterpret_cast<CUdeviceptr>(addr))) return CUDA_ERROR_INVALID_VALUE;
  const auto plain = [&](CUmemGenericAllocationHandle* hp) {
    if (on && pool::own_vmm::on()) return pool::own_vmm::retain(hp, addr);  // noted there
    const CUresult result = driver::retain_handle(real_driver(), hp, addr);
    if (result == CUDA_SUCCESS) pool::own_vmm::retained(*hp);
    return result;
  };
  if (!pool::own_vmm::translating()) return plain(handle);
  return pool::own_vmm::translated_retain(handle, addr, pool::own_vmm::handle_call(plain));
}

// A pool chunk's handle is none of the program's (pool_api.h owns_handle).
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  const bool on = active(Entry::cuMemGetAllocationPropertiesFromHandle);
  const auto plain = [&](CUmemGenericAllocationHandle* hp) {
    if (on && pool::owns_handle(*hp)) return CUDA_ERROR_INVALID_VALUE;
    if (on && pool::own_vmm::on()) return pool::own_vmm::properties(prop, *hp);
    return driver::handle_properties(real_driver(), prop, *hp);
  };
  if (!pool::own_vmm::translating()) return plain(&handle);
  return pool::own_vmm::translated_properties(prop, handle, pool::own_vmm::handle_call(plain));
}

// An import gives the program a handle of memory (its own exported memory
// again, or another process's): forwarded, and noted in the ledger.
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType type) {
  const bool on = active(Entry::cuMemImportFromShareableHandle);
  const auto plain = [&](CUmemGenericAllocationHandle* hp) {
    const CUresult result = driver::import_handle(real_driver(), hp, osHandle, type);
    if (on && result == CUDA_SUCCESS && hp) pool::own_vmm::imported(*hp, osHandle, type);
    return result;
  };
  if (!pool::own_vmm::translating()) return plain(handle);
  return pool::own_vmm::translated_import(handle, pool::own_vmm::handle_call(plain));
}

// A reservation where mappings asleep are is still mapped to the program:
// refused as the driver refuses (the translation says so).
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t bytes) {
  const auto plain = [&](CUmemGenericAllocationHandle*) {
    if (active(Entry::cuMemAddressFree) && pool::own_vmm::on()) return pool::own_vmm::address_free(ptr, bytes);
    return driver::address_free(real_driver(), ptr, bytes);
  };
  if (!pool::own_vmm::translating()) return plain(nullptr);
  return pool::own_vmm::translated_address_free(ptr, bytes, pool::own_vmm::handle_call(plain));
}
// A sleep may land between the program's cuMemMap and this call: the
// mapping asleep then takes the access in its record, and wake sets it
// (the translation). A call made while a sleep began meanwhile is made
// again under the sleep mutex, so that the sleep's record of the access
// is never older than the program's call.
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count) {
  const bool on = active(Entry::cuMemSetAccess);
  const auto plain = [&](CUmemGenericAllocationHandle*) -> CUresult {
    if (on && pool::own_vmm::on()) return pool::own_vmm::set_access(ptr, bytes, desc, count);
    return driver::set_access(real_driver(), ptr, bytes, desc, count);
  };
  if (!pool::own_vmm::translating()) {
    const CUresult result = plain(nullptr);
    if (!on || !pool::own_vmm::translating()) return result;
  }
  return pool::own_vmm::translated_set_access(ptr, bytes, desc, count, pool::own_vmm::handle_call(plain));
}

// Pool memory is cuMemAlloc memory to the program: success with no flags
// for a live block, as the driver answers for its own cuMemAlloc blocks,
// and the range query's refusal for any other pool address (docs/POOL.md
// "Semantics"); arguments the driver would refuse still go to it. A
// deferred mapping of the program's own is unmapped for real first: the
// program believes it is.
CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (active(Entry::cuMemGetAccess)) {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    CUresult result;
    if (flags && location && location->type == CU_MEM_LOCATION_TYPE_DEVICE &&
        pool::try_address_range(&base, &bytes, ptr, &result)) {
      if (result == CUDA_SUCCESS) *flags = 0;
      return result;
    }
    pool::own_vmm::before_query(ptr);
  }
  PF_FORWARD(cuMemGetAccess, (flags, location, ptr));
}

// Sparse array mappings: the cache cannot follow them, so a handle mapped
// there is never cached or deferred again (marked shared), then forwarded.
#define PF_MAP_ARRAY(symbol)                                                          \
  CUresult symbol(CUarrayMapInfo* infos, unsigned count, CUstream stream) {           \
    if (active(Entry::symbol) && pool::own_vmm::on() && infos)                        \
      for (unsigned i = 0; i < count; ++i)                                            \
        if (infos[i].memHandleType == CU_MEM_HANDLE_TYPE_GENERIC)                     \
          pool::own_vmm::mark_shared(infos[i].memHandle.memHandle);                   \
    PF_FORWARD(symbol, (infos, count, stream));                                       \
  }
PF_MAP_ARRAY(cuMemMapArrayAsync)
PF_MAP_ARRAY(cuMemMapArrayAsync_ptsz)
#undef PF_MAP_ARRAY

// Address reservations: forwarded; the cache notes them (it grows a
// segment ahead only inside one; cuMemAddressFree unmaps its deferred
// mappings there first, or keeps a range of deferred mappings whole, which
// a later reservation of its size gets back: take_range).
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  const bool on = active(Entry::cuMemAddressReserve) && pool::own_vmm::on();
  const RealDriver* real = real_driver();
  if (!driver::has(real, &RealDriver::cuMemAddressReserve)) return kMissing;
  if (on && ptr && pool::own_vmm::take_range(ptr, bytes, alignment, addr, flags)) return CUDA_SUCCESS;
  const CUresult result = driver::address_reserve(real, ptr, bytes, alignment, addr, flags);
  if (on && result == CUDA_SUCCESS && ptr) pool::own_vmm::note_reserved(*ptr, bytes);
  return result;
}

}  // namespace pagefast::hook
