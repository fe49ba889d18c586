// interpose/pool/vmm_provider.cpp: cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease and cuCtxSynchronize,
// with their results mapped onto the policy's three outcomes.
#include "interpose/pool/vmm_provider.h"

#include <cstdio>

#include "interpose/driver.h"

#include <sched.h>
#include <new>

namespace pagefast::pool {
namespace {

using policy::Granules;
using policy::kGranuleBytes;
using policy::ProviderStatus;

ProviderStatus status_of(CUresult r) {
  if (r == CUDA_SUCCESS) return ProviderStatus::Ok;
  // Releasing memory can help with these; nothing helps with the rest.
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return ProviderStatus::OutOfMemory;
  return ProviderStatus::Failed;
}

bool dead_context(CUresult r) {
  return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_DEINITIALIZED;
}

}  // namespace

VmmProvider::VmmProvider(const RealDriver* real, CUdevice device, CaptureGate* gate, LogSink log, const Events* events)
    : real_(real), device_(device), gate_(gate), log_(log), events_(events) {}

void VmmProvider::tell_shareable(bool shareable) const {
  if (events_ && events_->shareable) events_->shareable(int(device_), shareable);
}

VmmProvider* VmmProvider::create(const RealDriver* real, CUdevice device, CaptureGate* gate, LogSink log,
                                 const Events* events, std::string* why) {
  if (!driver::has_vmm(real)) {
    *why = "the driver lacks the virtual memory management calls";
    return nullptr;
  }
  int supported = 0;
  if (driver::device_attribute(real, &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
          CUDA_SUCCESS ||
      !supported) {
    *why = "the device does not support virtual memory management";
    return nullptr;
  }
  VmmProvider* p = new (std::nothrow) VmmProvider(real, device, gate, log, events);
  if (!p) {
    *why = "out of host memory";
    return nullptr;
  }
  p->prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p->prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->prop_.location.id = int(device);
  // Shareable chunks, so that CUDA IPC of pool blocks works (ipc.h).
  int posix_fd = 0;
  if (driver::device_attribute(real, &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                               device) == CUDA_SUCCESS &&
      posix_fd &&
      driver::has(real, &RealDriver::cuMemExportToShareableHandle, &RealDriver::cuMemImportFromShareableHandle))
    p->prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p->tell_shareable(p->prop_.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE);
  int rdma = 0;
  if (driver::device_attribute(real, &rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device) ==
          CUDA_SUCCESS &&
      rdma)
    p->prop_.allocFlags.gpuDirectRDMACapable = 1;
  size_t granularity = 0;
  if (driver::granularity(real, &granularity, &p->prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      granularity == 0 || kGranuleBytes % granularity != 0) {
    *why = "the VMM granularity (" + std::to_string(granularity) + " bytes) does not divide 2 MiB";
    delete p;
    return nullptr;
  }
  size_t total = 0;
  if (driver::device_total_mem(real, &total, device) != CUDA_SUCCESS || total == 0) {
    *why = "cuDeviceTotalMem failed";
    delete p;
    return nullptr;
  }
  p->total_bytes_ = total;
  p->access_.location = p->prop_.location;
  p->access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return p;
}

void VmmProvider::note_context(CUcontext context) {
  std::lock_guard<std::mutex> guard(contexts_mutex_);
  for (int i = 0; i < context_count_; ++i)
    if (contexts_[i] == context) return;
  if (context_count_ < kMaxContexts) contexts_[context_count_++] = context;
  else contexts_[kMaxContexts - 1] = context;  // the newest matters most
}

void VmmProvider::forget_context(CUcontext context) {
  std::lock_guard<std::mutex> guard(contexts_mutex_);
  for (int i = 0; i < context_count_; ++i)
    if (contexts_[i] == context) {
      contexts_[i] = contexts_[--context_count_];
      return;
    }
}

CUcontext VmmProvider::copy_context() {
  {
    std::lock_guard<std::mutex> guard(contexts_mutex_);
    if (context_count_) return contexts_[0];
  }
  CUcontext current = nullptr;
  driver::ctx_get_current(real_, &current);
  return current;
}

ProviderStatus VmmProvider::reserve_address(uint64_t bytes, uint64_t* base_addr) {
  CUdeviceptr base = 0;
  const CUresult r = driver::address_reserve(real_, &base, bytes, kGranuleBytes, 0, 0);
  if (r != CUDA_SUCCESS) {
    // Without address space the pool serves nothing: every allocation of
    // the device then goes to the driver. Say so once (README: reserve).
    if (log_ && !reserve_warned_.exchange(true)) {
      const char* name = nullptr;
      if (driver::error_name(real_, r, &name) != CUDA_SUCCESS) name = nullptr;
      char line[256];
      std::snprintf(line, sizeof line,
                    "device %d: the driver refused to reserve %llu GiB of address space for the pool (%s); its "
                    "allocations go to the driver; a smaller PAGEFAST_CONF reserve may help",
                    int(device_), (unsigned long long)(bytes >> 30), name ? name : "error");
      log_(LogLevel::Warn, line);
    }
    return status_of(r);
  }
  *base_addr = base;
  return ProviderStatus::Ok;
}

ProviderStatus VmmProvider::create_chunk(Granules granules, policy::ChunkHandle* chunk) {
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = driver::create(real_, &handle, granules.bytes(), &prop_, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && prop_.allocFlags.gpuDirectRDMACapable) {
    // A driver that reports RDMA support but refuses the flag: drop it.
    prop_.allocFlags.gpuDirectRDMACapable = 0;
    r = driver::create(real_, &handle, granules.bytes(), &prop_, 0);
  }
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && prop_.requestedHandleTypes) {
    // Likewise for shareable handles: the pool works on, without IPC.
    prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    tell_shareable(false);
    r = driver::create(real_, &handle, granules.bytes(), &prop_, 0);
  }
  if (r != CUDA_SUCCESS) return status_of(r);
  chunk->value = handle;
  return ProviderStatus::Ok;
}

bool VmmProvider::release_chunk(policy::ChunkHandle chunk) {
  if (events_ && events_->chunk_released) events_->chunk_released(chunk.value);
  return driver::release(real_, chunk.value) == CUDA_SUCCESS;
}

bool VmmProvider::maps_at_offset() { return offset_maps_.load(std::memory_order_relaxed); }

ProviderStatus VmmProvider::map(uint64_t addr, policy::ChunkHandle chunk, Granules offset, Granules granules) {
  const CUresult r = driver::map(real_, addr, granules.bytes(), offset.bytes(), chunk.value, 0);
  // The H200's driver refuses any map of part of a physical allocation (at
  // a non-zero offset, or a prefix: CUDA_ERROR_NOT_SUPPORTED,
  // docs/DRIVER-FACTS.md): learnt once, after which the arena stitches
  // whole chunks only and otherwise grows. (A whole chunk's map, as growth
  // makes, refused so would only narrow stitching too.)
  if (r == CUDA_ERROR_NOT_SUPPORTED && offset_maps_.exchange(false) && log_)
    log_(LogLevel::Info,
         "the driver maps only whole physical allocations: the pool stitches whole chunks only, and "
         "otherwise grows rather than stitching scattered free memory");
  // A refused map is a slow path's event (growth, a stitch, wake): the
  // first few are logged at debug level, with the offset, so that a GPU
  // run shows whether the driver takes maps at a chunk offset (stitches).
  if (r != CUDA_SUCCESS && log_ && map_failures_logged_.fetch_add(1, std::memory_order_relaxed) < kMapFailuresLogged) {
    char line[160];
    std::snprintf(line, sizeof line, "device %d: cuMemMap of %llu bytes at chunk offset %llu refused (CUresult %d)",
                  int(device_), (unsigned long long)granules.bytes(), (unsigned long long)offset.bytes(), int(r));
    log_(LogLevel::Debug, line);
  }
  return status_of(r);
}

bool VmmProvider::unmap(uint64_t addr, Granules granules) {
  return driver::unmap(real_, addr, granules.bytes()) == CUDA_SUCCESS;
}

ProviderStatus VmmProvider::set_access(uint64_t addr, Granules granules, const policy::AccessSet& access) {
  if (!access.peers && !access.revoked)
    return status_of(driver::set_access(real_, addr, granules.bytes(), &access_, 1));
  // Peers (rare, a slow path): the device itself, then one descriptor per
  // granted or revoked peer, in one call.
  CUmemAccessDesc descs[1 + policy::kMaxPeerDevices];
  size_t count = 0;
  descs[count++] = access_;
  for (int d = 0; d < policy::kMaxPeerDevices; ++d) {
    const uint64_t bit = uint64_t(1) << d;
    if (d == int(device_) || !((access.peers | access.revoked) & bit)) continue;
    CUmemAccessDesc& desc = descs[count++];
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = d;
    desc.flags = (access.peers & bit) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return status_of(driver::set_access(real_, addr, granules.bytes(), descs, count));
}

uint64_t VmmProvider::prelock(const uint64_t* bytes, uint64_t count, uint64_t budget, uint64_t bound) {
  host_memory_.set_keep_bound(bound);
  const CUcontext context = count ? copy_context() : nullptr;
  if (!context || !driver::has_context_push(real_) || driver::ctx_push(real_, context) != CUDA_SUCCESS) return 0;
  const uint64_t ready = host_memory_.prelock(bytes, count, budget, bound);
  CUcontext popped = nullptr;
  driver::ctx_pop(real_, &popped);
  return ready;
}

bool VmmProvider::device_free_bytes(uint64_t* free_bytes) {
  if (!driver::has(real_, &RealDriver::cuMemGetInfo_v2, &RealDriver::cuCtxGetCurrent)) return false;
  const CUcontext context = copy_context();
  if (!context) return false;
  CUcontext current = nullptr;
  driver::ctx_get_current(real_, &current);
  size_t free_now = 0, total = 0;
  CUresult r;
  if (context == current) {
    r = driver::mem_get_info(real_, &free_now, &total);
  } else {
    if (!driver::has_context_push(real_)) return false;
    r = driver::ctx_push(real_, context);
    if (r != CUDA_SUCCESS) return false;
    r = driver::mem_get_info(real_, &free_now, &total);
    CUcontext popped = nullptr;
    driver::ctx_pop(real_, &popped);
  }
  if (r != CUDA_SUCCESS) return false;
  *free_bytes = free_now;
  return true;
}

policy::SyncStatus VmmProvider::synchronize() {
  // Announce the sync, then look for captures: a capture that announced
  // itself first is seen here; one that comes later waits for us.
  gate_->syncs_in_flight.fetch_add(1, std::memory_order_seq_cst);
  if (gate_->captures.load(std::memory_order_seq_cst) > 0) {
    gate_->syncs_in_flight.fetch_sub(1, std::memory_order_seq_cst);
    return policy::SyncStatus::NotAllowed;
  }
  CUcontext contexts[kMaxContexts];
  int count = 0;
  {
    std::lock_guard<std::mutex> guard(contexts_mutex_);
    for (int i = 0; i < context_count_; ++i) contexts[count++] = contexts_[i];
  }
  CUcontext current = nullptr;
  driver::ctx_get_current(real_, &current);
  policy::SyncStatus status = policy::SyncStatus::Done;
  if (count == 0) {
    // Nothing remembered (cannot happen after an allocation): the current
    // context, if any, is the best there is.
    if (!current || driver::ctx_synchronize(real_) != CUDA_SUCCESS) status = policy::SyncStatus::Failed;
  }
  for (int i = 0; i < count; ++i) {
    CUresult r;
    if (contexts[i] == current) {
      r = driver::ctx_synchronize(real_);
    } else {
      if (!driver::has_context_push(real_)) {
        status = policy::SyncStatus::Failed;
        continue;
      }
      r = driver::ctx_push(real_, contexts[i]);
      if (r == CUDA_SUCCESS) {
        r = driver::ctx_synchronize(real_);
        CUcontext popped = nullptr;
        driver::ctx_pop(real_, &popped);
      }
    }
    if (r == CUDA_SUCCESS) continue;
    // A destroyed context runs no work any more: forget it, it is done.
    if (dead_context(r)) forget_context(contexts[i]);
    else status = policy::SyncStatus::Failed;
  }
  gate_->syncs_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  return status;
}

}  // namespace pagefast::pool
