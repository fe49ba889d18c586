// interpose/ipc/ipc_import.cpp: the importer's half of CUDA IPC of pool
// blocks (ipc.h, docs/IPC.md): the link to each exporter (one connection
// while anything of it is open here), the check of who answers on it, the
// requests with their sequence numbers and timeouts, and the mappings of
// the chunks received.
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/units.h"

namespace pagefast::ipc {
namespace {

using namespace detail;
using policy::kGranuleBytes;

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
  uint32_t next_seq = 1;
  // Opens given up on (no answer in time), by sequence number: their late
  // answers are read before the next request, and what they opened is
  // closed at once.
  std::map<uint32_t, uint64_t> abandoned;  // seq -> export id
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
pid_t g_import_owner = 0;
std::atomic<bool> g_warned_impostor{false};

// REQUIRES g_import_mutex. A forked child inherits its parent's links,
// whose connections say the parent (SO_PEERCRED is fixed at connect), and
// its imports: it must never speak for the parent, so it starts with none.
void own_links() {
  if (!g_links) {
    g_links = new std::map<ExporterKey, Link>();
    g_imports = new std::map<CUdeviceptr, Import>();
  }
  const pid_t pid = ::getpid();
  if (g_import_owner == pid) return;
  for (auto& link : *g_links)
    if (link.second.fd >= 0) ::close(link.second.fd);
  g_links->clear();
  g_imports->clear();
  g_import_owner = pid;
}

// Whether the process listening on fd is the exporter `key` names: this
// user's, and (where this process can see it) that pid, started then.
bool is_exporter(int fd, const ExporterKey& key, uint32_t* uid, int32_t* pid) {
  if (!wire::peer_of(fd, uid, pid) || *uid != uint32_t(::geteuid())) return false;
  const bool same_ns = key.pidns == self().pidns;
  if (*pid <= 0) return !same_ns;  // another pid namespace, out of sight: the uid is all there is
  if (same_ns && uint32_t(*pid) != key.pid) return false;
  if (!proc_is_ours()) return true;
  ProcStat st;
  if (read_proc_stat(*pid, &st) != ProcRead::Ok || st.start_ticks != key.start_time) return false;
  const uint64_t ns = pid_namespace_of(*pid);
  return ns == 0 || ns == key.pidns;
}

// A connection to the exporter, checked; -1 if it is gone, not reachable
// in time, or someone else answers (one warning naming them).
int connect_to(const ExporterKey& key) {
  sockaddr_un addr;
  socklen_t len = 0;
  if (!socket_address(key.pid, key.start_time, key.pidns, &addr, &len)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // connect and send wait at most this long (a full backlog, a stopped
  // exporter whose buffer filled up); receives wait in poll.
  timeval tv{kTimeoutMs / 1000, (kTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EAGAIN || errno == ETIMEDOUT)
      log::write(LogLevel::Warn,
                 "CUDA IPC: process {} did not accept a connection within {} ms (stopped?); the "
                 "open fails",
                 key.pid, kTimeoutMs);
    ::close(fd);
    return -1;
  }
  uint32_t uid = 0;
  int32_t pid = 0;
  if (!is_exporter(fd, key, &uid, &pid)) {
    if (!g_warned_impostor.exchange(true))
      log::write(LogLevel::Warn,
                 "CUDA IPC: the socket of process {}, {}, is held by another process (uid {}, pid {}), "
                 "not by the process the handle names: not trusting it; opens of that process's handles fail",
                 key.pid, wire::address_text(addr, len), uid, pid);
    ::close(fd);
    return -1;
  }
  return fd;
}

enum class Exchange { Ok, Timeout, Broken };

// Reads exactly `bytes` into dst before `deadline`, with any descriptors
// that come along. Timeout only when nothing was read (the stream is still
// whole); anything else that stops it short is Broken.
Exchange read_exact(int fd, void* dst, size_t bytes, uint64_t deadline, std::vector<int>* fds, bool* truncated) {
  char* p = static_cast<char*>(dst);
  size_t have = 0;
  while (have < bytes) {
    const uint64_t now = now_ns();
    if (now >= deadline) return have ? Exchange::Broken : Exchange::Timeout;
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, int((deadline - now + 999999) / 1000000));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Exchange::Broken;
    if (n == 0) continue;  // the deadline is checked above
    iovec iov{p + have, bytes - have};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPieces)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t got = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    for (cmsghdr* cm = got > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; cm; cm = CMSG_NXTHDR(&msg, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int one;
          std::memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof one);
          fds->push_back(one);
        }
      }
    if (got <= 0) return Exchange::Broken;
    if (msg.msg_flags & MSG_CTRUNC) *truncated = true;
    have += size_t(got);
  }
  return Exchange::Ok;
}

// One reply: its header, its pieces and their descriptors.
Exchange receive_reply(int fd, uint64_t deadline, Reply* reply, std::vector<int>* fds, bool* truncated) {
  std::memset(&reply->header, 0, sizeof reply->header);
  Exchange r = read_exact(fd, &reply->header, sizeof reply->header, deadline, fds, truncated);
  if (r != Exchange::Ok) return r;
  if (reply->header.magic != wire::kReplyMagic || reply->header.piece_count > uint32_t(kMaxPieces))
    return Exchange::Broken;  // not a reply of ours: nothing after it can be trusted
  r = read_exact(fd, reply->pieces, size_t(reply->header.piece_count) * sizeof(ReplyPiece), deadline, fds, truncated);
  return r == Exchange::Timeout ? Exchange::Broken : r;
}

bool send_request(int fd, uint16_t op, uint64_t arg, uint32_t seq = 0) {
  const wire::Request req{wire::kRequestMagic, wire::kVersion, op, arg, seq, 0, 0, 0};
  return send_all(fd, &req, sizeof req);
}

// A late answer to an open given up on: what it opened is closed again.
void settle_late(Link& link, const Reply& reply, std::vector<int>* fds) {
  for (int fd : *fds) ::close(fd);
  fds->clear();
  auto it = link.abandoned.find(reply.header.seq);
  if (it == link.abandoned.end()) return;
  if (reply.header.status == CUDA_SUCCESS) send_request(link.fd, wire::kOpClose, it->second);
  link.abandoned.erase(it);
}

// Reads the late answers already there; false if the link broke.
bool drain_late(Link& link, Reply* reply) {
  while (!link.abandoned.empty()) {
    pollfd pfd{link.fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) return true;
    std::vector<int> fds;
    bool truncated = false;
    // An answer goes out in one piece: once its first byte is here, the
    // rest follows at once.
    if (receive_reply(link.fd, now_ns() + uint64_t(kTimeoutMs) * 1000000, reply, &fds, &truncated) != Exchange::Ok) {
      for (int fd : fds) ::close(fd);
      return false;
    }
    settle_late(link, *reply, &fds);
  }
  return true;
}

// Sends an open and waits for its answer; answers to opens given up on
// earlier are settled on the way. On Timeout the open is noted as given up.
Exchange exchange_open(Link& link, const Wire& w, Reply* reply, std::vector<int>* fds, bool* truncated) {
  if (!drain_late(link, reply)) return Exchange::Broken;
  uint32_t seq = link.next_seq++;
  if (seq == 0) seq = link.next_seq++;
  const wire::Request req{wire::kRequestMagic, wire::kVersion, wire::kOpOpen, w.export_id, seq, w.bytes,
                          uint32_t(w.offset),  w.device};
  if (!send_all(link.fd, &req, sizeof req)) return Exchange::Broken;
  const uint64_t deadline = now_ns() + uint64_t(kTimeoutMs) * 1000000;
  for (;;) {
    const Exchange r = receive_reply(link.fd, deadline, reply, fds, truncated);
    if (r == Exchange::Timeout) link.abandoned[seq] = w.export_id;
    if (r != Exchange::Ok) return r;
    if (reply->header.seq == seq) return Exchange::Ok;
    settle_late(link, *reply, fds);
  }
}

// REQUIRES g_import_mutex. Ends a link nothing is imported through: the
// exporter is told that this process holds nothing of it (which also ends
// any hold an open given up on took).
void retire_link(std::map<ExporterKey, Link>::iterator it) {
  Link& link = it->second;
  if (link.imports > 0) return;
  if (link.fd >= 0) {
    send_request(link.fd, wire::kOpReleaseAll, 0);
    ::close(link.fd);
  }
  g_links->erase(it);
}

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
  CUresult r = driver::address_reserve(real, &va, total, kGranuleBytes, 0, 0);
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
    driver::address_free(real, va, total);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_ERROR_MAP_FAILED;
  }
  *va_out = va;
  *bytes_out = total;
  *lead_out = whole ? reply.pieces[0].chunk_offset : 0;
  return CUDA_SUCCESS;
}

// Every field of a received handle, before anything is asked of anyone:
// sizes that cannot wrap, a process that can exist.
bool handle_valid(const Wire& w) {
  uint64_t end = 0;
  return w.version == kHandleVersion && w.flags == 0 && w.device < uint32_t(pool::kMaxDevices) && w.pid != 0 &&
         w.start_time != 0 && w.export_id != 0 && w.bytes != 0 && w.offset < kGranuleBytes &&
         !__builtin_add_overflow(w.offset, w.bytes, &end);
}

void log_refusal(const ExporterKey& key, const Reply& reply) {
  switch (reply.header.reason) {
    case wire::kReasonAsleep:
      log::write(LogLevel::Warn,
                 "CUDA IPC: cannot open a pool block of process {}: its pool is asleep "
                 "(pagefast_sleep or pagefast-ctl sleep) and the block's memory with it; open it after the wake",
                 key.pid);
      break;
    case wire::kReasonExportFailed:
      log::write(LogLevel::Warn,
                 "CUDA IPC: cannot open a pool block of process {}: its driver answered {} to the "
                 "export of the block's memory",
                 key.pid, error_name(CUresult(reply.header.status)));
      break;
    default:
      if (log::enabled(LogLevel::Debug))
        log::write(LogLevel::Debug,
                   "CUDA IPC: process {} has no such block (freed, or a handle that does not match "
                   "it)",
                   key.pid);
  }
}

}  // namespace

bool try_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result) {
  Wire w;
  std::memcpy(&w, &handle, sizeof w);
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0 || w.check != checksum(w)) return false;
  (void)flags;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: access is set for the caller's device either way
  *result = CUDA_ERROR_INVALID_VALUE;
  if (!pdptr || !handle_valid(w)) return true;
  const RealDriver* real = real_driver();
  CUcontext context = nullptr;
  CUdevice device = 0;
  if (driver::ctx_get_current(real, &context) != CUDA_SUCCESS || !context ||
      driver::ctx_get_device(real, &device) != CUDA_SUCCESS) {
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
  Reply* reply = nullptr;
  try {
    own_links();
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
    auto link_it = g_links->emplace(key, Link()).first;
    Link& link = link_it->second;
    reply = new Reply();
    std::vector<int> fds;
    bool truncated = false;
    Exchange ex = Exchange::Broken;
    uint64_t t_connected = t_start;
    // A link the exporter closed meanwhile (idle) is made again once.
    for (int attempt = 0; attempt < 2 && ex == Exchange::Broken; ++attempt) {
      const bool fresh = link.fd < 0;
      if (fresh) link.fd = connect_to(key);
      if (link.fd < 0) break;  // the exporter is gone, not reachable, or not who answers
      t_connected = now_ns();
      for (int fd : fds) ::close(fd);
      fds.clear();
      ex = exchange_open(link, w, reply, &fds, &truncated);
      if (ex == Exchange::Broken) {
        ::close(link.fd);
        link.fd = -1;
        link.abandoned.clear();  // their answers went with the connection; holds they took end as it does, or
                                 // with this process (docs/IPC.md)
        if (fresh) break;
      }
    }
    const uint64_t t_replied = now_ns();
    if (ex != Exchange::Ok) {
      for (int fd : fds) ::close(fd);
      if (ex == Exchange::Timeout)
        log::write(LogLevel::Warn,
                   "CUDA IPC: process {} did not answer an open within {} ms (stopped, or busy); the "
                   "open fails, and what is open from it stays as it is",
                   key.pid, kTimeoutMs);
      delete reply;
      if (link.imports == 0) retire_link(link_it);
      return true;
    }
    if (reply->header.status != CUDA_SUCCESS) {
      log_refusal(key, *reply);
      for (int fd : fds) ::close(fd);
      delete reply;
      if (link.imports == 0) retire_link(link_it);
      return true;
    }
    CUdeviceptr va = 0;
    size_t map_bytes = 0;
    uint64_t lead = 0;
    OpenTimes times;
    CUresult r =
        truncated ? CUDA_ERROR_INVALID_VALUE : map_import(*reply, fds, int(device), &va, &map_bytes, &lead, &times);
    if (log::enabled(LogLevel::Debug))
      log::write(LogLevel::Debug,
                 "CUDA IPC open: connect {} us, request {} us, import {} us, map {} us, access {} us "
                 "({} MiB)",
                 (t_connected - t_start) / 1000, (t_replied - t_connected) / 1000, times.import_ns / 1000,
                 times.map_ns / 1000, times.access_ns / 1000, map_bytes >> 20);
    for (int fd : fds) ::close(fd);
    delete reply;
    reply = nullptr;
    // The block must lie inside what was mapped, however the handle's
    // fields were forged.
    uint64_t end = 0;
    const bool inside = r == CUDA_SUCCESS && !__builtin_add_overflow(lead, w.offset, &end) &&
                        !__builtin_add_overflow(end, w.bytes, &end) && end <= map_bytes;
    if (!inside) {
      send_request(link.fd, wire::kOpClose, w.export_id);
      if (r == CUDA_SUCCESS) {
        driver::unmap(real, va, map_bytes);
        driver::address_free(real, va, map_bytes);
      }
      if (link.imports == 0) retire_link(link_it);
      *result = r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
      return true;
    }
    ++link.imports;
    const CUdeviceptr ptr = va + lead + w.offset;
    (*g_imports)[ptr] = Import{key, w.export_id, va, map_bytes, 1};
    *pdptr = ptr;
    *result = CUDA_SUCCESS;
  } catch (...) {
    delete reply;
    *result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  return true;
}

bool try_close(CUdeviceptr dptr, CUresult* result) {
  std::lock_guard<std::mutex> guard(g_import_mutex);
  if (!g_imports) return false;
  own_links();
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
    if (!pool::capture_active() && driver::ctx_get_current(real, &context) == CUDA_SUCCESS && context)
      driver::ctx_synchronize(real);
    driver::unmap(real, im.va, im.map_bytes);
    driver::address_free(real, im.va, im.map_bytes);
  }
  auto link_it = g_links->find(im.key);
  if (link_it != g_links->end()) {
    Link& link = link_it->second;
    --link.imports;
    // The exporter must hear of it (else its hold lasts as long as this
    // process): through a new connection if it closed the old one.
    Reply* reply = nullptr;
    try {
      reply = new Reply();
    } catch (...) {
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (link.fd < 0) link.fd = connect_to(im.key);
      if (link.fd < 0) break;  // gone: its holds went with it
      const bool sent = reply && drain_late(link, reply) &&
                        send_request(link.fd, link.imports ? wire::kOpClose : wire::kOpReleaseAll, im.export_id);
      if (sent) break;
      ::close(link.fd);
      link.fd = -1;
      link.abandoned.clear();
    }
    delete reply;
    if (link.imports == 0) {
      if (link.fd >= 0) ::close(link.fd);
      g_links->erase(link_it);
    }
  }
  g_imports->erase(it);
  return true;
}

uint64_t imports_across_sleep() {
  uint64_t count = 0, bytes = 0;
  {
    std::lock_guard<std::mutex> guard(g_import_mutex);
    if (!g_imports || g_import_owner != ::getpid()) return 0;
    for (const auto& entry : *g_imports) {
      ++count;
      bytes += entry.second.map_bytes;
    }
  }
  if (count)
    log::write(LogLevel::Warn,
               "sleep: {} block(s) ({} MiB) this process opened from other processes through CUDA "
               "IPC stay mapped: their memory is the exporter's",
               count, bytes >> 20);
  return count;
}

}  // namespace pagefast::ipc
