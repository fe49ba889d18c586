// tests/policy/own_vmm/test_device_share.cpp: the own-VMM cache and a
// device's budget meet through what they exchange when the device's
// memory joins the cache (policy/own_vmm/device_share.h): the cache's
// holder of the device, in the budget, and the budget's view, which the
// cache asks for its room.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "policy/device_budget.h"
#include "tests/policy/own_vmm/fakes.h"

using namespace own_vmm_test;
using pagefast::policy::DeviceBudget;
using pagefast::policy::kAllIdle;
using pagefast::policy::own_vmm::NoRoom;

namespace {

// The device's budget as interpose/pool/device_memory.h's CacheRoom
// shows it: at most `cap`, and under the limit what the budget leaves the
// cache's holder beside the others.
class BudgetRoom final : public BudgetView {
 public:
  BudgetRoom(DeviceBudget& budget, uint64_t cap) : budget_(budget), cap_(cap) {}
  uint64_t room(const Holder& share) override {
    const uint64_t left = budget_.room_for(&share);
    return left < cap_ ? left : cap_;
  }

 private:
  DeviceBudget& budget_;
  const uint64_t cap_;
};

// A pool beside the cache: `held` bytes in use, nothing idle.
class BusyPool final : public Holder {
 public:
  explicit BusyPool(uint64_t held) : held_(held) {}
  uint64_t held_bytes() override { return held_; }
  uint64_t idle_bytes() override { return 0; }
  uint64_t release(uint64_t) override { return 0; }

 private:
  const uint64_t held_;
};

// Creates `count` handles and releases them: the cache keeps what its room allows.
void create_release(Program& p, int count) {
  std::vector<uint64_t> hs(size_t(count), 0);
  for (auto& h : hs) REQUIRE(p.create(kSeg, kProp, &h) == kOk);
  for (uint64_t h : hs) REQUIRE(p.release(h) == kOk);
}

}  // namespace

TEST_CASE("own vmm: the cache keeps what its budget's view leaves it, and the budget releases it through its holder") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  DeviceBudget budget(0, 10 * kSeg);
  BusyPool pool(6 * kSeg);
  BudgetRoom view(budget, 3 * kSeg);
  Holder* share = cache.join(0, &view);
  REQUIRE(share != nullptr);
  REQUIRE(budget.add(share));
  REQUIRE(budget.add(&pool));
  Program p{fake, &cache};
  // Room: the cap (3 segments) below what the limit leaves beside the pool (4).
  create_release(p, 5);
  CHECK(cache.cached_bytes(0) == 3 * kSeg);
  CHECK(fake.handles.size() == 3);
  // The budget reads the cache's bytes through its holder: all idle.
  CHECK(share->held_word() != nullptr);
  CHECK(share->all_idle());
  CHECK(budget.held_bytes() == 9 * kSeg);
  CHECK(budget.idle_bytes() == 3 * kSeg);
  // Out of memory: the budget has the cache release everything.
  CHECK(budget.reclaim() == 3 * kSeg);
  CHECK(cache.cached_bytes(0) == 0);
  CHECK(fake.handles.empty());
  // Joined again with a view of no room: nothing is kept.
  NoRoom none;
  CHECK(cache.join(0, &none) == share);
  create_release(p, 2);
  CHECK(cache.cached_bytes(0) == 0);
  CHECK(fake.handles.empty());
  // An ordinal past the cache's devices has no holder.
  CHECK(cache.join(-1, &view) == nullptr);
  CHECK(cache.join(1 << 20, &view) == nullptr);
}

TEST_CASE("own vmm: a device no budget joined has no bound in the cache") {
  FakeDriver fake;
  Cache cache(fake, 2, 1);
  Program p{fake, &cache};
  create_release(p, 6);
  CHECK(cache.cached_bytes(0) == 6 * kSeg);
}

// The budget's calls through the cache's holder (reclaim, release,
// room, cuMemGetInfo's figures) from other threads while the program
// grows and shrinks through the cache and its worker grows ahead: the
// cache's room is what the pool beside it leaves whatever the cache
// holds, its memory reads as idle, and in the end the budget frees what
// it holds (ThreadSanitizer: "policy under tsan").
TEST_CASE("own vmm: the budget asks and releases the cache's memory while the program uses it", "[threads]") {
  constexpr int kRounds = 30, kPages = 6;
  FakeDriver fake;
  WorkerDriver driver{fake};
  Cache cache{driver, 2, 1, 4, true};
  cache.note_reserved(kBase, 64 * kSeg);
  DeviceBudget budget(0, 40 * kSeg);
  BusyPool pool(30 * kSeg);
  BudgetRoom view(budget, 12 * kSeg);
  Holder* share = cache.join(0, &view);
  REQUIRE(share != nullptr);
  REQUIRE(budget.add(share));
  REQUIRE(budget.add(&pool));
  WorkerProgram p{driver, cache};
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};  // Catch's checks are not thread-safe
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    while (!done.load()) {
      (void)budget.reclaim();
      if (budget.room_for(share) != 10 * kSeg) ++wrong;  // the limit less the pool's
      (void)share->release(kSeg);
    }
  });
  threads.emplace_back([&] {
    while (!done.load()) {
      // The cache's bytes are idle: free to the program as far as the limit goes.
      uint64_t free_bytes = 64 * kSeg, total = 64 * kSeg;
      budget.mem_info(&free_bytes, &total);
      if (free_bytes != 10 * kSeg || total != 40 * kSeg) ++wrong;
    }
  });
  grow_and_shrink(cache, p, kRounds, kPages, done, threads, [] {});
  CHECK(wrong.load() == 0);
  CHECK(cache.deferred_counts_consistent());
  const uint64_t held = cache.cached_bytes(0);
  CHECK(share->held_bytes() == held);
  CHECK(budget.trim() == held);
  CHECK(cache.cached_bytes(0) == 0);
  CHECK(fake.handles.empty());
}
