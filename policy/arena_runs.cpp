// policy/arena_runs.cpp: the blocks of the arena's home memory, their
// free bins and coalescing (arena_runs.h). Callers reserve a record before
// any step that may need one, so nothing here fails halfway.
#include "policy/arena_runs.h"

namespace pagefast::policy {

HomeRuns::~HomeRuns() {
  spare_blocks_.for_each_record([](Block* b) {
    delete b->stitch;
    b->stitch = nullptr;
  });
}

Block* HomeRuns::new_block(uint64_t addr, Granules granules, BlockState state) {
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

void HomeRuns::recycle(Block* block) {
  block->store_state(BlockState::Spare);
  block->stitch = nullptr;
  block->lent_to = nullptr;
  block->slab = nullptr;
  block->addr_prev = block->addr_next = nullptr;
  spare_blocks_.give(block);
}

void HomeRuns::mark_ends(Block* block) {
  page_map_.set_one(block->addr(), block);
  page_map_.set_one(block->end_addr() - kGranuleBytes, block);
}

Block* HomeRuns::split_rest(Block* block, Granules front) {
  Block* rest = new_block(block->addr() + front.bytes(), block->granules() - front, BlockState::Free);
  // Callers reserved a spare record; this cannot be NULL.
  rest->big = block->big;
  rest->addr_prev = block;
  rest->addr_next = block->addr_next;
  if (block->addr_next) block->addr_next->addr_prev = rest;
  block->addr_next = rest;
  block->set_range(block->addr(), front);
  return rest;
}

Block* HomeRuns::split_front(Block* block, Granules front) {
  Block* rest = split_rest(block, front);
  mark_ends(rest);
  bins_of(rest).insert(rest);
  mark_ends(block);
  return block;
}

// `right`, the block after `left` in address order, becomes part of
// `left`; its record is recycled.
void HomeRuns::absorb(Block* left, Block* right) {
  left->set_range(left->addr(), left->granules() + right->granules());
  left->addr_next = right->addr_next;
  if (right->addr_next) right->addr_next->addr_prev = left;
  recycle(right);
}

void HomeRuns::insert_free(Block* block) {
  Block* prev = block->addr_prev;
  if (prev && prev->load_state() == BlockState::Free) {
    bins_of(prev).remove(prev);
    absorb(prev, block);
    block = prev;
  }
  Block* next = block->addr_next;
  if (next && next->load_state() == BlockState::Free) {
    bins_of(next).remove(next);
    absorb(block, next);
  }
  mark_ends(block);
  bins_of(block).insert(block);
}

Block* HomeRuns::take(Granules granules, BlockState state, bool big_first) {
  if (!spare_blocks_.reserve(1)) return nullptr;
  Block* block = nullptr;
  if (big_first) {
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

bool HomeRuns::put_back_tail(Block* block, Granules keep) {
  if (!spare_blocks_.reserve(1)) return false;
  Block* rest = split_rest(block, keep);
  // Every entry of the tail named the block (or its slab): they name the
  // free run now, so no lookup resolves to what no longer holds them.
  page_map_.set(rest->addr(), rest->granules(), rest);
  insert_free(rest);
  return true;
}

void HomeRuns::take_run(Block* run, Granules granules) {
  bins_.remove(run);
  if (run->granules() > granules) split_front(run, granules);
}

Block* HomeRuns::neighbour_ending_at(uint64_t addr) const {
  Span* span = page_map_.lookup(addr - kGranuleBytes);
  if (!span || span->pool != owner_) return nullptr;
  Block* block = arena_block_of(span);
  if (!block || block->stitch || block->load_state() == BlockState::Spare || block->end_addr() != addr) return nullptr;
  return block;
}

Block* HomeRuns::neighbour_starting_at(uint64_t addr) const {
  Span* span = page_map_.lookup(addr);
  if (!span || span->pool != owner_) return nullptr;
  Block* block = arena_block_of(span);
  if (!block || block->stitch || block->load_state() == BlockState::Spare || block->addr() != addr) return nullptr;
  return block;
}

void HomeRuns::add_run(uint64_t addr, Granules granules, bool big) {
  Block* block = new_block(addr, granules, BlockState::Free);
  block->big = big;
  // A big chunk is a run of its own: nothing coalesces across its edges.
  if (Block* left = big ? nullptr : neighbour_ending_at(addr); left && !left->big) {
    left->addr_next = block;
    block->addr_prev = left;
  }
  if (Block* right = big ? nullptr : neighbour_starting_at(addr + granules.bytes()); right && !right->big) {
    right->addr_prev = block;
    block->addr_next = right;
  }
  insert_free(block);
}

void HomeRuns::cut_out(Block* host, uint64_t addr, uint64_t end) {
  bins_of(host).remove(host);
  const uint64_t host_addr = host->addr(), host_end = host->end_addr();
  Block* prev = host->addr_prev;
  Block* next = host->addr_next;
  Block* left = host_addr < addr ? host : nullptr;
  Block* right = end < host_end ? new_block(end, granules_floor(host_end - end), BlockState::Free) : nullptr;
  if (right) right->big = host->big;
  if (left) {
    left->set_range(host_addr, granules_floor(addr - host_addr));
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
  page_map_.set(addr, granules_floor(end - addr), nullptr);
}

Granules HomeRuns::largest_free() const {
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
