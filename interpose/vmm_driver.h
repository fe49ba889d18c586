// interpose/vmm_driver.h: the one seam through which pagefast's OWN calls
// to the driver's virtual memory management go (as mimalloc's prim.h is
// its one OS layer): the pool's VMM provider (interpose/pool/vmm_provider.cpp),
// the own-VMM cache's glue (interpose/pool/own_vmm.cpp: its
// SeamDriver, and the program's calls it forwards after looking at
// them), CUDA IPC (interpose/ipc/) and the reservation hook
// (interpose/hooks.cpp). No other file calls these driver functions
// (tests/tools/vmm_seam.py checks it): cuMemCreate, cuMemRelease, cuMemMap,
// cuMemUnmap, cuMemSetAccess, cuMemAddressReserve, cuMemAddressFree,
// cuMemExportToShareableHandle, cuMemImportFromShareableHandle,
// cuMemRetainAllocationHandle, cuMemGetAllocationPropertiesFromHandle.
//
// Not covered: a program's call that the doors forward to the driver
// unchanged (PF_FORWARD through the entry table, interpose/hooks.cpp);
// that is the doors' job.
//
// Contract, the same for every function: the driver's prototype, with the
// loaded driver first; the driver's answer, untouched; and
// CUDA_ERROR_NOT_FOUND without calling anything when `real` is NULL or
// the driver lacks the function (as pagefast answers for a missing entry
// point). No lock, no allocation, no log: a caller may hold any lock.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "interpose/real_driver.h"

namespace pagefast::vmm_driver {

CUresult create(const RealDriver* real, CUmemGenericAllocationHandle* handle, size_t bytes,
                const CUmemAllocationProp* prop, unsigned long long flags);
CUresult release(const RealDriver* real, CUmemGenericAllocationHandle handle);
CUresult map(const RealDriver* real, CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags);
CUresult unmap(const RealDriver* real, CUdeviceptr ptr, size_t bytes);
CUresult set_access(const RealDriver* real, CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count);
CUresult address_reserve(const RealDriver* real, CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                         unsigned long long flags);
CUresult address_free(const RealDriver* real, CUdeviceptr ptr, size_t bytes);
CUresult export_handle(const RealDriver* real, void* shareable, CUmemGenericAllocationHandle handle,
                       CUmemAllocationHandleType type, unsigned long long flags);
CUresult import_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* os_handle,
                       CUmemAllocationHandleType type);
CUresult retain_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* addr);
CUresult handle_properties(const RealDriver* real, CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle);

}  // namespace pagefast::vmm_driver
