// policy/arena_check.cpp: the arena's own report: one line of numbers
// (describe), the home runs block by block (layout) and the consistency
// check the tests run after every step (check).
#include <map>
#include <string>

#include "policy/arena.h"

namespace pagefast::policy {

std::string Arena::describe() const {
  const FreeBins& bins = runs_.bins();
  return "mapped " + std::to_string(mapped().count()) + " free " + std::to_string(bins.total().count()) + " in " +
         std::to_string(bins.block_count()) + " blocks, lent " + std::to_string(lent().count()) + ", free stitched " +
         std::to_string(free_stitched().count()) + ", chunks " + std::to_string(chunk_count()) + " (granules)";
}

std::string Arena::layout() const {
  const ChunkTable::Map& chunks = chunks_.all();
  // One letter per block state and its length in granules, runs between
  // brackets: "[U98 F30 S1] [Q12 F116]"; big chunks' runs start with "big".
  static const char kLetter[] = {'-', 'F', 'U', 'Q', 'C', 'L', 'S'};
  std::string out;
  uint64_t run_end = 0;
  for (auto it = chunks.begin(); it != chunks.end(); ++it) {
    if (it->first < run_end) continue;
    Span* span = page_map_.lookup(it->first);
    const Block* b = arena_block_of(span);
    if (!b) continue;
    if (!out.empty()) out += ' ';
    out += b->big ? "[big" : "[";
    bool first = !b->big;
    uint64_t cursor = it->first;
    for (; b; b = b->addr_next) {
      const auto state = static_cast<unsigned>(b->load_state());
      if (!first) out += ' ';
      first = false;
      out += state < sizeof kLetter ? kLetter[state] : '?';
      out += std::to_string(b->granules().count());
      cursor = b->end_addr();
    }
    out += ']';
    run_end = cursor;
  }
  return out;
}

std::string Arena::check() const {
  const ChunkTable::Map& chunks = chunks_.all();
  const std::map<uint64_t, Granules>& ranges = chunks_.opened();
  Granules free_seen, lent_seen, covered;
  uint64_t run_end = 0;
  for (auto it = chunks.begin(); it != chunks.end(); ++it) {
    const uint64_t chunk_end = it->first + it->second.granules.bytes();
    covered += it->second.granules;
    if (it->first < run_end) continue;  // inside a run already walked
    // A run starts here: its first granule is exact in the page map.
    Span* span = page_map_.lookup(it->first);
    if (!span) return "run start has no page-map entry";
    Block* b = arena_block_of(span);
    if (!b || b->addr() != it->first) return "run start is not a block start";
    if (b->addr_prev) return "run start has a predecessor";
    const bool run_big = b->big;
    uint64_t cursor = it->first;
    for (; b; b = b->addr_next) {
      if (b->addr() != cursor) return "blocks of a run are not contiguous";
      if (b->big != run_big) return "a run mixes big and ordinary blocks";
      if (b->addr_next && b->addr_next->addr_prev != b) return "broken back link";
      const BlockState s = b->load_state();
      if (s == BlockState::Spare) return "spare block in a run";
      if (b->stitch) return "stitch inside a home run";
      if (s == BlockState::Free) {
        free_seen += b->granules();
        if (page_map_.lookup(b->addr()) != b || page_map_.lookup(b->end_addr() - kGranuleBytes) != b)
          return "free block ends not in the page map";
        if (b->addr_next && b->addr_next->load_state() == BlockState::Free) return "two free neighbours";
      }
      if (s == BlockState::Lent) lent_seen += b->granules();
      cursor = b->end_addr();
    }
    run_end = cursor;
    // A big chunk is a run of its own.
    if (run_big && cursor != chunk_end) return "a big chunk's run is not exactly its chunk";
    // The run must end exactly at the end of a chunk.
    auto last = chunks.upper_bound(cursor - 1);
    --last;
    if (last->first + last->second.granules.bytes() != cursor) return "run does not end at a chunk end";
  }
  if (covered != mapped()) return "mapped count differs from chunks";
  if (free_seen != runs_.free()) return "free count differs from the bins";
  if (lent_seen != lent()) return "lent count differs";
  // Every chunk's home mapping is an opened range (peer access re-applies
  // to them); the other opened ranges are stitches, each at its address.
  for (const auto& chunk : chunks) {
    auto opened = ranges.find(chunk.first);
    if (opened == ranges.end() || opened->second != chunk.second.granules) return "a chunk is not an opened range";
  }
  for (const auto& range : ranges) {
    if (chunks.count(range.first)) continue;
    Span* span = page_map_.lookup(range.first);
    const Block* b = arena_block_of(span);
    if (!b || !b->stitch || b->addr() != range.first || b->granules() != range.second)
      return "an opened range is neither a chunk nor a stitch";
  }
  return "";
}
}  // namespace pagefast::policy
