// numa/sysfs_reader.h: the only door through which numa/ reads the
// machine's description (/proc/driver/nvidia, /sys, /proc/self/cgroup).
// Topology code takes a SysfsReader, so tests hand it an in-memory tree or
// a directory on disk; production hands it RootedSysfsReader("/"), or the
// root that PAGEFAST_SYSROOT names. The process's own state (its affinity,
// its threads) is not read through here: that is bind_apply.cpp's.
#pragma once

#include <string>
#include <vector>

namespace pagefast::numa {

class SysfsReader {
 public:
  virtual ~SysfsReader() = default;
  // REQUIRES: path is absolute ("/sys/..."). Reads the whole file, which
  // for these is a few bytes; false when missing, unreadable or a directory.
  virtual bool read_file(const std::string& path, std::string* text) const = 0;
  // The entries of a directory, without "." and "..", in no set order;
  // false when it is missing or unreadable.
  virtual bool list_dir(const std::string& path, std::vector<std::string>* names) const = 0;
};

// Reads the real file system under `root` ("" or "/" = the real root).
// Files are read with open/read, not iostreams: a few microseconds each,
// which keeps the whole start-up pass well under a millisecond.
class RootedSysfsReader final : public SysfsReader {
 public:
  explicit RootedSysfsReader(std::string root);
  bool read_file(const std::string& path, std::string* text) const override;
  bool list_dir(const std::string& path, std::vector<std::string>* names) const override;
  // "/" for the real root, else the directory as given without a trailing '/'.
  std::string root() const { return root_.empty() ? "/" : root_; }
  bool is_real_root() const { return root_.empty(); }

 private:
  std::string root_;  // "" for the real root, so root_ + path is the path
};

}  // namespace pagefast::numa
