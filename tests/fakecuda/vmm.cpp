// tests/fakecuda/vmm.cpp: virtual memory management over mmap and a memfd.
//
//   cuMemAddressReserve  PROT_NONE address space (alignment, hint honoured)
//   cuMemCreate          a granule-multiple range of the device's memfd,
//                        counted against the device total; with
//                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested,
//                        a memfd of its own that can cross processes
//                        (share.cpp)
//   cuMemMap             that range mapped MAP_SHARED at the address, still
//                        PROT_NONE: on a GPU unmapped-access memory faults,
//                        here touching it before cuMemSetAccess segfaults
//   cuMemSetAccess       PROT_READ|PROT_WRITE (the union over devices)
//   cuMemUnmap           PROT_NONE reserved memory again; no waiting for
//                        queued work, as on a GPU (PyTorch synchronizes
//                        itself before it unmaps, for that reason)
//   cuMemRelease         drops a handle reference; the memory goes once it is
//                        also unmapped everywhere
// VMM calls need cuInit but no current context, as in the driver.
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "api_list.h"
#include "fakecuda.h"
#include "os.h"
#include "state.h"

using namespace fake;

namespace {

bool granular(uint64_t value) { return value % kGranularityBytes == 0; }

// Property checks shared by cuMemCreate and cuMemGetAllocationGranularity:
// pinned device memory on an existing device is all the fake emulates, and
// of the shareable handle types only POSIX file descriptors.
CUresult check_prop(const CUmemAllocationProp* prop) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  return check_handle_types(prop->requestedHandleTypes);
}

// The whole mappings that exactly tile [addr, addr+bytes) of one reservation,
// or an empty list. cuMemUnmap and cuMemSetAccess take only such ranges.
std::vector<Mapping*> whole_mappings(uintptr_t addr, size_t bytes) {
  std::vector<Mapping*> found;
  Reservation* reservation = find_reservation(addr);
  if (!reservation || bytes == 0 || addr + bytes < addr) return found;
  const uintptr_t end = addr + bytes;
  auto it = reservation->mappings.find(addr);
  for (uintptr_t cursor = addr; cursor < end; ++it) {
    if (it == reservation->mappings.end() || it->first != cursor ||
        it->second.base + it->second.bytes > end) {
      found.clear();
      return found;
    }
    found.push_back(&it->second);
    cursor = it->second.base + it->second.bytes;
  }
  return found;
}

void apply_protection(const Mapping& mapping) {
  bool readable = false;
  bool writable = false;
  for (unsigned long long flags : mapping.access) {
    readable |= (flags & CU_MEM_ACCESS_FLAGS_PROT_READ) != 0;
    writable |= flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  os::protect(mapping.base, mapping.bytes, readable, writable);
}

}  // namespace

namespace fake {

void maybe_free_physical(Physical* phys) {
  if (phys->handle_refs > 0 || phys->mappings > 0) return;
  Device& device = state().devices[size_t(phys->device)];
  if (phys->own_fd >= 0) {
    release_shareable_memory(phys);
  } else {
    free_file_range(device, phys->file_offset, phys->bytes);
  }
  if (phys->charged) uncharge(device, phys->bytes);
  delete phys;
}

}  // namespace fake

CUresult impl::cuMemAddressReserve(CUdeviceptr* ptr, size_t bytes, size_t alignment,
                                   CUdeviceptr hint, unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  if (!ptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t page = os::page_bytes();
  if (bytes == 0 || bytes % page != 0 || hint % page != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  // At least the granularity, so the start of a reservation can be mapped.
  if (alignment < kGranularityBytes) alignment = kGranularityBytes;
  Lock lock(state().mu);
  const uintptr_t base = os::reserve(bytes, alignment, uintptr_t(hint));
  if (base == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Reservation* reservation = new Reservation;
  reservation->base = base;
  reservation->bytes = bytes;
  state().reservations[base] = reservation;
  *ptr = CUdeviceptr(base);
  return CUDA_SUCCESS;
}

CUresult impl::cuMemAddressFree(CUdeviceptr ptr, size_t bytes) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  auto it = state().reservations.find(uintptr_t(ptr));
  if (it == state().reservations.end() || it->second->bytes != bytes)
    return CUDA_ERROR_INVALID_VALUE;
  Reservation* reservation = it->second;
  if (!reservation->mappings.empty()) return CUDA_ERROR_INVALID_VALUE;  // unmap first
  os::release(reservation->base, reservation->bytes);
  state().reservations.erase(it);
  delete reservation;
  return CUDA_SUCCESS;
}

namespace {

std::atomic<int> g_create_gate_fd{-1};   // fakecuda_create_gate: a cuMemCreate to come waits
std::atomic<int> g_create_gate_skip{0};  // the calls before it that pass

// The create gate, taken once (without the fake's lock).
void pass_create_gate() {
  if (g_create_gate_fd.load() < 0) return;
  if (g_create_gate_skip.fetch_sub(1) > 0) return;
  const int fd = g_create_gate_fd.exchange(-1);
  if (fd < 0) return;
  char byte = 0;
  while (read(fd, &byte, 1) < 0 && errno == EINTR) {
  }
}

}  // namespace

int fakecuda_create_gate(int fd, int nth) {
  if (fd < 0 || nth < 1) return -1;
  g_create_gate_skip.store(nth - 1);
  g_create_gate_fd.store(fd);
  return 0;
}

CUresult impl::cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                           const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  pass_create_gate();
  if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  FAKE_TRY(check_prop(prop));
  if (bytes == 0 || !granular(bytes)) return CUDA_ERROR_INVALID_VALUE;
  State& st = state();
  Device& device = st.devices[size_t(prop->location.id)];
  if (bytes > device.total_bytes || device_used(device) + bytes > device.total_bytes)
    return CUDA_ERROR_OUT_OF_MEMORY;
  Physical* phys = new Physical;
  phys->device = device.ordinal;
  phys->bytes = bytes;
  phys->prop = *prop;
  const bool shareable =
      (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  if (shareable ? !create_shareable_memory(phys)
                : !allocate_file_range(device, bytes, &phys->file_offset)) {
    delete phys;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  phys->handle = st.next_handle++;
  phys->handle_refs = 1;
  phys->block_id = st.next_buffer_id++;
  st.handles[phys->handle] = phys;
  charge(device, bytes);
  *handle = phys->handle;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemRelease(CUmemGenericAllocationHandle handle) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  auto it = state().handles.find(handle);
  if (it == state().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  Physical* phys = it->second;
  if (--phys->handle_refs == 0) {
    state().handles.erase(it);
    maybe_free_physical(phys);
  }
  return CUDA_SUCCESS;
}

CUresult impl::cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  State& st = state();
  auto found = st.handles.find(handle);
  if (found == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  Physical* phys = found->second;
  const uintptr_t addr = uintptr_t(ptr);
  if (bytes == 0 || !granular(addr) || !granular(bytes) || !granular(offset))
    return CUDA_ERROR_INVALID_VALUE;
  if (offset > phys->bytes || bytes > phys->bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  Reservation* reservation = find_reservation(addr);
  if (!reservation || addr + bytes < addr || addr + bytes > reservation->base + reservation->bytes)
    return CUDA_ERROR_INVALID_VALUE;
  // Only onto reserved, not yet mapped addresses.
  auto next = reservation->mappings.lower_bound(addr);
  if (next != reservation->mappings.end() && next->first < addr + bytes)
    return CUDA_ERROR_INVALID_VALUE;
  if (find_mapping(reservation, addr)) return CUDA_ERROR_INVALID_VALUE;
  if (!os::map_file(addr, bytes, physical_fd(*phys), phys->file_offset + offset))
    return CUDA_ERROR_OUT_OF_MEMORY;
  Mapping& mapping = reservation->mappings[addr];
  mapping.base = addr;
  mapping.bytes = bytes;
  mapping.phys = phys;
  mapping.offset = offset;
  mapping.buffer_id = st.next_buffer_id++;
  mapping.access.assign(st.devices.size(), CU_MEM_ACCESS_FLAGS_PROT_NONE);
  ++phys->mappings;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemUnmap(CUdeviceptr ptr, size_t bytes) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  const std::vector<Mapping*> mappings = whole_mappings(uintptr_t(ptr), bytes);
  if (mappings.empty()) return CUDA_ERROR_INVALID_VALUE;
  Reservation* reservation = find_reservation(uintptr_t(ptr));
  for (Mapping* mapping : mappings) {
    Physical* phys = mapping->phys;
    const uintptr_t base = mapping->base;
    os::reset_to_reserved(base, mapping->bytes);
    reservation->mappings.erase(base);
    --phys->mappings;
    maybe_free_physical(phys);
  }
  return CUDA_SUCCESS;
}

CUresult impl::cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc,
                              size_t count) {
  FAKE_REQUIRE_INIT();
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    const CUmemAccess_flags flags = desc[i].flags;
    if (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  const std::vector<Mapping*> mappings = whole_mappings(uintptr_t(ptr), bytes);
  if (mappings.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (Mapping* mapping : mappings) {
    for (size_t i = 0; i < count; ++i) mapping->access[size_t(desc[i].location.id)] = desc[i].flags;
    apply_protection(*mapping);
  }
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                              CUdeviceptr ptr) {
  FAKE_REQUIRE_INIT();
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  const Mapping* mapping = find_mapping(find_reservation(uintptr_t(ptr)), uintptr_t(ptr));
  if (!mapping) {
    // cuMemAlloc memory: success with no flags, as the driver answers
    // (docs/DRIVER-FACTS.md).
    if (!find_block(uintptr_t(ptr))) return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    return CUDA_SUCCESS;
  }
  *flags = mapping->access[size_t(location->id)];
  return CUDA_SUCCESS;
}

extern "C" int fakecuda_set_next_handle(unsigned long long value) {
  State& st = state();
  Lock lock(st.mu);
  if (!st.initialized || st.handles.count(value)) return -1;
  st.next_handle = value;
  return 0;
}

extern "C" unsigned long long fakecuda_mapping_access(CUdeviceptr ptr, int ordinal) {
  State& st = state();
  Lock lock(st.mu);
  if (!valid_device(ordinal)) return ~0ull;
  const Mapping* mapping = find_mapping(find_reservation(uintptr_t(ptr)), uintptr_t(ptr));
  return mapping ? mapping->access[size_t(ordinal)] : ~0ull;
}

CUresult impl::cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                             CUmemAllocationGranularity_flags option) {
  FAKE_REQUIRE_INIT();
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  FAKE_TRY(check_prop(prop));
  *granularity = kGranularityBytes;
  return CUDA_SUCCESS;
}

CUresult impl::cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                      CUmemGenericAllocationHandle handle) {
  FAKE_REQUIRE_INIT();
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  auto it = state().handles.find(handle);
  if (it == state().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second->prop;
  return CUDA_SUCCESS;
}

// Hands out the handle of the mapping at `addr` with one more reference (to
// be released with cuMemRelease), also after the creator released its own.
CUresult impl::cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  FAKE_REQUIRE_INIT();
  if (!handle || !addr) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  const uintptr_t where = reinterpret_cast<uintptr_t>(addr);
  Mapping* mapping = find_mapping(find_reservation(where), where);
  if (!mapping) return CUDA_ERROR_INVALID_VALUE;
  Physical* phys = mapping->phys;
  if (phys->handle_refs++ == 0) state().handles[phys->handle] = phys;
  *handle = phys->handle;
  return CUDA_SUCCESS;
}
