// tests/policy/bench_hot_path.cpp: the cost of the policy's hot path, on
// the CPU, with a fake provider whose calls cost nothing: what pagefast
// adds on top of the driver calls it cannot avoid (cuCtxGetCurrent per
// call, cuCtxSynchronize per quarantine batch). Not a test; prints a
// table. The GPU numbers are measured with the real driver (docs/POOL.md).
//
// Usage: policy_bench [--threads T] [--pairs N]
//   per size: alloc+free pair p50 / p99 in ns (one thread, batches of
//   kBatchPairs timed together), then T threads' aggregate pairs/s for
//   4 KiB and the speedup over one thread.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

constexpr int kBatchPairs = 64;

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void pairs(PoolUnderTest& t, ThreadCache& cache, uint64_t bytes, int count) {
  for (int i = 0; i < count; ++i) {
    uint64_t p = 0;
    if (t.alloc(cache, bytes, &p) != AllocStatus::Ok) std::abort();
    if (t.free(cache, p) != FreeStatus::Ok) std::abort();
  }
}

double throughput(PoolUnderTest& t, int threads, uint64_t bytes, int count) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&] {
      Attached cache(t.pool);
      pairs(t, *cache, bytes, 1000);  // warm
      ++ready;
      while (!go) std::this_thread::yield();
      pairs(t, *cache, bytes, count);
    });
  while (ready < threads) std::this_thread::yield();
  const uint64_t start = now_ns();
  go = true;
  for (auto& th : pool) th.join();
  return double(threads) * count / (double(now_ns() - start) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 16, total_pairs = 200000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    if (flag == "--pairs") total_pairs = std::atoi(argv[i + 1]);
  }
  PoolUnderTest t(64 * kGiB, FakeProvider::Backing::None, PoolConfig());
  Attached cache(t.pool);
  std::printf("%12s %10s %10s %8s\n", "bytes", "p50_ns", "p99_ns", "syncs");
  for (uint64_t bytes : {uint64_t(512), uint64_t(4096), uint64_t(64 * kKiB), uint64_t(512 * kKiB), 2 * kMiB, 8 * kMiB,
                         32 * kMiB, 64 * kMiB}) {
    pairs(t, *cache, bytes, 2000);  // warm: grow, fill caches
    const uint64_t syncs_before = t.pool.stats().synchronizations;
    std::vector<double> samples;
    for (int b = 0; b < total_pairs / kBatchPairs; ++b) {
      const uint64_t start = now_ns();
      pairs(t, *cache, bytes, kBatchPairs);
      samples.push_back(double(now_ns() - start) / kBatchPairs);
    }
    std::sort(samples.begin(), samples.end());
    std::printf("%12llu %10.1f %10.1f %8llu\n", (unsigned long long)bytes, samples[samples.size() / 2],
                samples[samples.size() * 99 / 100],
                (unsigned long long)(t.pool.stats().synchronizations - syncs_before));
  }
  const double one = throughput(t, 1, 4096, total_pairs);
  const double many = throughput(t, threads, 4096, total_pairs / 4);
  std::printf("4096-byte pairs/s: 1 thread %.3g, %d threads %.3g (x%.1f on %u cores)\n", one, threads, many, many / one,
              std::thread::hardware_concurrency());
  return 0;
}
