// interpose/live/publisher.cpp: the publishing thread (publisher.h).
#include "interpose/live/publisher.h"

#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "interpose/entries.h"
#include "interpose/live/segment.h"
#include "interpose/log.h"
#include "interpose/pool/process_state.h"
#include "interpose/pool_api.h"
#include "interpose/runtime.h"
#include "interpose/service_thread.h"
#include "interpose/stats.h"
#include "numa/device_select.h"

namespace pagefast::live {
namespace {

State& state() { return pool::g_process.live; }

std::string command_line() {
  std::string out;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[kCommandWords * 8];
  const ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  for (ssize_t i = 0; i < n; ++i) out += buf[i] ? buf[i] : ' ';
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

const char* env_lookup(const char* name, void*) { return getenv(name); }

// The local rank, from the variables the NUMA binding reads, in its order.
uint64_t local_rank() {
  const numa::StartEnv env = numa::read_start_env(&env_lookup, nullptr);
  const char* text = env.rank_text.c_str();
  if (env.rank_var.empty() || !*text) return kNoRank;
  uint64_t n = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9' || n > 1000000) return kNoRank;
    n = n * 10 + uint64_t(*c - '0');
  }
  return n;
}

void publish_once() {
  Update u;
  u.alloc_calls = stats::calls(Entry::cuMemAlloc_v2);
  u.free_calls = stats::calls(Entry::cuMemFree_v2);
  u.numa = runtime::numa_json();
  for (int d = 0; d < pool::kMaxDevices && int(u.devices.size()) < kMaxDevices; ++d) {
    DeviceFigures f;
    f.device = d;
    if (!pool::stats_of(d, &f.stats)) continue;
    const int sleep = pool::device_sleep_state(d);
    f.asleep = sleep != 0;
    f.partly = sleep == 2;
    u.devices.push_back(f);
  }
  u.tags = stats::tags();
  state().writer->publish(u);
}

void* run(void*) {
  while (!state().stopping.load(std::memory_order_acquire)) {
    publish_once();
    timespec ts{0, long(kPublishIntervalMs) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  return nullptr;
}

// Creates the segment once; false when it could not be (one warning).
bool create_segment(const Config& config) {
  if (state().started.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> guard(state().start_mutex);
  if (state().started.load(std::memory_order_relaxed)) return false;
  state().started.store(true, std::memory_order_release);
  auto* writer = new Writer();
  std::string error;
  Identity who = own_identity();
  who.local_rank = local_rank();
  who.mode = uint64_t(mode_of(config));
  who.reason = mode_reason(config);
  if (!writer->create(config.live_dir, who, command_line(), describe(config), &error)) {
    log::write(LogLevel::Warn, "live stats off (pagefast-stat will not list this process): {}", error);
    delete writer;
    return false;
  }
  state().writer = writer;
  return true;
}

}  // namespace

void start_passthrough(const Config& config) {
  if (!create_segment(config)) return;
  state().writer->publish(Update{});
}

// A forked child has the mapping but no thread and is not the segment's
// maker: it neither publishes nor removes (Writer::remove checks the pid).
// A child of a process that never started publishing starts as any process.
void after_fork_child() {
  if (state().started.load(std::memory_order_acquire)) state().stopping.store(true, std::memory_order_relaxed);
}

void start(const Config& config) {
  if (!create_segment(config)) return;
  const int rc = start_service_thread(nullptr, &run, nullptr, "pagefast-live");
  if (rc != 0) {
    publish_once();  // the figures of the start, at least
    log::write(LogLevel::Warn, "live stats: no publishing thread (error {}); pagefast-stat shows start-up figures", rc);
    return;
  }
}

void stop_at_exit() {
  state().stopping.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> guard(state().start_mutex);
  if (state().writer) state().writer->remove();
}

}  // namespace pagefast::live
