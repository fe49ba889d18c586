// tests/numa/fake_tree.cpp: FakeTree and the shared layouts.
#include "tests/numa/fake_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pagefast::numa::testing {
namespace {

void make_dirs(const std::string& path) {
  for (size_t slash = 1; (slash = path.find('/', slash)) != std::string::npos; ++slash)
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

std::string parent_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

}  // namespace

FakeTree& FakeTree::file(const std::string& path, const std::string& text) {
  files_[path] = text;
  unreadable_.erase(path);
  return *this;
}

FakeTree& FakeTree::remove(const std::string& path) {
  files_.erase(path);
  unreadable_.erase(path);
  return *this;
}

FakeTree& FakeTree::unreadable(const std::string& path) {
  files_[path] = "";
  unreadable_.insert(path);
  return *this;
}

std::string FakeTree::information(const std::string& bdf, const std::string& uuid) {
  return "Model: \t\t NVIDIA H200\n"
         "IRQ:   \t\t 42\n"
         "GPU UUID: \t " +
         uuid +
         "\n"
         "Video BIOS: \t 96.00.af.00.01\n"
         "Bus Type: \t PCIe\n"
         "DMA Size: \t 52 bits\n"
         "DMA Mask: \t 0xfffffffffffff\n"
         "Bus Location: \t " +
         bdf +
         "\n"
         "Device Minor: \t 0\n"
         "GPU Excluded:\t No\n";
}

FakeTree& FakeTree::gpu(const std::string& bdf, const std::string& uuid, const std::string& numa_node,
                        const std::string& local_cpulist) {
  file("/proc/driver/nvidia/gpus/" + bdf + "/information", information(bdf, uuid));
  file("/sys/bus/pci/devices/" + bdf + "/numa_node", numa_node + "\n");
  file("/sys/bus/pci/devices/" + bdf + "/local_cpulist", local_cpulist + "\n");
  return *this;
}

FakeTree& FakeTree::node(int id, const std::string& cpulist) {
  return file("/sys/devices/system/node/node" + std::to_string(id) + "/cpulist", cpulist + "\n");
}

FakeTree& FakeTree::online(const std::string& cpulist) {
  return file("/sys/devices/system/cpu/online", cpulist + "\n");
}

bool FakeTree::read_file(const std::string& path, std::string* text) const {
  auto it = files_.find(path);
  if (it == files_.end() || unreadable_.count(path)) return false;
  *text = it->second;
  return true;
}

bool FakeTree::list_dir(const std::string& path, std::vector<std::string>* names) const {
  std::set<std::string> found;
  const std::string prefix = path + "/";
  for (const auto& entry : files_) {
    if (entry.first.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = entry.first.substr(prefix.size());
    found.insert(rest.substr(0, rest.find('/')));
  }
  if (found.empty()) return false;
  names->assign(found.begin(), found.end());
  return true;
}

std::string FakeTree::write_to_temp_dir() const {
  char pattern[] = "/tmp/pagefast-numa-XXXXXX";
  if (!::mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  const std::string root = pattern;
  for (const auto& entry : files_) {
    const std::string full = root + entry.first;
    if (unreadable_.count(entry.first)) {
      make_dirs(full);
      continue;
    }
    make_dirs(parent_of(full));
    FILE* out = std::fopen(full.c_str(), "w");
    if (!out) throw std::runtime_error("cannot write " + full);
    std::fputs(entry.second.c_str(), out);
    std::fclose(out);
  }
  return root;
}

std::string fake_uuid(int n) { return "GPU-" + std::to_string(n) + "0000000-1111-2222-3333-444444444444"; }

FakeTree two_node_machine() {
  FakeTree t;
  t.node(0, "0-31").node(1, "32-63").online("0-63");
  t.gpu("0000:01:00.0", fake_uuid(1), "0", "0-31");
  t.gpu("0000:41:00.0", fake_uuid(2), "1", "32-63");
  return t;
}

FakeTree eight_gpu_machine() {
  FakeTree t;
  t.node(0, "0-55,112-167").node(1, "56-111,168-223").online("0-223");
  const char* buses[] = {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"};
  for (int i = 0; i < 8; ++i) {
    const bool far = i >= 4;
    t.gpu(std::string("0000:") + buses[i] + ":00.0", fake_uuid(i + 1), far ? "1" : "0",
          far ? "56-111,168-223" : "0-55,112-167");
  }
  return t;
}

FakeTree h200_vm() {
  FakeTree t;
  t.node(0, "0-15").online("0-15");
  t.gpu("0000:00:06.0", "GPU-ba62939c-0d3e-4a4c-8bd0-6f1e2f3a4b5c", "-1", "0-15");
  return t;
}

}  // namespace pagefast::numa::testing
