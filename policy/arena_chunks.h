// policy/arena_chunks.h: the chunks of one arena (policy/arena.h), by home
// address: each physical allocation, mapped once at its home and opened
// there with one set_access; every opened range (a chunk's home mapping
// or a stitch) with the peers they are open to; and the handles whose
// release the driver refused, kept and tried again.
//
// ChunkTable owns no block: the runs cut from the chunks are HomeRuns'
// (arena_runs.h), the stitches StitchSet's (arena_stitches.h). What a
// chunk keeps across a sleep (the fields below `unreleasable`) is written
// by ArenaSleep (arena_sleep.h) only. Not thread-safe: the device lock.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "policy/piece_list.h"
#include "policy/provider.h"
#include "policy/units.h"

namespace pagefast::policy {

constexpr Granules kNoLimitGranules = Granules(~uint64_t(0) >> kGranuleShift);

struct ArenaCounters {
  uint64_t growths = 0;
  uint64_t stitches = 0;
  uint64_t dissolves = 0;
  uint64_t releases = 0;      // chunks released
  uint64_t big_releases = 0;  // of them, big chunks released to grow another
  uint64_t leaks = 0;         // driver refused an unmap or release
  uint64_t retried = 0;       // refused releases that a later trim completed
};

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

class ChunkTable {
 public:
  using Map = std::map<uint64_t, Chunk>;

  ChunkTable(Provider& provider, ArenaCounters& counters) : provider_(provider), counters_(counters) {}

  // A chunk mapped and opened at `home`, and its opened range; false, and
  // nothing added, when out of host memory.
  bool add(uint64_t home, ChunkHandle handle, Granules granules);
  // Forgets a chunk unmapped from its home (and its opened range).
  void remove(Map::iterator chunk);
  Map& all() { return chunks_; }
  const Map& all() const { return chunks_; }
  // The chunk whose home range holds `addr`; all().end() if none.
  Map::const_iterator containing(uint64_t addr) const;
  // addr is where a chunk begins or ends (at home).
  bool edge(uint64_t addr) const;
  // Appends the chunk segments of home range [addr, addr + granules).
  bool home_pieces(uint64_t addr, Granules granules, PieceList* out) const;
  // Whether `handle` is one of the chunks (a chunk that sleeps without its
  // handle has none).
  bool holds_handle(ChunkHandle handle) const;
  // An unmap of a mapping of the chunk at `home` failed: never released.
  void mark_unreleasable(uint64_t home);
  Granules mapped() const { return mapped_; }

  // Every range opened by one set_access call (a chunk's home mapping or a
  // stitch), still mapped: what a change of the peer set re-applies to.
  const std::map<uint64_t, Granules>& opened() const { return opened_; }
  void open(uint64_t addr, Granules granules) { opened_.emplace(addr, granules); }  // may throw
  void close(uint64_t addr) { opened_.erase(addr); }
  // AccessSet::peers of every opened range.
  uint64_t peers() const { return peers_; }
  // Records the new set; returns the change (granted: the set, revoked:
  // the peers dropped).
  AccessSet set_peers(uint64_t peers);
  // Applies `access` to every opened range; how many refused.
  int apply_access(const AccessSet& access);

  // Releases an unmapped chunk; one the driver refuses is kept and tried
  // again by retry_releases, not leaked for good.
  void release_or_keep(ChunkHandle handle);
  void retry_releases();
  bool has_unreleased() const { return !unreleased_.empty(); }

 private:
  Provider& provider_;
  ArenaCounters& counters_;
  Map chunks_;  // home address -> chunk
  std::map<uint64_t, Granules> opened_;
  uint64_t peers_ = 0;
  Granules mapped_;
  std::vector<ChunkHandle> unreleased_;  // unmapped, release refused so far
};

}  // namespace pagefast::policy
