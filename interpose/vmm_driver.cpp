// interpose/vmm_driver.cpp: the seam to the driver's VMM calls
// (interpose/vmm_driver.h says what it covers and its contract).
#include "interpose/vmm_driver.h"

namespace pagefast::vmm_driver {

namespace {

constexpr CUresult kMissing = CUDA_ERROR_NOT_FOUND;

}  // namespace

CUresult create(const RealDriver* real, CUmemGenericAllocationHandle* handle, size_t bytes,
                const CUmemAllocationProp* prop, unsigned long long flags) {
  return real && real->cuMemCreate ? real->cuMemCreate(handle, bytes, prop, flags) : kMissing;
}

CUresult release(const RealDriver* real, CUmemGenericAllocationHandle handle) {
  return real && real->cuMemRelease ? real->cuMemRelease(handle) : kMissing;
}

CUresult map(const RealDriver* real, CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags) {
  return real && real->cuMemMap ? real->cuMemMap(ptr, bytes, offset, handle, flags) : kMissing;
}

CUresult unmap(const RealDriver* real, CUdeviceptr ptr, size_t bytes) {
  return real && real->cuMemUnmap ? real->cuMemUnmap(ptr, bytes) : kMissing;
}

CUresult set_access(const RealDriver* real, CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count) {
  return real && real->cuMemSetAccess ? real->cuMemSetAccess(ptr, bytes, desc, count) : kMissing;
}

CUresult address_reserve(const RealDriver* real, CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                         unsigned long long flags) {
  return real && real->cuMemAddressReserve ? real->cuMemAddressReserve(ptr, bytes, alignment, addr, flags) : kMissing;
}

CUresult address_free(const RealDriver* real, CUdeviceptr ptr, size_t bytes) {
  return real && real->cuMemAddressFree ? real->cuMemAddressFree(ptr, bytes) : kMissing;
}

CUresult export_handle(const RealDriver* real, void* shareable, CUmemGenericAllocationHandle handle,
                       CUmemAllocationHandleType type, unsigned long long flags) {
  return real && real->cuMemExportToShareableHandle ? real->cuMemExportToShareableHandle(shareable, handle, type, flags)
                                                    : kMissing;
}

CUresult import_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* os_handle,
                       CUmemAllocationHandleType type) {
  return real && real->cuMemImportFromShareableHandle ? real->cuMemImportFromShareableHandle(handle, os_handle, type)
                                                      : kMissing;
}

CUresult retain_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* addr) {
  return real && real->cuMemRetainAllocationHandle ? real->cuMemRetainAllocationHandle(handle, addr) : kMissing;
}

CUresult handle_properties(const RealDriver* real, CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  return real && real->cuMemGetAllocationPropertiesFromHandle
             ? real->cuMemGetAllocationPropertiesFromHandle(prop, handle)
             : kMissing;
}

}  // namespace pagefast::vmm_driver
