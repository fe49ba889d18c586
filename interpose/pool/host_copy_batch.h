// interpose/pool/host_copy_batch.h: the state of one batch of copies
// between device and host memory and of its copy threads (host_copy.cpp
// alone includes it; docs/POOL.md "Sleep and wake").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "interpose/pool/host_memory.h"
#include "interpose/real_driver.h"
#include "policy/provider.h"

namespace pagefast::pool::host_copy {

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
