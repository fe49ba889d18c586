// interpose/live/segment.h: the live-stats segment, one per process with
// pagefast, which pagefast-stat reads (docs/STATS.md "Live stats").
//
// A file of sizeof(Segment) bytes named pagefast.<uid>.<pid> in /dev/shm
// (or PAGEFAST_LIVE_DIR), created with O_EXCL|O_NOFOLLOW and mode 0600,
// mapped shared, removed at exit. Its creator writes it under a sequence
// lock (odd while writing); every field is a 64-bit atomic, text included
// (eight characters a word), so readers need no lock and see either a
// whole update or retry. The magic word is stored last at creation: a
// reader that meets a file without it, or shorter than a Segment, has met
// a half-made segment and says so.
//
// Pure C++ with no CUDA header: the library (writer) and pagefast-stat
// (reader) share it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/pool_stats.h"

namespace pagefast::live {

constexpr uint64_t kMagic = 0x31564c4654534650ull;  // "PFSTFLV1", little-endian
constexpr uint32_t kVersion = 1;
constexpr int kMaxDevices = 16;
constexpr int kCommandWords = 16;  // 128 characters
constexpr int kConfigWords = 40;   // 320
constexpr int kNumaWords = 64;     // 512
constexpr const char* kDefaultDir = "/dev/shm";
constexpr const char* kPrefix = "pagefast.";

struct DeviceSlot {
  std::atomic<uint64_t> device;  // ordinal
#define PF_LIVE_FIELD(name, meaning) std::atomic<uint64_t> name;
  PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_FIELD)
#undef PF_LIVE_FIELD
};

struct Segment {
  std::atomic<uint64_t> magic;    // kMagic once the header is complete
  std::atomic<uint64_t> version;  // kVersion
  std::atomic<uint64_t> bytes;    // sizeof(Segment)
  std::atomic<uint64_t> pid;
  std::atomic<uint64_t> uid;
  std::atomic<uint64_t> start_ticks;      // /proc/<pid>/stat field 22: tells a reused pid apart
  std::atomic<uint64_t> created_unix_ns;
  std::atomic<uint64_t> seq;              // odd while an update is being written
  std::atomic<uint64_t> updated_unix_ns;
  std::atomic<uint64_t> publishes;
  std::atomic<uint64_t> alloc_calls;      // cuMemAlloc_v2 calls seen
  std::atomic<uint64_t> free_calls;       // cuMemFree_v2 calls seen
  std::atomic<uint64_t> device_count;     // valid entries of devices[]
  std::atomic<uint64_t> command[kCommandWords];
  std::atomic<uint64_t> config[kConfigWords];
  std::atomic<uint64_t> numa[kNumaWords];
  DeviceSlot devices[kMaxDevices];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the segment needs lock-free 64-bit atomics");

// What a reader copies out of a segment.
struct DeviceFigures {
  int device = 0;
  policy::PoolStats stats;
};

struct Snapshot {
  uint64_t pid = 0;
  uint64_t uid = 0;
  uint64_t start_ticks = 0;
  uint64_t created_unix_ns = 0;
  uint64_t updated_unix_ns = 0;
  uint64_t publishes = 0;
  uint64_t alloc_calls = 0;
  uint64_t free_calls = 0;
  std::string command;
  std::string config;
  std::string numa;  // the NUMA report as JSON text
  std::vector<DeviceFigures> devices;
};

// The figures a writer publishes.
struct Update {
  uint64_t alloc_calls = 0;
  uint64_t free_calls = 0;
  std::string numa;
  std::vector<DeviceFigures> devices;  // at most kMaxDevices are kept
};

// ---- writer (the library) ---------------------------------------------------

class Writer {
 public:
  // Creates dir/pagefast.<uid>.<pid> safely. A file of the same name that
  // is a regular file of this user is a leftover of an earlier process with
  // this pid: replaced. Anything else (a link, someone else's file): the
  // writer stays closed and *error says why.
  bool create(const std::string& dir, const std::string& command, const std::string& config, std::string* error);
  void publish(const Update& update);
  // Unlinks the file if this process made it (not in a forked child).
  void remove();
  bool open() const { return segment_.load(std::memory_order_acquire) != nullptr; }
  const std::string& path() const { return path_; }

 private:
  std::atomic<Segment*> segment_{nullptr};  // the mapping itself is never unmapped
  std::string path_;
  uint64_t owner_pid_ = 0;
};

// ---- reader (pagefast-stat, tests) ------------------------------------------

enum class ReadStatus {
  Ok,
  NotFound,      // vanished (its process exited meanwhile)
  Refused,       // not a regular file of this user, or a symbolic link
  Incomplete,    // shorter than a segment, or no magic yet: being created
  Incompatible,  // another version or size
  Busy,          // an update was being written every time we looked
};
const char* status_name(ReadStatus status);

ReadStatus read_segment(const std::string& path, Snapshot* out, std::string* detail);

// Whether the process a segment names is still the one that made it.
bool process_alive(uint64_t pid, uint64_t start_ticks);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot); 0 if
// unknown.
uint64_t process_start_ticks(uint64_t pid);

struct Listing {
  std::string path;
  ReadStatus status = ReadStatus::NotFound;
  std::string detail;
  bool stale = false;    // its process is gone (or the pid was reused)
  bool removed = false;  // stale, and removed by this call
  Snapshot snapshot;     // valid when status == Ok
};

// Every segment of user `uid` in dir, sorted by pid. Stale ones (the
// process is gone) are removed when clean_stale is set, and reported.
std::vector<Listing> list_segments(const std::string& dir, uint64_t uid, bool clean_stale);

}  // namespace pagefast::live
