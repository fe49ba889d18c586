// interpose/log.cpp: the spdlog logger behind log.h. The logger is created
// once and never destroyed: it must outlive every static destructor, since
// the stats writer and late frees may still log at exit.
#include "interpose/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <cstdio>

namespace pagefast::log {
namespace {

spdlog::logger* g_logger = nullptr;
std::atomic<int> g_level{int(LogLevel::Warn)};
std::atomic<bool> g_off{false};

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Error: return spdlog::level::err;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Debug: return spdlog::level::debug;
  }
  return spdlog::level::warn;
}

}  // namespace

void init(const Config& config) {
  g_level.store(int(config.log_level));
  g_off.store(config.log_off);
  if (config.log_off) return;
  try {
    spdlog::sink_ptr sink;
    if (!config.log_file.empty()) {
      try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(config.log_file, false);
      } catch (...) {
        std::fprintf(stderr, "pagefast: warning: cannot open PAGEFAST_LOG_FILE '%s'; logging to stderr\n",
                     config.log_file.c_str());
      }
    }
    if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    // Deliberately leaked: see the file comment.
    auto* logger = new spdlog::logger("pagefast", std::move(sink));
    logger->set_pattern("pagefast: %l: %v");
    logger->set_level(to_spdlog(config.log_level));
    logger->flush_on(spdlog::level::debug);
    g_logger = logger;
  } catch (...) {
    g_logger = nullptr;
  }
}

bool enabled(LogLevel level) {
  return !g_off.load(std::memory_order_relaxed) && int(level) <= g_level.load(std::memory_order_relaxed);
}

void emit(LogLevel level, const char* message) {
  if (!enabled(level)) return;
  if (!g_logger) {
    // Before init (or if spdlog failed): one plain line still gets out.
    static const char* const kNames[] = {"error", "warning", "info", "debug"};
    std::fprintf(stderr, "pagefast: %s: %s\n", kNames[int(level)], message);
    return;
  }
  try {
    g_logger->log(to_spdlog(level), "{}", message);
  } catch (...) {
  }
}

}  // namespace pagefast::log
