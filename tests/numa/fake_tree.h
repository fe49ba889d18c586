// tests/numa/fake_tree.h: FakeTree, a machine description for tests: the
// files numa/ reads (/proc/driver/nvidia/gpus, /sys/bus/pci, /sys/devices/
// system) held in memory. It is a SysfsReader itself, for the unit tests,
// and writes itself out as a directory for PAGEFAST_SYSROOT, for the tests
// that bind a real process. The layouts used by several files live here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "numa/sysfs_reader.h"

namespace pagefast::numa::testing {

class FakeTree final : public SysfsReader {
 public:
  // REQUIRES: absolute paths.
  FakeTree& file(const std::string& path, const std::string& text);
  FakeTree& remove(const std::string& path);
  // Still listed, but reading fails (on disk: a directory in its place,
  // which fails even for root, who ignores file modes).
  FakeTree& unreadable(const std::string& path);

  // A GPU: its information file, numa_node (as text, so tests can write
  // "-1" or garbage) and local_cpulist.
  FakeTree& gpu(const std::string& bdf, const std::string& uuid, const std::string& numa_node,
                const std::string& local_cpulist);
  FakeTree& node(int id, const std::string& cpulist);
  FakeTree& online(const std::string& cpulist);

  bool read_file(const std::string& path, std::string* text) const override;
  bool list_dir(const std::string& path, std::vector<std::string>* names) const override;

  // Writes the tree under a fresh temporary directory and returns its path.
  std::string write_to_temp_dir() const;

  // The information file the driver writes, with the lines numa/ reads.
  static std::string information(const std::string& bdf, const std::string& uuid);

 private:
  std::map<std::string, std::string> files_;
  std::set<std::string> unreadable_;
};

// "GPU-<n>0000000-1111-2222-3333-444444444444": distinct first digits, so
// prefixes like "GPU-3" name one GPU.
std::string fake_uuid(int n);

// Two sockets, 64 CPUs: GPU 0000:01:00.0 on node 0 (cpus 0-31),
// GPU 0000:41:00.0 on node 1 (cpus 32-63).
FakeTree two_node_machine();
// A DGX-H100-like 8-GPU, 2-socket layout, 224 CPUs with hyperthreads:
// node 0 cpus 0-55,112-167 with GPUs 18,2a,3a,5d; node 1 cpus 56-111,168-223
// with GPUs 9a,ab,ba,db (bus numbers, domain 0000, device 00.0).
FakeTree eight_gpu_machine();
// The lent H200 VM: 16 CPUs, one node, numa_node -1.
FakeTree h200_vm();

}  // namespace pagefast::numa::testing
