// policy/arena_sleep.cpp: the arena's half of sleep and wake (arena.h,
// docs/POOL.md "Sleep and wake"): physical memory goes, records and
// addresses stay. Every step that fails leaves a consistent arena: a chunk
// is either resident (mapped at home, open) or asleep (unmapped; released,
// or its handle kept; or, in wake, mapped at home with its contents still
// to go in), and wake can be called again until it succeeds.
//
// The contents move in one batch per call (Provider::copy_to_host /
// copy_from_host), so that the provider can overlap the copies of many
// chunks: the per-chunk driver steps (unmap, release; create, map, access)
// come before or after it.
#include <cstring>

#include "policy/arena.h"

namespace pagefast::policy {

namespace {

bool shares(const std::vector<ChunkHandle>& shared, ChunkHandle handle) {
  for (const ChunkHandle& h : shared)
    if (h.value == handle.value) return true;
  return false;
}

}  // namespace

bool Arena::unmap_stitches_for_sleep(std::vector<uint64_t>* pinned) {
  // A stitch map the driver refuses to unmap pins its chunk (resident).
  bool all_listed = true;
  for (const auto& range : opened_) {
    if (chunks_.count(range.first)) continue;
    Span* span = page_map_.lookup(range.first);
    Block* b = arena_block_of(span);
    if (!b || !b->stitch) continue;
    for (const StitchInfo::Map& m : b->stitch->maps) {
      // A sleep again: a map an earlier sleep undid stays undone.
      bool undone = false;
      for (const SleepingMap& s : sleeping_maps_) undone = undone || s.addr == m.addr;
      if (undone) continue;
      bool ok = false;
      try {
        sleeping_maps_.reserve(sleeping_maps_.size() + 1);
        pinned->reserve(pinned->size() + 1);
        ok = provider_.unmap(m.addr, m.granules);
      } catch (...) {
        // Out of host memory: the map stays, and since its chunk is not
        // on the list, every chunk stays.
        all_listed = false;
        continue;
      }
      if (ok) sleeping_maps_.push_back({m.addr, m.granules, m.chunk_home_addr, m.chunk_offset});
      else pinned->push_back(m.chunk_home_addr);
    }
  }
  return all_listed;
}

Arena::SleepResult Arena::sleep(unsigned keep_modes, Clock& clock, const std::vector<ChunkHandle>& shared) {
  SleepResult result;
  // Asleep already (a sleep again): what stayed resident is looked at
  // again, so that a chunk kept for an importer that let go goes now.
  if (!asleep_ && !unreleased_.empty()) retry_releases();
  // Stitches first: a chunk is released only once no mapping of it is left.
  std::vector<uint64_t> pinned;
  const bool keep_all_resident = !unmap_stitches_for_sleep(&pinned);
  CopyBatch batch;
  try {
    choose_going(keep_modes, keep_all_resident, pinned, shared, &batch, &result);
  } catch (...) {
    // Out of host memory for these lists: every chunk stays resident,
    // which is a legal sleep.
    for (Chunk* chunk : batch.chunks) chunk->kept.clear();
    result = SleepResult();
    for (const auto& entry : chunks_) result.resident_chunks += entry.second.asleep ? 0 : 1;
    asleep_ = true;
    return result;
  }
  const uint64_t copy_start = clock.now_ns();
  if (!batch.pieces.empty()) provider_.copy_to_host(batch.pieces.data(), batch.pieces.size());
  const uint64_t unmap_start = clock.now_ns();
  result.copy_ns = unmap_start - copy_start;
  release_going(batch, &result);
  result.unmap_ns = clock.now_ns() - unmap_start;
  asleep_ = true;
  return result;
}

void Arena::choose_going(unsigned keep_modes, bool all_resident, const std::vector<uint64_t>& pinned,
                         const std::vector<ChunkHandle>& shared, CopyBatch* batch, SleepResult* result) {
  batch->chunks.reserve(chunks_.size());
  batch->homes.reserve(chunks_.size());
  batch->first.reserve(chunks_.size() + 1);
  for (auto& entry : chunks_) {
    Chunk& chunk = entry.second;
    if (chunk.asleep) continue;
    bool is_pinned = chunk.unreleasable || all_resident;
    for (uint64_t p : pinned) is_pinned |= p == entry.first;
    const bool is_shared = shares(shared, chunk.handle);
    if (is_pinned || is_shared) {
      ++result->resident_chunks;
      if (is_shared) {
        ++result->shared_chunks;
        result->shared_bytes += chunk.granules.bytes();
      }
      continue;
    }
    batch->chunks.push_back(&chunk);
    batch->homes.push_back(entry.first);
    batch->first.push_back(batch->pieces.size());
    if (keep_modes & kSleepKeep) plan_copies(entry.first, chunk, keep_modes, &batch->pieces);
  }
  batch->first.push_back(batch->pieces.size());
}

void Arena::release_going(const CopyBatch& batch, SleepResult* result) {
  const std::vector<HostCopy>& copies = batch.pieces;
  const std::vector<size_t>& first = batch.first;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    Chunk& chunk = *batch.chunks[i];
    uint64_t kept = 0;
    bool copied = true;
    for (size_t c = first[i]; c < first[i + 1]; ++c) copied &= copies[c].status == ProviderStatus::Ok;
    for (size_t c = first[i]; c < first[i + 1]; ++c) {
      // A failed copy left nothing: the chunk stays as it was.
      if (!copied && copies[c].status == ProviderStatus::Ok) provider_.host_free(copies[c].host, copies[c].bytes);
      if (copied) chunk.kept[c - first[i]].host = copies[c].host;
      kept += copies[c].bytes;
    }
    if (!copied || !provider_.unmap(batch.homes[i], chunk.granules)) {
      if (copied) free_kept(chunk);
      chunk.kept.clear();
      ++result->resident_chunks;
      continue;
    }
    chunk.asleep = true;
    kept_bytes_ += kept;
    result->kept_bytes += kept;
    // A refused release keeps the memory, and with it the contents: wake
    // maps this handle again.
    chunk.handle_kept = !provider_.release_chunk(chunk.handle);
    slept_ += chunk.granules;
    ++result->slept_chunks;
  }
}

void Arena::plan_copies(uint64_t home, Chunk& chunk, unsigned keep_modes, std::vector<HostCopy>* copies) {
  const bool to_disk = (keep_modes & kSleepToDisk) != 0;
  chunk.kept.clear();
  live_pieces(home, chunk, &chunk.kept, false, to_disk);
  for (KeptPiece& piece : chunk.kept) {
    piece.on_disk = to_disk;
    HostCopy copy;
    copy.addr = home + piece.offset.bytes();
    copy.bytes = piece.granules.bytes();
    copy.mode = keep_modes & (kSleepToDisk | kSleepHostRelease);
    copies->push_back(copy);
  }
}

void Arena::keep_sizes(std::vector<uint64_t>* out) const {
  if (asleep_) return;
  std::vector<KeptPiece> pieces;
  for (const auto& entry : chunks_) {
    if (entry.second.asleep || entry.second.unreleasable) continue;
    pieces.clear();
    live_pieces(entry.first, entry.second, &pieces, true);
    for (const KeptPiece& piece : pieces) out->push_back(piece.granules.bytes());
  }
}

void Arena::live_pieces(uint64_t home, const Chunk& chunk, std::vector<KeptPiece>* out, bool idle_is_free,
                        bool by_block) const {
  const uint64_t end = home + chunk.granules.bytes();
  for (uint64_t addr = home; addr < end;) {
    const Block* b = arena_block_of(page_map_.lookup(addr));
    uint64_t next = addr + kGranuleBytes;
    bool live = true, starts_block = false;
    if (b && b->addr() <= addr && b->addr() + b->granules().bytes() > addr) {
      starts_block = by_block && b->addr() == addr;
      next = b->addr() + b->granules().bytes();
      if (next > end) next = end;
      const BlockState state = b->load_state();
      live = state != BlockState::Free &&
             !(idle_is_free && (state == BlockState::Quarantined || state == BlockState::Cached));
    }
    if (live) {
      const Granules offset = granules_floor(addr - home), granules = granules_floor(next - addr);
      if (!out->empty() && !starts_block && out->back().offset + out->back().granules == offset)
        out->back().granules += granules;
      else out->push_back(KeptPiece{offset, granules, nullptr});
    }
    addr = next;
  }
}

void Arena::free_kept(Chunk& chunk) {
  for (KeptPiece& piece : chunk.kept)
    if (piece.host) provider_.host_free(piece.host, piece.granules.bytes());
  chunk.kept.clear();
}

bool Arena::bring_up(uint64_t home, Chunk& chunk) {
  ChunkHandle handle = chunk.handle;
  // Fresh memory: created now, its contents (if kept) still to go in.
  const bool fresh = !chunk.handle_kept;
  if (fresh && provider_.create_chunk(chunk.granules, &handle) != ProviderStatus::Ok) return false;
  auto undo = [&] {
    if (fresh) release_or_keep(handle);
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
  if (provider_.set_access(home, chunk.granules, AccessSet{peers_, revoked_asleep_}) != ProviderStatus::Ok) {
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

void Arena::finish_wake(Chunk& chunk) {
  for (const KeptPiece& piece : chunk.kept) kept_bytes_ -= piece.granules.bytes();
  free_kept(chunk);
  chunk.handle_kept = false;
  chunk.home_mapped = false;
  chunk.fill_pending = false;
  chunk.asleep = false;
  slept_ -= chunk.granules;
}

void Arena::undo_fill(uint64_t home, Chunk& chunk) {
  // The memory holds nothing worth keeping (fill_pending): give it back if
  // the driver lets go of the mapping; else the next wake fills it.
  if (!provider_.unmap(home, chunk.granules)) return;
  chunk.home_mapped = false;
  chunk.handle_kept = false;
  chunk.fill_pending = false;
  release_or_keep(chunk.handle);
}

ProviderStatus Arena::wake(Clock& clock, WakeResult* out) {
  WakeResult result;
  if (!asleep_) return ProviderStatus::Ok;
  CopyBatch batch;
  try {
    uint64_t pieces = 0;
    for (auto& entry : chunks_) pieces += entry.second.asleep ? entry.second.kept.size() : 0;
    batch.pieces.reserve(pieces);
    batch.chunks.reserve(chunks_.size());
    batch.homes.reserve(chunks_.size());
    batch.first.reserve(chunks_.size() + 1);
  } catch (...) {
    return ProviderStatus::OutOfMemory;
  }
  // Every chunk mapped and opened first (a failure stops there: those
  // before it still get their contents), then one batch of copies.
  ProviderStatus status = ProviderStatus::Ok;
  const uint64_t map_start = clock.now_ns();
  for (auto& entry : chunks_) {
    Chunk& chunk = entry.second;
    if (!chunk.asleep) continue;
    if (!bring_up(entry.first, chunk)) {
      status = ProviderStatus::OutOfMemory;
      break;
    }
    if (!needs_fill(chunk)) {
      finish_wake(chunk);
      ++result.woken_chunks;
      continue;
    }
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
  const uint64_t copy_start = clock.now_ns();
  result.map_ns = copy_start - map_start;
  if (!batch.pieces.empty()) provider_.copy_from_host(batch.pieces.data(), batch.pieces.size());
  const uint64_t free_start = clock.now_ns();
  result.copy_ns = free_start - copy_start;
  status = settle_fills(batch, status, &result);
  result.free_ns = clock.now_ns() - free_start;
  if (out) *out = result;
  if (status != ProviderStatus::Ok) return status;
  return remap_stitches();
}

ProviderStatus Arena::settle_fills(const CopyBatch& batch, ProviderStatus status, WakeResult* result) {
  const std::vector<HostCopy>& fills = batch.pieces;
  const std::vector<size_t>& first = batch.first;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
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

ProviderStatus Arena::remap_stitches() {
  // Every chunk is back: the stitches map them again where they were.
  while (!sleeping_maps_.empty()) {
    const SleepingMap& m = sleeping_maps_.back();
    auto chunk = chunks_.find(m.chunk_home_addr);
    if (chunk == chunks_.end() ||
        provider_.map(m.addr, chunk->second.handle, m.chunk_offset, m.granules) != ProviderStatus::Ok)
      return ProviderStatus::Failed;
    sleeping_maps_.pop_back();
    access_pending_ = true;
  }
  // Stitches (and, after a peer change while asleep, resident chunks) are
  // opened to the current set; opening an open range again is harmless.
  if (access_pending_ || revoked_asleep_) {
    for (const auto& range : opened_)
      if (provider_.set_access(range.first, range.second, AccessSet{peers_, revoked_asleep_}) != ProviderStatus::Ok)
        return ProviderStatus::Failed;
    access_pending_ = false;
  }
  revoked_asleep_ = 0;
  asleep_ = false;
  return ProviderStatus::Ok;
}

}  // namespace pagefast::policy
