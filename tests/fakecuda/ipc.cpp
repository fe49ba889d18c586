// tests/fakecuda/ipc.cpp: legacy CUDA IPC of cuMemAlloc memory
// (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle) between
// processes of the same user.
//
// cuMemAlloc memory lives in the device's memory file (memory.cpp). The
// 64-byte handle names that file by the exporter's pid and fd number, and
// the block by its offset in it; the importer opens /proc/<pid>/fd/<n> (the
// kernel allows it to the same user only), maps the block's pages shared and
// closes the file again, so an open import costs no file descriptor. Handle
// layout (native byte order):
//   0  "FAKEIPC2"             8  exporter pid (i32)   12 its fd number (i32)
//   16 exporter start time    24 the file's inode     32 block's file offset
//   40 block bytes            48 exporter buffer id   56 device (i32)
//   60 FNV-1a of bytes 0..59 (u32)
// The bytes are untrusted: anything that is not a live exporter's fake
// device-memory file answers CUDA_ERROR_INVALID_VALUE, never a crash or a
// wait. The start time (from /proc/<pid>/stat) tells a dead exporter from a
// later process that got its pid.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <tuple>

#include "api_list.h"
#include "os.h"
#include "state.h"

using namespace fake;

namespace {

constexpr char kMagic[8] = {'F', 'A', 'K', 'E', 'I', 'P', 'C', '2'};
constexpr char kDeviceFileName[] = "fakecuda-device-memory";

struct Wire {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t start;
  uint64_t inode;
  uint64_t offset;
  uint64_t bytes;
  uint64_t buffer_id;
  int32_t device;
  uint32_t check;
};
static_assert(sizeof(Wire) == CU_IPC_HANDLE_SIZE, "the handle is 64 bytes");

uint32_t fnv1a(const void* data, size_t bytes) {
  uint32_t hash = 2166136261u;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 16777619u;
  return hash;
}

// Field 22 of /proc/<pid>/stat (clock ticks after boot); 0 if there is no
// such process.
uint64_t process_start_time(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* file = fopen(path, "re");
  if (!file) return 0;
  char line[1024];
  const size_t got = fread(line, 1, sizeof line - 1, file);
  fclose(file);
  line[got] = '\0';
  // The command name (field 2) may hold spaces and parentheses: skip to the last ')'.
  const char* p = strrchr(line, ')');
  if (!p) return 0;
  unsigned long long start = 0;
  // Fields 3..21 skipped, 22 read.
  if (sscanf(p + 1,
             " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &start) != 1)
    return 0;
  return start;
}

uint64_t own_start_time() {
  // Keyed by pid: a forked child must not present its parent's.
  static int cached_pid = 0;
  static uint64_t cached = 0;
  if (cached_pid != getpid()) {
    cached_pid = getpid();
    cached = process_start_time(cached_pid);
  }
  return cached;
}

// Opens the exporter's device-memory file named by the handle, or -1.
int open_exporter_file(const Wire& wire) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", int(wire.pid), int(wire.fd));
  char target[256];
  const ssize_t length = readlink(path, target, sizeof target - 1);
  if (length <= 0) return -1;  // exporter gone, fd closed, or not ours to see
  target[length] = '\0';
  if (!os::is_memory_file_link(target, kDeviceFileName)) return -1;
  // O_NONBLOCK: whatever the fd became meanwhile, opening it cannot wait.
  const int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;  // EACCES: another user's process
  struct stat info;
  if (fstat(fd, &info) != 0 || uint64_t(info.st_ino) != wire.inode ||
      uint64_t(info.st_size) < wire.offset || uint64_t(info.st_size) - wire.offset < wire.bytes) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace fake {

void free_import(Import* import) {
  os::release(import->map_base, import->map_bytes);
  state().imports.erase(import->map_base);
  delete import;
}

}  // namespace fake

// The handle names the block containing dptr (the block's start opens).
// Memory the fake did not get from cuMemAlloc (VMM, imports) has no legacy
// handle: CUDA_ERROR_INVALID_VALUE, as the driver answers for VMM memory.
CUresult impl::cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Block* block = find_block(uintptr_t(dptr));
  if (!block) return CUDA_ERROR_INVALID_VALUE;
  const Device& device = state().devices[size_t(block->device)];
  struct stat info;
  if (device.memory_fd < 0 || fstat(device.memory_fd, &info) != 0) return CUDA_ERROR_MAP_FAILED;
  // From now on an importer may map the block: its file range is never reused.
  if (block->slab) {
    block->slab->exported = true;
  } else {
    block->exported = true;
  }
  Wire wire;
  memset(&wire, 0, sizeof wire);
  memcpy(wire.magic, kMagic, sizeof kMagic);
  wire.pid = int32_t(getpid());
  wire.fd = int32_t(device.memory_fd);
  wire.start = own_start_time();
  wire.inode = uint64_t(info.st_ino);
  wire.offset = block->file_offset;
  wire.bytes = block->bytes;
  wire.buffer_id = block->buffer_id;
  wire.device = int32_t(block->device);
  wire.check = fnv1a(&wire, offsetof(Wire, check));
  memcpy(handle->reserved, &wire, sizeof wire);
  return CUDA_SUCCESS;
}

// Opening a handle in the process that exported it answers
// CUDA_ERROR_INVALID_CONTEXT ("invalid device context"), as the driver does.
// A handle already open in this process gets one more reference and the same
// address. The mapping lands on the current context's device.
CUresult impl::cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                     unsigned int flags) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~unsigned(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
  Wire wire;
  memcpy(&wire, handle.reserved, sizeof wire);
  if (memcmp(wire.magic, kMagic, sizeof kMagic) != 0 ||
      wire.check != fnv1a(&wire, offsetof(Wire, check)) || wire.pid <= 0 || wire.fd < 0 ||
      wire.bytes == 0 || wire.offset + wire.bytes < wire.offset)
    return CUDA_ERROR_INVALID_VALUE;
  if (wire.pid == getpid()) {
    return wire.start == own_start_time() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
  }
  State& st = state();
  for (auto& entry : st.imports) {
    Import* import = entry.second;
    if (std::tie(import->exporter_pid, import->exporter_start, import->exporter_buffer_id) ==
        std::tie(wire.pid, wire.start, wire.buffer_id)) {
      ++import->refs;
      *pdptr = CUdeviceptr(import->base);
      return CUDA_SUCCESS;
    }
  }
  if (wire.start == 0 || process_start_time(wire.pid) != wire.start)
    return CUDA_ERROR_INVALID_VALUE;  // the exporter is gone
  const int fd = open_exporter_file(wire);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t page = os::page_bytes();
  const uint64_t map_offset = wire.offset / page * page;
  const uint64_t lead = wire.offset - map_offset;
  const uint64_t map_bytes = (lead + wire.bytes + page - 1) / page * page;
  const uintptr_t map_base =
      map_bytes > SIZE_MAX
          ? 0
          : os::map_file_anywhere(size_t(map_bytes), kGranularityBytes, fd, map_offset);
  close(fd);  // the mapping keeps the file
  if (map_base == 0) return CUDA_ERROR_MAP_FAILED;
  Import* import = new Import;
  import->base = map_base + lead;
  import->bytes = size_t(wire.bytes);
  import->map_base = map_base;
  import->map_bytes = size_t(map_bytes);
  import->ctx = ctx;
  import->device = ctx->device;
  import->buffer_id = st.next_buffer_id++;
  import->refs = 1;
  import->exporter_pid = wire.pid;
  import->exporter_start = wire.start;
  import->exporter_buffer_id = wire.buffer_id;
  st.imports[map_base] = import;
  *pdptr = CUdeviceptr(import->base);
  return CUDA_SUCCESS;
}

// The v1 name: same behaviour (cuda.h maps cuIpcOpenMemHandle to _v2).
CUresult impl::cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return impl::cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

// Drops one reference; the last unmaps. The exporter's memory is not
// affected. Only the address cuIpcOpenMemHandle returned is accepted.
CUresult impl::cuIpcCloseMemHandle(CUdeviceptr dptr) {
  FAKE_REQUIRE_INIT();
  Lock lock(state().mu);
  Context* ctx = nullptr;
  FAKE_TRY(current_context(&ctx));
  Import* import = find_import(uintptr_t(dptr));
  if (!import || import->base != uintptr_t(dptr)) return CUDA_ERROR_INVALID_VALUE;
  if (--import->refs == 0) free_import(import);
  return CUDA_SUCCESS;
}
