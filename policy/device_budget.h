// policy/device_budget.h: one device's memory as pagefast shares it with
// the driver and the program (docs/POOL.md "Headroom", docs/DESIGN.md
// "Who gives back what"). The parts of pagefast that keep device memory
// (the pool, the cache of the program's own VMM memory) are its holders,
// and this is the one place where they meet: no holder calls another.
// Each way of giving memory back has one name here:
//  - relieve: the device keeps at least headroom_bytes really free while
//    pagefast holds idle memory, for what the driver and the CUDA libraries
//    take outside any allocator (modules loaded lazily, library handles,
//    stream-ordered pools, NCCL). relieve() releases the shortfall when
//    free memory fell under it (another process, the driver, a library);
//  - reclaim: the driver refused a call for lack of memory. reclaim()
//    releases every idle byte of every holder, and the call is retried once
//    (interpose/hooks.cpp), so memory cuMemGetInfo reports as free can
//    really be had; reclaim_for() is the same for one holder's own refused
//    growth, from the others only;
//  - make room: under a limit, a holder about to grow by some bytes has the
//    others release what would take all of them together over the limit;
//    room_for() says how much a holder may keep beside the others;
//  - give back: a free took the holders' idle memory over idle_limit (the
//    program emptied its own cache, or freed what it will not use again):
//    give_back_idle() releases what is beyond it at once, so that another
//    process can have it (docs/POOL.md "Given back at once");
//  - neighbours: the driver refused memory that this process could not
//    find idle: from_neighbours() asks the other pagefast processes on the
//    device to give their idle memory back (interpose/ipc: over their
//    sockets), and the call is tried again.
// A holder releases in its own units (the pool whole chunks); "release"
// always means memory going back to the driver.
// Pure: the holders are interfaces and the driver's free memory is an
// argument, so tests drive it with fakes. Thread-safe: the holders answer
// from any thread; add() may run while others call.
//
// Lock rule (docs/DESIGN.md "Lock order"): the budget holds no lock that
// anyone waits for while it asks a holder, so a holder takes its own locks
// in release(): give_back_idle asks holders inside give_back_mutex_, which
// is only ever try-locked (a second caller returns at once); and no
// caller holds a lock of any holder while it calls make_room, reclaim,
// reclaim_for or relieve. A pool that finds it must grow therefore leaves
// its locks, asks the budget, and tries again (DevicePool::obtain):
// otherwise two pools growing at once would each hold their own lock and
// wait for the other's to release memory. held_bytes, idle_bytes and
// room_for take no lock of a holder (figures kept in
// atomics) and may be called from anywhere.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "policy/provider.h"

namespace pagefast::policy {

// Something that keeps device memory and can release its idle part.
class Holder {
 public:
  virtual ~Holder() = default;
  // Device memory it holds now, idle or in use: what counts against the
  // limit.
  virtual uint64_t held_bytes() = 0;
  virtual uint64_t idle_bytes() = 0;
  // Both at once, for cuMemGetInfo's answer (mem_info): a holder whose
  // two figures come from one reading overrides it to read once.
  virtual void figures(uint64_t* held, uint64_t* idle) {
    *held = held_bytes();
    *idle = idle_bytes();
  }
  // Releases idle memory to the driver, at least `bytes` if it holds that
  // much (kAllIdle: all of it). May call the driver (and wait for the
  // device); never from a destructor. Returns the bytes released.
  virtual uint64_t release(uint64_t bytes) = 0;

  // What the budget reads before it asks (mem_info, on every cuMemGetInfo):
  // a word that reads 0 whenever the holder holds nothing, so that the
  // budget asks only a holder that holds something; with all_idle, the
  // word is both figures exactly (all the holder holds is idle, as the
  // own-VMM cache's), and the budget never asks. NULL: always asked.
  const std::atomic<uint64_t>* held_word() const { return held_word_; }
  bool all_idle() const { return all_idle_; }

 protected:
  // Before the holder is added to a budget; the word outlives the holder.
  void set_held_word(const std::atomic<uint64_t>* word, bool all_idle) {
    held_word_ = word;
    all_idle_ = word && all_idle;
  }

 private:
  const std::atomic<uint64_t>* held_word_ = nullptr;
  bool all_idle_ = false;
};

// The other pagefast processes on the same device (interpose/ipc/ipc_neighbours.cpp).
class Neighbours {
 public:
  virtual ~Neighbours() = default;
  // Asks them to release their idle memory of this device; returns the
  // bytes they say they released. Blocks (bounded by the asker). Called
  // with no lock of any holder held.
  virtual uint64_t give_back(uint64_t bytes) = 0;
};

constexpr uint64_t kAllIdle = ~uint64_t(0);
// room_for() without a limit.
constexpr uint64_t kNoLimit = ~uint64_t(0);

class DeviceBudget {
 public:
  // The own-VMM cache and a pool per region slot of the device.
  static constexpr int kMaxHolders = 40;

  // limit_bytes 0: no limit.
  explicit DeviceBudget(uint64_t headroom_bytes, uint64_t limit_bytes = 0)
      : headroom_bytes_(headroom_bytes), limit_bytes_(limit_bytes) {}
  DeviceBudget(const DeviceBudget&) = delete;
  DeviceBudget& operator=(const DeviceBudget&) = delete;

  // Holders are asked in the order added. false: no room (kMaxHolders).
  // Holders are never removed: they live as long as the process.
  bool add(Holder* holder);

  uint64_t headroom_bytes() const { return headroom_bytes_; }
  uint64_t limit_bytes() const { return limit_bytes_; }
  uint64_t idle_bytes();
  uint64_t held_bytes();

  // free_bytes: the driver's free memory now. Under the headroom, the
  // holders release the shortfall (as far as they hold idle memory).
  // Returns the bytes released.
  uint64_t relieve(uint64_t free_bytes);
  // The driver refused memory: every holder releases all it holds idle.
  uint64_t reclaim();
  // The program asked (pagefast_pool_trim): the same, not counted as a
  // reclaim.
  uint64_t trim() { return ask(kAllIdle); }
  // The driver refused `grower` a growth of `bytes`: the other holders
  // release at least that much if they hold it. Not counted as a reclaim
  // (the pool's own out-of-memory path counts its answer).
  uint64_t reclaim_for(const Holder* grower, uint64_t bytes);
  // Under a limit, `grower` is about to take `bytes` more: the other
  // holders release what would take all the holders over the limit.
  uint64_t make_room(const Holder* grower, uint64_t bytes);
  // What `holder` may hold beside the others under the limit (kNoLimit
  // without one).
  uint64_t room_for(const Holder* holder);

  // Idle memory the holders keep beyond what they hold in use (kNoLimit:
  // no bound, only the decay and the headroom give it back). Set once,
  // before any holder frees (the device's pool is made). A program
  // that takes back from the driver, within relearn_ns, at least half of
  // what a give-back released frees and allocates that much again: the
  // bound then rises to the idle memory of the next give-back, which is
  // skipped (that memory still decays after release_delay unused).
  void set_idle_limit(uint64_t bytes, uint64_t relearn_ns);
  uint64_t idle_limit() const { return idle_limit_.load(std::memory_order_relaxed); }
  // A holder's free may have taken idle memory over the bound: what is
  // beyond it goes back now (one caller at a time; the others return).
  // The clock is read only then. REQUIRES: no lock of any holder held.
  // Returns the bytes released.
  uint64_t give_back_idle(Clock& clock);
  // Bytes a holder may add to its idle memory before give_back_idle() is
  // due again (kNoLimit: never): read lock-free on a free path.
  uint64_t give_back_mark() const { return give_back_mark_.load(std::memory_order_relaxed); }
  // The mark itself, for a pool's free path to read without a call.
  const std::atomic<uint64_t>* give_back_mark_word() const { return &give_back_mark_; }

  void set_neighbours(Neighbours* neighbours) { neighbours_ = neighbours; }
  // The driver refused `bytes` that no holder here had idle: the other
  // pagefast processes on the device give theirs back. REQUIRES: no lock of
  // any holder held. Returns the bytes they released.
  uint64_t from_neighbours(uint64_t bytes);

  // What cuMemGetInfo answers, from the driver's answer in *free_bytes and
  // *total_bytes (either may be NULL): every holder's idle memory is free
  // (a call refused for lack of it gets it back: reclaim); under a limit
  // the total is the limit, and free what the holders' memory in use (on
  // the device: an asleep pool's blocks are not) leaves of it, never more
  // than the device could back. A holder is asked for its figures only
  // when its word says it holds something, not all of it idle
  // (Holder::held_word).
  void mem_info(uint64_t* free_bytes, uint64_t* total_bytes) {
    if (!mem_info_from_words(free_bytes, total_bytes)) mem_info_asked(free_bytes, total_bytes);
  }
  // mem_info when no holder needs asking (each holds nothing or only idle
  // memory): inline, no call, from the words add() copied. false, with
  // nothing written, otherwise.
  bool mem_info_from_words(uint64_t* free_bytes, uint64_t* total_bytes) const {
    for (const Word* w = asked_words_; const std::atomic<uint64_t>* word = w->load(std::memory_order_acquire); ++w)
      if (word->load(std::memory_order_relaxed)) return false;
    uint64_t idle = 0;
    for (const Word* w = idle_words_; const std::atomic<uint64_t>* word = w->load(std::memory_order_acquire); ++w)
      idle += word->load(std::memory_order_relaxed);
    answer_mem_info(idle, 0, free_bytes, total_bytes);
    return true;
  }

  // The limit's and the headroom's answers for one holder's own steps (the
  // pool's growth, prewarm and record of an out-of-memory answer ask them
  // here: neither figure is kept anywhere else). Immutable: no lock.
  // What may still be added to `held_bytes` under the limit (kNoLimit
  // without one).
  uint64_t room_under_limit(uint64_t held_bytes) const {
    if (!limit_bytes_) return kNoLimit;
    return held_bytes >= limit_bytes_ ? 0 : limit_bytes_ - held_bytes;
  }
  // `bytes`, no more than the limit.
  uint64_t within_limit(uint64_t bytes) const { return limit_bytes_ && bytes > limit_bytes_ ? limit_bytes_ : bytes; }
  // Whether a growth of growth_bytes, with free_bytes free on the device,
  // would leave less than the headroom free.
  bool cuts_headroom(uint64_t free_bytes, uint64_t growth_bytes) const {
    return headroom_bytes_ && free_bytes < headroom_bytes_ + growth_bytes;
  }
  // How many bytes a growth may take of free_bytes and leave the headroom.
  uint64_t room_above_headroom(uint64_t free_bytes) const {
    return free_bytes > headroom_bytes_ ? free_bytes - headroom_bytes_ : 0;
  }

  // Counters for the stats: bytes released to keep the headroom, and
  // after an out-of-memory answer; how many times each.
  struct Counters {
    uint64_t relieved_bytes = 0, relieves = 0;
    uint64_t released_bytes = 0, releases = 0;
    uint64_t given_back_bytes = 0, give_backs = 0;
    uint64_t neighbour_bytes = 0, neighbour_asks = 0;
  };
  Counters counters() const;

 private:
  // Asks the holders in order, `skip` left out, until `bytes` came back.
  uint64_t ask(uint64_t bytes, const Holder* skip = nullptr);
  // mem_info with every holder that holds something, not all of it idle,
  // asked for its figures.
  void mem_info_asked(uint64_t* free_bytes, uint64_t* total_bytes);
  // mem_info's answer from the holders' idle memory and memory in use.
  void answer_mem_info(uint64_t idle, uint64_t in_use, uint64_t* free_bytes, uint64_t* total_bytes) const {
    if (limit_bytes_) {
      uint64_t left = limit_bytes_ > in_use ? limit_bytes_ - in_use : 0;
      if (free_bytes && *free_bytes + idle < left) left = *free_bytes + idle;
      if (free_bytes) *free_bytes = left;
      if (total_bytes) *total_bytes = limit_bytes_;
      return;
    }
    if (free_bytes) {
      uint64_t free_now = *free_bytes + idle;
      if (total_bytes && free_now > *total_bytes) free_now = *total_bytes;
      *free_bytes = free_now;
    }
  }

  const uint64_t headroom_bytes_;
  const uint64_t limit_bytes_;
  std::mutex add_mutex_;  // add() alone: the readers go by the counts
  Holder* holders_[kMaxHolders] = {};
  std::atomic<int> holder_count_{0};
  // The holders' words (Holder::held_word) as add() found them, for
  // mem_info_from_words, each list ended by NULL: the all-idle holders'
  // (summed), and the others' (0: nothing to ask; a holder without a word
  // has one that never reads 0). Written under add_mutex_.
  using Word = std::atomic<const std::atomic<uint64_t>*>;
  Word idle_words_[kMaxHolders + 1] = {};
  Word asked_words_[kMaxHolders + 1] = {};
  // REQUIRES: give_back_mutex_. The idle memory kept: `bound` and what
  // the program showed it takes back (learned_bytes_), kNoLimit on overflow.
  uint64_t keep_bytes(uint64_t bound) const;
  // REQUIRES: give_back_mutex_. The mark after a give-back that found
  // `idle` idle memory and left `left` of it.
  void set_mark(uint64_t idle, uint64_t left);

  std::atomic<uint64_t> relieved_bytes_{0}, relieves_{0}, released_bytes_{0}, releases_{0};
  std::atomic<uint64_t> given_back_bytes_{0}, give_backs_{0}, neighbour_bytes_{0}, neighbour_asks_{0};

  std::atomic<uint64_t> idle_limit_{kNoLimit};
  std::atomic<uint64_t> give_back_mark_{kNoLimit};
  uint64_t relearn_ns_ = 0;
  // give_back_idle's state, under give_back_mutex_ (try-locked).
  std::mutex give_back_mutex_;
  uint64_t learned_bytes_ = 0;  // added to the bound (a program that takes it back)
  // The give-backs of one emptying (each within relearn_ns of the last):
  // when the last one was, what they released in all, what the holders
  // held after the last.
  uint64_t last_give_back_ns_ = 0, recent_given_bytes_ = 0, held_after_give_back_ = 0;
  Neighbours* neighbours_ = nullptr;
};

}  // namespace pagefast::policy
