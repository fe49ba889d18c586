// policy/arena_release.cpp: chunks going back to the driver: whole free
// chunks cut out of their free runs (HomeRuns::cut_out) and big chunks
// released before another big growth; a release the driver refused is
// ChunkTable's to try again.
#include "policy/arena.h"

namespace pagefast::policy {

bool Arena::release_chunk_of(Block* host, ChunkTable::Map::iterator chunk) {
  const uint64_t chunk_addr = chunk->first, chunk_end = chunk_addr + chunk->second.granules.bytes();
  if (!provider_.unmap(chunk_addr, chunk->second.granules)) {
    chunk->second.unreleasable = true;
    ++counters_.leaks;
    return false;
  }
  chunks_.release_or_keep(chunk->second.handle);
  runs_.cut_out(host, chunk_addr, chunk_end);
  address_space_.give(chunk_addr, chunk->second.granules);
  chunks_.remove(chunk);
  ++counters_.releases;
  return true;
}

void Arena::release_big_for(Granules granules) {
  Granules released;
  while (released < granules) {
    if (!runs_.reserve(1)) return;
    // The smallest whole free big chunk: one that take() could not use.
    ChunkTable::Map& all = chunks_.all();
    auto best = all.end();
    Block* host = nullptr;
    runs_.big_bins().for_each_largest_first([&](Block* b) {
      auto it = all.find(b->addr());
      if (it != all.end() && it->second.granules == b->granules() && !it->second.unreleasable &&
          (best == all.end() || it->second.granules < best->second.granules)) {
        best = it;
        host = b;
      }
      return true;
    });
    if (!host) return;
    const Granules size = best->second.granules;
    if (!release_chunk_of(host, best)) continue;
    ++counters_.big_releases;
    released += size;
  }
}

int Arena::release_free_chunks(int max_chunks) {
  if (sleep_.asleep()) return 0;
  if (chunks_.has_unreleased()) chunks_.retry_releases();
  int released = 0;
  while (released < max_chunks) {
    if (!runs_.reserve(1)) break;
    Block* host = nullptr;
    ChunkTable::Map& all = chunks_.all();
    auto chunk = all.end();
    auto visit = [&](Block* b) {
      for (auto it = all.lower_bound(b->addr());
           it != all.end() && it->first + it->second.granules.bytes() <= b->end_addr(); ++it)
        if (!it->second.unreleasable) {
          host = b;
          chunk = it;
          return false;
        }
      return true;
    };
    runs_.bins().for_each_largest_first(visit);
    if (!host) runs_.big_bins().for_each_largest_first(visit);
    if (!host) break;
    if (release_chunk_of(host, chunk)) ++released;
  }
  return released;
}
}  // namespace pagefast::policy
