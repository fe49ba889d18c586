// interpose/live/segment.cpp: creating, updating and reading live-stats
// segments (segment.h). Plain POSIX file calls and atomics; no CUDA.
#include "interpose/live/segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pagefast::live {
namespace {

uint64_t unix_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

template <int N>
void put_text(std::atomic<uint64_t> (&words)[N], const std::string& text) {
  const size_t limit = size_t(N) * 8 - 1;  // always NUL-terminated
  for (int w = 0; w < N; ++w) {
    uint64_t word = 0;
    for (int b = 0; b < 8; ++b) {
      const size_t i = size_t(w) * 8 + size_t(b);
      const unsigned char ch = i < text.size() && i < limit ? static_cast<unsigned char>(text[i]) : 0;
      word |= uint64_t(ch) << (8 * b);
    }
    words[w].store(word, std::memory_order_relaxed);
  }
}

template <int N>
std::string get_text(const std::atomic<uint64_t> (&words)[N]) {
  std::string s;
  for (int w = 0; w < N; ++w) {
    const uint64_t word = words[w].load(std::memory_order_relaxed);
    for (int b = 0; b < 8; ++b) {
      const char ch = char((word >> (8 * b)) & 0xff);
      if (!ch) return s;
      s += ch;
    }
  }
  return s;
}

std::string segment_name(uint64_t uid, uint64_t pid) {
  return std::string(kPrefix) + std::to_string(uid) + "." + std::to_string(pid);
}

// The pid in "pagefast.<uid>.<pid>", if the name is one of this user's.
bool parse_name(const char* name, uint64_t uid, uint64_t* pid) {
  const std::string want = std::string(kPrefix) + std::to_string(uid) + ".";
  if (std::strncmp(name, want.c_str(), want.size()) != 0) return false;
  const char* digits = name + want.size();
  if (!*digits) return false;
  uint64_t n = 0;
  for (const char* c = digits; *c; ++c) {
    if (*c < '0' || *c > '9' || n > UINT64_MAX / 10) return false;
    n = n * 10 + uint64_t(*c - '0');
  }
  *pid = n;
  return true;
}

}  // namespace

// ---- writer -------------------------------------------------------------------

bool Writer::create(const std::string& dir, const std::string& command, const std::string& config,
                    std::string* error) {
  const uint64_t pid = uint64_t(getpid());
  const uint64_t uid = uint64_t(getuid());
  const std::string path = (dir.empty() ? std::string(kDefaultDir) : dir) + "/" + segment_name(uid, pid);
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt) break;
    // A leftover of an earlier process with this pid, if it is a plain file
    // of ours; never follow or remove anything else.
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
  s->uid.store(uid, std::memory_order_relaxed);
  s->start_ticks.store(process_start_ticks(pid), std::memory_order_relaxed);
  const uint64_t now = unix_ns();
  s->created_unix_ns.store(now, std::memory_order_relaxed);
  s->updated_unix_ns.store(now, std::memory_order_relaxed);
  put_text(s->command, command);
  put_text(s->config, config);
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
  put_text(s->numa, u.numa);
  const size_t n = std::min(u.devices.size(), size_t(kMaxDevices));
  for (size_t i = 0; i < n; ++i) {
    DeviceSlot& slot = s->devices[i];
    const DeviceFigures& d = u.devices[i];
    slot.device.store(uint64_t(d.device), std::memory_order_relaxed);
#define PF_LIVE_STORE(name, meaning) slot.name.store(d.stats.name, std::memory_order_relaxed);
    PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_STORE)
#undef PF_LIVE_STORE
  }
  s->device_count.store(n, std::memory_order_relaxed);
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

// ---- reader -------------------------------------------------------------------

const char* status_name(ReadStatus status) {
  switch (status) {
    case ReadStatus::Ok: return "ok";
    case ReadStatus::NotFound: return "gone";
    case ReadStatus::Refused: return "refused";
    case ReadStatus::Incomplete: return "incomplete";
    case ReadStatus::Incompatible: return "incompatible";
    case ReadStatus::Busy: return "busy";
  }
  return "?";
}

uint64_t process_start_ticks(uint64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  // The command (field 2) may hold spaces and parentheses: count from the
  // last ')'. Field 3 follows it; the start time is field 22.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (++p; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  return field == 22 ? std::strtoull(p, nullptr, 10) : 0;
}

bool process_alive(uint64_t pid, uint64_t start_ticks) {
  if (pid == 0 || pid > uint64_t(INT32_MAX)) return false;
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  // The pid may have been reused by another process since.
  const uint64_t now = process_start_ticks(pid);
  return start_ticks == 0 || now == 0 || now == start_ticks;
}

ReadStatus read_segment(const std::string& path, Snapshot* out, std::string* detail) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      *detail = "a symbolic link";
      return ReadStatus::Refused;
    }
    *detail = std::strerror(errno);
    return errno == ENOENT ? ReadStatus::NotFound : ReadStatus::Refused;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
    close(fd);
    *detail = "not a regular file of this user";
    return ReadStatus::Refused;
  }
  if (uint64_t(st.st_size) < sizeof(Segment)) {
    close(fd);
    *detail = "holds " + std::to_string(st.st_size) + " of " + std::to_string(sizeof(Segment)) + " bytes";
    return ReadStatus::Incomplete;
  }
  void* memory = mmap(nullptr, sizeof(Segment), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) {
    *detail = std::string("mmap: ") + std::strerror(errno);
    return ReadStatus::Refused;
  }
  const Segment* s = static_cast<const Segment*>(memory);
  ReadStatus status = ReadStatus::Busy;
  if (s->magic.load(std::memory_order_acquire) != kMagic) {
    *detail = "no pagefast header (yet)";
    status = ReadStatus::Incomplete;
  } else if (s->version.load(std::memory_order_relaxed) != kVersion ||
             s->bytes.load(std::memory_order_relaxed) != sizeof(Segment)) {
    *detail = "version " + std::to_string(s->version.load(std::memory_order_relaxed)) + ", " +
              std::to_string(s->bytes.load(std::memory_order_relaxed)) + " bytes; this reader knows version " +
              std::to_string(kVersion) + ", " + std::to_string(sizeof(Segment)) + " bytes";
    status = ReadStatus::Incompatible;
  } else {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const uint64_t before = s->seq.load(std::memory_order_acquire);
      if (before & 1) {
        sched_yield();
        continue;
      }
      Snapshot snap;
      snap.pid = s->pid.load(std::memory_order_relaxed);
      snap.uid = s->uid.load(std::memory_order_relaxed);
      snap.start_ticks = s->start_ticks.load(std::memory_order_relaxed);
      snap.created_unix_ns = s->created_unix_ns.load(std::memory_order_relaxed);
      snap.updated_unix_ns = s->updated_unix_ns.load(std::memory_order_relaxed);
      snap.publishes = s->publishes.load(std::memory_order_relaxed);
      snap.alloc_calls = s->alloc_calls.load(std::memory_order_relaxed);
      snap.free_calls = s->free_calls.load(std::memory_order_relaxed);
      snap.command = get_text(s->command);
      snap.config = get_text(s->config);
      snap.numa = get_text(s->numa);
      const uint64_t n = std::min<uint64_t>(s->device_count.load(std::memory_order_relaxed), kMaxDevices);
      for (uint64_t i = 0; i < n; ++i) {
        const DeviceSlot& slot = s->devices[i];
        DeviceFigures d;
        d.device = int(slot.device.load(std::memory_order_relaxed));
#define PF_LIVE_LOAD(name, meaning) d.stats.name = slot.name.load(std::memory_order_relaxed);
        PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_LOAD)
#undef PF_LIVE_LOAD
        snap.devices.push_back(d);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s->seq.load(std::memory_order_relaxed) == before) {
        *out = std::move(snap);
        status = ReadStatus::Ok;
        break;
      }
    }
    if (status == ReadStatus::Busy) *detail = "an update was in progress at every try";
  }
  munmap(memory, sizeof(Segment));
  return status;
}

std::vector<Listing> list_segments(const std::string& dir_in, uint64_t uid, bool clean_stale) {
  const std::string dir = dir_in.empty() ? std::string(kDefaultDir) : dir_in;
  std::vector<std::pair<uint64_t, std::string>> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      uint64_t pid = 0;
      if (parse_name(e->d_name, uid, &pid)) names.push_back({pid, e->d_name});
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<Listing> out;
  for (const auto& [pid, name] : names) {
    Listing l;
    l.path = dir + "/" + name;
    l.status = read_segment(l.path, &l.snapshot, &l.detail);
    if (l.status == ReadStatus::NotFound) continue;
    if (l.status == ReadStatus::Refused) {
      out.push_back(l);  // shown, never removed: it is not ours to judge
      continue;
    }
    const uint64_t ticks = l.status == ReadStatus::Ok ? l.snapshot.start_ticks : 0;
    l.stale = !process_alive(pid, ticks) || (l.status == ReadStatus::Ok && l.snapshot.pid != pid);
    if (l.stale && clean_stale) {
      // Re-check what is unlinked: a regular file of this user, by name.
      struct stat st;
      if (lstat(l.path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid())
        l.removed = unlink(l.path.c_str()) == 0;
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace pagefast::live
