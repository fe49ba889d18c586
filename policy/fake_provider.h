// policy/fake_provider.h: a Provider for tests, beside the interface it
// fakes (Temeraire's mock_virtual_allocator). It emulates one device:
//  - "physical memory" of capacity_bytes, handed out in 2 MiB pages, so
//    that chunk creation fails when the device is full, as cuMemCreate does;
//  - address space reserved from the host (PROT_NONE, never touched);
//  - with Backing::Host, physical pages are pages of one memfd and map()
//    really maps them (MAP_SHARED|MAP_FIXED): a chunk mapped at two
//    addresses aliases for real, and memory is unreadable until
//    set_access() (mprotect), so tests can fill and check device memory
//    from the host. With Backing::None nothing is mapped: large
//    capacities for accounting tests, no fills;
//  - the VMM rules checked on every call (map inside a reservation, on
//    unmapped addresses, within the chunk; unmap of exactly one map;
//    set_access over a fully mapped range; release with no mapping left):
//    a broken rule is counted in violations() instead of crashing;
//  - fault injection per operation (the Nth call, or every call from the
//    Nth on), synchronize() refusals (a capture) and failures;
//  - device work: launch() marks a range busy until the next successful
//    synchronize(); assert_idle() counts a violation if the pool hands out
//    memory that is still busy (reuse before completion).
// Thread-safe (one mutex): the pool calls synchronize() without its locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "policy/provider.h"

namespace pagefast::policy {

class FakeProvider final : public Provider {
 public:
  enum class Backing { None, Host };
  enum class Op { Reserve, Create, Map, SetAccess, Unmap, Release, Sync, HostAlloc, Copy, kCount };

  FakeProvider(uint64_t capacity_bytes, Backing backing);
  ~FakeProvider() override;
  FakeProvider(const FakeProvider&) = delete;
  FakeProvider& operator=(const FakeProvider&) = delete;

  // Provider
  ProviderStatus reserve_address(uint64_t bytes, uint64_t* base_addr) override;
  ProviderStatus create_chunk(Granules granules, ChunkHandle* chunk) override;
  bool release_chunk(ChunkHandle chunk) override;
  ProviderStatus map(uint64_t addr, ChunkHandle chunk, Granules offset, Granules granules) override;
  bool unmap(uint64_t addr, Granules granules) override;
  ProviderStatus set_access(uint64_t addr, Granules granules, const AccessSet& access) override;
  SyncStatus synchronize() override;
  // The capacity not in chunks nor taken directly (take_direct), once
  // set_reports_free(true); "unknown" (false) before, as a provider that
  // cannot tell: the pool then grows without regard to a headroom.
  bool device_free_bytes(uint64_t* free_bytes) override;
  void set_reports_free(bool reports) { reports_free_ = reports; }
  // Sleep's host memory (anonymous mmap with Backing::Host, a one-byte
  // token with None; counted, and host_free checked against it) and
  // copies: memcpy with Backing::Host (the range must be mapped and open),
  // nothing with None. Each copy takes one HostAlloc (to host) and one
  // Copy per piece of set_copy_piece bytes (0, the default: one piece),
  // the units of fault injection; a copy failing after some pieces leaves
  // nothing (to host) or unchanged host memory (from host). A successful
  // copy from host scribbles over the host memory, as a provider that
  // gives its pages back early may leave it.
  void copy_to_host(HostCopy* copies, uint64_t count) override;
  void copy_from_host(HostCopy* copies, uint64_t count) override;
  void host_free(void* host, uint64_t bytes) override;
  void set_copy_piece(uint64_t bytes);
  uint64_t live_host_buffers() const;
  uint64_t host_buffers_made() const;  // over the fake's life

  // Fault injection: the call number `nth` (0-based, counted per op from
  // now) fails with `status`; with persistent, every later call too.
  void fail(Op op, uint64_t nth, ProviderStatus status = ProviderStatus::OutOfMemory, bool persistent = false);
  void clear_faults();
  void set_sync_allowed(bool allowed);  // false: synchronize() answers NotAllowed
  void set_sync_fails(bool fails);
  // false: map() of anything but a whole chunk (at an offset, or a part
  // of it) fails (Failed) and counts a violation, as the H200 refuses
  // them, and maps_at_offset() says so. Default true.
  void set_offset_maps(bool allowed);
  bool maps_at_offset() override;

  // Device work and its checks.
  void launch(uint64_t addr, uint64_t bytes);
  // Counts a violation if [addr, addr + bytes) overlaps busy work.
  void assert_idle(uint64_t addr, uint64_t bytes);

  // Inspection.
  uint64_t calls(Op op) const;
  uint64_t used_bytes() const;  // physical memory in live chunks
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t live_chunks() const;
  uint64_t live_maps() const;
  // The peer devices (AccessSet bits) the map holding addr is open to; 0
  // for an address in no map or one never opened.
  uint64_t peers_at(uint64_t addr) const;
  // The chunk and granule offset in it that the map holding addr shows at
  // addr's granule; false for an address in no map.
  bool physical_at(uint64_t addr, ChunkHandle* chunk, Granules* offset) const;
  uint64_t violations() const;
  std::string violation_log() const;
  // What a driver would still give a program directly (cuMemAlloc): the
  // capacity left. take_direct() takes it, as a pass-through allocation.
  bool take_direct(uint64_t bytes);
  void give_direct(uint64_t bytes);

 private:
  struct PageRun {
    uint64_t page;  // first physical page (2 MiB) in the memfd
    uint64_t pages;
  };
  struct Chunk {
    std::vector<PageRun> runs;
    uint64_t granules = 0;
    int maps = 0;
  };
  struct Mapping {
    uint64_t chunk;
    uint64_t offset_granules;
    uint64_t granules;
    bool accessible = false;
    uint64_t peers = 0;  // AccessSet bits granted, besides the device
  };

  bool inject(Op op, ProviderStatus* status);  // true: this call fails
  void violation(const std::string& what);
  bool inside_reservation(uint64_t addr, uint64_t bytes) const;
  bool range_unmapped(uint64_t addr, uint64_t bytes) const;
  bool take_pages(uint64_t pages, std::vector<PageRun>* runs);
  void give_pages(const std::vector<PageRun>& runs);
  void host_map(uint64_t addr, const Chunk& chunk, uint64_t offset_granules, uint64_t granules);
  void host_protect(uint64_t addr, uint64_t bytes, bool accessible);

  struct Fault {
    bool armed = false;
    uint64_t at = 0;
    bool persistent = false;
    ProviderStatus status = ProviderStatus::OutOfMemory;
  };

  mutable std::mutex mutex_;
  std::atomic<bool> reports_free_{false};
  const uint64_t capacity_bytes_;
  const Backing backing_;
  int memfd_ = -1;
  uint64_t direct_bytes_ = 0;
  std::map<void*, uint64_t> host_buffers_;  // live: address -> bytes
  uint64_t host_buffers_made_ = 0;
  uint64_t copy_piece_ = 0;
  bool copy_one(HostCopy& copy, bool to_host);  // REQUIRES: mutex_ held
  void drop_host(void* host, uint64_t bytes);   // REQUIRES: mutex_ held
  bool range_open(uint64_t addr, uint64_t bytes) const;
  std::map<uint64_t, uint64_t> free_pages_;  // first page -> count
  uint64_t free_page_count_ = 0;
  std::map<uint64_t, uint64_t> reservations_;  // addr -> bytes
  std::map<uint64_t, Chunk> chunks_;
  uint64_t next_chunk_ = 1;
  std::map<uint64_t, Mapping> maps_;   // addr -> mapping
  std::map<uint64_t, uint64_t> busy_;  // addr -> end of device work
  uint64_t calls_[int(Op::kCount)] = {};
  Fault faults_[int(Op::kCount)];
  bool sync_allowed_ = true;
  bool sync_fails_ = false;
  bool offset_maps_ = true;
  uint64_t violations_ = 0;
  std::string violation_log_;
};

}  // namespace pagefast::policy
