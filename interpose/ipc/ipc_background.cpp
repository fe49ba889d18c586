// interpose/ipc/ipc_background.cpp: the pagefast-ipc-bg thread, that runs
// what may block (pagefast-ctl's sleep and wake, of everything or of one
// tag, and giving freed blocks back to the pool) so that it never delays
// an open or a close on the pagefast-ipc thread (ipc_server.cpp); and the
// control replies, sent from either thread.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <vector>

#include "interpose/ipc/ipc_internal.h"
#include "interpose/pool_api.h"
#include "interpose/service_thread.h"

namespace pagefast::ipc::detail {
namespace {

// Sleep and wake requests queued or running on the background thread.
constexpr size_t kControlJobs = 4;

// Made at first use and never destroyed: a condition variable destroyed at
// exit while the thread waits on it would hang the exit.
std::mutex g_bg_mutex;
std::condition_variable* g_bg_cv = nullptr;
std::deque<ControlJob>* g_jobs = nullptr;
std::vector<uint64_t>* g_frees = nullptr;
size_t g_jobs_in_flight = 0;
pid_t g_bg_pid = 0;  // the process whose background thread runs; a forked child has none

int run_control(const ControlJob& job) {
  if (wire::carries_tag(job.op)) {
    TagControl control = tag_control_handler();
    return control ? control(job.op, job.arg, job.tag) : -1;
  }
  Control control = control_handler();
  return control ? control(job.op, job.arg) : -1;
}

void* bg_main(void*) {
  std::unique_lock<std::mutex> lock(g_bg_mutex);
  for (;;) {
    g_bg_cv->wait(lock, [] { return !g_frees->empty() || !g_jobs->empty(); });
    if (!g_frees->empty()) {
      std::vector<uint64_t> frees;
      frees.swap(*g_frees);
      lock.unlock();
      hand_back_now(frees);
      lock.lock();
      continue;
    }
    const ControlJob job = g_jobs->front();
    g_jobs->pop_front();
    lock.unlock();
    reply_control(job.fd, job.seq, run_control(job));
    ::close(job.fd);
    lock.lock();
    --g_jobs_in_flight;
  }
}

// REQUIRES g_bg_mutex. Starts the thread once per process.
bool start_bg_locked() {
  const pid_t pid = ::getpid();
  if (g_bg_pid == pid) return true;
  if (!g_jobs) {
    g_bg_cv = new std::condition_variable();
    g_jobs = new std::deque<ControlJob>();
    g_frees = new std::vector<uint64_t>();
  }
  // A forked child inherits the parent's queue but not its thread.
  g_jobs->clear();
  g_frees->clear();
  g_jobs_in_flight = 0;
  if (start_service_thread(nullptr, &bg_main, nullptr, "pagefast-ipc-bg") != 0) return false;
  g_bg_pid = pid;
  return true;
}

}  // namespace

void reply_control(int fd, uint32_t seq, int answer) {
  wire::ReplyHeader reply{wire::kReplyMagic, uint32_t(int32_t(answer)), 0, seq, 0, 0};
  ::send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void reply_tag_states(int fd, uint32_t seq) {
  pool::TagFigures figures[wire::kMaxTagStates];
  const int count = std::min(pool::tag_figures(figures, wire::kMaxTagStates), wire::kMaxTagStates);
  struct {
    wire::ReplyHeader header;
    wire::TagState tags[wire::kMaxTagStates];
  } reply{};
  reply.header = wire::ReplyHeader{
      wire::kReplyMagic, uint32_t(count), uint32_t(count), seq, 0, uint32_t(1 + pool::untagged_pools_awake())};
  for (int i = 0; i < count; ++i) {
    const pool::TagFigures& f = figures[i];
    wire::TagState& t = reply.tags[i];
    if (f.name) std::snprintf(t.name, sizeof t.name, "%s", f.name);
    t.slot = uint32_t(f.slot);
    t.flags = (f.keep ? wire::kTagKeep : 0) | (f.asleep ? wire::kTagAsleep : 0);
    policy::copy_tag_fields(t, f);
  }
  const size_t bytes = sizeof reply.header + size_t(count) * sizeof(wire::TagState);
  ::send(fd, &reply, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Hands a sleep or wake request (and its connection) to the background
// thread; false if too many are queued or it cannot start.
bool queue_control(const ControlJob& job) {
  std::lock_guard<std::mutex> guard(g_bg_mutex);
  if (g_jobs_in_flight >= kControlJobs || !start_bg_locked()) return false;
  try {
    g_jobs->push_back(job);
  } catch (...) {
    return false;
  }
  ++g_jobs_in_flight;
  g_bg_cv->notify_one();
  return true;
}

void free_held_blocks(const std::vector<uint64_t>& addrs) {
  if (addrs.empty()) return;
  {
    std::lock_guard<std::mutex> guard(g_bg_mutex);
    if (start_bg_locked()) {
      try {
        g_frees->insert(g_frees->end(), addrs.begin(), addrs.end());
        g_bg_cv->notify_one();
        return;
      } catch (...) {
      }
    }
  }
  hand_back_now(addrs);  // no background thread: here, as a last resort
}

}  // namespace pagefast::ipc::detail
