// interpose/live/segment.cpp: the names, identities and liveness of
// live-stats segments (segment.h), and the UTF-8 repair of their texts; the
// writer is in segment_writer.cpp, the reader in segment_reader.cpp. Plain
// POSIX file calls; no CUDA.
#include "interpose/live/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pagefast::live {
namespace {

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

bool provably_dead(uint64_t reader_pidns, uint64_t pidns, uint64_t pid, uint64_t start_ticks) {
  if (reader_pidns == 0 || pidns != reader_pidns) return false;  // its pids are not ours to look up
  return !process_alive(pid, start_ticks);
}

}  // namespace pagefast::live
