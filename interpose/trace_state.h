// interpose/trace_state.h: the trace recorder's process-wide state
// (interpose/trace.cpp), held by the process object
// (interpose/pool/process.h, docs/DESIGN.md "Process state"). Constant-
// initialised, never destroyed; the rings are made per thread and never
// freed (trace.cpp).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "interpose/thread_records.h"

namespace pagefast::trace_format {
struct Record;
}

namespace pagefast::trace {

namespace detail {
struct Ring;
}

struct State {
  // Calls are being recorded (trace.h on(): the hooks' one load).
  std::atomic<bool> on{false};
  char* path = nullptr;  // PAGEFAST_TRACE as given (strdup), "%p" etc. not yet expanded
  uint64_t start_mono_ns = 0;
  uint64_t start_wall_ns = 0;
  bool configured = false;
  bool forked = false;  // this process is a fork child of the traced one (the fork handler says so)
  ThreadRecords<detail::Ring> rings;
  std::atomic<uint32_t> next_thread{0};
  std::atomic<int> writer_state{0};  // trace.cpp WriterState
  std::atomic<bool> stop{false};
  std::mutex start_mutex;  // taken by the first traced call only
  pthread_t writer{};
  int fd = -1;
  trace_format::Record* batch = nullptr;  // the writer's buffer; the destructor's after the writer is gone
  uint32_t batch_used = 0;
  bool write_failed = false;
  pthread_key_t key{};
};

}  // namespace pagefast::trace
