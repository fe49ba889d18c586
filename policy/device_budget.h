// policy/device_budget.h: one device's memory as pagefast shares it with
// the driver (docs/POOL.md "Headroom"). pagefast's parts that keep idle
// device memory (the pool, the client VMM cache) are its holders; the
// budget asks them to give idle memory back when the driver needs it:
//  - headroom: while pagefast holds idle memory, the device keeps at least
//    headroom_bytes really free, for what the driver and the CUDA
//    libraries take outside any allocator (modules loaded lazily, library
//    handles, stream-ordered pools, NCCL). relieve() gives back the
//    shortfall when free memory fell under it (another process, the
//    driver, a library);
//  - out of memory: a driver call that answered CUDA_ERROR_OUT_OF_MEMORY
//    is retried once after release_all() gave back every idle byte
//    (interpose/hooks.cpp), so memory cuMemGetInfo reports as free can
//    really be had.
// Pure: the holders are interfaces and the driver's free memory is an
// argument, so tests drive it with fakes. Thread-safe once set up: the
// holders answer from any thread; add() runs before any other call.
#pragma once

#include <atomic>
#include <cstdint>

namespace pagefast::policy {

// Something that keeps idle device memory and can give it back.
class IdleMemory {
 public:
  virtual ~IdleMemory() = default;
  virtual uint64_t idle_bytes() = 0;
  // Gives idle memory back to the driver, at least `bytes` if it holds
  // that much (kAllIdle: all of it). May call the driver (and wait for the
  // device); never from a destructor. Returns the bytes given back.
  virtual uint64_t give_back(uint64_t bytes) = 0;
};

constexpr uint64_t kAllIdle = ~uint64_t(0);

class DeviceBudget {
 public:
  static constexpr int kMaxHolders = 4;

  explicit DeviceBudget(uint64_t headroom_bytes) : headroom_bytes_(headroom_bytes) {}
  DeviceBudget(const DeviceBudget&) = delete;
  DeviceBudget& operator=(const DeviceBudget&) = delete;

  // Holders are asked in the order added. false: no room (kMaxHolders).
  // Holders are never removed: they live as long as the process.
  bool add(IdleMemory* holder);

  uint64_t headroom_bytes() const { return headroom_bytes_; }
  uint64_t idle_bytes();

  // free_bytes: the driver's free memory now. Under the headroom, the
  // holders give back the shortfall (as far as they hold idle memory).
  // Returns the bytes given back.
  uint64_t relieve(uint64_t free_bytes);
  // The driver refused memory: every holder gives back all it holds idle.
  uint64_t release_all();

  // How many bytes a growth may take of free_bytes and leave the headroom.
  uint64_t room_above_headroom(uint64_t free_bytes) const {
    return free_bytes > headroom_bytes_ ? free_bytes - headroom_bytes_ : 0;
  }

  // Counters for the stats: bytes given back to keep the headroom, and
  // after an out-of-memory answer; how many of each.
  struct Counters {
    uint64_t relieved_bytes = 0, relieves = 0;
    uint64_t released_bytes = 0, releases = 0;
  };
  Counters counters() const;

 private:
  uint64_t ask(uint64_t bytes);

  const uint64_t headroom_bytes_;
  IdleMemory* holders_[kMaxHolders] = {};
  std::atomic<int> holder_count_{0};
  std::atomic<uint64_t> relieved_bytes_{0}, relieves_{0}, released_bytes_{0}, releases_{0};
};

}  // namespace pagefast::policy
