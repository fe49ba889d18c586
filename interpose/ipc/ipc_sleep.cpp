// interpose/ipc/ipc_sleep.cpp: what a sleep of the exporter's pools keeps
// resident for its importers (ipc.h SleepShare, docs/IPC.md "Sleep and
// wake"), in the export registry (ipc_registry.h).
#include <mutex>
#include <vector>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_registry.h"
#include "interpose/pool_api.h"

namespace pagefast::ipc {

namespace detail {
namespace {

bool is_shared(const SleepState& s, const policy::ChunkHandle& chunk) {
  for (const SleepState::Kept& k : s.shared)
    if (k.chunk.value == chunk.value) return true;
  return false;
}

}  // namespace

bool all_shared(const SleepState& s, const Export& e) {
  for (const policy::PhysicalPiece& p : e.pieces)
    if (!is_shared(s, p.chunk)) return false;
  return true;
}

bool pool_asleep(const SleepState& s, const policy::DevicePool* pool) { return pool == s.beginning || pool->asleep(); }

}  // namespace detail

using namespace detail;

SleepShare begin_sleep(int device, const policy::DevicePool* pool) {
  SleepShare share(device, nullptr);
  if (device < 0 || device >= pool::kMaxDevices || !pool) return share;
  std::lock_guard<std::mutex> guard(registry().mutex);
  try {
    ensure_registry();
  } catch (...) {
    return share;  // no registry: no export can exist
  }
  SleepState& s = registry().sleep[device];
  s.beginning = pool;
  share.pool_ = pool;
  // What this pool kept in an earlier sleep is decided again.
  size_t kept = 0;
  for (const SleepState::Kept& k : s.shared)
    if (k.pool != pool) s.shared[kept++] = k;
  s.shared.resize(kept);
  try {
    for (const auto& entry : *registry().by_id) {
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
  for (auto& entry : *registry().by_id)
    if (entry.second.device == device && entry.second.pool == pool && !all_shared(s, entry.second))
      entry.second.stale = true;
  return share;
}

SleepShare::~SleepShare() {
  if (!pool_) return;
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (registry().sleep && registry().sleep[device_].beginning == pool_) registry().sleep[device_].beginning = nullptr;
}

void end_sleep(int device) {
  std::lock_guard<std::mutex> guard(registry().mutex);
  if (device < 0 || device >= pool::kMaxDevices || !registry().sleep) return;
  registry().sleep[device].beginning = nullptr;
  registry().sleep[device].shared.clear();
}

}  // namespace pagefast::ipc
