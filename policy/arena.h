// policy/arena.h: the physical memory of one device's pool and where it is
// mapped: the chunks (physical allocations made in chunk_bytes steps,
// each mapped once at a "home" address with one set_access call), the
// blocks cut from the home runs (free ones coalesce, across chunk
// boundaries too, since chunks grown in turn sit side by side), and the
// stitches.
//
// Stitching (GMLake) is why physical memory is never stranded by address-
// space fragmentation: when no free run is long enough but enough free
// granules exist, the physical memory behind free home pieces is mapped
// again, contiguously, at fresh addresses (VMM allows one physical range
// mapped at two places). The pieces become Lent: still mapped at home,
// but not handed out there until the stitch is dissolved. A freed stitch
// is kept whole for a request of the same length (a training step repeats
// its sizes) and dissolved when its memory is wanted elsewhere.
//
// Release is per chunk (cuMemRelease frees nothing until every mapping of
// the allocation is gone), so only chunks lying wholly inside a free run,
// with nothing lent, are released.
//
// Arena is the one interface to all of it and the coordinator of its
// parts, each of which owns one concern and its state:
//   ChunkTable  (arena_chunks.h)    the chunks by home address, the opened
//                                   ranges and their peers, refused releases
//   HomeRuns    (arena_runs.h)      the blocks of home memory: free bins,
//                                   coalescing, the block records
//   StitchSet   (arena_stitches.h)  the stitches: made, kept, dissolved
//   ArenaSleep  (arena_sleep.h)     sleep, wake and the kept contents
// Arena itself does what crosses them: growth (arena.cpp, and growth ahead
// in arena_ahead.cpp), chunk release (arena_release.cpp) and the checks
// (arena_check.cpp). A part calls only the parts named in its header and
// the Provider; none of them locks anything.
//
// Not thread-safe: the device lock is held around every call. Provider
// calls are made under it (growth and release are slow paths; the sync,
// which can block for long, never is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/address_space.h"
#include "policy/arena_chunks.h"
#include "policy/arena_runs.h"
#include "policy/arena_sleep.h"
#include "policy/arena_stitches.h"
#include "policy/blocks.h"
#include "policy/page_map.h"
#include "policy/piece_list.h"
#include "policy/provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::policy {

struct ArenaSettings {
  Granules chunk_granules;  // growth step
  // Growth starts small: each step is what the arena holds already (at
  // least the request and one granule), up to chunk_granules, so that a
  // pool that holds little takes little (a region's pool: docs/SLEEP.md).
  bool ramp = false;
  // A request larger than a chunk grows a chunk of exactly its size, kept
  // apart (big_chunks): its free runs serve only requests over a chunk
  // that leave at most an eighth unused, and before another such growth
  // whole free big chunks are released, so that the big blocks of a
  // program whose shapes change take what it needs now, not the sum of
  // every size it has seen.
  bool big_chunks = false;
  uint64_t range_bytes = 0;  // address space reserved at a time
};

class Arena {
 public:
  Arena(Provider& provider, PageMap& page_map, DevicePool* owner, const ArenaSettings& settings);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A free home block of exactly `granules`, now in `state` (Used or
  // SlabBacking), every granule of it in the page map. NULL if no free run
  // is long enough.
  Block* take(Granules granules, BlockState state = BlockState::Used);
  // A free stitch of exactly `granules`, now in `state`. NULL if none.
  Block* take_stitch(Granules granules, BlockState state = BlockState::Used);
  // REQUIRES: the block came from take/take_stitch/stitch and is no longer
  // used by anyone (retired). Coalesces home blocks with free neighbours.
  void put_back(Block* block);
  // REQUIRES: a home block (no stitch) in use, 0 < keep < its granules.
  // Gives back all but its first `keep` granules (they coalesce); false,
  // and nothing changed, when no record can be had for them.
  bool put_back_tail(Block* block, Granules keep);

  // Creates, maps and opens a chunk of max(chunk, min_granules) granules,
  // clipped so that the arena maps at most `ceiling` granules after it
  // (the device's limit, which its budget keeps: LargeBlocks::ceiling);
  // on OutOfMemory retries with exactly min_granules.
  // Any failure leaves nothing behind (no mapping, no handle, no block).
  // A step never exceeds
  // max(min_granules, max_step): the caller's bound (the headroom,
  // LargeBlocks::grow_locked).
  ProviderStatus grow(Granules min_granules, Granules max_step = Granules(UINT64_MAX >> kGranuleShift),
                      Granules ceiling = kNoLimitGranules);

  // Growth ahead (policy/grow_ahead.h) in three steps, so that the driver's
  // calls run without the device lock (arena_ahead.cpp): begin_growth,
  // under the lock, takes the lowest free addresses for `step` (at most a
  // chunk; never while asleep; the caller asks none under a limit) and
  // notes the peers; the
  // caller then creates, maps and opens the chunk (create_ahead, no lock);
  // finish_growth, under the lock again, makes it the arena's (a free run
  // that coalesces with its neighbours; access set again if the peers
  // changed meanwhile), or abandon_growth gives the addresses back (and
  // unmaps and releases what the caller made: `mapped`, `handle`).
  struct PendingGrowth {
    uint64_t addr = 0;
    Granules step;
    uint64_t peers = 0;
  };
  bool begin_growth(Granules step, PendingGrowth* out);
  // No lock: the driver's calls of a growth (create, map, access); on a
  // failure *created and *mapped say what was made.
  ProviderStatus create_ahead(const PendingGrowth& growth, ChunkHandle* handle, bool* created, bool* mapped);
  ProviderStatus finish_growth(const PendingGrowth& growth, ChunkHandle handle);
  void abandon_growth(const PendingGrowth& growth, const ChunkHandle* handle, bool mapped);

  // A block in `state` at fresh addresses, backed by the physical memory
  // of free home pieces, largest first. NULL if free memory is short, if
  // more than max_pieces pieces would be needed (0: no bound), or if a
  // provider call failed (then nothing changed).
  Block* stitch(Granules granules, int max_pieces = 0, BlockState state = BlockState::Used);
  // Unmaps every stitch that is free; its pieces return to the home runs.
  int dissolve_free_stitches();

  // Releases up to `max_chunks` chunks that lie wholly in free home runs.
  int release_free_chunks(int max_chunks);

  // Peer access: the devices besides the pool's own that every mapping is
  // open to. Re-applies access on every opened range (chunks at home and
  // stitches), granting the new peers and revoking the dropped ones;
  // later growth and stitches open to the new set. Returns how many
  // ranges refused (those keep their old access; the set changes anyway).
  int set_peers(uint64_t peers);
  uint64_t peers() const { return chunks_.peers(); }
  // Ranges opened with set_access and still mapped.
  uint64_t opened_range_count() const { return chunks_.opened().size(); }

  // Sleep (docs/POOL.md "Sleep and wake", ArenaSleep in arena_sleep.h
  // says what each does). While asleep, grow/stitch/release/dissolve/
  // physical_pieces refuse and set_peers only records the set.
  using SleepResult = ArenaSleep::SleepResult;
  using WakeResult = ArenaSleep::WakeResult;
  using KeptRead = ArenaSleep::KeptRead;
  SleepResult sleep(unsigned keep, Clock& clock, const std::vector<ChunkHandle>& shared = {}) {
    return sleep_.sleep(keep, clock, shared);
  }
  ProviderStatus wake(Clock& clock, WakeResult* result = nullptr) { return sleep_.wake(clock, result); }
  bool asleep() const { return sleep_.asleep(); }
  void keep_sizes(std::vector<uint64_t>* out) const { sleep_.keep_sizes(out); }
  // Host memory holding kept contents, for tests.
  uint64_t kept_bytes() const { return sleep_.kept_bytes(); }
  KeptRead read_kept(uint64_t addr, uint64_t bytes, void* out) const { return sleep_.read_kept(addr, bytes, out); }

  Granules mapped() const { return chunks_.mapped(); }
  // Physical memory held now: mapped less what sleeps.
  Granules resident() const { return chunks_.mapped() - sleep_.slept(); }
  Granules free_home() const { return runs_.free(); }
  Granules free_stitched() const { return stitches_.free_granules(); }
  Granules lent() const { return stitches_.lent(); }
  uint64_t chunk_count() const { return chunks_.all().size(); }
  uint64_t reserved_bytes() const { return address_space_.reserved_bytes(); }
  // Whether `handle` is one of the arena's chunks (a chunk that sleeps
  // without its handle has none). Device lock held by the caller.
  bool holds_handle(ChunkHandle handle) const { return chunks_.holds_handle(handle); }
  // visit(addr, end_addr) over the address space in use (home chunks and
  // stitches). Device lock held by the caller.
  template <typename Visit>
  void for_each_taken(Visit visit) const {
    address_space_.for_each_taken(visit);
  }
  uint64_t free_block_count() const { return runs_.block_count(); }
  // The longest free home run: scans only the highest non-empty bin.
  Granules largest_free() const { return runs_.largest_free(); }
  const ArenaCounters& counters() const { return counters_; }

  // The physical memory behind granules [offset, offset + granules) of a
  // Used or SlabBacking block (home or stitched), in address order: one
  // piece per chunk segment. false if the range leaves the block or a
  // chunk cannot be found. Device lock held by the caller.
  bool physical_pieces(const Block* block, Granules offset, Granules granules, PieceList* out) const;

  // Consistency check for tests: links, page map, counts. Empty = fine.
  std::string check() const;
  // One line of numbers, for tests and debugging.
  std::string describe() const;
  // The runs of home memory, block by block (state letter, granules), for
  // pagefast-simulate --layout and for reading a test's failure.
  std::string layout() const;

 private:
  // Releases whole free big chunks, smallest first, until `granules` are
  // released or none is left.
  void release_big_for(Granules granules);
  // Unmaps and releases `chunk`, which lies wholly in the free block
  // `host`, and cuts it out of it (the run splits in two); false, and the
  // chunk never tried again, if the driver refuses the unmap. REQUIRES: a
  // spare block record reserved.
  bool release_chunk_of(Block* host, ChunkTable::Map::iterator chunk);

  Provider& provider_;
  PageMap& page_map_;
  const ArenaSettings settings_;
  ArenaCounters counters_;
  AddressSpace address_space_;
  ChunkTable chunks_;
  HomeRuns runs_;
  StitchSet stitches_;
  ArenaSleep sleep_;
};

}  // namespace pagefast::policy
