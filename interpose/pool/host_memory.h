// interpose/pool/host_memory.h: the host memory that sleep with keep
// copies a device's chunks into (docs/POOL.md "Sleep and wake"), one
// HostMemory per VmmProvider. host_copy.cpp moves the bytes; this owns the
// buffers.
//
// Why page-locked, and kept between cycles: a copy between device memory
// and page-locked host memory runs at the speed of the host link; into
// pageable memory it needs a staging buffer and a memcpy, and the first
// touch of fresh memory (its page faults) then bounds the sleep far below
// the link (docs/BENCHMARKS.md "Sleep and wake"). Page-locking costs about
// what the first touch does, so it is paid once: after wake a buffer stays
// mapped and page-locked, idle, and the next sleep copies into it at once.
//
//  - A buffer holds one chunk's copy: anonymous memory, 2 MiB aligned,
//    MADV_HUGEPAGE, MADV_DONTFORK (a fork would copy locked pages into the
//    child, whose pool is off), page-locked in place (its pages faulted
//    in with MADV_POPULATE_WRITE, then cuMemHostRegister, PORTABLE) in
//    pieces of kPieceBytes by the copy threads as they reach each piece,
//    so that on the first sleep pinning one piece overlaps the DMA of
//    others, and the zeroing of fresh pages runs on every thread at once. A piece the driver refuses to page-lock stays pageable: its
//    copy goes through a staging buffer (host_copy.cpp); the next sleep
//    tries again. Nothing is lost either way.
//  - take() (sleep) gives each copy an idle buffer of exactly its bytes,
//    else a fresh one, and first releases the idle buffers that no copy of
//    this sleep can use: page-locked memory never exceeds what one sleep
//    keeps plus what other sleeps of the pool keep at the same time.
//  - give() (host_free, after wake): with keep (PAGEFAST_CONF
//    sleep_host_keep:on, the default) the buffer turns idle; without, it
//    is unregistered and unmapped (done_copying() lets the copy threads
//    unregister and drop its pages in parallel beforehand).
//  - A buffer taken for a copy of a region that gives its host memory
//    back (kSleepHostRelease: PAGEFAST_REGION_HOST_RELEASE) is transient:
//    released after wake whatever sleep_host_keep says.
//  - release_idle() (pagefast_pool_trim): every idle buffer given back.
//  - prelock() (the trim thread, for regions that keep their contents):
//    buffers of the sizes their next sleep will copy, mapped and
//    page-locked ahead, idle until that sleep takes them; take() then keeps
//    idle buffers it does not use as long as all stay under the bound.
//  - At exit nothing happens: buffers leak with the process, and no
//    destructor calls the driver.
//
// Thread safety: take/give/release_idle/find/figures under one mutex (not
// on any hot path: one call per sleep or wake, or per chunk; hash maps, so
// a pool of many small chunks costs no scan per chunk). pin() and
// done_copying() run on copy threads on distinct pieces or buffers of a
// batch, lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "interpose/real_driver.h"

namespace pagefast::pool {

class HostMemory {
 public:
  static constexpr uint64_t kPieceBytes = 32ull << 20;  // also the copies' piece

  struct Buffer {
    char* base = nullptr;
    uint64_t bytes = 0;
    uint64_t pieces = 0;
    std::unique_ptr<std::atomic<bool>[]> pinned;  // per piece: registered
    bool in_use = false;                          // under the mutex
    bool ahead = false;                           // made by prelock and not yet taken by a sleep (under the mutex)
    bool transient = false;  // for a copy of mode kSleepHostRelease: given back after wake, never idle
  };

  struct Figures {
    uint64_t mapped_bytes = 0;  // every buffer's bytes
    uint64_t pinned_bytes = 0;  // of those, page-locked
    uint64_t idle_bytes = 0;    // of mapped_bytes, in no copy (kept for the next sleep)
    uint64_t buffers = 0;
  };

  explicit HostMemory(const RealDriver* real) : real_(real) {}
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // Buffers for one sleep's copies: out[i] of bytes[i] bytes (an idle one
  // of that size, else fresh mapped memory, no page touched), or NULL when
  // the mmap was refused (that copy then fails: out of memory). Idle
  // buffers no copy takes are released first.
  void take(const uint64_t* bytes, uint64_t count, Buffer** out);
  // The buffer that starts at `host`, or NULL.
  Buffer* find(const void* host);
  // Page-locks piece `index` of `buffer` unless it is already. false: it
  // stays pageable (the driver refused, or has no cuMemHostRegister).
  bool pin(Buffer& buffer, uint64_t index);
  static bool pinned(const Buffer& buffer, uint64_t index) {
    return buffer.pinned[index].load(std::memory_order_relaxed);
  }
  static uint64_t piece_bytes(const Buffer& buffer, uint64_t index) {
    const uint64_t offset = index * kPieceBytes;
    return buffer.bytes - offset < kPieceBytes ? buffer.bytes - offset : kPieceBytes;
  }
  // The buffer's contents were copied back and are not needed any more:
  // without keep, its pieces are unregistered and its pages dropped now
  // (on a copy thread, in parallel with others); with keep, nothing.
  void done_copying(Buffer& buffer, bool keep);
  // After wake, or a sleep that failed for this buffer's copy: idle (keep)
  // or released. REQUIRES: `buffer` in use.
  void give(Buffer& buffer, bool keep);
  // Releases every idle buffer; returns the bytes.
  uint64_t release_idle();
  // Page-locked ahead (docs/SLEEP.md "Page-locked ahead"): idle,
  // page-locked buffers of the sizes a coming sleep will ask for (bytes[i]
  // where no idle buffer of that size is there yet), at most `budget`
  // bytes on this call, all buffers together at most `bound`. Does nothing
  // while a sleep or wake holds buffers. Maps and page-locks outside the
  // lock. Buffers made ahead earlier that none of `bytes` matches any more
  // (the region's layout changed) go back first. REQUIRES: a context
  // current (cuMemHostRegister). Returns the bytes made ready.
  uint64_t prelock(const uint64_t* bytes, uint64_t count, uint64_t budget, uint64_t bound);
  // Idle buffers that no copy of a sleep takes go back only as far as the
  // buffers would hold more than `bytes` (the prelock bound: another
  // region's buffers made ahead stay); 0: all of them.
  void set_keep_bound(uint64_t bytes) {
    std::lock_guard<std::mutex> guard(mutex_);
    keep_bound_ = bytes;
  }
  Figures figures();

 private:
  Buffer* map_buffer(uint64_t bytes);         // REQUIRES: mutex_ held
  static Buffer* new_buffer(uint64_t bytes);  // mapped, no page touched, not listed
  // take() under the lock; the buffers it lets go are added to *gone.
  void take_locked(const uint64_t* bytes, uint64_t count, Buffer** out, std::vector<Buffer*>* gone);
  // REQUIRES: mutex_ held. Lets idle buffers go until, with `fresh` bytes
  // more, the buffers hold at most keep_bound_ (all of them without one).
  // Buffers let go (here and below) are off every list and figure and
  // added to *gone; the caller unregisters and unmaps them with
  // unmap_unlisted once the lock is let go (the driver's calls are slow).
  void release_idle_past_locked(uint64_t fresh, std::vector<Buffer*>* gone);
  uint64_t release_idle_locked(std::vector<Buffer*>* gone);
  void drop_locked(Buffer* buffer, std::vector<Buffer*>* gone);  // a listed, not idle buffer
  // Unregisters, unmaps and deletes a buffer on no list that mapped_bytes_
  // no longer counts.
  void unmap_unlisted(Buffer* buffer);
  void unregister_pieces(Buffer& buffer);

  const RealDriver* const real_;
  std::mutex mutex_;
  // Under mutex_: every buffer by its base, the idle ones by their bytes.
  std::unordered_map<const void*, Buffer*> by_base_;
  std::unordered_multimap<uint64_t, Buffer*> idle_;
  uint64_t mapped_bytes_ = 0, idle_bytes_ = 0;
  uint64_t keep_bound_ = 0;
  std::atomic<uint64_t> pinned_bytes_{0};
};

}  // namespace pagefast::pool
