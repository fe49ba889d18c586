// tests/fakecuda/fakecuda_ipc_selftest.cpp: the fake driver's tests of
// memory shared between processes: legacy CUDA IPC of cuMemAlloc memory and
// shareable VMM handles (POSIX file descriptors). Kept apart from
// fakecuda_selftest.cpp, which is long enough already.
//
// The other process is this executable again, started with --ipc-peer over
// a socketpair (fd 3): a fresh process with its own fake driver state, as a
// real importer is (a forked child would inherit the exporter's state and
// file descriptors). It answers one request at a time (Request/Reply below);
// file descriptors travel with SCM_RIGHTS.
//
// Tests tagged [noposixfd] run in a process with FAKECUDA_NO_POSIX_FD=1.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr int kPeerSocket = 3;

#define CU_OK(expr) REQUIRE((expr) == CUDA_SUCCESS)

struct Request {
  char op = 0;  // see peer_main
  unsigned char value = 0;
  uint64_t a = 0;
  uint64_t b = 0;
  CUipcMemHandle handle{};
};

struct Reply {
  int32_t rc = -1;
  uint64_t value = 0;
  CUipcMemHandle handle{};
};

bool write_full(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

bool read_full(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

// One request with a file descriptor attached.
bool send_with_fd(int socket, const Request& request, int fd) {
  iovec iov{const_cast<Request*>(&request), sizeof request};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  return sendmsg(socket, &msg, 0) == ssize_t(sizeof request);
}

// Receives one request; *fd gets an attached descriptor, or -1.
bool receive(int socket, Request* request, int* fd) {
  *fd = -1;
  iovec iov{request, sizeof *request};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      memcpy(fd, CMSG_DATA(c), sizeof *fd);
  return size_t(n) == sizeof *request ||
         read_full(socket, reinterpret_cast<char*>(request) + n, sizeof *request - size_t(n));
}

int open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int count = 0;
  while (readdir(dir)) ++count;
  closedir(dir);
  return count;
}

CUmemAllocationProp shareable_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc desc{};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return desc;
}

CUcontext primary() {
  static CUcontext ctx = [] {
    REQUIRE(cuInit(0) == CUDA_SUCCESS);
    CUcontext c = nullptr;
    REQUIRE(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS);
    return c;
  }();
  CU_OK(cuCtxSetCurrent(ctx));
  return ctx;
}

size_t free_bytes() {
  size_t free = 0, total = 0;
  CU_OK(cuMemGetInfo(&free, &total));
  return free;
}

// A handle with one field replaced and its checksum made right again
// (layout in ipc.cpp): what a forger, or a stale handle, looks like.
template <typename T>
CUipcMemHandle forged(const CUipcMemHandle& good, size_t offset, T value) {
  CUipcMemHandle handle = good;
  memcpy(handle.reserved + offset, &value, sizeof value);
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < 60; ++i)
    hash = (hash ^ static_cast<unsigned char>(handle.reserved[i])) * 16777619u;
  memcpy(handle.reserved + 60, &hash, sizeof hash);
  return handle;
}

unsigned char* host(CUdeviceptr ptr) { return reinterpret_cast<unsigned char*>(ptr); }

bool all_equal(CUdeviceptr ptr, size_t bytes, unsigned char value) {
  for (size_t i = 0; i < bytes; ++i)
    if (host(ptr)[i] != value) return false;
  return true;
}

// --- the peer process -------------------------------------------------------------

// Ops: O open the handle (value: the pointer), R check [ptr+a, +b) == value
// through cuMemcpyDtoH (rc 0, or 1 on a mismatch), W cuMemsetD8 it, C close,
// A pointer attribute a of ptr+b (as int), E cuMemAlloc b bytes filled with
// value and export it (handle), I import the attached fd and map b bytes
// (value: requestedHandleTypes | location.id << 8 of its properties),
// U unmap and release that, F count open fds, Q quit.
int peer_main(bool as_nobody) {
  if (as_nobody && (setgid(65534) != 0 || setuid(65534) != 0)) return 2;
  if (cuInit(0) != CUDA_SUCCESS) return 3;
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return 4;
  CUdeviceptr ptr = 0;
  CUdeviceptr reserved = 0;
  size_t reserved_bytes = 0;
  CUmemGenericAllocationHandle vmm = 0;
  for (;;) {
    Request request;
    int fd = -1;
    if (!receive(kPeerSocket, &request, &fd)) return 0;
    Reply reply;
    switch (request.op) {
      case 'O': {
        CUdeviceptr got = 0;
        reply.rc = cuIpcOpenMemHandle(&got, request.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (reply.rc == CUDA_SUCCESS) ptr = got;
        reply.value = got;
        break;
      }
      case 'R': {
        std::vector<unsigned char> bytes(request.b);
        reply.rc = cuMemcpyDtoH(bytes.data(), ptr + request.a, request.b);
        if (reply.rc == CUDA_SUCCESS)
          for (unsigned char c : bytes)
            if (c != request.value) reply.rc = 1;
        break;
      }
      case 'W': reply.rc = cuMemsetD8(ptr + request.a, request.value, request.b); break;
      case 'C': reply.rc = cuIpcCloseMemHandle(ptr); break;
      case 'A': {
        int value = -1;
        reply.rc = cuPointerGetAttribute(&value, CUpointer_attribute(request.a), ptr + request.b);
        reply.value = uint64_t(value);
        break;
      }
      case 'E': {
        reply.rc = cuMemAlloc(&ptr, request.b);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemsetD8(ptr, request.value, request.b);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuIpcGetMemHandle(&reply.handle, ptr);
        break;
      }
      case 'I': {
        reply.rc = cuMemImportFromShareableHandle(&vmm, reinterpret_cast<void*>(uintptr_t(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (fd >= 0) close(fd);  // the caller's copy; the import keeps its own
        CUmemAllocationProp prop{};
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemGetAllocationPropertiesFromHandle(&prop, vmm);
        reply.value = prop.requestedHandleTypes | uint64_t(prop.location.id) << 8;
        reserved_bytes = request.b;
        if (reply.rc == CUDA_SUCCESS)
          reply.rc = cuMemAddressReserve(&reserved, reserved_bytes, 0, 0, 0);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemMap(reserved, reserved_bytes, 0, vmm, 0);
        const CUmemAccessDesc desc = read_write(0);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemSetAccess(reserved, reserved_bytes, &desc, 1);
        ptr = reserved;
        break;
      }
      case 'U':
        reply.rc = cuMemUnmap(reserved, reserved_bytes);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemRelease(vmm);
        if (reply.rc == CUDA_SUCCESS) reply.rc = cuMemAddressFree(reserved, reserved_bytes);
        break;
      case 'F':
        reply.rc = 0;
        reply.value = uint64_t(open_fds());
        break;
      case 'Q': return 0;
      default: reply.rc = -2;
    }
    if (fd >= 0 && request.op != 'I') close(fd);
    if (!write_full(kPeerSocket, &reply, sizeof reply)) return 5;
  }
}

// --- the test side of it ------------------------------------------------------------

class Peer {
 public:
  explicit Peer(bool as_nobody = false) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fflush(nullptr);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      if (dup2(sv[1], kPeerSocket) < 0) _exit(6);
      execl("/proc/self/exe", "fakecuda_ipc_peer", "--ipc-peer", as_nobody ? "nobody" : "same",
            static_cast<char*>(nullptr));
      _exit(7);
    }
    close(sv[1]);
    socket_ = sv[0];
  }
  ~Peer() { quit(); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  Reply call(char op, uint64_t a = 0, uint64_t b = 0, unsigned char value = 0,
             const CUipcMemHandle* handle = nullptr, int fd = -1) {
    Request request;
    request.op = op;
    request.a = a;
    request.b = b;
    request.value = value;
    if (handle) request.handle = *handle;
    const bool sent = fd >= 0 ? send_with_fd(socket_, request, fd)
                              : write_full(socket_, &request, sizeof request);
    REQUIRE(sent);
    Reply reply;
    REQUIRE(read_full(socket_, &reply, sizeof reply));
    return reply;
  }

  // Ends the peer and waits for it; its exit status.
  int quit() {
    if (pid_ <= 0) return status_;
    Request request;
    request.op = 'Q';
    write_full(socket_, &request, sizeof request);
    close(socket_);
    waitpid(pid_, &status_, 0);
    pid_ = 0;
    return status_;
  }

 private:
  pid_t pid_ = 0;
  int socket_ = -1;
  int status_ = 0;
};

}  // namespace

// --- legacy IPC of cuMemAlloc memory ----------------------------------------------

TEST_CASE("legacy IPC: another process maps the same bytes of the block") {
  primary();
  // The third of several small blocks: not at offset 0 of its slab or page.
  CUdeviceptr small[5];
  for (int i = 0; i < 5; ++i) {
    CU_OK(cuMemAlloc(&small[i], 1000));
    CU_OK(cuMemsetD8(small[i], static_cast<unsigned char>(0x10 + i), 1000));
  }
  CUipcMemHandle handle;
  CU_OK(cuIpcGetMemHandle(&handle, small[2]));
  CUipcMemHandle again;
  CU_OK(cuIpcGetMemHandle(&again, small[2] + 10));  // an interior address names the block
  REQUIRE(memcmp(handle.reserved, again.reserved, sizeof handle.reserved) == 0);

  Peer peer;
  Reply opened = peer.call('O', 0, 0, 0, &handle);
  REQUIRE(opened.rc == CUDA_SUCCESS);
  REQUIRE(opened.value != 0);
  REQUIRE(peer.call('R', 0, 1000, 0x12).rc == 0);
  REQUIRE(peer.call('R', 0, 1001, 0x12).rc == CUDA_ERROR_INVALID_VALUE);  // past the block
  REQUIRE(peer.call('A', CU_POINTER_ATTRIBUTE_MEMORY_TYPE).value == CU_MEMORYTYPE_DEVICE);
  REQUIRE(peer.call('A', CU_POINTER_ATTRIBUTE_RANGE_SIZE, 999).value == 1000);
  REQUIRE(peer.call('A', CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE).value == 0);
  REQUIRE(peer.call('A', CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).value == 0);
  // Writes go both ways.
  REQUIRE(peer.call('W', 100, 50, 0x77).rc == CUDA_SUCCESS);
  REQUIRE(all_equal(small[2] + 100, 50, 0x77));
  REQUIRE(all_equal(small[2], 100, 0x12));
  REQUIRE(all_equal(small[1], 1000, 0x11));  // the neighbours are untouched
  REQUIRE(all_equal(small[3], 1000, 0x13));
  CU_OK(cuMemsetD8(small[2], 0x42, 1000));
  REQUIRE(peer.call('R', 0, 1000, 0x42).rc == 0);
  // A second open of the same handle: the same address, one more reference.
  REQUIRE(peer.call('O', 0, 0, 0, &handle).value == opened.value);
  REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  REQUIRE(peer.call('R', 0, 1000, 0x42).rc == 0);
  REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  REQUIRE(peer.call('R', 0, 1, 0x42).rc == CUDA_ERROR_INVALID_VALUE);  // unmapped
  REQUIRE(peer.call('C').rc == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(peer.quit() == 0);
  for (CUdeviceptr d : small) CU_OK(cuMemFree(d));
}

TEST_CASE("legacy IPC: a large block, opened in this process from another's export") {
  primary();
  Peer exporter;
  Reply exported = exporter.call('E', 0, 3 * kMiB, 0x5c);
  REQUIRE(exported.rc == CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  CU_OK(cuIpcOpenMemHandle(&ptr, exported.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  REQUIRE(all_equal(ptr, 3 * kMiB, 0x5c));
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CU_OK(cuMemGetAddressRange(&base, &bytes, ptr + kMiB));
  REQUIRE(base == ptr);
  REQUIRE(bytes == 3 * kMiB);
  REQUIRE(cuMemFree(ptr) == CUDA_ERROR_INVALID_VALUE);  // not cuMemAlloc memory here
  CUipcMemHandle reexport;
  REQUIRE(cuIpcGetMemHandle(&reexport, ptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuIpcCloseMemHandle(ptr + 4096) == CUDA_ERROR_INVALID_VALUE);
  // The v1 entry point (cuda.h maps the name to _v2): same behaviour, and
  // a second open of the handle is one more reference to the same mapping.
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  CU_OK(cuGetProcAddress_v2("cuIpcOpenMemHandle", &pfn, 4010, 0, &status));
  CUdeviceptr again = 0;
  CU_OK(reinterpret_cast<PFN_cuIpcOpenMemHandle_v11000>(pfn)(&again, exported.handle,
                                                             CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  REQUIRE(again == ptr);
  CU_OK(cuIpcCloseMemHandle(ptr));
  REQUIRE(all_equal(ptr, 3 * kMiB, 0x5c));
  CU_OK(cuIpcCloseMemHandle(ptr));
  REQUIRE(cuIpcCloseMemHandle(ptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(exporter.quit() == 0);
}

TEST_CASE("legacy IPC: what cannot be opened answers an error, never a crash") {
  primary();
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, 4096));
  CUipcMemHandle handle;
  CU_OK(cuIpcGetMemHandle(&handle, d));
  CUdeviceptr ptr = 0;
  // In the exporting process itself: the driver's "invalid device context".
  REQUIRE(cuIpcOpenMemHandle(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
          CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuIpcOpenMemHandle(nullptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
          CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuIpcGetMemHandle(nullptr, d) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuIpcGetMemHandle(&handle, 0) == CUDA_ERROR_INVALID_VALUE);

  Peer peer;
  REQUIRE(peer.call('O', 0, 0, 0, &handle).rc == CUDA_SUCCESS);
  REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  CUipcMemHandle garbage;
  memset(&garbage, 0, sizeof garbage);
  REQUIRE(peer.call('O', 0, 0, 0, &garbage).rc == CUDA_ERROR_INVALID_VALUE);
  for (int i = 0; i < 64; ++i) garbage.reserved[i] = char(i * 37 + 11);
  REQUIRE(peer.call('O', 0, 0, 0, &garbage).rc == CUDA_ERROR_INVALID_VALUE);
  // Every single flipped bit of a good handle.
  for (int bit = 0; bit < 64 * 8; bit += 7) {
    CUipcMemHandle flipped = handle;
    flipped.reserved[bit / 8] = char(flipped.reserved[bit / 8] ^ (1 << (bit % 8)));
    REQUIRE(peer.call('O', 0, 0, 0, &flipped).rc == CUDA_ERROR_INVALID_VALUE);
  }
  // Well-formed handles naming what is no exported block.
  REQUIRE(peer.call('O', 0, 0, 0, &handle).rc == CUDA_SUCCESS);  // the unforged one opens
  REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  const CUipcMemHandle fakes[] = {
      forged(handle, 12, int32_t(0)),         // another fd of the exporter: not its memory file
      forged(handle, 12, int32_t(100000)),    // no such fd
      forged(handle, 8, int32_t(1)),          // another process (init)
      forged(handle, 16, uint64_t(12345)),    // the exporter's pid, but another start time
      forged(handle, 24, uint64_t(1)),        // another inode
      forged(handle, 40, uint64_t(1) << 62),  // past the end of the file
      forged(handle, 32, ~uint64_t(0) - 10),  // offset + bytes overflows
  };
  for (const CUipcMemHandle& fake_handle : fakes)
    REQUIRE(peer.call('O', 0, 0, 0, &fake_handle).rc == CUDA_ERROR_INVALID_VALUE);
  // Flags other than lazy peer access.
  CUdeviceptr got = 0;
  REQUIRE(cuIpcOpenMemHandle(&got, handle, 0x80) == CUDA_ERROR_INVALID_VALUE);
  // No current context.
  CUcontext saved = nullptr;
  CU_OK(cuCtxPopCurrent(&saved));
  REQUIRE(cuIpcOpenMemHandle(&got, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
          CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuIpcGetMemHandle(&handle, d) == CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(cuCtxPushCurrent(saved));

  // VMM memory has no legacy handle.
  CUmemAllocationProp prop = shareable_prop(0);
  CUmemGenericAllocationHandle vmm = 0;
  CU_OK(cuMemCreate(&vmm, 2 * kMiB, &prop, 0));
  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, 2 * kMiB, 0, 0, 0));
  CU_OK(cuMemMap(va, 2 * kMiB, 0, vmm, 0));
  REQUIRE(cuIpcGetMemHandle(&handle, va) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemUnmap(va, 2 * kMiB));
  CU_OK(cuMemAddressFree(va, 2 * kMiB));
  CU_OK(cuMemRelease(vmm));
  REQUIRE(peer.quit() == 0);
  CU_OK(cuMemFree(d));
}

TEST_CASE("legacy IPC: a handle of a dead exporter answers INVALID_VALUE at once") {
  primary();
  Peer exporter;
  Reply exported = exporter.call('E', 0, 4096, 0x33);
  REQUIRE(exported.rc == CUDA_SUCCESS);
  REQUIRE(exporter.quit() == 0);
  const auto start = std::chrono::steady_clock::now();
  CUdeviceptr ptr = 0;
  REQUIRE(cuIpcOpenMemHandle(&ptr, exported.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ==
          CUDA_ERROR_INVALID_VALUE);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

TEST_CASE("legacy IPC: the exporter's free leaves the importer's bytes alone") {
  primary();
  CUdeviceptr block = 0;
  CU_OK(cuMemAlloc(&block, 3 * kMiB));
  CU_OK(cuMemsetD8(block, 0x11, 3 * kMiB));
  CUdeviceptr small = 0;
  CU_OK(cuMemAlloc(&small, 512));
  CU_OK(cuMemsetD8(small, 0x21, 512));
  CUipcMemHandle big_handle, small_handle;
  CU_OK(cuIpcGetMemHandle(&big_handle, block));
  CU_OK(cuIpcGetMemHandle(&small_handle, small));
  Peer big_peer, small_peer;
  REQUIRE(big_peer.call('O', 0, 0, 0, &big_handle).rc == CUDA_SUCCESS);
  REQUIRE(small_peer.call('O', 0, 0, 0, &small_handle).rc == CUDA_SUCCESS);
  const size_t before = free_bytes();
  CU_OK(cuMemFree(block));
  CU_OK(cuMemFree(small));
  REQUIRE(free_bytes() > before);  // the exporter's accounting lets go
  // New allocations of the same sizes, written over: none of it shows.
  std::vector<CUdeviceptr> fresh;
  for (int i = 0; i < 8; ++i) {
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, i % 2 ? 3 * kMiB : 512));
    CU_OK(cuMemsetD8(d, 0x99, i % 2 ? 3 * kMiB : 512));
    fresh.push_back(d);
  }
  REQUIRE(big_peer.call('R', 0, 3 * kMiB, 0x11).rc == 0);
  REQUIRE(small_peer.call('R', 0, 512, 0x21).rc == 0);
  REQUIRE(big_peer.call('C').rc == CUDA_SUCCESS);
  REQUIRE(small_peer.call('C').rc == CUDA_SUCCESS);
  for (CUdeviceptr d : fresh) CU_OK(cuMemFree(d));
}

TEST_CASE("legacy IPC: 1000 get/open/close cycles leak no file descriptor") {
  primary();
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, 64 * 1024));
  Peer peer;
  CUipcMemHandle handle;
  CU_OK(cuIpcGetMemHandle(&handle, d));
  REQUIRE(peer.call('O', 0, 0, 0, &handle).rc == CUDA_SUCCESS);  // warm up
  REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  const int own_before = open_fds();
  const uint64_t peer_before = peer.call('F').value;
  for (int i = 0; i < 1000; ++i) {
    CU_OK(cuIpcGetMemHandle(&handle, d));
    REQUIRE(peer.call('O', 0, 0, 0, &handle).rc == CUDA_SUCCESS);
    REQUIRE(peer.call('C').rc == CUDA_SUCCESS);
  }
  REQUIRE(open_fds() == own_before);
  REQUIRE(peer.call('F').value == peer_before);
  CU_OK(cuMemFree(d));
}

TEST_CASE("legacy IPC: another user's process cannot open the handle") {
  if (geteuid() != 0) {
    WARN("skipped: not root, so the importer cannot switch to another uid");
    return;
  }
  primary();
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, 4096));
  CUipcMemHandle handle;
  CU_OK(cuIpcGetMemHandle(&handle, d));
  Peer stranger(/*as_nobody=*/true);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(stranger.call('O', 0, 0, 0, &handle).rc == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  REQUIRE(stranger.quit() == 0);
  CU_OK(cuMemFree(d));
}

// --- shareable VMM handles --------------------------------------------------------

TEST_CASE("shareable VMM: two processes map one allocation and see each other's writes") {
  primary();
  int supported = -1;
  CU_OK(cuDeviceGetAttribute(&supported,
                             CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
  REQUIRE(supported == 1);
  CU_OK(
      cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  REQUIRE(supported == 1);
  const size_t bytes = 4 * kMiB;
  const CUmemAllocationProp prop = shareable_prop(0);
  CUmemGenericAllocationHandle handle = 0;
  CU_OK(cuMemCreate(&handle, bytes, &prop, 0));
  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
  CU_OK(cuMemMap(va, bytes, 0, handle, 0));
  const CUmemAccessDesc desc = read_write(0);
  CU_OK(cuMemSetAccess(va, bytes, &desc, 1));
  memset(host(va), 0x33, bytes);
  int fd = -1;
  CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  REQUIRE(fd >= 0);

  Peer peer;
  Reply imported = peer.call('I', 0, bytes, 0, nullptr, fd);
  close(fd);
  REQUIRE(imported.rc == CUDA_SUCCESS);
  REQUIRE(imported.value == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);  // the exporter's prop
  REQUIRE(peer.call('R', 0, bytes, 0x33).rc == 0);
  REQUIRE(peer.call('W', kMiB, 4096, 0x44).rc == CUDA_SUCCESS);
  REQUIRE(all_equal(va + kMiB, 4096, 0x44));
  REQUIRE(all_equal(va, kMiB, 0x33));
  memset(host(va), 0x55, bytes);
  REQUIRE(peer.call('R', 0, bytes, 0x55).rc == 0);
  // The exporter lets go of everything: the importer's mapping holds the memory.
  CU_OK(cuMemUnmap(va, bytes));
  CU_OK(cuMemRelease(handle));
  REQUIRE(peer.call('R', 0, bytes, 0x55).rc == 0);
  REQUIRE(peer.call('U').rc == CUDA_SUCCESS);
  REQUIRE(peer.quit() == 0);
  CU_OK(cuMemAddressFree(va, bytes));
}

TEST_CASE("shareable VMM: export, import, retain and properties answer as the driver") {
  primary();
  const size_t before = free_bytes();
  CUmemAllocationProp prop = shareable_prop(0);
  prop.allocFlags.gpuDirectRDMACapable = 1;
  size_t granularity = 0;
  CU_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  REQUIRE(granularity == 2 * kMiB);
  CUmemGenericAllocationHandle handle = 0;
  CU_OK(cuMemCreate(&handle, 2 * kMiB, &prop, 0));
  REQUIRE(free_bytes() == before - 2 * kMiB);
  CUmemAllocationProp back{};
  CU_OK(cuMemGetAllocationPropertiesFromHandle(&back, handle));
  REQUIRE(memcmp(&back, &prop, sizeof prop) == 0);

  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(nullptr, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1) ==
          CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0) ==
          CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(cuMemExportToShareableHandle(&fd, 0xdead, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
          CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  REQUIRE((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);

  // Imported in its own process: the same memory, counted once, one more reference.
  CUmemGenericAllocationHandle again = 0;
  CU_OK(cuMemImportFromShareableHandle(&again, reinterpret_cast<void*>(uintptr_t(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  REQUIRE(again == handle);
  REQUIRE(free_bytes() == before - 2 * kMiB);
  CU_OK(cuMemRelease(again));

  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, 4 * kMiB, 0, 0, 0));
  CU_OK(cuMemMap(va + 2 * kMiB, 2 * kMiB, 0, handle, 0));
  CUmemGenericAllocationHandle retained = 0;
  CU_OK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 3 * kMiB)));
  REQUIRE(retained == handle);
  REQUIRE(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)) ==
          CUDA_ERROR_INVALID_VALUE);  // reserved, not mapped
  unsigned long long types = 0;
  CU_OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va + 2 * kMiB));
  REQUIRE(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CU_OK(cuMemRelease(handle));
  CU_OK(cuMemRelease(retained));  // the last reference; the mapping holds the memory
  REQUIRE(free_bytes() == before - 2 * kMiB);
  REQUIRE(cuMemRelease(handle) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemUnmap(va + 2 * kMiB, 2 * kMiB));
  REQUIRE(free_bytes() == before);
  CU_OK(cuMemAddressFree(va, 4 * kMiB));

  // Not created shareable: no fd to be had.
  CUmemAllocationProp plain = shareable_prop(0);
  plain.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CU_OK(cuMemCreate(&handle, 2 * kMiB, &plain, 0));
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
          CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemRelease(handle));

  // Handle types the fake (a Linux machine without IMEX) cannot give.
  CUmemAllocationProp other = shareable_prop(0);
  other.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32;
  REQUIRE(cuMemCreate(&handle, 2 * kMiB, &other, 0) == CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(cuMemGetAllocationGranularity(&granularity, &other, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          CUDA_ERROR_NOT_SUPPORTED);
  other.requestedHandleTypes = CUmemAllocationHandleType(0x100);
  REQUIRE(cuMemCreate(&handle, 2 * kMiB, &other, 0) == CUDA_ERROR_INVALID_VALUE);

  // Imports of what is no exported allocation.
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  REQUIRE(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(uintptr_t(pipe_fds[0])),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_INVALID_VALUE);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  REQUIRE(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(uintptr_t(pipe_fds[0])),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(~uintptr_t(0)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemImportFromShareableHandle(&handle, nullptr, CU_MEM_HANDLE_TYPE_WIN32) ==
          CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(free_bytes() == before);
}

TEST_CASE("shareable VMM: 1000 export/close and import/release cycles leak no fd") {
  primary();
  const CUmemAllocationProp prop = shareable_prop(0);
  CUmemGenericAllocationHandle handle = 0;
  CU_OK(cuMemCreate(&handle, 2 * kMiB, &prop, 0));
  Peer peer;
  int fd = -1;
  CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  REQUIRE(peer.call('I', 0, 2 * kMiB, 0, nullptr, fd).rc == CUDA_SUCCESS);  // warm up
  close(fd);
  REQUIRE(peer.call('U').rc == CUDA_SUCCESS);
  const int own_before = open_fds();
  const uint64_t peer_before = peer.call('F').value;
  for (int i = 0; i < 1000; ++i) {
    CU_OK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUmemGenericAllocationHandle again = 0;
    CU_OK(cuMemImportFromShareableHandle(&again, reinterpret_cast<void*>(uintptr_t(fd)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CU_OK(cuMemRelease(again));
    if (i % 10 == 0) {
      REQUIRE(peer.call('I', 0, 2 * kMiB, 0, nullptr, fd).rc == CUDA_SUCCESS);
      REQUIRE(peer.call('U').rc == CUDA_SUCCESS);
    }
    close(fd);
  }
  REQUIRE(open_fds() == own_before);
  REQUIRE(peer.call('F').value == peer_before);
  CU_OK(cuMemRelease(handle));
}

// --- run with FAKECUDA_NO_POSIX_FD=1 ----------------------------------------------

TEST_CASE("without POSIX fd support the handle type is refused", "[noposixfd]") {
  primary();
  int supported = -1;
  CU_OK(cuDeviceGetAttribute(&supported,
                             CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
  REQUIRE(supported == 0);
  CU_OK(
      cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  REQUIRE(supported == 1);
  CUmemAllocationProp prop = shareable_prop(0);
  CUmemGenericAllocationHandle handle = 0;
  REQUIRE(cuMemCreate(&handle, 2 * kMiB, &prop, 0) == CUDA_ERROR_NOT_SUPPORTED);
  size_t granularity = 0;
  REQUIRE(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          CUDA_ERROR_NOT_SUPPORTED);
  REQUIRE(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(uintptr_t(0)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_ERROR_NOT_SUPPORTED);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CU_OK(cuMemCreate(&handle, 2 * kMiB, &prop, 0));
  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
          CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemRelease(handle));
  // Legacy IPC does not depend on it.
  CUdeviceptr d = 0;
  CU_OK(cuMemAlloc(&d, 4096));
  CUipcMemHandle ipc;
  CU_OK(cuIpcGetMemHandle(&ipc, d));
  CU_OK(cuMemFree(d));
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--ipc-peer") == 0)
    return peer_main(argc >= 3 && strcmp(argv[2], "nobody") == 0);
  signal(SIGPIPE, SIG_IGN);  // a dead peer is a failed REQUIRE, not a dead test
  return Catch::Session().run(argc, argv);
}
