// policy/arena_sleep.cpp: the arena's sleep (arena_sleep.h, docs/POOL.md
// "Sleep and wake"): physical memory goes, records and
// addresses stay. Every step that fails leaves a consistent arena: a chunk
// is either resident (mapped at home, open) or asleep (unmapped; released,
// or its handle kept; or, in wake, mapped at home with its contents still
// to go in), and wake can be called again until it succeeds.
//
// The contents move in one batch per call (Provider::copy_to_host /
// copy_from_host), so that the provider can overlap the copies of many
// chunks: the per-chunk driver steps (unmap, release) come after it. Wake:
// arena_wake.cpp.
#include <cstring>

#include "policy/arena_sleep.h"

namespace pagefast::policy {

namespace {

bool shares(const std::vector<ChunkHandle>& shared, ChunkHandle handle) {
  for (const ChunkHandle& h : shared)
    if (h.value == handle.value) return true;
  return false;
}

}  // namespace

bool ArenaSleep::unmap_stitches_for_sleep(std::vector<uint64_t>* pinned) {
  // A stitch map the driver refuses to unmap pins its chunk (resident).
  bool all_listed = true;
  for (const auto& range : chunks_.opened()) {
    if (chunks_.all().count(range.first)) continue;
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

ArenaSleep::SleepResult ArenaSleep::sleep(unsigned keep_modes, Clock& clock, const std::vector<ChunkHandle>& shared) {
  SleepResult result;
  // Asleep already (a sleep again): what stayed resident is looked at
  // again, so that a chunk kept for an importer that let go goes now.
  if (!asleep_ && chunks_.has_unreleased()) chunks_.retry_releases();
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
    for (const auto& entry : chunks_.all()) result.resident_chunks += entry.second.asleep ? 0 : 1;
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

void ArenaSleep::choose_going(unsigned keep_modes, bool all_resident, const std::vector<uint64_t>& pinned,
                              const std::vector<ChunkHandle>& shared, CopyBatch* batch, SleepResult* result) {
  batch->chunks.reserve(chunks_.all().size());
  batch->homes.reserve(chunks_.all().size());
  batch->first.reserve(chunks_.all().size() + 1);
  for (auto& entry : chunks_.all()) {
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

void ArenaSleep::release_going(const CopyBatch& batch, SleepResult* result) {
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

void ArenaSleep::plan_copies(uint64_t home, Chunk& chunk, unsigned keep_modes, std::vector<HostCopy>* copies) {
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

void ArenaSleep::keep_sizes(std::vector<uint64_t>* out) const {
  if (asleep_) return;
  std::vector<KeptPiece> pieces;
  for (const auto& entry : chunks_.all()) {
    if (entry.second.asleep || entry.second.unreleasable) continue;
    pieces.clear();
    live_pieces(entry.first, entry.second, &pieces, true);
    for (const KeptPiece& piece : pieces) out->push_back(piece.granules.bytes());
  }
}

void ArenaSleep::live_pieces(uint64_t home, const Chunk& chunk, std::vector<KeptPiece>* out, bool idle_is_free,
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

void ArenaSleep::peers_changed(const AccessSet& access) {
  revoked_asleep_ = (revoked_asleep_ | access.revoked) & ~access.peers;
  access_pending_ = true;
}

void ArenaSleep::free_kept(Chunk& chunk) {
  for (KeptPiece& piece : chunk.kept)
    if (piece.host) provider_.host_free(piece.host, piece.granules.bytes());
  chunk.kept.clear();
}

}  // namespace pagefast::policy
