// interpose/hooks.cpp: what pagefast does in place of each table entry.
// Each hook counts the call, then either lets the pool answer or forwards
// to the real driver with the same arguments. Pass-through mode forwards
// everything untouched and counts nothing.
#include "interpose/hooks.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"
#include "interpose/trace.h"

namespace pagefast::hook {
namespace {

// The answer when the real driver lacks a function (an older driver).
constexpr CUresult kMissing = CUDA_ERROR_NOT_FOUND;

#define PF_FORWARD(symbol, args)                      \
  do {                                                \
    const RealDriver* real = real_driver();           \
    if (!real || !real->symbol) return kMissing;      \
    return real->symbol args;                         \
  } while (0)

// The same as an expression, for a hook that looks at the driver's answer:
// the real function of table entry `symbol` with the program's arguments,
// or kMissing when the driver lacks it. Needs `real` (real_driver()).
#define PF_CALL_REAL(symbol, args) (real && real->symbol ? real->symbol args : kMissing)

inline bool active(Entry entry) {
  if (runtime::passthrough()) return false;
  stats::count_call(entry);
  return true;
}

// A driver call that can answer CUDA_ERROR_OUT_OF_MEMORY for lack of the
// memory pagefast holds idle: on that answer (and only when pagefast is
// on), every idle byte of the device goes back to the driver and the call
// is made once more (docs/POOL.md "Headroom"). A failed call changed
// nothing, so making it again is safe; one compare on the way out.
template <typename Call>
inline CUresult retried_on_oom(bool on, Call&& call) {
  const CUresult result = call();
  if (__builtin_expect(result != CUDA_ERROR_OUT_OF_MEMORY, 1) || !on) return result;
  return pool::reclaim_for_driver() ? call() : result;
}

// The real function of a table entry with that retry.
#define PF_FORWARD_RETRIED(on, symbol, args)                           \
  do {                                                                 \
    const RealDriver* real = real_driver();                            \
    if (!real || !real->symbol) return kMissing;                       \
    return retried_on_oom(on, [&] { return real->symbol args; });      \
  } while (0)

std::atomic<bool> g_first_alloc_done{false};

// Streams being captured into a graph. Capture begin/end are rare; a lock
// is fine here and keeps the count exact per stream.
std::mutex g_capture_mutex;
std::vector<CUstream>& capturing() {
  static auto* streams = new std::vector<CUstream>();  // never destroyed: used at exit
  return *streams;
}

// Called before the real begin: from this point the pool starts no new
// synchronisation, and one already running has finished (on_capture_begin
// waits for it), so no sync can overlap the capture's first call.
void capture_announce() { pool::on_capture_begin(); }

void capture_began(CUstream stream, CUresult result) {
  if (result != CUDA_SUCCESS) {
    pool::on_capture_end();  // the capture never started
    return;
  }
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  capturing().push_back(stream);
}

void capture_maybe_ended(CUstream stream) {
  const RealDriver* real = real_driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (driver::stream_is_capturing(real, stream, &status) == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    return;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  std::vector<CUstream>& streams = capturing();
  auto it = std::find(streams.begin(), streams.end(), stream);
  if (it == streams.end()) return;
  streams.erase(it);
  pool::on_capture_end();
}

}  // namespace

namespace {

CUresult alloc_untraced(CUdeviceptr* dptr, size_t bytesize) {
  if (active(Entry::cuMemAlloc_v2)) {
    if (__builtin_expect(!g_first_alloc_done.load(std::memory_order_relaxed), 0) && runtime::on_first_alloc())
      g_first_alloc_done.store(true, std::memory_order_relaxed);
    // NULL and 0 are answered by the driver itself, byte for byte.
    CUresult result;
    if (dptr && bytesize && pool::try_alloc(dptr, bytesize, &result)) return result;
    // Not the pool's (too large, unpoolable, no context): the driver's.
    PF_FORWARD_RETRIED(true, cuMemAlloc_v2, (dptr, bytesize));
  }
  PF_FORWARD(cuMemAlloc_v2, (dptr, bytesize));
}

CUresult free_untraced(CUdeviceptr dptr) {
  if (active(Entry::cuMemFree_v2) && dptr) {
    CUresult result;
    if (pool::try_free(dptr, &result)) return result;
  }
  PF_FORWARD(cuMemFree_v2, (dptr));
}

}  // namespace

// PAGEFAST_TRACE (trace.h): unset, one relaxed load and a branch.
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (__builtin_expect(trace::on(), 0)) return trace::traced_alloc(&alloc_untraced, dptr, bytesize);
  return alloc_untraced(dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (__builtin_expect(trace::on(), 0)) return trace::traced_free(&free_untraced, dptr);
  return free_untraced(dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                            unsigned element_bytes) {
  // Pitched memory keeps the driver's own layout rules: never pooled.
  const bool on = active(Entry::cuMemAllocPitch_v2);
  PF_FORWARD_RETRIED(on, cuMemAllocPitch_v2, (dptr, pitch, width_bytes, height, element_bytes));
}

// Stream-ordered frees of pool blocks (pool_api.h try_free_async); in the
// per-thread-stream variant stream 0 is the calling thread's stream.
#define PF_FREE_ASYNC(symbol, default_stream)                                            \
  CUresult symbol(CUdeviceptr dptr, CUstream stream) {                                   \
    if (active(Entry::symbol) && dptr) {                                                 \
      CUresult result;                                                                   \
      if (pool::try_free_async(dptr, stream ? stream : (default_stream), &result)) return result; \
    }                                                                                    \
    PF_FORWARD(symbol, (dptr, stream));                                                  \
  }
PF_FREE_ASYNC(cuMemFreeAsync, CUstream(nullptr))
PF_FREE_ASYNC(cuMemFreeAsync_ptsz, CU_STREAM_PER_THREAD)
#undef PF_FREE_ASYNC

// Device memory the driver takes outside the pool: forwarded, retried
// once after an out-of-memory answer.
#define PF_RETRY_ON_OOM(symbol, params, args)                          \
  CUresult symbol params {                                             \
    const bool on = active(Entry::symbol);                             \
    PF_FORWARD_RETRIED(on, symbol, args);                              \
  }
PF_RETRY_ON_OOM(cuMemAllocAsync, (CUdeviceptr* dptr, size_t bytesize, CUstream stream), (dptr, bytesize, stream))
PF_RETRY_ON_OOM(cuMemAllocAsync_ptsz, (CUdeviceptr* dptr, size_t bytesize, CUstream stream),
                (dptr, bytesize, stream))
PF_RETRY_ON_OOM(cuMemAllocFromPoolAsync,
                (CUdeviceptr* dptr, size_t bytesize, CUmemoryPool mempool, CUstream stream),
                (dptr, bytesize, mempool, stream))
PF_RETRY_ON_OOM(cuMemAllocFromPoolAsync_ptsz,
                (CUdeviceptr* dptr, size_t bytesize, CUmemoryPool mempool, CUstream stream),
                (dptr, bytesize, mempool, stream))
PF_RETRY_ON_OOM(cuMemPoolCreate, (CUmemoryPool* mempool, const CUmemPoolProps* props), (mempool, props))
PF_RETRY_ON_OOM(cuArrayCreate_v2, (CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc), (array, desc))
PF_RETRY_ON_OOM(cuArray3DCreate_v2, (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc), (array, desc))
PF_RETRY_ON_OOM(cuMipmappedArrayCreate,
                (CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels),
                (array, desc, levels))
PF_RETRY_ON_OOM(cuModuleLoad, (CUmodule* module, const char* fname), (module, fname))
PF_RETRY_ON_OOM(cuModuleLoadData, (CUmodule* module, const void* image), (module, image))
PF_RETRY_ON_OOM(cuModuleLoadDataEx,
                (CUmodule* module, const void* image, unsigned int count, CUjit_option* options, void** values),
                (module, image, count, options, values))
PF_RETRY_ON_OOM(cuModuleLoadFatBinary, (CUmodule* module, const void* fatbin), (module, fatbin))
PF_RETRY_ON_OOM(cuLibraryLoadData,
                (CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                 unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count),
                (library, code, jit_options, jit_values, jit_count, options, values, count))
PF_RETRY_ON_OOM(cuLibraryLoadFromFile,
                (CUlibrary* library, const char* file, CUjit_option* jit_options, void** jit_values,
                 unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count),
                (library, file, jit_options, jit_values, jit_count, options, values, count))
PF_RETRY_ON_OOM(cuModuleGetFunction, (CUfunction* function, CUmodule module, const char* name),
                (function, module, name))
PF_RETRY_ON_OOM(cuModuleGetGlobal_v2, (CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name),
                (dptr, bytes, module, name))
PF_RETRY_ON_OOM(cuLibraryGetKernel, (CUkernel* kernel, CUlibrary library, const char* name),
                (kernel, library, name))
PF_RETRY_ON_OOM(cuLibraryGetModule, (CUmodule* module, CUlibrary library), (module, library))
PF_RETRY_ON_OOM(cuLibraryGetGlobal, (CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name),
                (dptr, bytes, library, name))
PF_RETRY_ON_OOM(cuKernelGetFunction, (CUfunction* function, CUkernel kernel), (function, kernel))
PF_RETRY_ON_OOM(cuFuncLoad, (CUfunction function), (function))
PF_RETRY_ON_OOM(cuGraphInstantiate_v2,
                (CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_bytes),
                (exec, graph, error_node, log, log_bytes))
PF_RETRY_ON_OOM(cuGraphInstantiateWithFlags, (CUgraphExec* exec, CUgraph graph, unsigned long long flags),
                (exec, graph, flags))
PF_RETRY_ON_OOM(cuGraphInstantiateWithParams,
                (CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), (exec, graph, params))
PF_RETRY_ON_OOM(cuGraphInstantiateWithParams_ptsz,
                (CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params), (exec, graph, params))
PF_RETRY_ON_OOM(cuGraphLaunch, (CUgraphExec exec, CUstream stream), (exec, stream))
PF_RETRY_ON_OOM(cuGraphLaunch_ptsz, (CUgraphExec exec, CUstream stream), (exec, stream))
PF_RETRY_ON_OOM(cuGraphUpload, (CUgraphExec exec, CUstream stream), (exec, stream))
PF_RETRY_ON_OOM(cuGraphUpload_ptsz, (CUgraphExec exec, CUstream stream), (exec, stream))
#undef PF_RETRY_ON_OOM

// Managed memory takes device memory when the device first touches a
// page, where running out is a fault, not an answer: idle memory makes
// room first (pool_api.h relieve_for_managed), then the call as above.
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  const bool on = active(Entry::cuMemAllocManaged);
  if (on && bytesize) pool::relieve_for_managed(bytesize);
  PF_FORWARD_RETRIED(on, cuMemAllocManaged, (dptr, bytesize, flags));
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  const bool on = active(Entry::cuMemGetInfo_v2);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuMemGetInfo_v2, (free_bytes, total_bytes));
  if (on && result == CUDA_SUCCESS) pool::adjust_mem_info(free_bytes, total_bytes);
  return result;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (active(Entry::cuMemGetAddressRange_v2)) {
    pool::own_vmm::before_query(dptr);
    CUresult result;
    if (pool::try_address_range(pbase, psize, dptr, &result)) return result;
  }
  PF_FORWARD(cuMemGetAddressRange_v2, (pbase, psize, dptr));
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const bool on = active(Entry::cuPointerGetAttribute);
  if (on) pool::own_vmm::before_query(ptr);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuPointerGetAttribute, (data, attribute, ptr));
  if (on && result == CUDA_SUCCESS && data) pool::patch_pointer_attribute(data, attribute, ptr);
  return result;
}

CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  const bool on = active(Entry::cuPointerGetAttributes);
  if (on) pool::own_vmm::before_query(ptr);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuPointerGetAttributes, (count, attributes, data, ptr));
  if (on && result == CUDA_SUCCESS && attributes && data)
    for (unsigned i = 0; i < count; ++i)
      if (data[i]) pool::patch_pointer_attribute(data[i], attributes[i], ptr);
  return result;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (active(Entry::cuIpcGetMemHandle)) {
    CUresult result;
    if (pool::try_ipc_get_mem_handle(handle, dptr, &result)) return result;
  }
  PF_FORWARD(cuIpcGetMemHandle, (handle, dptr));
}

#define PF_IPC_OPEN(symbol)                                                        \
  CUresult symbol(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) { \
    if (active(Entry::symbol)) {                                                  \
      CUresult result;                                                            \
      if (pool::try_ipc_open(pdptr, handle, Flags, &result)) return result;       \
    }                                                                             \
    PF_FORWARD(symbol, (pdptr, handle, Flags));                                   \
  }
PF_IPC_OPEN(cuIpcOpenMemHandle)
PF_IPC_OPEN(cuIpcOpenMemHandle_v2)
#undef PF_IPC_OPEN

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (active(Entry::cuIpcCloseMemHandle)) {
    CUresult result;
    if (pool::try_ipc_close(dptr, &result)) return result;
  }
  PF_FORWARD(cuIpcCloseMemHandle, (dptr));
}

// Capture entry points: forwarded, and tracked so that the pool never
// synchronises while a graph is being captured.
#define PF_CAPTURE_BEGIN(symbol, params, args)                          \
  CUresult symbol params {                                             \
    const bool on = active(Entry::symbol);                             \
    const RealDriver* real = real_driver();                            \
    if (!real || !real->symbol) return kMissing;                       \
    if (on) capture_announce();                                        \
    const CUresult result = real->symbol args;                         \
    if (on) capture_began(stream, result);                             \
    return result;                                                     \
  }
PF_CAPTURE_BEGIN(cuStreamBeginCapture, (CUstream stream), (stream))
PF_CAPTURE_BEGIN(cuStreamBeginCapture_ptsz, (CUstream stream), (stream))
PF_CAPTURE_BEGIN(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))
PF_CAPTURE_BEGIN(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))
PF_CAPTURE_BEGIN(cuStreamBeginCaptureToGraph,
                 (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                  size_t deps_count, CUstreamCaptureMode mode),
                 (stream, graph, deps, edges, deps_count, mode))
PF_CAPTURE_BEGIN(cuStreamBeginCaptureToGraph_ptsz,
                 (CUstream stream, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,
                  size_t deps_count, CUstreamCaptureMode mode),
                 (stream, graph, deps, edges, deps_count, mode))
#undef PF_CAPTURE_BEGIN

#define PF_CAPTURE_END(symbol)                                          \
  CUresult symbol(CUstream stream, CUgraph* graph) {                   \
    const bool on = active(Entry::symbol);                             \
    const RealDriver* real = real_driver();                            \
    if (!real || !real->symbol) return kMissing;                       \
    const CUresult result = real->symbol(stream, graph);               \
    if (on) capture_maybe_ended(stream);                               \
    return result;                                                     \
  }
PF_CAPTURE_END(cuStreamEndCapture)
PF_CAPTURE_END(cuStreamEndCapture_ptsz)
#undef PF_CAPTURE_END

// The program's own VMM calls: the own-VMM cache answers them
// (interpose/pool/own_vmm.h); with vmm_cache:off or the pool off they
// are counted and forwarded: one relaxed load and a branch more.
#define PF_OWN_VMM_CALL(symbol, call, params, args)                              \
  CUresult symbol params {                                                     \
    if (active(Entry::symbol) && pool::own_vmm::on()) return pool::own_vmm::call args; \
    PF_FORWARD(symbol, args);                                                  \
  }
// The calls that make, hold and drop the program's memory are also noted,
// once they succeeded, in the ledger that sleep's answer reads
// (policy/own_vmm/ledger.h): one acquire load more with the pool off.
#define PF_OWN_VMM(symbol, call, params, args, note)                                \
  CUresult symbol params {                                                        \
    CUresult result;                                                              \
    if (active(Entry::symbol) && pool::own_vmm::on()) {                           \
      result = pool::own_vmm::call args;                                          \
    } else {                                                                      \
      const RealDriver* real = real_driver();                                     \
      if (!real || !real->symbol) return kMissing;                                \
      result = real->symbol args;                                                 \
    }                                                                             \
    if (result == CUDA_SUCCESS) note;                                             \
    return result;                                                                \
  }
PF_OWN_VMM(cuMemCreate, create,
           (CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
            unsigned long long flags),
           (handle, bytes, prop, flags), pool::own_vmm::created(*handle, bytes, prop))
PF_OWN_VMM(cuMemRelease, release, (CUmemGenericAllocationHandle handle), (handle), pool::own_vmm::released(handle))
PF_OWN_VMM(cuMemMap, map,
           (CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
            unsigned long long flags),
           (ptr, bytes, offset, handle, flags), pool::own_vmm::mapped(ptr, bytes, handle))
PF_OWN_VMM(cuMemUnmap, unmap, (CUdeviceptr ptr, size_t bytes), (ptr, bytes), pool::own_vmm::unmapped(ptr, bytes))
PF_OWN_VMM(cuMemExportToShareableHandle, export_handle,
           (void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
            unsigned long long flags),
           (shareable, handle, type, flags), pool::own_vmm::exported(handle, shareable, type))
#undef PF_OWN_VMM

// Pool memory is cuMemAlloc memory to the program: no handle of it is
// handed out (pool_api.h owns_address), as the driver hands out none for
// memory cuMemAlloc made.
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  const bool on = active(Entry::cuMemRetainAllocationHandle);
  if (on && pool::owns_address(reinterpret_cast<CUdeviceptr>(addr))) return CUDA_ERROR_INVALID_VALUE;
  CUresult result;
  if (on && pool::own_vmm::on()) {
    result = pool::own_vmm::retain(handle, addr);
  } else {
    result = driver::retain_handle(real_driver(), handle, addr);
  }
  if (result == CUDA_SUCCESS) pool::own_vmm::retained(*handle);
  return result;
}

// A pool chunk's handle is none of the program's (pool_api.h owns_handle).
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (active(Entry::cuMemGetAllocationPropertiesFromHandle)) {
    if (pool::owns_handle(handle)) return CUDA_ERROR_INVALID_VALUE;
    if (pool::own_vmm::on()) return pool::own_vmm::properties(prop, handle);
  }
  PF_FORWARD(cuMemGetAllocationPropertiesFromHandle, (prop, handle));
}

// An import gives the program a handle of memory (its own exported memory
// again, or another process's): forwarded, and noted in the ledger.
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType type) {
  const bool on = active(Entry::cuMemImportFromShareableHandle);
  const CUresult result = driver::import_handle(real_driver(), handle, osHandle, type);
  if (on && result == CUDA_SUCCESS && handle) pool::own_vmm::imported(*handle, osHandle, type);
  return result;
}
PF_OWN_VMM_CALL(cuMemSetAccess, set_access, (CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count),
              (ptr, bytes, desc, count))
PF_OWN_VMM_CALL(cuMemAddressFree, address_free, (CUdeviceptr ptr, size_t bytes), (ptr, bytes))
#undef PF_OWN_VMM_CALL

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

// Peer access: the driver decides; on success the owner's pool follows
// (VMM memory is not opened to a peer by the driver's peer access).
namespace {

// The device of the current context and of `peer`; false if either is
// unknown (the pool then does nothing: the driver's answer stands).
bool peer_devices(CUcontext peer, int* accessor, int* owner) {
  const RealDriver* real = real_driver();
  if (!driver::has_context_push(real)) return false;
  CUdevice mine = 0, theirs = 0;
  if (driver::ctx_get_device(real, &mine) != CUDA_SUCCESS) return false;
  if (driver::ctx_push(real, peer) != CUDA_SUCCESS) return false;
  const CUresult r = driver::ctx_get_device(real, &theirs);
  CUcontext popped = nullptr;
  driver::ctx_pop(real, &popped);
  if (r != CUDA_SUCCESS) return false;
  *accessor = int(mine);
  *owner = int(theirs);
  return true;
}

}  // namespace

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  const bool on = active(Entry::cuCtxEnablePeerAccess);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuCtxEnablePeerAccess, (peerContext, Flags));
  int accessor, owner;
  if (on && result == CUDA_SUCCESS && peer_devices(peerContext, &accessor, &owner))
    pool::on_peer_access_enabled(accessor, owner);
  return result;
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  const bool on = active(Entry::cuCtxDisablePeerAccess);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuCtxDisablePeerAccess, (peerContext));
  int accessor, owner;
  if (on && result == CUDA_SUCCESS && peer_devices(peerContext, &accessor, &owner))
    pool::on_peer_access_disabled(accessor, owner);
  return result;
}

// Primary context reset and release: forwarded; when the device's primary
// context is gone afterwards, so is its memory, and the pool steps aside.
#define PF_PRIMARY_RESET(symbol)                                       \
  CUresult symbol(CUdevice device) {                                   \
    const bool on = active(Entry::symbol);                             \
    const RealDriver* real = real_driver();                            \
    if (!real || !real->symbol) return kMissing;                       \
    const CUresult result = real->symbol(device);                      \
    if (on && result == CUDA_SUCCESS) pool::on_device_reset(int(device)); \
    return result;                                                     \
  }
PF_PRIMARY_RESET(cuDevicePrimaryCtxReset)
PF_PRIMARY_RESET(cuDevicePrimaryCtxReset_v2)
#undef PF_PRIMARY_RESET

#define PF_PRIMARY_RELEASE(symbol)                                     \
  CUresult symbol(CUdevice device) {                                   \
    const bool on = active(Entry::symbol);                             \
    const RealDriver* real = real_driver();                            \
    if (!real || !real->symbol) return kMissing;                       \
    const CUresult result = real->symbol(device);                      \
    unsigned flags = 0;                                                \
    int still_active = 1;                                              \
    if (on && result == CUDA_SUCCESS &&                                \
        driver::primary_ctx_state(real, device, &flags, &still_active) == CUDA_SUCCESS && !still_active) \
      pool::on_device_reset(int(device));                              \
    return result;                                                     \
  }
PF_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease)
PF_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2)
#undef PF_PRIMARY_RELEASE

// Context destruction: the driver frees the context's memory; the pool's
// blocks allocated in it go back to the pool once it did.
#define PF_CTX_DESTROY(symbol)                                                  \
  CUresult symbol(CUcontext ctx) {                                              \
    const bool on = active(Entry::symbol);                                      \
    const RealDriver* real = real_driver();                                     \
    if (!real || !real->symbol) return kMissing;                                \
    const pool::ContextDestroy destroy = on ? pool::before_context_destroy(ctx) : pool::ContextDestroy{}; \
    const CUresult result = real->symbol(ctx);                                  \
    if (on) pool::after_context_destroy(destroy, result == CUDA_SUCCESS);       \
    return result;                                                              \
  }
PF_CTX_DESTROY(cuCtxDestroy)
PF_CTX_DESTROY(cuCtxDestroy_v2)
#undef PF_CTX_DESTROY

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const bool on = active(Entry::cuGetProcAddress_v2);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cuda_version, flags, status));
  if (on && result == CUDA_SUCCESS && pfn && *pfn && symbol)
    if (void* replacement = proc_address_replacement(symbol, *pfn, cuda_version, flags)) *pfn = replacement;
  return result;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  const bool on = active(Entry::cuGetProcAddress);
  const RealDriver* real = real_driver();
  // A driver without the first variant answers through the second.
  const CUresult result = driver::has(real, &RealDriver::cuGetProcAddress)
                              ? PF_CALL_REAL(cuGetProcAddress, (symbol, pfn, cuda_version, flags))
                              : PF_CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cuda_version, flags, nullptr));
  if (on && result == CUDA_SUCCESS && pfn && *pfn && symbol)
    if (void* replacement = proc_address_replacement(symbol, *pfn, cuda_version, flags)) *pfn = replacement;
  return result;
}

}  // namespace pagefast::hook
