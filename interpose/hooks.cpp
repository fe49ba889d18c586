// interpose/hooks.cpp: what pagefast does in place of each table entry
// for memory: cuMemAlloc and cuMemFree, the other allocations (retried
// after an out-of-memory answer) and the queries of pool memory. Each hook
// counts the call, then either lets the pool answer or forwards to the
// real driver with the same arguments. Pass-through mode forwards
// everything untouched and counts nothing. The other hooks are
// hooks_capture.cpp (graph capture), hooks_ipc.cpp, hooks_own_vmm.cpp and
// hooks_context.cpp; what they share is hooks_common.h.
#include "interpose/hooks.h"

#include <atomic>
#include <cstdint>
#include <cstring>

#include "interpose/driver.h"
#include "interpose/hooks_common.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"
#include "interpose/trace.h"

namespace pagefast::hook {

bool active_slow(Entry entry) {
  if (runtime::passthrough()) return false;
  stats::count_call(entry);
  return true;
}

namespace {

// What the driver answers when the pool does not: pool_api.h alloc_or's
// and free_or's forward.
CUresult forward_alloc(CUdeviceptr* dptr, size_t bytesize) {
  PF_FORWARD_RETRIED(true, cuMemAlloc_v2, (dptr, bytesize));
}
CUresult forward_free(CUdeviceptr dptr) { PF_FORWARD(cuMemFree_v2, (dptr)); }

// An allocation past the count: the first ones note themselves (banner,
// NUMA check); NULL and 0 are answered by the driver itself, byte for
// byte; the pool answers the rest, or forwards what it does not take (too
// large, unpoolable, no context).
__attribute__((noinline)) CUresult alloc_counted(CUdeviceptr* dptr, size_t bytesize) {
  if (__builtin_expect(!pool::g_process.hook.first_alloc_done.load(std::memory_order_relaxed), 0) && runtime::on_first_alloc())
    pool::g_process.hook.first_alloc_done.store(true, std::memory_order_relaxed);
  if (!dptr || !bytesize) return forward_alloc(dptr, bytesize);
  return pool::alloc_or(dptr, bytesize, &forward_alloc);
}

__attribute__((noinline)) CUresult alloc_untraced(CUdeviceptr* dptr, size_t bytesize) {
  if (!active(Entry::cuMemAlloc_v2)) PF_FORWARD(cuMemAlloc_v2, (dptr, bytesize));
  return alloc_counted(dptr, bytesize);
}

__attribute__((noinline)) CUresult free_untraced(CUdeviceptr dptr) {
  if (active(Entry::cuMemFree_v2) && dptr) return pool::free_or(dptr, &forward_free);
  PF_FORWARD(cuMemFree_v2, (dptr));
}

}  // namespace

// The pool hit's hooks: the steady state (not traced, the thread's
// counters made, the first allocations noted, a real address or size) is
// the count and a tail call of the pool's function, so that the hit is one
// function frame, the pool's; everything else is a tail call of the full
// path above. PAGEFAST_TRACE (trace.h) unset: one relaxed load and a
// branch.
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (__builtin_expect(trace::on(), 0)) return trace::traced_alloc(&alloc_untraced, dptr, bytesize);
  if (__builtin_expect(!stats::count_call_fast(Entry::cuMemAlloc_v2), 0)) return alloc_untraced(dptr, bytesize);
  if (__builtin_expect(!pool::g_process.hook.first_alloc_done.load(std::memory_order_relaxed) || !dptr || !bytesize, 0))
    return alloc_counted(dptr, bytesize);
  return pool::alloc_or(dptr, bytesize, &forward_alloc);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (__builtin_expect(trace::on(), 0)) return trace::traced_free(&free_untraced, dptr);
  if (__builtin_expect(dptr != 0, 1) && __builtin_expect(stats::count_call_fast(Entry::cuMemFree_v2), 1))
    return pool::free_or(dptr, &forward_free);
  return free_untraced(dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height,
                            unsigned element_bytes) {
  // Pitched memory keeps the driver's own layout rules: pooled only inside
  // a region, with the driver's pitch (pool_api.h try_alloc_pitched).
  const bool on = active(Entry::cuMemAllocPitch_v2);
  CUresult result;
  if (on && pool::try_alloc_pitched(dptr, pitch, width_bytes, height, element_bytes, &result)) return result;
  PF_FORWARD_RETRIED(on, cuMemAllocPitch_v2, (dptr, pitch, width_bytes, height, element_bytes));
}

// Stream-ordered frees of pool blocks (pool_api.h try_free_async); in the
// per-thread-stream variant stream 0 is the calling thread's stream. An
// address the page map does not know goes straight to the driver.
#define PF_FREE_ASYNC(symbol, default_stream)                                            \
  CUresult symbol(CUdeviceptr dptr, CUstream stream) {                                   \
    if (active(Entry::symbol) && dptr && pool::may_own(dptr)) {                          \
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
    if (__builtin_expect(!active(Entry::symbol), 0)) PF_FORWARD(symbol, args); \
    PF_FORWARD_RETRIED(true, symbol, args);                            \
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

// cuMemGetInfo: the pool makes the driver's call and adds its idle memory
// (pool_api.h mem_info).
PF_COUNTED_HOOK(cuMemGetInfo_v2, (size_t* free_bytes, size_t* total_bytes), (free_bytes, total_bytes), pool::mem_info)

// The pointer queries: a deferred own-VMM mapping at the address is
// unmapped first (own_vmm.h before_query); pool memory is answered (or
// patched) by the pool, and only an address the page map knows is asked
// about (pool_api.h may_own).
CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (active(Entry::cuMemGetAddressRange_v2)) {
    if (pool::own_vmm::on()) pool::own_vmm::before_query(dptr);
    CUresult result;
    if (pool::may_own(dptr) && pool::try_address_range(pbase, psize, dptr, &result)) return result;
  }
  PF_FORWARD(cuMemGetAddressRange_v2, (pbase, psize, dptr));
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const bool on = active(Entry::cuPointerGetAttribute);
  if (on && pool::own_vmm::on()) pool::own_vmm::before_query(ptr);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuPointerGetAttribute, (data, attribute, ptr));
  if (on && result == CUDA_SUCCESS && data && pool::patched_attribute(attribute) && pool::may_own(ptr))
    pool::patch_pointer_attribute(data, attribute, ptr);
  return result;
}

CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  const bool on = active(Entry::cuPointerGetAttributes);
  if (on && pool::own_vmm::on()) pool::own_vmm::before_query(ptr);
  const RealDriver* real = real_driver();
  const CUresult result = PF_CALL_REAL(cuPointerGetAttributes, (count, attributes, data, ptr));
  if (on && result == CUDA_SUCCESS && attributes && data && pool::may_own(ptr))
    for (unsigned i = 0; i < count; ++i)
      if (data[i]) pool::patch_pointer_attribute(data[i], attributes[i], ptr);
  return result;
}

}  // namespace pagefast::hook
