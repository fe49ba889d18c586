// policy/device_budget.cpp: see device_budget.h.
#include "policy/device_budget.h"

namespace pagefast::policy {

namespace {
// The word of a holder that has none: it is always asked.
const std::atomic<uint64_t> kAlwaysAsked{kNoLimit};
}  // namespace

bool DeviceBudget::add(Holder* holder) {
  std::lock_guard<std::mutex> guard(add_mutex_);
  const int n = holder_count_.load(std::memory_order_relaxed);
  if (!holder || n >= kMaxHolders) return false;
  holders_[n] = holder;
  holder_count_.store(n + 1, std::memory_order_release);
  // Each list has fewer entries than holders_: its last stays NULL.
  Word* words = holder->all_idle() ? idle_words_ : asked_words_;
  while (words->load(std::memory_order_relaxed)) ++words;
  words->store(holder->held_word() ? holder->held_word() : &kAlwaysAsked, std::memory_order_release);
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

void DeviceBudget::mem_info_asked(uint64_t* free_bytes, uint64_t* total_bytes) {
  uint64_t idle = 0, in_use = 0;
  const int n = holder_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Holder* holder = holders_[i];
    const std::atomic<uint64_t>* word = holder->held_word();
    const uint64_t word_held = word ? word->load(std::memory_order_relaxed) : kNoLimit;
    if (word_held == 0) continue;
    if (holder->all_idle()) {
      idle += word_held;
      continue;
    }
    uint64_t held = 0, holder_idle = 0;
    holder->figures(&held, &holder_idle);
    idle += holder_idle;
    in_use += held > holder_idle ? held - holder_idle : 0;
  }
  answer_mem_info(idle, in_use, free_bytes, total_bytes);
}

void DeviceBudget::set_idle_limit(uint64_t bytes, uint64_t relearn_ns) {
  relearn_ns_ = relearn_ns;
  give_back_mark_.store(bytes, std::memory_order_relaxed);
  // Published last: give_back_idle reads relearn_ns_ only once it sees a bound.
  idle_limit_.store(bytes, std::memory_order_release);
}

uint64_t DeviceBudget::keep_bytes(uint64_t bound) const {
  return bound + learned_bytes_ < bound ? kNoLimit : bound + learned_bytes_;
}

void DeviceBudget::set_mark(uint64_t idle, uint64_t left) {
  const uint64_t bound = idle_limit_.load(std::memory_order_relaxed);
  const uint64_t keep = keep_bytes(bound);
  // Due again once another eighth of the bound came on top of what is idle
  // now or of the bound, whichever is more: memory that could not go back
  // (chunks partly in use) is not asked for again at every free.
  const uint64_t base = left > keep ? left : keep;
  const uint64_t step = bound / 8 > (64ull << 20) ? bound / 8 : (64ull << 20);
  const uint64_t due = base + step;
  give_back_mark_.store(due > idle ? due - idle : step, std::memory_order_relaxed);
}

uint64_t DeviceBudget::give_back_idle(Clock& clock) {
  const uint64_t bound = idle_limit_.load(std::memory_order_acquire);
  if (bound == kNoLimit) return 0;
  std::unique_lock<std::mutex> lock(give_back_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  const uint64_t idle = idle_bytes();
  uint64_t keep = keep_bytes(bound);
  if (idle <= keep) {
    set_mark(idle, idle);
    return 0;
  }
  const uint64_t now_ns = clock.now_ns();
  const uint64_t held = held_bytes();
  const bool recent = last_give_back_ns_ && now_ns - last_give_back_ns_ < relearn_ns_;
  if (!recent) recent_given_bytes_ = 0;
  if (recent && held > held_after_give_back_ && held - held_after_give_back_ >= recent_given_bytes_ / 2) {
    // The program took back what the last give-backs released: it frees
    // and allocates that much again. Keep it from now on.
    learned_bytes_ += recent_given_bytes_;
    recent_given_bytes_ = 0;
    last_give_back_ns_ = 0;
    keep = keep_bytes(bound);
    if (idle <= keep) {
      set_mark(idle, idle);
      return 0;
    }
  }
  const uint64_t given = ask(idle - keep);
  if (given) {
    given_back_bytes_.fetch_add(given, std::memory_order_relaxed);
    give_backs_.fetch_add(1, std::memory_order_relaxed);
    last_give_back_ns_ = now_ns ? now_ns : 1;
    recent_given_bytes_ += given;
    held_after_give_back_ = held_bytes();
  }
  set_mark(idle, idle > given ? idle - given : 0);
  return given;
}

uint64_t DeviceBudget::from_neighbours(uint64_t bytes) {
  if (!neighbours_ || !bytes) return 0;
  // Under a limit, the neighbours' memory is no help when the limit is
  // what refused.
  if (limit_bytes_ && held_bytes() + (bytes == kAllIdle ? 0 : bytes) > limit_bytes_) return 0;
  const uint64_t given = neighbours_->give_back(bytes);
  neighbour_asks_.fetch_add(1, std::memory_order_relaxed);
  neighbour_bytes_.fetch_add(given, std::memory_order_relaxed);
  return given;
}

DeviceBudget::Counters DeviceBudget::counters() const {
  Counters c;
  c.relieved_bytes = relieved_bytes_.load(std::memory_order_relaxed);
  c.relieves = relieves_.load(std::memory_order_relaxed);
  c.released_bytes = released_bytes_.load(std::memory_order_relaxed);
  c.releases = releases_.load(std::memory_order_relaxed);
  c.given_back_bytes = given_back_bytes_.load(std::memory_order_relaxed);
  c.give_backs = give_backs_.load(std::memory_order_relaxed);
  c.neighbour_bytes = neighbour_bytes_.load(std::memory_order_relaxed);
  c.neighbour_asks = neighbour_asks_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace pagefast::policy
