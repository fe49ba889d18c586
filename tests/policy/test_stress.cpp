// tests/policy/test_stress.cpp: the deterministic multi-threaded stress
// test of the policy core (after mimalloc's test-stress). Threads allocate
// random sizes from 1 B to 256 MiB, fill every block with a pattern of its
// own (blocks up to 64 KiB entirely, larger ones at both ends and in every
// granule), hand blocks to each other through a shared exchange, and check
// each pattern when the block is freed, wherever that happens. The fake
// provider is backed by host memory, so fills are real and stitched
// mappings alias for real; it also checks that no block is handed out
// while "device work" launched on it before its free may still run.
//
// Each thread's choices come from its own seeded generator (the sequence
// per thread is fixed; the interleaving is the scheduler's). Two phases of
// fresh threads, so caches detach and are reused mid-run.
//
// Usage: policy_stress_test [--ops N] [--threads T] [--seed S]
// Defaults (1M operations, 4 threads) run in well under a minute on two
// cores.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

constexpr uint64_t kDeviceBytes = 3 * kGiB;
constexpr int kExchangeSlots = 64;
constexpr int kMaxLivePerThread = 200;
constexpr uint64_t kMaxRequestBytes = 256 * kMiB;

struct Item {
  uint64_t addr;
  uint64_t bytes;
  uint64_t seed;
};

std::atomic<Item*> g_exchange[kExchangeSlots];
std::atomic<uint64_t> g_bad_patterns{0}, g_bad_frees{0}, g_refused{0}, g_ops_done{0};

// Mostly small, sometimes large, rarely huge: log-uniform within a band.
uint64_t pick_bytes(std::mt19937_64& rng) {
  const uint64_t r = rng() % 1000;
  uint64_t lo, hi;
  if (r < 850) lo = 1, hi = 64 * kKiB;
  else if (r < 985) lo = 64 * kKiB, hi = 16 * kMiB;
  else lo = 16 * kMiB, hi = kMaxRequestBytes;
  const double x =
      std::log2(double(lo)) + (std::log2(double(hi)) - std::log2(double(lo))) * double(rng() % 100000) / 1e5;
  uint64_t bytes = uint64_t(std::exp2(x));
  return bytes < 1 ? 1 : bytes;
}

void release_item(PoolUnderTest& t, ThreadCache& cache, Item* item) {
  if (!check(item->addr, item->bytes, item->seed)) ++g_bad_patterns;
  if (t.free(cache, item->addr) != FreeStatus::Ok) ++g_bad_frees;
  delete item;
}

void worker(PoolUnderTest& t, int index, uint64_t seed, uint64_t ops, uint64_t large_budget) {
  Attached cache(t.pool);
  std::mt19937_64 rng(seed * 1000003 + uint64_t(index));
  std::vector<Item*> live;
  uint64_t large_live = 0;
  for (uint64_t op = 0; op < ops; ++op) {
    const uint64_t action = rng() % 100;
    if (action < 50 && live.size() < kMaxLivePerThread) {
      const uint64_t bytes = pick_bytes(rng);
      if (bytes >= kSmallLimitBytes && large_live + bytes > large_budget) continue;
      uint64_t p = 0;
      if (t.alloc(*cache, bytes, &p) != AllocStatus::Ok) {
        ++g_refused;
        continue;
      }
      t.provider.assert_idle(p, bytes);
      Item* item = new Item{p, bytes, rng()};
      fill(p, bytes, item->seed);
      t.provider.launch(p, bytes);
      if (bytes >= kSmallLimitBytes) large_live += bytes;
      live.push_back(item);
    } else if (action < 90 && !live.empty()) {
      const size_t k = rng() % live.size();
      Item* item = live[k];
      live[k] = live.back();
      live.pop_back();
      if (item->bytes >= kSmallLimitBytes) large_live -= item->bytes;
      release_item(t, *cache, item);
    } else if (!live.empty()) {
      // Hand a block to whichever thread takes this slot next.
      const size_t k = rng() % live.size();
      Item* mine = live[k];
      if (mine->bytes >= kSmallLimitBytes) continue;  // keep large budgets per thread
      live[k] = live.back();
      live.pop_back();
      Item* theirs = g_exchange[rng() % kExchangeSlots].exchange(mine);
      if (theirs) live.push_back(theirs);
    }
  }
  for (Item* item : live) release_item(t, *cache, item);
  g_ops_done.fetch_add(ops);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t ops = 1000000, seed = 42;
  int threads = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ops") ops = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const auto start = std::chrono::steady_clock::now();
  // A release threshold, so that trimming runs concurrently too.
  PoolUnderTest t(kDeviceBytes, FakeProvider::Backing::Host, config_with(64 * kMiB, 0, 512 * kMiB));
  const uint64_t large_budget = kDeviceBytes / 2 / uint64_t(threads);
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back(worker, std::ref(t), phase * threads + i, seed, ops / 2 / uint64_t(threads), large_budget);
    for (std::thread& th : pool) th.join();
    t.clock.advance_ns(kTrimGraceAfterGrowthNs + 1);
  }
  {
    Attached cache(t.pool);
    for (auto& slot : g_exchange)
      if (Item* item = slot.exchange(nullptr)) release_item(t, *cache, item);
  }
  const PoolStats stats = t.pool.stats();
  const std::string problem = t.pool.check();
  t.pool.trim();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ops %llu threads %d seconds %.2f\n", (unsigned long long)g_ops_done.load(), threads, seconds);
  std::printf("stats %s\n", stats_json_object(stats).c_str());
  std::printf("refused %llu bad_patterns %llu bad_frees %llu violations %llu in_use %llu after_trim_used %llu\n",
              (unsigned long long)g_refused.load(), (unsigned long long)g_bad_patterns.load(),
              (unsigned long long)g_bad_frees.load(), (unsigned long long)t.provider.violations(),
              (unsigned long long)stats.in_use_bytes, (unsigned long long)t.provider.used_bytes());
  bool ok = g_bad_patterns == 0 && g_bad_frees == 0 && t.provider.violations() == 0 && problem.empty() &&
            stats.in_use_bytes == 0 && t.provider.used_bytes() == 0 && g_ops_done >= ops - uint64_t(2 * threads);
  if (!problem.empty()) std::printf("check: %s\n", problem.c_str());
  if (t.provider.violations()) std::printf("violations:\n%s", t.provider.violation_log().c_str());
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
