// policy/arena_runs.h: the blocks cut from an arena's home memory
// (policy/arena.h). Chunks grown in turn sit side by side, so a run of
// blocks linked by address (Block::addr_prev/addr_next) may span chunks;
// free blocks coalesce with free neighbours and wait in TLSF bins, those
// of big chunks (big_chunks) in bins of their own, never coalescing
// across a big chunk's edges. Every free block's first and last granule
// name it in the page map (what coalescing looks up).
//
// HomeRuns also holds the block records (a MetaPool) that the stitches
// take theirs from. It calls nothing but the page map; which addresses
// are chunks is ChunkTable's (arena_chunks.h). Not thread-safe: the
// device lock.
#pragma once

#include "policy/blocks.h"
#include "policy/free_bins.h"
#include "policy/page_map.h"

namespace pagefast::policy {

class HomeRuns {
 public:
  // `owner`: the pool whose spans the blocks are (Span::pool).
  HomeRuns(PageMap& page_map, DevicePool* owner) : page_map_(page_map), owner_(owner) {}
  ~HomeRuns();  // a stitch record's StitchInfo goes with it
  HomeRuns(const HomeRuns&) = delete;
  HomeRuns& operator=(const HomeRuns&) = delete;

  // Makes sure the next `records` new_block calls succeed.
  bool reserve(int records) { return spare_blocks_.reserve(records); }
  Block* new_block(uint64_t addr, Granules granules, BlockState state);
  void recycle(Block* block);

  // A free block of exactly `granules`, now in `state`, every granule of
  // it in the page map; with big_first, a big chunk's run that it leaves
  // at most an eighth unused first. NULL if no free run is long enough.
  Block* take(Granules granules, BlockState state, bool big_first);
  // Coalesces `block` (free, on no bins) with its free neighbours, then
  // puts it on the bins.
  void insert_free(Block* block);
  // REQUIRES: a block in use, 0 < keep < its granules. Gives back all but
  // its first `keep` granules; false, nothing changed, without a record.
  bool put_back_tail(Block* block, Granules keep);
  // A free run of home memory just mapped at [addr, addr + granules),
  // joined to the runs beside it unless either is big. REQUIRES: a
  // record reserved.
  void add_run(uint64_t addr, Granules granules, bool big);
  // Cuts [addr, end) out of the free block `host` that holds it (the run
  // splits in two) and clears its page-map entries. REQUIRES: a record
  // reserved.
  void cut_out(Block* host, uint64_t addr, uint64_t end);
  // Takes the free run `run` off the ordinary bins for a stitch, cut to
  // at most `granules` (the rest stays free).
  void take_run(Block* run, Granules granules);

  const FreeBins& bins() const { return bins_; }
  const FreeBins& big_bins() const { return big_bins_; }
  Granules free() const { return bins_.total() + big_bins_.total(); }
  uint64_t block_count() const { return bins_.block_count() + big_bins_.block_count(); }
  // The longest free run: scans only the highest non-empty bin.
  Granules largest_free() const;

 private:
  FreeBins& bins_of(const Block* b) { return b->big ? big_bins_ : bins_; }
  void mark_ends(Block* block);
  void absorb(Block* left, Block* right);
  // Cuts `block` after its first `front` granules: the rest, a new free
  // block linked after it (on no bins, not in the page map).
  Block* split_rest(Block* block, Granules front);
  // The same, the rest on the bins and both ends in the page map; returns
  // `block`.
  Block* split_front(Block* block, Granules front);
  Block* neighbour_ending_at(uint64_t addr) const;
  Block* neighbour_starting_at(uint64_t addr) const;

  PageMap& page_map_;
  DevicePool* const owner_;
  MetaPool<Block> spare_blocks_;
  FreeBins bins_;
  FreeBins big_bins_;  // free runs of big chunks (big_chunks)
};

}  // namespace pagefast::policy
