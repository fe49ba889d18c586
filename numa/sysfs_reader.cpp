// numa/sysfs_reader.cpp: RootedSysfsReader over open/read and opendir.
#include "numa/sysfs_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pagefast::numa {
namespace {

// sysfs attributes are at most a page; information files a few hundred
// bytes. A cap keeps a fake tree's (or a FIFO's) content from growing
// without bound.
constexpr size_t kMaxFileBytes = 64 * 1024;

}  // namespace

RootedSysfsReader::RootedSysfsReader(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

bool RootedSysfsReader::read_file(const std::string& path, std::string* text) const {
  const std::string full = root_ + path;
  // O_NONBLOCK: a FIFO planted in a fake tree must not hang process start.
  int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  std::string out;
  char buffer[4096];
  bool ok = true;
  while (out.size() < kMaxFileBytes) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ok = false;  // EISDIR for a directory, EACCES, EIO from a driver file
      break;
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (ok) *text = std::move(out);
  return ok;
}

bool RootedSysfsReader::list_dir(const std::string& path, std::vector<std::string>* names) const {
  const std::string full = root_ + path;
  DIR* dir = ::opendir(full.c_str());
  if (!dir) return false;
  names->clear();
  while (struct dirent* entry = ::readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    names->emplace_back(entry->d_name);
  }
  ::closedir(dir);
  return true;
}

}  // namespace pagefast::numa
