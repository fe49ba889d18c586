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

// Bytes in the UTF-8 sequence at text[i], or 0 if it is not a valid one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t utf8_length(const std::string& text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((at(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (at(i + k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return n;
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

// Decimal digits up to the next '.' or the end; false if none or too big.
bool parse_number(const char** p, uint64_t* out) {
  const char* c = *p;
  if (*c < '0' || *c > '9') return false;
  uint64_t n = 0;
  for (; *c >= '0' && *c <= '9'; ++c) {
    const uint64_t d = uint64_t(*c - '0');
    if (n > (UINT64_MAX - d) / 10) return false;
    n = n * 10 + d;
  }
  *p = c;
  *out = n;
  return true;
}

}  // namespace

std::string utf8_valid(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    if (n) {
      out.append(text, i, n);
      i += n;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    }
  }
  return out;
}

std::string utf8_cut(const std::string& text, size_t max_bytes) {
  std::string s = utf8_valid(text);
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
  s.resize(end);
  return s;
}

namespace {
uint64_t start_ticks_from(const char* path);
}  // namespace

uint64_t own_pid_namespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

Identity own_identity() {
  Identity who;
  who.uid = uint64_t(getuid());
  who.pid = uint64_t(getpid());
  who.pidns = own_pid_namespace();
  // /proc/self, not /proc/<pid>: a /proc of another pid namespace (a
  // container without its own) would name some other process.
  who.start_ticks = start_ticks_from("/proc/self/stat");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) who.host = host;
  return who;
}

std::string segment_name(const Identity& who) {
  return std::string(kPrefix) + std::to_string(who.uid) + "." + std::to_string(who.pidns) + "." +
         std::to_string(who.pid) + "." + std::to_string(who.start_ticks);
}

bool parse_segment_name(const char* name, uint64_t uid, ParsedName* out) {
  const std::string want = std::string(kPrefix) + std::to_string(uid) + ".";
  if (std::strncmp(name, want.c_str(), want.size()) != 0) return false;
  const char* p = name + want.size();
  uint64_t n[3] = {};
  int parts = 0;
  for (;;) {
    if (!parse_number(&p, &n[parts])) return false;
    ++parts;
    if (!*p) break;
    if (parts == 3 || *p != '.') return false;
    ++p;
  }
  ParsedName parsed;
  if (parts == 1) {
    parsed.pid = n[0];
    parsed.legacy = true;
  } else if (parts == 3) {
    parsed.pidns = n[0];
    parsed.pid = n[1];
    parsed.start_ticks = n[2];
  } else {
    return false;
  }
  *out = parsed;
  return true;
}

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
    DeviceSlot& slot = s->devices[i];
    const DeviceFigures& d = u.devices[i];
    slot.device.store(uint64_t(d.device), std::memory_order_relaxed);
    slot.asleep.store(d.asleep ? 1 : 0, std::memory_order_relaxed);
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

namespace {

// Field 22 of a /proc/.../stat file; 0 if unknown.
uint64_t start_ticks_from(const char* path) {
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

}  // namespace

uint64_t process_start_ticks(uint64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  return start_ticks_from(path);
}

bool process_alive(uint64_t pid, uint64_t start_ticks) {
  if (pid == 0 || pid > uint64_t(INT32_MAX)) return false;
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  // The pid may have been reused by another process since.
  const uint64_t now = process_start_ticks(pid);
  return start_ticks == 0 || now == 0 || now == start_ticks;
}

ReadStatus read_segment(const std::string& path, Snapshot* out, std::string* detail) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
      snap.pidns = s->pidns.load(std::memory_order_relaxed);
      snap.local_rank = s->local_rank.load(std::memory_order_relaxed);
      snap.mode = s->mode.load(std::memory_order_relaxed);
      snap.reason = utf8_valid(get_text(s->reason));
      snap.start_ticks = s->start_ticks.load(std::memory_order_relaxed);
      snap.created_unix_ns = s->created_unix_ns.load(std::memory_order_relaxed);
      snap.updated_unix_ns = s->updated_unix_ns.load(std::memory_order_relaxed);
      snap.publishes = s->publishes.load(std::memory_order_relaxed);
      snap.alloc_calls = s->alloc_calls.load(std::memory_order_relaxed);
      snap.free_calls = s->free_calls.load(std::memory_order_relaxed);
      snap.command = utf8_valid(get_text(s->command));
      snap.config = utf8_valid(get_text(s->config));
      snap.numa = utf8_valid(get_text(s->numa));
      snap.host = utf8_valid(get_text(s->host));
      const uint64_t n = std::min<uint64_t>(s->device_count.load(std::memory_order_relaxed), kMaxDevices);
      for (uint64_t i = 0; i < n; ++i) {
        const DeviceSlot& slot = s->devices[i];
        DeviceFigures d;
        d.device = int(slot.device.load(std::memory_order_relaxed));
        d.asleep = slot.asleep.load(std::memory_order_relaxed) != 0;
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

bool provably_dead(uint64_t reader_pidns, uint64_t pidns, uint64_t pid, uint64_t start_ticks) {
  if (reader_pidns == 0 || pidns != reader_pidns) return false;  // its pids are not ours to look up
  return !process_alive(pid, start_ticks);
}

std::vector<Listing> list_segments(const std::string& dir_in, uint64_t uid, bool clean_stale) {
  const std::string dir = dir_in.empty() ? std::string(kDefaultDir) : dir_in;
  const uint64_t reader_pidns = own_pid_namespace();
  std::vector<std::pair<ParsedName, std::string>> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      ParsedName parsed;
      if (parse_segment_name(e->d_name, uid, &parsed)) names.push_back({parsed, e->d_name});
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return a.first.pid != b.first.pid ? a.first.pid < b.first.pid : a.second < b.second;
  });
  std::vector<Listing> out;
  for (const auto& [parsed, name] : names) {
    Listing l;
    l.path = dir + "/" + name;
    l.name = parsed;
    l.status = read_segment(l.path, &l.snapshot, &l.detail);
    if (l.status == ReadStatus::NotFound) continue;
    if (l.status == ReadStatus::Refused) {
      out.push_back(l);  // shown, never removed: it is not ours to judge
      continue;
    }
    if (parsed.legacy) {
      // pagefast 0.1's name says nothing of the pid namespace: never removed.
      if (l.detail.empty()) l.detail = "named as by pagefast 0.1";
      else l.detail += "; named as by pagefast 0.1";
      l.foreign = true;
      out.push_back(std::move(l));
      continue;
    }
    l.foreign = reader_pidns == 0 || parsed.pidns != reader_pidns;
    const Snapshot& s = l.snapshot;
    if (l.status == ReadStatus::Ok &&
        (s.pid != parsed.pid || s.pidns != parsed.pidns || s.start_ticks != parsed.start_ticks)) {
      // A renamed or altered file: its name proves nothing.
      l.detail = "its name and its header disagree";
      out.push_back(std::move(l));
      continue;
    }
    l.stale = !l.foreign && provably_dead(reader_pidns, parsed.pidns, parsed.pid, parsed.start_ticks);
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
