// policy/arena.h: the physical memory of one device's pool and where it is
// mapped. Owns the chunks (physical allocations made in chunk_bytes steps,
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
// Not thread-safe: the device lock is held around every call. Provider
// calls are made under it (growth and release are slow paths; the sync,
// which can block for long, never is).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policy/address_space.h"
#include "policy/blocks.h"
#include "policy/free_bins.h"
#include "policy/page_map.h"
#include "policy/piece_list.h"
#include "policy/provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::policy {

constexpr Granules kNoLimitGranules = Granules(~uint64_t(0) >> kGranuleShift);

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
  Granules limit_granules = kNoLimitGranules;  // most physical memory held
  uint64_t range_bytes = 0;                    // address space reserved at a time
};

struct ArenaCounters {
  uint64_t growths = 0;
  uint64_t stitches = 0;
  uint64_t dissolves = 0;
  uint64_t releases = 0;      // chunks released
  uint64_t big_releases = 0;  // of them, big chunks released to grow another
  uint64_t leaks = 0;         // driver refused an unmap or release
  uint64_t retried = 0;       // refused releases that a later trim completed
};

class Arena {
 public:
  Arena(Provider& provider, PageMap& page_map, DevicePool* owner, const ArenaSettings& settings);
  ~Arena();  // host records only; device memory is the provider's
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
  // clipped to the limit; on OutOfMemory retries with exactly min_granules.
  // Any failure leaves nothing behind (no mapping, no handle, no block).
  // A step never exceeds
  // max(min_granules, max_step): the caller's bound (the headroom,
  // LargeBlocks::grow_locked).
  ProviderStatus grow(Granules min_granules, Granules max_step = Granules(UINT64_MAX >> kGranuleShift));

  // Growth ahead (policy/grow_ahead.h) in three steps, so that the driver's
  // calls run without the device lock (arena_ahead.cpp): begin_growth,
  // under the lock, takes the lowest free addresses for `step` (at most a
  // chunk; never while asleep, nor under a limit) and notes the peers; the
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
  uint64_t peers() const { return peers_; }
  // Ranges opened with set_access and still mapped.
  uint64_t opened_range_count() const { return opened_.size(); }

  // Sleep (docs/POOL.md "Sleep and wake"). REQUIRES: no device work on
  // pool memory in flight. Unmaps every stitch, copies the live contents
  // of every chunk (its blocks that are not free) to host memory in one
  // batch (keep: kSleepKeep, with kSleepToDisk one copy per live block,
  // and the mode of each copy in HostCopy::mode), then per chunk unmaps
  // and releases it. A chunk the driver refuses to unmap (or whose copy
  // fails) stays resident; one it refuses to release keeps its handle,
  // mapped again at wake with its contents. Blocks, the page map and the
  // address space are untouched: every address stays reserved. While
  // asleep, grow/stitch/release/dissolve/physical_pieces refuse and
  // set_peers only records the set. `clock` times the phases. A chunk in
  // `shared` (another process maps its memory: CUDA IPC) stays resident
  // and untouched, so that both processes keep seeing the same bytes; the
  // stitches over it are unmapped and mapped again as every stitch is.
  struct SleepResult {
    uint64_t slept_chunks = 0;
    uint64_t resident_chunks = 0;  // refused or shared: still mapped
    uint64_t shared_chunks = 0;    // of those, the ones in `shared`
    uint64_t shared_bytes = 0;
    uint64_t kept_bytes = 0;  // copied to host memory
    uint64_t copy_ns = 0;     // the batch copy to host memory
    uint64_t unmap_ns = 0;    // unmap and release of every chunk
  };
  SleepResult sleep(unsigned keep, Clock& clock, const std::vector<ChunkHandle>& shared = {});
  // Maps fresh memory (or the kept handle) at every slept home address and
  // opens it, restores kept contents in one batch, maps the stitches again
  // and opens every range to the current peers. On a failure what was
  // done stays done (consistent) and the arena stays asleep: call again.
  struct WakeResult {
    uint64_t woken_chunks = 0;
    uint64_t copied_bytes = 0;  // restored from host memory
    uint64_t map_ns = 0;        // create, map and set_access of the chunks
    uint64_t copy_ns = 0;       // the batch copy back
    uint64_t free_ns = 0;       // host memory given back
  };
  ProviderStatus wake(Clock& clock, WakeResult* result = nullptr);
  bool asleep() const { return asleep_; }
  // The bytes of each copy a sleep with keep would make now (its live
  // pieces, what is quarantined or cached counted free: sleep retires it
  // first), for host memory made ready ahead. Nothing while asleep.
  void keep_sizes(std::vector<uint64_t>* out) const;
  // Host memory holding kept contents, for tests.
  uint64_t kept_bytes() const { return kept_bytes_; }
  // The kept contents of [addr, addr + bytes) while it sleeps, copied to
  // `out` (arena_kept.cpp), through the stitches the sleep undid and
  // across chunks and their kept pieces. Copied; Resident: some of the
  // range is resident (readable on the device; `out` may hold a part of
  // what came before it); Missing:
  // some of it sleeps without a kept copy (discarded), or is in no chunk;
  // OnDisk: some of it is kept in a file (kSleepToDisk), not read here.
  enum class KeptRead { Copied, Resident, Missing, OnDisk };
  KeptRead read_kept(uint64_t addr, uint64_t bytes, void* out) const;

  Granules mapped() const { return mapped_; }
  // Physical memory held now: mapped less what sleeps.
  Granules resident() const { return mapped_ - slept_; }
  Granules free_home() const { return bins_.total() + big_bins_.total(); }
  Granules free_stitched() const { return free_stitched_; }
  Granules lent() const { return lent_; }
  uint64_t chunk_count() const { return chunks_.size(); }
  uint64_t reserved_bytes() const { return address_space_.reserved_bytes(); }
  // Whether `handle` is one of the arena's chunks (a chunk that sleeps
  // without its handle has none). Device lock held by the caller.
  bool holds_handle(ChunkHandle handle) const {
    for (const auto& [home, chunk] : chunks_)
      if (chunk.handle.value == handle.value && (!chunk.asleep || chunk.handle_kept)) return true;
    return false;
  }
  // visit(addr, end_addr) over the address space in use (home chunks and
  // stitches). Device lock held by the caller.
  template <typename Visit>
  void for_each_taken(Visit visit) const {
    address_space_.for_each_taken(visit);
  }
  uint64_t free_block_count() const { return bins_.block_count() + big_bins_.block_count(); }
  // The longest free home run: scans only the highest non-empty bin.
  Granules largest_free() const;
  const ArenaCounters& counters() const { return counters_; }
  Granules limit() const { return settings_.limit_granules; }
  // Granules that growth may still add under the limit (all if none).
  Granules room_under_limit() const;

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
  // Part of a chunk kept in host memory across a sleep.
  struct KeptPiece {
    Granules offset;  // into the chunk
    Granules granules;
    void* host;
    bool on_disk = false;  // host is the provider's token of a file (kSleepToDisk)
  };
  struct Chunk {
    ChunkHandle handle;
    Granules granules;
    bool unreleasable = false;  // an unmap of it failed once
    // Sleep: unmapped; released unless handle_kept (the driver refused the
    // release: wake maps the same handle, contents intact). host: the
    // kept contents, or NULL.
    bool asleep = false;
    bool handle_kept = false;
    bool home_mapped = false;   // wake mapped it (and may not have opened or filled it)
    bool fill_pending = false;  // ... and it is fresh memory: kept must still go in
    // The kept contents: the chunk's live ranges (every granule not in a
    // free block), each in host memory of its own; empty when discarded.
    std::vector<KeptPiece> kept{};
  };
  // A stitch map undone by sleep, mapped again by wake.
  struct SleepingMap {
    uint64_t addr;
    Granules granules;
    uint64_t chunk_home_addr;
    Granules chunk_offset;
  };
  // Wake's steps for one chunk: bring_up leaves it mapped at home and
  // open (true) or, having undone what it could, asleep; finish_wake makes
  // a chunk whose contents are in place resident; undo_fill takes back the
  // fresh memory of a chunk whose copy failed (its host copy stays).
  bool bring_up(uint64_t home, Chunk& chunk);
  // Sleep's first step: unmaps every stitch map (kept in sleeping_maps_);
  // a map the driver refuses pins its chunk (*pinned). false when out of
  // host memory left a map unlisted: then every chunk stays resident.
  bool unmap_stitches_for_sleep(std::vector<uint64_t>* pinned);
  static bool needs_fill(const Chunk& chunk) {
    return !chunk.kept.empty() && (!chunk.handle_kept || chunk.fill_pending);
  }
  // Appends the live ranges of the chunk at `home` (every granule not in a
  // free block; with idle_is_free, not in a quarantined or cached one
  // either, as a sleep will find them), merged (by_block: one piece per
  // block, as a file per allocation), without host memory yet.
  void live_pieces(uint64_t home, const Chunk& chunk, std::vector<KeptPiece>* out, bool idle_is_free = false,
                   bool by_block = false) const;
  // Sleep with keep: the chunk's kept pieces (live_pieces; by block with
  // kSleepToDisk) and their copies, appended to *copies with the mode of
  // keep_modes. May throw (out of host memory).
  void plan_copies(uint64_t home, Chunk& chunk, unsigned keep_modes, std::vector<HostCopy>* copies);
  // Host memory of a chunk's kept pieces back to the provider.
  void free_kept(Chunk& chunk);
  void finish_wake(Chunk& chunk);
  void undo_fill(uint64_t home, Chunk& chunk);
  // The chunks of one sleep or wake and their copies: pieces[first[i] ..
  // first[i + 1]) are those of chunks[i], whose home is homes[i].
  struct CopyBatch {
    std::vector<Chunk*> chunks;
    std::vector<uint64_t> homes;
    std::vector<HostCopy> pieces;
    std::vector<size_t> first;
    std::vector<char> up;  // wake: whether chunks[i] was brought up
  };
  // Sleep's steps around the copies: the chunks that go (with keep, their
  // live pieces to copy; the others counted in *result; throws when out of
  // host memory), then each whose copies all went unmapped and released.
  void choose_going(unsigned keep_modes, bool all_resident, const std::vector<uint64_t>& pinned,
                    const std::vector<ChunkHandle>& shared, CopyBatch* batch, SleepResult* result);
  void release_going(const CopyBatch& batch, SleepResult* result);
  // Wake's steps after the copies: each chunk filled made resident (a
  // failed copy keeps what is left to fill; `status` becomes Failed), then,
  // with every chunk back, the stitch maps mapped and opened again.
  ProviderStatus settle_fills(const CopyBatch& batch, ProviderStatus status, WakeResult* result);
  class WakeMaker;  // wake's CopyPreparer (arena_sleep.cpp)
  ProviderStatus remap_stitches();

  Block* new_block(uint64_t addr, Granules granules, BlockState state);
  void recycle(Block* block);
  // Cuts `block` (free, not on the bins) into `front` granules, returned,
  // and a free rest put on the bins.
  Block* split_front(Block* block, Granules front);
  void mark_ends(Block* block);
  void insert_free(Block* block);  // coalesce, then put on the bins
  // Appends the chunk segments of home range [addr, addr + granules).
  bool home_pieces(uint64_t addr, Granules granules, PieceList* out) const;
  bool map_pieces(uint64_t stitch_addr, Block* const* pieces, int piece_count, Granules total, StitchInfo* info);
  // false if an unmap failed (its chunk is then never released).
  bool unmap_all(const StitchInfo& info);
  // Releases an unmapped chunk; one the driver refuses is kept and tried
  // again by the next release_free_chunks, not leaked for good.
  void release_or_keep(ChunkHandle handle);
  void retry_releases();
  Block* neighbour_ending_at(uint64_t addr) const;
  Block* neighbour_starting_at(uint64_t addr) const;

  Provider& provider_;
  PageMap& page_map_;
  DevicePool* const owner_;
  const ArenaSettings settings_;
  AddressSpace address_space_;
  FreeBins bins_;
  FreeBins big_bins_;  // free runs of big chunks (big_chunks)
  FreeBins& bins_of(const Block* b) { return b->big ? big_bins_ : bins_; }
  // Releases whole free big chunks, smallest first, until `granules` are
  // released or none is left.
  void release_big_for(Granules granules);
  // Unmaps and releases `chunk`, which lies wholly in the free block
  // `host`, and cuts it out of it (the run splits in two); false, and the
  // chunk never tried again, if the driver refuses the unmap. REQUIRES: a
  // spare block record reserved.
  bool release_chunk_of(Block* host, std::map<uint64_t, Chunk>::iterator chunk);
  MetaPool<Block> spare_blocks_;
  std::map<uint64_t, Chunk> chunks_;  // home address -> chunk
  // addr is where a chunk begins or ends (at home).
  bool chunk_edge(uint64_t addr) const;
  std::vector<ChunkHandle> unreleased_;  // unmapped, release refused so far
  // Every range opened by one set_access call (a chunk's home mapping or a
  // stitch), still mapped: what a change of the peer set re-applies to.
  std::map<uint64_t, Granules> opened_;
  uint64_t peers_ = 0;              // AccessSet::peers of every opened range
  Block* free_stitches_ = nullptr;  // list of Free stitches (list_next)
  Granules free_stitched_;
  Granules lent_;
  Granules mapped_;
  ArenaCounters counters_;
  bool asleep_ = false;
  bool access_pending_ = false;  // wake: ranges still to open
  uint64_t revoked_asleep_ = 0;  // peers dropped while asleep
  Granules slept_;               // granules of chunks asleep
  uint64_t kept_bytes_ = 0;
  std::vector<SleepingMap> sleeping_maps_;
};

}  // namespace pagefast::policy
