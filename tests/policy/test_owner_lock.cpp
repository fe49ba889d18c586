// tests/policy/test_owner_lock.cpp: the thread caches' owner lock
// (policy/owner_lock.h): who owns a cache, the quick section against a lock
// taken elsewhere, and a stress of an owner's quick sections against other
// threads' locks with each barrier (membarrier where this kernel offers it,
// the TLB shootdown), also in a child of fork. In a ThreadSanitizer build
// the quick section is the exchange, and the same cases check that.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "harness.h"

using namespace pagefast;
using namespace pagefast::policy;
using namespace pagefast::policy::test;

namespace {

// What the lock guards here: two words that an owner's quick section and
// another thread's locked section each set equal, and a count of the
// times either found them unequal. Relaxed atomics compile to the plain
// moves that a thread cache's fields are; only the lock orders them.
struct Guarded {
  std::atomic<uint64_t> a{0}, b{0};
  // The two stores apart, so that two threads inside at once would likely
  // see them unequal.
  void write(uint64_t v) {
    a.store(v, std::memory_order_relaxed);
    for (int spin = 0; spin < 16; ++spin) cpu_relax();
    b.store(v, std::memory_order_relaxed);
  }
  bool consistent() const { return a.load(std::memory_order_relaxed) == b.load(std::memory_order_relaxed); }
};

// The owner runs quick sections (or locks, when a quick section is
// refused), each checking and writing the words, until another thread
// has taken the lock `locks` times (try_lock now and then), checking and
// writing them too. Returns the inconsistencies seen.
int race(int locks) {
  OwnerLock lock;
  Guarded guarded;
  std::atomic<int> torn{0};
  std::atomic<bool> owned{false}, done{false};
  std::atomic<uint64_t> refused{0}, quick_sections{0};
  std::thread owner([&] {
    lock.own();
    owned.store(true);
    for (uint64_t i = 1; !done.load(std::memory_order_relaxed); ++i) {
      const bool quick = lock.enter_quick();
      if (!quick) {
        refused.fetch_add(1, std::memory_order_relaxed);
        lock.lock();
      }
      if (!guarded.consistent()) ++torn;
      guarded.write(i * 2);
      if (!guarded.consistent()) ++torn;
      if (quick) lock.leave_quick();
      else lock.unlock();
      quick_sections.fetch_add(quick, std::memory_order_relaxed);
    }
  });
  while (!owned.load()) std::this_thread::yield();
  for (uint64_t n = 1, taken_count = 0; taken_count < uint64_t(locks); ++n) {
    const bool taken = n % 8 == 0 ? lock.try_lock() : (lock.lock(), true);
    if (!taken) continue;
    ++taken_count;
    if (!guarded.consistent()) ++torn;
    guarded.write(n * 2 + 1);
    if (!guarded.consistent()) ++torn;
    lock.unlock();
    for (int spin = 0; spin < int(n % 64); ++spin) cpu_relax();
  }
  done.store(true);
  owner.join();
  INFO("the owner's quick sections: " << quick_sections.load() << ", refused for a held lock: " << refused.load());
  CHECK(quick_sections.load() > 0);
  return torn.load();
}

}  // namespace

TEST_CASE("owner lock: a thread's own cache is owned by it, a shared one by none", "[owner-lock]") {
  RegistryUnderTest t;
  ThreadRegistry& registry = t.registry;
  ThreadCache* own = registry.attach(true);
  ThreadCache* shared = registry.attach(false);
  REQUIRE(own);
  REQUIRE(shared);
  CHECK(own->lock.owned_by_caller());
  CHECK_FALSE(shared->lock.owned_by_caller());
  bool other_owns = true;
  std::thread([&] { other_owns = own->lock.owned_by_caller(); }).join();
  CHECK_FALSE(other_owns);
  {
    // A shared cache's user owns it while it holds the users' mutex.
    OwnerLock::Borrow borrow(shared->lock);
    CHECK(shared->lock.owned_by_caller());
  }
  CHECK_FALSE(shared->lock.owned_by_caller());
  registry.detach(own);
  CHECK_FALSE(own->lock.owned_by_caller());
  registry.detach(shared);
}

TEST_CASE("owner lock: a quick section is refused while another thread holds the lock", "[owner-lock]") {
  OwnerLock lock;
  lock.own();
  std::atomic<int> step{0};
  std::thread other([&] {
    lock.lock();
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    lock.unlock();
  });
  while (step.load() != 1) std::this_thread::yield();
  CHECK_FALSE(lock.enter_quick());
  step.store(2);
  other.join();
  REQUIRE(lock.enter_quick());
  // Inside the quick section another thread's try_lock is refused (the
  // owner is busy, or in a ThreadSanitizer build the lock is held).
  bool taken = true;
  std::thread reader([&] { taken = lock.try_lock(); });
  reader.join();
  CHECK_FALSE(taken);
  lock.leave_quick();
  std::thread after([&] { taken = lock.try_lock(); });
  after.join();
  CHECK(taken);
}

TEST_CASE("owner lock: an owner's quick sections and other threads' locks never overlap", "[owner-lock][threads]") {
  const BarrierKind kind = barrier_kind();
  INFO("this kernel's barrier: " << (kind == BarrierKind::Membarrier ? "membarrier" : "shootdown"));
  CHECK(race(50000) == 0);
  set_barrier_kind_for_test(kind == BarrierKind::Membarrier ? BarrierKind::Shootdown : BarrierKind::Membarrier);
  CHECK(race(50000) == 0);
  set_barrier_kind_for_test(kind);
}

TEST_CASE("owner lock: the barrier serves in a child of fork", "[owner-lock][threads]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(race(5000) == 0 ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("owner lock: a drain of another thread's cache runs a few barriers, not one per size class", "[owner-lock]") {
  // A worker fills its cache's bins of many classes, a large entry and its
  // quarantine, then waits while this thread drains every cache (a
  // release, as a give-back or a trim does).
  PoolUnderTest t(1 * kGiB, FakeProvider::Backing::None, config_with(32 * kMiB));
  std::atomic<int> step{0};
  std::thread worker([&] {
    Attached cache(t.pool);
    std::vector<uint64_t> blocks;
    for (uint64_t bytes = 512; bytes <= 256 * kKiB; bytes *= 2)
      for (int i = 0; i < 4; ++i) {
        uint64_t p = 0;
        if (t.alloc(*cache, bytes, &p) == AllocStatus::Ok) blocks.push_back(p);
      }
    uint64_t large = 0;
    if (t.alloc(*cache, 3 * kGranuleBytes, &large) == AllocStatus::Ok) blocks.push_back(large);
    for (uint64_t p : blocks) t.free(*cache, p);
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  const uint64_t before = barriers_run();
  t.pool.release(kAllIdle);
  const uint64_t ran = barriers_run() - before;
  step.store(2);
  worker.join();
  INFO("barriers for one drain of one other thread's cache: " << ran);
  if (PF_OWNER_LOCK_ASYMMETRIC) CHECK(ran >= 1);
  CHECK(ran <= 8);
  CHECK(t.pool.check() == "");
}
