// interpose/live/segment.h: the live-stats segment, one per process with
// pagefast, which pagefast-stat reads (docs/STATS.md "Live stats").
//
// A file of sizeof(Segment) bytes named
// pagefast.<uid>.<pidns>.<pid>.<start ticks> in /dev/shm (or
// PAGEFAST_LIVE_DIR), created with O_EXCL|O_NOFOLLOW and mode 0600, mapped
// shared, removed at exit. The pid namespace's inode and the process start
// time make the name unique on a shared directory (two containers' pid 1)
// and let a reader prove an owner dead only from its own pid namespace
// (docs/STATS.md "Live stats"). Its creator writes it under a sequence
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
constexpr uint32_t kVersion = 4;                    // 3: mode, reason, asleep; a longer command. 4: tags
constexpr int kMaxDevices = 16;
constexpr int kMaxTags = policy::kMaxTags;  // every tag (policy/tags.h)
constexpr int kTagNameWords = 8;            // 64: a tag's name with its NUL
static_assert(kTagNameWords * sizeof(uint64_t) == policy::kTagNameBytes, "a tag's name fills its words");
constexpr int kCommandWords = 64;  // 512 characters: the interpreter, its script and arguments
constexpr int kConfigWords = 40;   // 320
constexpr int kNumaWords = 64;     // 512
constexpr int kHostWords = 8;      // 64
constexpr int kReasonWords = 40;   // 320
constexpr uint64_t kNoRank = UINT64_MAX;
constexpr const char* kDefaultDir = "/dev/shm";
constexpr const char* kPrefix = "pagefast.";

struct DeviceRecord {
  std::atomic<uint64_t> device;  // ordinal
  // 0 awake; 1 asleep (from the start of a sleep of every pool of the
  // device to the end of its wake); 2 partly asleep (some pools, a tag's).
  // A reader of an older pagefast reads any non-zero as asleep.
  std::atomic<uint64_t> asleep;
#define PF_LIVE_FIELD(name, meaning) std::atomic<uint64_t> name;
  PAGEFAST_POOL_STATS_FIELDS(PF_LIVE_FIELD)
#undef PF_LIVE_FIELD
};

// One tag (docs/SLEEP.md): its figures over every device.
struct TagRecord {
  std::atomic<uint64_t> name[kTagNameWords];
  std::atomic<uint64_t> slot;
  std::atomic<uint64_t> keep;    // 1: the regions keep the contents at sleep
  std::atomic<uint64_t> asleep;  // 1 from the tag's sleep to its wake
#define PF_LIVE_TAG_FIELD(name, meaning) std::atomic<uint64_t> name;
  PAGEFAST_TAG_FIELDS(PF_LIVE_TAG_FIELD)
#undef PF_LIVE_TAG_FIELD
};

struct Segment {
  std::atomic<uint64_t> magic;    // kMagic once the header is complete
  std::atomic<uint64_t> version;  // kVersion
  std::atomic<uint64_t> bytes;    // sizeof(Segment)
  std::atomic<uint64_t> pid;
  std::atomic<uint64_t> uid;
  std::atomic<uint64_t> start_ticks;  // /proc/<pid>/stat field 22: tells a reused pid apart
  std::atomic<uint64_t> created_unix_ns;
  std::atomic<uint64_t> seq;  // odd while an update is being written
  std::atomic<uint64_t> updated_unix_ns;
  std::atomic<uint64_t> publishes;
  std::atomic<uint64_t> alloc_calls;   // cuMemAlloc_v2 calls seen
  std::atomic<uint64_t> free_calls;    // cuMemFree_v2 calls seen
  std::atomic<uint64_t> device_count;  // valid entries of devices[]
  std::atomic<uint64_t> pidns;         // inode of the writer's pid namespace; 0 if unknown
  std::atomic<uint64_t> local_rank;    // LOCAL_RANK and the like (numa/device_select.h); kNoRank
  std::atomic<uint64_t> mode;          // policy::Mode (config.h): active, off, pass-through
  std::atomic<uint64_t> command[kCommandWords];
  std::atomic<uint64_t> config[kConfigWords];
  std::atomic<uint64_t> numa[kNumaWords];
  std::atomic<uint64_t> host[kHostWords];
  std::atomic<uint64_t> reason[kReasonWords];  // why not active (config.h mode_reason); "" when active
  DeviceRecord devices[kMaxDevices];
  std::atomic<uint64_t> tag_count;  // valid entries of tags[]
  TagRecord tags[kMaxTags];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the segment needs lock-free 64-bit atomics");

// What a reader copies out of a segment.
struct DeviceFigures {
  int device = 0;
  bool asleep = false;  // some of the device's pools sleep (all of them unless partly)
  bool partly = false;  // asleep, and others awake (a tag's sleep)
  policy::PoolStats stats;
};

// Text comes out as valid UTF-8 (an invalid byte becomes U+FFFD), so a
// reader can escape it into JSON or a Prometheus label as it is.
struct Snapshot {
  uint64_t pid = 0;
  uint64_t uid = 0;
  uint64_t pidns = 0;
  uint64_t local_rank = kNoRank;
  uint64_t start_ticks = 0;
  uint64_t created_unix_ns = 0;
  uint64_t updated_unix_ns = 0;
  uint64_t publishes = 0;
  uint64_t alloc_calls = 0;
  uint64_t free_calls = 0;
  uint64_t mode = 0;  // policy::Mode
  std::string reason;
  std::string command;
  std::string config;
  std::string numa;  // the NUMA report as JSON text, or "" (see Update::numa)
  std::string host;
  std::vector<DeviceFigures> devices;
  std::vector<policy::TagStats> tags;
};

// Who writes a segment: what its name and header say, and how pagefast
// serves it.
struct Identity {
  uint64_t mode = 0;  // policy::Mode
  std::string reason;
  uint64_t uid = 0;
  uint64_t pidns = 0;  // 0: unknown
  uint64_t pid = 0;
  uint64_t start_ticks = 0;  // 0: unknown
  uint64_t local_rank = kNoRank;
  std::string host;
};

// This process's identity (the rank from the environment, as the NUMA
// binding reads it, is filled in by the caller).
Identity own_identity();

// "pagefast.<uid>.<pidns>.<pid>.<start ticks>".
std::string segment_name(const Identity& who);

// The parts of a segment name of user `uid`. The name of pagefast 0.1,
// "pagefast.<uid>.<pid>", parses with legacy set (pidns and start 0).
struct ParsedName {
  uint64_t pidns = 0;
  uint64_t pid = 0;
  uint64_t start_ticks = 0;
  bool legacy = false;
};
bool parse_segment_name(const char* name, uint64_t uid, ParsedName* out);

// The inode of /proc/self/ns/pid; 0 if it cannot be read.
uint64_t own_pid_namespace();

// Text cut to at most max_bytes on a UTF-8 character boundary, and made
// valid UTF-8 (each invalid byte becomes U+FFFD, which may lengthen it:
// cut after).
std::string utf8_valid(const std::string& text);
std::string utf8_cut(const std::string& text, size_t max_bytes);

// The figures a writer publishes.
struct Update {
  uint64_t alloc_calls = 0;
  uint64_t free_calls = 0;
  // The NUMA report (JSON). Kept whole or not at all: one that does not
  // fit the segment's kNumaWords is stored as "" (pagefast-stat prints
  // null), never as a cut document.
  std::string numa;
  std::vector<DeviceFigures> devices;  // at most kMaxDevices are kept
  std::vector<policy::TagStats> tags;  // at most kMaxTags are kept; names cut to 63 bytes
};

// ---- writer (the library) ---------------------------------------------------

class Writer {
 public:
  // Creates dir/segment_name(who) safely. A file of the same name that is
  // a regular file of this user is a leftover of this very process before
  // an exec (same pid, same start time): replaced. Anything else (a link,
  // someone else's file, a FIFO): the writer stays closed and *error says
  // why. Text is cut on a UTF-8 character boundary.
  bool create(const std::string& dir, const Identity& who, const std::string& command, const std::string& config,
              std::string* error);
  // The same, as own_identity().
  bool create(const std::string& dir, const std::string& command, const std::string& config, std::string* error) {
    return create(dir, own_identity(), command, config, error);
  }
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
  Refused,       // not a regular file of this user (a link, a FIFO, another user's)
  Incomplete,    // shorter than a segment, or no magic yet: being created
  Incompatible,  // another version or size
  Busy,          // an update was being written every time we looked
};
const char* status_name(ReadStatus status);

// Opens with O_NONBLOCK|O_NOFOLLOW and checks type and owner with fstat
// before anything is read: a FIFO or device named like a segment never
// blocks the reader.
ReadStatus read_segment(const std::string& path, Snapshot* out, std::string* detail);

// Whether the process a segment names is still the one that made it, as
// seen from the caller's pid namespace.
bool process_alive(uint64_t pid, uint64_t start_ticks);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot); 0 if
// unknown.
uint64_t process_start_ticks(uint64_t pid);

struct Listing {
  std::string path;
  ParsedName name;
  ReadStatus status = ReadStatus::NotFound;
  std::string detail;
  bool foreign = false;  // written from another pid namespace (or one not known): its liveness cannot be judged
  bool stale = false;    // its process is provably gone (or the pid was reused)
  bool removed = false;  // stale, and removed by this call
  Snapshot snapshot;     // valid when status == Ok
};

// Whether a segment's owner is provably dead: the reader's pid namespace
// is known and is the owner's (reader_pidns == owner pidns), and the pid
// is gone or now belongs to a process started at another time. Unknown
// anything: alive.
bool provably_dead(uint64_t reader_pidns, uint64_t pidns, uint64_t pid, uint64_t start_ticks);

// Every segment of user `uid` in dir, sorted by pid. Stale ones are
// removed when clean_stale is set, and reported; foreign ones and names
// of pagefast 0.1 are listed and never removed.
std::vector<Listing> list_segments(const std::string& dir, uint64_t uid, bool clean_stale);

}  // namespace pagefast::live
