// policy/provider.h: every side effect of one device's pool, as an
// interface the policy is given (jemalloc's extent hooks, Temeraire's
// injected allocator and clock). Production: interpose/pool/vmm_provider.*
// over the CUDA VMM calls. Tests: policy/fake_provider.* (host memory, fault
// injection, a fake clock). The policy never calls anything else.
//
// Conventions, uniform over the table:
//  - every call that can fail returns a ProviderStatus; OutOfMemory means
//    "releasing memory may help", Failed means it will not;
//  - sizes and offsets are whole granules, addresses granule-aligned;
//  - nothing here is called on the allocation hot path: each call is a
//    driver call of 1-600 us (docs/DRIVER-FACTS.md).
#pragma once

#include <cstdint>

#include "policy/units.h"

namespace pagefast::policy {

enum class ProviderStatus { Ok, OutOfMemory, Failed };

// Which devices set_access opens a range to, besides the pool's own: bit d
// stands for device ordinal d (peer access, docs/POOL.md "Peer access").
// Revoked devices lose their access to the range (a device in both sets is
// granted).
struct AccessSet {
  uint64_t peers = 0;
  uint64_t revoked = 0;
};
constexpr int kMaxPeerDevices = 64;

// An opaque physical allocation (a CUmemGenericAllocationHandle).
struct ChunkHandle {
  uint64_t value = 0;
};

enum class SyncStatus {
  Done,        // all device work submitted before the call has finished
  NotAllowed,  // a stream capture is active: synchronising would break it
  Failed,      // the driver reported an error (e.g. a sticky kernel fault)
};

// One chunk's copy between device and host memory (sleep with keep).
struct HostCopy {
  uint64_t addr = 0;  // a mapped, open device range (a chunk's home)
  uint64_t bytes = 0;
  void* host = nullptr;  // copy_to_host: set by it; copy_from_host: given
  // copy_to_host: where the contents go, kSleepToDisk or kSleepHostRelease
  // (sleep_gate.h; 0: host memory the provider may keep for the next sleep);
  // copy_from_host: kSleepToDisk where `host` is a file's token.
  unsigned mode = 0;
  ProviderStatus status = ProviderStatus::Failed;  // set by either call
};

// What a wake makes ready as its copies go (copy_from_host_made): the
// range of copy i, made and mapped. Called on the calling thread only, in
// the order of i, each i once.
class CopyPreparer {
 public:
  virtual ~CopyPreparer() = default;
  // false: copy i fails (Failed), its host memory unchanged.
  virtual bool prepare(uint64_t i) = 0;
  // After the last prepare, on the calling thread, while copies may run:
  // the rest of the wake's work that needs no copy.
  virtual void prepared() {}
};

class Provider {
 public:
  virtual ~Provider() = default;

  // Reserves address space; *base_addr is granule-aligned. Never returned:
  // ranges live as long as the process.
  virtual ProviderStatus reserve_address(uint64_t bytes, uint64_t* base_addr) = 0;

  // Physical memory of the device, not yet mapped anywhere.
  virtual ProviderStatus create_chunk(Granules granules, ChunkHandle* chunk) = 0;
  // REQUIRES: no mapping of the chunk remains. false: the driver refused
  // (the chunk is then leaked; nothing else can be done).
  virtual bool release_chunk(ChunkHandle chunk) = 0;

  // Maps granules [offset, offset + granules) of `chunk` at addr, inside a
  // reserved range. One chunk may be mapped at several addresses at once
  // (that is what stitching does).
  virtual ProviderStatus map(uint64_t addr, ChunkHandle chunk, Granules offset, Granules granules) = 0;
  // REQUIRES: [addr, addr + granules) is exactly one earlier map().
  virtual bool unmap(uint64_t addr, Granules granules) = 0;
  // Opens a fully mapped range (possibly several maps) for read and write
  // by the device and every device in access.peers, and closes it to
  // every device in access.revoked (only). One call per range: it is the
  // dominant cost of a mapping, paid per call, not per byte. Called again
  // on an open range when the peer set changes.
  virtual ProviderStatus set_access(uint64_t addr, Granules granules, const AccessSet& access) = 0;

  // Whether map() takes part of a chunk (a non-zero offset, or fewer
  // granules than the chunk has), which most stitches need. The H200's
  // driver (580) answers CUDA_ERROR_NOT_SUPPORTED to both
  // (docs/DRIVER-FACTS.md): the arena then stitches whole chunks only, and
  // otherwise grows.
  virtual bool maps_at_offset() { return true; }

  // The device's free memory as the driver sees it now (cuMemGetInfo),
  // for the headroom (policy/device_budget.h). false: unknown ("unsupported"
  // is a legal answer; the pool then grows as if nothing else needed the
  // device).
  virtual bool device_free_bytes(uint64_t* free_bytes) {
    (void)free_bytes;
    return false;
  }

  // Waits until all device work that may use pool memory has finished.
  // Called with no lock of the pool held.
  virtual SyncStatus synchronize() = 0;

  // Sleep with keep (docs/POOL.md "Sleep and wake"): whole chunks copied
  // to host memory the provider allocates, and back. Batches, so that the
  // provider can overlap the copies of many chunks (threads, staging
  // buffers); each copy answers for itself. Failed is a legal answer for
  // any of them ("unsupported"): that chunk then stays resident (sleep) or
  // asleep (wake).
  //
  // copy_to_host: for each copy, host memory of `bytes` and the contents
  // of the open range [addr, addr + bytes) in it. Ok: copy.host is the
  // caller's until host_free. Otherwise copy.host is NULL and nothing of
  // that copy is left.
  virtual void copy_to_host(HostCopy* copies, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      copies[i].host = nullptr;
      copies[i].status = ProviderStatus::Failed;
    }
  }
  // copy_from_host: copy.host (from copy_to_host) into the open range. Ok:
  // the host memory's contents may already be gone (the provider may give
  // its pages back as soon as they are copied, unless the copy's mode has
  // kSleepHoldHost); host_free it all the same.
  // Otherwise it is unchanged: the copy can be tried again.
  virtual void copy_from_host(HostCopy* copies, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) copies[i].status = ProviderStatus::Failed;
  }
  // copy_from_host of ranges made as the copies go: each copy's range is
  // made by `preparer` (prepare(i)) before any of it is copied, so that a
  // provider may copy the first ranges while the next are made. Here: all
  // made first, then copy_from_host of each run of those made.
  virtual void copy_from_host_made(HostCopy* copies, uint64_t count, CopyPreparer& preparer) {
    // The status marks what was made (Ok) until the copies set it.
    for (uint64_t i = 0; i < count; ++i)
      copies[i].status = preparer.prepare(i) ? ProviderStatus::Ok : ProviderStatus::Failed;
    preparer.prepared();
    for (uint64_t i = 0; i < count;) {
      uint64_t end = i;
      while (end < count && copies[end].status == ProviderStatus::Ok) ++end;
      if (end > i) copy_from_host(copies + i, end - i);
      i = end > i ? end : i + 1;
    }
  }
  // REQUIRES: host and bytes of a copy_to_host that answered Ok.
  virtual void host_free(void* host, uint64_t bytes) { (void)host, (void)bytes; }
};

// Monotonic time, injected so that time-dependent policy is testable.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() = 0;
};

}  // namespace pagefast::policy
