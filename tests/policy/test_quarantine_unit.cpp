// tests/policy/test_quarantine_unit.cpp: the Quarantine alone (no
// DevicePool) on the fake provider and clock: stamps and the order in
// which a thread's entries retire, the shared list, the sync leader with
// several threads, refused and failed syncs, and batch recycling.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "policy/clock.h"
#include "policy/fake_provider.h"
#include "policy/quarantine.h"
#include "policy/thread_cache.h"

using namespace pagefast;
using namespace pagefast::policy;

namespace {

// The fake provider, with a gate in front of synchronize(): while closed,
// a sync waits inside the provider call (as a slow device sync does).
class GatedProvider final : public Provider {
 public:
  explicit GatedProvider(FakeProvider& fake) : fake_(fake) {}
  ProviderStatus reserve_address(uint64_t bytes, uint64_t* base) override { return fake_.reserve_address(bytes, base); }
  ProviderStatus create_chunk(Granules g, ChunkHandle* c) override { return fake_.create_chunk(g, c); }
  bool release_chunk(ChunkHandle c) override { return fake_.release_chunk(c); }
  ProviderStatus map(uint64_t a, ChunkHandle c, Granules o, Granules g) override { return fake_.map(a, c, o, g); }
  bool unmap(uint64_t a, Granules g) override { return fake_.unmap(a, g); }
  ProviderStatus set_access(uint64_t a, Granules g, const AccessSet& s) override { return fake_.set_access(a, g, s); }
  SyncStatus synchronize() override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    return fake_.synchronize();
  }

  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = false;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until `n` syncs have entered the provider in all.
  void wait_entered(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }

 private:
  FakeProvider& fake_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = true;
  int entered_ = 0;
};

struct QuarantineUnderTest {
  FakeProvider fake{64 * kMiB, FakeProvider::Backing::None};
  GatedProvider provider{fake};
  FakeClock clock;
  Quarantine quarantine{provider, clock};

  uint64_t syncs() const { return fake.calls(FakeProvider::Op::Sync); }
};

// A thread's cache with a filling batch, as DevicePool::attach_thread
// makes it; its batches go back to the quarantine at the end.
struct Cache {
  explicit Cache(Quarantine& q) : quarantine(q), cache(new ThreadCache()) {
    cache->quarantine = q.take_batch();
    REQUIRE(cache->quarantine);
  }
  ~Cache() {
    for (QuarantineBatch* b : {cache->quarantine, cache->sealed, cache->spare_batch})
      if (b) quarantine.give_batch(b);
  }
  ThreadCache* operator->() { return cache.get(); }
  ThreadCache& operator*() { return *cache; }

  Quarantine& quarantine;
  std::unique_ptr<ThreadCache> cache;
};

// Small blocks of one slab: entry i is at base + i * 4096.
struct Blocks {
  static constexpr uint64_t kBase = uint64_t(1) << 40;
  static constexpr uint32_t kBytes = 4096;
  Blocks() {
    slab.set_block_bytes(kBytes);
    slab.base_addr_.store(kBase);
  }
  uint64_t addr(int i) const { return kBase + uint64_t(i) * kBytes; }
  Slab slab;
};

// What DevicePool::free does once the block is known to be live. Returns
// whether the batch is full (the pool then seals it).
bool push(Quarantine& q, ThreadCache& cache, Blocks& blocks, int i) {
  cache.lock.lock();
  QuarantineBatch* b = cache.quarantine;
  REQUIRE_FALSE(b->full());
  b->entries[b->count++] = QuarantineEntry{&blocks.slab, uint32_t(i), q.stamp()};
  b->bytes += Blocks::kBytes;
  owner_add(cache.quarantined_bytes, Blocks::kBytes);
  const bool full = b->full();
  cache.lock.unlock();
  return full;
}

std::vector<uint64_t> take_retired(Quarantine& q, ThreadCache& cache) {
  QuarantineEntry out[Quarantine::kMaxRetired];
  const int n = q.take_retired(cache, out);
  std::vector<uint64_t> addrs;
  for (int i = 0; i < n; ++i) addrs.push_back(Blocks::kBase + uint64_t(out[i].index) * Blocks::kBytes);
  return addrs;
}

std::vector<uint64_t> range(const Blocks& blocks, int from, int to) {
  std::vector<uint64_t> addrs;
  for (int i = from; i < to; ++i) addrs.push_back(blocks.addr(i));
  return addrs;
}

}  // namespace

TEST_CASE("quarantine: a thread's entries retire in free order, only once a later sync finished",
          "[quarantine][unit]") {
  QuarantineUnderTest t;
  Quarantine& q = t.quarantine;
  Cache cache(q);
  Blocks blocks;
  CHECK_FALSE(q.holds_any(&*cache));
  for (int i = 0; i < 3; ++i) push(q, *cache, blocks, i);
  CHECK(q.holds_any(&*cache));
  CHECK_FALSE(q.holds_any(nullptr));
  CHECK(take_retired(q, *cache).empty());  // no sync yet
  const Quarantine::Load load = q.local_load(*cache);
  CHECK_FALSE(load.sealed);
  CHECK(load.blocks == 3);
  CHECK(load.bytes == 3 * Blocks::kBytes);

  // A sync covering the thread's newest stamp retires all three.
  REQUIRE(q.synchronize_covering(q.newest_stamp(&*cache)));
  CHECK(q.synchronizations() == 1);
  push(q, *cache, blocks, 3);  // freed after that sync: not retired
  CHECK(take_retired(q, *cache) == range(blocks, 0, 3));
  CHECK(cache->quarantined_bytes.load() == Blocks::kBytes);
  CHECK(q.local_load(*cache).blocks == 1);
  CHECK(take_retired(q, *cache).empty());

  // Fill and seal: the full batch is kept by the thread, a fresh one fills.
  for (int i = 4; i < kQuarantineBatchEntries + 2; ++i) push(q, *cache, blocks, i);
  REQUIRE(push(q, *cache, blocks, kQuarantineBatchEntries + 2));
  QuarantineBatch* filled = cache->quarantine;
  CHECK(q.seal(*cache) == Quarantine::Handoff::Done);
  CHECK(cache->sealed == filled);
  CHECK(cache->quarantine != filled);
  CHECK(q.local_load(*cache).sealed);
  const uint64_t sealed_stamp = filled->last_stamp();
  CHECK(q.newest_stamp(&*cache) == sealed_stamp);  // the sealed batch is the oldest
  for (int i = 0; i < 5; ++i) push(q, *cache, blocks, 100 + i);
  CHECK(q.shared_blocks() == 0);  // one sealed batch stays with the thread

  // A sync covering the sealed batch: the sealed entries come first, then
  // the filling batch's, in free order; the emptied batch is kept spare.
  REQUIRE(q.synchronize_covering(q.newest_stamp(&*cache)));
  std::vector<uint64_t> expected = range(blocks, 3, kQuarantineBatchEntries + 3);
  for (uint64_t a : range(blocks, 100, 105)) expected.push_back(a);
  CHECK(take_retired(q, *cache) == expected);
  CHECK(cache->sealed == nullptr);
  CHECK(cache->spare_batch == filled);
  CHECK(cache->quarantined_bytes.load() == 0);
  CHECK_FALSE(q.holds_any(&*cache));
  CHECK(q.synchronizations() == 2);
  CHECK(t.syncs() == 2);
}

TEST_CASE("quarantine: a second sealed batch is shared and retires through the route", "[quarantine][unit]") {
  QuarantineUnderTest t;
  Quarantine& q = t.quarantine;
  Cache mine(q);
  Blocks blocks;
  int next = 0;
  auto fill = [&] {
    while (!push(q, *mine, blocks, next++)) {
    }
    REQUIRE(q.seal(*mine) == Quarantine::Handoff::Done);
  };
  fill();
  QuarantineBatch* first = mine->sealed;
  fill();  // the first sealed batch goes to the shared list
  CHECK(mine->sealed != first);
  CHECK(q.shared_blocks() == uint64_t(kQuarantineBatchEntries));
  CHECK(q.shared_bytes() == uint64_t(kQuarantineBatchEntries) * Blocks::kBytes);
  CHECK(mine->quarantined_bytes.load() == uint64_t(kQuarantineBatchEntries) * Blocks::kBytes);
  CHECK(q.holds_any(nullptr));

  int routed = 0;
  auto route = [&](const ThreadCache* owner, const QuarantineEntry* entries, int count) {
    CHECK(owner == &*mine);
    CHECK(count == kQuarantineBatchEntries);
    for (int i = 0; i < count; ++i) CHECK(blocks.addr(int(entries[i].index)) == blocks.addr(routed++));
  };
  q.retire_shared(route);  // no sync yet: nothing
  CHECK(routed == 0);
  CHECK(q.shared_blocks() == uint64_t(kQuarantineBatchEntries));

  // Another thread (no batch of its own) syncs everything freed so far.
  REQUIRE(q.synchronize_covering(q.newest_stamp(nullptr)));
  q.retire_shared(route);
  CHECK(routed == kQuarantineBatchEntries);
  CHECK(q.shared_blocks() == 0);
  CHECK(q.shared_bytes() == 0);

  // share(): the sealed and the filling batch both go to the shared list.
  push(q, *mine, blocks, next++);
  CHECK(q.share(*mine) == Quarantine::Handoff::Done);
  CHECK(mine->sealed == nullptr);
  CHECK(mine->quarantine->count == 0);
  CHECK(mine->quarantined_bytes.load() == 0);
  CHECK(q.shared_blocks() == uint64_t(kQuarantineBatchEntries) + 1);
  CHECK(q.share(*mine) == Quarantine::Handoff::Nothing);
  CHECK(q.seal(*mine) == Quarantine::Handoff::Nothing);  // drained meanwhile
}

TEST_CASE("quarantine: one sync covers waiters whose stamp came before it began, not later ones",
          "[quarantine][unit][threads]") {
  QuarantineUnderTest t;
  Quarantine& q = t.quarantine;

  SECTION("single steps") {
    const uint64_t before = q.stamp();
    t.provider.close();
    bool led = false;
    std::thread leader([&] { led = q.synchronize_covering(before); });
    t.provider.wait_entered(1);  // the sync has begun (its ticket is taken)
    const uint64_t during = q.stamp();
    t.provider.open();
    leader.join();
    CHECK(led);
    CHECK(q.retired(before));
    CHECK_FALSE(q.retired(during));
    CHECK(q.synchronize_covering(before));  // already covered: no new sync
    CHECK(t.syncs() == 1);
    CHECK(q.synchronize_covering(during));
    CHECK(q.retired(during));
    CHECK(t.syncs() == 2);
    CHECK(q.synchronizations() == 2);
  }

  SECTION("several threads share the leader's sync; a later stamp leads the next") {
    const uint64_t before = q.stamp();
    t.provider.close();
    // Results are counted, not CHECKed, on the threads (Catch2 assertions
    // are not thread-safe).
    std::atomic<int> ok{0}, done{0};
    std::thread leader([&] { ok.fetch_add(q.synchronize_covering(before)); });
    t.provider.wait_entered(1);
    const uint64_t during = q.stamp();
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i)
      waiters.emplace_back([&] {
        ok.fetch_add(q.synchronize_covering(before));
        done.fetch_add(1);
      });
    std::thread late([&] { ok.fetch_add(q.synchronize_covering(during)); });
    // Give the waiters time to queue behind the running sync (the count
    // below holds whether or not they did).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(done.load() == 0);  // nobody returns before the sync finished
    t.provider.open();
    leader.join();
    for (std::thread& w : waiters) w.join();
    late.join();
    CHECK(ok.load() == 6);
    CHECK(q.retired(during));
    CHECK(t.syncs() == 2);  // the leader's and the late thread's
    CHECK(q.synchronizations() == 2);
  }
}

TEST_CASE("quarantine: a refused or failed sync retires nothing", "[quarantine][unit]") {
  QuarantineUnderTest t;
  Quarantine& q = t.quarantine;
  Cache mine(q);
  Blocks blocks;
  int next = 0;
  while (!push(q, *mine, blocks, next++)) {
  }
  REQUIRE(q.seal(*mine) == Quarantine::Handoff::Done);
  push(q, *mine, blocks, next++);
  REQUIRE(q.share(*mine) == Quarantine::Handoff::Done);
  push(q, *mine, blocks, next++);
  const uint64_t shared = q.shared_blocks();
  int routed = 0;
  auto route = [&](const ThreadCache*, const QuarantineEntry*, int count) { routed += count; };

  SECTION("refused (a capture)") { t.fake.set_sync_allowed(false); }
  SECTION("failed") { t.fake.set_sync_fails(true); }

  CHECK_FALSE(q.synchronize_covering(q.newest_stamp(&*mine)));
  CHECK_FALSE(q.synchronize_covering(q.newest_stamp(nullptr)));
  CHECK(take_retired(q, *mine).empty());
  q.retire_shared(route);
  CHECK(routed == 0);
  CHECK(q.shared_blocks() == shared);
  CHECK(q.synchronizations() == 0);
  CHECK(t.syncs() == 2);

  // A waiter covered by a sync that fails gives up with it (no sync of its own).
  const uint64_t stamp = q.stamp();
  t.provider.close();
  std::atomic<int> ok{0};
  std::thread leader([&] { ok.fetch_add(q.synchronize_covering(stamp)); });
  t.provider.wait_entered(3);
  std::thread waiter([&] { ok.fetch_add(q.synchronize_covering(stamp)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  t.provider.open();
  leader.join();
  waiter.join();
  CHECK(ok.load() == 0);
  CHECK(t.syncs() <= 4);  // 3 if the waiter queued in time, 4 if it came late and led
  CHECK(q.synchronizations() == 0);

  // Allowed again: everything retires.
  t.fake.set_sync_allowed(true);
  t.fake.set_sync_fails(false);
  CHECK(q.synchronize_covering(q.newest_stamp(&*mine)));
  CHECK(take_retired(q, *mine).size() == 1);
  q.retire_shared(route);
  CHECK(uint64_t(routed) == shared);
  CHECK(q.synchronizations() == 1);
}

TEST_CASE("quarantine: batches are recycled, never leaked", "[quarantine][unit]") {
  QuarantineUnderTest t;
  Quarantine& q = t.quarantine;
  std::set<QuarantineBatch*> seen;
  {
    Cache mine(q);
    Cache theirs(q);
    Blocks blocks;
    auto route = [](const ThreadCache*, const QuarantineEntry*, int) {};
    seen.insert(mine->quarantine);
    seen.insert(theirs->quarantine);
    for (int round = 0; round < 200; ++round) {
      for (Cache* c : {&mine, &theirs}) {
        int i = 0;
        while (!push(q, **c, blocks, i++)) {
        }
        REQUIRE(q.seal(**c) == Quarantine::Handoff::Done);
        seen.insert((*c)->quarantine);
        push(q, **c, blocks, i);
        if (round % 2) REQUIRE(q.share(**c) == Quarantine::Handoff::Done);
      }
      REQUIRE(q.synchronize_covering(q.newest_stamp(nullptr)));
      for (Cache* c : {&mine, &theirs}) {
        take_retired(q, **c);
        seen.insert((*c)->quarantine);
        if ((*c)->spare_batch) seen.insert((*c)->spare_batch);
      }
      q.retire_shared(route);
      REQUIRE(q.shared_blocks() == 0);
      REQUIRE_FALSE(q.holds_any(&*mine));
      REQUIRE_FALSE(q.holds_any(&*theirs));
    }
    CHECK(t.syncs() == 200);
  }
  // Two threads need at most a filling, a sealed and a spare batch each,
  // plus what waits shared: one refill's worth, reused for 200 rounds.
  CHECK(seen.size() <= size_t(kQuarantineBatchRefill));
  // Every batch came back: as many can be taken as were ever made.
  std::set<QuarantineBatch*> again;
  for (int i = 0; i < kQuarantineBatchRefill; ++i) again.insert(q.take_batch());
  for (QuarantineBatch* b : seen) CHECK(again.count(b) == 1);
  for (QuarantineBatch* b : again) {
    CHECK(b->count == 0);
    CHECK(b->bytes == 0);
    CHECK(b->owner == nullptr);
    q.give_batch(b);
  }
}
