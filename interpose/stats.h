// interpose/stats.h: call and door counters, and the stats document
// written at exit (PAGEFAST_STATS). Counting costs a thread-local add: each
// thread owns a block of counters that readers sum; blocks of exited
// threads are kept and re-used, so no count is ever lost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "interpose/entries.h"

namespace pagefast::stats {

enum class Door : int { Symbol = 0, Dlsym = 1, ProcAddress = 2, kCount };

void count_call(Entry entry);
// PAGEFAST_CONF stats:off: calls are not counted (doors still are).
void set_call_counting(bool on);
void count_door(Door door);
uint64_t calls(Entry entry);
uint64_t doors(Door door);

// The whole stats document as JSON text. Reads counters only: safe at exit.
std::string document();

// Writes document() to PAGEFAST_STATS ("stderr", or a path; "%p" in the
// path becomes the pid). A path is created with mode 0600 and never opened
// through a symbolic link. Uses only open/write: safe in a destructor.
void write_if_requested();

// Writes `text` to `target`: "stderr", or a path in which "%p" becomes the
// pid, created with mode 0600, opened with O_NOFOLLOW, and written only if
// it is a regular file of this user (truncated first). `variable` names the
// setting in warnings. The one safe writer of the stats document and the
// memory report; plain open/write, safe in a destructor. true: written.
bool write_text(const std::string& target, const std::string& text, const char* variable);

// `path` with every "%p" replaced by the pid (PAGEFAST_STATS, _REPORT, _TRACE).
std::string expand_path(const std::string& path);

// write(2) until all of data is written, retrying EINTR; false on error.
// Plain system calls: safe in a destructor.
bool write_all(int fd, const void* data, size_t bytes);

}  // namespace pagefast::stats
