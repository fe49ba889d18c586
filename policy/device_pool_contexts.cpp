// policy/device_pool_contexts.cpp: the queries that read the arena under
// the device lock for the glue: DevicePool::blocks_of_context, the live
// allocations made in one context; export_of, the physical pieces of a
// block for CUDA IPC; holds_chunk.
//
// blocks_of_context: cuCtxDestroy frees a context's
// cuMemAlloc memory in the driver; the glue (interpose/pool/contexts.cpp)
// asks for the pool's blocks of that context and frees them as the program
// would have, so that they go back to the pool and a later free of one of
// them answers as the driver does.
//
// A walk over every granule the pool has in use: a slow path (one per
// destroyed context, beside a driver call that tears a context down), so
// no record is kept per context and the hot path only stores the tag.
#include <new>

#include "policy/device_pool.h"

namespace pagefast::policy {
namespace {

// The live small blocks of `slab` made in `context`.
void slab_blocks_of(const Slab* slab, ContextTag context, std::vector<uint64_t>* out) {
  if (!slab->active.load(std::memory_order_acquire)) return;
  const uint64_t base = slab->base_addr();
  for (uint32_t i = 0; i < slab->block_count; ++i) {
    const SlabBlockInfo& info = slab->info[i];
    if (info.live.load(std::memory_order_acquire) == 1 && info.context_tag.load(std::memory_order_relaxed) == context)
      out->push_back(base + uint64_t(i) * slab->block_bytes);
  }
}

}  // namespace

bool DevicePool::blocks_of_context(ContextTag context, std::vector<uint64_t>* out) {
  if (context == kNoContextTag) return true;
  try {
    large_.locked([&](const Arena& arena) {
      arena.for_each_taken([&](uint64_t addr, uint64_t end_addr) {
        for (uint64_t g = addr; g < end_addr; g += kGranuleBytes) {
          // Each owner is visited once, at its first granule: the entries
          // of a free block's interior may name an earlier owner.
          const Span* span = page_map_.lookup(g);
          if (!span || span->pool != this) continue;
          if (span->kind == SpanKind::Slab) {
            const Slab* slab = static_cast<const Slab*>(span);
            if (slab->base_addr() == g) slab_blocks_of(slab, context, out);
            continue;
          }
          const Block* block = static_cast<const Block*>(span);
          if (block->addr() == g && block->load_state() == BlockState::Used &&
              block->context_tag.load(std::memory_order_relaxed) == context)
            out->push_back(g);
        }
      });
    });
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

bool DevicePool::export_of(const Span* span, uint64_t addr, Export* out) {
  // Under the device lock the block cannot be retired to the arena, cut
  // or stitched while its pieces are read.
  return large_.locked([&](const Arena& arena) {
    if (!range_of(span, addr, &out->range)) return false;
    const Block* container = arena_block_of(span);
    if (!container) return false;
    const uint64_t first = out->range.base_addr & ~(kGranuleBytes - 1);
    const uint64_t last = out->range.base_addr + out->range.bytes;
    if (first < container->addr()) return false;
    out->first_granule_addr = first;
    out->pieces.clear();
    try {
      return arena.physical_pieces(container, granules_floor(first - container->addr()), granules_ceil(last - first),
                                   &out->pieces);
    } catch (...) {
      return false;
    }
  });
}

bool DevicePool::holds_chunk(ChunkHandle handle) {
  return large_.locked([&](const Arena& arena) { return arena.holds_handle(handle); });
}

}  // namespace pagefast::policy
