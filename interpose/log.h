// interpose/log.h: pagefast's logger (spdlog, kept private to the library).
// Lines go to stderr, or to PAGEFAST_LOG_FILE, each prefixed
// "pagefast[PID rRANK HH:MM:SS.mmm]: LEVEL: " (log.cpp).
// Never call it on an allocation hot path.
#pragma once

#include <fmt/format.h>

#include <string>

#include "policy/config.h"
#include "policy/log_sink.h"

namespace pagefast::log {

// Called once at load, after the configuration is parsed. Returns the
// message of a PAGEFAST_LOG_FILE that cannot be opened (logging then goes
// to stderr), for the caller to say with the other settings; "" if none.
std::string init(const Config& config);
bool enabled(LogLevel level);
void emit(LogLevel level, const char* message);

// The sink that policy/ and numa/ log through.
inline LogSink sink() { return &emit; }

template <typename... Args>
void write(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!enabled(level)) return;
  try {
    emit(level, fmt::format(format, std::forward<Args>(args)...).c_str());
  } catch (...) {
    // A formatting failure must never reach the host program.
  }
}

}  // namespace pagefast::log
