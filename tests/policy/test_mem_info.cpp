// tests/policy/test_mem_info.cpp: the budget's answer to cuMemGetInfo
// (DeviceBudget::mem_info) read from the holders' words (Holder::held_word)
// without asking them where it can: a holder that holds nothing is not
// asked, an all-idle one (the own-VMM cache's share) never is, and the
// answer is the one the holders' figures give, also while the words change
// and holders are added on other threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// A holder whose figures come from its word, as the glue's shares: `held`
// is the word, `in_use` what of it is not idle. all_idle: the own-VMM
// cache's share (held = idle = the word); otherwise a pool's (asked when
// the word is not 0). with_word false: a holder without a word.
struct WordHolder final : Holder {
  explicit WordHolder(bool all_idle, bool with_word = true) {
    if (with_word) set_held_word(&held, all_idle);
  }
  uint64_t held_bytes() override {
    asked.fetch_add(1, std::memory_order_relaxed);
    return held.load(std::memory_order_relaxed);
  }
  uint64_t idle_bytes() override {
    asked.fetch_add(1, std::memory_order_relaxed);
    const uint64_t h = held.load(std::memory_order_relaxed), u = in_use.load(std::memory_order_relaxed);
    return h > u ? h - u : 0;
  }
  uint64_t release(uint64_t) override { return 0; }
  std::atomic<uint64_t> held{0}, in_use{0};
  std::atomic<int> asked{0};
};

// A pool's holder with the pool's mapped bytes as its word, as the glue's
// PoolShare; `word` false: the same holder without it (always asked).
struct PoolShare final : Holder {
  PoolShare(DevicePool* pool, bool word) : pool(pool) {
    if (word) set_held_word(pool->mapped_bytes_word(), false);
  }
  uint64_t held_bytes() override { return pool->mapped_bytes(); }
  uint64_t idle_bytes() override { return pool->idle_bytes(); }
  uint64_t release(uint64_t bytes) override { return pool->release(bytes); }
  DevicePool* pool;
};

}  // namespace

TEST_CASE("cuMemGetInfo's answer asks no holder that holds nothing or only idle memory", "[budget][mem_info]") {
  WordHolder cache(true), pool(false);
  DeviceBudget budget(0), limited(0, 1 * kGiB);
  for (DeviceBudget* b : {&budget, &limited}) {
    REQUIRE(b->add(&cache));
    REQUIRE(b->add(&pool));
  }
  cache.held = 64 * kMiB;
  uint64_t free_bytes = 512 * kMiB, total = 2 * kGiB;
  REQUIRE(budget.mem_info_from_words(&free_bytes, &total));
  CHECK(free_bytes == 512 * kMiB + 64 * kMiB);
  CHECK(total == 2 * kGiB);
  free_bytes = 2 * kGiB - 16 * kMiB;
  budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 2 * kGiB);  // never over the total
  free_bytes = 512 * kMiB;
  limited.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 512 * kMiB + 64 * kMiB);
  CHECK(total == 1 * kGiB);
  CHECK(cache.asked == 0);
  CHECK(pool.asked == 0);
  // The pool holds something: asked, and mem_info_from_words writes nothing.
  pool.held = 256 * kMiB;
  pool.in_use = 192 * kMiB;
  free_bytes = 512 * kMiB;
  total = 2 * kGiB;
  CHECK_FALSE(budget.mem_info_from_words(&free_bytes, &total));
  CHECK(free_bytes == 512 * kMiB);
  budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 512 * kMiB + 64 * kMiB + 64 * kMiB);
  CHECK(pool.asked > 0);
  CHECK(cache.asked == 0);
  // Under the limit, what is in use counts against it.
  free_bytes = 2 * kGiB;
  total = 2 * kGiB;
  limited.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 1 * kGiB - 192 * kMiB);
  CHECK(total == 1 * kGiB);
  // Empty again: not asked any more.
  pool.held = 0;
  pool.in_use = 0;
  const int asked = pool.asked;
  free_bytes = 512 * kMiB;
  budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 512 * kMiB + 64 * kMiB);
  CHECK(pool.asked == asked);
}

TEST_CASE("a holder without a word is always asked", "[budget][mem_info]") {
  WordHolder cache(true), plain(true, false);
  DeviceBudget budget(0);
  REQUIRE(budget.add(&cache));
  REQUIRE(budget.add(&plain));
  CHECK_FALSE(plain.all_idle());
  uint64_t free_bytes = 512 * kMiB, total = 2 * kGiB;
  CHECK_FALSE(budget.mem_info_from_words(&free_bytes, &total));
  plain.held = 32 * kMiB;
  cache.held = 16 * kMiB;
  budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == 512 * kMiB + 32 * kMiB + 16 * kMiB);
  CHECK(plain.asked > 0);
  CHECK(cache.asked == 0);
}

TEST_CASE("a pool's mapped bytes as its word give the answer its figures give", "[budget][mem_info]") {
  FakeProvider provider(1 * kGiB, FakeProvider::Backing::Host);
  FakeClock clock;
  std::unique_ptr<PageMap> page_map(new PageMap());
  PoolSettings s;
  s.config = config_with(32 * kMiB, 0);
  s.device_total_bytes = 1 * kGiB;
  {
    DeviceBudget none(s.config.headroom_bytes, s.config.limit_bytes);
    DevicePool pool(provider, clock, *page_map, s, none, nullptr);
    PoolShare with(&pool, true), without(&pool, false);
    DeviceBudget by_word(0), asked(0), limited_word(0, 512 * kMiB), limited_asked(0, 512 * kMiB);
    REQUIRE(by_word.add(&with));
    REQUIRE(asked.add(&without));
    REQUIRE(limited_word.add(&with));
    REQUIRE(limited_asked.add(&without));
    ThreadCache* cache = pool.attach_thread();
    auto same = [&](const char* when) {
      INFO(when);
      for (uint64_t driver_free : {uint64_t(0), 100 * kMiB, 1 * kGiB}) {
        uint64_t f1 = driver_free, t1 = 1 * kGiB, f2 = driver_free, t2 = 1 * kGiB;
        by_word.mem_info(&f1, &t1);
        asked.mem_info(&f2, &t2);
        CHECK(f1 == f2);
        CHECK(t1 == t2);
        f1 = f2 = driver_free;
        limited_word.mem_info(&f1, &t1);
        limited_asked.mem_info(&f2, &t2);
        CHECK(f1 == f2);
        CHECK(t1 == t2);
      }
    };
    same("nothing mapped");
    uint64_t p = 0, q = 0;
    REQUIRE(pool.alloc(*cache, 64 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(pool.alloc(*cache, 64 * kMiB, &q) == AllocStatus::Ok);
    same("two blocks in use");
    Span* span = page_map->lookup(q);
    REQUIRE(span);
    REQUIRE(pool.free(*cache, span, q) == FreeStatus::Ok);
    same("one block freed");
    span = page_map->lookup(p);
    REQUIRE(span);
    REQUIRE(pool.free(*cache, span, p) == FreeStatus::Ok);
    pool.release(kAllIdle);
    same("everything released");
    CHECK(pool.mapped_bytes() == 0);
    pool.detach_thread(cache);
  }
  page_map->destroy_leaves_for_tests();
}

TEST_CASE("cuMemGetInfo's answer while holders change their words and join on other threads",
          "[budget][mem_info][threads]") {
  // Each holder's memory is all idle, a power of two MiB when held, so
  // every answer is the driver's free memory plus a sum of some of them:
  // a whole number of MiB under the sum of all. Holders 0-3 are caches
  // (read from their words), 4-7 pools (asked when they hold something).
  constexpr int kHolders = 8;
  std::vector<std::unique_ptr<WordHolder>> holders;
  for (int i = 0; i < kHolders; ++i) holders.emplace_back(new WordHolder(i < 4));
  DeviceBudget budget(0);
  REQUIRE(budget.add(holders[0].get()));
  REQUIRE(budget.add(holders[4].get()));
  const uint64_t base = 100 * kMiB, all = ((1ull << kHolders) - 1) * kMiB;
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      for (int round = 0; !stop.load(std::memory_order_relaxed); ++round)
        for (int i = w; i < kHolders; i += 2)
          holders[i]->held.store(round % 2 ? (1ull << i) * kMiB : 0, std::memory_order_relaxed);
    });
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&] {
      for (int n = 0; n < 20000; ++n) {
        uint64_t free_bytes = base, total = 64 * kGiB;
        budget.mem_info(&free_bytes, &total);
        if (free_bytes < base || free_bytes > base + all || (free_bytes - base) % kMiB != 0 || total != 64 * kGiB)
          bad.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (int i = 1; i < 4; ++i) {
    REQUIRE(budget.add(holders[i].get()));
    REQUIRE(budget.add(holders[4 + i].get()));
    std::this_thread::yield();
  }
  for (size_t t = 2; t < threads.size(); ++t) threads[t].join();
  stop.store(true);
  threads[0].join();
  threads[1].join();
  CHECK(bad == 0);
  // At rest, the answer is exact.
  uint64_t expected = base;
  for (int i = 0; i < kHolders; ++i) expected += holders[i]->held.load();
  uint64_t free_bytes = base, total = 64 * kGiB;
  budget.mem_info(&free_bytes, &total);
  CHECK(free_bytes == expected);
}
