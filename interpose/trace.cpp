// interpose/trace.cpp: the PAGEFAST_TRACE recorder (trace.h; the format in
// trace_format.h, the guarantees in docs/TRACE.md).
//
// Each thread owns one single-producer ring of kRingRecords records,
// allocated at its first traced call and never freed: when the thread
// exits the ring is handed to the next new thread (as stats.cpp does with
// its counter blocks), so no record in it is lost. One writer thread copies
// the rings into a buffer and write(2)s it to the file. A full ring makes
// its producer wait for the writer, up to kFullWaitNs; only then is the
// record dropped and counted, and the writer turns the count into a "lost"
// record.
//
// Nothing here has a constructor: the state is the process object's
// (trace_state.h), constant-initialised;
// the writer starts at the first traced call, and the destructor path
// (flush_at_exit) uses plain file I/O.
#include "interpose/trace.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "interpose/context_memo.h"
#include "interpose/driver.h"
#include "interpose/files.h"
#include "interpose/log.h"
#include "interpose/real_driver.h"
#include "interpose/service_thread.h"
#include "interpose/thread_records.h"
#include "interpose/trace_format.h"
#include "policy/spin.h"

namespace pagefast::trace {

constexpr uint32_t kRingRecords = 1u << 16;   // 2 MiB of records a thread
constexpr uint64_t kFullWaitNs = 50'000'000;  // a producer waits this long for room
constexpr uint32_t kBatchRecords = 1u << 14;  // the writer's buffer: 512 KiB
constexpr long kIdleSleepMinNs = 1'000'000;   // writer poll interval after work
constexpr long kIdleSleepMaxNs = 8'000'000;   // ... backing off to this when idle
constexpr int kExitJoinSeconds = 2;           // the destructor's patience with the writer

namespace detail {

struct Ring {
  // Producer side (the owning thread).
  alignas(64) std::atomic<uint64_t> head;
  uint64_t tail_seen;  // the producer's last look at tail: one load per lap, not per push
  std::atomic<uint64_t> lost;
  bool dropping;                 // the last push was dropped: drop without waiting until there is room
  ContextMemo<uint8_t> device;   // the current context's device
  std::atomic<uint32_t> thread;  // the owner's index, for lost markers
  // Writer side.
  alignas(64) std::atomic<uint64_t> tail;
  uint64_t lost_written;
  // Ownership and the list of all rings.
  std::atomic<bool> owned;
  Ring* next;
  alignas(64) trace_format::Record records[kRingRecords];
};

}  // namespace detail

namespace {

using detail::Ring;
using trace_format::Op;
using trace_format::Record;

enum WriterState : int { kNotStarted = 0, kRunning = 1, kFailed = 2, kStopped = 3 };

// The recorder's state (trace_state.h), in the process object.
State& state() { return pool::g_process.trace; }

__attribute__((tls_model("initial-exec"))) thread_local Ring* t_ring = nullptr;

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);  // the vDSO for both clocks used here: no system call
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}
inline uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC) - state().start_mono_ns; }

// ---- the file ----

// Opens the trace file and writes its header; -1 (logged) on failure.
int open_trace_file() {
  std::string path;
  try {
    path = files::expand_path(state().path);
  } catch (...) {
    return -1;
  }
  // The file rules of files.h: checked before anything is emptied.
  std::string why;
  const int fd = files::open_private(path, files::OpenMode::Truncate, &why);
  if (fd < 0) {
    log::write(LogLevel::Warn, "PAGEFAST_TRACE: {}; not tracing", why);
    return -1;
  }
  trace_format::Header header;
  std::memset(&header, 0, sizeof header);
  std::memcpy(header.magic, trace_format::kMagic, sizeof header.magic);
  header.version = trace_format::kVersion;
  header.header_bytes = trace_format::kHeaderBytes;
  header.record_bytes = trace_format::kRecordBytes;
  header.pid = uint32_t(getpid());
  header.start_wall_ns = state().start_wall_ns;
  header.start_mono_ns = state().start_mono_ns;
  header.ring_records = kRingRecords;
  if (!files::write_all(fd, &header, sizeof header)) {
    log::write(LogLevel::Warn, "PAGEFAST_TRACE: writing '{}' failed: {}; not tracing", path, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

void batch_flush() {
  if (state().batch_used && !state().write_failed &&
      !files::write_all(state().fd, state().batch, size_t(state().batch_used) * sizeof(Record))) {
    state().write_failed = true;  // keep draining, so that producers never stall on a dead file
    log::write(LogLevel::Warn, "PAGEFAST_TRACE: write failed: {}; the rest of the trace is dropped",
               std::strerror(errno));
  }
  state().batch_used = 0;
}

// The one consumer's pass over every ring: the writer thread's, or the
// destructor's once the writer is gone. Returns the records taken.
uint64_t drain_all() {
  uint64_t taken = 0;
  for (Ring* ring = state().rings.first(); ring; ring = ring->next) {
    const uint64_t head = ring->head.load(std::memory_order_acquire);
    uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    while (tail != head) {
      if (state().batch_used == kBatchRecords) batch_flush();
      // Copy in contiguous runs, then let the producer reuse them.
      const uint32_t at = uint32_t(tail % kRingRecords);
      uint64_t run = head - tail;
      if (run > kRingRecords - at) run = kRingRecords - at;
      if (run > kBatchRecords - state().batch_used) run = kBatchRecords - state().batch_used;
      std::memcpy(state().batch + state().batch_used, ring->records + at, size_t(run) * sizeof(Record));
      state().batch_used += uint32_t(run);
      tail += run;
      taken += run;
      ring->tail.store(tail, std::memory_order_release);
    }
    const uint64_t lost = ring->lost.load(std::memory_order_relaxed);
    if (lost != ring->lost_written) {
      if (state().batch_used == kBatchRecords) batch_flush();
      Record marker{};
      marker.t_ns = now_ns();
      marker.bytes = lost - ring->lost_written;
      marker.thread = ring->thread.load(std::memory_order_relaxed);
      marker.op = uint8_t(Op::Lost);
      marker.device = trace_format::kUnknownDevice;
      state().batch[state().batch_used++] = marker;
      ring->lost_written = lost;
    }
  }
  batch_flush();
  return taken;
}

void* writer_main(void*) {
  pthread_setname_np(pthread_self(), "pagefast-trace");
  long sleep_ns = kIdleSleepMinNs;
  while (!state().stop.load(std::memory_order_acquire)) {
    if (drain_all()) {
      sleep_ns = kIdleSleepMinNs;
    } else if (sleep_ns < kIdleSleepMaxNs) {
      sleep_ns *= 2;
    }
    timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
  }
  drain_all();
  return nullptr;
}

// The first traced call: open the file and start the writer. On failure
// tracing turns off for good (one warning).
void start_writer() {
  std::lock_guard<std::mutex> lock(state().start_mutex);
  if (state().writer_state.load(std::memory_order_acquire) != kNotStarted) return;
  auto fail = [] {
    state().on.store(false, std::memory_order_relaxed);
    state().writer_state.store(kFailed, std::memory_order_release);
  };
  state().batch = static_cast<Record*>(std::malloc(size_t(kBatchRecords) * sizeof(Record)));
  if (!state().batch) return fail();
  state().fd = open_trace_file();
  if (state().fd < 0) return fail();
  const int err = start_service_thread(&state().writer, &writer_main, nullptr, "pagefast-trace");
  if (err != 0) {
    log::write(LogLevel::Warn, "PAGEFAST_TRACE: cannot start the writer thread: {}; not tracing", std::strerror(err));
    ::close(state().fd);
    state().fd = -1;
    return fail();
  }
  state().writer_state.store(kRunning, std::memory_order_release);
}

// ---- the producers ----

Ring* acquire_ring() {
  // Zeroed memory is a valid empty ring.
  Ring* ring = state().rings.acquire([]() -> Ring* {
    void* memory = nullptr;
    if (posix_memalign(&memory, alignof(Ring), sizeof(Ring)) != 0) return nullptr;
    std::memset(memory, 0, sizeof(Ring));
    return new (memory) Ring;
  });
  if (!ring) return nullptr;
  ring->device.forget();
  ring->thread.store(state().next_thread.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
  return ring;
}

// The calling thread's ring; NULL when tracing is off or no ring can be had.
inline Ring* my_ring() {
  Ring* ring = t_ring;
  if (__builtin_expect(ring != nullptr, 1)) return ring;
  if (state().writer_state.load(std::memory_order_acquire) == kNotStarted) start_writer();
  if (!on()) return nullptr;
  ring = acquire_ring();
  if (!ring) return nullptr;
  t_ring = ring;
  pthread_setspecific(state().key, ring);
  return ring;
}

// Waits for the writer to make room, up to kFullWaitNs. false: still full.
bool wait_for_room(Ring* ring, uint64_t head) {
  const uint64_t start = clock_ns(CLOCK_MONOTONIC);
  for (uint32_t i = 1;; ++i) {
    if (i < 64) policy::cpu_relax();
    else sched_yield();
    ring->tail_seen = ring->tail.load(std::memory_order_acquire);
    if (head - ring->tail_seen < kRingRecords) return true;
    if (state().writer_state.load(std::memory_order_relaxed) != kRunning) return false;
    if (i % 16 == 0 && clock_ns(CLOCK_MONOTONIC) - start > kFullWaitNs) return false;
  }
}

inline void push(Ring* ring, const Record& record) {
  const uint64_t head = ring->head.load(std::memory_order_relaxed);
  if (__builtin_expect(head - ring->tail_seen >= kRingRecords, 0)) {
    ring->tail_seen = ring->tail.load(std::memory_order_acquire);
    if (head - ring->tail_seen >= kRingRecords && (ring->dropping || !wait_for_room(ring, head))) {
      ring->dropping = true;
      ring->lost.store(ring->lost.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
  }
  ring->dropping = false;
  ring->records[head % kRingRecords] = record;
  ring->head.store(head + 1, std::memory_order_release);
}

inline uint16_t result_code(CUresult result) { return unsigned(result) > 0xfffe ? 0xffff : uint16_t(result); }

// The current context's device, cached per thread by context.
uint8_t current_device(Ring* ring) {
  const RealDriver* real = real_driver();
  CUcontext context = nullptr;
  if (driver::ctx_get_current(real, &context) != CUDA_SUCCESS || !context) return trace_format::kUnknownDevice;
  uint8_t answer = trace_format::kUnknownDevice;
  if (ring->device.recall(context, &answer)) return answer;
  CUdevice device = -1;
  if (driver::ctx_get_device(real, &device) == CUDA_SUCCESS && device >= 0 && device < 255) answer = uint8_t(device);
  ring->device.learn(context, answer);
  return answer;
}

}  // namespace

void after_fork_child() {
  // The writer thread does not exist here and the file is the parent's:
  // the child records nothing (docs/TRACE.md "fork").
  if (!state().configured) return;
  state().forked = true;
  state().on.store(false, std::memory_order_relaxed);
}

void configure(const std::string& path) {
  if (path.empty() || state().configured) return;
  state().path = strdup(path.c_str());
  if (!state().path) return;
  if (pthread_key_create(&state().key, &ThreadRecords<Ring>::release) != 0) return;
  state().start_mono_ns = clock_ns(CLOCK_MONOTONIC);
  state().start_wall_ns = clock_ns(CLOCK_REALTIME);
  state().configured = true;
  state().on.store(true, std::memory_order_release);
}

CUresult traced_alloc(AllocFn real_alloc, CUdeviceptr* dptr, size_t bytes) {
  const CUresult result = real_alloc(dptr, bytes);
  // Stamped after the call: an address is in the trace no earlier than the
  // program could have it, so a later free of it sorts after it.
  Record r;
  r.t_ns = now_ns();
  Ring* ring = my_ring();
  if (!ring) return result;
  r.address = (result == CUDA_SUCCESS && dptr) ? *dptr : 0;
  r.bytes = bytes;
  r.thread = ring->thread.load(std::memory_order_relaxed);
  r.result = result_code(result);
  r.op = uint8_t(Op::Alloc);
  r.device = current_device(ring);
  push(ring, r);
  return result;
}

CUresult traced_free(FreeFn real_free, CUdeviceptr dptr) {
  // Stamped before the call: the address is free no earlier than this, so
  // an allocation that hands it out again sorts after it.
  Record r;
  r.t_ns = now_ns();
  const CUresult result = real_free(dptr);
  Ring* ring = my_ring();
  if (!ring) return result;
  r.address = dptr;
  r.bytes = 0;
  r.thread = ring->thread.load(std::memory_order_relaxed);
  r.result = result_code(result);
  r.op = uint8_t(Op::Free);
  r.device = trace_format::kUnknownDevice;  // a free needs no context; the pointer's device is not looked up
  push(ring, r);
  return result;
}

void flush_at_exit() {
  if (!state().configured || state().forked) return;
  state().on.store(false, std::memory_order_relaxed);
  // A process that traced no call writes no file: a child that inherits
  // PAGEFAST_TRACE and never allocates leaves the parent's file alone.
  if (state().writer_state.load(std::memory_order_acquire) != kRunning) return;
  state().stop.store(true, std::memory_order_release);
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += kExitJoinSeconds;
  if (pthread_timedjoin_np(state().writer, nullptr, &deadline) != 0) {
    // A writer stuck in write(2): leave it; two consumers must never drain.
    log::write(LogLevel::Warn, "PAGEFAST_TRACE: the writer did not finish in {} s; trace may be incomplete",
               kExitJoinSeconds);
    return;
  }
  state().writer_state.store(kStopped, std::memory_order_release);
  drain_all();  // calls that passed on() just before it turned off
  ::close(state().fd);
  state().fd = -1;
}

}  // namespace pagefast::trace
