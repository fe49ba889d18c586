// policy/arena_stitches.cpp: an arena's stitches (arena_stitches.h): made
// from free home pieces, kept whole when freed, dissolved when their
// memory is wanted elsewhere, and the physical pieces behind one (CUDA
// IPC). policy/arena.h says why stitching exists.
#include "policy/arena_stitches.h"

#include <new>
#include <vector>

namespace pagefast::policy {

bool StitchSet::map_pieces(uint64_t stitch_addr, Block* const* pieces, int piece_count, Granules total,
                           StitchInfo* info) {
  Granules offset;
  for (int i = 0; i < piece_count && offset < total; ++i) {
    const Granules taken = min_granules(pieces[i]->granules(), total - offset);
    uint64_t cursor = pieces[i]->addr();
    const uint64_t stop = cursor + taken.bytes();
    // One map() per chunk segment: a piece may span chunk boundaries.
    while (cursor < stop) {
      auto it = chunks_.containing(cursor);
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

bool StitchSet::pieces_of(const Block* stitch, Granules offset, Granules granules, PieceList* out) const {
  // A stitch maps its pieces' home memory in order.
  Granules at;  // stitch offset of the current piece
  const Granules end = offset + granules;
  for (const Block* piece : stitch->stitch->pieces) {
    const Granules piece_end = at + piece->granules();
    if (piece_end > offset && at < end) {
      const Granules from = offset > at ? offset - at : Granules(0);
      const Granules to = min_granules(piece_end, end) - at;
      if (!chunks_.home_pieces(piece->addr() + from.bytes(), to - from, out)) return false;
    }
    at = piece_end;
    if (at >= end) break;
  }
  return at >= end;
}

bool StitchSet::unmap_all(const StitchInfo& info) {
  bool all = true;
  for (const StitchInfo::Map& m : info.maps)
    if (!provider_.unmap(m.addr, m.granules)) {
      // The chunk stays mapped there: releasing it would free nothing
      // (and its memory would live on at an address we no longer track).
      ++counters_.leaks;
      chunks_.mark_unreleasable(m.chunk_home_addr);
      all = false;
    }
  return all;
}

bool StitchSet::usable(const Block* b, bool offsets) const {
  return offsets || (chunks_.edge(b->addr()) && chunks_.edge(b->addr() + b->granules().bytes()));
}

bool StitchSet::enough_pieces(Granules granules, int max_pieces, bool offsets) const {
  int needed = 0;
  Granules seen;
  const Block* last = nullptr;
  runs_.bins().for_each_largest_first([&](Block* b) {
    if (!usable(b, offsets)) return true;
    ++needed;
    seen += b->granules();
    last = b;
    return seen < granules && (max_pieces <= 0 || needed <= max_pieces);
  });
  if (seen < granules || (max_pieces > 0 && needed > max_pieces)) return false;
  // The last piece is cut to what remains: at a chunk's edge, or no stitch.
  return offsets || chunks_.edge(last->addr() + (last->granules() - (seen - granules)).bytes());
}

Block* StitchSet::make(Granules granules, int max_pieces, BlockState state) {
  // A driver that maps only at offset 0 of a physical allocation (the
  // H200's, docs/DRIVER-FACTS.md) can still stitch whole chunks: only free
  // runs made of whole chunks are pieces then (with chunk_size 2M, all
  // are), and the stitch must end at a chunk's end.
  const bool offsets = provider_.maps_at_offset();
  if (!enough_pieces(granules, max_pieces, offsets)) return nullptr;
  StitchInfo* info = nullptr;
  uint64_t addr = 0;
  bool have_addr = false;
  try {
    std::vector<Block*> pieces;
    Granules gathered;
    runs_.bins().for_each_largest_first([&](Block* b) {
      if (!usable(b, offsets)) return true;
      pieces.push_back(b);
      gathered += b->granules();
      return gathered < granules;
    });
    info = new StitchInfo();
    info->pieces.reserve(pieces.size());
    info->maps.reserve(pieces.size() * 2);
    if (!runs_.reserve(2)) throw std::bad_alloc();
    if (address_space_.take(granules, AddressSpace::End::High, &addr) != ProviderStatus::Ok) throw std::bad_alloc();
    have_addr = true;
    if (!page_map_.ensure(addr, granules) || !map_pieces(addr, pieces.data(), int(pieces.size()), granules, info) ||
        provider_.set_access(addr, granules, AccessSet{chunks_.peers(), 0}) != ProviderStatus::Ok)
      throw std::bad_alloc();
    chunks_.open(addr, granules);

    Block* stitched = runs_.new_block(addr, granules, state);
    stitched->stitch = info;
    Granules remaining = granules;
    for (Block* piece : pieces) {
      runs_.take_run(piece, remaining);
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

Block* StitchSet::take(Granules granules, BlockState state) {
  for (Block* s = free_stitches_; s; s = s->list_next) {
    if (s->granules() != granules) continue;
    if (s->list_prev) s->list_prev->list_next = s->list_next;
    else free_stitches_ = s->list_next;
    if (s->list_next) s->list_next->list_prev = s->list_prev;
    s->list_prev = s->list_next = nullptr;
    free_stitched_ -= granules;
    s->store_state(state);
    // A slab that used this stitch pointed the entries at itself.
    page_map_.set(s->addr(), granules, s);
    return s;
  }
  return nullptr;
}

void StitchSet::put_back(Block* stitch) {
  // Kept whole (see arena.h); every entry names it again (a slab that
  // used it had pointed them at itself).
  page_map_.set(stitch->addr(), stitch->granules(), stitch);
  stitch->list_prev = nullptr;
  stitch->list_next = free_stitches_;
  if (free_stitches_) free_stitches_->list_prev = stitch;
  free_stitches_ = stitch;
  free_stitched_ += stitch->granules();
}

int StitchSet::dissolve_free() {
  int dissolved = 0;
  while (Block* s = free_stitches_) {
    free_stitches_ = s->list_next;
    if (free_stitches_) free_stitches_->list_prev = nullptr;
    s->list_next = nullptr;
    free_stitched_ -= s->granules();
    StitchInfo* info = s->stitch;
    chunks_.close(s->addr());
    const bool unmapped = unmap_all(*info);
    page_map_.set(s->addr(), s->granules(), nullptr);
    // Address space still mapped (a failed unmap) is never handed out again.
    if (unmapped) address_space_.give(s->addr(), s->granules());
    for (Block* piece : info->pieces) {
      lent_ -= piece->granules();
      piece->lent_to = nullptr;
      piece->store_state(BlockState::Free);
      runs_.insert_free(piece);
    }
    delete info;
    runs_.recycle(s);
    ++counters_.dissolves;
    ++dissolved;
  }
  return dissolved;
}

}  // namespace pagefast::policy
