// policy/arena_stitches.h: an arena's stitches (policy/arena.h says why
// they exist): blocks at fresh addresses backed by the physical memory of
// free home pieces, which stay Lent until the stitch is dissolved. A freed
// stitch is kept whole, on a list of its own, for a request of the same
// length, and dissolved when its memory is wanted elsewhere.
//
// StitchSet maps and unmaps the stitches (one map per chunk segment, one
// set_access each); the pieces come from HomeRuns (arena_runs.h) and go
// back there, the chunks behind them and the opened ranges are
// ChunkTable's (arena_chunks.h). Not thread-safe: the device lock.
#pragma once

#include "policy/address_space.h"
#include "policy/arena_chunks.h"
#include "policy/arena_runs.h"
#include "policy/blocks.h"
#include "policy/page_map.h"
#include "policy/piece_list.h"
#include "policy/provider.h"

namespace pagefast::policy {

class StitchSet {
 public:
  StitchSet(Provider& provider, PageMap& page_map, AddressSpace& address_space, HomeRuns& runs, ChunkTable& chunks,
            ArenaCounters& counters)
      : provider_(provider),
        page_map_(page_map),
        address_space_(address_space),
        runs_(runs),
        chunks_(chunks),
        counters_(counters) {}

  // A block in `state` at fresh addresses, backed by the physical memory
  // of free home pieces, largest first. NULL if free memory is short, if
  // more than max_pieces pieces would be needed (0: no bound), or if a
  // provider call failed (then nothing changed).
  Block* make(Granules granules, int max_pieces, BlockState state);
  // A free stitch of exactly `granules`, now in `state`. NULL if none.
  Block* take(Granules granules, BlockState state);
  // REQUIRES: a stitch, now Free. Kept whole on the free list.
  void put_back(Block* stitch);
  // Unmaps every free stitch; its pieces return to the home runs.
  int dissolve_free();
  // The physical memory behind granules [offset, offset + granules) of a
  // stitch, in address order (arena.h physical_pieces).
  bool pieces_of(const Block* stitch, Granules offset, Granules granules, PieceList* out) const;

  Granules free_granules() const { return free_stitched_; }
  Granules lent() const { return lent_; }

 private:
  bool map_pieces(uint64_t stitch_addr, Block* const* pieces, int piece_count, Granules total, StitchInfo* info);
  // false if an unmap failed (its chunk is then never released).
  bool unmap_all(const StitchInfo& info);
  // Whether the free run `b` may be a piece: any run where the driver maps
  // at an offset (`offsets`), else only one made of whole chunks.
  bool usable(const Block* b, bool offsets) const;
  // Whether usable free runs make a stitch of `granules` in at most
  // max_pieces pieces (0: no bound).
  bool enough_pieces(Granules granules, int max_pieces, bool offsets) const;

  Provider& provider_;
  PageMap& page_map_;
  AddressSpace& address_space_;
  HomeRuns& runs_;
  ChunkTable& chunks_;
  ArenaCounters& counters_;
  Block* free_stitches_ = nullptr;  // list of Free stitches (list_next)
  Granules free_stitched_;
  Granules lent_;
};

}  // namespace pagefast::policy
