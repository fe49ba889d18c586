// tests/fakecuda/api_list.h: THE list of driver entry points the fake
// libcuda.so.1 exports. The exported C functions (entry.cpp), their
// implementation declarations (namespace impl, below), the call counters and
// their names, the FAKECUDA_FAIL targets and the cuGetProcAddress table are
// all generated from this one list; nothing else names the entry points.
//
// Rows:
//   L(proc, since, symbol, params, args)
//     a legacy-stream (or stream-less) variant: `symbol` is the name
//     libcuda.so.1 exports; `proc` the base name cuGetProcAddress takes;
//     `since` the lowest cudaVersion for which the driver hands out this
//     variant (the highest `since` not above the requested version wins).
//   P(proc, since, symbol, sfx, legacy, params, args)
//     a per-thread-default-stream variant (_ptds/_ptsz), handed out with
//     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. It runs `legacy`'s
//     implementation with stream 0 meaning the calling thread's per-thread
//     default stream, as CU_STREAM_PER_THREAD does.
//
// `since` is checked at compile time against NVIDIA's own typedefs
// (PFN_<proc>_v<since>[_<sfx>] in cudaTypedefs.h), so a wrong version or a
// wrong prototype does not compile. cuda.h is included in the driver's own
// mode (__CUDA_API_VERSION_INTERNAL) because only that mode declares every
// exported variant (cuMemcpyHtoD_v2 and cuMemcpyHtoD_v2_ptds, the v1
// cuGetProcAddress, ...) with its exact prototype and leaves no renaming
// macros behind; every fake source includes this header first.
#pragma once

#ifdef CUDA_VERSION
#error "tests/fakecuda/api_list.h must be included before <cuda.h>"
#endif
#define __CUDA_API_VERSION_INTERNAL 1
// The fake is compiled with hidden visibility; everything cuda.h declares is
// what libcuda.so.1 exports, so those declarations (and thereby our
// definitions) get default visibility.
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaTypedefs.h>
#pragma GCC visibility pop

// clang-format off
#define FAKECUDA_API(L, P)                                                                   \
  /* initialisation, version, errors, entry points */                                      \
  L(cuInit, 2000, cuInit, (unsigned int flags), (flags))                                   \
  L(cuDriverGetVersion, 2020, cuDriverGetVersion, (int* version), (version))               \
  L(cuGetErrorName, 6000, cuGetErrorName, (CUresult error, const char** str), (error, str)) \
  L(cuGetErrorString, 6000, cuGetErrorString, (CUresult error, const char** str),          \
    (error, str))                                                                          \
  L(cuGetProcAddress, 11030, cuGetProcAddress,                                             \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags),                  \
    (symbol, pfn, cuda_version, flags))                                                    \
  L(cuGetProcAddress, 12000, cuGetProcAddress_v2,                                          \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                   \
     CUdriverProcAddressQueryResult* status),                                              \
    (symbol, pfn, cuda_version, flags, status))                                            \
  L(cuGetExportTable, 3000, cuGetExportTable,                                              \
    (const void** table, const CUuuid* table_id), (table, table_id))                       \
  /* devices */                                                                            \
  L(cuDeviceGet, 2000, cuDeviceGet, (CUdevice* device, int ordinal), (device, ordinal))    \
  L(cuDeviceGetCount, 2000, cuDeviceGetCount, (int* count), (count))                       \
  L(cuDeviceGetName, 2000, cuDeviceGetName, (char* name, int len, CUdevice dev),           \
    (name, len, dev))                                                                      \
  L(cuDeviceGetUuid, 9020, cuDeviceGetUuid, (CUuuid* uuid, CUdevice dev), (uuid, dev))     \
  L(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2, (CUuuid* uuid, CUdevice dev), (uuid, dev)) \
  L(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2, (size_t* bytes, CUdevice dev), (bytes, dev)) \
  L(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute,                                      \
    (int* value, CUdevice_attribute attribute, CUdevice dev), (value, attribute, dev))     \
  L(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId, (char* bus_id, int len, CUdevice dev), \
    (bus_id, len, dev))                                                                    \
  L(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId,                                    \
    (CUdevice* dev, const char* bus_id), (dev, bus_id))                                    \
  L(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer,                                    \
    (int* can_access, CUdevice dev, CUdevice peer), (can_access, dev, peer))               \
  /* primary contexts */                                                                   \
  L(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain, (CUcontext* ctx, CUdevice dev), \
    (ctx, dev))                                                                            \
  L(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease, (CUdevice dev), (dev))     \
  L(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev)) \
  L(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset, (CUdevice dev), (dev))         \
  L(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev))     \
  L(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags,                          \
    (CUdevice dev, unsigned int flags), (dev, flags))                                      \
  L(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2,                      \
    (CUdevice dev, unsigned int flags), (dev, flags))                                      \
  L(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState,                          \
    (CUdevice dev, unsigned int* flags, int* active), (dev, flags, active))                \
  /* contexts */                                                                           \
  L(cuCtxCreate, 3020, cuCtxCreate_v2, (CUcontext* ctx, unsigned int flags, CUdevice dev), \
    (ctx, flags, dev))                                                                     \
  L(cuCtxCreate, 11040, cuCtxCreate_v3,                                                    \
    (CUcontext* ctx, CUexecAffinityParam* affinity, int affinity_count, unsigned int flags, \
     CUdevice dev),                                                                        \
    (ctx, affinity, affinity_count, flags, dev))                                           \
  L(cuCtxCreate, 12050, cuCtxCreate_v4,                                                    \
    (CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev),         \
    (ctx, params, flags, dev))                                                             \
  L(cuCtxDestroy, 4000, cuCtxDestroy_v2, (CUcontext ctx), (ctx))                           \
  L(cuCtxGetCurrent, 4000, cuCtxGetCurrent, (CUcontext* ctx), (ctx))                       \
  L(cuCtxSetCurrent, 4000, cuCtxSetCurrent, (CUcontext ctx), (ctx))                        \
  L(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2, (CUcontext ctx), (ctx))                   \
  L(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2, (CUcontext* ctx), (ctx))                    \
  L(cuCtxGetDevice, 2000, cuCtxGetDevice, (CUdevice* dev), (dev))                          \
  L(cuCtxSynchronize, 2000, cuCtxSynchronize, (void), ())                                  \
  L(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess, (CUcontext peer, unsigned int flags), \
    (peer, flags))                                                                         \
  L(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess, (CUcontext peer), (peer))        \
  /* cuMemAlloc memory and pointer queries */                                              \
  L(cuMemAlloc, 3020, cuMemAlloc_v2, (CUdeviceptr* dptr, size_t bytes), (dptr, bytes))     \
  L(cuMemFree, 3020, cuMemFree_v2, (CUdeviceptr dptr), (dptr))                             \
  L(cuMemAllocPitch, 3020, cuMemAllocPitch_v2,                                             \
    (CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,                  \
     unsigned int element_bytes),                                                          \
    (dptr, pitch, width_bytes, height, element_bytes))                                     \
  /* stream-ordered allocation, served as cuMemAlloc memory (memory.cpp) */                \
  L(cuMemAllocAsync, 11020, cuMemAllocAsync,                                               \
    (CUdeviceptr* dptr, size_t bytes, CUstream stream), (dptr, bytes, stream))             \
  P(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz, ptsz, cuMemAllocAsync,                   \
    (CUdeviceptr* dptr, size_t bytes, CUstream stream), (dptr, bytes, stream))             \
  L(cuMemFreeAsync, 11020, cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream),            \
    (dptr, stream))                                                                        \
  /* the device's default stream-ordered pool: its figures (memory.cpp) */                 \
  L(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool,                           \
    (CUmemoryPool * pool, CUdevice device), (pool, device))                                \
  L(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute,                                   \
    (CUmemoryPool pool, CUmemPool_attribute attr, void* value), (pool, attr, value))       \
  P(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz, ptsz, cuMemFreeAsync,                      \
    (CUdeviceptr dptr, CUstream stream), (dptr, stream))                                   \
  /* modules: the driver's own device memory, charged per module (memory.cpp) */           \
  L(cuModuleLoadData, 2000, cuModuleLoadData, (CUmodule* module, const void* image),       \
    (module, image))                                                                       \
  L(cuModuleUnload, 2000, cuModuleUnload, (CUmodule module), (module))                     \
  L(cuModuleGetFunction, 2000, cuModuleGetFunction,                                        \
    (CUfunction* function, CUmodule module, const char* name), (function, module, name))   \
  L(cuMemGetInfo, 3020, cuMemGetInfo_v2, (size_t* free_bytes, size_t* total_bytes),        \
    (free_bytes, total_bytes))                                                             \
  L(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2,                                   \
    (CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr), (base, bytes, dptr))             \
  L(cuPointerGetAttribute, 4000, cuPointerGetAttribute,                                    \
    (void* data, CUpointer_attribute attribute, CUdeviceptr ptr), (data, attribute, ptr))  \
  L(cuPointerGetAttributes, 7000, cuPointerGetAttributes,                                  \
    (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr),   \
    (count, attributes, data, ptr))                                                        \
  L(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle, (CUipcMemHandle* handle, CUdeviceptr dptr), \
    (handle, dptr))                                                                        \
  L(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle,                                          \
    (CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags), (pdptr, handle, flags)) \
  L(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2,                                      \
    (CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags), (pdptr, handle, flags)) \
  L(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle, (CUdeviceptr dptr), (dptr))            \
  /* page-locked host memory (plain heap memory here) */                                   \
  L(cuMemHostAlloc, 2020, cuMemHostAlloc, (void** pp, size_t bytes, unsigned int flags),    \
    (pp, bytes, flags))                                                                    \
  L(cuMemFreeHost, 2000, cuMemFreeHost, (void* p), (p))                                    \
  /* host memory registered (page-locked) in place: kept in a table, no                    \
     pinning here (host.cpp) */                                                             \
  L(cuMemHostRegister, 6050, cuMemHostRegister_v2, (void* p, size_t bytes, unsigned int flags), \
    (p, bytes, flags))                                                                     \
  L(cuMemHostUnregister, 4000, cuMemHostUnregister, (void* p), (p))                        \
  /* copies and memsets */                                                                 \
  L(cuMemcpy, 4000, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t bytes),            \
    (dst, src, bytes))                                                                     \
  P(cuMemcpy, 7000, cuMemcpy_ptds, ptds, cuMemcpy,                                         \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))                   \
  L(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t bytes), \
    (dst, src, bytes))                                                                     \
  P(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds, ptds, cuMemcpyHtoD_v2,                       \
    (CUdeviceptr dst, const void* src, size_t bytes), (dst, src, bytes))                   \
  L(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t bytes),       \
    (dst, src, bytes))                                                                     \
  P(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds, ptds, cuMemcpyDtoH_v2,                       \
    (void* dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))                         \
  L(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), \
    (dst, src, bytes))                                                                     \
  P(cuMemcpyDtoD, 7000, cuMemcpyDtoD_v2_ptds, ptds, cuMemcpyDtoD_v2,                       \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))                   \
  L(cuMemcpyAsync, 4000, cuMemcpyAsync,                                                    \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  P(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz, ptsz, cuMemcpyAsync,                          \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  L(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2,                                         \
    (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  P(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz, ptsz, cuMemcpyHtoDAsync_v2,        \
    (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  L(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2,                                         \
    (void* dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
  P(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz, ptsz, cuMemcpyDtoHAsync_v2,        \
    (void* dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
  L(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2,                                         \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  P(cuMemcpyDtoDAsync, 7000, cuMemcpyDtoDAsync_v2_ptsz, ptsz, cuMemcpyDtoDAsync_v2,        \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),                     \
    (dst, src, bytes, stream))                                                             \
  L(cuMemsetD8, 3020, cuMemsetD8_v2, (CUdeviceptr dst, unsigned char value, size_t count), \
    (dst, value, count))                                                                   \
  P(cuMemsetD8, 7000, cuMemsetD8_v2_ptds, ptds, cuMemsetD8_v2,                             \
    (CUdeviceptr dst, unsigned char value, size_t count), (dst, value, count))             \
  L(cuMemsetD16, 3020, cuMemsetD16_v2, (CUdeviceptr dst, unsigned short value, size_t count), \
    (dst, value, count))                                                                   \
  P(cuMemsetD16, 7000, cuMemsetD16_v2_ptds, ptds, cuMemsetD16_v2,                          \
    (CUdeviceptr dst, unsigned short value, size_t count), (dst, value, count))            \
  L(cuMemsetD32, 3020, cuMemsetD32_v2, (CUdeviceptr dst, unsigned int value, size_t count), \
    (dst, value, count))                                                                   \
  P(cuMemsetD32, 7000, cuMemsetD32_v2_ptds, ptds, cuMemsetD32_v2,                          \
    (CUdeviceptr dst, unsigned int value, size_t count), (dst, value, count))              \
  L(cuMemsetD8Async, 3020, cuMemsetD8Async,                                                \
    (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream),                 \
    (dst, value, count, stream))                                                           \
  P(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz, ptsz, cuMemsetD8Async,                    \
    (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream),                 \
    (dst, value, count, stream))                                                           \
  L(cuMemsetD16Async, 3020, cuMemsetD16Async,                                              \
    (CUdeviceptr dst, unsigned short value, size_t count, CUstream stream),                \
    (dst, value, count, stream))                                                           \
  P(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz, ptsz, cuMemsetD16Async,                 \
    (CUdeviceptr dst, unsigned short value, size_t count, CUstream stream),                \
    (dst, value, count, stream))                                                           \
  L(cuMemsetD32Async, 3020, cuMemsetD32Async,                                              \
    (CUdeviceptr dst, unsigned int value, size_t count, CUstream stream),                  \
    (dst, value, count, stream))                                                           \
  P(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz, ptsz, cuMemsetD32Async,                 \
    (CUdeviceptr dst, unsigned int value, size_t count, CUstream stream),                  \
    (dst, value, count, stream))                                                           \
  /* virtual memory management */                                                          \
  L(cuMemAddressReserve, 10020, cuMemAddressReserve,                                       \
    (CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr hint,                   \
     unsigned long long flags),                                                            \
    (ptr, bytes, alignment, hint, flags))                                                  \
  L(cuMemAddressFree, 10020, cuMemAddressFree, (CUdeviceptr ptr, size_t bytes), (ptr, bytes)) \
  L(cuMemCreate, 10020, cuMemCreate,                                                       \
    (CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,  \
     unsigned long long flags),                                                            \
    (handle, bytes, prop, flags))                                                          \
  L(cuMemRelease, 10020, cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))    \
  L(cuMemMap, 10020, cuMemMap,                                                             \
    (CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,    \
     unsigned long long flags),                                                            \
    (ptr, bytes, offset, handle, flags))                                                   \
  L(cuMemUnmap, 10020, cuMemUnmap, (CUdeviceptr ptr, size_t bytes), (ptr, bytes))          \
  L(cuMemSetAccess, 10020, cuMemSetAccess,                                                 \
    (CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count),            \
    (ptr, bytes, desc, count))                                                             \
  L(cuMemGetAccess, 10020, cuMemGetAccess,                                                 \
    (unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr),           \
    (flags, location, ptr))                                                                \
  L(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity,                   \
    (size_t* granularity, const CUmemAllocationProp* prop,                                 \
     CUmemAllocationGranularity_flags option),                                             \
    (granularity, prop, option))                                                           \
  L(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle, \
    (CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle), (prop, handle))      \
  L(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle,                       \
    (CUmemGenericAllocationHandle* handle, void* addr), (handle, addr))                    \
  L(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle,                     \
    (void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type, \
     unsigned long long flags),                                                            \
    (shareable, handle, type, flags))                                                      \
  L(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle,                 \
    (CUmemGenericAllocationHandle* handle, void* os_handle, CUmemAllocationHandleType type), \
    (handle, os_handle, type))                                                             \
  /* multicast objects (multicast.cpp) */                                                  \
  L(cuMulticastCreate, 12010, cuMulticastCreate,                                           \
    (CUmemGenericAllocationHandle* mc_handle, const CUmulticastObjectProp* prop),          \
    (mc_handle, prop))                                                                     \
  L(cuMulticastAddDevice, 12010, cuMulticastAddDevice,                                     \
    (CUmemGenericAllocationHandle mc_handle, CUdevice dev), (mc_handle, dev))              \
  L(cuMulticastBindMem, 12010, cuMulticastBindMem,                                         \
    (CUmemGenericAllocationHandle mc_handle, size_t mc_offset,                             \
     CUmemGenericAllocationHandle mem_handle, size_t mem_offset, size_t size,              \
     unsigned long long flags),                                                            \
    (mc_handle, mc_offset, mem_handle, mem_offset, size, flags))                           \
  L(cuMulticastBindAddr, 12010, cuMulticastBindAddr,                                       \
    (CUmemGenericAllocationHandle mc_handle, size_t mc_offset, CUdeviceptr memptr,         \
     size_t size, unsigned long long flags),                                               \
    (mc_handle, mc_offset, memptr, size, flags))                                           \
  L(cuMulticastUnbind, 12010, cuMulticastUnbind,                                           \
    (CUmemGenericAllocationHandle mc_handle, CUdevice dev, size_t mc_offset, size_t size), \
    (mc_handle, dev, mc_offset, size))                                                     \
  /* streams */                                                                            \
  L(cuStreamCreate, 2000, cuStreamCreate, (CUstream* stream, unsigned int flags),          \
    (stream, flags))                                                                       \
  L(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority,                          \
    (CUstream* stream, unsigned int flags, int priority), (stream, flags, priority))       \
  L(cuStreamDestroy, 4000, cuStreamDestroy_v2, (CUstream stream), (stream))                \
  L(cuStreamSynchronize, 2000, cuStreamSynchronize, (CUstream stream), (stream))           \
  P(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz, ptsz, cuStreamSynchronize,        \
    (CUstream stream), (stream))                                                           \
  L(cuStreamQuery, 2000, cuStreamQuery, (CUstream stream), (stream))                       \
  P(cuStreamQuery, 7000, cuStreamQuery_ptsz, ptsz, cuStreamQuery, (CUstream stream), (stream)) \
  L(cuStreamWaitEvent, 3020, cuStreamWaitEvent,                                            \
    (CUstream stream, CUevent event, unsigned int flags), (stream, event, flags))          \
  P(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz, ptsz, cuStreamWaitEvent,              \
    (CUstream stream, CUevent event, unsigned int flags), (stream, event, flags))          \
  /* stream capture */                                                                     \
  L(cuStreamBeginCapture, 10000, cuStreamBeginCapture, (CUstream stream), (stream))        \
  P(cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz, ptsz, cuStreamBeginCapture,    \
    (CUstream stream), (stream))                                                           \
  L(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2,                                  \
    (CUstream stream, CUstreamCaptureMode mode), (stream, mode))                           \
  P(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2_ptsz, ptsz, cuStreamBeginCapture_v2, \
    (CUstream stream, CUstreamCaptureMode mode), (stream, mode))                           \
  L(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph,                       \
    (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges, \
     size_t dep_count, CUstreamCaptureMode mode),                                          \
    (stream, graph, deps, edges, dep_count, mode))                                         \
  P(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph_ptsz, ptsz,            \
    cuStreamBeginCaptureToGraph,                                                           \
    (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges, \
     size_t dep_count, CUstreamCaptureMode mode),                                          \
    (stream, graph, deps, edges, dep_count, mode))                                         \
  L(cuStreamEndCapture, 10000, cuStreamEndCapture, (CUstream stream, CUgraph* graph),      \
    (stream, graph))                                                                       \
  P(cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz, ptsz, cuStreamEndCapture,          \
    (CUstream stream, CUgraph* graph), (stream, graph))                                    \
  L(cuStreamIsCapturing, 10000, cuStreamIsCapturing,                                       \
    (CUstream stream, CUstreamCaptureStatus* status), (stream, status))                    \
  P(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz, ptsz, cuStreamIsCapturing,       \
    (CUstream stream, CUstreamCaptureStatus* status), (stream, status))                    \
  L(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo,                                 \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id), (stream, status, id)) \
  P(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo_ptsz, ptsz, cuStreamGetCaptureInfo, \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id), (stream, status, id)) \
  L(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2,                              \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,       \
     const CUgraphNode** deps, size_t* dep_count),                                         \
    (stream, status, id, graph, deps, dep_count))                                          \
  P(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2_ptsz, ptsz,                   \
    cuStreamGetCaptureInfo_v2,                                                             \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,       \
     const CUgraphNode** deps, size_t* dep_count),                                         \
    (stream, status, id, graph, deps, dep_count))                                          \
  L(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3,                              \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,       \
     const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* dep_count),          \
    (stream, status, id, graph, deps, edges, dep_count))                                   \
  P(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3_ptsz, ptsz,                   \
    cuStreamGetCaptureInfo_v3,                                                             \
    (CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,       \
     const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* dep_count),          \
    (stream, status, id, graph, deps, edges, dep_count))                                   \
  L(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode,           \
    (CUstreamCaptureMode* mode), (mode))                                                   \
  /* events */                                                                             \
  L(cuEventCreate, 2000, cuEventCreate, (CUevent* event, unsigned int flags), (event, flags)) \
  L(cuEventRecord, 2000, cuEventRecord, (CUevent event, CUstream stream), (event, stream)) \
  P(cuEventRecord, 7000, cuEventRecord_ptsz, ptsz, cuEventRecord,                          \
    (CUevent event, CUstream stream), (event, stream))                                     \
  L(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags,                                 \
    (CUevent event, CUstream stream, unsigned int flags), (event, stream, flags))          \
  P(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz, ptsz, cuEventRecordWithFlags, \
    (CUevent event, CUstream stream, unsigned int flags), (event, stream, flags))          \
  L(cuEventQuery, 2000, cuEventQuery, (CUevent event), (event))                            \
  L(cuEventSynchronize, 2000, cuEventSynchronize, (CUevent event), (event))                \
  L(cuEventDestroy, 4000, cuEventDestroy_v2, (CUevent event), (event))                     \
  L(cuEventElapsedTime, 2000, cuEventElapsedTime,                                          \
    (float* milliseconds, CUevent start, CUevent end), (milliseconds, start, end))         \
  L(cuEventElapsedTime, 12080, cuEventElapsedTime_v2,                                      \
    (float* milliseconds, CUevent start, CUevent end), (milliseconds, start, end))
// clang-format on

// The implementations, one per L row, with the row's exact parameters. The
// exported shells in entry.cpp count the call, apply FAKECUDA_FAIL and then
// forward here; P rows forward to their legacy row's implementation.
namespace impl {
#define FAKECUDA_DECLARE_L(proc, since, symbol, params, args) CUresult symbol params;
#define FAKECUDA_DECLARE_P(...)
FAKECUDA_API(FAKECUDA_DECLARE_L, FAKECUDA_DECLARE_P)
#undef FAKECUDA_DECLARE_L
#undef FAKECUDA_DECLARE_P
}  // namespace impl
