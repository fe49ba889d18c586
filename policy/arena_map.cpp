// policy/arena_map.cpp: the arena's mappings beyond a chunk's home: stitches
// (made from free home pieces, dissolved when their memory is wanted
// elsewhere), the physical pieces behind a block (CUDA IPC) and the peers
// every mapping is open to. arena.h says why stitching exists.
#include <new>
#include <vector>

#include "policy/arena.h"

namespace pagefast::policy {

bool Arena::map_pieces(uint64_t stitch_addr, Block* const* pieces, int piece_count, Granules total, StitchInfo* info) {
  Granules offset;
  for (int i = 0; i < piece_count && offset < total; ++i) {
    const Granules taken = min_granules(pieces[i]->granules(), total - offset);
    uint64_t cursor = pieces[i]->addr();
    const uint64_t stop = cursor + taken.bytes();
    // One map() per chunk segment: a piece may span chunk boundaries.
    while (cursor < stop) {
      auto it = chunks_.upper_bound(cursor);
      --it;
      const uint64_t chunk_end = it->first + it->second.granules.bytes();
      const uint64_t segment_end = stop < chunk_end ? stop : chunk_end;
      const Granules segment = granules_floor(segment_end - cursor);
      const uint64_t at = stitch_addr + offset.bytes();
      if (provider_.map(at, it->second.handle, granules_floor(cursor - it->first), segment) != ProviderStatus::Ok)
        return false;
      info->maps.push_back({at, segment, it->first, granules_floor(cursor - it->first)});
      offset += segment;
      cursor = segment_end;
    }
  }
  return true;
}

bool Arena::home_pieces(uint64_t addr, Granules granules, PieceList* out) const {
  uint64_t cursor = addr;
  const uint64_t stop = addr + granules.bytes();
  while (cursor < stop) {
    auto it = chunks_.upper_bound(cursor);
    if (it == chunks_.begin()) return false;
    --it;
    const uint64_t chunk_end = it->first + it->second.granules.bytes();
    if (cursor >= chunk_end) return false;
    const uint64_t segment_end = stop < chunk_end ? stop : chunk_end;
    out->push_back({it->second.handle, granules_floor(cursor - it->first), granules_floor(segment_end - cursor),
                    it->second.granules});
    cursor = segment_end;
  }
  return true;
}

bool Arena::physical_pieces(const Block* block, Granules offset, Granules granules, PieceList* out) const {
  if (offset + granules > block->granules() || asleep_) return false;
  if (!block->stitch) return home_pieces(block->addr() + offset.bytes(), granules, out);
  // A stitch maps its pieces' home memory in order.
  Granules at;  // stitch offset of the current piece
  const Granules end = offset + granules;
  for (const Block* piece : block->stitch->pieces) {
    const Granules piece_end = at + piece->granules();
    if (piece_end > offset && at < end) {
      const Granules from = offset > at ? offset - at : Granules(0);
      const Granules to = min_granules(piece_end, end) - at;
      if (!home_pieces(piece->addr() + from.bytes(), to - from, out)) return false;
    }
    at = piece_end;
    if (at >= end) break;
  }
  return at >= end;
}

bool Arena::unmap_all(const StitchInfo& info) {
  bool all = true;
  for (const StitchInfo::Map& m : info.maps)
    if (!provider_.unmap(m.addr, m.granules)) {
      // The chunk stays mapped there: releasing it would free nothing
      // (and its memory would live on at an address we no longer track).
      ++counters_.leaks;
      auto chunk = chunks_.find(m.chunk_home_addr);
      if (chunk != chunks_.end()) chunk->second.unreleasable = true;
      all = false;
    }
  return all;
}

bool Arena::chunk_edge(uint64_t addr) const {
  auto it = chunks_.lower_bound(addr);
  if (it != chunks_.end() && it->first == addr) return true;
  if (it == chunks_.begin()) return false;
  --it;
  return it->first + it->second.granules.bytes() == addr;
}

Block* Arena::stitch(Granules granules, int max_pieces, BlockState state) {
  if (asleep_ || free_home() < granules || granules.count() == 0) return nullptr;
  // A driver that maps only at offset 0 of a physical allocation (the
  // H200's, docs/DRIVER-FACTS.md) can still stitch whole chunks: only free
  // runs made of whole chunks are pieces then (with chunk_size 2M, all
  // are), and the stitch must end at a chunk's end.
  const bool offsets = provider_.maps_at_offset();
  auto usable = [&](const Block* b) {
    return offsets || (chunk_edge(b->addr()) && chunk_edge(b->addr() + b->granules().bytes()));
  };
  {
    int needed = 0;
    Granules seen;
    const Block* last = nullptr;
    bins_.for_each_largest_first([&](Block* b) {
      if (!usable(b)) return true;
      ++needed;
      seen += b->granules();
      last = b;
      return seen < granules && (max_pieces <= 0 || needed <= max_pieces);
    });
    if (seen < granules || (max_pieces > 0 && needed > max_pieces)) return nullptr;
    // The last piece is cut to what remains: at a chunk's edge, or no stitch.
    if (!offsets && !chunk_edge(last->addr() + (last->granules() - (seen - granules)).bytes())) return nullptr;
  }
  StitchInfo* info = nullptr;
  uint64_t addr = 0;
  bool have_addr = false;
  try {
    std::vector<Block*> pieces;
    Granules gathered;
    bins_.for_each_largest_first([&](Block* b) {
      if (!usable(b)) return true;
      pieces.push_back(b);
      gathered += b->granules();
      return gathered < granules;
    });
    info = new StitchInfo();
    info->pieces.reserve(pieces.size());
    info->maps.reserve(pieces.size() * 2);
    if (!spare_blocks_.reserve(2)) throw std::bad_alloc();
    if (address_space_.take(granules, AddressSpace::End::High, &addr) != ProviderStatus::Ok) throw std::bad_alloc();
    have_addr = true;
    if (!page_map_.ensure(addr, granules) || !map_pieces(addr, pieces.data(), int(pieces.size()), granules, info) ||
        provider_.set_access(addr, granules, AccessSet{peers_, 0}) != ProviderStatus::Ok)
      throw std::bad_alloc();
    opened_.emplace(addr, granules);

    Block* stitched = new_block(addr, granules, state);
    stitched->stitch = info;
    Granules remaining = granules;
    for (Block* piece : pieces) {
      bins_.remove(piece);
      if (piece->granules() > remaining) split_front(piece, remaining);
      remaining -= piece->granules();
      piece->store_state(BlockState::Lent);
      piece->lent_to = stitched;
      lent_ += piece->granules();
      info->pieces.push_back(piece);
    }
    page_map_.set(addr, granules, stitched);
    ++counters_.stitches;
    return stitched;
  } catch (const std::bad_alloc&) {
    // Address space that is still mapped (a failed unmap) is never reused.
    if (info) {
      if (!unmap_all(*info)) have_addr = false;
      delete info;
    }
    if (have_addr) address_space_.give(addr, granules);
    return nullptr;
  }
}

int Arena::dissolve_free_stitches() {
  if (asleep_) return 0;
  int dissolved = 0;
  while (Block* s = free_stitches_) {
    free_stitches_ = s->list_next;
    if (free_stitches_) free_stitches_->list_prev = nullptr;
    s->list_next = nullptr;
    free_stitched_ -= s->granules();
    StitchInfo* info = s->stitch;
    opened_.erase(s->addr());
    const bool unmapped = unmap_all(*info);
    page_map_.set(s->addr(), s->granules(), nullptr);
    // Address space still mapped (a failed unmap) is never handed out again.
    if (unmapped) address_space_.give(s->addr(), s->granules());
    for (Block* piece : info->pieces) {
      lent_ -= piece->granules();
      piece->lent_to = nullptr;
      piece->store_state(BlockState::Free);
      insert_free(piece);
    }
    delete info;
    recycle(s);
    ++counters_.dissolves;
    ++dissolved;
  }
  return dissolved;
}

int Arena::set_peers(uint64_t peers) {
  const AccessSet access{peers, peers_ & ~peers};
  peers_ = peers;
  // Asleep: wake opens every range to the set of that moment.
  if (asleep_) {
    revoked_asleep_ = (revoked_asleep_ | access.revoked) & ~peers;
    access_pending_ = true;
    return 0;
  }
  int refused = 0;
  for (const auto& range : opened_)
    if (provider_.set_access(range.first, range.second, access) != ProviderStatus::Ok) ++refused;
  return refused;
}
}  // namespace pagefast::policy
