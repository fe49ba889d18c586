// interpose/log_state.h: the log's process-wide state (interpose/log.cpp),
// held by the process object (interpose/pool/process_state.h,
// docs/DESIGN.md "Process state"). Constant-initialised; the logger is made
// once by init and never destroyed (the stats writer and late frees may
// still log at exit).
#pragma once

#include <atomic>

#include "policy/log_sink.h"

namespace spdlog {
class logger;
}

namespace pagefast::log {

struct State {
  spdlog::logger* logger = nullptr;  // NULL: lines go to stderr as they are
  std::atomic<int> level{int(LogLevel::Warn)};
  std::atomic<bool> off{false};
  char rank[16] = {};  // " r3", or "" without a local rank; set once by init
};

}  // namespace pagefast::log
