// policy/budgeted_provider.cpp: see budgeted_provider.h.
#include "policy/budgeted_provider.h"

#include <new>

namespace pagefast::policy {

ProviderStatus BudgetedProvider::create_chunk(Granules granules, ChunkHandle* chunk) {
  const uint64_t bytes = granules.bytes();
  {
    // The bytes are counted before the driver is asked, so that two
    // growths at once cannot both pass the limit.
    std::lock_guard<std::mutex> guard(mutex_);
    if (budget_.room_under_limit(held_bytes_) < bytes) return ProviderStatus::OutOfMemory;
    held_bytes_ += bytes;
  }
  const ProviderStatus status = inner_.create_chunk(granules, chunk);
  std::unique_lock<std::mutex> guard(mutex_);
  if (status != ProviderStatus::Ok) {
    held_bytes_ -= bytes;
    return status;
  }
  try {
    chunks_.emplace(chunk->value, bytes);
    return ProviderStatus::Ok;
  } catch (const std::bad_alloc&) {
  }
  // Untracked memory could take the pools over the limit unseen: it goes
  // back (or, refused, stays counted for good).
  guard.unlock();
  if (inner_.release_chunk(*chunk)) {
    guard.lock();
    held_bytes_ -= bytes;
  }
  return ProviderStatus::OutOfMemory;
}

bool BudgetedProvider::release_chunk(ChunkHandle chunk) {
  if (!inner_.release_chunk(chunk)) return false;
  std::lock_guard<std::mutex> guard(mutex_);
  auto found = chunks_.find(chunk.value);
  if (found != chunks_.end()) {
    held_bytes_ -= found->second;
    chunks_.erase(found);
  }
  return true;
}

}  // namespace pagefast::policy
