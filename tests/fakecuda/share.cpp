// tests/fakecuda/share.cpp: shareable VMM memory
// (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): cuMemExportToShareableHandle
// and cuMemImportFromShareableHandle.
//
// A Physical created with that handle type gets a memory file of its own
// ("fakecuda-shareable"), so that it can cross processes as a file
// descriptor. The file is one page longer than the allocation: that page
// holds a header (magic, bytes, device, the CUmemAllocationProp given to
// cuMemCreate) from which an importer in another process learns what it got.
// Pages of the allocation are never mapped past `bytes`, so the header
// cannot be overwritten through device memory.
//
// Import in the process that owns the memory (found by the file's inode)
// hands out the same handle with one more reference: the memory is counted
// against the device once. An import in another process makes a Physical
// of its own there that is not counted against that process's device total
// (the exporter's process counts it; each fake process keeps its own totals).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "api_list.h"
#include "os.h"
#include "state.h"

using namespace fake;

namespace {

constexpr char kFileName[] = "fakecuda-shareable";
constexpr char kMagic[8] = {'F', 'A', 'K', 'E', 'V', 'M', 'M', '1'};

struct Header {
  char magic[8];
  uint64_t bytes;
  int32_t device;
  int32_t reserved;
  CUmemAllocationProp prop;
};

bool known_handle_type(unsigned type) {
  return type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || type == CU_MEM_HANDLE_TYPE_WIN32 ||
         type == CU_MEM_HANDLE_TYPE_WIN32_KMT || type == CU_MEM_HANDLE_TYPE_FABRIC;
}

// Reads and checks the header of a file handed to cuMemImportFromShareableHandle.
bool read_header(int fd, Header* header) {
  char path[64];
  // thread-self: in a process whose main thread exited, /proc/self is the
  // zombie leader, whose descriptors /proc no longer shows.
  snprintf(path, sizeof path, "/proc/thread-self/fd/%d", fd);
  char target[256];
  ssize_t length = readlink(path, target, sizeof target - 1);
  if (length <= 0) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    length = readlink(path, target, sizeof target - 1);
  }
  if (length <= 0) return false;
  target[length] = '\0';
  if (!os::is_memory_file_link(target, kFileName)) return false;
  struct stat info;
  const uint64_t page = os::page_bytes();
  if (fstat(fd, &info) != 0 || uint64_t(info.st_size) < page + kGranularityBytes) return false;
  const uint64_t bytes = uint64_t(info.st_size) - page;
  if (pread(fd, header, sizeof *header, off_t(bytes)) != ssize_t(sizeof *header)) return false;
  return memcmp(header->magic, kMagic, sizeof kMagic) == 0 && header->bytes == bytes &&
         bytes % kGranularityBytes == 0;
}

}  // namespace

namespace fake {

CUresult check_handle_types(unsigned long long requested) {
  const unsigned long long known = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
                                   CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT |
                                   CU_MEM_HANDLE_TYPE_FABRIC;
  if (requested & ~known) return CUDA_ERROR_INVALID_VALUE;
  // Windows handles on Linux, and fabric handles without an IMEX channel.
  if (requested & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (requested && !state().config.posix_fd) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

bool create_shareable_memory(Physical* phys) {
  const uint64_t page = os::page_bytes();
  const int fd = os::create_memory_file(kFileName);
  if (fd < 0) return false;
  Header header;
  memset(&header, 0, sizeof header);
  memcpy(header.magic, kMagic, sizeof kMagic);
  header.bytes = phys->bytes;
  header.device = phys->device;
  header.prop = phys->prop;
  struct stat info;
  if (!os::grow_file(fd, phys->bytes + page) ||
      pwrite(fd, &header, sizeof header, off_t(phys->bytes)) != ssize_t(sizeof header) ||
      fstat(fd, &info) != 0) {
    close(fd);
    return false;
  }
  phys->own_fd = fd;
  phys->file_offset = 0;
  phys->inode = uint64_t(info.st_ino);
  state().shareable[phys->inode] = phys;
  return true;
}

void release_shareable_memory(Physical* phys) {
  state().shareable.erase(phys->inode);
  close(phys->own_fd);  // mappings elsewhere (other processes) keep the file
  phys->own_fd = -1;
}

}  // namespace fake

// POSIX_FD: writes a new file descriptor (close-on-exec) that the caller
// owns and must close. A handle created without that type: INVALID_VALUE;
// other types: NOT_SUPPORTED (Windows and fabric handles are not emulated).
CUresult impl::cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                            CUmemAllocationHandleType type,
                                            unsigned long long flags) {
  FAKE_REQUIRE_INIT();
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  auto it = state().handles.find(handle);
  if (it == state().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  const Physical* phys = it->second;
  if (!known_handle_type(unsigned(type))) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  if (!(phys->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
      phys->own_fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = fcntl(phys->own_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;  // EMFILE
  memcpy(shareable, &fd, sizeof fd);
  return CUDA_SUCCESS;
}

// POSIX_FD: os_handle is the descriptor itself, (void*)(uintptr_t)fd; the
// caller keeps it (and may close it at once). Anything but a file from
// cuMemExportToShareableHandle answers INVALID_VALUE.
CUresult impl::cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                              CUmemAllocationHandleType type) {
  FAKE_REQUIRE_INIT();
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Lock lock(state().mu);
  State& st = state();
  if (!known_handle_type(unsigned(type))) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !st.config.posix_fd)
    return CUDA_ERROR_NOT_SUPPORTED;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(os_handle);
  if (raw > uintptr_t(INT32_MAX)) return CUDA_ERROR_INVALID_VALUE;
  const int fd = int(raw);
  Header header;
  if (!read_header(fd, &header)) return CUDA_ERROR_INVALID_VALUE;
  struct stat info;
  if (fstat(fd, &info) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto own = st.shareable.find(uint64_t(info.st_ino));
  if (own != st.shareable.end()) {
    Physical* phys = own->second;
    if (phys->handle_refs++ == 0) st.handles[phys->handle] = phys;
    *handle = phys->handle;
    return CUDA_SUCCESS;
  }
  if (!valid_device(header.device)) return CUDA_ERROR_NOT_SUPPORTED;
  const int kept = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (kept < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Physical* phys = new Physical;
  phys->handle = st.next_handle++;
  phys->device = header.device;
  phys->bytes = size_t(header.bytes);
  phys->own_fd = kept;
  phys->inode = uint64_t(info.st_ino);
  phys->charged = false;
  phys->prop = header.prop;
  phys->prop.win32HandleMetaData = nullptr;  // the exporter's pointer means nothing here
  phys->handle_refs = 1;
  phys->block_id = st.next_buffer_id++;
  st.handles[phys->handle] = phys;
  st.shareable[phys->inode] = phys;
  *handle = phys->handle;
  return CUDA_SUCCESS;
}
