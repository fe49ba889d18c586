// interpose/ipc/ipc_import.cpp: the importer's half of CUDA IPC of pool
// blocks (ipc.h, docs/IPC.md): opening a handle (one link to each exporter
// while anything of it is open here, ipc_import_link.cpp; the mappings of
// the chunks received, ipc_import_map.cpp) and closing it again.
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
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
};

std::mutex g_import_mutex;
std::map<ExporterKey, Link>* g_links = nullptr;
std::map<CUdeviceptr, Import>* g_imports = nullptr;  // handed-out pointer -> import
pid_t g_import_owner = 0;

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