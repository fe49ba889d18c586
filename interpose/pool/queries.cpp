// interpose/pool/queries.cpp: interpose/pool_api.h's questions about pool
// addresses and handles (cuMemGetAddressRange, the pointer attributes, the
// own-VMM calls' ownership checks, CUDA IPC's handle of a block), over the
// page map (policy/page_map.h) and the pool's range records. Lock-free but
// for owns_handle.
#include <cuda.h>

#include <cstdint>

#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"

namespace pagefast::pool {

using policy::DevicePool;

bool try_address_range(CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr, CUresult* result) {
  if (!active()) return false;
  policy::Span* span = live_span(dptr);
  if (!span || !has_context()) return false;
  policy::RangeInfo info{};
  if (!DevicePool::range_of(span, dptr, &info)) {
    // Pool memory that is in no live allocation: freed, as far as the
    // program is concerned.
    *result = CUDA_ERROR_NOT_FOUND;
    return true;
  }
  if (base) *base = info.base_addr;
  if (bytes) *bytes = info.bytes;
  *result = CUDA_SUCCESS;
  return true;
}

void patch_pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr dptr) {
  if (!active()) return;
  policy::Span* span = live_span(dptr);
  if (!span) return;
  policy::RangeInfo info{};
  if (!DevicePool::range_of(span, dptr, &info)) return;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = info.base_addr; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = info.bytes; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = info.buffer_id; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      // Truthful: cuIpcGetMemHandle works on pool memory where the
      // device's chunks can be shared (ipc.h).
      *static_cast<int*>(data) = ipc::device_shareable(span->pool->device()) ? 1 : 0;
      break;
    default: break;
  }
}

bool owns_address(CUdeviceptr dptr) { return active() && live_span(dptr); }

bool owns_handle(CUmemGenericAllocationHandle handle) {
  if (!active()) return false;
  bool held = false;
  for (int d = 0; d < kMaxDevices && !held; ++d) {
    DeviceMemory* memory = device_memory(d);
    if (!memory || retired_device(d)) continue;
    memory->each_pool([&held, handle](int, DevicePool* pool) {
      held = held || pool->holds_chunk(policy::ChunkHandle{uint64_t(handle)});
    });
  }
  return held;
}

bool try_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr, CUresult* result) {
  if (!active()) return false;
  policy::Span* span = live_span(dptr);
  if (!span) return false;
  // The driver needs a current context for this call; so does the pool.
  if (!has_context()) return false;
  *result = ipc::get_handle(span->pool, span, dptr, handle);
  return true;
}

bool try_ipc_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result) {
  return ipc::try_open(pdptr, handle, flags, result);
}

bool try_ipc_close(CUdeviceptr dptr, CUresult* result) { return ipc::try_close(dptr, result); }

}  // namespace pagefast::pool
