// interpose/ipc/ipc_import.cpp: the importer's half of CUDA IPC of pool
// blocks (ipc.h, docs/IPC.md): opening a handle (one link to each exporter,
// ipc_import_state.cpp and ipc_import_link.cpp; the mappings of the chunks
// received, ipc_import_chunks.cpp and ipc_import_map.cpp) and closing it
// again. The importer's mutex is held for lookups only: the request to the
// exporter goes out on a link this thread owns, and the driver's calls are
// made with no lock held (ipc_import.h).
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

// The exporter's answer to an open, on `link`, which this thread owns; a
// link the exporter closed meanwhile (idle) is made again once.
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

// What an open mapped goes (a block of one chunk: with the chunk's last
// block): true when a mapping went. No lock held.
bool unmap_block(const RealDriver* real, bool in_chunk, const ChunkKey& chunk, CUdeviceptr va, size_t bytes) {
  if (in_chunk) return chunk_release(chunk);
  driver::unmap(real, va, bytes);
  unreserve_range(va, bytes);
  return true;
}

// Maps the chunks an exporter sent, with no lock held: the import as it
// will be noted (its pointer in *ptr), or why not.
CUresult map_reply(const Reply& reply, ReceivedFds* received, bool truncated, const ExporterKey& key, const Wire& w,
                   int device, const OpenClock& clock, Import* im, CUdeviceptr* ptr) {
  uint64_t lead = 0;
  OpenTimes times;
  // One piece (every block within one chunk): a pointer into the chunk's
  // mapping, made now or already there for another block of it.
  const ReplyPiece& first = reply.pieces[0];
  *im = Import{key,
               w.export_id,
               0,
               0,
               1,
               reply.header.piece_count == 1 && received->fds.size() == 1,
               ChunkKey{key, first.chunk_id, device}};
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (!truncated && im->in_chunk) {
    r = chunk_acquire(im->chunk, first, received->fds[0], device, &im->va, &times);
    im->map_bytes = size_t(first.chunk_bytes);
    lead = first.chunk_offset;
  } else if (!truncated) {
    r = map_import(reply, received->fds, device, &im->va, &im->map_bytes, &lead, &times);
  }
  if (log::enabled(LogLevel::Debug))
    log::write(LogLevel::Debug,
               "CUDA IPC open: connect {} us, request {} us, import {} us, map {} us, access {} us "
               "({} MiB)",
               (clock.connected - clock.start) / 1000, (clock.replied - clock.connected) / 1000, times.import_ns / 1000,
               times.map_ns / 1000, times.access_ns / 1000, im->map_bytes >> 20);
  received->close_all();
  if (r != CUDA_SUCCESS) return r;
  // The block must lie inside what was mapped, however the handle's
  // fields were forged.
  uint64_t end = 0;
  if (__builtin_add_overflow(lead, w.offset, &end) || __builtin_add_overflow(end, w.bytes, &end) ||
      end > im->map_bytes) {
    unmap_block(real_driver(), im->in_chunk, im->chunk, im->va, im->map_bytes);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *ptr = im->va + lead + w.offset;
  return CUDA_SUCCESS;
}

// Asks the exporter for the block (this thread owns `link`, its open
// counted as pending) and maps what it sent, with no lock held; the
// import noted. On failure the exporter is told to close what it opened.
CUresult open_from(std::unique_lock<std::mutex>& lock, const ExporterKey& key, Link* link, const Wire& w, int device,
                   CUdeviceptr* pdptr) {
  OpenClock clock;
  clock.start = clock.connected = now_ns();
  std::unique_ptr<Reply> reply(new Reply);
  ReceivedFds received;
  bool truncated = false;
  lock.unlock();
  const Exchange ex = ask_open(*link, key, w, reply.get(), &received, &truncated, &clock);
  clock.replied = now_ns();
  const bool opened = ex == Exchange::Ok && reply->header.status == CUDA_SUCCESS;
  if (!opened) {
    received.close_all();
    if (ex == Exchange::Ok) log_refusal(key, *reply);
    if (ex == Exchange::Timeout)
      log::write(LogLevel::Warn,
                 "CUDA IPC: process {} did not answer an open within {} ms (stopped, or busy); the "
                 "open fails, and what is open from it stays as it is",
                 key.pid, kTimeoutMs);
    lock.lock();
    --link->pending;
    leave_link(lock, key, link, 0, true);
    return CUDA_ERROR_INVALID_VALUE;
  }
  lock.lock();
  free_link(link);  // other opens of this exporter go on while this one maps
  lock.unlock();
  Import im;
  CUdeviceptr ptr = 0;
  CUresult r = map_reply(*reply, &received, truncated, key, w, device, clock, &im, &ptr);
  lock.lock();
  --link->pending;
  if (r == CUDA_SUCCESS && claim_done(key, w.export_id, ptr, &im)) {
    ++link->imports;
    --link->users;
    *pdptr = ptr;
    return CUDA_SUCCESS;
  }
  if (r == CUDA_SUCCESS) {
    lock.unlock();
    unmap_block(real_driver(), im.in_chunk, im.chunk, im.va, im.map_bytes);
    lock.lock();
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  leave_link(lock, key, link, w.export_id, false);
  return r;
}

}  // namespace

bool try_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result) {
  Wire w;
  std::memcpy(&w, &handle, sizeof w);
  if (std::memcmp(w.magic, kMagic, sizeof kMagic) != 0 || w.check != checksum(w)) return false;
  (void)flags;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: access is set for the caller's device either way
  *result = CUDA_ERROR_INVALID_VALUE;
  if (!pdptr || !handle_valid(w)) return true;
  CUdevice device = 0;
  const CUresult context = caller_device(real_driver(), w, &device);
  if (context != CUDA_SUCCESS) {
    *result = context;
    return true;
  }
  const ExporterKey key{w.pidns, w.start_time, w.pid};
  std::unique_lock<std::mutex> lock(import_mutex());
  Link* link = nullptr;
  bool claimed = false;
  try {
    own_state();
    if (open_again_or_claim(lock, key, w.export_id, pdptr)) {
      *result = CUDA_SUCCESS;
      return true;
    }
    claimed = true;
    link = use_link(key);
  } catch (...) {
    if (claimed) claim_done(key, w.export_id, 0, nullptr);
    *result = CUDA_ERROR_OUT_OF_MEMORY;
    return true;
  }
  ++link->pending;
  own_link(lock, link);
  try {
    *result = open_from(lock, key, link, w, int(device), pdptr);
  } catch (...) {
    // Out of host memory: whatever the exporter opened for this is closed
    // (a close of nothing it holds for this process is ignored).
    if (!lock.owns_lock()) lock.lock();
    --link->pending;
    leave_link(lock, key, link, w.export_id, link->busy);
    *result = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (*result != CUDA_SUCCESS) claim_done(key, w.export_id, 0, nullptr);
  return true;
}

bool try_close(CUdeviceptr dptr, CUresult* result) {
  std::unique_lock<std::mutex> lock(import_mutex());
  bool last = false;
  Import im;
  if (!drop_import(dptr, &last, &im)) return false;
  *result = CUDA_SUCCESS;
  if (!last) return true;
  Link* link = use_link(im.key);  // there: it has an import
  --link->imports;
  lock.unlock();
  const RealDriver* real = real_driver();
  const uint64_t t0 = now_ns();
  uint64_t t1 = t0;
  bool unmapped = false;
  if (real) {
    // Work queued on the mapping finishes before it goes, as with the
    // driver's own close.
    CUcontext context = nullptr;
    if (!pool::capture_active() && driver::ctx_get_current(real, &context) == CUDA_SUCCESS && context)
      driver::ctx_synchronize(real);
    t1 = now_ns();
    unmapped = unmap_block(real, im.in_chunk, im.chunk, im.va, im.map_bytes);
  }
  const uint64_t t2 = now_ns();
  // The exporter must hear of it (else its hold lasts as long as this
  // process): through a new connection if it closed the old one.
  lock.lock();
  leave_link(lock, im.key, link, im.export_id, false);
  lock.unlock();
  if (log::enabled(LogLevel::Debug))
    log::write(LogLevel::Debug, "CUDA IPC close: sync {} us, unmap {} us, exporter told {} us ({})", (t1 - t0) / 1000,
               (t2 - t1) / 1000, (now_ns() - t2) / 1000, unmapped ? "unmapped" : "mapping kept for other blocks");
  return true;
}

uint64_t imports_across_sleep() {
  uint64_t count = 0, bytes = 0;
  {
    std::lock_guard<std::mutex> guard(import_mutex());
    import_totals(&count, &bytes);
  }
  if (count)
    log::write(LogLevel::Warn,
               "sleep: {} block(s) ({} MiB) this process opened from other processes through CUDA "
               "IPC stay mapped: their memory is the exporter's",
               count, bytes >> 20);
  return count;
}

}  // namespace pagefast::ipc
