// tests/live/test_segment.cpp: the live-stats segment (interpose/live/
// segment.h) without the library: creation and permissions, updates read
// whole by concurrent readers, half-made, foreign, incompatible and stale
// segments, names across pid namespaces, FIFOs, UTF-8 text and tags.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "interpose/live/segment.h"

using namespace pagefast;
using namespace pagefast::live;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/pagefast-live-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string path;
};

// The name a process of ours with this pid and start time has.
std::string own_name(const std::string& dir, long pid, uint64_t start_ticks) {
  Identity who;
  who.uid = getuid();
  who.pidns = own_pid_namespace();
  who.pid = uint64_t(pid);
  who.start_ticks = start_ticks;
  return dir + "/" + segment_name(who);
}
std::string own_name(const std::string& dir) { return own_name(dir, getpid(), process_start_ticks(getpid())); }

// The one file in dir whose name holds ".<pid>.".
std::string find_by_pid(const std::string& dir, long pid) {
  std::string found;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr)
    if (std::string(e->d_name).find("." + std::to_string(pid) + ".") != std::string::npos)
      found = dir + "/" + e->d_name;
  if (d) closedir(d);
  return found;
}

Update update_of(uint64_t k, int devices) {
  Update u;
  u.alloc_calls = k;
  u.free_calls = k;
  u.numa = "{\"k\": " + std::to_string(k) + "}";
  for (int d = 0; d < devices; ++d) {
    DeviceFigures f;
    f.device = d;
#define PF_SET(name, meaning) f.stats.name = k;
    PAGEFAST_POOL_STATS_FIELDS(PF_SET)
#undef PF_SET
    u.devices.push_back(f);
    policy::TagStats t;  // as many tags as devices, every figure k
    t.name = "tag" + std::to_string(k);
    t.slot = d + 1;
    t.keep = k % 2 == 0;
    t.asleep = k % 3 == 0;
#define PF_TAG_SET(name, meaning) t.name = k;
    PAGEFAST_TAG_FIELDS(PF_TAG_SET)
#undef PF_TAG_SET
    u.tags.push_back(t);
  }
  return u;
}

// Every field of a snapshot made by update_of(k) holds k.
bool consistent(const Snapshot& s, uint64_t* k) {
  *k = s.alloc_calls;
  if (s.free_calls != *k || s.numa != "{\"k\": " + std::to_string(*k) + "}") return false;
  for (const DeviceFigures& d : s.devices) {
#define PF_CMP(name, meaning) \
  if (d.stats.name != *k) return false;
    PAGEFAST_POOL_STATS_FIELDS(PF_CMP)
#undef PF_CMP
  }
  if (s.tags.size() != s.devices.size()) return false;
  for (const policy::TagStats& t : s.tags) {
    if (t.name != "tag" + std::to_string(*k) || t.keep != (*k % 2 == 0) || t.asleep != (*k % 3 == 0)) return false;
#define PF_TAG_CMP(name, meaning) \
  if (t.name != *k) return false;
    PAGEFAST_TAG_FIELDS(PF_TAG_CMP)
#undef PF_TAG_CMP
  }
  return true;
}

}  // namespace

TEST_CASE("a segment is created 0600, read back whole, and removed", "[live]") {
  TempDir dir;
  umask(0);  // the writer must not rely on the umask
  Writer w;
  std::string error;
  REQUIRE(w.create(dir.path, "python train.py", "pool on", &error));
  umask(022);
  const std::string path = own_name(dir.path);
  REQUIRE(w.path() == path);
  struct stat st;
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(S_ISREG(st.st_mode));
  CHECK(uint64_t(st.st_size) == sizeof(Segment));

  Snapshot s;
  std::string detail;
  REQUIRE(read_segment(path, &s, &detail) == ReadStatus::Ok);
  CHECK(s.pid == uint64_t(getpid()));
  CHECK(s.command == "python train.py");
  CHECK(s.config == "pool on");
  CHECK(s.devices.empty());
  CHECK(s.start_ticks == process_start_ticks(getpid()));

  w.publish(update_of(7, 3));
  REQUIRE(read_segment(path, &s, &detail) == ReadStatus::Ok);
  uint64_t k = 0;
  CHECK(consistent(s, &k));
  CHECK(k == 7);
  CHECK(s.devices.size() == 3);
  CHECK(s.publishes == 1);

  // A NUMA report is kept whole or not at all: a cut JSON document is none.
  w.publish([] {
    Update u = update_of(8, 1);
    u.numa = "[\"" + std::string(size_t(kNumaWords) * 8 - 4, 'x') + "\"]";  // one byte too long
    return u;
  }());
  REQUIRE(read_segment(path, &s, &detail) == ReadStatus::Ok);
  CHECK(s.numa.empty());
  w.publish([] {
    Update u = update_of(9, 1);
    u.numa = "[\"" + std::string(size_t(kNumaWords) * 8 - 5, 'x') + "\"]";  // fits exactly
    return u;
  }());
  REQUIRE(read_segment(path, &s, &detail) == ReadStatus::Ok);
  CHECK(s.numa.size() == size_t(kNumaWords) * 8 - 1);

  std::vector<Listing> all = list_segments(dir.path, getuid(), true);
  REQUIRE(all.size() == 1);
  CHECK(all[0].status == ReadStatus::Ok);
  CHECK_FALSE(all[0].stale);
  w.remove();
  CHECK(access(path.c_str(), F_OK) != 0);
  CHECK(list_segments(dir.path, getuid(), true).empty());
}

TEST_CASE("tags are read back with their names, policies, states and figures", "[live][tags]") {
  TempDir dir;
  Writer w;
  std::string error;
  REQUIRE(w.create(dir.path, "train", "pool on", &error));
  Update u = update_of(7, 2);
  u.tags[0].name = "kv";
  u.tags[0].keep = true;
  u.tags[0].asleep = true;
  u.tags[0].asleep_bytes = 24 << 20;
  u.tags[1].name = std::string(63, 'n');  // the longest name a region takes
  w.publish(u);
  Snapshot s;
  std::string detail;
  REQUIRE(read_segment(w.path(), &s, &detail) == ReadStatus::Ok);
  REQUIRE(s.tags.size() == 2);
  CHECK(s.tags[0].name == "kv");
  CHECK(s.tags[0].slot == 1);
  CHECK(s.tags[0].keep);
  CHECK(s.tags[0].asleep);
  CHECK(s.tags[0].asleep_bytes == 24 << 20);
  CHECK(s.tags[0].sleeps == 7);
  CHECK(s.tags[1].name == std::string(63, 'n'));
  CHECK(s.tags[1].slot == 2);
  CHECK_FALSE(s.tags[1].asleep);

  // More tags than a segment holds: the first kMaxTags; fewer later: only those.
  Update many;
  for (int i = 0; i < kMaxTags + 3; ++i) {
    policy::TagStats t;
    t.name = "t" + std::to_string(i);
    t.slot = i + 1;
    many.tags.push_back(t);
  }
  w.publish(many);
  REQUIRE(read_segment(w.path(), &s, &detail) == ReadStatus::Ok);
  REQUIRE(s.tags.size() == size_t(kMaxTags));
  CHECK(s.tags.back().name == "t" + std::to_string(kMaxTags - 1));
  w.publish(update_of(1, 1));
  REQUIRE(read_segment(w.path(), &s, &detail) == ReadStatus::Ok);
  CHECK(s.tags.size() == 1);
  w.remove();
}

TEST_CASE("the writer never follows a link nor takes over a file that is not its own", "[live]") {
  TempDir dir;
  const std::string path = own_name(dir.path);
  const std::string target = dir.path + "/target";
  REQUIRE(symlink(target.c_str(), path.c_str()) == 0);
  Writer w;
  std::string error;
  CHECK_FALSE(w.create(dir.path, "x", "y", &error));
  CHECK(error.find("not a regular file") != std::string::npos);
  CHECK(access(target.c_str(), F_OK) != 0);  // nothing created through the link
  // The reader refuses the link and leaves it alone.
  Snapshot s;
  std::string detail;
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Refused);
  std::vector<Listing> all = list_segments(dir.path, getuid(), true);
  REQUIRE(all.size() == 1);
  CHECK(all[0].status == ReadStatus::Refused);
  CHECK_FALSE(all[0].removed);
  struct stat st;
  CHECK(lstat(path.c_str(), &st) == 0);
  unlink(path.c_str());

  // A leftover regular file of this user with this pid (a reused pid) is
  // replaced.
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "junk", 4) == 4);
  close(fd);
  REQUIRE(w.create(dir.path, "x", "y", &error));
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(uint64_t(st.st_size) == sizeof(Segment));
  w.remove();
}

TEST_CASE("readers racing a writer see whole updates only", "[live]") {
  TempDir dir;
  Writer w;
  std::string error;
  REQUIRE(w.create(dir.path, "x", "y", &error));
  w.publish(update_of(0, kMaxDevices));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, torn{0}, backwards{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&] {
      uint64_t last = 0;
      while (!done.load()) {
        Snapshot s;
        std::string detail;
        const ReadStatus st = read_segment(w.path(), &s, &detail);
        if (st == ReadStatus::Busy) continue;  // allowed, rare
        uint64_t k = 0;
        if (st != ReadStatus::Ok || !consistent(s, &k)) ++torn;
        if (k < last) ++backwards;
        last = k;
        ++reads;
      }
    });
  for (uint64_t k = 1; k <= 20000; ++k) w.publish(update_of(k, int(k % kMaxDevices) + 1));
  done = true;
  for (auto& t : readers) t.join();
  CHECK(reads.load() > 0);
  CHECK(torn.load() == 0);
  CHECK(backwards.load() == 0);
  w.remove();
}

TEST_CASE("half-made, incompatible and busy segments are reported, not misread", "[live]") {
  TempDir dir;
  Snapshot s;
  std::string detail;
  const std::string path = own_name(dir.path);
  // Shorter than a segment: being created (or cut).
  int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 100) == 0);
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Incomplete);
  CHECK(detail.find("100") != std::string::npos);
  // Full size, no magic yet.
  REQUIRE(ftruncate(fd, sizeof(Segment)) == 0);
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Incomplete);
  // Full size with garbage.
  std::vector<char> junk(sizeof(Segment), 'Z');
  REQUIRE(pwrite(fd, junk.data(), junk.size(), 0) == ssize_t(junk.size()));
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Incomplete);
  // Another version.
  auto* seg = static_cast<Segment*>(mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(seg != MAP_FAILED);
  std::memset(static_cast<void*>(seg), 0, sizeof(Segment));
  seg->version = kVersion + 1;
  seg->bytes = sizeof(Segment);
  seg->magic = kMagic;
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Incompatible);
  CHECK(detail.find("version") != std::string::npos);
  // A writer stuck mid-update (seq odd): busy, after bounded tries.
  seg->version = kVersion;
  seg->seq = 1;
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Busy);
  seg->seq = 2;
  seg->pid = uint64_t(getpid());
  seg->pidns = own_pid_namespace();
  seg->start_ticks = process_start_ticks(getpid());
  CHECK(read_segment(path, &s, &detail) == ReadStatus::Ok);
  munmap(seg, sizeof(Segment));
  close(fd);
  // Our own process is alive: the listing keeps the segment.
  std::vector<Listing> all = list_segments(dir.path, getuid(), true);
  REQUIRE(all.size() == 1);
  CHECK_FALSE(all[0].stale);
  unlink(path.c_str());
}

TEST_CASE("segments of processes that are gone are ignored and removed", "[live]") {
  TempDir dir;
  // A child makes a segment and dies without removing it (killed).
  const pid_t child = fork();
  if (child == 0) {
    Writer w;
    std::string error;
    if (!w.create(dir.path, "child", "y", &error)) _exit(1);
    w.publish(update_of(1, 1));
    _exit(0);  // no remove(): as after SIGKILL
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const std::string stale_path = find_by_pid(dir.path, child);
  REQUIRE(!stale_path.empty());
  REQUIRE(access(stale_path.c_str(), F_OK) == 0);

  // A half-made one of a dead process is stale too (its name says who).
  const std::string half = own_name(dir.path, child + 100000, 77);
  {
    const int fd = open(half.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  // A live segment of ours whose start time does not match: a reused pid.
  Writer mine;
  std::string error;
  REQUIRE(mine.create(dir.path, "me", "y", &error));
  mine.publish(update_of(2, 1));

  std::vector<Listing> seen = list_segments(dir.path, getuid(), false);
  int stale = 0;
  for (const Listing& l : seen) stale += l.stale;
  CHECK(stale == 2);
  CHECK(access(stale_path.c_str(), F_OK) == 0);  // not cleaning: left in place

  std::vector<Listing> cleaned = list_segments(dir.path, getuid(), true);
  int removed = 0, live = 0;
  for (const Listing& l : cleaned) {
    removed += l.removed;
    live += l.status == ReadStatus::Ok && !l.stale;
  }
  CHECK(removed == 2);
  CHECK(live == 1);
  CHECK(access(stale_path.c_str(), F_OK) != 0);
  CHECK(access(half.c_str(), F_OK) != 0);
  CHECK_FALSE(process_alive(uint64_t(child), 0));
  CHECK(process_alive(uint64_t(getpid()), process_start_ticks(getpid())));
  CHECK_FALSE(process_alive(uint64_t(getpid()), process_start_ticks(getpid()) + 12345));
  mine.remove();
}

TEST_CASE("segment names carry the pid namespace and start time; old names still parse", "[live]") {
  Identity who;
  who.uid = 1000;
  who.pidns = 4026531836ull;
  who.pid = 1;
  who.start_ticks = 123456;
  CHECK(segment_name(who) == "pagefast.1000.4026531836.1.123456");
  ParsedName n;
  REQUIRE(parse_segment_name("pagefast.1000.4026531836.1.123456", 1000, &n));
  CHECK((n.pidns == who.pidns && n.pid == 1 && n.start_ticks == 123456 && !n.legacy));
  REQUIRE(parse_segment_name("pagefast.1000.42", 1000, &n));
  CHECK((n.legacy && n.pid == 42 && n.pidns == 0));
  for (const char* bad : {"pagefast.1000.", "pagefast.1000.1.2", "pagefast.1000.1.2.3.4", "pagefast.1000.1.2.x",
                          "pagefast.1000.1..3", "pagefast.1000.1.2.3.", "pagefast.1001.1.2.3", "pagefast.1000.-1",
                          "pagefast.1000.99999999999999999999.1.1", "pagefast.10000.1.2.3"})
    CHECK_FALSE(parse_segment_name(bad, 1000, &n));
  const Identity me = own_identity();
  CHECK(me.pid == uint64_t(getpid()));
  CHECK(me.start_ticks == process_start_ticks(getpid()));
  CHECK(me.pidns != 0);
}

TEST_CASE("only an owner provably dead in the reader's pid namespace is removed", "[live]") {
  const uint64_t ns = own_pid_namespace();
  REQUIRE(ns != 0);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  CHECK(provably_dead(ns, ns, uint64_t(child), 5));
  CHECK_FALSE(provably_dead(ns, ns + 1, uint64_t(child), 5));  // another namespace's pid
  CHECK_FALSE(provably_dead(0, 0, uint64_t(child), 5));        // reader's namespace unknown
  CHECK_FALSE(provably_dead(ns, ns, uint64_t(getpid()), process_start_ticks(getpid())));
  CHECK(provably_dead(ns, ns, uint64_t(getpid()), process_start_ticks(getpid()) + 1));  // pid reused

  TempDir dir;
  // Segments of a dead pid, named from another pid namespace and with the
  // old name: listed, never removed.
  const auto make = [&](const std::string& name) {
    const std::string path = dir.path + "/" + name;
    const int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, sizeof(Segment)) == 0);
    close(fd);
    return path;
  };
  const std::string uid = std::to_string(getuid());
  const std::string foreign =
      make("pagefast." + uid + "." + std::to_string(ns + 1) + "." + std::to_string(child) + ".5");
  const std::string legacy = make("pagefast." + uid + "." + std::to_string(child));
  const std::string mine = make("pagefast." + uid + "." + std::to_string(ns) + "." + std::to_string(child) + ".5");
  std::vector<Listing> all = list_segments(dir.path, getuid(), true);
  REQUIRE(all.size() == 3);
  int removed = 0, foreigners = 0;
  for (const Listing& l : all) {
    removed += l.removed;
    foreigners += l.foreign;
    if (l.path != mine) CHECK_FALSE(l.stale);
  }
  CHECK(removed == 1);
  CHECK(foreigners == 2);
  CHECK(access(foreign.c_str(), F_OK) == 0);
  CHECK(access(legacy.c_str(), F_OK) == 0);
  CHECK(access(mine.c_str(), F_OK) != 0);
}

TEST_CASE("a FIFO, a directory or a link named like a segment never blocks nor is removed", "[live]") {
  TempDir dir;
  const std::string uid = std::to_string(getuid());
  const std::string ns = std::to_string(own_pid_namespace());
  const std::string fifo = dir.path + "/pagefast." + uid + "." + ns + ".999999999.1";
  const std::string old_fifo = dir.path + "/pagefast." + uid + ".999999998";
  const std::string sub = dir.path + "/pagefast." + uid + "." + ns + ".999999997.1";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(mkfifo(old_fifo.c_str(), 0600) == 0);
  REQUIRE(mkdir(sub.c_str(), 0700) == 0);
  // A FIFO opened for reading would block until a writer came: these
  // calls return at all (the suite's timeout is the hang guard).
  Snapshot s;
  std::string detail;
  CHECK(read_segment(fifo, &s, &detail) == ReadStatus::Refused);
  std::vector<Listing> all = list_segments(dir.path, getuid(), true);
  REQUIRE(all.size() == 3);
  for (const Listing& l : all) {
    CHECK(l.status == ReadStatus::Refused);
    CHECK_FALSE(l.removed);
  }
  CHECK(access(fifo.c_str(), F_OK) == 0);
  CHECK(access(sub.c_str(), F_OK) == 0);
}

TEST_CASE("text is cut on a UTF-8 character boundary and read back valid", "[live]") {
  CHECK(utf8_cut("ab\xc3\xa9", 3) == "ab");  // never half of an e-acute
  CHECK(utf8_cut("ab\xc3\xa9", 4) == "ab\xc3\xa9");
  CHECK(utf8_cut("\xe2\x82\xac\xe2\x82\xac", 5) == "\xe2\x82\xac");  // euro signs
  CHECK(utf8_cut("\xf0\x9f\x98\x80x", 3).empty());
  CHECK(utf8_valid("a\xff"
                   "b") ==
        "a\xef\xbf\xbd"
        "b");
  CHECK(utf8_valid("\xc3") == "\xef\xbf\xbd");                                  // cut sequence
  CHECK(utf8_valid("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  CHECK(utf8_valid("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(utf8_valid("\xf4\x90\x80\x80").find("\xf4") == std::string::npos);      // past U+10FFFF

  TempDir dir;
  Writer w;
  std::string error;
  std::string command;
  for (int i = 0; i < 300; ++i) command += "\xc3\xa9";  // 600 bytes of two-byte characters
  REQUIRE(w.create(dir.path, command, std::string(400, 'c') + "\xe2\x82\xac", &error));
  Snapshot s;
  std::string detail;
  REQUIRE(read_segment(w.path(), &s, &detail) == ReadStatus::Ok);
  CHECK(s.command.size() == 510);  // 255 whole characters of the 511 bytes' room
  CHECK(s.command == command.substr(0, 510));
  CHECK(s.config == std::string(319, 'c'));
  CHECK(s.host == utf8_cut(own_identity().host, 63));
  w.remove();
}
