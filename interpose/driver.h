// interpose/driver.h: the one seam through which every driver call that
// pagefast makes for itself goes (as mimalloc's prim.h is its one OS
// layer): the pool's VMM provider and its copies (interpose/pool/), the
// pool glue, the own-VMM cache's glue (interpose/pool/own_vmm.cpp: its
// SeamDriver, and the program's calls it forwards after looking
// at them), CUDA IPC (interpose/ipc/), the trace, the start-up checks and
// what the hooks ask the driver for their own purposes
// (interpose/hooks.cpp: the capture state, a peer's device, a primary
// context's state, the reservation and import hooks). No other file calls
// a driver function through the RealDriver table, or asks whether the
// loaded driver has one (tests/tools/driver_seam.py checks both).
//
// Not covered: a program's call that the doors forward to the driver
// unchanged (PF_FORWARD and the other macros of interpose/hooks.cpp that
// reach the table by the entry's `symbol`); that is the doors' job.
//
// Contract, the same for every function: the driver's prototype, with the
// loaded driver first; the driver's answer, untouched; and
// CUDA_ERROR_NOT_FOUND without calling anything when `real` is NULL or
// the driver lacks the function (as pagefast answers for a missing entry
// point). No lock, no allocation, no log: a caller may hold any lock.
//
// A caller that must know beforehand whether a call can be made (to choose
// another way, or to make a pair of calls only when both halves exist)
// asks has() or one of the named questions below; these are the only
// places that look at the table's pointers.
//
// The calls on the pool's hot path (the current context and its device)
// are inline here: through the seam they cost what the direct call did.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "interpose/real_driver.h"

namespace pagefast::driver {

// The answer for a function the loaded driver lacks.
constexpr CUresult kMissing = CUDA_ERROR_NOT_FOUND;

// Whether the loaded driver has every one of the functions named, as
// members of the table: has(real, &RealDriver::cuMemCreate). False when
// `real` is NULL.
template <typename... Fn>
inline bool has(const RealDriver* real, Fn RealDriver::*... fn) {
  return real && ((real->*fn != nullptr) && ...);
}

// The functions the pool's VMM provider cannot work without: address
// space, physical memory, mapping and access, the granularity, the
// device's attributes and total memory, and the synchronisation that
// makes a freed block reusable.
bool has_vmm(const RealDriver* real);
// The functions that mapping another process's exported memory needs (CUDA
// IPC of pool blocks): the import and what has_vmm names for a mapping.
bool has_vmm_import(const RealDriver* real);
// Both of the pair that makes another context current for a while.
bool has_context_push(const RealDriver* real);

// Contexts.
inline CUresult ctx_get_current(const RealDriver* real, CUcontext* context) {
  return real && real->cuCtxGetCurrent ? real->cuCtxGetCurrent(context) : kMissing;
}
inline CUresult ctx_get_device(const RealDriver* real, CUdevice* device) {
  return real && real->cuCtxGetDevice ? real->cuCtxGetDevice(device) : kMissing;
}
CUresult ctx_set_current(const RealDriver* real, CUcontext context);
CUresult ctx_push(const RealDriver* real, CUcontext context);
CUresult ctx_pop(const RealDriver* real, CUcontext* context);
CUresult ctx_synchronize(const RealDriver* real);
CUresult primary_ctx_state(const RealDriver* real, CUdevice device, unsigned int* flags, int* active);

// Devices and errors.
CUresult device_attribute(const RealDriver* real, int* value, CUdevice_attribute attribute, CUdevice device);
CUresult device_total_mem(const RealDriver* real, size_t* bytes, CUdevice device);
CUresult device_count(const RealDriver* real, int* count);
CUresult device_pci_bus_id(const RealDriver* real, char* bus_id, int length, CUdevice device);
CUresult mem_get_info(const RealDriver* real, size_t* free_bytes, size_t* total_bytes);
CUresult error_name(const RealDriver* real, CUresult error, const char** name);
// The driver's own pitched allocation and its free: a region learns the
// pitch the driver chooses (pool.cpp try_alloc_pitched).
CUresult mem_alloc_pitch(const RealDriver* real, CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                         unsigned element_bytes);
CUresult mem_free(const RealDriver* real, CUdeviceptr dptr);
// The driver's default stream-ordered pool of a device (cudaMallocAsync)
// and its figures: sleep names what it holds (pagefast cannot sleep it).
CUresult default_mem_pool(const RealDriver* real, CUmemoryPool* pool, CUdevice device);
CUresult mem_pool_attribute(const RealDriver* real, CUmemoryPool pool, CUmemPool_attribute attribute, void* value);

// Virtual memory management.
CUresult create(const RealDriver* real, CUmemGenericAllocationHandle* handle, size_t bytes,
                const CUmemAllocationProp* prop, unsigned long long flags);
CUresult release(const RealDriver* real, CUmemGenericAllocationHandle handle);
CUresult map(const RealDriver* real, CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags);
CUresult unmap(const RealDriver* real, CUdeviceptr ptr, size_t bytes);
CUresult set_access(const RealDriver* real, CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count);
CUresult get_access(const RealDriver* real, unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr);
CUresult address_reserve(const RealDriver* real, CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                         unsigned long long flags);
CUresult address_free(const RealDriver* real, CUdeviceptr ptr, size_t bytes);
CUresult export_handle(const RealDriver* real, void* shareable, CUmemGenericAllocationHandle handle,
                       CUmemAllocationHandleType type, unsigned long long flags);
CUresult import_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* os_handle,
                       CUmemAllocationHandleType type);
CUresult retain_handle(const RealDriver* real, CUmemGenericAllocationHandle* handle, void* addr);
CUresult handle_properties(const RealDriver* real, CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle);
CUresult granularity(const RealDriver* real, size_t* bytes, const CUmemAllocationProp* prop,
                     CUmemAllocationGranularity_flags option);

// Streams and copies.
CUresult stream_create(const RealDriver* real, CUstream* stream, unsigned int flags);
CUresult stream_synchronize(const RealDriver* real, CUstream stream);
CUresult stream_destroy(const RealDriver* real, CUstream stream);
CUresult stream_is_capturing(const RealDriver* real, CUstream stream, CUstreamCaptureStatus* status);
CUresult copy_dtoh(const RealDriver* real, void* host, CUdeviceptr device, size_t bytes);
CUresult copy_htod(const RealDriver* real, CUdeviceptr device, const void* host, size_t bytes);
CUresult copy_dtoh_async(const RealDriver* real, void* host, CUdeviceptr device, size_t bytes, CUstream stream);
CUresult copy_htod_async(const RealDriver* real, CUdeviceptr device, const void* host, size_t bytes, CUstream stream);

// Page-locked host memory.
CUresult host_alloc(const RealDriver* real, void** host, size_t bytes, unsigned int flags);
CUresult free_host(const RealDriver* real, void* host);
// Host memory the caller mapped, page-locked in place and back (the sleep
// copies' host memory, interpose/pool/host_memory.h).
CUresult host_register(const RealDriver* real, void* host, size_t bytes, unsigned int flags);
CUresult host_unregister(const RealDriver* real, void* host);

}  // namespace pagefast::driver
