// interpose/ipc/ipc_chunk_fds.cpp: the exporter's descriptor of each pool
// chunk, made at its first open (chunk_fd, ipc_internal.h) and closed
// when the pool releases the chunk (forget_chunk, ipc.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/real_driver.h"

namespace pagefast::ipc {
namespace {

// One exported descriptor per chunk, made at its first open and sent as
// often as asked (SCM_RIGHTS gives the receiver its own copy): the driver's
// export costs about 0.6 ms a call on the H200 (docs/IPC.md). Closed when
// the pool releases the chunk (forget_chunk), so that no descriptor keeps
// released memory alive.
// Each descriptor comes with an id that names the chunk to importers
// (ReplyPiece::chunk_id): made with the descriptor, gone with it, never
// given again, so that an importer's chunk cache (ipc_import_chunks.cpp)
// never takes a new chunk that reuses a released handle's value for the
// old one.
struct ChunkFd {
  int fd;
  uint64_t id;
};
std::mutex g_fd_mutex;
std::map<uint64_t, ChunkFd>* g_chunk_fds = nullptr;  // chunk handle -> descriptor
uint64_t g_next_chunk_id = 1;

}  // namespace

namespace detail {

CUresult chunk_fd(const RealDriver* real, uint64_t chunk, int* fd_out, uint64_t* id_out) {
  std::lock_guard<std::mutex> guard(g_fd_mutex);
  if (!g_chunk_fds) g_chunk_fds = new std::map<uint64_t, ChunkFd>();
  auto it = g_chunk_fds->find(chunk);
  // The caller gets its own copy to send and close: a release of the
  // chunk meanwhile cannot close (and a reuse of the number cannot
  // replace) what is being sent.
  if (it != g_chunk_fds->end()) {
    *id_out = it->second.id;
    *fd_out = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
    return *fd_out >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  }
  int fd = -1;
  const CUresult r = driver::export_handle(real, &fd, CUmemGenericAllocationHandle(chunk),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) return r;
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const uint64_t id = g_next_chunk_id++;
  (*g_chunk_fds)[chunk] = ChunkFd{fd, id};
  *id_out = id;
  *fd_out = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return *fd_out >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace detail

void forget_chunk(uint64_t chunk) {
  std::lock_guard<std::mutex> guard(g_fd_mutex);
  if (!g_chunk_fds) return;
  auto it = g_chunk_fds->find(chunk);
  if (it == g_chunk_fds->end()) return;
  ::close(it->second.fd);
  g_chunk_fds->erase(it);
}

}  // namespace pagefast::ipc
