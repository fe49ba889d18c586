// interpose/pool/ipc.cpp: CUDA IPC of pool blocks (see ipc.h and
// docs/IPC.md): the handle, the exporter's registry and thread, the
// importer's mappings.
#include "interpose/pool/ipc.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "interpose/live/segment.h"
#include "interpose/log.h"
#include "interpose/pool/ipc_wire.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/service_thread.h"
#include "policy/clock.h"
#include "policy/options.h"
#include "policy/units.h"

namespace pagefast::ipc {

std::atomic<int> g_exports{0};

namespace {

using policy::kGranuleBytes;

// ---- the handle ---------------------------------------------------------------

constexpr char kMagic[8] = {'p', 'g', 'f', 's', 't', 'I', 'P', 'C'};
constexpr uint16_t kVersion = 1;  // of the handle

// The 64 bytes of a pagefast IPC handle (docs/IPC.md), little-endian as
// the hosts that run CUDA are.
struct Wire {
  char magic[8];
  uint16_t version;
  uint16_t flags;
  uint32_t device;      // the exporter's device ordinal
  uint32_t pid;         // the exporter, in its pid namespace
  uint32_t check;       // FNV-1a of every other byte
  uint64_t start_time;  // the exporter's start, clock ticks after boot
  uint64_t pidns;       // the inode of the exporter's pid namespace
  uint64_t export_id;
  uint64_t bytes;       // the block's size, as allocated
  uint64_t offset;      // the block's offset inside its first granule
};
static_assert(sizeof(Wire) == sizeof(CUipcMemHandle), "a pagefast handle fills a CUipcMemHandle exactly");

uint32_t checksum(const Wire& w) {
  Wire copy = w;
  copy.check = 0;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&copy);
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < sizeof copy; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// ---- the wire protocol ----------------------------------------------------------

// The request, the reply's header and the socket's name: ipc_wire.h,
// shared with pagefast-ctl.
using wire::kOpClose;
using wire::kOpOpen;
using wire::kOpSleep;
using wire::kOpStatus;
using wire::kOpWake;
using wire::kReplyMagic;
using wire::kRequestMagic;
using wire::Request;
// A block maps at most this many chunk segments (a stitch has at most 64
// pieces before growth; under pressure more: those are not exported).
constexpr int kMaxPieces = 128;
constexpr int kTimeoutMs = 2000;

struct ReplyPiece {
  uint64_t chunk_offset;  // bytes into the chunk whose descriptor comes in this position
  uint64_t bytes;
  uint64_t chunk_bytes;   // the whole chunk
};

struct Reply {
  uint32_t magic;
  uint32_t status;  // a CUresult
  uint32_t piece_count;
  uint32_t reserved;
  ReplyPiece pieces[kMaxPieces];
};
static_assert(offsetof(Reply, pieces) == sizeof(wire::ReplyHeader), "a reply starts with the wire's header");

// ---- who this process is ----------------------------------------------------------

struct Identity {
  pid_t pid = 0;
  uint64_t start_time = 0;
  uint64_t pidns = 0;
};

const Identity& self() {
  static thread_local Identity cached;  // re-read after a fork changes the pid
  const pid_t pid = ::getpid();
  if (cached.pid != pid) {
    cached.pid = pid;
    // The ids the live-stats segment is named by, too (live/segment.h).
    const live::Identity who = live::own_identity();
    cached.start_time = who.start_ticks;
    cached.pidns = who.pidns;
  }
  return cached;
}

// PAGEFAST_IPC_DIR, read once; ignored in a secure-execution process (as
// every path variable of pagefast is: docs/SECURITY.md).
std::string ipc_dir() {
  static std::once_flag once;
  static std::string* dir = nullptr;
  std::call_once(once, [] {
    const char* v = std::getenv(option_name(Opt::IpcDir));
    if (v && *v && !hidden_in_secure_execution(Opt::IpcDir, getauxval(AT_SECURE))) dir = new std::string(v);
  });
  return dir ? *dir : std::string();
}

// The exporter's socket (ipc_wire.h), under PAGEFAST_IPC_DIR if set.
bool socket_address(uint32_t pid, uint64_t start_time, uint64_t pidns, sockaddr_un* addr, socklen_t* len) {
  return wire::socket_address(uint32_t(::geteuid()), pidns, pid, start_time, ipc_dir(), addr, len);
}

bool send_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

uid_t peer_uid(int fd, pid_t* pid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return uid_t(-1);
  if (pid) *pid = cred.pid;
  return cred.uid;
}

// ---- the exporter ---------------------------------------------------------------

struct Export {
  int device;
  policy::DevicePool* pool;
  uint64_t base_addr;
  uint64_t bytes;
  uint64_t buffer_id;
  uint64_t first_granule_addr;
  std::vector<policy::PhysicalPiece> pieces;
  uint64_t holders = 0;  // opens not yet closed, over all connections
  bool freed = false;    // the program freed it while held
};

std::atomic<bool> g_shareable[pool::kMaxDevices];
std::atomic<FreeHeld> g_free_held{nullptr};

std::mutex g_export_mutex;
std::map<uint64_t, Export>* g_by_id = nullptr;  // export id -> export
std::map<uint64_t, uint64_t>* g_by_addr = nullptr;  // block base -> export id
uint64_t g_next_export_id = 1;
pid_t g_exporter_pid = 0;  // the process whose thread serves; 0: none yet
std::atomic<bool> g_warned_unshareable{false};
std::atomic<bool> g_warned_export{false};

const char* error_name(CUresult r) {
  const RealDriver* real = real_driver();
  const char* name = nullptr;
  if (!real || !real->cuGetErrorName || real->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return "an error";
  return name;
}

struct Connection {
  int fd;
  size_t got = 0;
  unsigned char buf[sizeof(Request)];
  std::map<uint64_t, uint64_t> opens;  // export id -> opens held through this connection
};

// REQUIRES g_export_mutex. Drops an export the program freed once nothing
// holds it; the block goes back to the pool (after the lock is dropped).
bool drop_if_done(std::map<uint64_t, Export>::iterator it, std::vector<uint64_t>* to_free) {
  Export& e = it->second;
  if (!e.freed || e.holders > 0) return false;
  to_free->push_back(e.base_addr);
  g_by_addr->erase(e.base_addr);
  g_by_id->erase(it);
  g_exports.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void free_held(const std::vector<uint64_t>& addrs) {
  FreeHeld free_fn = g_free_held.load(std::memory_order_acquire);
  for (uint64_t addr : addrs)
    if (free_fn) free_fn(addr);
}

// One exported descriptor per chunk, made at its first open and sent as
// often as asked (SCM_RIGHTS gives the receiver its own copy): the driver's
// export costs about 0.6 ms a call on the H200 (docs/IPC.md). Closed when
// the pool releases the chunk (forget_chunk), so that no descriptor keeps
// released memory alive.
std::mutex g_fd_mutex;
std::map<uint64_t, int>* g_chunk_fds = nullptr;  // chunk handle -> descriptor

CUresult chunk_fd(const RealDriver* real, uint64_t chunk, int* fd_out) {
  std::lock_guard<std::mutex> guard(g_fd_mutex);
  if (!g_chunk_fds) g_chunk_fds = new std::map<uint64_t, int>();
  auto it = g_chunk_fds->find(chunk);
  // The caller gets its own copy to send and close: a release of the
  // chunk meanwhile cannot close (and a reuse of the number cannot
  // replace) what is being sent.
  if (it != g_chunk_fds->end()) {
    *fd_out = ::fcntl(it->second, F_DUPFD_CLOEXEC, 0);
    return *fd_out >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  }
  int fd = -1;
  const CUresult r = real->cuMemExportToShareableHandle(&fd, CUmemGenericAllocationHandle(chunk),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) return r;
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  (*g_chunk_fds)[chunk] = fd;
  *fd_out = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return *fd_out >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

uint64_t now_ns() { return policy::monotonic_now_ns(); }

std::atomic<Control> g_control{nullptr};

// Answers one control request (the pool's sleep/wake/status): a reply
// header whose status is the answer as a signed number.
void serve_control(Connection& c, uint16_t op, uint64_t arg) {
  Control control = g_control.load(std::memory_order_acquire);
  const int answer = control ? control(op, arg) : -1;
  Reply reply{};
  reply.magic = kReplyMagic;
  reply.status = uint32_t(int32_t(answer));
  send_all(c.fd, &reply, offsetof(Reply, pieces));
}

// Answers one open: the chunk descriptors of the export, with SCM_RIGHTS.
void serve_open(Connection& c, uint64_t export_id) {
  Reply reply{};
  reply.magic = kReplyMagic;
  reply.status = CUDA_ERROR_INVALID_VALUE;
  std::vector<int> fds;
  const RealDriver* real = real_driver();
  {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    auto it = g_by_id ? g_by_id->find(export_id) : std::map<uint64_t, Export>::iterator();
    if (g_by_id && it != g_by_id->end() && !it->second.freed && real && real->cuMemExportToShareableHandle &&
        int(it->second.pieces.size()) <= kMaxPieces) {
      reply.status = CUDA_SUCCESS;
      const uint64_t t0 = now_ns();
      for (const policy::PhysicalPiece& piece : it->second.pieces) {
        int fd = -1;
        const CUresult r = chunk_fd(real, piece.chunk.value, &fd);
        if (r != CUDA_SUCCESS || fd < 0) {
          reply.status = r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
          if (!g_warned_export.exchange(true))
            log::write(LogLevel::Warn, "CUDA IPC: cuMemExportToShareableHandle answered {} for a pool chunk; another "
                       "process cannot open this process's pool blocks", error_name(r));
          break;
        }
        fds.push_back(fd);
        reply.pieces[reply.piece_count++] = {piece.offset.bytes(), piece.granules.bytes(), piece.chunk_granules.bytes()};
      }
      if (log::enabled(LogLevel::Debug))
        log::write(LogLevel::Debug, "CUDA IPC export: {} piece(s) in {} us", fds.size(), (now_ns() - t0) / 1000);
      if (reply.status == CUDA_SUCCESS) {
        ++it->second.holders;
        ++c.opens[export_id];
      }
    }
  }
  if (reply.status != CUDA_SUCCESS) {
    for (int fd : fds) ::close(fd);
    fds.clear();
    reply.piece_count = 0;
  }
  const size_t bytes = offsetof(Reply, pieces) + size_t(reply.piece_count) * sizeof(ReplyPiece);
  iovec iov{&reply, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
  if (!fds.empty()) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  for (int fd : fds) ::close(fd);
  // A reply that did not go out whole: the importer gives up on its own
  // (timeout); its hold is dropped with the connection.
  if (sent != ssize_t(bytes)) ::shutdown(c.fd, SHUT_RDWR);
}

void serve_close(Connection& c, uint64_t export_id, std::vector<uint64_t>* to_free) {
  auto mine = c.opens.find(export_id);
  if (mine == c.opens.end()) return;  // not held through this connection
  if (--mine->second == 0) c.opens.erase(mine);
  std::lock_guard<std::mutex> guard(g_export_mutex);
  auto it = g_by_id->find(export_id);
  if (it == g_by_id->end()) return;
  if (it->second.holders > 0) --it->second.holders;
  drop_if_done(it, to_free);
}

// The connection ended (closed, or its process died): every hold through
// it ends.
void drop_connection(Connection& c) {
  std::vector<uint64_t> to_free;
  {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    for (const auto& held : c.opens) {
      auto it = g_by_id->find(held.first);
      if (it == g_by_id->end()) continue;
      it->second.holders = it->second.holders > held.second ? it->second.holders - held.second : 0;
      drop_if_done(it, &to_free);
    }
  }
  c.opens.clear();
  ::close(c.fd);
  free_held(to_free);
}

void* exporter_main(void* arg) {
  const int listener = int(reinterpret_cast<intptr_t>(arg));
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({listener, POLLIN, 0});
    for (const Connection& c : conns) fds.push_back({c.fd, POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return nullptr;
    }
    // Connections first (indexes match fds[1..]), then new ones.
    for (size_t i = conns.size(); i-- > 0;) {
      const short ev = fds[i + 1].revents;
      if (!ev) continue;
      Connection& c = conns[i];
      bool done = (ev & (POLLERR | POLLNVAL)) != 0;
      if (!done && (ev & (POLLIN | POLLHUP))) {
        const ssize_t got = ::recv(c.fd, c.buf + c.got, sizeof c.buf - c.got, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) done = true;
        if (got > 0) c.got += size_t(got);
        if (!done && c.got == sizeof c.buf) {
          Request req;
          std::memcpy(&req, c.buf, sizeof req);
          c.got = 0;
          if (req.magic != kRequestMagic || req.version != wire::kVersion) {
            done = true;
          } else if (req.op == kOpOpen) {
            serve_open(c, req.arg);
          } else if (req.op == kOpSleep || req.op == kOpWake || req.op == kOpStatus) {
            serve_control(c, req.op, req.arg);
          } else if (req.op == kOpClose) {
            std::vector<uint64_t> to_free;
            serve_close(c, req.arg, &to_free);
            free_held(to_free);
          } else {
            done = true;
          }
        }
      }
      if (done) {
        drop_connection(c);
        conns.erase(conns.begin() + long(i));
      }
    }
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        // Only this user's processes may have the memory.
        if (peer_uid(fd, nullptr) != ::geteuid()) {
          ::close(fd);
        } else {
          Connection c;
          c.fd = fd;
          conns.push_back(std::move(c));
        }
      }
    }
  }
}

// A socket file to remove at exit (empty for an abstract socket). Plain
// storage: no initialiser of ours may run after a hook already has.
char g_socket_path[sizeof(sockaddr_un::sun_path)];
void remove_socket_file() {
  if (g_socket_path[0]) ::unlink(g_socket_path);
}

// REQUIRES g_export_mutex. Starts the exporter thread of this process
// once; false (with a warning) if it cannot.
bool start_exporter_locked() {
  const pid_t pid = ::getpid();
  if (g_exporter_pid == pid) return true;
  const Identity& me = self();
  sockaddr_un addr;
  socklen_t len = 0;
  if (!me.start_time || !socket_address(uint32_t(pid), me.start_time, me.pidns, &addr, &len)) {
    log::write(LogLevel::Warn, "CUDA IPC: no usable socket address (PAGEFAST_IPC_DIR too long?); pool memory "
                               "cannot be shared by this process");
    return false;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const mode_t old_mask = ::umask(077);  // a socket file only this user can connect to
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len);
  ::umask(old_mask);
  if (rc != 0 || ::listen(fd, 64) != 0) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot listen on the exporter socket ({}); pool memory cannot be "
                               "shared by this process",
               std::strerror(errno));
    ::close(fd);
    return false;
  }
  if (addr.sun_path[0]) {
    std::memcpy(g_socket_path, addr.sun_path, sizeof g_socket_path);
    std::atexit(&remove_socket_file);
  }
  const int err = start_service_thread(nullptr, &exporter_main, reinterpret_cast<void*>(intptr_t(fd)), "pagefast-ipc");
  if (err != 0) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot start the exporter thread: {}", std::strerror(err));
    ::close(fd);
    return false;
  }
  g_exporter_pid = pid;
  return true;
}

// ---- the importer ----------------------------------------------------------------

// Where an open's time goes, at PAGEFAST_LOG=debug (docs/IPC.md).
struct OpenTimes {
  uint64_t import_ns = 0, map_ns = 0, access_ns = 0;
};

struct ExporterKey {
  uint64_t pidns, start_time;
  uint32_t pid;
  bool operator<(const ExporterKey& o) const {
    if (pid != o.pid) return pid < o.pid;
    if (start_time != o.start_time) return start_time < o.start_time;
    return pidns < o.pidns;
  }
};

struct Link {
  int fd = -1;
  uint64_t imports = 0;  // live imports through it
};

struct Import {
  ExporterKey key;
  uint64_t export_id;
  CUdeviceptr va;
  size_t map_bytes;
  uint64_t refs;
};

std::mutex g_import_mutex;
std::map<ExporterKey, Link>* g_links = nullptr;
std::map<CUdeviceptr, Import>* g_imports = nullptr;  // handed-out pointer -> import

int connect_to(const ExporterKey& key, const Wire& w) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!socket_address(w.pid, w.start_time, w.pidns, &addr, &len)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{kTimeoutMs / 1000, (kTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  pid_t peer_pid = 0;
  // The exporter must be this user's, and (in one pid namespace) the pid
  // the handle names.
  if (rc != 0 || peer_uid(fd, &peer_pid) != ::geteuid() ||
      (key.pidns == self().pidns && uint32_t(peer_pid) != key.pid)) {
    ::close(fd);
    return -1;
  }
  (void)key;
  return fd;
}

// Receives a reply and its descriptors; false on timeout or a bad reply.
bool receive_reply(int fd, Reply* reply, std::vector<int>* fds) {
  std::memset(reply, 0, sizeof *reply);
  iovec iov{reply, sizeof *reply};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  for (cmsghdr* cm = got > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; cm; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int one;
        std::memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof one);
        fds->push_back(one);
      }
    }
  const size_t header = offsetof(Reply, pieces);
  if (got < ssize_t(header) || reply->magic != kReplyMagic || (msg.msg_flags & MSG_CTRUNC)) return false;
  if (reply->status != CUDA_SUCCESS) return true;
  // The pieces may come in more than one read on a stream socket.
  const size_t want = header + size_t(reply->piece_count) * sizeof(ReplyPiece);
  if (reply->piece_count > uint32_t(kMaxPieces) || fds->size() != reply->piece_count) return false;
  size_t have = size_t(got);
  while (have < want) {
    const ssize_t more = ::recv(fd, reinterpret_cast<char*>(reply) + have, want - have, 0);
    if (more < 0 && errno == EINTR) continue;
    if (more <= 0) return false;
    have += size_t(more);
  }
  return true;
}

void send_close(int fd, uint64_t export_id) {
  Request req{kRequestMagic, wire::kVersion, kOpClose, export_id, {0, 0}};
  send_all(fd, &req, sizeof req);
}

// Whether the pieces can be mapped as whole chunks side by side: every
// piece but the first starts its chunk, every piece but the last ends it.
bool whole_chunks_fit(const Reply& reply) {
  for (uint32_t i = 0; i < reply.piece_count; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    if (i > 0 && p.chunk_offset != 0) return false;
    if (i + 1 < reply.piece_count && p.chunk_offset + p.bytes != p.chunk_bytes) return false;
  }
  return true;
}

// Maps the exporter's chunks at fresh address space, opened for `device`.
// Whole chunks where they fit (a mapping at offset 0 of its handle, which
// every driver takes), else each piece at its offset. *lead_out is where
// the first piece starts in the mapping.
CUresult map_import(const Reply& reply, const std::vector<int>& fds, int device, CUdeviceptr* va_out,
                    size_t* bytes_out, uint64_t* lead_out, OpenTimes* times) {
  const RealDriver* real = real_driver();
  if (!real || !real->cuMemImportFromShareableHandle || !real->cuMemAddressReserve || !real->cuMemMap ||
      !real->cuMemSetAccess || !real->cuMemUnmap || !real->cuMemRelease || !real->cuMemAddressFree)
    return CUDA_ERROR_NOT_SUPPORTED;
  const bool whole = whole_chunks_fit(reply);
  size_t total = 0;
  for (uint32_t i = 0; i < reply.piece_count; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    if (p.bytes == 0 || p.bytes % kGranuleBytes || p.chunk_offset % kGranuleBytes || p.chunk_bytes % kGranuleBytes ||
        p.chunk_offset + p.bytes > p.chunk_bytes || total + p.chunk_bytes < total)
      return CUDA_ERROR_INVALID_VALUE;
    total += whole ? p.chunk_bytes : p.bytes;
  }
  if (total == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr va = 0;
  CUresult r = real->cuMemAddressReserve(&va, total, kGranuleBytes, 0, 0);
  const char* failed = "cuMemAddressReserve";
  if (r != CUDA_SUCCESS) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot open a pool block of another process: {} answered {}", failed,
               error_name(r));
    return r;
  }
  size_t mapped = 0;
  std::vector<std::pair<CUdeviceptr, size_t>> maps;
  for (uint32_t i = 0; i < reply.piece_count && r == CUDA_SUCCESS; ++i) {
    const ReplyPiece& p = reply.pieces[i];
    CUmemGenericAllocationHandle h = 0;
    uint64_t t0 = now_ns();
    r = real->cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(uintptr_t(fds[i])),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    times->import_ns += now_ns() - t0;
    t0 = now_ns();
    if (r != CUDA_SUCCESS) {
      failed = "cuMemImportFromShareableHandle";
      break;
    }
    const size_t bytes = whole ? p.chunk_bytes : p.bytes;
    r = real->cuMemMap(va + mapped, bytes, whole ? 0 : p.chunk_offset, h, 0);
    // The mapping holds the memory from now on; the handle is not needed.
    real->cuMemRelease(h);
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
    r = real->cuMemSetAccess(va, total, &access, 1);
    times->access_ns = now_ns() - t0;
    failed = "cuMemSetAccess";
  }
  if (r != CUDA_SUCCESS) {
    log::write(LogLevel::Warn, "CUDA IPC: cannot open a pool block of another process: {} answered {} ({} piece(s), "
               "{} MiB{})", failed, error_name(r), reply.piece_count, total >> 20, whole ? ", whole chunks" : "");
    for (const auto& m : maps) real->cuMemUnmap(m.first, m.second);
    real->cuMemAddressFree(va, total);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_ERROR_MAP_FAILED;
  }
  *va_out = va;
  *bytes_out = total;
  *lead_out = whole ? reply.pieces[0].chunk_offset : 0;
  return CUDA_SUCCESS;
}

}  // namespace

void set_device_shareable(int device, bool shareable) {
  if (device >= 0 && device < pool::kMaxDevices) g_shareable[device].store(shareable, std::memory_order_release);
}

bool device_shareable(int device) {
  return device >= 0 && device < pool::kMaxDevices && g_shareable[device].load(std::memory_order_acquire);
}

void set_free_held(FreeHeld free_held) { g_free_held.store(free_held, std::memory_order_release); }

void forget_chunk(uint64_t chunk) {
  std::lock_guard<std::mutex> guard(g_fd_mutex);
  if (!g_chunk_fds) return;
  auto it = g_chunk_fds->find(chunk);
  if (it == g_chunk_fds->end()) return;
  ::close(it->second);
  g_chunk_fds->erase(it);
}

void set_control(Control control) { g_control.store(control, std::memory_order_release); }

bool start_control() {
  std::lock_guard<std::mutex> guard(g_export_mutex);
  return start_exporter_locked();
}

CUresult get_handle(policy::DevicePool* pool, policy::Span* span, CUdeviceptr dptr, CUipcMemHandle* handle) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  const int device = pool->device();
  if (!device_shareable(device)) {
    if (!g_warned_unshareable.exchange(true))
      log::write(LogLevel::Warn,
                 "cuIpcGetMemHandle on pool memory: device {} cannot share VMM memory through POSIX file "
                 "descriptors; run this program with PAGEFAST_CONF=pool:off to use CUDA IPC",
                 device);
    return CUDA_ERROR_INVALID_VALUE;
  }
  policy::DevicePool::Export found;
  try {
    if (!pool->export_of(span, dptr, &found)) return CUDA_ERROR_INVALID_VALUE;
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (found.pieces.empty() || found.pieces.size() > size_t(kMaxPieces)) return CUDA_ERROR_INVALID_VALUE;
  const Identity& me = self();
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof kMagic);
  w.version = kVersion;
  w.device = uint32_t(device);
  w.pid = uint32_t(me.pid);
  w.start_time = me.start_time;
  w.pidns = me.pidns;
  w.bytes = found.range.bytes;
  w.offset = found.range.base_addr - found.first_granule_addr;
  try {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    if (!start_exporter_locked()) return CUDA_ERROR_INVALID_VALUE;
    if (!g_by_id) {
      g_by_id = new std::map<uint64_t, Export>();
      g_by_addr = new std::map<uint64_t, uint64_t>();
    }
    // The same live allocation exports as the same handle.
    auto known = g_by_addr->find(found.range.base_addr);
    if (known != g_by_addr->end()) {
      auto it = g_by_id->find(known->second);
      if (it != g_by_id->end() && !it->second.freed && it->second.buffer_id == found.range.buffer_id) {
        w.export_id = it->first;
      } else if (it != g_by_id->end() && !it->second.freed) {
        // A stale export of an earlier block at this address (freed without
        // passing on_free: cannot happen while exports exist).
        g_by_id->erase(it);
        g_by_addr->erase(known);
        g_exports.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (!w.export_id) {
      Export e{device, pool, found.range.base_addr, found.range.bytes, found.range.buffer_id,
               found.first_granule_addr, std::move(found.pieces)};
      w.export_id = g_next_export_id++;
      (*g_by_id)[w.export_id] = std::move(e);
      (*g_by_addr)[found.range.base_addr] = w.export_id;
      g_exports.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  w.check = checksum(w);
  std::memcpy(handle, &w, sizeof w);
  return CUDA_SUCCESS;
}

bool on_free(CUdeviceptr dptr, CUresult* result) {
  std::lock_guard<std::mutex> guard(g_export_mutex);
  if (!g_by_addr) return false;
  auto known = g_by_addr->find(dptr);
  if (known == g_by_addr->end()) return false;
  auto it = g_by_id->find(known->second);
  if (it == g_by_id->end()) return false;
  Export& e = it->second;
  if (e.freed) {
    *result = CUDA_ERROR_INVALID_VALUE;  // freed already: a double free
    return true;
  }
  if (e.holders > 0) {
    // An importer still maps it: kept until the last one closes.
    e.freed = true;
    *result = CUDA_SUCCESS;
    return true;
  }
  g_by_addr->erase(known);
  g_by_id->erase(it);
  g_exports.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

bool try_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result) {
  Wire w;
  std::memcpy(&w, &handle, sizeof w);
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0 || w.check != checksum(w)) return false;
  (void)flags;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: access is set for the caller's device either way
  *result = CUDA_ERROR_INVALID_VALUE;
  if (!pdptr || w.version != kVersion || w.offset >= kGranuleBytes || w.bytes == 0) return true;
  const RealDriver* real = real_driver();
  CUcontext context = nullptr;
  CUdevice device = 0;
  if (!real || !real->cuCtxGetCurrent || real->cuCtxGetCurrent(&context) != CUDA_SUCCESS || !context ||
      !real->cuCtxGetDevice || real->cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    *result = CUDA_ERROR_INVALID_CONTEXT;
    return true;
  }
  const Identity& me = self();
  if (w.pid == uint32_t(me.pid) && w.start_time == me.start_time && w.pidns == me.pidns) {
    // The driver does not open a handle in the process that made it.
    *result = CUDA_ERROR_INVALID_CONTEXT;
    return true;
  }
  const ExporterKey key{w.pidns, w.start_time, w.pid};
  std::lock_guard<std::mutex> guard(g_import_mutex);
  try {
    if (!g_links) {
      g_links = new std::map<ExporterKey, Link>();
      g_imports = new std::map<CUdeviceptr, Import>();
    }
    // Opened already by this process: the same pointer, one more reference.
    for (auto& entry : *g_imports) {
      Import& im = entry.second;
      if (im.export_id == w.export_id && !(im.key < key) && !(key < im.key)) {
        ++im.refs;
        *pdptr = entry.first;
        *result = CUDA_SUCCESS;
        return true;
      }
    }
    const uint64_t t_start = now_ns();
    Link& link = (*g_links)[key];
    if (link.fd < 0) link.fd = connect_to(key, w);
    auto give_up_link = [&] {
      if (link.imports == 0) {
        if (link.fd >= 0) ::close(link.fd);
        g_links->erase(key);
      }
    };
    if (link.fd < 0) {
      give_up_link();  // the exporter is gone, or not this user's
      return true;
    }
    Request req{kRequestMagic, wire::kVersion, kOpOpen, w.export_id, {0, 0}};
    std::vector<int> fds;
    Reply* reply = new Reply();
    const uint64_t t_connected = now_ns();
    bool ok = send_all(link.fd, &req, sizeof req) && receive_reply(link.fd, reply, &fds);
    const uint64_t t_replied = now_ns();
    if (!ok) {
      // The exporter stopped answering: this link is finished.
      for (int fd : fds) ::close(fd);
      delete reply;
      if (link.imports == 0) {
        give_up_link();
      } else {
        ::shutdown(link.fd, SHUT_RDWR);
      }
      return true;
    }
    if (reply->status != CUDA_SUCCESS) {
      delete reply;
      give_up_link();
      return true;
    }
    CUdeviceptr va = 0;
    size_t map_bytes = 0;
    uint64_t lead = 0;
    OpenTimes times;
    const CUresult r = map_import(*reply, fds, int(device), &va, &map_bytes, &lead, &times);
    if (log::enabled(LogLevel::Debug))
      log::write(LogLevel::Debug, "CUDA IPC open: connect {} us, request {} us, import {} us, map {} us, access {} us "
                 "({} MiB)", (t_connected - t_start) / 1000, (t_replied - t_connected) / 1000, times.import_ns / 1000,
                 times.map_ns / 1000, times.access_ns / 1000, map_bytes >> 20);
    for (int fd : fds) ::close(fd);
    delete reply;
    if (r != CUDA_SUCCESS || lead + w.offset + w.bytes > map_bytes) {
      send_close(link.fd, w.export_id);
      if (r == CUDA_SUCCESS && real->cuMemUnmap) {
        real->cuMemUnmap(va, map_bytes);
        real->cuMemAddressFree(va, map_bytes);
      }
      give_up_link();
      *result = r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
      return true;
    }
    ++link.imports;
    const CUdeviceptr ptr = va + lead + w.offset;
    (*g_imports)[ptr] = Import{key, w.export_id, va, map_bytes, 1};
    *pdptr = ptr;
    *result = CUDA_SUCCESS;
  } catch (...) {
    *result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  return true;
}

bool try_close(CUdeviceptr dptr, CUresult* result) {
  std::lock_guard<std::mutex> guard(g_import_mutex);
  if (!g_imports) return false;
  auto it = g_imports->find(dptr);
  if (it == g_imports->end()) return false;
  Import& im = it->second;
  *result = CUDA_SUCCESS;
  if (--im.refs > 0) return true;
  const RealDriver* real = real_driver();
  if (real) {
    // Work queued on the mapping finishes before it goes, as with the
    // driver's own close.
    CUcontext context = nullptr;
    if (!pool::capture_active() && real->cuCtxGetCurrent && real->cuCtxGetCurrent(&context) == CUDA_SUCCESS &&
        context && real->cuCtxSynchronize)
      real->cuCtxSynchronize();
    if (real->cuMemUnmap) real->cuMemUnmap(im.va, im.map_bytes);
    if (real->cuMemAddressFree) real->cuMemAddressFree(im.va, im.map_bytes);
  }
  auto link = g_links->find(im.key);
  if (link != g_links->end()) {
    send_close(link->second.fd, im.export_id);
    if (--link->second.imports == 0) {
      ::close(link->second.fd);
      g_links->erase(link);
    }
  }
  g_imports->erase(it);
  return true;
}

}  // namespace pagefast::ipc
