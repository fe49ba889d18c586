// policy/arena.cpp: Arena over its parts (arena.h): taking and giving
// back blocks, growth, stitches and peers; growth ahead is in
// arena_ahead.cpp, chunk release in arena_release.cpp, the checks in
// arena_check.cpp. Every multi-step change first secures what it may need
// (spare records, address space, page-map leaves) and undoes the provider
// calls it made if a later one fails, so a failure anywhere leaves the
// arena exactly as it was.
#include "policy/arena.h"

namespace pagefast::policy {

Arena::Arena(Provider& provider, PageMap& page_map, DevicePool* owner, const ArenaSettings& settings)
    : provider_(provider),
      page_map_(page_map),
      settings_(settings),
      address_space_(provider, settings.range_bytes),
      chunks_(provider, counters_),
      runs_(page_map, owner),
      stitches_(provider, page_map, address_space_, runs_, chunks_, counters_),
      sleep_(provider, page_map, chunks_) {}

Block* Arena::take(Granules granules, BlockState state) {
  // A request over a chunk first tries the big chunks' runs, if one fits
  // leaving at most an eighth of it unused; smaller requests never do.
  return runs_.take(granules, state, settings_.big_chunks && granules > settings_.chunk_granules);
}

Block* Arena::take_stitch(Granules granules, BlockState state) { return stitches_.take(granules, state); }

void Arena::put_back(Block* block) {
  block->slab = nullptr;
  block->store_state(BlockState::Free);
  if (block->stitch) stitches_.put_back(block);
  else runs_.insert_free(block);
}

bool Arena::put_back_tail(Block* block, Granules keep) { return runs_.put_back_tail(block, keep); }

ProviderStatus Arena::grow(Granules min_granules, Granules max_step, Granules ceiling) {
  if (sleep_.asleep()) return ProviderStatus::Failed;
  if (min_granules.count() == 0) return ProviderStatus::OutOfMemory;
  // Whole free big chunks go back first, so that under a limit they make
  // room for the one that replaces them.
  const bool big = settings_.big_chunks && min_granules > settings_.chunk_granules;
  if (big) release_big_for(min_granules);
  const Granules mapped = chunks_.mapped();
  const Granules room = mapped >= ceiling ? Granules(0) : ceiling - mapped;
  if (room < min_granules) return ProviderStatus::OutOfMemory;
  Granules base = settings_.chunk_granules;
  if (settings_.ramp && mapped < base) base = max_granules(mapped, Granules(1));
  Granules step = max_granules(base, min_granules);
  if (step > max_step) step = max_granules(max_step, min_granules);
  if (step > room) step = room;
  if (!runs_.reserve(1)) return ProviderStatus::OutOfMemory;

  ChunkHandle handle;
  ProviderStatus status = provider_.create_chunk(step, &handle);
  if (status == ProviderStatus::OutOfMemory && step > min_granules) {
    step = min_granules;
    status = provider_.create_chunk(step, &handle);
  }
  if (status != ProviderStatus::Ok) return status;

  auto drop_handle = [&] { chunks_.release_or_keep(handle); };
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
  status = provider_.set_access(addr, step, AccessSet{chunks_.peers(), 0});
  if (status == ProviderStatus::Ok && !chunks_.add(addr, handle, step)) status = ProviderStatus::OutOfMemory;
  if (status != ProviderStatus::Ok) {
    if (!provider_.unmap(addr, step)) ++counters_.leaks;
    drop_handle();
    address_space_.give(addr, step);
    return status;
  }
  runs_.add_run(addr, step, big);
  ++counters_.growths;
  return ProviderStatus::Ok;
}

Block* Arena::stitch(Granules granules, int max_pieces, BlockState state) {
  if (sleep_.asleep() || free_home() < granules || granules.count() == 0) return nullptr;
  return stitches_.make(granules, max_pieces, state);
}

int Arena::dissolve_free_stitches() { return sleep_.asleep() ? 0 : stitches_.dissolve_free(); }

bool Arena::physical_pieces(const Block* block, Granules offset, Granules granules, PieceList* out) const {
  if (offset + granules > block->granules() || sleep_.asleep()) return false;
  if (!block->stitch) return chunks_.home_pieces(block->addr() + offset.bytes(), granules, out);
  return stitches_.pieces_of(block, offset, granules, out);
}

int Arena::set_peers(uint64_t peers) {
  const AccessSet access = chunks_.set_peers(peers);
  // Asleep: wake opens every range to the set of that moment.
  if (sleep_.asleep()) {
    sleep_.peers_changed(access);
    return 0;
  }
  return chunks_.apply_access(access);
}

}  // namespace pagefast::policy
