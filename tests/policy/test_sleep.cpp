// tests/policy/test_sleep.cpp: DevicePool::sleep/wake on the host-backed
// fake: contents kept (or not) at the same addresses, stitches and small
// blocks included, for several chunk sizes and copies moved in pieces that
// do not divide the chunks; allocation while asleep (fail and wait), and
// sleep from another thread while allocations run; 50 and 1000 cycles
// without leaks; faults in every provider call of sleep and wake, and at
// every piece of a copy; the kept contents read while asleep (read_kept).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;
using Op = FakeProvider::Op;

namespace {

// Large blocks, small blocks and a stitch, all filled.
std::vector<Live> populate(PoolUnderTest& t, ThreadCache& cache, uint64_t unit = 20 * kMiB) {
  std::vector<Live> live;
  std::vector<uint64_t> holes;
  uint64_t seed = 1;
  auto take = [&](uint64_t bytes) {
    uint64_t p = 0;
    REQUIRE(t.alloc(cache, bytes, &p) == AllocStatus::Ok);
    fill(p, bytes, ++seed);
    live.push_back({p, bytes, seed});
    return p;
  };
  for (int i = 0; i < 6; ++i) holes.push_back(take(unit));
  for (int i = 0; i < 50; ++i) take(1000 + 37 * i);
  take(3 * kMiB);
  // Free every other 20 MiB block: a 60 MiB request then needs a stitch
  // (or growth); either way the contents must survive.
  for (size_t i = 0; i < live.size();) {
    if (live[i].bytes == unit && (live[i].seed % 2) == 0) {
      REQUIRE(t.free(cache, live[i].addr) == FreeStatus::Ok);
      live.erase(live.begin() + long(i));
    } else {
      ++i;
    }
  }
  take(3 * unit);
  return live;
}

PoolConfig small_chunks() { return config_with(64 * kMiB); }

}  // namespace

TEST_CASE("sleep with keep: every byte back at the same address after wake", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  REQUIRE(all_intact(live));
  const uint64_t held = t.provider.used_bytes();
  REQUIRE(held > 0);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.pool.asleep());
  CHECK(t.provider.used_bytes() == 0);  // every chunk released
  CHECK(t.provider.live_chunks() == 0);
  CHECK(t.provider.live_maps() == 0);
  CHECK(t.pool.stats().mapped_bytes == 0);
  CHECK(t.pool.kept_bytes() > 0);
  // Addresses stay the pool's: a free while asleep is served.
  RangeInfo info{};
  CHECK(t.range(live[0].addr, &info));
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK_FALSE(t.pool.asleep());
  CHECK(all_intact(live));
  CHECK(t.pool.kept_bytes() == 0);
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
  // The pool goes on as before.
  for (const Live& l : live) REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
  uint64_t p = 0;
  REQUIRE(t.alloc(*cache, 100 * kMiB, &p) == AllocStatus::Ok);
  fill(p, 100 * kMiB, 99);
  CHECK(check(p, 100 * kMiB, 99));
}

TEST_CASE("sleep without keep: memory released, addresses valid, nothing copied", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  REQUIRE(t.pool.sleep(0) == SleepStatus::Ok);
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.provider.calls(Op::HostAlloc) == 0);
  CHECK(t.provider.calls(Op::Copy) == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  // Fresh memory at the same addresses: writable, readable, the pool's.
  for (const Live& l : live) {
    fill(l.addr, l.bytes, l.seed + 100);
    CHECK(check(l.addr, l.bytes, l.seed + 100));
    REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
  }
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: allocations fail (kSleepFail) or wait, frees are served", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  std::vector<uint64_t> warm;
  for (int i = 0; i < 8; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, i % 2 ? 4096 : 8 * kMiB, &p) == AllocStatus::Ok);
    warm.push_back(p);
  }
  // Cached blocks exist for both sizes (freed and retired).
  REQUIRE(t.free(*cache, warm[0]) == FreeStatus::Ok);
  REQUIRE(t.free(*cache, warm[1]) == FreeStatus::Ok);
  REQUIRE(t.pool.sleep(kSleepFail) == SleepStatus::Ok);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 4096, &p) == AllocStatus::OutOfMemory);
  CHECK(t.alloc(*cache, 8 * kMiB, &p) == AllocStatus::OutOfMemory);
  CHECK(t.alloc(*cache, 1 * kGiB, &p) == AllocStatus::OutOfMemory);
  CHECK(t.provider.calls(Op::Create) == t.provider.calls(Op::Create));  // no growth while asleep
  CHECK(t.provider.used_bytes() == 0);
  CHECK(t.free(*cache, warm[2]) == FreeStatus::Ok);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  REQUIRE(t.alloc(*cache, 4096, &p) == AllocStatus::Ok);

  // Default: an allocation waits for wake, on another thread.
  REQUIRE(t.pool.sleep(0) == SleepStatus::Ok);
  std::atomic<int> done{0};
  uint64_t got = 0;
  std::thread waiter([&] {
    Attached other(t.pool);
    uint64_t q = 0;
    if (t.alloc(*other, 8 * kMiB, &q) == AllocStatus::Ok) got = q;
    done = 1;
    if (got) t.free(*other, got);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(done.load() == 0);  // still waiting
  CHECK(t.provider.used_bytes() == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  waiter.join();
  CHECK(done.load() == 1);
  CHECK(got != 0);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: refused while a capture forbids the sync, nothing changes", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  const uint64_t held = t.provider.used_bytes();
  t.provider.set_sync_allowed(false);
  CHECK(t.pool.sleep(kSleepKeep) == SleepStatus::Busy);
  CHECK_FALSE(t.pool.asleep());
  CHECK(t.provider.used_bytes() == held);
  uint64_t p = 0;
  CHECK(t.alloc(*cache, 4096, &p) == AllocStatus::Ok);
  CHECK(all_intact(live));
}

namespace {

// The chunks behind the block at addr, as an IPC export names them.
std::vector<ChunkHandle> chunks_of(PoolUnderTest& t, uint64_t addr) {
  Span* span = t.page_map->lookup(addr);
  REQUIRE(span);
  DevicePool::Export e;
  REQUIRE(t.pool.export_of(span, addr, &e));
  std::vector<ChunkHandle> out;
  for (const PhysicalPiece& piece : e.pieces) {
    bool known = false;
    for (const ChunkHandle& h : out) known |= h.value == piece.chunk.value;
    if (!known) out.push_back(piece.chunk);
  }
  return out;
}

bool same_chunks(const std::vector<ChunkHandle>& a, const std::vector<ChunkHandle>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value) return false;
  return true;
}

}  // namespace

TEST_CASE("sleep: a chunk another process maps stays resident with its bytes; the answer is Partial", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  // A block of a chunk of its own (more than half a chunk: nothing else fits).
  uint64_t mapped_elsewhere = 0;
  REQUIRE(t.alloc(*cache, 40 * kMiB, &mapped_elsewhere) == AllocStatus::Ok);
  fill(mapped_elsewhere, 40 * kMiB, 77);
  const std::vector<ChunkHandle> shared = chunks_of(t, mapped_elsewhere);
  REQUIRE(shared.size() == 1);
  // Without keep: what sleeps comes back as fresh memory, what is shared
  // never left.
  REQUIRE(t.pool.sleep(0, shared) == SleepStatus::Partial);
  CHECK(t.pool.asleep());
  CHECK(t.provider.live_chunks() == 1);
  CHECK(t.provider.used_bytes() == 64 * kMiB);
  CHECK(check(mapped_elsewhere, 40 * kMiB, 77));  // resident: readable while asleep too
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(check(mapped_elsewhere, 40 * kMiB, 77));
  CHECK(same_chunks(chunks_of(t, mapped_elsewhere), shared));
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
  // Nothing shared any more: the next sleep is whole (and keeps what the
  // first one discarded, written again).
  for (const Live& l : live) fill(l.addr, l.bytes, l.seed);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.provider.live_chunks() == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(all_intact(live));
  CHECK(check(mapped_elsewhere, 40 * kMiB, 77));
}

TEST_CASE("sleep again: chunks kept for another process go once it lets go; the answer says what stays", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  const Live& stitched = live.back();  // a stitch: its maps were undone by the first sleep
  const std::vector<ChunkHandle> shared = chunks_of(t, stitched.addr);
  REQUIRE(t.pool.sleep(kSleepKeep, shared) == SleepStatus::Partial);
  CHECK(t.provider.live_chunks() == shared.size());
  // Still shared: they stay, and the answer says so.
  REQUIRE(t.pool.sleep(kSleepKeep, shared) == SleepStatus::Partial);
  CHECK(t.provider.live_chunks() == shared.size());
  // Shared no more: they go, their contents kept.
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.provider.live_chunks() == 0);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);  // nothing resident: nothing to do
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(all_intact(live));
  CHECK(t.pool.kept_bytes() == 0);
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep with keep: a shared stitch's chunks stay, the stitch maps them again at wake", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  const Live& stitched = live.back();  // the 60 MiB block over freed 20 MiB holes
  const std::vector<ChunkHandle> shared = chunks_of(t, stitched.addr);
  REQUIRE(t.pool.sleep(kSleepKeep, shared) == SleepStatus::Partial);
  CHECK(t.provider.live_chunks() == shared.size());
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(all_intact(live));
  CHECK(same_chunks(chunks_of(t, stitched.addr), shared));
  CHECK(t.pool.kept_bytes() == 0);
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: many cycles leak nothing", "[sleep]") {
  // 50 here (each pays the fake's page faults); the fake-driver case
  // (pool sleep) runs 1000.
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  std::vector<Live> live;
  for (int i = 0; i < 4; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 3 * kMiB + uint64_t(i) * 4096, &p) == AllocStatus::Ok);
    live.push_back({p, 3 * kMiB + uint64_t(i) * 4096, uint64_t(i) + 7});
  }
  uint64_t small = 0;
  REQUIRE(t.alloc(*cache, 700, &small) == AllocStatus::Ok);
  live.push_back({small, 700, 3});
  for (const Live& l : live) fill(l.addr, l.bytes, l.seed);
  const uint64_t chunks = t.provider.live_chunks();
  for (int cycle = 0; cycle < 50; ++cycle) {
    REQUIRE(t.pool.sleep(cycle % 2 ? kSleepKeep : kSleepKeep | kSleepFail) == SleepStatus::Ok);
    REQUIRE(t.provider.live_chunks() == 0);
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
    // A free and an allocation in between, as a program would.
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 1 * kMiB, &p) == AllocStatus::Ok);
    REQUIRE(t.free(*cache, p) == FreeStatus::Ok);
  }
  CHECK(all_intact(live));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.provider.live_chunks() <= chunks + 1);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep and wake under injected faults: usable, nothing lost", "[sleep][faults]") {
  const Op ops[] = {Op::HostAlloc, Op::Copy, Op::Unmap, Op::Release, Op::Create, Op::Map, Op::SetAccess};
  for (Op op : ops) {
    for (int phase = 0; phase < 2; ++phase) {  // 0: during sleep, 1: during wake
      // Copies in 3 MiB pieces (8 MiB chunks: 3 + 3 + 2): a copy can fail
      // after some of its pieces went through.
      const uint64_t nths = op == Op::Copy ? 5 : 2;
      for (uint64_t nth = 0; nth < nths; ++nth) {
        for (int persistent = 0; persistent < 2; ++persistent) {
          CAPTURE(int(op), phase, nth, persistent);
          // Small chunks and blocks: many chunks, little to copy.
          PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
          t.provider.set_copy_piece(3 * kMiB);
          Attached cache(t.pool);
          const std::vector<Live> live = populate(t, *cache, 4 * kMiB);
          if (phase == 0) t.provider.fail(op, nth, ProviderStatus::Failed, persistent);
          const SleepStatus slept = t.pool.sleep(kSleepKeep);
          REQUIRE((slept == SleepStatus::Ok || slept == SleepStatus::Partial));
          if (phase == 1) t.provider.fail(op, nth, ProviderStatus::Failed, persistent);
          SleepStatus woke = t.pool.wake();
          for (int retry = 0; woke != SleepStatus::Ok && retry < 3; ++retry) woke = t.pool.wake();
          t.provider.clear_faults();
          for (int retry = 0; woke != SleepStatus::Ok && retry < 3; ++retry) woke = t.pool.wake();
          REQUIRE(woke == SleepStatus::Ok);
          CHECK(all_intact(live));
          CHECK(t.pool.check().empty());
          CHECK(t.provider.live_host_buffers() == 0);
          // Usable: free all, allocate again, data right.
          for (const Live& l : live) REQUIRE(t.free(*cache, l.addr) == FreeStatus::Ok);
          uint64_t p = 0;
          REQUIRE(t.alloc(*cache, 20 * kMiB, &p) == AllocStatus::Ok);
          fill(p, 20 * kMiB, 5);
          CHECK(check(p, 20 * kMiB, 5));
          CHECK(t.provider.violations() == 0);
          INFO(t.provider.violation_log());
        }
      }
    }
  }
}

TEST_CASE("sleep with keep: chunk sizes, copies in pieces that do not divide them", "[sleep]") {
  // chunk size, piece size (0: a copy in one piece)
  const uint64_t cases[][2] = {
      {2 * kMiB, 0}, {2 * kMiB, 1 * kMiB}, {8 * kMiB, 3 * kMiB}, {64 * kMiB, 5 * kMiB}, {100 * kMiB, 32 * kMiB}};
  for (const auto& c : cases) {
    CAPTURE(c[0], c[1]);
    PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, config_with(c[0]));
    t.provider.set_copy_piece(c[1]);
    Attached cache(t.pool);
    const std::vector<Live> live = populate(t, *cache);
    const uint64_t chunks = t.provider.live_chunks();
    const uint64_t held = t.provider.used_bytes();
    const uint64_t copies = t.provider.calls(Op::Copy);
    REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
    CHECK(t.provider.live_chunks() == 0);
    // One host copy per run of live blocks (idle chunks are released, free
    // runs between live blocks are not copied): the freed 20 MiB holes of
    // populate() stay behind.
    CHECK(t.provider.live_host_buffers() > 0);
    CHECK(t.provider.live_host_buffers() <= chunks + live.size());
    CHECK(t.pool.kept_bytes() < held);
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
    CHECK(all_intact(live));
    CHECK(t.provider.live_host_buffers() == 0);
    if (c[1]) CHECK(t.provider.calls(Op::Copy) - copies > 2 * chunks);  // pieces, not whole chunks
    CHECK(t.pool.check().empty());
    CHECK(t.provider.violations() == 0);
    INFO(t.provider.violation_log());
  }
}

TEST_CASE("sleep with keep: host memory refused for every chunk leaves the pool resident", "[sleep][faults]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache, 4 * kMiB);
  const uint64_t held = t.provider.used_bytes();
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    // Host memory refused (0), or every copy failing after its first piece (1).
    if (round == 0) {
      t.provider.fail(Op::HostAlloc, 0, ProviderStatus::OutOfMemory, true);
    } else {
      t.provider.set_copy_piece(3 * kMiB);
      t.provider.fail(Op::Copy, 1, ProviderStatus::Failed, true);
    }
    CHECK(t.pool.sleep(kSleepKeep) == SleepStatus::Partial);
    CHECK(t.provider.used_bytes() == held);  // nothing released: nothing could be kept
    CHECK(t.provider.live_host_buffers() == 0);
    CHECK(t.pool.kept_bytes() == 0);
    t.provider.clear_faults();
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
    CHECK(all_intact(live));
    CHECK(t.pool.check().empty());
  }
  // And then a sleep that works.
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.provider.used_bytes() == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(all_intact(live));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("wake: a copy refused for one chunk; the others are woken, wake again finishes", "[sleep][faults]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache, 4 * kMiB);
  const uint64_t chunks = t.provider.live_chunks();
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  REQUIRE(t.provider.live_host_buffers() > 2);
  t.provider.fail(Op::Copy, 1, ProviderStatus::Failed);  // the second piece's copy back
  CHECK(t.pool.wake() == SleepStatus::Failed);
  CHECK(t.pool.asleep());
  // Every piece but that one is back (its host copy given back). Its
  // chunk's fresh memory went back to the device where nothing else of it
  // was copied, else it stays mapped with that piece still to go in.
  CHECK(t.provider.live_host_buffers() == 1);
  CHECK(t.pool.kept_bytes() > 0);
  CHECK(t.pool.kept_bytes() <= 8 * kMiB);
  CHECK(t.provider.live_chunks() >= chunks - 1);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(all_intact(live));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep: 1000 cycles leak no host memory", "[sleep]") {
  // Accounting only (Backing::None: a host copy is a token, nothing is
  // copied), so that a thousand cycles stay cheap; the contents over many
  // cycles are checked above and in the fake-driver case (pool sleep).
  PoolUnderTest t(256 * kMiB, FakeProvider::Backing::None, config_with(2 * kMiB));
  t.provider.set_copy_piece(1 * kMiB);
  Attached cache(t.pool);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 3; ++i) {
    uint64_t p = 0;
    REQUIRE(t.alloc(*cache, 1 * kMiB + uint64_t(i) * 4096, &p) == AllocStatus::Ok);
    blocks.push_back(p);
  }
  const uint64_t made = t.provider.host_buffers_made();
  uint64_t kept_per_cycle = 0;
  for (int cycle = 0; cycle < 1000; ++cycle) {
    REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
    if (cycle == 0) kept_per_cycle = t.provider.live_host_buffers();
    REQUIRE(t.provider.live_host_buffers() == kept_per_cycle);
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
    REQUIRE(t.provider.live_host_buffers() == 0);
  }
  CHECK(kept_per_cycle > 0);
  CHECK(t.provider.host_buffers_made() - made == 1000 * kept_per_cycle);  // every one made was freed
  CHECK(t.pool.kept_bytes() == 0);
  for (uint64_t p : blocks) CHECK(t.free(*cache, p) == FreeStatus::Ok);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep and wake from another thread while allocations run and wait", "[sleep]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(8 * kMiB));
  t.provider.set_copy_piece(3 * kMiB);
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache, 4 * kMiB);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0}, bad{0};
  // Memory is touched only under `touch`, which the sleeping thread holds
  // from sleep to wake (a program must not touch pool memory while
  // asleep); allocations are made outside it, so they race with sleep and
  // wait for wake.
  std::mutex touch;
  std::thread worker([&] {
    Attached mine(t.pool);
    uint64_t seed = 1000;
    std::vector<Live> held;
    while (!stop.load()) {
      const uint64_t bytes = (seed % 3 == 0) ? 5 * kMiB : 3000 + (seed % 7) * 1000;
      uint64_t p = 0;
      if (t.alloc(*mine, bytes, &p) != AllocStatus::Ok) {
        ++bad;
        break;
      }
      std::lock_guard<std::mutex> guard(touch);
      fill(p, bytes, ++seed);
      held.push_back({p, bytes, seed});
      if (held.size() > 6) {
        if (!check(held.front().addr, held.front().bytes, held.front().seed)) ++bad;
        t.free(*mine, held.front().addr);
        held.erase(held.begin());
      }
      ++rounds;
    }
    std::lock_guard<std::mutex> guard(touch);
    for (const Live& l : held) {
      if (!check(l.addr, l.bytes, l.seed)) ++bad;
      t.free(*mine, l.addr);
    }
  });
  for (int cycle = 0; cycle < 10; ++cycle) {
    const uint64_t before = rounds.load();
    while (rounds.load() < before + 3 && !bad.load()) std::this_thread::yield();
    std::lock_guard<std::mutex> guard(touch);
    REQUIRE(t.pool.sleep(kSleepKeep) != SleepStatus::Busy);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the worker now waits
    REQUIRE(t.pool.wake() == SleepStatus::Ok);
  }
  stop = true;
  worker.join();
  CHECK(bad.load() == 0);
  CHECK(rounds.load() > 10);
  CHECK(all_intact(live));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep with keep copies the live blocks of a chunk, not its free runs", "[sleep]") {
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::Host, config_with(64 * kMiB));
  Attached cache(t.pool);
  uint64_t a = 0, hole = 0, b = 0;
  REQUIRE(t.alloc(*cache, 4 * kMiB, &a) == AllocStatus::Ok);
  REQUIRE(t.alloc(*cache, 6 * kMiB, &hole) == AllocStatus::Ok);
  REQUIRE(t.alloc(*cache, 3 * kMiB, &b) == AllocStatus::Ok);
  fill(a, 4 * kMiB, 1);
  fill(b, 3 * kMiB, 2);
  REQUIRE(t.free(*cache, hole) == FreeStatus::Ok);
  REQUIRE(t.provider.live_chunks() == 1);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  // 4 MiB and 4 MiB (3 MiB in whole granules) of a 64 MiB chunk, in two
  // pieces around the free 6 MiB.
  CHECK(t.pool.kept_bytes() == 8 * kMiB);
  CHECK(t.provider.live_host_buffers() == 2);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(check(a, 4 * kMiB, 1));
  CHECK(check(b, 3 * kMiB, 2));
  CHECK(t.provider.live_host_buffers() == 0);
  CHECK(t.pool.kept_bytes() == 0);
  // A chunk with nothing live is released, not kept; woken fresh.
  REQUIRE(t.free(*cache, a) == FreeStatus::Ok);
  REQUIRE(t.free(*cache, b) == FreeStatus::Ok);
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  CHECK(t.pool.kept_bytes() == 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}

TEST_CASE("sleep with keep: the kept contents read while asleep, across pieces, chunks and a stitch", "[sleep]") {
  PoolUnderTest t(2 * kGiB, FakeProvider::Backing::Host, small_chunks());
  Attached cache(t.pool);
  const std::vector<Live> live = populate(t, *cache);
  std::vector<std::vector<char>> before;
  for (const Live& l : live) {
    const char* from = reinterpret_cast<const char*>(l.addr);
    before.emplace_back(from, from + l.bytes);
  }
  REQUIRE(t.pool.sleep(kSleepKeep) == SleepStatus::Ok);
  for (size_t i = 0; i < live.size(); ++i) {
    std::vector<char> read(live[i].bytes);
    REQUIRE(t.pool.read_kept(live[i].addr, live[i].bytes, read.data()) == Arena::KeptRead::Copied);
    CHECK(read == before[i]);
  }
  // The stitch (the 60 MiB block over freed 20 MiB holes) read in part:
  // the bytes on both sides of where one of its maps ends.
  const Live& stitched = live.back();
  std::vector<char> part(2 * kMiB);
  REQUIRE(t.pool.read_kept(stitched.addr + 19 * kMiB, part.size(), part.data()) == Arena::KeptRead::Copied);
  CHECK(std::equal(part.begin(), part.end(), before.back().begin() + long(19 * kMiB)));
  CHECK(t.provider.calls(Op::Copy) > 0);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(t.pool.read_kept(live[0].addr, live[0].bytes, part.data()) == Arena::KeptRead::Resident);
  REQUIRE(t.pool.sleep(0) == SleepStatus::Ok);
  CHECK(t.pool.read_kept(live[0].addr, 64, part.data()) == Arena::KeptRead::Missing);
  REQUIRE(t.pool.wake() == SleepStatus::Ok);
  CHECK(t.pool.check().empty());
  CHECK(t.provider.violations() == 0);
}
