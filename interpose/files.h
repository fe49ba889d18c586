// interpose/files.h: the one place where pagefast names, opens and writes
// its own files (PAGEFAST_STATS, PAGEFAST_REPORT, PAGEFAST_TRACE,
// PAGEFAST_LOG_FILE), and the rule that hides those variables from a
// secure-execution process. Rules and reasons: docs/SECURITY.md.
//
// Plain system calls only, no logger: a refusal comes back as a phrase in
// *why for the caller to log, so the logger itself can open its file here.
// Safe in a destructor; never call any of it on an allocation hot path.
#pragma once

#include <cstddef>
#include <string>

#include "policy/config.h"

namespace pagefast::files {

// What "%p", "%r" and "%h" in a path become.
struct PathValues {
  std::string pid;
  std::string rank;  // the local rank; "0" when no launcher set one
  std::string host;  // the host name, '/' replaced by '_'
};

// The local rank as the launcher gave it: the first of LOCAL_RANK,
// SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID that is set
// (numa/device_select.h, the same list); "" when none is set, or when the
// value is not a plain decimal number (it goes into file names).
std::string local_rank(EnvLookup lookup, void* user);

// This process's values (getpid, local_rank through getenv, gethostname).
PathValues current_values();

// `path` with "%p", "%r", "%h" replaced and "%%" made "%"; any other "%"
// is kept as written. Pure.
std::string expand_path(const std::string& path, const PathValues& values);
std::string expand_path(const std::string& path);  // with current_values()

enum class OpenMode { Truncate, Append };

// Opens `path` for writing under the file rules (docs/SECURITY.md): never
// through a symbolic link (O_NOFOLLOW), never blocking (O_NONBLOCK until
// fstat has shown a regular file, then cleared), only a regular file owned
// by this user, created 0600 and set to 0600 whatever the umask, emptied
// (Truncate) only after those checks, never a missing parent directory
// made. Returns the descriptor (O_CLOEXEC), or -1 with *why set to a phrase
// naming the path and the reason.
int open_private(const std::string& path, OpenMode mode, std::string* why);

// write(2) until all of data is written, retrying EINTR; false on error.
bool write_all(int fd, const void* data, size_t bytes);

// Writes `text` to `target`: "stderr", or a path (expanded, then opened by
// open_private with Truncate). false with *why on failure.
bool write_text(const std::string& target, const std::string& text, std::string* why);

// Writes `text` to `path` whole or not at all: into a new 0600 file beside
// it (O_EXCL), then rename(2) over `path`. A reader sees the old file or the
// new one, never a part (for collectors that read while we write). false
// with *why on failure, leaving no temporary file behind.
bool write_atomic(const std::string& path, const std::string& text, std::string* why);

// Whether this user may make a file at `path` (already expanded): its
// folder exists, is a directory and can be written. Checked at load, so
// that a file written only at exit is not found missing then. false with
// *why naming the folder and the reason.
bool folder_writable(const std::string& path, std::string* why);
// Whether `dir` is a directory this user can write in; false with *why.
bool directory_writable(const std::string& dir, std::string* why);

// The variables that name a file or directory (the options table's `path`
// column, policy/options.h). In secure execution
// (getauxval(AT_SECURE) != 0: a setuid or setgid program, or one with file
// capabilities) they are ignored, as glibc ignores its own: the environment
// there belongs to a less privileged user.
bool is_path_variable(const char* name);
// true when `name` must read as unset for a process whose AT_SECURE is
// `at_secure`. Pure: the auxv value comes in.
bool ignored_in_secure_execution(const char* name, unsigned long at_secure);

}  // namespace pagefast::files
