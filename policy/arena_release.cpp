// policy/arena_release.cpp: chunks going back to the driver: whole free
// chunks cut out of their free runs, big chunks released before another
// big growth, and releases the driver refused, kept and tried again.
#include <new>
#include <vector>

#include "policy/arena.h"

namespace pagefast::policy {

void Arena::release_or_keep(ChunkHandle handle) {
  if (provider_.release_chunk(handle)) return;
  ++counters_.leaks;
  try {
    unreleased_.push_back(handle);
  } catch (...) {
    // Out of host memory: this one handle is leaked for good.
  }
}

void Arena::retry_releases() {
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

bool Arena::release_chunk_of(Block* host, std::map<uint64_t, Chunk>::iterator chunk) {
  const uint64_t chunk_addr = chunk->first, chunk_end = chunk_addr + chunk->second.granules.bytes();
  if (!provider_.unmap(chunk_addr, chunk->second.granules)) {
    chunk->second.unreleasable = true;
    ++counters_.leaks;
    return false;
  }
  opened_.erase(chunk_addr);
  release_or_keep(chunk->second.handle);

  // Cut the chunk out of its free host block; the run splits in two.
  bins_of(host).remove(host);
  const uint64_t host_addr = host->addr(), host_end = host->end_addr();
  Block* prev = host->addr_prev;
  Block* next = host->addr_next;
  Block* left = host_addr < chunk_addr ? host : nullptr;
  Block* right =
      chunk_end < host_end ? new_block(chunk_end, granules_floor(host_end - chunk_end), BlockState::Free) : nullptr;
  if (right) right->big = host->big;
  if (left) {
    left->set_range(host_addr, granules_floor(chunk_addr - host_addr));
    left->addr_next = nullptr;
    mark_ends(left);
    bins_of(left).insert(left);
  } else {
    if (prev) prev->addr_next = nullptr;
    recycle(host);
  }
  if (right) {
    right->addr_prev = nullptr;
    right->addr_next = next;
    if (next) next->addr_prev = right;
    mark_ends(right);
    bins_of(right).insert(right);
  } else if (next) {
    next->addr_prev = nullptr;
  }
  page_map_.set(chunk_addr, chunk->second.granules, nullptr);
  address_space_.give(chunk_addr, chunk->second.granules);
  mapped_ -= chunk->second.granules;
  chunks_.erase(chunk);
  ++counters_.releases;
  return true;
}

void Arena::release_big_for(Granules granules) {
  Granules released;
  while (released < granules) {
    if (!spare_blocks_.reserve(1)) return;
    // The smallest whole free big chunk: one that take() could not use.
    auto best = chunks_.end();
    Block* host = nullptr;
    big_bins_.for_each_largest_first([&](Block* b) {
      auto it = chunks_.find(b->addr());
      if (it != chunks_.end() && it->second.granules == b->granules() && !it->second.unreleasable &&
          (best == chunks_.end() || it->second.granules < best->second.granules)) {
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
  if (asleep_) return 0;
  if (!unreleased_.empty()) retry_releases();
  int released = 0;
  while (released < max_chunks) {
    if (!spare_blocks_.reserve(1)) break;
    Block* host = nullptr;
    auto chunk = chunks_.end();
    auto visit = [&](Block* b) {
      for (auto it = chunks_.lower_bound(b->addr());
           it != chunks_.end() && it->first + it->second.granules.bytes() <= b->end_addr(); ++it)
        if (!it->second.unreleasable) {
          host = b;
          chunk = it;
          return false;
        }
      return true;
    };
    bins_.for_each_largest_first(visit);
    if (!host) big_bins_.for_each_largest_first(visit);
    if (!host) break;
    if (release_chunk_of(host, chunk)) ++released;
  }
  return released;
}
}  // namespace pagefast::policy
