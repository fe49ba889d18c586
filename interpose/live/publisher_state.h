// interpose/live/publisher_state.h: the live segment's publisher's
// process-wide state (interpose/live/publisher.cpp), held by the process
// object (interpose/pool/process_state.h, docs/DESIGN.md "Process state").
// Constant-initialised; the writer is made on the heap by the start and
// never destroyed (the thread may run during exit).
#pragma once

#include <atomic>
#include <mutex>

namespace pagefast::live {

class Writer;

struct State {
  Writer* writer = nullptr;
  std::mutex start_mutex;
  std::atomic<bool> started{false};
  std::atomic<bool> stopping{false};
};

}  // namespace pagefast::live
