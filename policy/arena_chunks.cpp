// policy/arena_chunks.cpp: the arena's chunks by home address, the opened
// ranges and their peers, and the releases the driver refused
// (arena_chunks.h).
#include "policy/arena_chunks.h"

#include <new>

namespace pagefast::policy {

bool ChunkTable::add(uint64_t home, ChunkHandle handle, Granules granules) {
  try {
    chunks_.emplace(home, Chunk{handle, granules});
    opened_.emplace(home, granules);
  } catch (const std::bad_alloc&) {
    chunks_.erase(home);  // home is fresh: no other chunk there
    return false;
  }
  mapped_ += granules;
  return true;
}

void ChunkTable::remove(Map::iterator chunk) {
  opened_.erase(chunk->first);
  mapped_ -= chunk->second.granules;
  chunks_.erase(chunk);
}

ChunkTable::Map::const_iterator ChunkTable::containing(uint64_t addr) const {
  auto it = chunks_.upper_bound(addr);
  if (it == chunks_.begin()) return chunks_.end();
  --it;
  return addr < it->first + it->second.granules.bytes() ? it : chunks_.end();
}

bool ChunkTable::edge(uint64_t addr) const {
  auto it = chunks_.lower_bound(addr);
  if (it != chunks_.end() && it->first == addr) return true;
  if (it == chunks_.begin()) return false;
  --it;
  return it->first + it->second.granules.bytes() == addr;
}

bool ChunkTable::home_pieces(uint64_t addr, Granules granules, PieceList* out) const {
  uint64_t cursor = addr;
  const uint64_t stop = addr + granules.bytes();
  while (cursor < stop) {
    auto it = containing(cursor);
    if (it == chunks_.end()) return false;
    const uint64_t chunk_end = it->first + it->second.granules.bytes();
    const uint64_t segment_end = stop < chunk_end ? stop : chunk_end;
    out->push_back({it->second.handle, granules_floor(cursor - it->first), granules_floor(segment_end - cursor),
                    it->second.granules});
    cursor = segment_end;
  }
  return true;
}

bool ChunkTable::holds_handle(ChunkHandle handle) const {
  for (const auto& [home, chunk] : chunks_)
    if (chunk.handle.value == handle.value && (!chunk.asleep || chunk.handle_kept)) return true;
  return false;
}

void ChunkTable::mark_unreleasable(uint64_t home) {
  auto chunk = chunks_.find(home);
  if (chunk != chunks_.end()) chunk->second.unreleasable = true;
}

AccessSet ChunkTable::set_peers(uint64_t peers) {
  const AccessSet access{peers, peers_ & ~peers};
  peers_ = peers;
  return access;
}

int ChunkTable::apply_access(const AccessSet& access) {
  int refused = 0;
  for (const auto& range : opened_)
    if (provider_.set_access(range.first, range.second, access) != ProviderStatus::Ok) ++refused;
  return refused;
}

void ChunkTable::release_or_keep(ChunkHandle handle) {
  if (provider_.release_chunk(handle)) return;
  ++counters_.leaks;
  try {
    unreleased_.push_back(handle);
  } catch (...) {
    // Out of host memory: this one handle is leaked for good.
  }
}

void ChunkTable::retry_releases() {
  size_t kept = 0;
  for (ChunkHandle handle : unreleased_) {
    if (provider_.release_chunk(handle)) {
      ++counters_.retried;
      continue;
    }
    unreleased_[kept++] = handle;
  }
  unreleased_.resize(kept);
}

}  // namespace pagefast::policy
