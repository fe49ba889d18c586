// interpose/ipc/ipc.cpp: CUDA IPC of pool blocks (see ipc.h and
// docs/IPC.md), the exporter's half: the handle, the export registry and
// its holds (ipc_registry.h). The answer to an open is ipc_open.cpp; what a
// sleep keeps resident, ipc_sleep.cpp; the chunks' exported descriptors,
// ipc_chunk_fds.cpp; what the library sets, ipc_settings.cpp; the small
// helpers the parts share (ipc_internal.h), ipc_common.cpp. The socket and
// its threads are ipc_socket.cpp, ipc_server.cpp and ipc_background.cpp;
// the importer is ipc_import.cpp.
#include "interpose/ipc/ipc.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "interpose/ipc/ipc_internal.h"
#include "interpose/ipc/ipc_registry.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"
#include "policy/state.h"
#include "policy/units.h"

namespace pagefast::ipc {

// ---- the registry (ipc_registry.h) -------------------------------------------------

namespace detail {

void ensure_registry() {
  if (registry().by_id) return;
  auto nodes = std::make_unique<RegistryNodes>();
  auto sleep = std::make_unique<SleepState[]>(pool::kMaxDevices);
  auto holds = std::make_unique<HolderMap>(HolderMap::allocator_type(&nodes->holders));
  auto by_addr = std::make_unique<AddrMap>(AddrMap::allocator_type(&nodes->pairs));
  auto by_id = std::make_unique<ExportMap>(ExportMap::allocator_type(&nodes->exports));
  // Never freed, as the rest of the process's state.
  registry().nodes = nodes.release();
  registry().sleep = sleep.release();
  registry().holds = holds.release();
  registry().by_addr = by_addr.release();
  registry().by_id = by_id.release();
}

}  // namespace detail

namespace {

using namespace detail;

// REQUIRES registry().mutex. The pool's mark of a live block that has an
// export (DevicePool::mark_exported): on from the record's making to its
// erasing, so that the block's free comes here first (on_free) while the
// frees of the others stay pool hits.
void mark(uint64_t addr, bool exported) {
  policy::DevicePool::mark_exported(policy::global_page_map().lookup(addr), addr, exported);
}

// REQUIRES registry().mutex. Drops an export the program freed once nothing
// holds it; the block goes back to the pool (after the lock is dropped).
void drop_if_done(ExportMap::iterator it, std::vector<uint64_t>* to_free) {
  Export& e = it->second;
  if (!e.freed || e.holders > 0) return;
  mark(e.base_addr, false);
  to_free->push_back(e.base_addr);
  registry().by_addr->erase(e.base_addr);
  registry().by_id->erase(it);
  registry().exports.fetch_sub(1, std::memory_order_relaxed);
}

// A get again of a block exported already: the id of its export when that
// answers as it is (the same allocation, not freed, its pieces current:
// not stale), else 0 (a first get, or one that must read the pieces
// again: record_export). `range` was read without a lock (range_of): the
// export's buffer id tells a block freed and made again at its address
// apart. The pieces are not read, so the device lock is not taken. Asked
// only for a block with the pool's export mark, so an export exists.
uint64_t current_export(const policy::DevicePool* pool, const policy::RangeInfo& range) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (!registry().by_addr) return 0;
  auto known = registry().by_addr->find(range.base_addr);
  if (known == registry().by_addr->end()) return 0;
  auto it = registry().by_id->find(known->second);
  if (it == registry().by_id->end()) return 0;
  const Export& e = it->second;
  if (e.freed || e.stale || e.pool != pool || e.buffer_id != range.buffer_id || e.bytes != range.bytes) return 0;
  return it->first;
}

// The export of the live block `found` names (the same one for the same
// live allocation, every time): its id. Throws std::bad_alloc.
uint64_t record_export(int device, policy::DevicePool* pool, policy::DevicePool::Export* found) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  ensure_registry();
  const bool sleeping = pool_asleep(registry().sleep[device], pool);
  const uint64_t addr = found->range.base_addr;
  auto known = registry().by_addr->lower_bound(addr);
  if (known != registry().by_addr->end() && known->first == addr) {
    auto it = registry().by_id->find(known->second);
    if (it != registry().by_id->end() && !it->second.freed && it->second.buffer_id == found->range.buffer_id) {
      // Pieces just read from the pool are current: a stale export is
      // fresh again (unless a sleep is under way, which may still
      // release them).
      if (!sleeping && it->second.holders == 0) {
        it->second.pieces = found->pieces;
        it->second.stale = false;
      }
      mark(addr, true);
      return it->first;
    }
    if (it != registry().by_id->end() && !it->second.freed) {
      // A stale export of an earlier block at this address (freed without
      // passing on_free: cannot happen while exports exist).
      registry().by_id->erase(it);
      known = registry().by_addr->erase(known);
      registry().exports.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  Export e{device,
           pool,
           addr,
           found->range.bytes,
           found->range.buffer_id,
           found->first_granule_addr,
           std::move(found->pieces)};
  e.stale = sleeping;
  const uint64_t id = registry().next_export_id;
  // Ids only grow, and `known` is where the address goes: no search.
  registry().by_id->emplace_hint(registry().by_id->end(), id, std::move(e));
  try {
    registry().by_addr->emplace_hint(known, addr, id);
  } catch (...) {
    registry().by_id->erase(id);
    throw;
  }
  ++registry().next_export_id;
  registry().exports.fetch_add(1, std::memory_order_relaxed);
  mark(addr, true);
  return id;
}

// The handle of export `export_id` of the block `range`, written out.
CUresult write_handle(int device, uint64_t export_id, const policy::RangeInfo& range, CUipcMemHandle* handle) {
  const Wire w = make_handle(device, export_id, range.bytes, range.base_addr & (policy::kGranuleBytes - 1));
  std::memcpy(handle, &w, sizeof w);
  return CUDA_SUCCESS;
}

// get_handle of a block with no current export: its pieces read from the
// pool (under the device lock), then recorded (or made current again).
CUresult first_handle(int device, policy::DevicePool* pool, policy::Span* span, CUdeviceptr dptr,
                      CUipcMemHandle* handle) {
  policy::DevicePool::Export found;
  try {
    if (!pool->export_of(span, dptr, &found)) return CUDA_ERROR_INVALID_VALUE;
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (found.pieces.empty() || found.pieces.size() > size_t(kMaxPieces)) return CUDA_ERROR_INVALID_VALUE;
  if (!start_server()) return CUDA_ERROR_INVALID_VALUE;
  uint64_t export_id = 0;
  try {
    export_id = record_export(device, pool, &found);
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return write_handle(device, export_id, found.range, handle);
}

}  // namespace

// ---- the registry, as the server thread uses it (ipc_internal.h) ---------------------

namespace detail {

void release(uint64_t export_id, const HolderKey& holder) {
  std::vector<uint64_t> to_free;
  {
    std::lock_guard<std::mutex> guard(registry().mutex);
    if (!registry().holds) return;
    auto mine = registry().holds->find(holder);
    if (mine == registry().holds->end()) return;
    auto held = mine->second.find(export_id);
    if (held == mine->second.end()) return;  // not held by this importer
    if (--held->second == 0) mine->second.erase(held);
    if (mine->second.empty()) registry().holds->erase(mine);
    auto it = registry().by_id->find(export_id);
    if (it != registry().by_id->end()) {
      if (it->second.holders > 0) --it->second.holders;
      drop_if_done(it, &to_free);
    }
  }
  free_held_blocks(to_free);
}

void release_holder(const HolderKey& holder) {
  std::vector<uint64_t> to_free;
  {
    std::lock_guard<std::mutex> guard(registry().mutex);
    if (!registry().holds) return;
    auto mine = registry().holds->find(holder);
    if (mine == registry().holds->end()) return;
    for (const auto& held : mine->second) {
      auto it = registry().by_id->find(held.first);
      if (it == registry().by_id->end()) continue;
      it->second.holders = it->second.holders > held.second ? it->second.holders - held.second : 0;
      drop_if_done(it, &to_free);
    }
    registry().holds->erase(mine);
  }
  free_held_blocks(to_free);
}

std::vector<HolderKey> identified_holders() {
  std::vector<HolderKey> out;
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (registry().holds)
    for (const auto& entry : *registry().holds)
      if (entry.first.identified()) out.push_back(entry.first);
  return out;
}

bool holds_any(const HolderKey& holder) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  return registry().holds && registry().holds->count(holder) > 0;
}

}  // namespace detail

// ---- the API (ipc.h) ---------------------------------------------------------------

CUresult get_handle(policy::DevicePool* pool, policy::Span* span, CUdeviceptr dptr, CUipcMemHandle* handle) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  const int device = pool->device();
  if (!device_shareable(device)) {
    if (!ipc_state().warned_unshareable.exchange(true))
      log::write(LogLevel::Warn,
                 "cuIpcGetMemHandle on pool memory: device {} cannot share VMM memory through POSIX file "
                 "descriptors; run this program with PAGEFAST_CONF=pool:off to use CUDA IPC",
                 device);
    return CUDA_ERROR_INVALID_VALUE;
  }
  policy::RangeInfo range;
  if (!policy::DevicePool::range_of(span, dptr, &range)) return CUDA_ERROR_INVALID_VALUE;
  // A block without the pool's export mark has no export to look up.
  const uint64_t export_id = policy::DevicePool::exported(span, range.base_addr) ? current_export(pool, range) : 0;
  if (export_id == 0) return first_handle(device, pool, span, dptr, handle);
  if (!start_server()) return CUDA_ERROR_INVALID_VALUE;  // a forked child's first use
  return write_handle(device, export_id, range, handle);
}

bool on_free(CUdeviceptr dptr, CUresult* result) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (!registry().by_addr) return false;
  auto known = registry().by_addr->find(dptr);
  if (known == registry().by_addr->end()) return false;
  auto it = registry().by_id->find(known->second);
  if (it == registry().by_id->end()) return false;
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
  mark(dptr, false);
  registry().by_addr->erase(known);
  registry().by_id->erase(it);
  registry().exports.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

}  // namespace pagefast::ipc
