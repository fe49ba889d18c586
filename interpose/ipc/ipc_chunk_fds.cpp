// interpose/ipc/ipc_chunk_fds.cpp: the exporter's descriptor of each pool
// chunk, made at its first open (lease_chunk_fd, ipc_internal.h) and closed
// when the pool releases the chunk (forget_chunk, ipc.h).
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/real_driver.h"

namespace pagefast::ipc {
namespace detail {

// One exported descriptor per chunk, made at its first open and sent as
// often as asked (SCM_RIGHTS gives the receiver its own copy): the driver's
// export costs about 0.6 ms a call on the H200 (docs/IPC.md). Closed when
// the pool releases the chunk (forget_chunk), so that no descriptor keeps
// released memory alive; a send under way holds a lease on it, and the
// last lease closes a descriptor whose chunk went meanwhile. So an open
// sends the descriptor itself: no copy made and closed per open.
// Each descriptor comes with an id that names the chunk to importers
// (ReplyPiece::chunk_id): made with the descriptor, gone with it, never
// given again, so that an importer's chunk cache (ipc_import_chunks.cpp)
// never takes a new chunk that reuses a released handle's value for the
// old one.
// The driver's export runs with no lock held: fd -1 marks one under way,
// which a lease of the same chunk waits for, and so does its release
// (the driver must not release a handle while exporting it). Other chunks
// are served and released meanwhile.
struct ChunkFd {
  int fd = -1;  // -1: the driver's export is under way
  uint64_t id = 0;
  uint64_t leases = 0;     // sends under way (the exporting thread's own included)
  bool forgotten = false;  // the chunk was released: the last lease closes fd
};

}  // namespace detail

namespace {

using detail::ChunkFd;
// The descriptors (ipc_state.h State::ChunkFds).
State::ChunkFds& fds() { return detail::ipc_state().chunk_fds; }

// REQUIRES fds().mutex. All of it or (out of memory: throws) none.
void ensure() {
  if (fds().fds) return;
  auto* done = new std::condition_variable();
  fds().fds = new std::map<uint64_t, ChunkFd*>();
  fds().done = done;
}

// REQUIRES fds().mutex.
void end_lease(ChunkFd* entry) {
  if (--entry->leases > 0 || !entry->forgotten) return;
  ::close(entry->fd);
  delete entry;
}

// The driver's export of `chunk` for the entry just listed (fd -1, one
// lease: the caller's), made with fds().mutex released (`lock` held on
// return either way). false: refused (*r), the entry gone.
bool export_listed(const RealDriver* real, uint64_t chunk, ChunkFd* entry, std::unique_lock<std::mutex>& lock,
                   CUresult* r) {
  lock.unlock();
  int fd = -1;
  *r = driver::export_handle(real, &fd, CUmemGenericAllocationHandle(chunk), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                             0);
  if (*r == CUDA_SUCCESS && fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  lock.lock();
  fds().done->notify_all();
  if (*r == CUDA_SUCCESS && fd >= 0) {
    entry->fd = fd;
    entry->id = fds().next_id++;
    return true;
  }
  if (*r == CUDA_SUCCESS) *r = CUDA_ERROR_INVALID_VALUE;
  if (fd >= 0) ::close(fd);
  fds().fds->erase(chunk);  // nothing else removes an entry under way
  delete entry;
  return false;
}

}  // namespace

namespace detail {

CUresult lease_chunk_fd(const RealDriver* real, uint64_t chunk, ChunkLease* out) {
  std::unique_lock<std::mutex> lock(fds().mutex);
  try {
    ensure();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (;;) {
    auto it = fds().fds->find(chunk);
    if (it == fds().fds->end()) break;
    ChunkFd* entry = it->second;
    if (entry->fd >= 0) {
      ++entry->leases;
      *out = ChunkLease{entry->fd, entry->id, entry};
      return CUDA_SUCCESS;
    }
    fds().done->wait(lock);  // another thread exports it now
  }
  ChunkFd* entry = nullptr;
  try {
    entry = new ChunkFd();
    (*fds().fds)[chunk] = entry;
  } catch (...) {
    delete entry;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  entry->leases = 1;
  CUresult r = CUDA_SUCCESS;
  if (!export_listed(real, chunk, entry, lock, &r)) return r;
  *out = ChunkLease{entry->fd, entry->id, entry};
  return CUDA_SUCCESS;
}

void return_chunk_fds(ChunkLease* leases, size_t count) {
  if (count == 0) return;
  std::lock_guard<std::mutex> guard(fds().mutex);
  for (size_t i = 0; i < count; ++i) {
    if (leases[i].entry) end_lease(static_cast<ChunkFd*>(leases[i].entry));
    leases[i] = ChunkLease{};
  }
}

}  // namespace detail

void forget_chunk(uint64_t chunk) {
  std::unique_lock<std::mutex> lock(fds().mutex);
  if (!fds().fds) return;
  for (;;) {
    auto it = fds().fds->find(chunk);
    if (it == fds().fds->end()) return;
    ChunkFd* entry = it->second;
    if (entry->fd < 0) {
      fds().done->wait(lock);  // its export ends first
      continue;
    }
    fds().fds->erase(it);
    entry->forgotten = true;
    ++entry->leases;
    end_lease(entry);  // closed now, or by the last send under way
    return;
  }
}

}  // namespace pagefast::ipc
