// policy/arena.cpp: growth and take/give-back with coalescing; stitches
// and peers are in arena_map.cpp, chunk release in arena_release.cpp,
// sleep and wake in arena_sleep.cpp, the checks in arena_check.cpp.
// Every multi-step change first secures what it may need
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

Granules Arena::room_under_limit() const {
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

void Arena::put_back(Block* block) {
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

bool Arena::put_back_tail(Block* block, Granules keep) {
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
  const Granules room = room_under_limit();
  if (room < min_granules) return ProviderStatus::OutOfMemory;
  Granules base = settings_.chunk_granules;
  if (settings_.ramp && mapped_ < base) base = max_granules(mapped_, Granules(1));
  Granules step = max_granules(base, min_granules);
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
}  // namespace pagefast::policy
