// interpose/driver.cpp: the seam to the driver (interpose/driver.h says
// what it covers and its contract).
#include "interpose/driver.h"

namespace pagefast::driver {

bool has_vmm(const RealDriver* real) {
  return has(real, &RealDriver::cuMemAddressReserve, &RealDriver::cuMemCreate, &RealDriver::cuMemMap,
             &RealDriver::cuMemSetAccess, &RealDriver::cuMemUnmap, &RealDriver::cuMemRelease,
             &RealDriver::cuMemGetAllocationGranularity, &RealDriver::cuCtxSynchronize,
             &RealDriver::cuDeviceGetAttribute, &RealDriver::cuDeviceTotalMem_v2);
}

bool has_vmm_import(const RealDriver* real) {
  return has(real, &RealDriver::cuMemImportFromShareableHandle, &RealDriver::cuMemAddressReserve, &RealDriver::cuMemMap,
             &RealDriver::cuMemSetAccess, &RealDriver::cuMemUnmap, &RealDriver::cuMemRelease,
             &RealDriver::cuMemAddressFree);
}

bool has_context_push(const RealDriver* real) {
  return has(real, &RealDriver::cuCtxPushCurrent_v2, &RealDriver::cuCtxPopCurrent_v2);
}

// Contexts.

CUresult ctx_set_current(const RealDriver* real, CUcontext context) {
  return real && real->cuCtxSetCurrent ? real->cuCtxSetCurrent(context) : kMissing;
}

CUresult ctx_push(const RealDriver* real, CUcontext context) {
  return real && real->cuCtxPushCurrent_v2 ? real->cuCtxPushCurrent_v2(context) : kMissing;
}

CUresult ctx_pop(const RealDriver* real, CUcontext* context) {
  return real && real->cuCtxPopCurrent_v2 ? real->cuCtxPopCurrent_v2(context) : kMissing;
}

CUresult ctx_synchronize(const RealDriver* real) {
  return real && real->cuCtxSynchronize ? real->cuCtxSynchronize() : kMissing;
}

CUresult primary_ctx_state(const RealDriver* real, CUdevice device, unsigned int* flags, int* active) {
  return real && real->cuDevicePrimaryCtxGetState ? real->cuDevicePrimaryCtxGetState(device, flags, active) : kMissing;
}

// Devices and errors.

CUresult device_attribute(const RealDriver* real, int* value, CUdevice_attribute attribute, CUdevice device) {
  return real && real->cuDeviceGetAttribute ? real->cuDeviceGetAttribute(value, attribute, device) : kMissing;
}

CUresult device_total_mem(const RealDriver* real, size_t* bytes, CUdevice device) {
  return real && real->cuDeviceTotalMem_v2 ? real->cuDeviceTotalMem_v2(bytes, device) : kMissing;
}

CUresult device_pci_bus_id(const RealDriver* real, char* bus_id, int length, CUdevice device) {
  return real && real->cuDeviceGetPCIBusId ? real->cuDeviceGetPCIBusId(bus_id, length, device) : kMissing;
}

CUresult device_count(const RealDriver* real, int* count) {
  return real && real->cuDeviceGetCount ? real->cuDeviceGetCount(count) : kMissing;
}

CUresult mem_get_info(const RealDriver* real, size_t* free_bytes, size_t* total_bytes) {
  return real && real->cuMemGetInfo_v2 ? real->cuMemGetInfo_v2(free_bytes, total_bytes) : kMissing;
}

CUresult mem_alloc_pitch(const RealDriver* real, CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                         unsigned element_bytes) {
  return real && real->cuMemAllocPitch_v2 ? real->cuMemAllocPitch_v2(dptr, pitch, width_bytes, height, element_bytes)
                                          : kMissing;
}

CUresult mem_free(const RealDriver* real, CUdeviceptr dptr) {
  return real && real->cuMemFree_v2 ? real->cuMemFree_v2(dptr) : kMissing;
}

CUresult default_mem_pool(const RealDriver* real, CUmemoryPool* pool, CUdevice device) {
  return real && real->cuDeviceGetDefaultMemPool ? real->cuDeviceGetDefaultMemPool(pool, device) : kMissing;
}

CUresult mem_pool_attribute(const RealDriver* real, CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  return real && real->cuMemPoolGetAttribute ? real->cuMemPoolGetAttribute(pool, attribute, value) : kMissing;
}

CUresult error_name(const RealDriver* real, CUresult error, const char** name) {
  return real && real->cuGetErrorName ? real->cuGetErrorName(error, name) : kMissing;
}

// Virtual memory management.

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

CUresult get_access(const RealDriver* real, unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  return real && real->cuMemGetAccess ? real->cuMemGetAccess(flags, location, ptr) : kMissing;
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

CUresult granularity(const RealDriver* real, size_t* bytes, const CUmemAllocationProp* prop,
                     CUmemAllocationGranularity_flags option) {
  return real && real->cuMemGetAllocationGranularity ? real->cuMemGetAllocationGranularity(bytes, prop, option)
                                                     : kMissing;
}

// Streams and copies.

CUresult stream_create(const RealDriver* real, CUstream* stream, unsigned int flags) {
  return real && real->cuStreamCreate ? real->cuStreamCreate(stream, flags) : kMissing;
}

CUresult stream_synchronize(const RealDriver* real, CUstream stream) {
  return real && real->cuStreamSynchronize ? real->cuStreamSynchronize(stream) : kMissing;
}

CUresult stream_destroy(const RealDriver* real, CUstream stream) {
  return real && real->cuStreamDestroy_v2 ? real->cuStreamDestroy_v2(stream) : kMissing;
}

CUresult stream_is_capturing(const RealDriver* real, CUstream stream, CUstreamCaptureStatus* status) {
  return real && real->cuStreamIsCapturing ? real->cuStreamIsCapturing(stream, status) : kMissing;
}

CUresult copy_dtoh(const RealDriver* real, void* host, CUdeviceptr device, size_t bytes) {
  return real && real->cuMemcpyDtoH_v2 ? real->cuMemcpyDtoH_v2(host, device, bytes) : kMissing;
}

CUresult copy_htod(const RealDriver* real, CUdeviceptr device, const void* host, size_t bytes) {
  return real && real->cuMemcpyHtoD_v2 ? real->cuMemcpyHtoD_v2(device, host, bytes) : kMissing;
}

CUresult copy_dtoh_async(const RealDriver* real, void* host, CUdeviceptr device, size_t bytes, CUstream stream) {
  return real && real->cuMemcpyDtoHAsync_v2 ? real->cuMemcpyDtoHAsync_v2(host, device, bytes, stream) : kMissing;
}

CUresult copy_htod_async(const RealDriver* real, CUdeviceptr device, const void* host, size_t bytes, CUstream stream) {
  return real && real->cuMemcpyHtoDAsync_v2 ? real->cuMemcpyHtoDAsync_v2(device, host, bytes, stream) : kMissing;
}

// Page-locked host memory.

CUresult host_alloc(const RealDriver* real, void** host, size_t bytes, unsigned int flags) {
  return real && real->cuMemHostAlloc ? real->cuMemHostAlloc(host, bytes, flags) : kMissing;
}

CUresult free_host(const RealDriver* real, void* host) {
  return real && real->cuMemFreeHost ? real->cuMemFreeHost(host) : kMissing;
}

CUresult host_register(const RealDriver* real, void* host, size_t bytes, unsigned int flags) {
  return real && real->cuMemHostRegister_v2 ? real->cuMemHostRegister_v2(host, bytes, flags) : kMissing;
}

CUresult host_unregister(const RealDriver* real, void* host) {
  return real && real->cuMemHostUnregister ? real->cuMemHostUnregister(host) : kMissing;
}

}  // namespace pagefast::driver
