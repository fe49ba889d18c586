// policy/arena_wake.cpp: the arena's wake (arena_sleep.h, docs/POOL.md
// "Sleep and wake"; sleep is arena_sleep.cpp). Every step that fails
// leaves a consistent arena: a chunk is either resident (mapped at home,
// open) or asleep (unmapped; released, or its handle kept; or mapped at
// home with its contents still to go in), and wake can be called again
// until it succeeds.
//
// The contents come back in one batch (Provider::copy_from_host_made), and
// each chunk is made (created, mapped, opened: bring_up) just before its
// copies, so that a provider that copies on threads copies the first
// chunks while the next are made.
#include <cstdint>
#include <vector>

#include "policy/arena_sleep.h"

namespace pagefast::policy {

bool ArenaSleep::bring_up(uint64_t home, Chunk& chunk) {
  ChunkHandle handle = chunk.handle;
  // Fresh memory: created now, its contents (if kept) still to go in.
  const bool fresh = !chunk.handle_kept;
  if (fresh && provider_.create_chunk(chunk.granules, &handle) != ProviderStatus::Ok) return false;
  auto undo = [&] {
    if (fresh) chunks_.release_or_keep(handle);
  };
  if (!chunk.home_mapped && provider_.map(home, handle, Granules(0), chunk.granules) != ProviderStatus::Ok) {
    undo();
    return false;
  }
  // Mapped at home (and, below, maybe for good): the chunk's memory now.
  auto adopt = [&] {
    chunk.handle = handle;
    chunk.home_mapped = true;
    if (fresh) {
      chunk.handle_kept = true;
      chunk.fill_pending = !chunk.kept.empty();
    }
  };
  if (provider_.set_access(home, chunk.granules, AccessSet{chunks_.peers(), revoked_asleep_}) != ProviderStatus::Ok) {
    if (!provider_.unmap(home, chunk.granules)) {
      // Mapped for good at its home: keep it as the chunk's memory; the
      // next wake opens (and fills) it.
      adopt();
      return false;
    }
    chunk.home_mapped = false;
    undo();
    return false;
  }
  adopt();
  return true;
}

void ArenaSleep::finish_wake(Chunk& chunk) {
  for (const KeptPiece& piece : chunk.kept) kept_bytes_ -= piece.granules.bytes();
  free_kept(chunk);
  chunk.handle_kept = false;
  chunk.home_mapped = false;
  chunk.fill_pending = false;
  chunk.asleep = false;
  slept_ -= chunk.granules;
}

void ArenaSleep::undo_fill(uint64_t home, Chunk& chunk) {
  // The memory holds nothing worth keeping (fill_pending): give it back if
  // the driver lets go of the mapping; else the next wake fills it.
  if (!provider_.unmap(home, chunk.granules)) return;
  chunk.home_mapped = false;
  chunk.handle_kept = false;
  chunk.fill_pending = false;
  chunks_.release_or_keep(chunk.handle);
}

// Wake's chunks made as their copies go (Provider::copy_from_host_made):
// a chunk to fill is brought up at its first copy; those with nothing to
// fill after the last (prepared()). The first chunk that cannot be brought
// up stops it there: the rest stay asleep, untouched (`up` says which
// were brought up).
class ArenaSleep::WakeMaker : public CopyPreparer {
 public:
  WakeMaker(ArenaSleep& sleep, CopyBatch& batch, Clock& clock)
      : up(batch.up), sleep_(sleep), batch_(batch), clock_(clock) {}
  bool prepare(uint64_t i) override {
    while (chunk_ + 1 < batch_.chunks.size() && batch_.first[chunk_ + 1] <= i) ++chunk_;
    if (chunk_ != tried_) {
      tried_ = chunk_;
      const uint64_t t0 = clock_.now_ns();
      if (!stopped && sleep_.bring_up(batch_.homes[chunk_], *batch_.chunks[chunk_])) up[chunk_] = 1;
      else stopped = true;
      map_ns += clock_.now_ns() - t0;
    }
    return up[chunk_] != 0;
  }
  void prepared() override {
    const uint64_t t0 = clock_.now_ns();
    for (auto& entry : sleep_.chunks_.all()) {
      Chunk& chunk = entry.second;
      if (!chunk.asleep || needs_fill(chunk) || stopped) continue;
      if (!sleep_.bring_up(entry.first, chunk)) {
        stopped = true;
        break;
      }
      sleep_.finish_wake(chunk);
      ++woken;
    }
    map_ns += clock_.now_ns() - t0;
  }

  bool stopped = false;
  std::vector<char>& up;  // per chunk of the batch
  uint64_t woken = 0;     // chunks with nothing to fill, made resident
  uint64_t map_ns = 0;

 private:
  ArenaSleep& sleep_;
  CopyBatch& batch_;
  Clock& clock_;
  size_t chunk_ = 0;
  size_t tried_ = SIZE_MAX;
};

ProviderStatus ArenaSleep::wake(Clock& clock, WakeResult* out) {
  WakeResult result;
  if (!asleep_) return ProviderStatus::Ok;
  CopyBatch batch;
  try {
    uint64_t pieces = 0;
    for (auto& entry : chunks_.all()) pieces += entry.second.asleep ? entry.second.kept.size() : 0;
    batch.pieces.reserve(pieces);
    batch.chunks.reserve(chunks_.all().size());
    batch.homes.reserve(chunks_.all().size());
    batch.first.reserve(chunks_.all().size() + 1);
    batch.up.reserve(chunks_.all().size());
  } catch (...) {
    return ProviderStatus::OutOfMemory;
  }
  // The chunks to fill and their copies; each chunk is brought up (mapped
  // and opened) just before its copies, so that the first chunks copy
  // while the next are made; those with nothing to fill after.
  for (auto& entry : chunks_.all()) {
    Chunk& chunk = entry.second;
    if (!chunk.asleep || !needs_fill(chunk)) continue;
    batch.first.push_back(batch.pieces.size());
    for (const KeptPiece& piece : chunk.kept) {
      HostCopy fill;
      fill.addr = entry.first + piece.offset.bytes();
      fill.bytes = piece.granules.bytes();
      fill.host = piece.host;
      fill.mode = piece.on_disk ? kSleepToDisk : 0;
      batch.pieces.push_back(fill);
    }
    batch.chunks.push_back(&chunk);
    batch.homes.push_back(entry.first);
  }
  batch.first.push_back(batch.pieces.size());
  batch.up.assign(batch.chunks.size(), 0);  // reserved: no throw
  WakeMaker maker(*this, batch, clock);
  const uint64_t copy_start = clock.now_ns();
  if (!batch.pieces.empty()) provider_.copy_from_host_made(batch.pieces.data(), batch.pieces.size(), maker);
  else maker.prepared();
  const uint64_t free_start = clock.now_ns();
  result.map_ns = maker.map_ns;
  result.copy_ns = free_start - copy_start;
  result.woken_chunks = maker.woken;
  ProviderStatus status = maker.stopped ? ProviderStatus::OutOfMemory : ProviderStatus::Ok;
  status = settle_fills(batch, status, &result);
  result.free_ns = clock.now_ns() - free_start;
  if (out) *out = result;
  if (status != ProviderStatus::Ok) return status;
  return remap_stitches();
}

ProviderStatus ArenaSleep::settle_fills(const CopyBatch& batch, ProviderStatus status, WakeResult* result) {
  const std::vector<char>& up = batch.up;
  const std::vector<HostCopy>& fills = batch.pieces;
  const std::vector<size_t>& first = batch.first;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    if (!up[i]) continue;  // never brought up: asleep as it was
    Chunk& chunk = *batch.chunks[i];
    uint64_t copied = 0, failed = 0;
    for (size_t f = first[i]; f < first[i + 1]; ++f)
      (fills[f].status == ProviderStatus::Ok ? copied : failed) += fills[f].bytes;
    result->copied_bytes += copied;
    if (!failed) {
      finish_wake(chunk);
      ++result->woken_chunks;
      continue;
    }
    if (status == ProviderStatus::Ok) status = ProviderStatus::Failed;
    if (!copied) {
      undo_fill(batch.homes[i], chunk);
      continue;
    }
    // Some pieces are in place (their host memory may be gone already):
    // the chunk stays mapped at home with the others still to go in.
    size_t left = 0;
    for (size_t f = first[i]; f < first[i + 1]; ++f) {
      KeptPiece& piece = chunk.kept[f - first[i]];
      if (fills[f].status == ProviderStatus::Ok) {
        provider_.host_free(piece.host, piece.granules.bytes());
        kept_bytes_ -= piece.granules.bytes();
      } else {
        chunk.kept[left++] = piece;
      }
    }
    chunk.kept.resize(left);
  }
  return status;
}

ProviderStatus ArenaSleep::remap_stitches() {
  // Every chunk is back: the stitches map them again where they were.
  while (!sleeping_maps_.empty()) {
    const SleepingMap& m = sleeping_maps_.back();
    auto chunk = chunks_.all().find(m.chunk_home_addr);
    if (chunk == chunks_.all().end() ||
        provider_.map(m.addr, chunk->second.handle, m.chunk_offset, m.granules) != ProviderStatus::Ok)
      return ProviderStatus::Failed;
    sleeping_maps_.pop_back();
    access_pending_ = true;
  }
  // Stitches (and, after a peer change while asleep, resident chunks) are
  // opened to the current set; opening an open range again is harmless.
  if (access_pending_ || revoked_asleep_) {
    for (const auto& range : chunks_.opened())
      if (provider_.set_access(range.first, range.second, AccessSet{chunks_.peers(), revoked_asleep_}) !=
          ProviderStatus::Ok)
        return ProviderStatus::Failed;
    access_pending_ = false;
  }
  revoked_asleep_ = 0;
  asleep_ = false;
  return ProviderStatus::Ok;
}

}  // namespace pagefast::policy
