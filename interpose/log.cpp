// interpose/log.cpp: the spdlog logger behind log.h. The logger is created
// once and never destroyed: it must outlive every static destructor, since
// the stats writer and late frees may still log at exit.
//
// Every line, on stderr or in PAGEFAST_LOG_FILE, starts with who and when:
// "pagefast[PID rRANK HH:MM:SS.mmm]: LEVEL: " (no " rRANK" when no launcher
// set a local rank), so that the lines of many ranks on one stream can be
// told apart. PAGEFAST_LOG_FILE is opened by files::open_private and written
// through the descriptor: spdlog's own file sink would follow a symbolic
// link, append to another user's file, make parent directories and 0644
// files, and block on a FIFO (docs/SECURITY.md).
#include "interpose/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "interpose/files.h"
#include "interpose/pool/process_state.h"

namespace pagefast::log {
namespace {

State& state() { return pool::g_process.logger; }

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Error: return spdlog::level::err;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Debug: return spdlog::level::debug;
  }
  return spdlog::level::warn;
}

// Appends each formatted line to a descriptor that files::open_private
// opened and checked: one write(2) a line, the file offset kept by O_APPEND.
class DescriptorSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit DescriptorSink(int fd) : fd_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t line;
    formatter_->format(message, line);
    files::write_all(fd_, line.data(), line.size());
  }
  void flush_() override {}

 private:
  const int fd_;  // never closed: the logger lives until the process ends
};

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

}  // namespace

std::string init(const Config& config) {
  state().level.store(int(config.log_level));
  state().off.store(config.log_off);
  const std::string rank = files::local_rank(&env_lookup, nullptr);
  if (!rank.empty()) std::snprintf(state().rank, sizeof state().rank, " r%s", rank.c_str());
  std::string refused;
  if (config.log_off) return refused;
  try {
    spdlog::sink_ptr sink;
    if (!config.log_file.empty()) {
      std::string why;
      const int fd = files::open_private(files::expand_path(config.log_file), files::OpenMode::Append, &why);
      if (fd >= 0) sink = std::make_shared<DescriptorSink>(fd);
      else refused = "PAGEFAST_LOG_FILE: " + why + "; logging to stderr";
    }
    if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    // Deliberately leaked: see the file comment.
    auto* logger = new spdlog::logger("pagefast", std::move(sink));
    logger->set_pattern(std::string("pagefast[%P") + state().rank + " %H:%M:%S.%e]: %l: %v");
    logger->set_level(to_spdlog(config.log_level));
    logger->flush_on(spdlog::level::debug);
    state().logger = logger;
  } catch (...) {
    state().logger = nullptr;
  }
  return refused;
}

bool enabled(LogLevel level) {
  return !state().off.load(std::memory_order_relaxed) && int(level) <= state().level.load(std::memory_order_relaxed);
}

void emit(LogLevel level, const char* message) {
  if (!enabled(level)) return;
  if (!state().logger) {
    // Before init (or if spdlog failed): one plain line still gets out,
    // with the same prefix.
    static const char* const kNames[] = {"error", "warning", "info", "debug"};
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm local;
    localtime_r(&now.tv_sec, &local);
    std::fprintf(stderr, "pagefast[%d%s %02d:%02d:%02d.%03ld]: %s: %s\n", int(getpid()), state().rank, local.tm_hour,
                 local.tm_min, local.tm_sec, now.tv_nsec / 1000000, kNames[int(level)], message);
    return;
  }
  try {
    state().logger->log(to_spdlog(level), "{}", message);
  } catch (...) {
  }
}

}  // namespace pagefast::log
