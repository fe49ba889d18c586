// interpose/live/segment_writer.cpp: creating and updating a live-stats
// segment (segment.h, Writer). Plain POSIX file calls and atomics; no CUDA.
#include "interpose/live/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace pagefast::live {
namespace {

uint64_t unix_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Stores text, which fits (at most N * 8 - 1 bytes), NUL-padded.
template <int N>
void put_text(std::atomic<uint64_t> (&words)[N], const std::string& text) {
  for (int w = 0; w < N; ++w) {
    uint64_t word = 0;
    for (int b = 0; b < 8; ++b) {
      const size_t i = size_t(w) * 8 + size_t(b);
      const unsigned char ch = i < text.size() ? static_cast<unsigned char>(text[i]) : 0;
      word |= uint64_t(ch) << (8 * b);
    }
    words[w].store(word, std::memory_order_relaxed);
  }
}

template <int N>
constexpr size_t text_room(const std::atomic<uint64_t> (&)[N]) {
  return size_t(N) * 8 - 1;  // always NUL-terminated
}

}  // namespace

// ---- writer -------------------------------------------------------------------

bool Writer::create(const std::string& dir, const Identity& who, const std::string& command, const std::string& config,
                    std::string* error) {
  const uint64_t pid = who.pid;
  const std::string path = (dir.empty() ? std::string(kDefaultDir) : dir) + "/" + segment_name(who);
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt) break;
    // A leftover of this process before an exec (same pid, same start
    // time), if it is a plain file of ours; never follow or remove anything
    // else.
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
      *error = path + " exists and is not a regular file of this user";
      return false;
    }
    unlink(path.c_str());
  }
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  fchmod(fd, 0600);  // whatever the umask allowed, never more than the user
  if (ftruncate(fd, off_t(sizeof(Segment))) != 0) {
    *error = path + ": " + std::strerror(errno);
    close(fd);
    unlink(path.c_str());
    return false;
  }
  void* memory = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) {
    *error = path + ": mmap: " + std::strerror(errno);
    unlink(path.c_str());
    return false;
  }
  // The file is zero-filled: every field starts at 0, seq even.
  Segment* s = static_cast<Segment*>(memory);
  s->version.store(kVersion, std::memory_order_relaxed);
  s->bytes.store(sizeof(Segment), std::memory_order_relaxed);
  s->pid.store(pid, std::memory_order_relaxed);
  s->uid.store(who.uid, std::memory_order_relaxed);
  s->start_ticks.store(who.start_ticks, std::memory_order_relaxed);
  s->pidns.store(who.pidns, std::memory_order_relaxed);
  s->local_rank.store(who.local_rank, std::memory_order_relaxed);
  s->mode.store(who.mode, std::memory_order_relaxed);
  put_text(s->reason, utf8_cut(who.reason, text_room(s->reason)));
  put_text(s->host, utf8_cut(who.host, text_room(s->host)));
  const uint64_t now = unix_ns();
  s->created_unix_ns.store(now, std::memory_order_relaxed);
  s->updated_unix_ns.store(now, std::memory_order_relaxed);
  put_text(s->command, utf8_cut(command, text_room(s->command)));
  put_text(s->config, utf8_cut(config, text_room(s->config)));
  s->magic.store(kMagic, std::memory_order_release);
  path_ = path;
  owner_pid_ = pid;
  segment_.store(s, std::memory_order_release);
  return true;
}

void Writer::publish(const Update& u) {
  Segment* s = segment_.load(std::memory_order_acquire);
  if (!s) return;
  // Sequence lock: odd while writing. The fence keeps the field stores
  // after the odd mark; the release of the even mark keeps them before it.
  s->seq.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s->alloc_calls.store(u.alloc_calls, std::memory_order_relaxed);
  s->free_calls.store(u.free_calls, std::memory_order_relaxed);
  // A JSON document cut anywhere is no document: whole or nothing.
  const std::string numa = utf8_valid(u.numa);
  put_text(s->numa, numa.size() <= text_room(s->numa) ? numa : std::string());
  const size_t n = std::min(u.devices.size(), size_t(kMaxDevices));
  for (size_t i = 0; i < n; ++i) {
    DeviceRecord& record = s->devices[i];
    const DeviceFigures& d = u.devices[i];
    record.device.store(uint64_t(d.device), std::memory_order_relaxed);
    record.asleep.store(d.asleep ? (d.partly ? 2 : 1) : 0, std::memory_order_relaxed);
#define PF_LIVE_STORE(name, meaning) record.name.store(d.stats.name, std::memory_order_relaxed);
    PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_STORE)
#undef PF_LIVE_STORE
  }
  s->device_count.store(n, std::memory_order_relaxed);
  const size_t tags = std::min(u.tags.size(), size_t(kMaxTags));
  for (size_t i = 0; i < tags; ++i) {
    TagRecord& record = s->tags[i];
    const policy::TagStats& t = u.tags[i];
    put_text(record.name, utf8_cut(utf8_valid(t.name), text_room(record.name)));
    record.slot.store(uint64_t(t.slot), std::memory_order_relaxed);
    record.keep.store(t.keep ? 1 : 0, std::memory_order_relaxed);
    record.asleep.store(t.asleep ? 1 : 0, std::memory_order_relaxed);
#define PF_LIVE_TAG_STORE(name, meaning) record.name.store(t.name, std::memory_order_relaxed);
    PAGEFAST_TAG_FIELDS(PF_LIVE_TAG_STORE)
#undef PF_LIVE_TAG_STORE
  }
  s->tag_count.store(tags, std::memory_order_relaxed);
  s->updated_unix_ns.store(unix_ns(), std::memory_order_relaxed);
  s->publishes.store(s->publishes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  s->seq.fetch_add(1, std::memory_order_release);
}

void Writer::remove() {
  if (!segment_.load(std::memory_order_acquire)) return;
  // A forked child inherits the mapping, not the file: only its maker
  // removes it.
  if (uint64_t(getpid()) == owner_pid_) unlink(path_.c_str());
  segment_.store(nullptr, std::memory_order_release);  // the mapping stays: a publish may be under way
}

}  // namespace pagefast::live
