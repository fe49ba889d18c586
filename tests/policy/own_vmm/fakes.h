// tests/policy/own_vmm/fakes.h: the fakes the own-VMM cache's tests
// (tests/policy/own_vmm/) run on: a fake driver that refuses what the
// real one refuses (unknown or released handles, overlapping maps, unmaps
// and access calls that are not whole mappings, freeing an address range
// with mappings in it), the program's calls as the glue
// (interpose/pool/own_vmm.cpp) makes them, and for growth ahead on a
// worker a locked driver with a gate, a worker thread and the cases'
// set-up.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "policy/clock.h"
#include "policy/own_vmm/cache.h"

namespace own_vmm_test {

using pagefast::policy::Holder;
using pagefast::policy::monotonic_now_ns;
using pagefast::policy::own_vmm::BudgetView;
using pagefast::policy::own_vmm::Cache;
using pagefast::policy::own_vmm::CacheStats;
using pagefast::policy::own_vmm::Driver;
using pagefast::policy::own_vmm::kInvalidValue;
using pagefast::policy::own_vmm::kOk;

constexpr int kFailed = 2;  // what an injected failure answers

struct FakeHandle {
  uint64_t bytes = 0;
  int refs = 0;
};
struct FakeMap {
  uint64_t bytes = 0, offset = 0, handle = 0;
  std::map<std::string, std::string> access;  // location -> flags
};

// A device's budget as the cache sees it (device_share.h): the room the
// test sets, joined for a device (Cache::join).
class FakeRoom final : public BudgetView {
 public:
  explicit FakeRoom(uint64_t bytes) : bytes_(bytes) {}
  uint64_t room(const Holder&) override { return bytes_; }

 private:
  uint64_t bytes_;
};

class FakeDriver final : public Driver {
 public:
  std::map<uint64_t, FakeHandle> handles;
  std::map<uint64_t, FakeMap> maps;
  uint64_t next_handle = 0x100;
  std::map<std::string, int> calls;
  std::string fail_op;  // the next call of this op fails (once)

  int fail_skip = 0;  // ... after this many more calls of it succeeded

  bool fails(const char* op) {
    ++calls[op];
    if (fail_op != op) return false;
    if (fail_skip > 0) {
      --fail_skip;
      return false;
    }
    fail_op.clear();
    return true;
  }
  bool live(uint64_t h) const {
    auto it = handles.find(h);
    return it != handles.end() && it->second.refs > 0;
  }
  bool overlaps(uint64_t addr, uint64_t bytes) const {
    for (auto& [a, m] : maps)
      if (a < addr + bytes && addr < a + m.bytes) return true;
    return false;
  }
  // The mappings that make up [addr, addr + bytes) exactly, or none.
  std::vector<uint64_t> cover(uint64_t addr, uint64_t bytes) const {
    std::vector<uint64_t> out;
    uint64_t at = addr;
    while (at < addr + bytes) {
      auto it = maps.find(at);
      if (it == maps.end()) return {};
      out.push_back(at);
      at += it->second.bytes;
    }
    return at == addr + bytes ? out : std::vector<uint64_t>{};
  }
  void gc(uint64_t h) {
    auto it = handles.find(h);
    if (it == handles.end() || it->second.refs > 0) return;
    for (auto& [a, m] : maps)
      if (m.handle == h) return;
    handles.erase(it);  // freed: no reference, no mapping
  }

  int create(uint64_t bytes, const std::string&, uint64_t* h) override {
    if (fails("create")) return kFailed;
    *h = next_handle++;
    handles[*h] = FakeHandle{bytes, 1};
    return kOk;
  }
  int retain(uint64_t addr, uint64_t* h) {
    if (fails("retain")) return kFailed;
    for (auto& [a, m] : maps)
      if (addr >= a && addr < a + m.bytes) {
        ++handles[m.handle].refs;
        *h = m.handle;
        return kOk;
      }
    return kInvalidValue;
  }
  int release(uint64_t h) override {
    if (fails("release")) return kFailed;
    if (!live(h)) return kInvalidValue;
    --handles[h].refs;
    gc(h);
    return kOk;
  }
  int map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t h, uint64_t flags) override {
    if (fails("map")) return kFailed;
    if (!live(h) || flags || !bytes || offset + bytes > handles[h].bytes || overlaps(addr, bytes)) return kInvalidValue;
    maps[addr] = FakeMap{bytes, offset, h, {}};
    return kOk;
  }
  int unmap(uint64_t addr, uint64_t bytes) override {
    if (fails("unmap")) return kFailed;
    const std::vector<uint64_t> c = cover(addr, bytes);
    if (c.empty()) return kInvalidValue;
    for (uint64_t a : c) {
      const uint64_t h = maps[a].handle;
      maps.erase(a);
      gc(h);
    }
    return kOk;
  }
  int set_access(uint64_t addr, uint64_t bytes, const std::string& descs) override {
    if (fails("set_access")) return kFailed;
    const std::vector<uint64_t> c = cover(addr, bytes);
    if (c.empty() || descs.empty() || descs.size() % 2) return kInvalidValue;
    for (uint64_t a : c)
      for (size_t at = 0; at + 2 <= descs.size(); at += 2)
        maps[a].access[descs.substr(at, 1)] = descs.substr(at + 1, 1);
    return kOk;
  }
  int address_free(uint64_t addr, uint64_t bytes) override {
    if (fails("address_free")) return kFailed;
    return overlaps(addr, bytes) ? kInvalidValue : kOk;
  }
  int total_calls() const {
    int n = 0;
    for (auto& [op, c] : calls) n += c;
    return n;
  }
};

// The program's calls, through the cache (cache != NULL) or straight to the
// fake: what the glue (interpose/pool/own_vmm.cpp) does.
struct Program {
  FakeDriver& fake;
  Cache* cache;
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) {
    if (cache && cache->take(bytes, prop, h)) return kOk;
    const int r = fake.create(bytes, prop, h);
    if (r == kOk && cache) cache->note_created(*h, bytes, prop, 0);
    return r;
  }
  int release(uint64_t h) { return cache ? cache->release(h) : fake.release(h); }
  int map(uint64_t a, uint64_t b, uint64_t o, uint64_t h) {
    return cache ? cache->map(a, b, o, h, 0) : fake.map(a, b, o, h, 0);
  }
  int unmap(uint64_t a, uint64_t b) { return cache ? cache->unmap(a, b) : fake.unmap(a, b); }
  int access(uint64_t a, uint64_t b, const std::string& d) {
    return cache ? cache->set_access(a, b, d) : fake.set_access(a, b, d);
  }
  int address_free(uint64_t a, uint64_t b) { return cache ? cache->address_free(a, b) : fake.address_free(a, b); }
  int retain(uint64_t a, uint64_t* h) {
    if (cache && cache->retain(a, h)) return kOk;
    return fake.retain(a, h);
  }
};

constexpr uint64_t kSeg = 20 << 20;
constexpr uint64_t kBase = uint64_t(1) << 40;
const std::string kProp = "pinned-device-0";
const std::string kRW = "rw";

// An expandable segment: grow by `pages`, shrink all, repeat.
inline void segment_round(Program& p, int pages) {
  std::vector<uint64_t> hs(pages);
  for (int i = 0; i < pages; ++i) REQUIRE(p.create(kSeg, kProp, &hs[i]) == kOk);
  for (int i = 0; i < pages; ++i) REQUIRE(p.map(kBase + i * kSeg, kSeg, 0, hs[i]) == kOk);
  REQUIRE(p.access(kBase, pages * kSeg, kRW) == kOk);
  for (int i = 0; i < pages; ++i) {
    REQUIRE(p.unmap(kBase + i * kSeg, kSeg) == kOk);
    REQUIRE(p.release(hs[i]) == kOk);
  }
}

// PyTorch's seed loop: a segment grows by one page per access call.
inline int grow_page_by_page(Program& p, int pages, std::vector<uint64_t>* hs) {
  hs->assign(size_t(pages), 0);
  for (int i = 0; i < pages; ++i) {
    if (p.create(kSeg, kProp, &(*hs)[size_t(i)]) != kOk) return i;
    if (p.map(kBase + uint64_t(i) * kSeg, kSeg, 0, (*hs)[size_t(i)]) != kOk) return i;
    if (p.access(kBase + uint64_t(i) * kSeg, kSeg, kRW) != kOk) return i;
  }
  return pages;
}

// Shrinks what grow_page_by_page grew: each page unmapped, its handle released.
inline void shrink_page_by_page(Program& p, const std::vector<uint64_t>& hs) {
  for (size_t i = 0; i < hs.size(); ++i) {
    REQUIRE(p.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kOk);
    REQUIRE(p.release(hs[i]) == kOk);
  }
}

// The fake driver for growth ahead on a worker: every call under one lock
// (the worker and the program call at once), counted per thread, and a
// gate that can hold the worker inside its next create.
class WorkerDriver final : public Driver {
 public:
  explicit WorkerDriver(FakeDriver& f) : fake(f) {}
  FakeDriver& fake;
  std::mutex mutex;
  std::thread::id program = std::this_thread::get_id();
  std::map<std::string, int> program_calls;
  bool worker = true;  // wake_worker's answer
  int woken = 0;
  // Gate: while closed, the worker's create waits (and says it arrived).
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool gate_closed = false, at_gate = false;

  void count(const char* op) {
    if (std::this_thread::get_id() == program) ++program_calls[op];
  }
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) override {
    if (std::this_thread::get_id() != program) {
      std::unique_lock<std::mutex> g(gate_mutex);
      at_gate = true;
      gate_cv.notify_all();
      gate_cv.wait(g, [&] { return !gate_closed; });
    }
    std::lock_guard<std::mutex> l(mutex);
    count("create");
    return fake.create(bytes, prop, h);
  }
  int release(uint64_t h) override {
    std::lock_guard<std::mutex> l(mutex);
    count("release");
    return fake.release(h);
  }
  int map(uint64_t a, uint64_t b, uint64_t o, uint64_t h, uint64_t f) override {
    std::lock_guard<std::mutex> l(mutex);
    count("map");
    return fake.map(a, b, o, h, f);
  }
  int unmap(uint64_t a, uint64_t b) override {
    std::lock_guard<std::mutex> l(mutex);
    count("unmap");
    return fake.unmap(a, b);
  }
  int set_access(uint64_t a, uint64_t b, const std::string& d) override {
    std::lock_guard<std::mutex> l(mutex);
    count("set_access");
    return fake.set_access(a, b, d);
  }
  int address_free(uint64_t a, uint64_t b) override {
    std::lock_guard<std::mutex> l(mutex);
    count("address_free");
    return fake.address_free(a, b);
  }
  bool wake_worker() override {
    ++woken;
    return worker;
  }
  uint64_t now_ns() override { return monotonic_now_ns(); }
  void close_gate() {
    std::lock_guard<std::mutex> g(gate_mutex);
    gate_closed = true;
    at_gate = false;
  }
  void wait_at_gate() {
    std::unique_lock<std::mutex> g(gate_mutex);
    gate_cv.wait(g, [&] { return at_gate; });
  }
  void open_gate() {
    std::lock_guard<std::mutex> g(gate_mutex);
    gate_closed = false;
    gate_cv.notify_all();
  }
};

// The program's calls through the cache, misses to the locked driver.
struct WorkerProgram {
  WorkerDriver& driver;
  Cache& cache;
  int create(uint64_t bytes, const std::string& prop, uint64_t* h) {
    if (cache.take(bytes, prop, h)) return kOk;
    const int r = driver.create(bytes, prop, h);
    if (r == kOk) cache.note_created(*h, bytes, prop, 0);
    return r;
  }
  int grow(uint64_t at, uint64_t* h) {
    int r = create(kSeg, kProp, h);
    if (r == kOk) r = cache.map(at, kSeg, 0, *h, 0);
    if (r == kOk) r = cache.set_access(at, kSeg, kRW);
    return r;
  }
};

// The set-up of the growth-ahead cases: a program growing 20 MiB pages in
// a reservation of `Pages` of them, up to 32 pages ahead on a worker the
// case runs itself (or none: driver.worker = false).
template <uint64_t Pages = 100>
struct WorkerCase {
  WorkerCase() { cache.note_reserved(kBase, Pages * kSeg); }
  FakeDriver fake;
  WorkerDriver driver{fake};
  Cache cache{driver, 2, 1, 32, true};
  WorkerProgram p{driver, cache};
};

// Waits until the cache has counted `count` waits for pages made ahead
// (a program's call is then waiting for the worker): a case opens its
// gate after that, not after a sleep. False if it never does (a minute:
// a hang guard, not a measure).
inline bool wait_for_ahead_waits(Cache& cache, uint64_t count) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (cache.stats().ahead_waits < count) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// The worker thread of the glue: work_one until stopped.
struct Worker {
  explicit Worker(Cache& c)
      : cache(c), thread([this] {
          while (!stop.load())
            if (!cache.work_one()) cache.wait_for_work(1000 * 1000);
        }) {}
  ~Worker() {
    stop.store(true);
    thread.join();
  }
  Cache& cache;
  std::atomic<bool> stop{false};
  std::thread thread;
};

// The program's side of the threads cases: `rounds` times a segment of
// `pages` pages grown through the cache (its worker growing ahead),
// `grown()` called, then each page unmapped and released; then `done`
// set, the other `threads` joined and the worker's queue drained.
template <typename Grown>
void grow_and_shrink(Cache& cache, WorkerProgram& p, int rounds, int pages, std::atomic<bool>& done,
                     std::vector<std::thread>& threads, Grown grown) {
  Worker worker(cache);
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint64_t> hs(static_cast<size_t>(pages));
    for (int i = 0; i < pages; ++i) REQUIRE(p.grow(kBase + uint64_t(i) * kSeg, &hs[size_t(i)]) == kOk);
    grown();
    for (int i = 0; i < pages; ++i) {
      REQUIRE(cache.unmap(kBase + uint64_t(i) * kSeg, kSeg) == kOk);
      REQUIRE(cache.release(hs[size_t(i)]) == kOk);
    }
  }
  done.store(true);
  for (auto& t : threads) t.join();
  while (cache.pending_pages() != 0) std::this_thread::yield();
}

}  // namespace own_vmm_test
