// policy/arena_sleep.cpp: the arena's half of sleep and wake (arena.h,
// docs/POOL.md "Sleep and wake"): physical memory goes, records and
// addresses stay. Every step that fails leaves a consistent arena: a chunk
// is either resident (mapped at home, open) or asleep (unmapped; released,
// or its handle kept), and wake can be called again until it succeeds.
#include <cstring>

#include "policy/arena.h"

namespace pagefast::policy {

Arena::SleepResult Arena::sleep(bool keep) {
  SleepResult result;
  if (asleep_) return result;
  if (!unreleased_.empty()) retry_releases();
  // Stitches first: a chunk is released only once no mapping of it is left.
  // A stitch map the driver refuses to unmap pins its chunk (resident).
  std::vector<uint64_t> pinned;
  for (const auto& range : opened_) {
    if (chunks_.count(range.first)) continue;
    Span* span = page_map_.lookup(range.first);
    Block* b = !span                           ? nullptr
               : span->kind == SpanKind::Slab ? static_cast<Slab*>(span)->backing
                                              : static_cast<Block*>(span);
    if (!b || !b->stitch) continue;
    for (const StitchInfo::Map& m : b->stitch->maps) {
      bool ok = false;
      try {
        sleeping_maps_.reserve(sleeping_maps_.size() + 1);
        ok = provider_.unmap(m.addr, m.granules);
      } catch (...) {
      }
      if (ok) sleeping_maps_.push_back({m.addr, m.granules, m.chunk_home_addr, m.chunk_offset});
      else pinned.push_back(m.chunk_home_addr);
    }
  }
  for (auto& entry : chunks_) {
    const uint64_t home = entry.first;
    Chunk& chunk = entry.second;
    bool is_pinned = chunk.unreleasable;
    for (uint64_t p : pinned) is_pinned |= p == home;
    if (is_pinned) {
      ++result.resident_chunks;
      continue;
    }
    const uint64_t bytes = chunk.granules.bytes();
    void* host = nullptr;
    if (keep) {
      if (provider_.host_alloc(bytes, &host) != ProviderStatus::Ok) {
        ++result.resident_chunks;
        continue;
      }
      if (provider_.copy_to_host(host, home, bytes) != ProviderStatus::Ok) {
        provider_.host_free(host);
        ++result.resident_chunks;
        continue;
      }
    }
    if (!provider_.unmap(home, chunk.granules)) {
      if (host) provider_.host_free(host);
      ++result.resident_chunks;
      continue;
    }
    chunk.asleep = true;
    chunk.host = host;
    if (host) kept_bytes_ += bytes;
    result.kept_bytes += host ? bytes : 0;
    // A refused release keeps the memory, and with it the contents: wake
    // maps this handle again.
    chunk.handle_kept = !provider_.release_chunk(chunk.handle);
    slept_ += chunk.granules;
    ++result.slept_chunks;
  }
  asleep_ = true;
  return result;
}

bool Arena::wake_chunk(uint64_t home, Chunk& chunk) {
  ChunkHandle handle = chunk.handle;
  if (!chunk.handle_kept && provider_.create_chunk(chunk.granules, &handle) != ProviderStatus::Ok) return false;
  auto undo = [&] {
    if (!chunk.handle_kept && !provider_.release_chunk(handle)) release_or_keep(handle);
  };
  if (!chunk.home_mapped && provider_.map(home, handle, Granules(0), chunk.granules) != ProviderStatus::Ok) {
    undo();
    return false;
  }
  if (provider_.set_access(home, chunk.granules, AccessSet{peers_, revoked_asleep_}) != ProviderStatus::Ok ||
      (chunk.host && (!chunk.handle_kept || chunk.fill_pending) &&
       provider_.copy_from_host(home, chunk.host, chunk.granules.bytes()) != ProviderStatus::Ok)) {
    if (!provider_.unmap(home, chunk.granules)) {
      // Mapped for good at its home: keep it as the chunk's memory (its
      // contents are lost only if the copy failed, and that is retried).
      chunk.handle = handle;
      chunk.home_mapped = true;
      if (!chunk.handle_kept) {
        // Fresh memory: the kept contents (if any) still have to go in.
        chunk.handle_kept = true;
        chunk.fill_pending = chunk.host != nullptr;
      }
      return false;
    }
    undo();
    return false;
  }
  if (chunk.host) {
    provider_.host_free(chunk.host);
    kept_bytes_ -= chunk.granules.bytes();
    chunk.host = nullptr;
  }
  chunk.handle = handle;
  chunk.handle_kept = false;
  chunk.home_mapped = false;
  chunk.fill_pending = false;
  chunk.asleep = false;
  slept_ -= chunk.granules;
  return true;
}

ProviderStatus Arena::wake() {
  if (!asleep_) return ProviderStatus::Ok;
  for (auto& entry : chunks_)
    if (entry.second.asleep && !wake_chunk(entry.first, entry.second)) return ProviderStatus::OutOfMemory;
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
