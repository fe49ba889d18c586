// tests/policy/own_vmm/test_handle_sleep.cpp: the device's one sleep over
// the fake provider (policy/own_vmm/handle_sleep.h beside
// DevicePool::sleep): the pool's chunks and the program's own VMM handles
// leave the device through the same provider (its sync, its copies, its
// host memory) and come back with their contents; a copy that fails
// halfway leaves that handle resident and whole; a wake the driver refuses,
// or whose copy back fails, leaves every handle asleep with its host copy
// whole, and a later wake brings it all back; a sync the provider refuses
// sleeps nothing. Also a stress of the engine's sleeps and wakes against
// the program's calls on the ledger (also under tsan).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "policy/fake_provider.h"
#include "policy/own_vmm/handle_sleep.h"
#include "policy/own_vmm/ledger.h"
#include "tests/policy/harness.h"

using namespace pagefast::policy;
using namespace pagefast::policy::own_vmm;
using namespace pagefast::policy::test;
using pagefast::kGiB;
using pagefast::kMiB;
using Op = FakeProvider::Op;

namespace {

constexpr uint64_t kG = kGranuleBytes;

// The driver of the program's VMM calls, over the fake provider's memory:
// a handle is a chunk, a mapping the provider's map opened ("rw") or not
// ("r": no device writes it, opened all the same for the fake).
class ProviderDriver final : public SleepDriver {
 public:
  explicit ProviderDriver(FakeProvider& provider) : p_(provider) {}
  bool properties(uint64_t handle, std::string* prop) override {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!refs_.count(handle)) return false;
    *prop = "prop";
    return true;
  }
  bool retain_at(uint64_t addr, uint64_t* handle) override {
    std::lock_guard<std::mutex> guard(mutex_);
    auto m = maps_.find(addr);
    if (m == maps_.end()) return false;
    *handle = m->second;
    ++refs_[m->second];
    return true;
  }
  std::string access_of(uint64_t addr) override {
    std::lock_guard<std::mutex> guard(mutex_);
    return access_.count(addr) ? access_[addr] : std::string();
  }
  bool create(uint64_t bytes, const std::string& prop, uint64_t* handle) override {
    if (refuse_create.load() || prop != "prop") return false;
    ChunkHandle c;
    if (p_.create_chunk(Granules(bytes / kG), &c) != ProviderStatus::Ok) return false;
    std::lock_guard<std::mutex> guard(mutex_);
    refs_[c.value] = 1;
    *handle = c.value;
    return true;
  }
  bool release(uint64_t handle) override {
    std::lock_guard<std::mutex> guard(mutex_);
    auto r = refs_.find(handle);
    if (r == refs_.end()) return false;
    if (--r->second == 0) {
      refs_.erase(r);
      p_.release_chunk(ChunkHandle{handle});
    }
    return true;
  }
  bool map(uint64_t addr, uint64_t bytes, uint64_t offset, uint64_t handle) override {
    if (p_.map(addr, ChunkHandle{handle}, Granules(offset / kG), Granules(bytes / kG)) != ProviderStatus::Ok)
      return false;
    std::lock_guard<std::mutex> guard(mutex_);
    maps_[addr] = handle;
    return true;
  }
  bool unmap(uint64_t addr, uint64_t bytes) override {
    if (refuse_unmap.load() || !p_.unmap(addr, Granules(bytes / kG))) return false;
    std::lock_guard<std::mutex> guard(mutex_);
    maps_.erase(addr);
    access_.erase(addr);
    return true;
  }
  bool set_access(uint64_t addr, uint64_t bytes, const std::string& access) override {
    if (access.empty()) return true;
    if (p_.set_access(addr, Granules(bytes / kG), AccessSet{}) != ProviderStatus::Ok) return false;
    std::lock_guard<std::mutex> guard(mutex_);
    access_[addr] = access;
    return true;
  }
  bool writable(const std::string& access) override { return access == "rw"; }
  std::string write_access(int) override { return "rw"; }
  std::string after_copy(const std::string& access, int) override { return access; }
  bool disown(uint64_t handle) override { return cached.count(handle) != 0; }
  void resident(int, uint64_t, const char* why) override { reasons.push_back(why); }
  void wake_refused(int, const char* why) override { refusals.push_back(why); }

  // The program's cuMemCreate + cuMemMap + cuMemSetAccess, noted in the ledger.
  uint64_t make(Ledger& ledger, uint64_t addr, uint64_t bytes, int slot, const char* access = "rw") {
    uint64_t h = 0;
    REQUIRE(create(bytes, "prop", &h));
    REQUIRE(map(addr, bytes, 0, h));
    REQUIRE(set_access(addr, bytes, access));
    ledger.created(h, bytes, 0, slot);
    ledger.mapped(addr, bytes, h, 0);
    return h;
  }
  int refs(uint64_t handle) {
    std::lock_guard<std::mutex> guard(mutex_);
    return refs_.count(handle) ? refs_[handle] : 0;
  }

  std::atomic<bool> refuse_create{false}, refuse_unmap{false};
  std::set<uint64_t> cached;
  std::vector<std::string> reasons, refusals;

 private:
  FakeProvider& p_;
  std::mutex mutex_;
  std::map<uint64_t, int> refs_;
  std::map<uint64_t, uint64_t> maps_;
  std::map<uint64_t, std::string> access_;
};

// The program's address space for its own handles, from the provider.
uint64_t reserve(FakeProvider& p, uint64_t bytes) {
  uint64_t base = 0;
  REQUIRE(p.reserve_address(bytes, &base) == ProviderStatus::Ok);
  return base;
}

}  // namespace

TEST_CASE("device sleep: the pool's chunks and the program's handles leave through one provider and come back whole",
          "[handle sleep]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  uint64_t block = 0;
  REQUIRE(t.alloc(*cache, 3 * kMiB, &block) == AllocStatus::Ok);
  fill(block, 3 * kMiB, 7);
  Ledger ledger;
  ProviderDriver driver(t.provider);
  const uint64_t base = reserve(t.provider, 8 * kG);
  const uint64_t a = driver.make(ledger, base, 2 * kG, 1);
  const uint64_t b = driver.make(ledger, base + 4 * kG, 2 * kG, 1, "r");  // no device writes it
  fill(base, 2 * kG, 11);
  fill(base + 4 * kG, 2 * kG, 12);
  driver.cached.insert(b);  // the own-VMM cache held it: the driver's one reference goes
  HandleSleep engine(ledger, driver, t.provider);

  const uint64_t syncs = t.provider.calls(Op::Sync);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  const HandleSleepAnswer answer = engine.sleep(0, 1, kSleepKeep);
  CHECK(answer.status == 0);
  CHECK(answer.slept_bytes == 4 * kG);
  CHECK(answer.kept_bytes == 4 * kG);
  CHECK(t.provider.calls(Op::Sync) >= syncs + 2);  // the pool's and the handles': the same rule
  CHECK(t.provider.used_bytes() == 0);             // every byte of both left the device
  CHECK(t.provider.live_maps() == 0);
  CHECK(ledger.asleep_count() == 2);
  CHECK(ledger.program_handles(1).empty());
  CHECK(driver.refs(a) == 0);
  CHECK(driver.refs(b) == 0);
  CHECK(engine.sleep(0, 1, kSleepKeep).slept_bytes == 0);  // nothing left of the slot: nothing called

  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  REQUIRE(engine.wake(0, 1));
  CHECK(check(block, 3 * kMiB, 7));
  CHECK(check(base, 2 * kG, 11));
  CHECK(check(base + 4 * kG, 2 * kG, 12));
  CHECK(ledger.asleep_count() == 0);
  CHECK(ledger.program_handles(1).size() == 2);
  CHECK(driver.access_of(base + 4 * kG) == "r");  // set as recorded after its copy back
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.provider.violations() == 0);
  CHECK(driver.reasons.empty());
}

TEST_CASE("handle sleep: a copy that fails halfway leaves that handle resident and whole, the others sleep",
          "[handle sleep]") {
  FakeProvider provider(1 * kGiB, FakeProvider::Backing::Host);
  Ledger ledger;
  ProviderDriver driver(provider);
  const uint64_t base = reserve(provider, 8 * kG);
  const uint64_t a = driver.make(ledger, base, 2 * kG, 2);
  const uint64_t b = driver.make(ledger, base + 4 * kG, 2 * kG, 2);
  fill(base, 2 * kG, 21);
  fill(base + 4 * kG, 2 * kG, 22);
  HandleSleep engine(ledger, driver, provider);
  provider.set_copy_piece(kG);
  provider.fail(Op::Copy, 3, ProviderStatus::Failed);  // the second handle's second piece
  const HandleSleepAnswer answer = engine.sleep(0, 2, kSleepKeep);
  provider.clear_faults();
  CHECK(answer.status == 1);
  CHECK(answer.slept_bytes == 2 * kG);
  CHECK(answer.resident_bytes == 2 * kG);
  REQUIRE(driver.reasons.size() == 1);
  CHECK(driver.reasons[0] == std::string("its contents could not be copied to host memory"));
  // One handle stays mapped, untouched, with its reference; the other slept.
  REQUIRE(driver.refs(a) + driver.refs(b) == 1);
  const bool a_stayed = driver.refs(a) == 1;
  CHECK(check(a_stayed ? base : base + 4 * kG, 2 * kG, a_stayed ? 21 : 22));
  CHECK(ledger.asleep_count() == 1);
  CHECK(provider.live_host_buffers() == 1);  // the slept handle's copy only: nothing of the failed one kept
  REQUIRE(engine.wake(0, 2));
  CHECK(check(base, 2 * kG, 21));
  CHECK(check(base + 4 * kG, 2 * kG, 22));
  CHECK(provider.live_host_buffers() == 0);
  CHECK(provider.violations() == 0);
}

TEST_CASE("handle sleep: a wake the driver refuses, or whose copy back fails, leaves every handle asleep and whole",
          "[handle sleep]") {
  FakeProvider provider(1 * kGiB, FakeProvider::Backing::Host);
  Ledger ledger;
  ProviderDriver driver(provider);
  const uint64_t base = reserve(provider, 8 * kG);
  driver.make(ledger, base, 2 * kG, 3);
  driver.make(ledger, base + 4 * kG, 2 * kG, 3);
  fill(base, 2 * kG, 31);
  fill(base + 4 * kG, 2 * kG, 32);
  HandleSleep engine(ledger, driver, provider);
  REQUIRE(engine.sleep(0, 3, kSleepKeep).slept_bytes == 4 * kG);

  // The driver makes the first handle, then refuses the second.
  provider.fail(Op::Create, 1, ProviderStatus::OutOfMemory);
  CHECK_FALSE(engine.wake(0, 3));
  provider.clear_faults();
  CHECK(driver.refusals.size() == 1);
  CHECK(provider.used_bytes() == 0);  // nothing stays made
  CHECK(provider.live_maps() == 0);
  CHECK(ledger.asleep_count() == 2);

  // The copy back of the second handle fails halfway: all or none.
  provider.set_copy_piece(kG);
  provider.fail(Op::Copy, 3, ProviderStatus::Failed);
  CHECK_FALSE(engine.wake(0, 3));
  provider.clear_faults();
  CHECK(driver.refusals.size() == 2);
  CHECK(provider.used_bytes() == 0);
  CHECK(ledger.asleep_count() == 2);
  CHECK(provider.live_host_buffers() == 2);  // each host copy held whole

  REQUIRE(engine.wake(0, 3));
  CHECK(check(base, 2 * kG, 31));
  CHECK(check(base + 4 * kG, 2 * kG, 32));
  CHECK(provider.live_host_buffers() == 0);
  CHECK(provider.violations() == 0);
}

TEST_CASE("handle sleep: a sync the provider refuses (a capture) or fails leaves every handle resident",
          "[handle sleep]") {
  FakeProvider provider(1 * kGiB, FakeProvider::Backing::Host);
  Ledger ledger;
  ProviderDriver driver(provider);
  const uint64_t base = reserve(provider, 4 * kG);
  driver.make(ledger, base, 2 * kG, 4);
  HandleSleep engine(ledger, driver, provider);
  for (int failing = 0; failing < 2; ++failing) {
    if (failing) provider.set_sync_fails(true);
    else provider.set_sync_allowed(false);
    const HandleSleepAnswer answer = engine.sleep(0, 4, 0);
    CHECK(answer.status == 1);
    CHECK(answer.slept_bytes == 0);
    CHECK(answer.resident_bytes == 2 * kG);
    CHECK(provider.used_bytes() == 2 * kG);
    CHECK(ledger.asleep_count() == 0);
    provider.set_sync_allowed(true);
    provider.set_sync_fails(false);
  }
  // A handle of another device is not this sleep's.
  CHECK(engine.sleep(1, 4, 0).slept_bytes == 0);
  CHECK(engine.sleep(0, 4, 0).slept_bytes == 2 * kG);  // discard: nothing copied
  CHECK(provider.live_host_buffers() == 0);
  REQUIRE(engine.wake(0, 4));
  CHECK(provider.used_bytes() == 2 * kG);
}

TEST_CASE("handle sleep: sleeps and wakes of one slot while other threads make, map and release handles of another",
          "[handle sleep][threads]") {
  FakeProvider provider(4 * kGiB, FakeProvider::Backing::None);
  Ledger ledger;
  ProviderDriver driver(provider);
  std::mutex sleep_mutex;  // the glue's: sleep, wake
  const uint64_t base = reserve(provider, 64 * kG);
  for (int i = 0; i < 4; ++i) driver.make(ledger, base + uint64_t(i) * 2 * kG, kG, 5);
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};
  std::vector<std::thread> program;
  for (int w = 0; w < 3; ++w)
    program.emplace_back([&, w] {
      const uint64_t at = base + 16 * kG + uint64_t(w) * 8 * kG;
      while (!stop.load()) {
        uint64_t h = 0;
        if (!driver.create(kG, "prop", &h)) continue;
        ledger.created(h, kG, 0, 6);
        if (driver.map(at, kG, 0, h)) {
          ledger.mapped(at, kG, h, 0);
          ledger.unmapped(at, kG);
          driver.unmap(at, kG);
        }
        ledger.released(h);
        driver.release(h);
        made.fetch_add(1);
      }
    });
  int cycles = 0;
  while (cycles < 200 || made.load() < 200) {
    std::lock_guard<std::mutex> guard(sleep_mutex);
    HandleSleep engine(ledger, driver, provider);
    REQUIRE(engine.sleep(0, 5, 0).slept_bytes == 4 * kG);
    REQUIRE(ledger.asleep_count() == 4);
    REQUIRE(engine.wake(0, 5));
    REQUIRE(ledger.program_handles(5).size() == 4);
    // Woken under new values: the program's stay (aliases), as the glue's.
    ++cycles;
  }
  stop.store(true);
  for (std::thread& t : program) t.join();
  CHECK(ledger.program_handles(6).empty());
  CHECK(provider.used_bytes() == 4 * kG);
  CHECK(provider.violations() == 0);
}

// The program's calls on the very handles that sleep and wake (the glue's
// translated map, unmap, retain, release and export), each under the
// glue's sleep mutex as the hooks make them: a call finds its handle awake
// (the driver holds it, mapped where the program mapped it, its value the
// program's) or asleep (its record and properties there, its mapping's
// place kept), never half-way (unmapped, or released, or made and not yet
// mapped back). Counted on the threads, checked after.
TEST_CASE("handle sleep: the program's calls on handles that sleep and wake see each awake or asleep, never half-way",
          "[handle sleep][threads]") {
  FakeProvider provider(4 * kGiB, FakeProvider::Backing::None);
  Ledger ledger;
  ProviderDriver driver(provider);
  std::mutex sleep_mutex;  // the glue's: sleep, wake, each translated call
  const uint64_t base = reserve(provider, 64 * kG);
  constexpr int kHandles = 4;
  uint64_t program[kHandles], addr[kHandles];
  for (int i = 0; i < kHandles; ++i) {
    addr[i] = base + uint64_t(i) * 2 * kG;
    program[i] = driver.make(ledger, addr[i], kG, 5);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> awake_seen{0}, asleep_seen{0}, half_way{0};
  const auto call = [&](int i, uint64_t scratch) {
    std::lock_guard<std::mutex> guard(sleep_mutex);
    uint64_t d = 0;
    if (!ledger.to_driver(program[i], &d)) {
      std::string prop;
      const bool whole = ledger.asleep(program[i]) && ledger.asleep_properties(program[i], &prop) && prop == "prop" &&
                         ledger.overlaps_asleep(addr[i], kG);
      if (!whole) half_way.fetch_add(1);
      asleep_seen.fetch_add(1);
      return;
    }
    const HandleFacts facts = ledger.facts(d);
    uint64_t at = 0;
    std::string prop;
    bool whole = driver.refs(d) >= 1 && facts.known && facts.maps == 1 && facts.refs == 1 &&
                 ledger.to_program(d) == program[i] && !ledger.overlaps_asleep(addr[i], kG);
    whole = whole && driver.retain_at(addr[i], &at) && at == d;  // retain
    if (at == d) ledger.retained(d);
    whole = whole && driver.map(scratch, kG, 0, d);  // map
    if (whole) ledger.mapped(scratch, kG, d, 0);
    whole = whole && driver.properties(d, &prop);  // export's check: the driver knows the handle
    if (whole) {
      ledger.unmapped(scratch, kG);  // unmap
      whole = driver.unmap(scratch, kG);
    }
    if (at == d) {
      ledger.released(d);  // release the retained reference
      whole = driver.release(d) && whole;
    }
    if (!whole) half_way.fetch_add(1);
    awake_seen.fetch_add(1);
  };
  std::vector<std::thread> program_threads;
  for (int w = 0; w < 3; ++w)
    program_threads.emplace_back([&, w] {
      const uint64_t scratch = base + 32 * kG + uint64_t(w) * 2 * kG;
      uint64_t seed = 0x9e3779b97f4a7c15ull * uint64_t(w + 1);
      while (!stop.load()) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        call(int((seed >> 33) % kHandles), scratch);
      }
    });
  // Each sleep and each wake is followed by a call of the program's before
  // the next, so that both states are met every cycle.
  const auto after = [&](std::atomic<int>& seen) {
    const int before = seen.load();
    while (seen.load() == before) std::this_thread::yield();
  };
  for (int cycle = 0; cycle < 100; ++cycle) {
    {
      std::lock_guard<std::mutex> guard(sleep_mutex);
      HandleSleep engine(ledger, driver, provider);
      REQUIRE(engine.sleep(0, 5, 0).slept_bytes == kHandles * kG);
    }
    after(asleep_seen);
    {
      std::lock_guard<std::mutex> guard(sleep_mutex);
      HandleSleep engine(ledger, driver, provider);
      REQUIRE(engine.wake(0, 5));
    }
    after(awake_seen);
  }
  stop.store(true);
  for (std::thread& t : program_threads) t.join();
  CHECK(half_way.load() == 0);
  CHECK(awake_seen.load() >= 100);
  CHECK(asleep_seen.load() >= 100);
  CHECK(ledger.program_handles(5).size() == kHandles);
  CHECK(provider.used_bytes() == kHandles * kG);
  CHECK(provider.violations() == 0);
}
