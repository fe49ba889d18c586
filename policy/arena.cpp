// policy/arena.cpp: growth, take/give-back with coalescing, stitching and
// chunk release. Every multi-step change first secures what it may need
// (spare records, address space, page-map leaves) and undoes the provider
// calls it made if a later one fails, so a failure anywhere leaves the
// arena exactly as it was.
#include "policy/arena.h"

#include <new>
#include <vector>

namespace pagefast::policy {

Arena::Arena(Provider& provider, PageMap& page_map, DevicePool* owner, const ArenaSettings& settings)
    : provider_(provider),
      page_map_(page_map),
      owner_(owner),
      settings_(settings),
      address_space_(provider, settings.range_bytes) {}

Arena::~Arena() {
  spare_blocks_.for_each_record([](Block* b) {
    delete b->stitch;
    b->stitch = nullptr;
  });
}

Granules Arena::headroom() const {
  return mapped_ >= settings_.limit_granules ? Granules(0) : settings_.limit_granules - mapped_;
}

Block* Arena::new_block(uint64_t addr, Granules granules, BlockState state) {
  Block* block = spare_blocks_.take();
  if (!block) return nullptr;
  block->pool = owner_;
  block->set_range(addr, granules);
  block->addr_prev = block->addr_next = nullptr;
  block->list_prev = block->list_next = nullptr;
  block->bin = -1;
  block->big = false;
  block->stitch = nullptr;
  block->lent_to = nullptr;
  block->slab = nullptr;
  block->store_state(state);
  return block;
}

void Arena::recycle(Block* block) {
  block->store_state(BlockState::Spare);
  block->stitch = nullptr;
  block->lent_to = nullptr;
  block->slab = nullptr;
  block->addr_prev = block->addr_next = nullptr;
  spare_blocks_.give(block);
}

void Arena::mark_ends(Block* block) {
  page_map_.set_one(block->addr(), block);
  page_map_.set_one(block->end_addr() - kGranuleBytes, block);
}

Block* Arena::split_front(Block* block, Granules front) {
  Block* rest = new_block(block->addr() + front.bytes(), block->granules() - front, BlockState::Free);
  // Callers reserved a spare record; this cannot be NULL.
  rest->big = block->big;
  rest->addr_prev = block;
  rest->addr_next = block->addr_next;
  if (block->addr_next) block->addr_next->addr_prev = rest;
  block->addr_next = rest;
  block->set_range(block->addr(), front);
  mark_ends(rest);
  bins_of(rest).insert(rest);
  mark_ends(block);
  return block;
}

void Arena::insert_free(Block* block) {
  Block* prev = block->addr_prev;
  if (prev && prev->load_state() == BlockState::Free) {
    bins_of(prev).remove(prev);
    prev->set_range(prev->addr(), prev->granules() + block->granules());
    prev->addr_next = block->addr_next;
    if (block->addr_next) block->addr_next->addr_prev = prev;
    recycle(block);
    block = prev;
  }
  Block* next = block->addr_next;
  if (next && next->load_state() == BlockState::Free) {
    bins_of(next).remove(next);
    block->set_range(block->addr(), block->granules() + next->granules());
    block->addr_next = next->addr_next;
    if (next->addr_next) next->addr_next->addr_prev = block;
    recycle(next);
  }
  mark_ends(block);
  bins_of(block).insert(block);
}

Block* Arena::take(Granules granules, BlockState state) {
  if (!spare_blocks_.reserve(1)) return nullptr;
  Block* block = nullptr;
  // A request over a chunk first tries the big chunks' runs, if one fits
  // leaving at most an eighth of it unused; smaller requests never do.
  if (settings_.big_chunks && granules > settings_.chunk_granules) {
    block = big_bins_.find(granules);
    if (block && (block->granules() - granules).count() * 8 > granules.count()) block = nullptr;
  }
  if (!block) block = bins_.find(granules);
  if (!block) return nullptr;
  bins_of(block).remove(block);
  if (block->granules() > granules) split_front(block, granules);
  block->store_state(state);
  page_map_.set(block->addr(), granules, block);
  return block;
}

Block* Arena::take_stitch(Granules granules, BlockState state) {
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

void Arena::give_back(Block* block) {
  block->slab = nullptr;
  block->store_state(BlockState::Free);
  if (block->stitch) {
    // Kept whole (see arena.h); every entry names it again (a slab that
    // used it had pointed them at itself).
    page_map_.set(block->addr(), block->granules(), block);
    block->list_prev = nullptr;
    block->list_next = free_stitches_;
    if (free_stitches_) free_stitches_->list_prev = block;
    free_stitches_ = block;
    free_stitched_ += block->granules();
    return;
  }
  insert_free(block);
}

bool Arena::give_back_tail(Block* block, Granules keep) {
  if (!spare_blocks_.reserve(1)) return false;
  Block* rest = new_block(block->addr() + keep.bytes(), block->granules() - keep, BlockState::Free);
  rest->big = block->big;
  rest->addr_prev = block;
  rest->addr_next = block->addr_next;
  if (block->addr_next) block->addr_next->addr_prev = rest;
  block->addr_next = rest;
  block->set_range(block->addr(), keep);
  // Every entry of the tail named the block (or its slab): they name the
  // free run now, so no lookup resolves to what no longer holds them.
  page_map_.set(rest->addr(), rest->granules(), rest);
  insert_free(rest);
  return true;
}

Block* Arena::neighbour_ending_at(uint64_t addr) const {
  Span* span = page_map_.lookup(addr - kGranuleBytes);
  if (!span || span->pool != owner_) return nullptr;
  Block* block = arena_block_of(span);
  if (!block || block->stitch || block->load_state() == BlockState::Spare || block->end_addr() != addr) return nullptr;
  return block;
}

Block* Arena::neighbour_starting_at(uint64_t addr) const {
  Span* span = page_map_.lookup(addr);
  if (!span || span->pool != owner_) return nullptr;
  Block* block = arena_block_of(span);
  if (!block || block->stitch || block->load_state() == BlockState::Spare || block->addr() != addr) return nullptr;
  return block;
}

ProviderStatus Arena::grow(Granules min_granules, Granules max_step) {
  if (asleep_) return ProviderStatus::Failed;
  if (min_granules.count() == 0) return ProviderStatus::OutOfMemory;
  // Whole free big chunks go back first, so that under a limit they make
  // room for the one that replaces them.
  const bool big = settings_.big_chunks && min_granules > settings_.chunk_granules;
  if (big) release_big_for(min_granules);
  const Granules room = headroom();
  if (room < min_granules) return ProviderStatus::OutOfMemory;
  Granules step = max_granules(settings_.chunk_granules, min_granules);
  if (step > max_step) step = max_granules(max_step, min_granules);
  if (step > room) step = room;
  if (!spare_blocks_.reserve(1)) return ProviderStatus::OutOfMemory;

  ChunkHandle handle;
  ProviderStatus status = provider_.create_chunk(step, &handle);
  if (status == ProviderStatus::OutOfMemory && step > min_granules) {
    step = min_granules;
    status = provider_.create_chunk(step, &handle);
  }
  if (status != ProviderStatus::Ok) return status;

  auto drop_handle = [&] { release_or_keep(handle); };
  uint64_t addr = 0;
  status = address_space_.take(step, AddressSpace::End::Low, &addr);
  if (status != ProviderStatus::Ok) {
    drop_handle();
    return status;
  }
  if (!page_map_.ensure(addr, step)) status = ProviderStatus::OutOfMemory;
  else status = provider_.map(addr, handle, Granules(0), step);
  if (status != ProviderStatus::Ok) {
    drop_handle();
    address_space_.give(addr, step);
    return status;
  }
  status = provider_.set_access(addr, step, AccessSet{peers_, 0});
  if (status == ProviderStatus::Ok) {
    try {
      chunks_.emplace(addr, Chunk{handle, step});
      opened_.emplace(addr, step);
    } catch (const std::bad_alloc&) {
      chunks_.erase(addr);  // addr is fresh: no other chunk there
      status = ProviderStatus::OutOfMemory;
    }
  }
  if (status != ProviderStatus::Ok) {
    if (!provider_.unmap(addr, step)) ++counters_.leaks;
    drop_handle();
    address_space_.give(addr, step);
    return status;
  }

  Block* block = new_block(addr, step, BlockState::Free);
  block->big = big;
  // A big chunk is a run of its own: nothing coalesces across its edges.
  if (Block* left = big ? nullptr : neighbour_ending_at(addr); left && !left->big) {
    left->addr_next = block;
    block->addr_prev = left;
  }
  if (Block* right = big ? nullptr : neighbour_starting_at(addr + step.bytes()); right && !right->big) {
    right->addr_prev = block;
    block->addr_next = right;
  }
  mapped_ += step;
  ++counters_.growths;
  insert_free(block);
  return ProviderStatus::Ok;
}

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

bool Arena::home_pieces(uint64_t addr, Granules granules, std::vector<PhysicalPiece>* out) const {
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

bool Arena::physical_pieces(const Block* block, Granules offset, Granules granules,
                            std::vector<PhysicalPiece>* out) const {
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

void Arena::release_or_keep(ChunkHandle handle) {
  if (provider_.release_chunk(handle)) return;
  ++counters_.leaks;
  try {
    unreleased_.push_back(handle);
  } catch (...) {
    // Out of host memory: this one handle is leaked for good.
  }
}

void Arena::retry_releases() {
  size_t kept = 0;
  for (ChunkHandle handle : unreleased_) {
    if (provider_.release_chunk(handle)) {
      ++counters_.retried;
      continue;
    }
    unreleased_[kept++] = handle;
  }
  unreleased_.resize(kept);
}

bool Arena::release_chunk_of(Block* host, std::map<uint64_t, Chunk>::iterator chunk) {
  const uint64_t chunk_addr = chunk->first, chunk_end = chunk_addr + chunk->second.granules.bytes();
  if (!provider_.unmap(chunk_addr, chunk->second.granules)) {
    chunk->second.unreleasable = true;
    ++counters_.leaks;
    return false;
  }
  opened_.erase(chunk_addr);
  release_or_keep(chunk->second.handle);

  // Cut the chunk out of its free host block; the run splits in two.
  bins_of(host).remove(host);
  const uint64_t host_addr = host->addr(), host_end = host->end_addr();
  Block* prev = host->addr_prev;
  Block* next = host->addr_next;
  Block* left = host_addr < chunk_addr ? host : nullptr;
  Block* right =
      chunk_end < host_end ? new_block(chunk_end, granules_floor(host_end - chunk_end), BlockState::Free) : nullptr;
  if (right) right->big = host->big;
  if (left) {
    left->set_range(host_addr, granules_floor(chunk_addr - host_addr));
    left->addr_next = nullptr;
    mark_ends(left);
    bins_of(left).insert(left);
  } else {
    if (prev) prev->addr_next = nullptr;
    recycle(host);
  }
  if (right) {
    right->addr_prev = nullptr;
    right->addr_next = next;
    if (next) next->addr_prev = right;
    mark_ends(right);
    bins_of(right).insert(right);
  } else if (next) {
    next->addr_prev = nullptr;
  }
  page_map_.set(chunk_addr, chunk->second.granules, nullptr);
  address_space_.give(chunk_addr, chunk->second.granules);
  mapped_ -= chunk->second.granules;
  chunks_.erase(chunk);
  ++counters_.releases;
  return true;
}

void Arena::release_big_for(Granules granules) {
  Granules released;
  while (released < granules) {
    if (!spare_blocks_.reserve(1)) return;
    // The smallest whole free big chunk: one that take() could not use.
    auto best = chunks_.end();
    Block* host = nullptr;
    big_bins_.for_each_largest_first([&](Block* b) {
      auto it = chunks_.find(b->addr());
      if (it != chunks_.end() && it->second.granules == b->granules() && !it->second.unreleasable &&
          (best == chunks_.end() || it->second.granules < best->second.granules)) {
        best = it;
        host = b;
      }
      return true;
    });
    if (!host) return;
    const Granules size = best->second.granules;
    if (!release_chunk_of(host, best)) continue;
    ++counters_.big_releases;
    released += size;
  }
}

int Arena::release_free_chunks(int max_chunks) {
  if (asleep_) return 0;
  if (!unreleased_.empty()) retry_releases();
  int released = 0;
  while (released < max_chunks) {
    if (!spare_blocks_.reserve(1)) break;
    Block* host = nullptr;
    auto chunk = chunks_.end();
    auto visit = [&](Block* b) {
      for (auto it = chunks_.lower_bound(b->addr());
           it != chunks_.end() && it->first + it->second.granules.bytes() <= b->end_addr(); ++it)
        if (!it->second.unreleasable) {
          host = b;
          chunk = it;
          return false;
        }
      return true;
    };
    bins_.for_each_largest_first(visit);
    if (!host) big_bins_.for_each_largest_first(visit);
    if (!host) break;
    if (release_chunk_of(host, chunk)) ++released;
  }
  return released;
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

Granules Arena::largest_free() const {
  // Bins are ordered by length, so the longest run lies in the first
  // non-empty bin visited; a bin holds a range of lengths, so all of it is
  // read. Both sets of bins: the ordinary runs and the big chunks'.
  Granules largest;
  for (const FreeBins* bins : {&bins_, &big_bins_}) {
    int top_bin = -1;
    bins->for_each_largest_first([&](Block* b) {
      if (top_bin < 0) top_bin = b->bin;
      if (b->bin != top_bin) return false;
      if (b->granules() > largest) largest = b->granules();
      return true;
    });
  }
  return largest;
}

std::string Arena::describe() const {
  return "mapped " + std::to_string(mapped_.count()) + " free " + std::to_string(bins_.total().count()) + " in " +
         std::to_string(bins_.block_count()) + " blocks, lent " + std::to_string(lent_.count()) + ", free stitched " +
         std::to_string(free_stitched_.count()) + ", chunks " + std::to_string(chunks_.size()) + " (granules)";
}

std::string Arena::layout() const {
  // One letter per block state and its length in granules, runs between
  // brackets: "[U98 F30 S1] [Q12 F116]"; big chunks' runs start with "big".
  static const char kLetter[] = {'-', 'F', 'U', 'Q', 'C', 'L', 'S'};
  std::string out;
  uint64_t run_end = 0;
  for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
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
  Granules free_seen, lent_seen, covered;
  uint64_t run_end = 0;
  for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
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
    auto last = chunks_.upper_bound(cursor - 1);
    --last;
    if (last->first + last->second.granules.bytes() != cursor) return "run does not end at a chunk end";
  }
  if (covered != mapped_) return "mapped count differs from chunks";
  if (free_seen != bins_.total() + big_bins_.total()) return "free count differs from the bins";
  if (lent_seen != lent_) return "lent count differs";
  // Every chunk's home mapping is an opened range (peer access re-applies
  // to them); the other opened ranges are stitches, each at its address.
  for (const auto& chunk : chunks_) {
    auto opened = opened_.find(chunk.first);
    if (opened == opened_.end() || opened->second != chunk.second.granules) return "a chunk is not an opened range";
  }
  for (const auto& range : opened_) {
    if (chunks_.count(range.first)) continue;
    Span* span = page_map_.lookup(range.first);
    const Block* b = arena_block_of(span);
    if (!b || !b->stitch || b->addr() != range.first || b->granules() != range.second)
      return "an opened range is neither a chunk nor a stitch";
  }
  return "";
}

}  // namespace pagefast::policy
