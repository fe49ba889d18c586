// policy/device_budget.cpp: see device_budget.h.
#include "policy/device_budget.h"

namespace pagefast::policy {

bool DeviceBudget::add(Holder* holder) {
  std::lock_guard<std::mutex> guard(add_mutex_);
  const int n = holder_count_.load(std::memory_order_relaxed);
  if (!holder || n >= kMaxHolders) return false;
  holders_[n] = holder;
  holder_count_.store(n + 1, std::memory_order_release);
  return true;
}

uint64_t DeviceBudget::idle_bytes() {
  uint64_t idle = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) idle += holders_[i]->idle_bytes();
  return idle;
}

uint64_t DeviceBudget::held_bytes() {
  uint64_t held = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) held += holders_[i]->held_bytes();
  return held;
}

uint64_t DeviceBudget::ask(uint64_t bytes, const Holder* skip) {
  uint64_t given = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n && given < bytes; ++i) {
    if (holders_[i] == skip || holders_[i]->idle_bytes() == 0) continue;
    given += holders_[i]->release(bytes == kAllIdle ? kAllIdle : bytes - given);
  }
  return given;
}

uint64_t DeviceBudget::relieve(uint64_t free_bytes) {
  if (free_bytes >= headroom_bytes_) return 0;
  const uint64_t given = ask(headroom_bytes_ - free_bytes);
  if (given) {
    relieved_bytes_.fetch_add(given, std::memory_order_relaxed);
    relieves_.fetch_add(1, std::memory_order_relaxed);
  }
  return given;
}

uint64_t DeviceBudget::reclaim() {
  const uint64_t given = ask(kAllIdle);
  if (given) {
    released_bytes_.fetch_add(given, std::memory_order_relaxed);
    releases_.fetch_add(1, std::memory_order_relaxed);
  }
  return given;
}

uint64_t DeviceBudget::reclaim_for(const Holder* grower, uint64_t bytes) { return bytes ? ask(bytes, grower) : 0; }

uint64_t DeviceBudget::make_room(const Holder* grower, uint64_t bytes) {
  if (!limit_bytes_) return 0;
  uint64_t others_idle = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (holders_[i] != grower) others_idle += holders_[i]->idle_bytes();
  if (!others_idle) return 0;
  const uint64_t need = held_bytes() + bytes;
  return need > limit_bytes_ ? ask(need - limit_bytes_, grower) : 0;
}

uint64_t DeviceBudget::room_for(const Holder* holder) {
  if (!limit_bytes_) return kNoLimit;
  uint64_t others = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (holders_[i] != holder) others += holders_[i]->held_bytes();
  return limit_bytes_ > others ? limit_bytes_ - others : 0;
}

DeviceBudget::Counters DeviceBudget::counters() const {
  Counters c;
  c.relieved_bytes = relieved_bytes_.load(std::memory_order_relaxed);
  c.relieves = relieves_.load(std::memory_order_relaxed);
  c.released_bytes = released_bytes_.load(std::memory_order_relaxed);
  c.releases = releases_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace pagefast::policy
