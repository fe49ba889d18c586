// interpose/entries.h: THE table of driver entry points that pagefast
// replaces. Every door (exported symbols, the dlsym override, the
// cuGetProcAddress wrapper), the real-driver table, the stats names and the
// hook declarations are derived from this one list; nothing else names them.
//
// Columns:
//   symbol   the name libcuda.so.1 exports (and pagefast exports too)
//   proc     the name cuGetProcAddress takes for it
//   since    the lowest cudaVersion for which the driver hands out this
//            variant of `proc` ...
//   until    ... and the version from which it hands out a newer one
//   ptds     1: the per-thread-default-stream variant (_ptsz/_ptds), chosen
//            with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
//   pfn      the exact prototype, as a typedef from <cudaTypedefs.h>
//   params / args   the parameter list and the forwarding argument list
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

// The v1 cuGetProcAddress is declared only for the driver itself; cuda.h
// renames the plain name to _v2. pagefast defines both, so drop the macros.
#undef cuGetProcAddress
#undef cuStreamBeginCapture
#undef cuStreamEndCapture
#undef cuStreamBeginCaptureToGraph
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxRelease
#undef cuCtxDestroy
#undef cuIpcOpenMemHandle

#define PF_NO_LIMIT 0x7fffffff

// cudaTypedefs.h declares the pre-10.1 variants only for the driver's own
// build; these two have the same shape as there.
typedef CUresult(CUDAAPI* PFN_cuStreamBeginCapture_v10000)(CUstream stream);
typedef CUresult(CUDAAPI* PFN_cuStreamBeginCapture_v10000_ptsz)(CUstream stream);
typedef CUresult(CUDAAPI* PFN_cuDevicePrimaryCtxReset_v7000)(CUdevice device);
typedef CUresult(CUDAAPI* PFN_cuDevicePrimaryCtxRelease_v7000)(CUdevice device);
typedef CUresult(CUDAAPI* PFN_cuCtxDestroy_v2000)(CUcontext ctx);
typedef CUresult(CUDAAPI* PFN_cuGraphInstantiate_v11000)(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                                         char* log, size_t log_bytes);
typedef CUresult(CUDAAPI* PFN_cuIpcOpenMemHandle_v4010)(CUdeviceptr_v2* pdptr, CUipcMemHandle_v1 handle,
                                                        unsigned int Flags);

// clang-format off
#define PAGEFAST_ENTRIES(X)                                                                     \
  X(cuMemAlloc_v2, "cuMemAlloc", 3020, PF_NO_LIMIT, 0, PFN_cuMemAlloc_v3020,                    \
    (CUdeviceptr* dptr, size_t bytesize), (dptr, bytesize))                                     \
  X(cuMemFree_v2, "cuMemFree", 3020, PF_NO_LIMIT, 0, PFN_cuMemFree_v3020,                       \
    (CUdeviceptr dptr), (dptr))                                                                 \
  X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, PF_NO_LIMIT, 0, PFN_cuMemAllocPitch_v3020,     \
    (CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height, unsigned element_bytes), \
    (dptr, pitch, width_bytes, height, element_bytes))                                          \
  /* Stream-ordered free: a pool block is freed as cuMemFree frees it    \
     (cuSPARSE frees what it took with cudaMalloc through cudaFreeAsync); \
     every other address goes to the driver. */                            \
  X(cuMemFreeAsync, "cuMemFreeAsync", 11020, PF_NO_LIMIT, 0, PFN_cuMemFreeAsync_v11020,         \
    (CUdeviceptr dptr, CUstream stream), (dptr, stream))                                        \
  X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, PF_NO_LIMIT, 1, PFN_cuMemFreeAsync_v11020_ptsz, \
    (CUdeviceptr dptr, CUstream stream), (dptr, stream))                                        \
  /* Calls that take device memory outside the pool: forwarded; on       \
     CUDA_ERROR_OUT_OF_MEMORY pagefast's idle memory of the device goes   \
     back and the call is made once more (docs/POOL.md "Headroom"). */    \
  X(cuMemAllocAsync, "cuMemAllocAsync", 11020, PF_NO_LIMIT, 0, PFN_cuMemAllocAsync_v11020,      \
    (CUdeviceptr* dptr, size_t bytesize, CUstream stream), (dptr, bytesize, stream))            \
  X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, PF_NO_LIMIT, 1, PFN_cuMemAllocAsync_v11020_ptsz, \
    (CUdeviceptr* dptr, size_t bytesize, CUstream stream), (dptr, bytesize, stream))            \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, PF_NO_LIMIT, 0,                  \
    PFN_cuMemAllocFromPoolAsync_v11020,                                                         \
    (CUdeviceptr* dptr, size_t bytesize, CUmemoryPool mempool, CUstream stream),                \
    (dptr, bytesize, mempool, stream))                                                          \
  X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, PF_NO_LIMIT, 1,             \
    PFN_cuMemAllocFromPoolAsync_v11020_ptsz,                                                    \
    (CUdeviceptr* dptr, size_t bytesize, CUmemoryPool mempool, CUstream stream),                \
    (dptr, bytesize, mempool, stream))                                                          \
  X(cuMemPoolCreate, "cuMemPoolCreate", 11020, PF_NO_LIMIT, 0, PFN_cuMemPoolCreate_v11020,      \
    (CUmemoryPool* mempool, const CUmemPoolProps* props), (mempool, props))                     \
  X(cuMemAllocManaged, "cuMemAllocManaged", 6000, PF_NO_LIMIT, 0, PFN_cuMemAllocManaged_v6000,  \
    (CUdeviceptr* dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags))          \
  X(cuArrayCreate_v2, "cuArrayCreate", 3020, PF_NO_LIMIT, 0, PFN_cuArrayCreate_v3020,           \
    (CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc), (array, desc))                         \
  X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, PF_NO_LIMIT, 0, PFN_cuArray3DCreate_v3020,     \
    (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc), (array, desc))                       \
  X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, PF_NO_LIMIT, 0,                     \
    PFN_cuMipmappedArrayCreate_v5000,                                                           \
    (CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels),        \
    (array, desc, levels))                                                                      \
  X(cuModuleLoad, "cuModuleLoad", 2000, PF_NO_LIMIT, 0, PFN_cuModuleLoad_v2000,                 \
    (CUmodule* module, const char* fname), (module, fname))                                     \
  X(cuModuleLoadData, "cuModuleLoadData", 2000, PF_NO_LIMIT, 0, PFN_cuModuleLoadData_v2000,     \
    (CUmodule* module, const void* image), (module, image))                                     \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 2010, PF_NO_LIMIT, 0, PFN_cuModuleLoadDataEx_v2010, \
    (CUmodule* module, const void* image, unsigned int count, CUjit_option* options, void** values), \
    (module, image, count, options, values))                                                    \
  X(cuModuleLoadFatBinary, "cuModuleLoadFatBinary", 2000, PF_NO_LIMIT, 0,                       \
    PFN_cuModuleLoadFatBinary_v2000, (CUmodule* module, const void* fatbin), (module, fatbin))  \
  /* Lazy loading (the default since CUDA 12.2): kernels and globals take \
     their device memory when first asked for, not at the load. */      \
  X(cuModuleGetFunction, "cuModuleGetFunction", 2000, PF_NO_LIMIT, 0, PFN_cuModuleGetFunction_v2000, \
    (CUfunction* function, CUmodule module, const char* name), (function, module, name))       \
  X(cuModuleGetGlobal_v2, "cuModuleGetGlobal", 3020, PF_NO_LIMIT, 0, PFN_cuModuleGetGlobal_v3020, \
    (CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name), (dptr, bytes, module, name)) \
  X(cuLibraryGetKernel, "cuLibraryGetKernel", 12000, PF_NO_LIMIT, 0, PFN_cuLibraryGetKernel_v12000, \
    (CUkernel* kernel, CUlibrary library, const char* name), (kernel, library, name))          \
  X(cuLibraryGetModule, "cuLibraryGetModule", 12000, PF_NO_LIMIT, 0, PFN_cuLibraryGetModule_v12000, \
    (CUmodule* module, CUlibrary library), (module, library))                                   \
  X(cuLibraryGetGlobal, "cuLibraryGetGlobal", 12000, PF_NO_LIMIT, 0, PFN_cuLibraryGetGlobal_v12000, \
    (CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name), (dptr, bytes, library, name)) \
  X(cuKernelGetFunction, "cuKernelGetFunction", 12000, PF_NO_LIMIT, 0, PFN_cuKernelGetFunction_v12000, \
    (CUfunction* function, CUkernel kernel), (function, kernel))                                \
  X(cuFuncLoad, "cuFuncLoad", 12040, PF_NO_LIMIT, 0, PFN_cuFuncLoad_v12040, (CUfunction function), (function)) \
  X(cuLibraryLoadData, "cuLibraryLoadData", 12000, PF_NO_LIMIT, 0, PFN_cuLibraryLoadData_v12000, \
    (CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,        \
     unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count),      \
    (library, code, jit_options, jit_values, jit_count, options, values, count))                \
  X(cuLibraryLoadFromFile, "cuLibraryLoadFromFile", 12000, PF_NO_LIMIT, 0,                      \
    PFN_cuLibraryLoadFromFile_v12000,                                                           \
    (CUlibrary* library, const char* file, CUjit_option* jit_options, void** jit_values,        \
     unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count),      \
    (library, file, jit_options, jit_values, jit_count, options, values, count))                \
  X(cuGraphInstantiate_v2, "cuGraphInstantiate", 11000, 12000, 0, PFN_cuGraphInstantiate_v11000, \
    (CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_bytes),   \
    (exec, graph, error_node, log, log_bytes))                                                  \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, PF_NO_LIMIT, 0,          \
    PFN_cuGraphInstantiateWithFlags_v11040,                                                     \
    (CUgraphExec* exec, CUgraph graph, unsigned long long flags), (exec, graph, flags))         \
  X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, PF_NO_LIMIT, 0,        \
    PFN_cuGraphInstantiateWithParams_v12000,                                                    \
    (CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), (exec, graph, params)) \
  X(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 12000, PF_NO_LIMIT, 1,   \
    PFN_cuGraphInstantiateWithParams_v12000_ptsz,                                               \
    (CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), (exec, graph, params)) \
  /* A graph's memory nodes take their memory at launch or upload. */    \
  X(cuGraphLaunch, "cuGraphLaunch", 10000, PF_NO_LIMIT, 0, PFN_cuGraphLaunch_v10000,            \
    (CUgraphExec exec, CUstream stream), (exec, stream))                                        \
  X(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, PF_NO_LIMIT, 1, PFN_cuGraphLaunch_v10000_ptsz,  \
    (CUgraphExec exec, CUstream stream), (exec, stream))                                        \
  X(cuGraphUpload, "cuGraphUpload", 11010, PF_NO_LIMIT, 0, PFN_cuGraphUpload_v11010,            \
    (CUgraphExec exec, CUstream stream), (exec, stream))                                        \
  X(cuGraphUpload_ptsz, "cuGraphUpload", 11010, PF_NO_LIMIT, 1, PFN_cuGraphUpload_v11010_ptsz,  \
    (CUgraphExec exec, CUstream stream), (exec, stream))                                        \
  X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, PF_NO_LIMIT, 0, PFN_cuMemGetInfo_v3020,              \
    (size_t* free_bytes, size_t* total_bytes), (free_bytes, total_bytes))                       \
  X(cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, PF_NO_LIMIT, 0,                      \
    PFN_cuMemGetAddressRange_v3020,                                                             \
    (CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr), (pbase, psize, dptr))                \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, PF_NO_LIMIT, 0,                       \
    PFN_cuPointerGetAttribute_v4000,                                                            \
    (void* data, CUpointer_attribute attribute, CUdeviceptr ptr), (data, attribute, ptr))       \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, PF_NO_LIMIT, 0,                     \
    PFN_cuPointerGetAttributes_v7000,                                                           \
    (unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr),            \
    (count, attributes, data, ptr))                                                             \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, PF_NO_LIMIT, 0, PFN_cuIpcGetMemHandle_v4010,  \
    (CUipcMemHandle* handle, CUdeviceptr dptr), (handle, dptr))                                 \
  /* CUDA IPC of pool blocks (interpose/ipc/ipc.h): pagefast's handles are \
     opened and closed here; every other handle goes to the driver. */     \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 4010, 11000, 0, PFN_cuIpcOpenMemHandle_v4010,     \
    (CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags), (pdptr, handle, Flags))    \
  X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, PF_NO_LIMIT, 0,                          \
    PFN_cuIpcOpenMemHandle_v11000,                                                              \
    (CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags), (pdptr, handle, Flags))    \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, PF_NO_LIMIT, 0, PFN_cuIpcCloseMemHandle_v4010, \
    (CUdeviceptr dptr), (dptr))                                                                 \
  X(cuStreamBeginCapture, "cuStreamBeginCapture", 10000, 10010, 0,                              \
    PFN_cuStreamBeginCapture_v10000, (CUstream stream), (stream))                               \
  X(cuStreamBeginCapture_ptsz, "cuStreamBeginCapture", 10000, 10010, 1,                         \
    PFN_cuStreamBeginCapture_v10000_ptsz, (CUstream stream), (stream))                          \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, PF_NO_LIMIT, 0,                     \
    PFN_cuStreamBeginCapture_v10010, (CUstream stream, CUstreamCaptureMode mode),               \
    (stream, mode))                                                                             \
  X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, PF_NO_LIMIT, 1,                \
    PFN_cuStreamBeginCapture_v10010_ptsz, (CUstream stream, CUstreamCaptureMode mode),          \
    (stream, mode))                                                                             \
  X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, PF_NO_LIMIT, 0,          \
    PFN_cuStreamBeginCaptureToGraph_v12030,                                                     \
    (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,     \
     size_t deps_count, CUstreamCaptureMode mode),                                              \
    (stream, graph, deps, edges, deps_count, mode))                                             \
  X(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", 12030, PF_NO_LIMIT, 1,     \
    PFN_cuStreamBeginCaptureToGraph_v12030_ptsz,                                                \
    (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,     \
     size_t deps_count, CUstreamCaptureMode mode),                                              \
    (stream, graph, deps, edges, deps_count, mode))                                             \
  X(cuStreamEndCapture, "cuStreamEndCapture", 10000, PF_NO_LIMIT, 0,                            \
    PFN_cuStreamEndCapture_v10000, (CUstream stream, CUgraph* graph), (stream, graph))          \
  X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, PF_NO_LIMIT, 1,                       \
    PFN_cuStreamEndCapture_v10000_ptsz, (CUstream stream, CUgraph* graph), (stream, graph))     \
  /* The program's own VMM calls (PyTorch's expandable segments, vLLM's  \
     CuMemAllocator): served by the own-VMM cache                       \
     (docs/OWN-VMM.md), or counted and forwarded with vmm_cache:off.   \
     The pool's own provider calls the real functions. */                  \
  X(cuMemCreate, "cuMemCreate", 10020, PF_NO_LIMIT, 0, PFN_cuMemCreate_v10020,                 \
    (CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,       \
     unsigned long long flags),                                                                 \
    (handle, bytes, prop, flags))                                                               \
  X(cuMemRelease, "cuMemRelease", 10020, PF_NO_LIMIT, 0, PFN_cuMemRelease_v10020,              \
    (CUmemGenericAllocationHandle handle), (handle))                                            \
  X(cuMemMap, "cuMemMap", 10020, PF_NO_LIMIT, 0, PFN_cuMemMap_v10020,                          \
    (CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,         \
     unsigned long long flags),                                                                 \
    (ptr, bytes, offset, handle, flags))                                                        \
  X(cuMemUnmap, "cuMemUnmap", 10020, PF_NO_LIMIT, 0, PFN_cuMemUnmap_v10020,                    \
    (CUdeviceptr ptr, size_t bytes), (ptr, bytes))                                              \
  X(cuMemSetAccess, "cuMemSetAccess", 10020, PF_NO_LIMIT, 0, PFN_cuMemSetAccess_v10020,        \
    (CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count),                 \
    (ptr, bytes, desc, count))                                                                  \
  X(cuMemAddressReserve, "cuMemAddressReserve", 10020, PF_NO_LIMIT, 0,                          \
    PFN_cuMemAddressReserve_v10020,                                                             \
    (CUdeviceptr* ptr, size_t bytes, size_t alignment, CUdeviceptr addr, unsigned long long flags), \
    (ptr, bytes, alignment, addr, flags))                                                       \
  X(cuMemAddressFree, "cuMemAddressFree", 10020, PF_NO_LIMIT, 0, PFN_cuMemAddressFree_v10020,  \
    (CUdeviceptr ptr, size_t bytes), (ptr, bytes))                                              \
  X(cuMemGetAccess, "cuMemGetAccess", 10020, PF_NO_LIMIT, 0, PFN_cuMemGetAccess_v10020,        \
    (unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr),                \
    (flags, location, ptr))                                                                     \
  X(cuMemMapArrayAsync, "cuMemMapArrayAsync", 11010, PF_NO_LIMIT, 0, PFN_cuMemMapArrayAsync_v11010, \
    (CUarrayMapInfo* infos, unsigned count, CUstream stream), (infos, count, stream))           \
  X(cuMemMapArrayAsync_ptsz, "cuMemMapArrayAsync", 11010, PF_NO_LIMIT, 1,                       \
    PFN_cuMemMapArrayAsync_v11010_ptsz, (CUarrayMapInfo* infos, unsigned count, CUstream stream), \
    (infos, count, stream))                                                                     \
  X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, PF_NO_LIMIT, 0,          \
    PFN_cuMemRetainAllocationHandle_v11000, (CUmemGenericAllocationHandle* handle, void* addr), \
    (handle, addr))                                                                             \
  X(cuMulticastBindMem, "cuMulticastBindMem", 12010, PF_NO_LIMIT, 0, PFN_cuMulticastBindMem_v12010, \
    (CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle, \
     size_t memOffset, size_t size, unsigned long long flags),                                   \
    (mcHandle, mcOffset, memHandle, memOffset, size, flags))                                    \
  X(cuMulticastBindAddr, "cuMulticastBindAddr", 12010, PF_NO_LIMIT, 0, PFN_cuMulticastBindAddr_v12010, \
    (CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size,   \
     unsigned long long flags),                                                                 \
    (mcHandle, mcOffset, memptr, size, flags))                                                  \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020, PF_NO_LIMIT, 0,        \
    PFN_cuMemExportToShareableHandle_v10020,                                                    \
    (void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,      \
     unsigned long long flags),                                                                 \
    (shareable, handle, type, flags))                                                           \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, PF_NO_LIMIT, 0,    \
    PFN_cuMemImportFromShareableHandle_v10020,                                                  \
    (CUmemGenericAllocationHandle* handle, void* osHandle, CUmemAllocationHandleType type),     \
    (handle, osHandle, type))                                                                   \
  X(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", 10020,    \
    PF_NO_LIMIT, 0, PFN_cuMemGetAllocationPropertiesFromHandle_v10020,                          \
    (CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle), (prop, handle))           \
  /* Peer access: forwarded, then the peer's pool opens its mappings to  \
     (or closes them to) the calling context's device. */                 \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 4000, PF_NO_LIMIT, 0,                       \
    PFN_cuCtxEnablePeerAccess_v4000, (CUcontext peerContext, unsigned int Flags),               \
    (peerContext, Flags))                                                                       \
  X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", 4000, PF_NO_LIMIT, 0,                     \
    PFN_cuCtxDisablePeerAccess_v4000, (CUcontext peerContext), (peerContext))                   \
  /* A primary context reset (cudaDeviceReset), or the release that       \
     destroys it, frees the device's memory: the pool of that device is   \
     retired and the device served by the driver from then on. */         \
  X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, 11000, 0,                        \
    PFN_cuDevicePrimaryCtxReset_v7000, (CUdevice device), (device))                             \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, PF_NO_LIMIT, 0,              \
    PFN_cuDevicePrimaryCtxReset_v11000, (CUdevice device), (device))                            \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, 11000, 0,                    \
    PFN_cuDevicePrimaryCtxRelease_v7000, (CUdevice device), (device))                           \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, PF_NO_LIMIT, 0,          \
    PFN_cuDevicePrimaryCtxRelease_v11000, (CUdevice device), (device))                          \
  /* Destroying a context frees its memory: the pool's blocks allocated                         \
     in it go back to the pool (pool_api.h after_context_destroy). */                           \
  X(cuCtxDestroy, "cuCtxDestroy", 2000, 4000, 0, PFN_cuCtxDestroy_v2000, (CUcontext ctx), (ctx)) \
  X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, PF_NO_LIMIT, 0, PFN_cuCtxDestroy_v4000, (CUcontext ctx), \
    (ctx))                                                                                      \
  X(cuGetProcAddress, "cuGetProcAddress", 11030, 12000, 0, PFN_cuGetProcAddress_v11030,         \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags),                       \
    (symbol, pfn, cuda_version, flags))                                                         \
  X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, PF_NO_LIMIT, 0, PFN_cuGetProcAddress_v12000, \
    (const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,                        \
     CUdriverProcAddressQueryResult* status),                                                   \
    (symbol, pfn, cuda_version, flags, status))
// clang-format on

// Driver functions pagefast calls but does not replace. pagefast's own
// calls to the functions of both lists go through the seam
// (interpose/driver.h), never a hook.
#define PAGEFAST_REAL_ONLY(X)                                                \
  X(cuInit, PFN_cuInit_v2000)                                                \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                        \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                      \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                            \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                    \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)                         \
  X(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010)                      \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                              \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000)        \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                              \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                            \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000)                         \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000)                           \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)                     \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020) \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020)                                \
  X(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020)         \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020)                 \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                  \
  X(cuMemHostRegister_v2, PFN_cuMemHostRegister_v6050)                       \
  X(cuMemHostUnregister, PFN_cuMemHostUnregister_v4000)                      \
  X(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH_v3020)                                 \
  X(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD_v3020)                                 \
  X(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync_v3020)                       \
  X(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync_v3020)                       \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                                \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                      \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)

namespace pagefast {

enum class Entry : int {
#define PF_ENUM(symbol, ...) symbol,
  PAGEFAST_ENTRIES(PF_ENUM)
#undef PF_ENUM
      kCount
};
constexpr int kEntryCount = int(Entry::kCount);

struct EntryInfo {
  const char* symbol;
  const char* proc;
  int since;
  int until;
  bool ptds;
};

// Indexed by Entry.
extern const EntryInfo kEntryInfo[kEntryCount];

}  // namespace pagefast
