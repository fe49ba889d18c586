// interpose/pool/host_copy.cpp: VmmProvider's copies for sleep with keep
// (docs/POOL.md "Sleep and wake": the copy path and what it costs).
//
// What made the first version slow (1.5 GiB/s to host on an H200 whose
// pinned copies run at 51 GiB/s) was the host memory, not the copies: one
// cuMemHostAlloc per chunk has the kernel zero and pin it all, and
// cuMemFreeHost unpins it again. Here:
//  - each chunk's copy lives in ordinary anonymous memory (mmap, 2 MiB
//    aligned, MADV_HUGEPAGE: first-touch faults of huge pages, and a cheap
//    give-back), munmapped by host_free; nothing is pinned per chunk;
//  - data moves in pieces of kCopyPieceBytes through one pinned staging
//    buffer per copy thread, allocated when the batch starts and freed at
//    its end: a thread waits for the DMA of its piece (its own
//    non-blocking stream, so the program's streams are not waited for)
//    while the others copy theirs between staging and host memory (and,
//    to host, take the page faults), so the copy engine stays busy;
//  - min(8, cores/2) threads (at least 2), the calling thread one of
//    them; the others are service threads (signals blocked) joined before
//    the call returns;
//  - to host memory after a successful copy back (wake) its pages go at
//    once (MADV_DONTNEED, by the thread that finished the chunk, in
//    parallel), so host_free's munmap finds little to do.
// Whatever fails degrades: no stream, synchronous copies; no staging
// buffer, the driver's own pageable copies; no thread, the caller does it
// all; a piece that fails fails its chunk only (the policy keeps that chunk
// resident, or asleep), and its other pieces are skipped.
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "interpose/driver.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/service_thread.h"
#include "policy/clock.h"

namespace pagefast::pool {
namespace {

using policy::HostCopy;
using policy::ProviderStatus;

constexpr uint64_t kHostAlign = 2ull << 20;  // a huge page

uint64_t now_ns() { return policy::monotonic_now_ns(); }

// Anonymous memory for one chunk's copy, 2 MiB-aligned so that
// transparent huge pages can back all of it. Not MAP_NORESERVE: every
// byte is written at once, so the commit charge is the truth, and under
// strict overcommit the mmap then fails here (the chunk stays resident)
// rather than the OOM killer striking mid-copy.
void* map_host(uint64_t bytes) {
  const uint64_t total = bytes + kHostAlign;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uint64_t start = uint64_t(p), aligned = (start + kHostAlign - 1) & ~(kHostAlign - 1);
  if (aligned > start) munmap(p, aligned - start);
  const uint64_t tail = start + total - (aligned + bytes);
  if (tail) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: THP off is fine too
#endif
  return reinterpret_cast<void*>(aligned);
}

int copy_thread_count(uint64_t pieces) {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
  int n = cpus / 2;
  if (n < 2) n = 2;
  if (n > VmmProvider::kMaxCopyThreads) n = VmmProvider::kMaxCopyThreads;
  if (uint64_t(n) > pieces) n = int(pieces);
  return n < 1 ? 1 : n;
}

struct Piece {
  uint64_t copy;  // index into the batch
  uint64_t offset;
  uint64_t bytes;
};

// One batch, shared by its threads.
struct Batch {
  const RealDriver* real = nullptr;
  CUcontext context = nullptr;
  bool to_host = false;
  HostCopy* copies = nullptr;
  std::vector<Piece> pieces;
  uint64_t largest_piece = 0;                     // the staging buffers' size
  std::unique_ptr<std::atomic<uint64_t>[]> left;  // pieces of each copy not yet done
  std::unique_ptr<std::atomic<bool>[]> failed;    // a piece of it failed
  std::atomic<uint64_t> next{0};                  // next piece to take
  // For the debug line: summed over threads.
  std::atomic<uint64_t> dma_ns{0}, host_ns{0}, setup_ns{0};
  std::atomic<int> staged{0}, streamed{0}, threads{0};
};

// One piece through `staging` (NULL: straight to/from host memory, which
// the driver then stages itself). `stream` NULL: synchronous copies.
bool move_piece(Batch& b, CUstream stream, void* staging, char* host, CUdeviceptr device, uint64_t n) {
  const RealDriver* real = b.real;
  CUresult r;
  if (b.to_host) {
    void* dst = staging ? staging : host;
    const uint64_t t0 = now_ns();
    r = stream ? driver::copy_dtoh_async(real, dst, device, n, stream) : driver::copy_dtoh(real, dst, device, n);
    if (r == CUDA_SUCCESS && stream) r = driver::stream_synchronize(real, stream);
    const uint64_t t1 = now_ns();
    b.dma_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    if (r != CUDA_SUCCESS) return false;
    if (staging) {
      std::memcpy(host, staging, n);
      b.host_ns.fetch_add(now_ns() - t1, std::memory_order_relaxed);
    }
    return true;
  }
  const void* src = host;
  const uint64_t t0 = now_ns();
  if (staging) {
    std::memcpy(staging, host, n);
    src = staging;
  }
  const uint64_t t1 = now_ns();
  b.host_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  r = stream ? driver::copy_htod_async(real, device, src, n, stream) : driver::copy_htod(real, device, src, n);
  if (r == CUDA_SUCCESS && stream) r = driver::stream_synchronize(real, stream);
  b.dma_ns.fetch_add(now_ns() - t1, std::memory_order_relaxed);
  return r == CUDA_SUCCESS;
}

// A copy thread's life: its stream and staging buffer, pieces until none
// is left, then both freed. REQUIRES: b.context current.
void run_pieces(Batch& b) {
  const RealDriver* real = b.real;
  const uint64_t t0 = now_ns();
  CUstream stream = nullptr;
  const bool async = b.to_host ? driver::has(real, &RealDriver::cuMemcpyDtoHAsync_v2)
                               : driver::has(real, &RealDriver::cuMemcpyHtoDAsync_v2);
  if (async && driver::has(real, &RealDriver::cuStreamSynchronize, &RealDriver::cuStreamDestroy_v2) &&
      driver::stream_create(real, &stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    stream = nullptr;
  void* staging = nullptr;
  if (driver::has(real, &RealDriver::cuMemFreeHost) &&
      driver::host_alloc(real, &staging, b.largest_piece, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
    staging = nullptr;
  b.setup_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  b.threads.fetch_add(1, std::memory_order_relaxed);
  if (stream) b.streamed.fetch_add(1, std::memory_order_relaxed);
  if (staging) b.staged.fetch_add(1, std::memory_order_relaxed);
  while (true) {
    const uint64_t i = b.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= b.pieces.size()) break;
    const Piece& p = b.pieces[i];
    if (b.failed[p.copy].load(std::memory_order_relaxed)) continue;  // that chunk's answer is known
    HostCopy& copy = b.copies[p.copy];
    char* host = static_cast<char*>(copy.host) + p.offset;
    if (!move_piece(b, stream, staging, host, copy.addr + p.offset, p.bytes)) {
      b.failed[p.copy].store(true, std::memory_order_relaxed);
      continue;
    }
    // The last piece of a chunk copied back: its host pages are not needed
    // any more (copy_from_host's contract); give them back now, in
    // parallel, rather than in host_free's munmap on the caller's thread.
    if (b.left[p.copy].fetch_sub(1, std::memory_order_acq_rel) == 1 && !b.to_host)
      madvise(copy.host, copy.bytes, MADV_DONTNEED);
  }
  if (staging) driver::free_host(real, staging);
  if (stream) driver::stream_destroy(real, stream);
}

void* copy_thread_main(void* arg) {
  Batch& b = *static_cast<Batch*>(arg);
  // A new thread has no current context; it dies with this one current.
  if (driver::ctx_set_current(b.real, b.context) == CUDA_SUCCESS) run_pieces(b);
  return nullptr;
}

}  // namespace

CUcontext VmmProvider::copy_context() {
  {
    std::lock_guard<std::mutex> guard(contexts_mutex_);
    if (context_count_) return contexts_[0];
  }
  CUcontext current = nullptr;
  driver::ctx_get_current(real_, &current);
  return current;
}

namespace {

// A batch's host memory (to_host: mapped here, on this thread: the mmaps
// are cheap, no page is touched yet, and a refused one decides that chunk
// before any copy) and its pieces. Adds the time the mmaps took to
// *host_map_ns. false: the batch cannot run (nothing was planned).
bool plan_batch(Batch& b, uint64_t count, uint64_t bytes, uint64_t* host_map_ns) {
  b.left.reset(new (std::nothrow) std::atomic<uint64_t>[count]);
  b.failed.reset(new (std::nothrow) std::atomic<bool>[count]);
  if (!b.left || !b.failed) return false;
  try {
    b.pieces.reserve(count + bytes / VmmProvider::kCopyPieceBytes);
  } catch (...) {
    return false;
  }
  for (uint64_t i = 0; i < count; ++i) {
    HostCopy& copy = b.copies[i];
    if (b.to_host) {
      const uint64_t t0 = now_ns();
      copy.host = map_host(copy.bytes);
      *host_map_ns += now_ns() - t0;
      if (!copy.host) {
        copy.status = ProviderStatus::OutOfMemory;
        b.failed[i].store(true, std::memory_order_relaxed);
        b.left[i].store(1, std::memory_order_relaxed);
        continue;
      }
    }
    b.failed[i].store(false, std::memory_order_relaxed);
    uint64_t n = 0;
    for (uint64_t offset = 0; offset < copy.bytes; offset += VmmProvider::kCopyPieceBytes, ++n) {
      const uint64_t piece =
          copy.bytes - offset < VmmProvider::kCopyPieceBytes ? copy.bytes - offset : VmmProvider::kCopyPieceBytes;
      b.pieces.push_back(Piece{i, offset, piece});
      if (piece > b.largest_piece) b.largest_piece = piece;
    }
    b.left[i].store(n, std::memory_order_relaxed);
  }
  return true;
}

// Runs the batch's pieces on a few copy threads and this one. Returns the
// time it took.
uint64_t run_batch(Batch& b) {
  const int threads = copy_thread_count(b.pieces.size());
  pthread_t started[VmmProvider::kMaxCopyThreads];
  int started_count = 0;
  for (int t = 1; t < threads; ++t)
    if (start_service_thread(&started[started_count], &copy_thread_main, &b, "pagefast-copy") == 0) ++started_count;
  const uint64_t t0 = now_ns();
  // This thread copies too, in the pool's context (pushed if another is
  // current, and popped again).
  CUcontext current = nullptr;
  driver::ctx_get_current(b.real, &current);
  if (current == b.context) {
    run_pieces(b);
  } else if (driver::has_context_push(b.real) && driver::ctx_push(b.real, b.context) == CUDA_SUCCESS) {
    run_pieces(b);
    CUcontext popped = nullptr;
    driver::ctx_pop(b.real, &popped);
  }
  for (int t = 0; t < started_count; ++t) pthread_join(started[t], nullptr);
  return now_ns() - t0;
}

// Each copy's answer: all its pieces done, or nothing of it kept. Returns
// the bytes done; *failed_copies counts the others.
uint64_t settle_batch(Batch& b, uint64_t count, bool ready, uint64_t* failed_copies) {
  uint64_t done_bytes = 0;
  for (uint64_t i = 0; i < count; ++i) {
    HostCopy& copy = b.copies[i];
    const bool ok =
        ready && !b.failed[i].load(std::memory_order_relaxed) && b.left[i].load(std::memory_order_relaxed) == 0;
    if (ok) {
      copy.status = ProviderStatus::Ok;
      done_bytes += copy.bytes;
      continue;
    }
    ++*failed_copies;
    if (b.to_host) {
      if (copy.host) munmap(copy.host, copy.bytes);
      copy.host = nullptr;
      if (copy.status != ProviderStatus::OutOfMemory) copy.status = ProviderStatus::Failed;
    } else {
      copy.status = ProviderStatus::Failed;
    }
  }
  return done_bytes;
}

}  // namespace

void VmmProvider::copy_batch(HostCopy* copies, uint64_t count, bool to_host) {
  const uint64_t start = now_ns();
  Batch b;
  b.real = real_;
  b.to_host = to_host;
  b.copies = copies;
  b.context = copy_context();
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < count; ++i) bytes += copies[i].bytes;
  const bool can =
      b.context && driver::has(real_, &RealDriver::cuCtxGetCurrent) &&
      (to_host ? driver::has(real_, &RealDriver::cuMemcpyDtoH_v2) : driver::has(real_, &RealDriver::cuMemcpyHtoD_v2));
  uint64_t host_map_ns = 0;
  const bool ready = can && plan_batch(b, count, bytes, &host_map_ns);
  const uint64_t run_ns = ready && !b.pieces.empty() ? run_batch(b) : 0;
  uint64_t failed_copies = 0;
  const uint64_t done_bytes = settle_batch(b, count, ready, &failed_copies);
  if (log_) {
    const uint64_t total_ns = now_ns() - start;
    char line[512];
    std::snprintf(line, sizeof line,
                  "device %d: copy %s host: %" PRIu64 " MiB of %" PRIu64 " chunks in %" PRIu64
                  " ms (%.1f GiB/s), %" PRIu64 " failed; %" PRIu64 " pieces of up to %" PRIu64
                  " MiB, %d threads (%d with a pinned staging buffer, %d with a stream), host mmap %" PRIu64
                  " ms, staging and streams %" PRIu64 " ms, summed over threads: DMA %" PRIu64
                  " ms, host memcpy %" PRIu64 " ms, copying %" PRIu64 " ms",
                  int(device_), to_host ? "to" : "from", done_bytes >> 20, count, total_ns / 1000000,
                  total_ns ? double(done_bytes) / double(1ull << 30) / (double(total_ns) * 1e-9) : 0.0, failed_copies,
                  uint64_t(b.pieces.size()), kCopyPieceBytes >> 20, b.threads.load(), b.staged.load(),
                  b.streamed.load(), host_map_ns / 1000000, b.setup_ns.load() / 1000000, b.dma_ns.load() / 1000000,
                  b.host_ns.load() / 1000000, run_ns / 1000000);
    log_(LogLevel::Debug, line);
  }
}

void VmmProvider::copy_to_host(HostCopy* copies, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    copies[i].host = nullptr;
    copies[i].status = ProviderStatus::Failed;
  }
  copy_batch(copies, count, true);
}

void VmmProvider::copy_from_host(HostCopy* copies, uint64_t count) { copy_batch(copies, count, false); }

void VmmProvider::host_free(void* host, uint64_t bytes) {
  if (host) munmap(host, bytes);
}

}  // namespace pagefast::pool
