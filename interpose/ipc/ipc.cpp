// interpose/ipc/ipc.cpp: CUDA IPC of pool blocks (see ipc.h and
// docs/IPC.md), the exporter's half: the handle, the export registry and
// its holds, what a sleep keeps resident. The chunks' exported descriptors
// are ipc_chunk_fds.cpp; what the library sets, ipc_settings.cpp; the small
// helpers the parts share (ipc_internal.h), ipc_common.cpp. The socket and
// its threads are ipc_socket.cpp, ipc_server.cpp and ipc_background.cpp;
// the importer is ipc_import.cpp.
#include "interpose/ipc/ipc.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/device_pool.h"
#include "policy/page_map.h"
#include "policy/units.h"

namespace pagefast::ipc {

std::atomic<int> g_exports{0};

namespace {

using namespace detail;
using policy::kGranuleBytes;

// ---- the registry ---------------------------------------------------------------

struct Export {
  int device;
  policy::DevicePool* pool;
  uint64_t base_addr;
  uint64_t bytes;
  uint64_t buffer_id;
  uint64_t first_granule_addr;
  std::vector<policy::PhysicalPiece> pieces;
  uint64_t holders = 0;  // holds over all holders
  bool freed = false;    // the program freed it while held
  // A sleep may have released the chunks `pieces` names (and the driver
  // may hand a released handle's value to new memory): they are read
  // again from the pool before the next open, never trusted.
  bool stale = false;
};

// What the sleeps of a device's pools keep resident: the chunks importers
// held when each began, by pool. While a pool is asleep (or its sleep call
// is under way: `beginning`), only its exports that lie wholly in them are
// opened; the other pools' exports open as usual.
struct SleepState {
  const policy::DevicePool* beginning = nullptr;
  struct Kept {
    const policy::DevicePool* pool;
    policy::ChunkHandle chunk;
  };
  std::vector<Kept> shared;  // the chunks each pool's last sleep kept
};

std::mutex g_export_mutex;
std::map<uint64_t, Export>* g_by_id = nullptr;      // export id -> export
std::map<uint64_t, uint64_t>* g_by_addr = nullptr;  // block base -> export id
// holder -> export id -> its holds
std::map<HolderKey, std::map<uint64_t, uint64_t>>* g_holds = nullptr;
SleepState* g_sleep = nullptr;  // per device; made with the registry (no static destructor)
uint64_t g_next_export_id = 1;
std::atomic<bool> g_warned_unshareable{false}, g_warned_export{false};

// REQUIRES g_export_mutex. All of it or (out of memory: throws) none.
void ensure_registry() {
  if (g_by_id) return;
  SleepState* sleep = new SleepState[pool::kMaxDevices];
  auto* holds = new std::map<HolderKey, std::map<uint64_t, uint64_t>>();
  auto* by_addr = new std::map<uint64_t, uint64_t>();
  g_by_id = new std::map<uint64_t, Export>();
  g_sleep = sleep;
  g_holds = holds;
  g_by_addr = by_addr;
}

// REQUIRES g_export_mutex. Drops an export the program freed once nothing
// holds it; the block goes back to the pool (after the lock is dropped).
void drop_if_done(std::map<uint64_t, Export>::iterator it, std::vector<uint64_t>* to_free) {
  Export& e = it->second;
  if (!e.freed || e.holders > 0) return;
  to_free->push_back(e.base_addr);
  g_by_addr->erase(e.base_addr);
  g_by_id->erase(it);
  g_exports.fetch_sub(1, std::memory_order_relaxed);
}

bool is_shared(const SleepState& s, const policy::ChunkHandle& chunk) {
  for (const SleepState::Kept& k : s.shared)
    if (k.chunk.value == chunk.value) return true;
  return false;
}

bool all_shared(const SleepState& s, const Export& e) {
  for (const policy::PhysicalPiece& p : e.pieces)
    if (!is_shared(s, p.chunk)) return false;
  return true;
}

// REQUIRES g_export_mutex. Whether the memory of `pool`'s blocks may be
// asleep: the pool is asleep, or its sleep call is under way (its gate may
// not be closed yet, but what it releases was decided already).
bool pool_asleep(const SleepState& s, const policy::DevicePool* pool) { return pool == s.beginning || pool->asleep(); }

// REQUIRES g_export_mutex, the pool awake. Reads a stale export's pieces
// again from the pool; false if the block is not what was exported.
bool refresh(Export& e) {
  if (!pool::pool_live(e.pool)) return false;  // retired (device reset)
  policy::Span* span = policy::global_page_map().lookup(e.base_addr);
  policy::DevicePool::Export found;
  try {
    if (!span || !e.pool->export_of(span, e.base_addr, &found)) return false;
  } catch (...) {
    return false;
  }
  if (found.range.base_addr != e.base_addr || found.range.buffer_id != e.buffer_id || found.pieces.empty() ||
      found.pieces.size() > size_t(kMaxPieces))
    return false;
  e.pieces = std::move(found.pieces);
  e.stale = false;
  return true;
}

}  // namespace

// ---- the registry, as the server thread uses it (ipc_internal.h) ---------------------

namespace detail {

void open_export(const wire::Request& request, const HolderKey& holder, Reply* reply, std::vector<int>* fds) {
  wire::ReplyHeader& h = reply->header;
  h = wire::ReplyHeader{wire::kReplyMagic,     CUDA_ERROR_INVALID_VALUE, 0,
                        uint32_t(request.seq), wire::kReasonNoExport,    0};
  const RealDriver* real = real_driver();
  std::lock_guard<std::mutex> guard(g_export_mutex);
  if (!g_by_id) return;
  auto it = g_by_id->find(request.arg);
  if (it == g_by_id->end() || it->second.freed) return;
  Export& e = it->second;
  // A device reset freed the block with its pool (retired, never touched
  // again): the handle names nothing any more, as one of the driver's own
  // would not (docs/IPC.md "Limits").
  if (!pool::pool_live(e.pool)) return;
  // Every field of the handle the importer was given must be this
  // export's: a forged size or offset opens nothing.
  if (request.bytes != e.bytes || uint64_t(request.offset) != e.base_addr - e.first_granule_addr ||
      request.device != uint32_t(e.device))
    return;
  const SleepState& sleep = g_sleep[e.device];
  if (pool_asleep(sleep, e.pool)) {
    // Asleep: only memory that stayed resident can be opened.
    if (e.stale || !all_shared(sleep, e)) {
      h.reason = wire::kReasonAsleep;
      return;
    }
  } else if (e.stale && !refresh(e)) {
    return;
  }
  h.reason = wire::kReasonExportFailed;
  if (!driver::has(real, &RealDriver::cuMemExportToShareableHandle) || e.pieces.size() > size_t(kMaxPieces)) return;
  const uint64_t t0 = now_ns();
  for (const policy::PhysicalPiece& piece : e.pieces) {
    int fd = -1;
    uint64_t chunk_id = 0;
    const CUresult r = chunk_fd(real, piece.chunk.value, &fd, &chunk_id);
    if (r != CUDA_SUCCESS || fd < 0) {
      h.status = r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
      if (!g_warned_export.exchange(true))
        log::write(LogLevel::Warn,
                   "CUDA IPC: cuMemExportToShareableHandle answered {} for a pool chunk; another "
                   "process cannot open this process's pool blocks",
                   error_name(r));
      for (int sent : *fds) ::close(sent);
      fds->clear();
      h.piece_count = 0;
      return;
    }
    fds->push_back(fd);
    reply->pieces[h.piece_count++] = {piece.offset.bytes(), piece.granules.bytes(), piece.chunk_granules.bytes(),
                                      chunk_id};
  }
  if (log::enabled(LogLevel::Debug))
    log::write(LogLevel::Debug, "CUDA IPC export: {} piece(s) in {} us", fds->size(), (now_ns() - t0) / 1000);
  h.status = CUDA_SUCCESS;
  h.reason = wire::kReasonNone;
  ++e.holders;
  ++(*g_holds)[holder][request.arg];
}

void release(uint64_t export_id, const HolderKey& holder) {
  std::vector<uint64_t> to_free;
  {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    if (!g_holds) return;
    auto mine = g_holds->find(holder);
    if (mine == g_holds->end()) return;
    auto held = mine->second.find(export_id);
    if (held == mine->second.end()) return;  // not held by this importer
    if (--held->second == 0) mine->second.erase(held);
    if (mine->second.empty()) g_holds->erase(mine);
    auto it = g_by_id->find(export_id);
    if (it != g_by_id->end()) {
      if (it->second.holders > 0) --it->second.holders;
      drop_if_done(it, &to_free);
    }
  }
  free_held_blocks(to_free);
}

void release_holder(const HolderKey& holder) {
  std::vector<uint64_t> to_free;
  {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    if (!g_holds) return;
    auto mine = g_holds->find(holder);
    if (mine == g_holds->end()) return;
    for (const auto& held : mine->second) {
      auto it = g_by_id->find(held.first);
      if (it == g_by_id->end()) continue;
      it->second.holders = it->second.holders > held.second ? it->second.holders - held.second : 0;
      drop_if_done(it, &to_free);
    }
    g_holds->erase(mine);
  }
  free_held_blocks(to_free);
}

std::vector<HolderKey> identified_holders() {
  std::vector<HolderKey> out;
  std::lock_guard<std::mutex> guard(g_export_mutex);
  if (g_holds)
    for (const auto& entry : *g_holds)
      if (entry.first.identified()) out.push_back(entry.first);
  return out;
}

bool holds_any(const HolderKey& holder) {
  std::lock_guard<std::mutex> guard(g_export_mutex);
  return g_holds && g_holds->count(holder) > 0;
}

}  // namespace detail

// ---- the API (ipc.h) ---------------------------------------------------------------

SleepShare begin_sleep(int device, const policy::DevicePool* pool) {
  SleepShare share(device, nullptr);
  if (device < 0 || device >= pool::kMaxDevices || !pool) return share;
  std::lock_guard<std::mutex> guard(g_export_mutex);
  try {
    ensure_registry();
  } catch (...) {
    return share;  // no registry: no export can exist
  }
  SleepState& s = g_sleep[device];
  s.beginning = pool;
  share.pool_ = pool;
  // What this pool kept in an earlier sleep is decided again.
  size_t kept = 0;
  for (const SleepState::Kept& k : s.shared)
    if (k.pool != pool) s.shared[kept++] = k;
  s.shared.resize(kept);
  try {
    for (const auto& entry : *g_by_id) {
      const Export& e = entry.second;
      if (e.device != device || e.pool != pool || e.holders == 0) continue;
      for (const policy::PhysicalPiece& p : e.pieces)
        if (!is_shared(s, p.chunk)) {
          // The pool's list first: a chunk listed here only would open.
          share.chunks_.push_back(p.chunk);
          s.shared.push_back({pool, p.chunk});
        }
    }
  } catch (...) {
    // Out of host memory for a list of handles: what is listed stays
    // resident, and only that opens during the sleep.
  }
  // An export no one holds may lose its memory in this sleep: its pieces
  // are read again after the wake.
  for (auto& entry : *g_by_id)
    if (entry.second.device == device && entry.second.pool == pool && !all_shared(s, entry.second))
      entry.second.stale = true;
  return share;
}

SleepShare::~SleepShare() {
  if (!pool_) return;
  std::lock_guard<std::mutex> guard(g_export_mutex);
  if (g_sleep && g_sleep[device_].beginning == pool_) g_sleep[device_].beginning = nullptr;
}

void end_sleep(int device) {
  std::lock_guard<std::mutex> guard(g_export_mutex);
  if (device < 0 || device >= pool::kMaxDevices || !g_sleep) return;
  g_sleep[device].beginning = nullptr;
  g_sleep[device].shared.clear();
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
  if (!start_server()) return CUDA_ERROR_INVALID_VALUE;
  Wire w = make_handle(device, found.range.bytes, found.range.base_addr - found.first_granule_addr);
  try {
    std::lock_guard<std::mutex> guard(g_export_mutex);
    ensure_registry();
    const bool sleeping = pool_asleep(g_sleep[device], pool);
    // The same live allocation exports as the same handle.
    auto known = g_by_addr->find(found.range.base_addr);
    if (known != g_by_addr->end()) {
      auto it = g_by_id->find(known->second);
      if (it != g_by_id->end() && !it->second.freed && it->second.buffer_id == found.range.buffer_id) {
        w.export_id = it->first;
        // Pieces just read from the pool are current: a stale export is
        // fresh again (unless a sleep is under way, which may still
        // release them).
        if (!sleeping && it->second.holders == 0) {
          it->second.pieces = found.pieces;
          it->second.stale = false;
        }
      } else if (it != g_by_id->end() && !it->second.freed) {
        // A stale export of an earlier block at this address (freed without
        // passing on_free: cannot happen while exports exist).
        g_by_id->erase(it);
        g_by_addr->erase(known);
        g_exports.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (!w.export_id) {
      Export e{device,
               pool,
               found.range.base_addr,
               found.range.bytes,
               found.range.buffer_id,
               found.first_granule_addr,
               std::move(found.pieces)};
      e.stale = sleeping;
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
    // An importer still maps it: kept until the last one closes or dies.
    e.freed = true;
    *result = CUDA_SUCCESS;
    return true;
  }
  g_by_addr->erase(known);
  g_by_id->erase(it);
  g_exports.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

}  // namespace pagefast::ipc
