// interpose/ipc/ipc_import.cpp: the importer's half of CUDA IPC of pool
// blocks (ipc.h, docs/IPC.md): opening a handle (one link to each exporter
// while anything of it is open here, ipc_import_link.cpp; the mappings of
// the chunks received, ipc_import_map.cpp) and closing it again.
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_import.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/units.h"

namespace pagefast::ipc {
namespace {

using namespace detail;
using policy::kGranuleBytes;

struct Import {
  ExporterKey key;
  uint64_t export_id;
  CUdeviceptr va;
  size_t map_bytes;
  uint64_t refs;
  // A one-piece block is a pointer into its chunk's mapping
  // (ipc_import_chunks.cpp), kept while any block of the chunk is open;
  // a block of several pieces has a mapping of its own (ipc_import_map.cpp).
  bool in_chunk;
  ChunkKey chunk;
};

// Links kept after their last import closed (the exporter told that this
// process holds nothing of it): the next open of that exporter's blocks
// needs no new connection, which costs a connect and the check of who
// answers on both sides. The exporter closes a link idle for 30 s; the
// next request then makes a new one.
constexpr size_t kIdleLinks = 8;

std::mutex g_import_mutex;
std::map<ExporterKey, Link>* g_links = nullptr;
std::map<CUdeviceptr, Import>* g_imports = nullptr;  // handed-out pointer -> import
pid_t g_import_owner = 0;
uint64_t g_link_clock = 0;

// REQUIRES g_import_mutex. A forked child inherits its parent's links,
// whose connections say the parent (SO_PEERCRED is fixed at connect), and
// its imports: it must never speak for the parent, so it starts with none.
void own_links() {
  if (!g_links) {
    g_links = new std::map<ExporterKey, Link>();
    g_imports = new std::map<CUdeviceptr, Import>();
  }
  const pid_t pid = self().pid;
  if (g_import_owner == pid) return;
  for (auto& link : *g_links)
    if (link.second.fd >= 0) ::close(link.second.fd);
  g_links->clear();
  g_imports->clear();
  chunks_forget();
  g_import_owner = pid;
}

// REQUIRES g_import_mutex. Closes the idle link used least recently while
// more than kIdleLinks are idle.
void trim_idle_links() {
  size_t idle = 0;
  auto oldest = g_links->end();
  for (auto it = g_links->begin(); it != g_links->end(); ++it) {
    if (it->second.imports > 0) continue;
    ++idle;
    if (oldest == g_links->end() || it->second.last_use < oldest->second.last_use) oldest = it;
  }
  if (idle <= kIdleLinks) return;
  if (oldest->second.fd >= 0) ::close(oldest->second.fd);
  g_links->erase(oldest);
}

// REQUIRES g_import_mutex. A link nothing is imported through any more,
// whose exporter was told so (release-all, sent = true: that also ended
// any hold an open given up on took, so their late answers are only read
// and dropped): kept idle for the next open. Unsent, it ends.
void rest_link(std::map<ExporterKey, Link>::iterator it, bool sent) {
  Link& link = it->second;
  if (link.imports > 0) return;
  if (link.fd >= 0 && sent) {
    link.abandoned.clear();
    link.last_use = ++g_link_clock;
    trim_idle_links();
    return;
  }
  if (link.fd >= 0) ::close(link.fd);
  g_links->erase(it);
}

// REQUIRES g_import_mutex. Ends what a link holds: the exporter is told
// that this process holds nothing of it any more; the link stays idle.
void retire_link(std::map<ExporterKey, Link>::iterator it) {
  if (it->second.imports > 0) return;
  rest_link(it, it->second.fd >= 0 && send_request(it->second.fd, wire::kOpReleaseAll, 0));
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
                 "CUDA IPC: cannot open a pool block of process {}: its pool is asleep (a sleep of its tag or "
                 "of everything: pagefast_sleep_tag, pagefast_sleep, pagefast-ctl sleep) and the block's memory "
                 "with it; open it after the wake",
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

// The descriptors received with a reply; closed at the latest when it
// goes (map_import imports what it maps first).
struct ReceivedFds {
  std::vector<int> fds;
  ~ReceivedFds() { close_all(); }
  void close_all() {
    for (int fd : fds) ::close(fd);
    fds.clear();
  }
};

// When an open reached each step, for the debug line (docs/IPC.md).
struct OpenClock {
  uint64_t start = 0, connected = 0, replied = 0;
};

// The caller's device, before anything is asked of anyone: CUDA_SUCCESS,
// or CUDA_ERROR_INVALID_CONTEXT without a current context, and for a
// handle this process made itself (the driver does not open those).
CUresult caller_device(const RealDriver* real, const Wire& w, CUdevice* device) {
  CUcontext context = nullptr;
  if (driver::ctx_get_current(real, &context) != CUDA_SUCCESS || !context ||
      driver::ctx_get_device(real, device) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_CONTEXT;
  const Identity& me = self();
  if (w.pid == uint32_t(me.pid) && w.start_time == me.start_time && w.pidns == me.pidns)
    return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

// REQUIRES g_import_mutex. A block this process opened already: the same
// pointer, one more reference.
bool open_again(const Wire& w, const ExporterKey& key, CUdeviceptr* pdptr) {
  for (auto& entry : *g_imports) {
    Import& im = entry.second;
    if (im.export_id == w.export_id && !(im.key < key) && !(key < im.key)) {
      ++im.refs;
      *pdptr = entry.first;
      return true;
    }
  }
  return false;
}

// REQUIRES g_import_mutex. The exporter's answer to an open over `link`;
// a link the exporter closed meanwhile (idle) is made again once.
Exchange ask_open(Link& link, const ExporterKey& key, const Wire& w, Reply* reply, ReceivedFds* received,
                  bool* truncated, OpenClock* clock) {
  Exchange ex = Exchange::Broken;
  for (int attempt = 0; attempt < 2 && ex == Exchange::Broken; ++attempt) {
    const bool fresh = link.fd < 0;
    if (fresh) link.fd = connect_to(key);
    if (link.fd < 0) break;  // the exporter is gone, not reachable, or not who answers
    clock->connected = now_ns();
    received->close_all();
    ex = exchange_open(link, w, reply, &received->fds, truncated);
    if (ex == Exchange::Broken) {
      ::close(link.fd);
      link.fd = -1;
      link.abandoned.clear();  // their answers went with the connection; holds they took end as it does, or
                               // with this process (docs/IPC.md)
      if (fresh) break;
    }
  }
  return ex;
}

// REQUIRES g_import_mutex. What an open mapped goes (a block of one chunk:
// with the chunk's last block).
void unmap_block(const RealDriver* real, bool in_chunk, const ChunkKey& chunk, CUdeviceptr va, size_t bytes) {
  if (in_chunk) {
    chunk_release(chunk);
  } else {
    driver::unmap(real, va, bytes);
    unreserve_range(va, bytes);
  }
}

// REQUIRES g_import_mutex. Maps the chunks an exporter sent and hands the
// block out: CUDA_SUCCESS with *pdptr, or why not (the exporter is told to
// close it, the link retired if nothing else is open through it).
CUresult map_opened(const RealDriver* real, std::map<ExporterKey, Link>::iterator link_it, const Wire& w,
                    std::unique_ptr<Reply> reply, ReceivedFds* received, bool truncated, int device,
                    const OpenClock& clock, CUdeviceptr* pdptr) {
  Link& link = link_it->second;
  CUdeviceptr va = 0;
  size_t map_bytes = 0;
  uint64_t lead = 0;
  OpenTimes times;
  // One piece (every block within one chunk): a pointer into the chunk's
  // mapping, made now or already there for another block of it.
  const ReplyPiece& first = reply->pieces[0];
  const bool in_chunk = reply->header.piece_count == 1 && received->fds.size() == 1;
  const ChunkKey chunk{link_it->first, first.chunk_id, device};
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (!truncated && in_chunk) {
    r = chunk_acquire(chunk, first, received->fds[0], device, &va, &times);
    map_bytes = size_t(first.chunk_bytes);
    lead = first.chunk_offset;
  } else if (!truncated) {
    r = map_import(*reply, received->fds, device, &va, &map_bytes, &lead, &times);
  }
  if (log::enabled(LogLevel::Debug))
    log::write(LogLevel::Debug,
               "CUDA IPC open: connect {} us, request {} us, import {} us, map {} us, access {} us "
               "({} MiB)",
               (clock.connected - clock.start) / 1000, (clock.replied - clock.connected) / 1000, times.import_ns / 1000,
               times.map_ns / 1000, times.access_ns / 1000, map_bytes >> 20);
  received->close_all();
  reply.reset();
  // The block must lie inside what was mapped, however the handle's
  // fields were forged.
  uint64_t end = 0;
  const bool inside = r == CUDA_SUCCESS && !__builtin_add_overflow(lead, w.offset, &end) &&
                      !__builtin_add_overflow(end, w.bytes, &end) && end <= map_bytes;
  const CUdeviceptr ptr = va + lead + w.offset;
  CUresult answer = r != CUDA_SUCCESS ? r : inside ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (answer == CUDA_SUCCESS) {
    try {
      (*g_imports)[ptr] = Import{link_it->first, w.export_id, va, map_bytes, 1, in_chunk, chunk};
    } catch (...) {
      answer = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (answer != CUDA_SUCCESS) {
    send_request(link.fd, wire::kOpClose, w.export_id);
    if (r == CUDA_SUCCESS) unmap_block(real, in_chunk, chunk, va, map_bytes);
    if (link.imports == 0) retire_link(link_it);
    return answer;
  }
  ++link.imports;
  *pdptr = ptr;
  return CUDA_SUCCESS;
}

// REQUIRES g_import_mutex. Opens a block no open of this process holds:
// asks its exporter, then maps what it sent.
CUresult open_from(const RealDriver* real, const ExporterKey& key, const Wire& w, int device, CUdeviceptr* pdptr) {
  OpenClock clock;
  clock.start = clock.connected = now_ns();
  auto link_it = g_links->emplace(key, Link()).first;
  Link& link = link_it->second;
  link.last_use = ++g_link_clock;
  std::unique_ptr<Reply> reply(new Reply());
  ReceivedFds received;
  bool truncated = false;
  const Exchange ex = ask_open(link, key, w, reply.get(), &received, &truncated, &clock);
  clock.replied = now_ns();
  if (ex != Exchange::Ok || reply->header.status != CUDA_SUCCESS) {
    if (ex == Exchange::Ok) log_refusal(key, *reply);
    received.close_all();
    if (ex == Exchange::Timeout)
      log::write(LogLevel::Warn,
                 "CUDA IPC: process {} did not answer an open within {} ms (stopped, or busy); the "
                 "open fails, and what is open from it stays as it is",
                 key.pid, kTimeoutMs);
    if (link.imports == 0) retire_link(link_it);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return map_opened(real, link_it, w, std::move(reply), &received, truncated, device, clock, pdptr);
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
  CUdevice device = 0;
  const CUresult context = caller_device(real, w, &device);
  if (context != CUDA_SUCCESS) {
    *result = context;
    return true;
  }
  const ExporterKey key{w.pidns, w.start_time, w.pid};
  std::lock_guard<std::mutex> guard(g_import_mutex);
  try {
    own_links();
    *result = open_again(w, key, pdptr) ? CUDA_SUCCESS : open_from(real, key, w, int(device), pdptr);
  } catch (...) {
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
    unmap_block(real, im.in_chunk, im.chunk, im.va, im.map_bytes);
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
    bool sent = false;
    for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
      if (link.fd < 0) link.fd = connect_to(im.key);
      if (link.fd < 0) break;  // gone: its holds went with it
      sent = reply && drain_late(link, reply) &&
             send_request(link.fd, link.imports ? wire::kOpClose : wire::kOpReleaseAll, im.export_id);
      if (sent) break;
      ::close(link.fd);
      link.fd = -1;
      link.abandoned.clear();
    }
    delete reply;
    if (link.imports == 0) rest_link(link_it, sent);
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