// interpose/pool/host_copy_batch.h: the state of one batch of copies
// between device and host memory and of its copy threads (host_copy.cpp
// alone includes it; docs/POOL.md "Sleep and wake").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include "interpose/pool/host_memory.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/real_driver.h"
#include "policy/provider.h"

namespace pagefast::pool::host_copy {

// How many threads copy a batch of `pieces`: min(16, cores) while pieces
// are to be page-locked, else min(8, cores/2), at least 2 (the H100's copy
// back ran at 88-90% of the link with 32 MiB pieces on 8 threads,
// docs/BENCHMARKS.md "Pause and resume against torch_memory_saver").
inline int copy_thread_count(uint64_t pieces, bool pinning) {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
  int n = pinning ? cpus : cpus / 2;
  if (!pinning && n > 8) n = 8;
  if (n < 2) n = 2;
  if (n > VmmProvider::kMaxCopyThreads) n = VmmProvider::kMaxCopyThreads;
  if (uint64_t(n) > pieces) n = int(pieces);
  return n < 1 ? 1 : n;
}

using Buffer = HostMemory::Buffer;
using policy::HostCopy;

struct Piece {
  uint64_t copy;   // index into the batch
  uint64_t index;  // of the piece in its buffer
  uint64_t offset;
  uint64_t bytes;
};

// One batch, shared by its threads.
struct Batch {
  const RealDriver* real = nullptr;
  HostMemory* host = nullptr;
  CUcontext context = nullptr;
  bool to_host = false;
  bool keep = true;
  HostCopy* copies = nullptr;
  std::unique_ptr<Buffer*[]> buffers;  // each copy's host buffer
  std::vector<Piece> pieces;
  std::unique_ptr<std::atomic<uint64_t>[]> left;  // pieces of each copy not yet done
  std::unique_ptr<std::atomic<bool>[]> failed;    // a piece of it failed
  std::atomic<uint64_t> next{0};                  // next piece to take
  // Wake with its ranges made as it goes: each copy's range 0 not yet
  // made, 1 made, 2 refused (the copy fails); null: all made before.
  policy::CopyPreparer* preparer = nullptr;
  std::unique_ptr<std::atomic<uint8_t>[]> made;
  uint64_t count = 0;                    // copies
  std::atomic<bool> pin_refused{false};  // the driver refused to page-lock: ask no more
  // For the debug line: summed over threads.
  std::atomic<uint64_t> wait_ns{0}, pin_ns{0}, host_ns{0}, setup_ns{0};
  std::atomic<uint64_t> pinned_now{0}, staged_pieces{0};
  std::atomic<int> staged{0}, streamed{0}, threads{0};
};

// A copy thread's own: its stream (NULL: synchronous copies) and its
// staging buffer, made on the first piece that needs it.
struct CopyThread {
  Batch& b;
  CUstream stream = nullptr;
  void* staging = nullptr;
  bool staging_tried = false;
};

struct InFlight {
  const Piece* piece = nullptr;
  bool staged = false;
};

}  // namespace pagefast::pool::host_copy
