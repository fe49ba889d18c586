// tests/policy/bench_client_vmm.cpp: what the client VMM cache
// (policy/client_vmm.h) adds per call on the CPU, over a driver whose calls
// cost nothing: an expandable segment of P pages grown (create, map, one
// access call per page) and shrunk (unmap, release), R rounds. The first
// round misses (the driver creates), later rounds hit. Not a test; prints
// one line per round. The driver's own costs are measured on the GPU
// (docs/VMM-CLIENTS.md).
//
// Usage: client_vmm_bench [PAGES] [ROUNDS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "policy/client_vmm.h"

using namespace pagefast::policy;

namespace {

class NullDriver final : public ClientDriver {
 public:
  int create(uint64_t, const std::string&, uint64_t* h) override {
    *h = next_++;
    return kClientOk;
  }
  int release(uint64_t) override { return kClientOk; }
  int map(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) override { return kClientOk; }
  int unmap(uint64_t, uint64_t) override { return kClientOk; }
  int set_access(uint64_t, uint64_t, const std::string&) override { return kClientOk; }
  int address_free(uint64_t, uint64_t) override { return kClientOk; }
  uint64_t cache_room(int) override { return UINT64_MAX; }

 private:
  uint64_t next_ = 1;
};

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int pages = argc > 1 ? std::atoi(argv[1]) : 400;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 4;
  if (pages <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: client_vmm_bench [PAGES] [ROUNDS]\n");
    return 2;
  }
  NullDriver driver;
  // Sizes of CUmemAccessDesc and CUmemLocation; a CUmemAllocationProp's bytes.
  ClientVmmCache cache(driver, 12, 8);
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
  return 0;
}
