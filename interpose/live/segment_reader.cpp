// interpose/live/segment_reader.cpp: reading and listing live-stats
// segments (segment.h). Plain POSIX file calls and atomics; no CUDA.
#include "interpose/live/segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace pagefast::live {
namespace {

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

// The tags of a segment (under the caller's sequence check).
std::vector<policy::TagStats> read_tags(const Segment& s) {
  std::vector<policy::TagStats> out;
  const uint64_t count = std::min<uint64_t>(s.tag_count.load(std::memory_order_relaxed), kMaxTags);
  for (uint64_t i = 0; i < count; ++i) {
    const TagRecord& record = s.tags[i];
    policy::TagStats t;
    t.name = utf8_valid(get_text(record.name));
    t.slot = int(record.slot.load(std::memory_order_relaxed));
    t.keep = record.keep.load(std::memory_order_relaxed) != 0;
    t.asleep = record.asleep.load(std::memory_order_relaxed) != 0;
#define PF_LIVE_TAG_LOAD(name, meaning) t.name = record.name.load(std::memory_order_relaxed);
    PAGEFAST_TAG_FIELDS(PF_LIVE_TAG_LOAD)
#undef PF_LIVE_TAG_LOAD
    out.push_back(t);
  }
  return out;
}

}  // namespace

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

// The pooled devices of a segment (under the caller's sequence check).
std::vector<DeviceFigures> read_devices(const Segment& s) {
  std::vector<DeviceFigures> out;
  const uint64_t n = std::min<uint64_t>(s.device_count.load(std::memory_order_relaxed), kMaxDevices);
  for (uint64_t i = 0; i < n; ++i) {
    const DeviceRecord& record = s.devices[i];
    DeviceFigures d;
    d.device = int(record.device.load(std::memory_order_relaxed));
    const uint64_t sleep = record.asleep.load(std::memory_order_relaxed);
    d.asleep = sleep != 0;
    d.partly = sleep == 2;
#define PF_LIVE_LOAD(name, meaning) d.stats.name = record.name.load(std::memory_order_relaxed);
    PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_LOAD)
#undef PF_LIVE_LOAD
    out.push_back(d);
  }
  return out;
}

// Everything of a segment, as it is now (under the caller's sequence check).
Snapshot read_now(const Segment& s) {
  Snapshot snap;
#define PF_LIVE_NUMBER(field) snap.field = s.field.load(std::memory_order_relaxed);
  PF_LIVE_NUMBER(pid)
  PF_LIVE_NUMBER(uid)
  PF_LIVE_NUMBER(pidns)
  PF_LIVE_NUMBER(local_rank)
  PF_LIVE_NUMBER(mode)
  PF_LIVE_NUMBER(start_ticks)
  PF_LIVE_NUMBER(created_unix_ns)
  PF_LIVE_NUMBER(updated_unix_ns)
  PF_LIVE_NUMBER(publishes)
  PF_LIVE_NUMBER(alloc_calls)
  PF_LIVE_NUMBER(free_calls)
#undef PF_LIVE_NUMBER
#define PF_LIVE_TEXT(field) snap.field = utf8_valid(get_text(s.field));
  PF_LIVE_TEXT(reason)
  PF_LIVE_TEXT(command)
  PF_LIVE_TEXT(config)
  PF_LIVE_TEXT(numa)
  PF_LIVE_TEXT(host)
#undef PF_LIVE_TEXT
  snap.devices = read_devices(s);
  snap.tags = read_tags(s);
  return snap;
}

// A segment's file mapped for reading (sizeof(Segment) bytes), or NULL
// with the status and *detail saying why not.
const Segment* map_segment(const std::string& path, ReadStatus* status, std::string* detail) {
  *status = ReadStatus::Refused;
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *detail = errno == ELOOP ? "a symbolic link" : std::strerror(errno);
    if (errno == ENOENT) *status = ReadStatus::NotFound;
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
    close(fd);
    *detail = "not a regular file of this user";
    return nullptr;
  }
  if (uint64_t(st.st_size) < sizeof(Segment)) {
    close(fd);
    *detail = "holds " + std::to_string(st.st_size) + " of " + std::to_string(sizeof(Segment)) + " bytes";
    *status = ReadStatus::Incomplete;
    return nullptr;
  }
  void* memory = mmap(nullptr, sizeof(Segment), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (memory == MAP_FAILED) {
    *detail = std::string("mmap: ") + std::strerror(errno);
    return nullptr;
  }
  return static_cast<const Segment*>(memory);
}

// A mapped segment's header checked, then its figures copied between two
// equal even sequence numbers.
ReadStatus read_mapped(const Segment* s, Snapshot* out, std::string* detail) {
  if (s->magic.load(std::memory_order_acquire) != kMagic) {
    *detail = "no pagefast header (yet)";
    return ReadStatus::Incomplete;
  }
  if (s->version.load(std::memory_order_relaxed) != kVersion ||
      s->bytes.load(std::memory_order_relaxed) != sizeof(Segment)) {
    *detail = "version " + std::to_string(s->version.load(std::memory_order_relaxed)) + ", " +
              std::to_string(s->bytes.load(std::memory_order_relaxed)) + " bytes; this reader knows version " +
              std::to_string(kVersion) + ", " + std::to_string(sizeof(Segment)) + " bytes";
    return ReadStatus::Incompatible;
  }
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t before = s->seq.load(std::memory_order_acquire);
    if (before & 1) {
      sched_yield();
      continue;
    }
    Snapshot snap = read_now(*s);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s->seq.load(std::memory_order_relaxed) == before) {
      *out = std::move(snap);
      return ReadStatus::Ok;
    }
  }
  *detail = "an update was in progress at every try";
  return ReadStatus::Busy;
}

}  // namespace

ReadStatus read_segment(const std::string& path, Snapshot* out, std::string* detail) {
  ReadStatus status = ReadStatus::Refused;
  const Segment* s = map_segment(path, &status, detail);
  if (!s) return status;
  status = read_mapped(s, out, detail);
  munmap(const_cast<Segment*>(s), sizeof(Segment));
  return status;
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
