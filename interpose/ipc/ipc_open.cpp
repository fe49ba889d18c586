// interpose/ipc/ipc_open.cpp: the exporter's answer to an open (ipc.h,
// docs/IPC.md): the handle checked against its export, the hold, and the
// descriptors of the chunks behind the block.
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "interpose/driver.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/ipc/ipc_registry.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/device_pool.h"
#include "policy/state.h"

namespace pagefast::ipc::detail {
namespace {

// REQUIRES registry().mutex, the pool awake. Reads a stale export's pieces
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

// An open request's export, checked against the handle the importer was
// given: one more hold of `holder` on it, and its pieces; false with the
// reason in *h when it cannot be opened (the hold not taken).
bool hold_export(const wire::Request& request, const HolderKey& holder, wire::ReplyHeader* h,
                 policy::PieceList* pieces) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (!registry().by_id) return false;
  auto it = registry().by_id->find(request.arg);
  if (it == registry().by_id->end() || it->second.freed) return false;
  Export& e = it->second;
  // A device reset freed the block with its pool (retired, never touched
  // again): the handle names nothing any more, as one of the driver's own
  // would not (docs/IPC.md "Limits").
  if (!pool::pool_live(e.pool)) return false;
  // Every field of the handle the importer was given must be this
  // export's: a forged size or offset opens nothing.
  if (request.bytes != e.bytes || uint64_t(request.offset) != e.base_addr - e.first_granule_addr ||
      request.device != uint32_t(e.device))
    return false;
  const SleepState& sleep = registry().sleep[e.device];
  if (pool_asleep(sleep, e.pool)) {
    // Asleep: only memory that stayed resident can be opened.
    if (e.stale || !all_shared(sleep, e)) {
      h->reason = wire::kReasonAsleep;
      return false;
    }
  } else if (e.stale && !refresh(e)) {
    return false;
  }
  h->reason = wire::kReasonExportFailed;
  if (!driver::has(real_driver(), &RealDriver::cuMemExportToShareableHandle) || e.pieces.empty() ||
      e.pieces.size() > size_t(kMaxPieces))
    return false;
  try {
    *pieces = e.pieces;
    auto mine = registry().holds->find(holder);
    if (mine == registry().holds->end())
      mine = registry().holds->emplace(holder, HoldMap(registry().nodes->hold_allocator())).first;
    ++mine->second[request.arg];
  } catch (...) {
    h->status = CUDA_ERROR_OUT_OF_MEMORY;
    return false;
  }
  ++e.holders;
  return true;
}

}  // namespace

void open_export(const wire::Request& request, const HolderKey& holder, Reply* reply, ChunkLease* leases) {
  wire::ReplyHeader& h = reply->header;
  h = wire::ReplyHeader{wire::kReplyMagic,     CUDA_ERROR_INVALID_VALUE, 0,
                        uint32_t(request.seq), wire::kReasonNoExport,    0};
  const RealDriver* real = real_driver();
  policy::PieceList pieces;
  if (!hold_export(request, holder, &h, &pieces)) return;
  // The hold keeps the block, and so its chunks: their descriptors are
  // leased with no lock held (the first of a chunk is the driver's export).
  const uint64_t t0 = now_ns();
  CUresult r = CUDA_SUCCESS;
  uint32_t n = 0;
  for (; n < pieces.size(); ++n) {
    const policy::PhysicalPiece& piece = pieces[n];
    r = lease_chunk_fd(real, piece.chunk.value, &leases[n]);
    if (r != CUDA_SUCCESS) break;
    reply->pieces[n] = {piece.offset.bytes(), piece.granules.bytes(), piece.chunk_granules.bytes(), leases[n].id};
  }
  if (r != CUDA_SUCCESS) {
    return_chunk_fds(leases, n);
    h.status = r;
    if (!ipc_state().warned_export.exchange(true))
      log::write(LogLevel::Warn,
                 "CUDA IPC: cuMemExportToShareableHandle answered {} for a pool chunk; another "
                 "process cannot open this process's pool blocks",
                 error_name(r));
    release(request.arg, holder);
    return;
  }
  if (log::enabled(LogLevel::Debug))
    log::write(LogLevel::Debug, "CUDA IPC export: {} piece(s) in {} us", n, (now_ns() - t0) / 1000);
  h.piece_count = n;
  h.status = CUDA_SUCCESS;
  h.reason = wire::kReasonNone;
}

}  // namespace pagefast::ipc::detail
