// interpose/pool/host_copy.cpp: VmmProvider's copies for sleep with keep
// (docs/POOL.md "Sleep and wake": the copy path and what it costs).
//
// The copies run at the speed of the host link when both ends are ready
// for DMA: device memory, and page-locked host memory. So:
//  - each chunk's copy lives in a buffer of host_memory.h: page-locked in
//    place, piece by piece, the first time a sleep copies into it, and
//    kept page-locked after wake for the next sleep (sleep_host_keep);
//  - a copy thread takes a piece (kPieceBytes), page-locks it if it is
//    not yet, then waits for the DMA of its previous piece, then starts
//    this one's on its own non-blocking stream (the program's streams are
//    not waited for): page-locking overlaps the DMA, and with several
//    threads several copies are in flight, so the copy engines stay busy.
//    Each copy stays within its piece, both ways: a piece is page-locked
//    on its own (cuMemHostRegister), and the driver refuses a copy whose
//    host side runs from one registration into the next
//    (docs/DRIVER-FACTS.md "Copies and page-locked host memory");
//  - min(16, cores) threads while pieces are to be page-locked (the
//    kernel's share of the work is CPU time: zeroing and locking pages),
//    else min(8, cores/2), at least 2; the calling thread is one of them,
//    the others are service threads (signals blocked) joined before the
//    call returns.
// Whatever fails degrades, piece by piece, and no content is lost: a
// piece the driver refuses to page-lock goes through a pinned staging
// buffer of its thread (allocated on the first such piece) and a memcpy;
// no staging buffer, the driver's own pageable copies; no stream,
// synchronous copies; no thread, the caller does it all. A copy that fails
// fails its chunk only (the policy keeps that chunk resident, or asleep),
// and its other pieces are skipped.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "interpose/driver.h"
#include "interpose/pool/disk_copy.h"
#include "interpose/pool/host_copy_batch.h"
#include "interpose/pool/process.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/service_thread.h"
#include "policy/clock.h"
#include "policy/sleep_gate.h"

namespace pagefast::pool {
namespace {

using host_copy::Batch;
using host_copy::copy_thread_count;
using host_copy::CopyThread;
using host_copy::InFlight;
using host_copy::Piece;
using policy::HostCopy;
using policy::ProviderStatus;
using Buffer = HostMemory::Buffer;

uint64_t now_ns() { return policy::monotonic_now_ns(); }

// Whether sleep's page-locked host memory stays after wake (the option).
bool keep_host_memory() { return g_process.config.sleep_host_keep; }

void* staging_buffer(CopyThread& w) {
  if (w.staging_tried) return w.staging;
  w.staging_tried = true;
  if (driver::has(w.b.real, &RealDriver::cuMemFreeHost) &&
      driver::host_alloc(w.b.real, &w.staging, HostMemory::kPieceBytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
    w.staging = nullptr;
  if (w.staging) w.b.staged.fetch_add(1, std::memory_order_relaxed);
  return w.staging;
}

// Starts one piece's copy: straight from or to page-locked host memory,
// else through the staging buffer, else the driver's own pageable copy.
CUresult start_piece(CopyThread& w, const Piece& p, bool pinned, InFlight* flight) {
  Batch& b = w.b;
  const RealDriver* real = b.real;
  char* host = b.buffers[p.copy]->base + p.offset;
  const CUdeviceptr device = b.copies[p.copy].addr + p.offset;
  void* staging = pinned ? nullptr : staging_buffer(w);
  flight->piece = &p;
  flight->staged = staging != nullptr;
  if (staging) b.staged_pieces.fetch_add(1, std::memory_order_relaxed);
  if (b.to_host) {
    void* dst = staging ? staging : host;
    return w.stream ? driver::copy_dtoh_async(real, dst, device, p.bytes, w.stream)
                    : driver::copy_dtoh(real, dst, device, p.bytes);
  }
  const void* src = host;
  if (staging) {
    const uint64_t t0 = now_ns();
    std::memcpy(staging, host, p.bytes);
    b.host_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    src = staging;
  }
  return w.stream ? driver::copy_htod_async(real, device, src, p.bytes, w.stream)
                  : driver::copy_htod(real, device, src, p.bytes);
}

// Waits for a started piece; to host through staging, moves it on.
bool finish_piece(CopyThread& w, const InFlight& flight) {
  Batch& b = w.b;
  const uint64_t t0 = now_ns();
  const CUresult r = w.stream ? driver::stream_synchronize(b.real, w.stream) : CUDA_SUCCESS;
  const uint64_t t1 = now_ns();
  b.wait_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  if (r != CUDA_SUCCESS) return false;
  if (b.to_host && flight.staged) {
    const Piece& p = *flight.piece;
    std::memcpy(b.buffers[p.copy]->base + p.offset, w.staging, p.bytes);
    b.host_ns.fetch_add(now_ns() - t1, std::memory_order_relaxed);
  }
  return true;
}

// A piece's answer. The last piece of a chunk copied back: its host
// memory is not needed any more (copy_from_host's contract); without
// keep it is given back now, in parallel, rather than in host_free
// (unless the copy holds it: kSleepHoldHost).
void settle_piece(Batch& b, const Piece& p, bool ok) {
  if (!ok) {
    b.failed[p.copy].store(true, std::memory_order_relaxed);
    return;
  }
  if (b.left[p.copy].fetch_sub(1, std::memory_order_acq_rel) == 1 && !b.to_host)
    b.host->done_copying(*b.buffers[p.copy], b.keep || (b.copies[p.copy].mode & policy::kSleepHoldHost));
}

// Page-locks the piece's host memory (to host only: at wake a piece is
// pinned or not as the sleep left it). Returns whether it is page-locked.
bool pin_piece(Batch& b, const Piece& p) {
  Buffer& buffer = *b.buffers[p.copy];
  if (HostMemory::pinned(buffer, p.index)) return true;
  if (!b.to_host || b.pin_refused.load(std::memory_order_relaxed)) return false;
  const uint64_t t0 = now_ns();
  const bool pinned = b.host->pin(buffer, p.index);
  b.pin_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  if (pinned) b.pinned_now.fetch_add(1, std::memory_order_relaxed);
  else b.pin_refused.store(true, std::memory_order_relaxed);
  return pinned;
}

// Waits until the range of the piece's copy is made (the calling thread
// makes them in order, run_batch); false: it was refused.
bool wait_made(Batch& b, const Piece& p) {
  uint8_t state;
  while ((state = b.made[p.copy].load(std::memory_order_acquire)) == 0) sched_yield();
  return state == 1;
}

// A copy thread's life: its stream, pieces until none is left (one in
// flight while the next is page-locked), then stream and staging buffer
// freed. REQUIRES: b.context current.
void run_pieces(Batch& b) {
  const RealDriver* real = b.real;
  const uint64_t t0 = now_ns();
  CopyThread w{b};
  const bool async = b.to_host ? driver::has(real, &RealDriver::cuMemcpyDtoHAsync_v2)
                               : driver::has(real, &RealDriver::cuMemcpyHtoDAsync_v2);
  if (async && driver::has(real, &RealDriver::cuStreamSynchronize, &RealDriver::cuStreamDestroy_v2) &&
      driver::stream_create(real, &w.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    w.stream = nullptr;
  b.setup_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  b.threads.fetch_add(1, std::memory_order_relaxed);
  if (w.stream) b.streamed.fetch_add(1, std::memory_order_relaxed);
  InFlight prev;
  while (true) {
    const uint64_t i = b.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= b.pieces.size()) break;
    const Piece& p = b.pieces[i];
    if (b.made && !wait_made(b, p)) {
      settle_piece(b, p, false);
      continue;
    }
    if (b.failed[p.copy].load(std::memory_order_relaxed)) continue;  // that chunk's answer is known
    const bool pinned = pin_piece(b, p);
    if (prev.piece) settle_piece(b, *prev.piece, finish_piece(w, prev));
    prev = InFlight{};
    InFlight flight;
    if (start_piece(w, p, pinned, &flight) == CUDA_SUCCESS) prev = flight;
    else settle_piece(b, p, false);
  }
  if (prev.piece) settle_piece(b, *prev.piece, finish_piece(w, prev));
  if (w.staging) driver::free_host(real, w.staging);
  if (w.stream) driver::stream_destroy(real, w.stream);
}

void* copy_thread_main(void* arg) {
  Batch& b = *static_cast<Batch*>(arg);
  // A new thread has no current context; it dies with this one current.
  if (driver::ctx_set_current(b.real, b.context) == CUDA_SUCCESS) run_pieces(b);
  return nullptr;
}

// A batch's host buffers (to host: taken here, on this thread: an idle
// buffer is a lookup, a fresh one an mmap that touches no page, and a
// refused one decides that chunk before any copy) and its pieces. Adds
// the time that took to *take_ns. false: the batch cannot run (nothing
// was planned).
bool plan_batch(Batch& b, uint64_t count, uint64_t bytes, uint64_t* take_ns) {
  b.left.reset(new (std::nothrow) std::atomic<uint64_t>[count]);
  b.failed.reset(new (std::nothrow) std::atomic<bool>[count]);
  b.buffers.reset(new (std::nothrow) Buffer*[count]);
  std::unique_ptr<uint64_t[]> sizes(new (std::nothrow) uint64_t[count]);
  if (!b.left || !b.failed || !b.buffers || !sizes) return false;
  try {
    b.pieces.reserve(count + bytes / HostMemory::kPieceBytes);
  } catch (...) {
    return false;
  }
  const uint64_t t0 = now_ns();
  if (b.to_host) {
    for (uint64_t i = 0; i < count; ++i) sizes[i] = b.copies[i].bytes;
    b.host->take(sizes.get(), count, b.buffers.get());
  } else {
    for (uint64_t i = 0; i < count; ++i) b.buffers[i] = b.host->find(b.copies[i].host);
  }
  *take_ns += now_ns() - t0;
  for (uint64_t i = 0; i < count; ++i) {
    HostCopy& copy = b.copies[i];
    Buffer* buffer = b.buffers[i];
    if (!buffer || buffer->bytes != copy.bytes) {  // to host: no memory; back: not ours
      if (b.to_host) copy.status = ProviderStatus::OutOfMemory;
      b.buffers[i] = b.to_host ? buffer : nullptr;
      b.failed[i].store(true, std::memory_order_relaxed);
      b.left[i].store(1, std::memory_order_relaxed);
      continue;
    }
    if (b.to_host) {
      copy.host = buffer->base;
      buffer->transient = (copy.mode & policy::kSleepHostRelease) != 0;
    }
    b.failed[i].store(false, std::memory_order_relaxed);
    // One copy per piece: never across two page-locked pieces (above).
    for (uint64_t n = 0; n < buffer->pieces; ++n)
      b.pieces.push_back(Piece{i, n, n * HostMemory::kPieceBytes, HostMemory::piece_bytes(*buffer, n)});
    b.left[i].store(buffer->pieces, std::memory_order_relaxed);
  }
  return true;
}

// Whether a piece of the batch is still to be page-locked.
bool needs_pinning(const Batch& b) {
  if (!b.to_host) return false;
  for (const Piece& p : b.pieces)
    if (!HostMemory::pinned(*b.buffers[p.copy], p.index)) return true;
  return false;
}

// Runs the batch's pieces on a few copy threads and this one. Returns the
// time it took.
uint64_t run_batch(Batch& b) {
  const int threads = copy_thread_count(b.pieces.size(), needs_pinning(b));
  pthread_t started[VmmProvider::kMaxCopyThreads];
  int started_count = 0;
  for (int t = 1; t < threads; ++t)
    if (start_service_thread(&started[started_count], &copy_thread_main, &b, "pagefast-copy") == 0) ++started_count;
  const uint64_t t0 = now_ns();
  // A wake's ranges: made here, in order, while the threads copy those made.
  if (b.made) {
    for (uint64_t i = 0; i < b.count; ++i) b.made[i].store(b.preparer->prepare(i) ? 1 : 2, std::memory_order_release);
    b.preparer->prepared();
  }
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

// Each copy's answer: all its pieces done, or nothing of it kept (to
// host: its buffer goes back, idle or released). Returns the bytes done;
// *failed_copies counts the others.
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
      if (ready && b.buffers[i]) b.host->give(*b.buffers[i], b.keep);
      copy.host = nullptr;
      if (copy.status != ProviderStatus::OutOfMemory) copy.status = ProviderStatus::Failed;
    } else {
      copy.status = ProviderStatus::Failed;
    }
  }
  return done_bytes;
}

double gib_per_s(uint64_t bytes, uint64_t ns) {
  return ns ? double(bytes) / double(1ull << 30) / (double(ns) * 1e-9) : 0.0;
}

}  // namespace

void VmmProvider::copy_batch(HostCopy* copies, uint64_t count, bool to_host, policy::CopyPreparer* preparer) {
  const uint64_t start = now_ns();
  Batch b;
  b.real = real_;
  b.host = &host_memory_;
  b.to_host = to_host;
  b.keep = keep_host_memory();
  b.copies = copies;
  b.context = copy_context();
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < count; ++i) bytes += copies[i].bytes;
  const bool can =
      b.context && driver::has(real_, &RealDriver::cuCtxGetCurrent) &&
      (to_host ? driver::has(real_, &RealDriver::cuMemcpyDtoH_v2) : driver::has(real_, &RealDriver::cuMemcpyHtoD_v2));
  uint64_t take_ns = 0;
  const bool ready = can && plan_batch(b, count, bytes, &take_ns);
  b.count = count;
  if (preparer) {
    b.preparer = preparer;
    b.made.reset(new (std::nothrow) std::atomic<uint8_t>[count]);
    for (uint64_t i = 0; b.made && i < count; ++i) b.made[i].store(0, std::memory_order_relaxed);
  }
  // A wake whose ranges the copy threads will not make: made here first
  // (each copy then fails, or copies as planned).
  const bool runs = ready && !b.pieces.empty();
  if (preparer && (!runs || !b.made)) {
    b.made.reset();
    for (uint64_t i = 0; i < count; ++i)
      if (!preparer->prepare(i) && ready) b.failed[i].store(true, std::memory_order_relaxed);
    preparer->prepared();
  }
  const uint64_t run_ns = runs ? run_batch(b) : 0;
  uint64_t failed_copies = 0;
  const uint64_t done_bytes = settle_batch(b, count, ready, &failed_copies);
  if (!log_) return;
  const uint64_t total_ns = now_ns() - start;
  const HostMemory::Figures host = host_memory_.figures();
  char line[640];
  std::snprintf(line, sizeof line,
                "device %d: copy %s host: %" PRIu64 " MiB of %" PRIu64 " chunks in %" PRIu64
                " ms (%.1f GiB/s), %" PRIu64 " failed; %" PRIu64 " pieces of up to %" PRIu64
                " MiB, %d threads (%d with a stream, %d with a staging buffer), %" PRIu64
                " pieces page-locked now, %" PRIu64 " staged; buffers %" PRIu64 " ms, streams %" PRIu64
                " ms, summed over threads: page-locking %" PRIu64 " ms, DMA waits %" PRIu64
                " ms, staging memcpy %" PRIu64 " ms; copying %" PRIu64 " ms; host memory %" PRIu64 " MiB (%" PRIu64
                " MiB page-locked, %" PRIu64 " MiB idle)",
                int(device_), to_host ? "to" : "from", done_bytes >> 20, count, total_ns / 1000000,
                gib_per_s(done_bytes, total_ns), failed_copies, uint64_t(b.pieces.size()), kCopyPieceBytes >> 20,
                b.threads.load(), b.streamed.load(), b.staged.load(), b.pinned_now.load(), b.staged_pieces.load(),
                take_ns / 1000000, b.setup_ns.load() / 1000000, b.pin_ns.load() / 1000000, b.wait_ns.load() / 1000000,
                b.host_ns.load() / 1000000, run_ns / 1000000, host.mapped_bytes >> 20, host.pinned_bytes >> 20,
                host.idle_bytes >> 20);
  log_(LogLevel::Debug, line);
}

void VmmProvider::host_free(void* host, uint64_t bytes) {
  (void)bytes;
  if (host && disk::owns(host)) return disk::drop(host);
  if (HostMemory::Buffer* buffer = host ? host_memory_.find(host) : nullptr)
    host_memory_.give(*buffer, keep_host_memory());
}

uint64_t VmmProvider::release_host_memory() { return host_memory_.release_idle(); }

HostMemory::Figures VmmProvider::host_memory_figures() { return host_memory_.figures(); }

}  // namespace pagefast::pool
