// interpose/files.cpp: path expansion, the safe open and the writers
// (files.h; the rules and their reasons in docs/SECURITY.md).
#include "interpose/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "numa/device_select.h"
#include "policy/options.h"

namespace pagefast::files {
namespace {

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

bool is_decimal(const char* text) {
  if (!*text) return false;
  for (const char* c = text; *c; ++c)
    if (*c < '0' || *c > '9') return false;
  return true;
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

}  // namespace

std::string local_rank(EnvLookup lookup, void* user) {
  for (Opt var : numa::kLocalRankVars) {
    const char* value = lookup(option_name(var), user);
    // Empty counts as unset, as in numa/device_select.h.
    if (!value || !*value) continue;
    return is_decimal(value) && std::strlen(value) <= 9 ? std::string(value) : std::string();
  }
  return "";
}

PathValues current_values() {
  PathValues v;
  v.pid = std::to_string(getpid());
  v.rank = local_rank(&env_lookup, nullptr);
  if (v.rank.empty()) v.rank = "0";
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) v.host = host;
  for (char& c : v.host)
    if (c == '/') c = '_';
  if (v.host.empty()) v.host = "localhost";
  return v;
}

std::string expand_path(const std::string& path, const PathValues& values) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    const char next = i + 1 < path.size() ? path[i + 1] : '\0';
    if (path[i] != '%' || !next) {
      out += path[i];
      continue;
    }
    switch (next) {
      case 'p': out += values.pid; break;
      case 'r': out += values.rank; break;
      case 'h': out += values.host; break;
      case '%': out += '%'; break;
      default: out += '%'; continue;  // kept as written; `next` is copied on the next turn
    }
    ++i;
  }
  return out;
}

std::string expand_path(const std::string& path) { return expand_path(path, current_values()); }

bool directory_writable(const std::string& dir, std::string* why) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    *why = "folder " + quoted(dir) + " " + (errno == ENOENT ? "does not exist" : std::strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = quoted(dir) + " is not a folder";
    return false;
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    *why = "folder " + quoted(dir) + " cannot be written";
    return false;
  }
  return true;
}

bool folder_writable(const std::string& path, std::string* why) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (directory_writable(folder, why)) return true;
  *why += " (for " + quoted(path) + ")";
  return false;
}

int open_private(const std::string& path, OpenMode mode, std::string* why) {
  // No O_TRUNC here: another user's writable file must not be emptied
  // before the ownership check refuses it. O_NONBLOCK: opening a FIFO
  // never waits for a reader.
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  if (mode == OpenMode::Append) flags |= O_APPEND;
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    const int err = errno;
    *why = "cannot open " + quoted(path) + ": ";
    if (err == ELOOP) *why += "a symbolic link, not followed";
    else if (err == ENXIO) *why += "a FIFO or socket, not a file";
    else *why += std::strerror(err);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    *why = "cannot open " + quoted(path) + ": not a regular file of this user";
    ::close(fd);
    return -1;
  }
  // Created 0600 whatever the umask; an existing file keeps no wider mode.
  if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0) {
    *why = "cannot make " + quoted(path) + " private: " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  const int status = fcntl(fd, F_GETFL);
  if (status < 0 || fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0 ||
      (mode == OpenMode::Truncate && ftruncate(fd, 0) != 0)) {
    *why = "cannot prepare " + quoted(path) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

bool write_text(const std::string& target, const std::string& text, std::string* why) {
  if (target == "stderr") {
    if (write_all(2, text.data(), text.size())) return true;
    *why = std::string("writing stderr failed: ") + std::strerror(errno);
    return false;
  }
  const std::string path = expand_path(target);
  const int fd = open_private(path, OpenMode::Truncate, why);
  if (fd < 0) return false;
  const bool ok = write_all(fd, text.data(), text.size());
  if (!ok) *why = "writing " + quoted(path) + " failed: " + std::strerror(errno);
  ::close(fd);
  return ok;
}

bool write_atomic(const std::string& path, const std::string& text, std::string* why) {
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot create " + quoted(temporary) + ": " + std::strerror(errno);
    return false;
  }
  bool ok = fchmod(fd, 0600) == 0 && write_all(fd, text.data(), text.size());
  if (!ok) *why = "writing " + quoted(temporary) + " failed: " + std::strerror(errno);
  if (::close(fd) != 0 && ok) {
    ok = false;
    *why = "writing " + quoted(temporary) + " failed: " + std::strerror(errno);
  }
  if (ok && ::rename(temporary.c_str(), path.c_str()) != 0) {
    ok = false;
    *why = "cannot replace " + quoted(path) + ": " + std::strerror(errno);
  }
  if (!ok) ::unlink(temporary.c_str());
  return ok;
}

// Which variables name a file or directory is a column of the options table.
bool is_path_variable(const char* name) { return hidden_in_secure_execution(name, 1); }

bool ignored_in_secure_execution(const char* name, unsigned long at_secure) {
  return hidden_in_secure_execution(name, at_secure);
}

}  // namespace pagefast::files
