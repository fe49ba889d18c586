// policy/small_blocks.cpp: SmallBlocks (small_blocks.h): bins filled from
// and drained to the centres, slabs made and released.
#include "policy/small_blocks.h"

namespace pagefast::policy {

SmallBlocks::SmallBlocks(LargeBlocks& large, PageMap& page_map, DevicePool* owner)
    : large_(large), page_map_(page_map), owner_(owner) {
  for (int c = 0; c < kClassCount; ++c) centrals_[c].init(c);
}

bool SmallBlocks::refill(ThreadCache& cache, int class_index) {
  const SizeClass& sc = kSizeClasses[class_index];
  SmallEntry entries[kMaxCacheBlocks];
  const int n = centrals_[class_index].pop(entries, int(sc.batch_blocks));
  if (n == 0) return false;
  cache.lock.lock();
  SmallBin& bin = cache.bins[class_index];
  int kept = 0;
  while (kept < n && bin.count < sc.cache_blocks) bin.entries[bin.count++] = entries[kept++];
  owner_add(cache.cached_bytes, uint64_t(kept) * sc.block_bytes);
  cache.lock.unlock();
  if (kept < n) put_back(entries + kept, n - kept, class_index);
  return true;
}

Granules SmallBlocks::next_slab_granules(int class_index) {
  const SizeClass& sc = kSizeClasses[class_index];
  // A class's slabs start at one granule and double with each slab it
  // holds, up to its geometry (up to kMaxSlabGranules): a class asked for
  // a few times pins no more than a granule of free blocks, which larger
  // requests could not use, while a class in steady use gets the geometry
  // that wastes least.
  const uint64_t held = centrals_[class_index].slab_count();
  return Granules(held >= 63 || (uint64_t(1) << held) >= sc.slab_granules ? sc.slab_granules : uint32_t(1) << held);
}

bool SmallBlocks::add_slab(int class_index, Block* backing, Granules granules) {
  const SizeClass& sc = kSizeClasses[class_index];
  Slab* slab = centrals_[class_index].take_record(owner_);
  if (!slab) return false;
  slab->base_addr_.store(backing->addr(), std::memory_order_relaxed);
  slab->backing = backing;
  backing->slab = slab;
  // A record holds sc.blocks_per_slab blocks; a smaller slab uses a prefix.
  slab->block_count = uint32_t(granules.bytes() / sc.block_bytes);
  const uint32_t words = (slab->block_count + 63) / 64;
  for (uint32_t w = 0; w < words; ++w) slab->free_bits[w] = ~uint64_t(0);
  if (slab->block_count % 64) slab->free_bits[words - 1] = (uint64_t(1) << (slab->block_count % 64)) - 1;
  slab->free_count = slab->block_count;
  // backing is set before the entries name the slab: the arena resolves a
  // slab entry through it.
  page_map_.set(backing->addr(), granules, slab);
  slab->active.store(1, std::memory_order_release);
  centrals_[class_index].add(slab);
  return true;
}

void SmallBlocks::put_back(const SmallEntry* entries, int count, int class_index) {
  constexpr int kStep = kQuarantineBatchEntries;
  Slab* released[kStep];
  for (int done = 0; done < count; done += kStep) {
    const int n = centrals_[class_index].push(entries + done, count - done < kStep ? count - done : kStep, released);
    if (n) release_slabs(released, n);
  }
}

void SmallBlocks::release_slabs(Slab** slabs, int count) {
  for (int i = 0; i < count; ++i) {
    Slab* slab = slabs[i];
    slab->active.store(0, std::memory_order_release);
    Block* backing = slab->backing;
    slab->backing = nullptr;
    large_.put_back(backing);
    centrals_[slab->class_index].give_record(slab);
  }
}

void SmallBlocks::drain_bins(ThreadCache& cache) {
  // One lock for every class: a thread other than the owner pays the
  // owner lock's barrier per lock (owner_lock.h). The entries go to their
  // centres under it, as the lock order allows (a thread cache's lock ->
  // a size-class lock -> the device lock).
  cache.lock.lock();
  for (int c = 0; c < kClassCount; ++c) {
    SmallBin& bin = cache.bins[c];
    const int n = int(bin.count);
    if (n == 0) continue;
    bin.count = 0;
    owner_add(cache.cached_bytes, uint64_t(0) - uint64_t(n) * kSizeClasses[c].block_bytes);
    put_back(bin.entries, n, c);
  }
  cache.lock.unlock();
}

void SmallBlocks::release_all_empty() {
  for (int c = 0; c < kClassCount; ++c) {
    Slab* slabs[kQuarantineBatchEntries];
    while (int n = centrals_[c].take_empty(slabs, kQuarantineBatchEntries)) release_slabs(slabs, n);
  }
}

std::string SmallBlocks::describe() {
  std::string text;
  for (int c = 0; c < kClassCount; ++c) {
    const uint64_t slabs = centrals_[c].slab_count();
    if (slabs)
      text += "; class " + std::to_string(kSizeClasses[c].block_bytes) + ": " + std::to_string(slabs) + " slabs, " +
              std::to_string(centrals_[c].free_blocks()) + " free blocks";
  }
  return text;
}

bool SmallBlocks::occupancy(const uint64_t in_bins[kClassCount], ClassOccupancy out[kClassCount], int* count) {
  bool complete = true;
  for (int k = 0; k < kClassCount; ++k) {
    uint64_t slabs = 0, central_free = 0, total = 0;
    if (!centrals_[k].try_counts(&slabs, &central_free, &total)) {
      complete = false;
      continue;
    }
    if (slabs == 0) continue;
    ClassOccupancy& o = out[(*count)++];
    o.block_bytes = kSizeClasses[k].block_bytes;
    o.slabs = slabs;
    o.free_blocks = central_free + in_bins[k];
    if (o.free_blocks > total) o.free_blocks = total;  // counts read at different moments
    o.blocks_in_use = total - o.free_blocks;
  }
  return complete;
}

}  // namespace pagefast::policy
