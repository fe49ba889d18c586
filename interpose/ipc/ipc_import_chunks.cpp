// interpose/ipc/ipc_import_chunks.cpp: the importer's chunk mappings
// (ipc_import.h, docs/IPC.md "The importer's chunk mappings"): a chunk an
// exporter sent is imported, mapped whole and opened for the caller's
// device once, and every block of it opened meanwhile is a pointer into
// that mapping: the second block of a chunk costs the exporter's answer
// and no driver call. The mapping goes when its last block closes, as
// before (no memory is kept past the closes). Address space of mappings
// that went is kept for the next one of its size. A mutex of its own
// guards the mappings, never held across a driver call: a chunk being
// mapped is listed as not ready, and another open of it waits for it.
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/real_driver.h"
#include "policy/units.h"

namespace pagefast::ipc::detail {

struct ChunkMap {
  CUdeviceptr va = 0;
  size_t bytes = 0;
  uint64_t blocks = 0;  // blocks open through it
  bool ready = false;   // false while one thread maps it
};

namespace {

using policy::kGranuleBytes;

// The mapped chunks and spare ranges (ipc_state.h State::ImportChunks).
State::ImportChunks& chunks() { return ipc_state().import_chunks; }

// Reserved ranges no mapping uses, kept for the next of their size: a
// cuMemAddressReserve and a cuMemAddressFree less per chunk (address
// space only, no memory).
constexpr size_t kSpareRanges = 8;

// REQUIRES chunks().mutex. All of it or (out of memory: throws) none.
void ensure() {
  if (chunks().chunks) return;
  auto* cv = new std::condition_variable();
  auto* spare = new std::vector<std::pair<CUdeviceptr, size_t>>();
  chunks().chunks = new std::map<ChunkKey, ChunkMap>();
  chunks().spare = spare;
  chunks().cv = cv;
}

// Whether the reply's piece is a part of its chunk that can be mapped.
bool piece_valid(const ReplyPiece& piece) {
  const uint64_t end = piece.chunk_offset + piece.bytes;
  return piece.bytes != 0 && piece.chunk_bytes != 0 && piece.chunk_bytes % kGranuleBytes == 0 &&
         piece.chunk_offset % kGranuleBytes == 0 && piece.bytes % kGranuleBytes == 0 &&
         piece.chunk_offset <= piece.chunk_bytes && piece.bytes <= piece.chunk_bytes - piece.chunk_offset &&
         end <= piece.chunk_bytes && piece.chunk_bytes <= uint64_t(SIZE_MAX);
}

// REQUIRES chunks().mutex (held by `lock`). The chunk's mapping for one
// more block (true, *va), waiting for another thread's that is under way;
// or false: none, and this thread's claim to make it is listed.
bool mapped_or_claim(std::unique_lock<std::mutex>& lock, const ChunkKey& key, size_t bytes, CUdeviceptr* va,
                     CUresult* r) {
  for (;;) {
    auto it = chunks().chunks->find(key);
    if (it == chunks().chunks->end()) break;
    if (it->second.ready) {
      // The same id is the same memory: its size cannot differ.
      *r = it->second.bytes == bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      if (*r == CUDA_SUCCESS) ++it->second.blocks;
      *va = it->second.va;
      return true;
    }
    chunks().cv->wait(lock);
  }
  chunks().chunks->emplace(key, ChunkMap{0, bytes, 0, false});
  return false;
}

void warn_refused(const char* call, CUresult r, size_t bytes) {
  log::write(LogLevel::Warn,
             "CUDA IPC: cannot open a pool block of another process: {} answered {} ({} MiB, one chunk)", call,
             error_name(r), bytes >> 20);
}

// Imports the chunk's descriptor, maps it whole at offset 0 of its handle
// (what every driver takes: docs/DRIVER-FACTS.md) at `va` and opens it for
// `device`; on failure nothing stays mapped.
CUresult map_chunk(const RealDriver* real, int fd, size_t bytes, int device, CUdeviceptr va, OpenTimes* times) {
  CUmemGenericAllocationHandle h = 0;
  uint64_t t0 = now_ns();
  CUresult r =
      driver::import_handle(real, &h, reinterpret_cast<void*>(uintptr_t(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  times->import_ns += now_ns() - t0;
  if (r != CUDA_SUCCESS) {
    warn_refused("cuMemImportFromShareableHandle", r, bytes);
    return r;
  }
  t0 = now_ns();
  r = driver::map(real, va, bytes, 0, h, 0);
  // The mapping holds the memory from now on; the handle is not needed.
  driver::release(real, h);
  times->map_ns += now_ns() - t0;
  if (r != CUDA_SUCCESS) {
    warn_refused("cuMemMap", r, bytes);
    return r;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  t0 = now_ns();
  r = driver::set_access(real, va, bytes, &access, 1);
  times->access_ns += now_ns() - t0;
  if (r != CUDA_SUCCESS) {
    warn_refused("cuMemSetAccess", r, bytes);
    driver::unmap(real, va, bytes);
  }
  return r;
}

}  // namespace

CUresult reserve_range(size_t bytes, CUdeviceptr* va) {
  {
    std::lock_guard<std::mutex> guard(chunks().mutex);
    if (chunks().spare)
      for (size_t i = 0; i < chunks().spare->size(); ++i)
        if ((*chunks().spare)[i].second == bytes) {
          *va = (*chunks().spare)[i].first;
          (*chunks().spare)[i] = chunks().spare->back();
          chunks().spare->pop_back();
          return CUDA_SUCCESS;
        }
  }
  return driver::address_reserve(real_driver(), va, bytes, kGranuleBytes, 0, 0);
}

void unreserve_range(CUdeviceptr va, size_t bytes) {
  {
    std::lock_guard<std::mutex> guard(chunks().mutex);
    try {
      ensure();
      if (chunks().spare->size() < kSpareRanges) {
        chunks().spare->push_back({va, bytes});
        return;
      }
    } catch (...) {
    }
  }
  driver::address_free(real_driver(), va, bytes);
}

CUresult chunk_acquire(const ChunkKey& key, const ReplyPiece& piece, int fd, int device, CUdeviceptr* chunk_va,
                       OpenTimes* times) {
  if (!piece_valid(piece)) return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = size_t(piece.chunk_bytes);
  std::unique_lock<std::mutex> lock(chunks().mutex);
  CUresult r = CUDA_SUCCESS;
  try {
    ensure();
    if (mapped_or_claim(lock, key, bytes, chunk_va, &r)) return r;
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  lock.unlock();
  const RealDriver* real = real_driver();
  CUdeviceptr va = 0;
  r = driver::has_vmm_import(real) ? reserve_range(bytes, &va) : CUDA_ERROR_NOT_SUPPORTED;
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED) warn_refused("cuMemAddressReserve", r, bytes);
  const bool reserved = r == CUDA_SUCCESS;
  if (reserved) r = map_chunk(real, fd, bytes, device, va, times);
  lock.lock();
  auto it = chunks().chunks->find(key);  // the claim: nothing else removes it
  if (r == CUDA_SUCCESS && it != chunks().chunks->end()) {
    it->second = ChunkMap{va, bytes, 1, true};
    chunks().cv->notify_all();
    *chunk_va = va;
    return CUDA_SUCCESS;
  }
  if (it != chunks().chunks->end()) chunks().chunks->erase(it);
  chunks().cv->notify_all();
  lock.unlock();
  if (r == CUDA_SUCCESS) driver::unmap(real, va, bytes);
  if (reserved) unreserve_range(va, bytes);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return r;
  return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_ERROR_MAP_FAILED;
}

bool chunk_release(const ChunkKey& key) {
  std::unique_lock<std::mutex> lock(chunks().mutex);
  if (!chunks().chunks) return false;
  auto it = chunks().chunks->find(key);
  if (it == chunks().chunks->end() || !it->second.ready || --it->second.blocks > 0) return false;
  const ChunkMap m = it->second;
  chunks().chunks->erase(it);
  lock.unlock();
  driver::unmap(real_driver(), m.va, m.bytes);
  unreserve_range(m.va, m.bytes);
  return true;
}

void chunks_forget() {
  // A forked child: the parent's mappings are not its own to unmap.
  std::lock_guard<std::mutex> guard(chunks().mutex);
  if (chunks().chunks) chunks().chunks->clear();
  if (chunks().spare) chunks().spare->clear();
}

}  // namespace pagefast::ipc::detail
