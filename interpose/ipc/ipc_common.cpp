// interpose/ipc/ipc_common.cpp: the small helpers the parts of CUDA IPC
// share (ipc_internal.h): the handle's checksum, this process's identity,
// the socket's address, sending, error names and the clock.
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "interpose/driver.h"
#include "interpose/ipc/ipc_internal.h"
#include "interpose/live/segment.h"
#include "interpose/log.h"
#include "interpose/real_driver.h"
#include "policy/clock.h"
#include "policy/options.h"

namespace pagefast::ipc {

namespace detail {

namespace {

// The checksum: a multiply-xorshift mix over the handle's eight 64-bit
// words (the checksum's own field zero), folded to 32 bits. Each step is
// a bijection of the state, so two handles that differ in one word differ
// in the 64-bit state; the fold ends in a full avalanche.
constexpr uint64_t kMixSeed = 0x243f6a8885a308d3ull;
constexpr uint64_t kMixMul = 0x9e3779b97f4a7c15ull;  // odd
inline uint64_t mix(uint64_t h, uint64_t word) {
  h = (h ^ word) * kMixMul;
  return h ^ (h >> 32);
}
inline uint32_t fold(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return uint32_t(h) ^ uint32_t(h >> 32);
}
inline uint64_t word_at(const Wire& w, size_t index) {
  uint64_t word;
  std::memcpy(&word, reinterpret_cast<const unsigned char*>(&w) + 8 * index, sizeof word);
  return word;
}
constexpr size_t kWords = sizeof(Wire) / 8;
static_assert(sizeof(Wire) % 8 == 0, "the checksum reads whole words");
// The words of a handle before export_id (magic, version, flags, device,
// pid, the checksum's own zeros, start time, pid namespace) are the same
// for every handle one process makes for one device.
constexpr size_t kFixedWords = offsetof(Wire, export_id) / 8;
static_assert(offsetof(Wire, export_id) % 8 == 0 && offsetof(Wire, check) < offsetof(Wire, export_id),
              "the checksum field lies in the fixed words");
static_assert(offsetof(Wire, bytes) == offsetof(Wire, export_id) + 8 && offsetof(Wire, offset) + 8 == sizeof(Wire),
              "export_id, bytes and offset are the last three words");

// State::forks counts the forks this process came out of (the process's
// one fork handler calls after_fork_child, interpose/runtime.cpp; it is
// registered at load, before any IPC call), so that self() knows the pid
// it cached is still its own without a getpid system call on every get,
// open and close.

// Per thread, read without a lock: this process's ids, and the checksum's
// state after the fixed bytes of the last device's handles.
struct ThreadIds {
  Identity me;
  uint64_t forks = ~uint64_t(0);
  uint64_t fixed_forks = ~uint64_t(0);
  uint32_t fixed_device = ~0u;
  uint64_t fixed_state = 0;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadIds t_ids;

const Identity& refresh_ids(ThreadIds& ids) {
  const uint64_t forks = ipc_state().forks.load(std::memory_order_relaxed);
  if (ids.me.pid != 0 && ids.forks == forks) return ids.me;
  ids.forks = forks;
  const int32_t pid = int32_t(::getpid());
  if (ids.me.pid != pid) {
    ids.me.pid = pid;
    // The ids the live-stats segment is named by, too (live/segment.h).
    const live::Identity who = live::own_identity();
    ids.me.start_time = who.start_ticks;
    ids.me.pidns = who.pidns;
  }
  return ids.me;
}

}  // namespace

uint32_t checksum(const Wire& w) {
  Wire copy = w;
  copy.check = 0;
  uint64_t h = kMixSeed;
  for (size_t i = 0; i < kWords; ++i) h = mix(h, word_at(copy, i));
  return fold(h);
}

Wire make_handle(int device, uint64_t export_id, uint64_t bytes, uint64_t offset) {
  ThreadIds& ids = t_ids;
  const Identity& me = refresh_ids(ids);
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof kMagic);
  w.version = kHandleVersion;
  w.device = uint32_t(device);
  w.pid = uint32_t(me.pid);
  w.start_time = me.start_time;
  w.pidns = me.pidns;
  w.export_id = export_id;
  w.bytes = bytes;
  w.offset = offset;
  // checksum(w), with the fixed words' state kept from the last handle.
  if (ids.fixed_forks != ids.forks || ids.fixed_device != w.device) {
    uint64_t h = kMixSeed;
    for (size_t i = 0; i < kFixedWords; ++i) h = mix(h, word_at(w, i));
    ids.fixed_state = h;
    ids.fixed_forks = ids.forks;
    ids.fixed_device = w.device;
  }
  w.check = fold(mix(mix(mix(ids.fixed_state, export_id), bytes), offset));
  return w;
}

const Identity& self() { return refresh_ids(t_ids); }

std::string ipc_dir() {
  State::Settings& s = ipc_state().settings;
  std::call_once(s.dir_once, [&s] {
    const char* v = std::getenv(option_name(Opt::IpcDir));
    if (!v || !*v || hidden_in_secure_execution(Opt::IpcDir, getauxval(AT_SECURE))) return;
    std::string why;
    if (!wire::usable_dir(v, &why)) {
      log::write(LogLevel::Warn, "{}={} {}: the CUDA IPC socket goes in the abstract namespace instead",
                 option_name(Opt::IpcDir), v, why);
      return;
    }
    s.dir = new std::string(v);
  });
  return s.dir ? *s.dir : std::string();
}

bool socket_address(uint32_t pid, uint64_t start_time, uint64_t pidns, sockaddr_un* addr, socklen_t* len) {
  return wire::socket_address(uint32_t(::geteuid()), pidns, pid, start_time, ipc_dir(), addr, len);
}

bool send_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

const char* error_name(CUresult r) {
  const RealDriver* real = real_driver();
  const char* name = nullptr;
  if (driver::error_name(real, r, &name) != CUDA_SUCCESS || !name) return "an error";
  return name;
}

uint64_t now_ns() { return policy::monotonic_now_ns(); }

}  // namespace detail

// In the child, alone: what said "this process runs it" is cleared, so the
// next use starts this process's own (the socket and its thread, the
// background thread) or forgets the parent's (the importer's links and
// imports); the ids are read again.
void after_fork_child() {
  State& s = detail::ipc_state();
  s.forks.fetch_add(1, std::memory_order_relaxed);
  s.background.running = false;
  s.socket.serving.store(false, std::memory_order_relaxed);
  s.socket.failed = false;
  s.socket.path_owned.store(false, std::memory_order_relaxed);
  s.imports.owned = false;
}

}  // namespace pagefast::ipc
