// tests/policy/test_sleep_gate.cpp: SleepGate alone (policy/sleep_gate.h):
// slow paths pass while awake, fail or wait while asleep, and close waits
// for those already past the gate. Threads meet through flags, never time.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "policy/sleep_gate.h"

using namespace pagefast::policy;

TEST_CASE("sleep gate: awake, every slow path passes") {
  SleepGate gate;
  CHECK_FALSE(gate.asleep());
  REQUIRE(gate.enter());
  { SleepGate::Pass pass{&gate}; }
  REQUIRE(gate.enter());
  gate.leave();
}

TEST_CASE("sleep gate: asleep with kSleepFail, slow paths fail until open") {
  SleepGate gate;
  gate.close(kSleepFail);
  CHECK(gate.asleep());
  CHECK_FALSE(gate.enter());
  gate.open();
  CHECK_FALSE(gate.asleep());
  REQUIRE(gate.enter());
  gate.leave();
}

TEST_CASE("sleep gate: asleep without kSleepFail, a slow path waits for open") {
  SleepGate gate;
  gate.close(0);
  std::atomic<bool> started{false}, passed{false};
  std::thread slow([&] {
    started = true;
    if (gate.enter()) {
      passed = true;
      gate.leave();
    }
  });
  while (!started) std::this_thread::yield();
  CHECK(gate.asleep());
  gate.open();
  slow.join();
  CHECK(passed);
}

TEST_CASE("sleep gate: close returns only once the slow paths past the gate left") {
  SleepGate gate;
  REQUIRE(gate.enter());
  std::atomic<bool> left{false}, closed{false}, left_before_close{false};
  std::thread sleeper([&] {
    gate.close(kSleepFail);
    left_before_close = left.load();
    closed = true;
  });
  while (!gate.asleep()) std::this_thread::yield();
  CHECK_FALSE(closed);
  left = true;
  gate.leave();
  sleeper.join();
  CHECK(left_before_close);
  gate.open();
}

TEST_CASE("sleep gate: the thread that closed the gate fails instead of waiting; another waits") {
  SleepGate gate;
  gate.close(0);
  CHECK_FALSE(gate.enter());  // its wake could only come from itself
  std::atomic<bool> started{false}, passed{false};
  std::thread other([&] {
    started = true;
    if (gate.enter()) {
      passed = true;
      gate.leave();
    }
  });
  while (!started) std::this_thread::yield();
  gate.open();
  other.join();
  CHECK(passed);
  REQUIRE(gate.enter());
  gate.leave();
  // Closed by another thread: this one waits again.
  std::thread closer([&] { gate.close(0); });
  closer.join();
  std::atomic<bool> woken{false};
  std::thread opener([&] {
    while (!gate.asleep()) std::this_thread::yield();
    woken = true;
    gate.open();
  });
  REQUIRE(gate.enter());
  CHECK(woken);
  gate.leave();
  opener.join();
}

TEST_CASE("sleep gate: under NoWait a slow path fails instead of waiting; wait_for_wake waits outside") {
  SleepGate gate;
  std::thread closer([&] { gate.close(0); });
  closer.join();
  {
    SleepGate::NoWait no_wait;
    CHECK_FALSE(gate.enter());
  }
  std::thread opener([&] { gate.open(); });
  CHECK(gate.wait_for_wake());  // returns once open, whichever comes first
  opener.join();
  CHECK_FALSE(gate.asleep());
  REQUIRE(gate.enter());
  gate.leave();
  gate.close(kSleepFail);  // kSleepFail, and this thread closed it: no wait
  CHECK_FALSE(gate.wait_for_wake());
  gate.open();
  CHECK(gate.wait_for_wake());
}
