// policy/arena_sleep.h: an arena's sleep and wake (policy/arena.h,
// docs/POOL.md "Sleep and wake"): the chunks' physical memory goes back
// to the driver, optionally with the live contents kept in host memory,
// and comes back at the same home addresses; blocks, the page map and the
// address space stay untouched. Also the kept contents read in place
// while asleep (read_kept) and the sizes a sleep would copy now
// (keep_sizes).
//
// ArenaSleep owns the asleep state, the stitch maps a sleep undid and the
// bytes kept; it writes the sleep fields of ChunkTable's chunks
// (arena_chunks.h) and reads the blocks through the page map (which
// granules are live). Not thread-safe: the device lock.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/arena_chunks.h"
#include "policy/blocks.h"
#include "policy/clock.h"
#include "policy/page_map.h"
#include "policy/provider.h"
#include "policy/sleep_gate.h"

namespace pagefast::policy {

class ArenaSleep {
 public:
  ArenaSleep(Provider& provider, const PageMap& page_map, ChunkTable& chunks)
      : provider_(provider), page_map_(page_map), chunks_(chunks) {}

  // REQUIRES: no device work on pool memory in flight. Unmaps every
  // stitch, copies the live contents of every chunk (its blocks that are
  // not free) to host memory in one batch (keep: kSleepKeep, with
  // kSleepToDisk one copy per live block, and the mode of each copy in
  // HostCopy::mode), then per chunk unmaps and releases it. A chunk the
  // driver refuses to unmap (or whose copy fails) stays resident; one it
  // refuses to release keeps its handle, mapped again at wake with its
  // contents. A chunk in `shared` (another process maps its memory: CUDA
  // IPC) stays resident and untouched, so that both processes keep seeing
  // the same bytes; the stitches over it are unmapped and mapped again as
  // every stitch is. `clock` times the phases.
  struct SleepResult {
    uint64_t slept_chunks = 0;
    uint64_t resident_chunks = 0;  // refused or shared: still mapped
    uint64_t shared_chunks = 0;    // of those, the ones in `shared`
    uint64_t shared_bytes = 0;
    uint64_t kept_bytes = 0;  // copied to host memory
    uint64_t copy_ns = 0;     // the batch copy to host memory
    uint64_t unmap_ns = 0;    // unmap and release of every chunk
  };
  SleepResult sleep(unsigned keep, Clock& clock, const std::vector<ChunkHandle>& shared);
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
  ProviderStatus wake(Clock& clock, WakeResult* result);
  bool asleep() const { return asleep_; }
  // The peer set changed while asleep (ChunkTable::set_peers' change):
  // wake opens every range to the set of that moment.
  void peers_changed(const AccessSet& access);
  // Granules of chunks asleep.
  Granules slept() const { return slept_; }
  // Host memory holding kept contents.
  uint64_t kept_bytes() const { return kept_bytes_; }
  // The bytes of each copy a sleep with keep would make now (its live
  // pieces, what is quarantined or cached counted free: sleep retires it
  // first), for host memory made ready ahead. Nothing while asleep.
  void keep_sizes(std::vector<uint64_t>* out) const;
  // The kept contents of [addr, addr + bytes) while it sleeps, copied to
  // `out` (arena_kept.cpp), through the stitches the sleep undid and
  // across chunks and their kept pieces. Copied; Resident: some of the
  // range is resident (readable on the device; `out` may hold a part of
  // what came before it); Missing: some of it sleeps without a kept copy
  // (discarded), or is in no chunk; OnDisk: some of it is kept in a file
  // (kSleepToDisk), not read here.
  enum class KeptRead { Copied, Resident, Missing, OnDisk };
  KeptRead read_kept(uint64_t addr, uint64_t bytes, void* out) const;

 private:
  // A stitch map undone by sleep, mapped again by wake.
  struct SleepingMap {
    uint64_t addr;
    Granules granules;
    uint64_t chunk_home_addr;
    Granules chunk_offset;
  };
  // The chunks of one sleep or wake and their copies: pieces[first[i] ..
  // first[i + 1]) are those of chunks[i], whose home is homes[i].
  struct CopyBatch {
    std::vector<Chunk*> chunks;
    std::vector<uint64_t> homes;
    std::vector<HostCopy> pieces;
    std::vector<size_t> first;
    std::vector<char> up;  // wake: whether chunks[i] was brought up
  };
  class WakeMaker;  // wake's CopyPreparer (arena_wake.cpp)

  // Sleep's first step: unmaps every stitch map (kept in sleeping_maps_);
  // a map the driver refuses pins its chunk (*pinned). false when out of
  // host memory left a map unlisted: then every chunk stays resident.
  bool unmap_stitches_for_sleep(std::vector<uint64_t>* pinned);
  // Sleep's steps around the copies: the chunks that go (with keep, their
  // live pieces to copy; the others counted in *result; throws when out of
  // host memory), then each whose copies all went unmapped and released.
  void choose_going(unsigned keep_modes, bool all_resident, const std::vector<uint64_t>& pinned,
                    const std::vector<ChunkHandle>& shared, CopyBatch* batch, SleepResult* result);
  void release_going(const CopyBatch& batch, SleepResult* result);
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

  static bool needs_fill(const Chunk& chunk) {
    return !chunk.kept.empty() && (!chunk.handle_kept || chunk.fill_pending);
  }
  // Wake's steps for one chunk: bring_up leaves it mapped at home and
  // open (true) or, having undone what it could, asleep; finish_wake makes
  // a chunk whose contents are in place resident; undo_fill takes back the
  // fresh memory of a chunk whose copy failed (its host copy stays).
  bool bring_up(uint64_t home, Chunk& chunk);
  void finish_wake(Chunk& chunk);
  void undo_fill(uint64_t home, Chunk& chunk);
  // Wake's steps after the copies: each chunk filled made resident (a
  // failed copy keeps what is left to fill; `status` becomes Failed), then,
  // with every chunk back, the stitch maps mapped and opened again.
  ProviderStatus settle_fills(const CopyBatch& batch, ProviderStatus status, WakeResult* result);
  ProviderStatus remap_stitches();

  Provider& provider_;
  const PageMap& page_map_;
  ChunkTable& chunks_;
  bool asleep_ = false;
  bool access_pending_ = false;  // wake: ranges still to open
  uint64_t revoked_asleep_ = 0;  // peers dropped while asleep
  Granules slept_;               // granules of chunks asleep
  uint64_t kept_bytes_ = 0;
  std::vector<SleepingMap> sleeping_maps_;
};

}  // namespace pagefast::policy
