// tests/policy/own_vmm/bench_own_vmm.cpp: what the own-VMM cache
// (policy/own_vmm/cache.h) adds per call on the CPU, over a driver whose calls
// cost nothing: an expandable segment of P pages grown (create, map, one
// access call per page) and shrunk (unmap, release), R rounds, then every
// cached page trimmed. The first round misses (the driver creates), later
// rounds hit. Not a test; prints
// one line per round. The driver's own costs are measured on the GPU
// (docs/OWN-VMM.md).
//
// `ahead` mode: growth ahead on a worker thread, over a driver whose calls
// take the H200's time on the calling thread (busy: create 13 us, map 1 us,
// access 27 us; docs/DRIVER-FACTS.md), while the program grows a segment a
// page at a time with GAP us of its own work between pages. Prints the
// distribution of the program's growth calls (create, map, access through
// the cache): what the worker's use of the cache's lock costs the program.
//
// Usage: own_vmm_bench [PAGES] [ROUNDS]
//        own_vmm_bench ahead [PAGES] [GAP_US] [REPEATS]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "policy/clock.h"
#include "policy/own_vmm/cache.h"

using namespace pagefast::policy;
using namespace pagefast::policy::own_vmm;

namespace {

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

void busy_us(double us) {
  const auto t0 = std::chrono::steady_clock::now();
  while (us_since(t0) < us) {
  }
}

// The driver: its calls cost nothing, or (h200_costs) what they cost on the
// H200, on the calling thread; with the costs, a worker runs growth ahead.
class BenchDriver final : public Driver {
 public:
  explicit BenchDriver(bool h200_costs) : timed_(h200_costs) {}
  int create(uint64_t, const std::string&, uint64_t* h) override {
    if (timed_) busy_us(13);
    *h = next_.fetch_add(1);
    return kOk;
  }
  int release(uint64_t) override { return kOk; }
  int map(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) override {
    if (timed_) busy_us(1);
    return kOk;
  }
  int unmap(uint64_t, uint64_t) override { return kOk; }
  int set_access(uint64_t, uint64_t, const std::string&) override {
    if (timed_) busy_us(27);
    return kOk;
  }
  int address_free(uint64_t, uint64_t) override { return kOk; }
  bool wake_worker() override { return timed_; }
  uint64_t now_ns() override { return monotonic_now_ns(); }

 private:
  const bool timed_;
  std::atomic<uint64_t> next_{1};
};

int ahead(int pages, double gap_us, int repeats) {
  std::vector<double> all;
  uint64_t waits = 0, wait_ns = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    BenchDriver driver(true);
    Cache cache(driver, 12, 8, 32, true);
    const uint64_t base = uint64_t(1) << 40, page = uint64_t(20) << 20;
    const std::string prop(32, 'p'), desc(12, 'd');
    cache.note_reserved(base, uint64_t(pages + 64) * page);
    std::atomic<bool> stop{false};
    std::thread worker([&] {
      while (!stop.load()) {
        if (!cache.work_one()) cache.wait_for_work(1000 * 1000);
      }
    });
    for (int i = 0; i < pages; ++i) {
      busy_us(gap_us);
      const auto t0 = std::chrono::steady_clock::now();
      uint64_t h = 0;
      if (!cache.take(page, prop, &h)) {
        driver.create(page, prop, &h);
        cache.note_created(h, page, prop, 0);
      }
      cache.map(base + uint64_t(i) * page, page, 0, h, 0);
      cache.set_access(base + uint64_t(i) * page, page, desc);
      all.push_back(us_since(t0));
    }
    while (cache.pending_pages() != 0) std::this_thread::yield();
    stop.store(true);
    worker.join();
    waits += cache.stats().ahead_waits;
    wait_ns += cache.stats().ahead_wait_ns;
  }
  std::sort(all.begin(), all.end());
  auto at = [&](double q) { return all[std::min(all.size() - 1, size_t(q * double(all.size())))]; };
  double sum = 0;
  for (double v : all) sum += v;
  std::printf(
      "ahead: %d pages x %d, %.0f us between pages: growth call p50 %.2f us, p90 %.2f, p99 %.2f, max %.1f, "
      "mean %.2f; waits %.1f a run (%.0f us)\n",
      pages, repeats, gap_us, at(0.5), at(0.9), at(0.99), all.back(), sum / double(all.size()), double(waits) / repeats,
      double(wait_ns) / 1000.0 / repeats);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "ahead") {
    const int pages = argc > 2 ? std::atoi(argv[2]) : 200;
    const double gap = argc > 3 ? std::atof(argv[3]) : 57;
    const int repeats = argc > 4 ? std::atoi(argv[4]) : 20;
    if (pages <= 0 || gap < 0 || repeats <= 0) {
      std::fprintf(stderr, "usage: own_vmm_bench ahead [PAGES] [GAP_US] [REPEATS]\n");
      return 2;
    }
    return ahead(pages, gap, repeats);
  }
  const int pages = argc > 1 ? std::atoi(argv[1]) : 400;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 4;
  if (pages <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: own_vmm_bench [PAGES] [ROUNDS]\n");
    return 2;
  }
  BenchDriver driver(false);
  // Sizes of CUmemAccessDesc and CUmemLocation; a CUmemAllocationProp's bytes.
  Cache cache(driver, 12, 8);
  const uint64_t base = uint64_t(1) << 40, page = uint64_t(20) << 20;
  const std::string prop(32, 'p'), desc(12, 'd');
  cache.note_reserved(base, uint64_t(pages) * page);
  std::vector<uint64_t> handles(static_cast<size_t>(pages));
  for (int round = 0; round < rounds; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pages; ++i) {
      uint64_t h = 0;
      if (!cache.take(page, prop, &h)) {
        driver.create(page, prop, &h);
        cache.note_created(h, page, prop, 0);
      }
      handles[size_t(i)] = h;
      cache.map(base + uint64_t(i) * page, page, 0, h, 0);
      cache.set_access(base + uint64_t(i) * page, page, desc);
    }
    const double grow = us_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pages; ++i) {
      cache.unmap(base + uint64_t(i) * page, page);
      cache.release(handles[size_t(i)]);
    }
    const double shrink = us_since(t0);
    std::printf("round %d: grow %d pages %.1f us (%.2f us a page), shrink %.1f us (%.2f us a page)\n", round, pages,
                grow, grow / pages, shrink, shrink / pages);
  }
  // Out of memory, or pagefast_pool_trim: every cached page given back
  // (each unmapped from its deferred mapping, then released).
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t freed = cache.trim(0, UINT64_MAX);
  const double trim = us_since(t0);
  std::printf("trim: %llu pages given back in %.1f us (%.2f us a page)\n", (unsigned long long)(freed / page), trim,
              trim / pages);
  return 0;
}
