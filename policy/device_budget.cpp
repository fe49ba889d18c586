// policy/device_budget.cpp: see device_budget.h.
#include "policy/device_budget.h"

namespace pagefast::policy {

bool DeviceBudget::add(IdleMemory* holder) {
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

uint64_t DeviceBudget::ask(uint64_t bytes) {
  uint64_t given = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n && given < bytes; ++i) {
    if (holders_[i]->idle_bytes() == 0) continue;
    given += holders_[i]->give_back(bytes == kAllIdle ? kAllIdle : bytes - given);
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

uint64_t DeviceBudget::release_all() {
  const uint64_t given = ask(kAllIdle);
  if (given) {
    released_bytes_.fetch_add(given, std::memory_order_relaxed);
    releases_.fetch_add(1, std::memory_order_relaxed);
  }
  return given;
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
