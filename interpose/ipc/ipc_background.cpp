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

// The queue (ipc_state.h State::Background): its containers made at first
// use and never destroyed (a condition variable destroyed at exit while
// the thread waits on it would hang the exit).
State::Background& bg() { return ipc_state().background; }

int run_control(const ControlJob& job) {
  if (wire::carries_tag(job.op)) {
    TagControl control = tag_control_handler();
    return control ? control(job.op, job.arg, job.tag) : -1;
  }
  Control control = control_handler();
  return control ? control(job.op, job.arg) : -1;
}

void* bg_main(void*) {
  std::unique_lock<std::mutex> lock(bg().mutex);
  for (;;) {
    bg().cv->wait(lock, [] { return !bg().frees->empty() || !bg().jobs->empty(); });
    if (!bg().frees->empty()) {
      std::vector<uint64_t> frees;
      frees.swap(*bg().frees);
      lock.unlock();
      hand_back_now(frees);
      lock.lock();
      continue;
    }
    const ControlJob job = bg().jobs->front();
    bg().jobs->pop_front();
    lock.unlock();
    reply_control(job.fd, job.seq, run_control(job));
    ::close(job.fd);
    lock.lock();
    --bg().jobs_in_flight;
  }
}

// REQUIRES bg().mutex. Starts the thread once per process (the fork
// handler clears `running` in a child: ipc_common.cpp after_fork_child).
bool start_bg_locked() {
  if (bg().running) return true;
  if (!bg().jobs) {
    bg().cv = new std::condition_variable();
    bg().jobs = new std::deque<ControlJob>();
    bg().frees = new std::vector<uint64_t>();
  }
  // A forked child inherits the parent's queue but not its thread.
  bg().jobs->clear();
  bg().frees->clear();
  bg().jobs_in_flight = 0;
  if (start_service_thread(nullptr, &bg_main, nullptr, "pagefast-ipc-bg") != 0) return false;
  bg().running = true;
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
  std::lock_guard<std::mutex> guard(bg().mutex);
  if (bg().jobs_in_flight >= kControlJobs || !start_bg_locked()) return false;
  try {
    bg().jobs->push_back(job);
  } catch (...) {
    return false;
  }
  ++bg().jobs_in_flight;
  bg().cv->notify_one();
  return true;
}

void free_held_blocks(const std::vector<uint64_t>& addrs) {
  if (addrs.empty()) return;
  {
    std::lock_guard<std::mutex> guard(bg().mutex);
    if (start_bg_locked()) {
      try {
        bg().frees->insert(bg().frees->end(), addrs.begin(), addrs.end());
        bg().cv->notify_one();
        return;
      } catch (...) {
      }
    }
  }
  hand_back_now(addrs);  // no background thread: here, as a last resort
}

}  // namespace pagefast::ipc::detail
