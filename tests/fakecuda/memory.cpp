// tests/fakecuda/memory.cpp: cuMemAlloc-style memory (alloc, pitch, free,
// info, address range), stream-ordered allocation, modules, the test
// extension's device memory figures, pointer attributes for every kind of address the
// fake knows (cuMemAlloc blocks, VMM mappings, bare reservations, legacy-IPC
// imports). cuMemAlloc memory lives in the device's memory file, mapped
// shared, so that another process can map it (ipc.cpp). The answers follow docs/DRIVER-FACTS.md ("What the real driver
// answers") and, where it is silent, the CUDA 13 driver documentation.
#include <cstring>

#include "api_list.h"
#include "fakecuda.h"
#include "os.h"
#include "state.h"

using namespace fake;

namespace {

size_t round_up(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

// Maps `bytes` of a new range of the device's memory file, read-write.
bool map_device_file(Device& device, size_t bytes, size_t alignment, uintptr_t* base,
                     uint64_t* offset) {
  if (!allocate_file_range(device, bytes, offset)) return false;
  *base = os::map_file_anywhere(bytes, alignment, device.memory_fd, *offset);
  if (*base != 0) return true;
  free_file_range(device, *offset, bytes);
  return false;
}

// Unmaps memory of cuMemAlloc; its file range goes back for reuse unless it
// was exported (an importer may still map it: the pages live on in the file).
void unmap_device_file(Device& device, uintptr_t base, uint64_t offset, size_t bytes,
                       bool exported) {
  os::release(base, bytes);
  if (!exported) free_file_range(device, offset, bytes);
}

void release_slab(Device& device, Slab* slab) {
  unmap_device_file(device, slab->base, slab->file_offset, kSlabBytes, slab->exported);
  delete slab;
}

// Small blocks share 2 MiB slabs, 512 bytes apart, as the driver
// sub-allocates; from 1 MiB a block gets its own 2 MiB-aligned mapping.
CUresult allocate_block(Context* ctx, size_t bytes, uintptr_t* out) {
  State& st = state();
  Device& device = st.devices[size_t(ctx->device)];
  if (bytes > device.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const bool large = bytes >= kLargeBlockBytes;
  const size_t charged = round_up(bytes, large ? kGranularityBytes : kSmallAlignBytes);
  if (device_used(device) + charged > device.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  Block* block = new Block;
  if (large) {
    uint64_t offset = 0;
    uintptr_t base = 0;
    if (!map_device_file(device, charged, kGranularityBytes, &base, &offset)) {
      delete block;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    block->base = base;
    block->file_offset = offset;
  } else {
    Slab* slab = device.slab;
    if (!slab || slab->used_bytes + charged > kSlabBytes) {
      uint64_t offset = 0;
      uintptr_t base = 0;
      if (!map_device_file(device, kSlabBytes, kSlabBytes, &base, &offset)) {
        delete block;
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      if (slab && slab->live_blocks == 0) release_slab(device, slab);
      slab = device.slab = new Slab;
      slab->base = base;
      slab->file_offset = offset;
    }
    block->base = slab->base + slab->used_bytes;
    block->file_offset = slab->file_offset + slab->used_bytes;
    block->slab = slab;
    slab->used_bytes += charged;
    ++slab->live_blocks;
  }
  block->bytes = bytes;
  block->charged_bytes = charged;
  block->device = ctx->device;
  block->ctx = ctx;
  block->buffer_id = st.next_buffer_id++;
  st.blocks[block->base] = block;
  charge(device, charged);
  *out = block->base;
  return CUDA_SUCCESS;
}

// --- pointer attributes ----------------------------------------------------------

// What an address is, as far as the fake knows.
struct Owner {
  Block* block = nullptr;
  Import* import = nullptr;
  Reservation* reservation = nullptr;
  Mapping* mapping = nullptr;  // set only with reservation
};

Owner classify(uintptr_t addr) {
  Owner owner;
  owner.block = find_block(addr);
  if (!owner.block) owner.import = find_import(addr);
  if (!owner.block && !owner.import) {
    owner.reservation = find_reservation(addr);
    owner.mapping = find_mapping(owner.reservation, addr);
  }
  return owner;
}

template <typename T>
void put(void* data, T value) {
  memcpy(data, &value, sizeof value);
}

// Bytes the driver writes for each attribute. Booleans are ints: the driver
// writes four bytes, and callers passing a bool get their stack corrupted
// (NVIDIA/DALI#3873).
size_t attribute_bytes(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPED: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(int);
    default: return 0;
  }
}

// The access the current context's device (the owner's device without one)
// has on a mapping, as CU_POINTER_ATTRIBUTE_ACCESS_FLAGS values.
unsigned int mapping_access(const Mapping& mapping) {
  int device = mapping.phys->device;
  if (!context_stack().empty()) device = context_stack().back()->device;
  const unsigned long long flags = mapping.access[size_t(device)];
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ) return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ;
  return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
}

CUresult block_attribute(CUpointer_attribute attribute, uintptr_t addr, const Block& b,
                         void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put(data, reinterpret_cast<CUcontext>(b.ctx)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: put(data, unsigned(CU_MEMORYTYPE_DEVICE)); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put(data, CUdeviceptr(addr)); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return CUDA_ERROR_INVALID_VALUE;  // device memory
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: {
      CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens;
      tokens.p2pToken = b.buffer_id;
      tokens.vaSpaceToken = unsigned(b.device + 1);
      put(data, tokens);
      break;
    }
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      put(data, static_cast<unsigned long long>(b.buffer_id));
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put(data, b.device); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: put(data, 1); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put(data, CUdeviceptr(b.base)); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put(data, b.bytes); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put(data, 1); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: put(data, 0ULL); break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: put(data, 1); break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put(data, unsigned(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put(data, CUmemoryPool(nullptr)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(b.buffer_id));
      break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put(data, 0); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Memory opened with cuIpcOpenMemHandle: device memory of the importing
// context, the range being the exporter's block. Whether the driver lets an
// imported mapping be exported again was not measured; the fake says no
// (IS_LEGACY_CUDA_IPC_CAPABLE 0, and cuIpcGetMemHandle refuses it).
CUresult import_attribute(CUpointer_attribute attribute, uintptr_t addr, const Import& i,
                          void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put(data, reinterpret_cast<CUcontext>(i.ctx)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: put(data, unsigned(CU_MEMORYTYPE_DEVICE)); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put(data, CUdeviceptr(addr)); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(i.buffer_id));
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put(data, i.device); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put(data, CUdeviceptr(i.base)); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put(data, i.bytes); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put(data, 1); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: put(data, 0ULL); break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put(data, unsigned(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put(data, CUmemoryPool(nullptr)); break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put(data, 0); break;
    default: return CUDA_ERROR_INVALID_VALUE;  // P2P tokens: cuMemAlloc only
  }
  return CUDA_SUCCESS;
}

// VMM memory: RANGE_* is the reservation (the "mappable address range" of
// the documentation, as DALI's VMM tests observe), MAPPING_* and the buffer
// id are the cuMemMap mapping, the memory block id the cuMemCreate handle.
// No context owns VMM memory, hence CONTEXT answers NULL.
CUresult mapping_attribute(CUpointer_attribute attribute, uintptr_t addr, const Reservation& r,
                           const Mapping& m, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put(data, CUcontext(nullptr)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: put(data, unsigned(CU_MEMORYTYPE_DEVICE)); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put(data, CUdeviceptr(addr)); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return CUDA_ERROR_INVALID_VALUE;  // cuMemAlloc only
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      put(data, static_cast<unsigned long long>(m.buffer_id));
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put(data, m.phys->device); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: put(data, 0); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: put(data, CUdeviceptr(r.base)); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: put(data, r.bytes); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put(data, CUdeviceptr(m.base)); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put(data, m.bytes); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put(data, 1); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put(data, static_cast<unsigned long long>(m.phys->prop.requestedHandleTypes));
      break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      put(data, m.phys->prop.allocFlags.gpuDirectRDMACapable ? 1 : 0);
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: put(data, mapping_access(m)); break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put(data, CUmemoryPool(nullptr)); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(m.phys->block_id));
      break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put(data, 0); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Reserved but unmapped: only the range and "not mapped" are known.
CUresult reserved_attribute(CUpointer_attribute attribute, const Reservation& r, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: put(data, CUdeviceptr(r.base)); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: put(data, r.bytes); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put(data, 0); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult attribute(CUpointer_attribute attribute, uintptr_t addr, const Owner& owner, void* data) {
  if (attribute_bytes(attribute) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (owner.block) return block_attribute(attribute, addr, *owner.block, data);
  if (owner.import) return import_attribute(attribute, addr, *owner.import, data);
  if (owner.mapping)
    return mapping_attribute(attribute, addr, *owner.reservation, *owner.mapping, data);
  if (owner.reservation) return reserved_attribute(attribute, *owner.reservation, data);
  return CUDA_ERROR_INVALID_VALUE;  // not memory the driver knows
}

}  // namespace

namespace fake {

void free_block(Block* block) {
  State& st = state();
  Device& device = st.devices[size_t(block->device)];
  st.blocks.erase(block->base);
  uncharge(device, block->charged_bytes);
  if (Slab* slab = block->slab) {
    if (--slab->live_blocks == 0 && slab != device.slab) release_slab(device, slab);
  } else {
    unmap_device_file(device, block->base, block->file_offset, block->charged_bytes,
                      block->exported);
  }
  delete block;
}

void release_retained(int device) {
  for (Device& d : state().devices) {
    if (device >= 0 && d.ordinal != device) continue;
    uncharge(d, d.retained_bytes);
    d.retained_bytes = 0;
  }
}

}  // namespace fake

CUresult impl::cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  *dptr = 0;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t base = 0;
  FAKE_TRY(allocate_block(ctx, bytes, &base));
  *dptr = CUdeviceptr(base);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                  size_t height, unsigned int element_bytes) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!dptr || !pitch) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)
    return CUDA_ERROR_INVALID_VALUE;
  if (width_bytes == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t row_bytes = round_up(width_bytes, kSmallAlignBytes);
  if (row_bytes < width_bytes || height > SIZE_MAX / row_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = 0;
  FAKE_TRY(allocate_block(ctx, row_bytes * height, &base));
  *dptr = CUdeviceptr(base);
  *pitch = row_bytes;
  return CUDA_SUCCESS;
}

// Like the driver's, this free synchronizes: it waits for the device's
// queued work before the memory goes. (cuMemUnmap does not; see vmm.cpp.)
CUresult impl::cuMemFree_v2(CUdeviceptr dptr) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  // The H200's driver frees a cuMemAlloc block on a thread with no current
  // context (docs/GPU-CHECK.md, run 3): the block names its context. What
  // it answers there for an address that is no block was not measured;
  // this double answers CUDA_ERROR_INVALID_CONTEXT.
  const CUresult has_context = current_context(&ctx);
  if (dptr == 0) return CUDA_SUCCESS;
  const uintptr_t addr = uintptr_t(dptr);
  Block* block = find_block(addr);
  if (has_context != CUDA_SUCCESS && (!block || block->base != addr)) return has_context;
  // Interior, already freed, host, random and VMM addresses alike.
  if (!block || block->base != addr) return CUDA_ERROR_INVALID_VALUE;
  FAKE_TRY(check_capture_unsafe());
  const int device = block->device;
  wait_streams_idle(lock, [device](const Stream* s) { return s->ctx->device == device; });
  block = find_block(addr);  // another thread may have freed it meanwhile
  if (!block || block->base != addr) return CUDA_ERROR_INVALID_VALUE;
  free_block(block);
  return CUDA_SUCCESS;
}

// Stream-ordered memory is served as cuMemAlloc memory, from the same
// device memory; the H200's driver frees a cuMemAlloc block through
// cuMemFreeAsync too, and refuses addresses it did not allocate
// (docs/DRIVER-FACTS.md). The free waits for the device's queued work, as
// cuMemFree does here: later in stream order, never earlier. Memory that
// came from cuMemAllocAsync stays with the driver's pool until the next
// synchronization (release_retained): until then cuMemAlloc and cuMemCreate
// cannot have it, as on the H200.
CUresult impl::cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  (void)stream;
  const CUresult r = impl::cuMemAlloc_v2(dptr, bytes);
  if (r == CUDA_SUCCESS) {
    Lock lock(state().mu);
    if (Block* block = find_block(uintptr_t(*dptr))) block->stream_ordered = true;
  }
  return r;
}

// The default pool of device d is the handle d + 1 (no other pool exists
// here). Its used memory: the live cuMemAllocAsync blocks; reserved: those
// and what it retains until the next synchronization.
CUresult impl::cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!pool || device < 0 || size_t(device) >= state().devices.size())
    return CUDA_ERROR_INVALID_VALUE;
  *pool = reinterpret_cast<CUmemoryPool>(uintptr_t(device) + 1);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  const uintptr_t id = reinterpret_cast<uintptr_t>(pool);
  if (!value || id == 0 || id > state().devices.size()) return CUDA_ERROR_INVALID_VALUE;
  const int device = int(id - 1);
  uint64_t used = 0;
  for (const auto& entry : state().blocks)
    if (entry.second->stream_ordered && entry.second->device == device)
      used += entry.second->charged_bytes;
  switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<uint64_t*>(value) = used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *static_cast<uint64_t*>(value) = used + state().devices[size_t(device)].retained_bytes;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult impl::cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  (void)stream;
  if (dptr == 0) return CUDA_SUCCESS;
  uint64_t retained = 0;
  int device = 0;
  {
    Lock lock(state().mu);
    Block* block = find_block(uintptr_t(dptr));
    if (block && block->base == uintptr_t(dptr) && block->stream_ordered) {
      retained = block->charged_bytes;
      device = block->device;
    }
  }
  const CUresult r = impl::cuMemFree_v2(dptr);
  if (r == CUDA_SUCCESS && retained) {
    Lock lock(state().mu);
    Device& d = state().devices[size_t(device)];
    charge(d, retained);
    d.retained_bytes += retained;
  }
  return r;
}

// A module takes Config::module_bytes of the current context's device;
// the handle is a heap record of where it was charged. Its kernels load
// lazily, as with CUDA_MODULE_LOADING=LAZY (the default since CUDA 12.2):
// the first cuModuleGetFunction takes module_bytes more, and can answer
// CUDA_ERROR_OUT_OF_MEMORY where the load succeeded.
namespace {
struct FakeModule {
  int device;
  uint64_t bytes;
  bool kernels_loaded = false;
};
}  // namespace

CUresult impl::cuModuleLoadData(CUmodule* module, const void* image) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  Device& device = state().devices[size_t(ctx->device)];
  const uint64_t bytes = state().config.module_bytes;
  if (device_used(device) + bytes > device.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  charge(device, bytes);
  *module = reinterpret_cast<CUmodule>(new FakeModule{ctx->device, bytes});
  return CUDA_SUCCESS;
}

CUresult impl::cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!function || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (!m->kernels_loaded) {
    Device& device = state().devices[size_t(m->device)];
    const uint64_t bytes = state().config.module_bytes;
    if (device_used(device) + bytes > device.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    charge(device, bytes);
    m->bytes += bytes;
    m->kernels_loaded = true;
  }
  // Any non-null handle: the fake launches no kernels from modules.
  *function = reinterpret_cast<CUfunction>(m);
  return CUDA_SUCCESS;
}

CUresult impl::cuModuleUnload(CUmodule module) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  auto* m = reinterpret_cast<FakeModule*>(module);
  uncharge(state().devices[size_t(m->device)], m->bytes);
  delete m;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  const Device& device = state().devices[size_t(ctx->device)];
  if (free_bytes)
    *free_bytes = size_t(
        device.total_bytes > device_used(device) ? device.total_bytes - device_used(device) : 0);
  if (total_bytes) *total_bytes = size_t(device.total_bytes);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  const Owner owner = classify(uintptr_t(dptr));
  uintptr_t range_base = 0;
  size_t range_bytes = 0;
  if (owner.block) {
    range_base = owner.block->base;
    range_bytes = owner.block->bytes;
  } else if (owner.import) {
    range_base = owner.import->base;
    range_bytes = owner.import->bytes;
  } else if (owner.mapping) {
    // The mapping the address lies in, not the reservation.
    range_base = owner.mapping->base;
    range_bytes = owner.mapping->bytes;
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (base) *base = CUdeviceptr(range_base);
  if (bytes) *bytes = range_bytes;
  return CUDA_SUCCESS;
}

CUresult impl::cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  FAKE_REQUIRE_INIT();
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  return attribute(attr, uintptr_t(ptr), classify(uintptr_t(ptr)), data);
}

// Unlike cuPointerGetAttribute, an address the driver does not know is not an
// error: each attribute gets its "NULL" value (zero; CU_DEVICE_INVALID for
// the device ordinal), as documented.
CUresult impl::cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                      void** data, CUdeviceptr ptr) {
  FAKE_REQUIRE_INIT();
  if (count == 0) return CUDA_SUCCESS;
  if (!attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  const Owner owner = classify(uintptr_t(ptr));
  for (unsigned i = 0; i < count; ++i) {
    const size_t bytes = attribute_bytes(attributes[i]);
    if (bytes == 0 || !data[i]) return CUDA_ERROR_INVALID_VALUE;
    if (attribute(attributes[i], uintptr_t(ptr), owner, data[i]) == CUDA_SUCCESS) continue;
    memset(data[i], 0, bytes);
    if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) put(data[i], int(CU_DEVICE_INVALID));
  }
  return CUDA_SUCCESS;
}

// --- the test extension ------------------------------------------------------------

extern "C" int fakecuda_set_external_bytes(int ordinal, unsigned long long bytes) {
  State& st = state();
  Lock lock(st.mu);
  if (ordinal < 0 || size_t(ordinal) >= st.devices.size()) return -1;
  Device& device = st.devices[size_t(ordinal)];
  uncharge(device, device.external_bytes);
  charge(device, bytes);
  device.external_bytes = bytes;
  return 0;
}

extern "C" unsigned long long fakecuda_free_bytes(int ordinal) {
  State& st = state();
  Lock lock(st.mu);
  if (ordinal < 0 || size_t(ordinal) >= st.devices.size()) return 0;
  const Device& device = st.devices[size_t(ordinal)];
  return device.total_bytes > device_used(device) ? device.total_bytes - device_used(device) : 0;
}
