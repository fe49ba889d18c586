// interpose/ipc/ipc_import_map.cpp: the importer's mappings of the chunks
// an exporter sent (ipc_import.h): the check of the pieces, and mapping
// them at fresh address space for the caller's device.
#include <cuda.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/real_driver.h"
#include "policy/units.h"

namespace pagefast::ipc::detail {
namespace {

using policy::kGranuleBytes;

// Whether the pieces can be mapped as whole chunks side by side: every
// piece but the first starts its chunk, every piece but the last ends it.
bool whole_chunks_fit(const Reply& reply) {
  for (uint32_t i = 0; i < reply.header.piece_count; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    if (i > 0 && p.chunk_offset != 0) return false;
    if (i + 1 < reply.header.piece_count && p.chunk_offset + p.bytes != p.chunk_bytes) return false;
  }
  return true;
}

// Every piece is a granule-aligned part of its chunk; the total fits.
bool pieces_valid(const Reply& reply, bool whole, size_t* total) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < reply.header.piece_count; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    if (p.bytes == 0 || p.bytes % kGranuleBytes || p.chunk_offset % kGranuleBytes || p.chunk_bytes % kGranuleBytes ||
        p.chunk_offset > p.chunk_bytes || p.bytes > p.chunk_bytes - p.chunk_offset ||
        __builtin_add_overflow(sum, whole ? p.chunk_bytes : p.bytes, &sum))
      return false;
  }
  if (sum == 0 || sum > uint64_t(SIZE_MAX)) return false;
  *total = size_t(sum);
  return true;
}

}  // namespace

// Maps the exporter's chunks at fresh address space, opened for `device`.
// Whole chunks where they fit (a mapping at offset 0 of its handle, which
// every driver takes), else each piece at its offset. *lead_out is where
// the first piece starts in the mapping.
CUresult map_import(const Reply& reply, const std::vector<int>& fds, int device, CUdeviceptr* va_out, size_t* bytes_out,
                    uint64_t* lead_out, OpenTimes* times) {
  const RealDriver* real = real_driver();
  if (!driver::has_vmm_import(real)) return CUDA_ERROR_NOT_SUPPORTED;
  const uint32_t count = reply.header.piece_count;
  if (count == 0 || fds.size() != count) return CUDA_ERROR_INVALID_VALUE;
  const bool whole = whole_chunks_fit(reply);
  size_t total = 0;
  if (!pieces_valid(reply, whole, &total)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr va = 0;
  CUresult r = reserve_range(total, &va);
  const char* failed = "cuMemAddressReserve";
  if (r != CUDA_SUCCESS) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot open a pool block of another process: {} answered {}", failed,
               error_name(r));
    return r;
  }
  size_t mapped = 0;
  std::vector<std::pair<CUdeviceptr, size_t>> maps;
  for (uint32_t i = 0; i < count && r == CUDA_SUCCESS; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    CUmemGenericAllocationHandle h = 0;
    uint64_t t0 = now_ns();
    r = driver::import_handle(real, &h, reinterpret_cast<void*>(uintptr_t(fds[i])),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    times->import_ns += now_ns() - t0;
    t0 = now_ns();
    if (r != CUDA_SUCCESS) {
      failed = "cuMemImportFromShareableHandle";
      break;
    }
    const size_t bytes = whole ? p.chunk_bytes : p.bytes;
    r = driver::map(real, va + mapped, bytes, whole ? 0 : p.chunk_offset, h, 0);
    // The mapping holds the memory from now on; the handle is not needed.
    driver::release(real, h);
    if (r != CUDA_SUCCESS) {
      failed = "cuMemMap";
      break;
    }
    maps.push_back({va + mapped, bytes});
    mapped += bytes;
    times->map_ns += now_ns() - t0;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const uint64_t t0 = now_ns();
    r = driver::set_access(real, va, total, &access, 1);
    times->access_ns = now_ns() - t0;
    failed = "cuMemSetAccess";
  }
  if (r != CUDA_SUCCESS) {
    log::write(LogLevel::Warn,
               "CUDA IPC: cannot open a pool block of another process: {} answered {} ({} piece(s), "
               "{} MiB{})",
               failed, error_name(r), count, total >> 20, whole ? ", whole chunks" : "");
    for (const auto& m : maps) driver::unmap(real, m.first, m.second);
    unreserve_range(va, total);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_ERROR_MAP_FAILED;
  }
  *va_out = va;
  *bytes_out = total;
  *lead_out = whole ? reply.pieces[0].chunk_offset : 0;
  return CUDA_SUCCESS;
}

}  // namespace pagefast::ipc::detail
