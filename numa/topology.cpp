// numa/topology.cpp: read_topology and the small parsers it needs.
#include "numa/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace pagefast::numa {
namespace {

constexpr const char* kGpusDir = "/proc/driver/nvidia/gpus";
constexpr const char* kPciDevicesDir = "/sys/bus/pci/devices";
constexpr const char* kNodesDir = "/sys/devices/system/node";
constexpr const char* kOnlinePath = "/sys/devices/system/cpu/online";
constexpr const char* kCgroupPath = "/proc/self/cgroup";
// Guards the walk up the cgroup tree against a malformed path.
constexpr int kMaxCgroupDepth = 64;

std::string trim(const std::string& text) {
  size_t b = 0, e = text.size();
  while (b < e && (std::isspace(static_cast<unsigned char>(text[b])) || text[b] == '\0')) ++b;
  while (e > b && (std::isspace(static_cast<unsigned char>(text[e - 1])) || text[e - 1] == '\0')) --e;
  return text.substr(b, e - b);
}

bool parse_hex(const std::string& text, size_t max_digits, unsigned long* value) {
  if (text.empty() || text.size() > max_digits) return false;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  *value = std::strtoul(text.c_str(), nullptr, 16);
  return true;
}

// numa_node holds a decimal int, -1 for "no node".
bool parse_node_id(const std::string& text, int* node) {
  std::string t = trim(text);
  if (t == "-1") {
    *node = -1;
    return true;
  }
  if (t.empty() || t.size() > 5) return false;
  for (char c : t)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *node = std::atoi(t.c_str());
  return true;
}

struct BdfKey {
  unsigned long domain, bus, device, function;
};

BdfKey bdf_key(const std::string& bdf) {
  BdfKey k{0, 0, 0, 0};
  std::sscanf(bdf.c_str(), "%lx:%lx:%lx.%lx", &k.domain, &k.bus, &k.device, &k.function);
  return k;
}

bool bdf_less(const std::string& a, const std::string& b) {
  BdfKey x = bdf_key(a), y = bdf_key(b);
  if (x.domain != y.domain) return x.domain < y.domain;
  if (x.bus != y.bus) return x.bus < y.bus;
  if (x.device != y.device) return x.device < y.device;
  return x.function < y.function;
}

// Reads a cpulist file; false (and a problem noted) when missing/malformed.
bool read_cpulist(const SysfsReader& reader, const std::string& path, CpuSet* cpus,
                  std::vector<std::string>* problems) {
  std::string text;
  if (!reader.read_file(path, &text)) {
    problems->push_back(path + ": missing or unreadable");
    return false;
  }
  if (!parse_cpulist(text, cpus)) {
    problems->push_back(path + ": malformed cpulist '" + trim(text) + "'");
    return false;
  }
  return true;
}

GpuInfo read_gpu(const SysfsReader& reader, const std::string& dir_name, bool read_uuid,
                 std::vector<std::string>* problems) {
  GpuInfo gpu;
  const std::string info_path = std::string(kGpusDir) + "/" + dir_name + "/information";
  std::string info;
  std::string bus_location;
  if (!read_uuid) {
    // The directory's name is the bus id; the file is not worth its cost.
  } else if (reader.read_file(info_path, &info)) {
    gpu.uuid = information_value(info, "GPU UUID");
    bus_location = information_value(info, "Bus Location");
  } else {
    problems->push_back(info_path + ": missing or unreadable");
  }
  // The directory is named after the bus id too; the file wins when both parse.
  if (!normalize_bdf(bus_location, &gpu.bdf) && !normalize_bdf(dir_name, &gpu.bdf)) return gpu;

  const std::string pci = std::string(kPciDevicesDir) + "/" + gpu.bdf;
  std::string text;
  if (!reader.read_file(pci + "/numa_node", &text)) {
    problems->push_back(pci + "/numa_node: missing or unreadable");
  } else if (!parse_node_id(text, &gpu.node)) {
    problems->push_back(pci + "/numa_node: malformed '" + trim(text) + "'");
    gpu.node = -1;
  }
  gpu.local_cpus_known = read_cpulist(reader, pci + "/local_cpulist", &gpu.local_cpus, problems);
  return gpu;
}

// The lines of a /proc or /sys text file, without their newlines.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The cpuset the process's cgroup grants: cgroup v1's cpuset hierarchy when
// it is listed, else v2's unified one. A cgroup without the cpuset
// controller has no file of its own; its nearest ancestor's applies.
bool read_cgroup_cpus(const SysfsReader& reader, CpuSet* cpus) {
  std::string text;
  if (!reader.read_file(kCgroupPath, &text)) return false;
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  for (const std::string& line : split_lines(text)) {
    size_t c1 = line.find(':'), c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (controllers.empty() && line.compare(0, c1, "0") == 0) {
      have_v2 = true;
      v2_path = path;
    }
    for (size_t p = 0; p <= controllers.size();) {
      size_t q = controllers.find(',', p);
      if (q == std::string::npos) q = controllers.size();
      if (controllers.compare(p, q - p, "cpuset") == 0) {
        have_v1 = true;
        v1_path = path;
      }
      p = q + 1;
    }
  }
  if (!have_v1 && !have_v2) return false;
  std::string base = have_v1 ? "/sys/fs/cgroup/cpuset" : "/sys/fs/cgroup";
  const char* file = have_v1 ? "/cpuset.effective_cpus" : "/cpuset.cpus.effective";
  std::string path = have_v1 ? v1_path : v2_path;
  if (path.empty() || path[0] != '/') return false;
  for (int depth = 0; depth < kMaxCgroupDepth; ++depth) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    std::string dir = path == "/" ? base : base + path;
    if (reader.read_file(dir + file, &text)) return parse_cpulist(text, cpus);
    if (path == "/") return false;
    size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return false;
}

}  // namespace

int Topology::cpu_node_count() const {
  int n = 0;
  for (const NodeInfo& node : nodes)
    if (!node.cpus_known || !node.cpus.empty()) ++n;
  return n;
}

const NodeInfo* Topology::find_node(int id) const {
  for (const NodeInfo& node : nodes)
    if (node.id == id) return &node;
  return nullptr;
}

int Topology::find_gpu(const std::string& bdf) const {
  for (size_t i = 0; i < gpus.size(); ++i)
    if (gpus[i].bdf == bdf) return static_cast<int>(i);
  return -1;
}

bool Topology::machine_cpus(CpuSet* cpus) const {
  if (online_known) {
    *cpus = online;
    return true;
  }
  if (nodes.empty()) return false;
  CpuSet all;
  for (const NodeInfo& node : nodes) {
    if (!node.cpus_known) return false;
    all = all.unite(node.cpus);
  }
  *cpus = all;
  return true;
}

bool normalize_bdf(const std::string& text, std::string* bdf) {
  std::string t = trim(text);
  size_t dot = t.rfind('.');
  if (dot == std::string::npos) return false;
  size_t c2 = t.rfind(':', dot);
  if (c2 == std::string::npos) return false;
  size_t c1 = c2 == 0 ? std::string::npos : t.rfind(':', c2 - 1);
  std::string domain_text = c1 == std::string::npos ? "0" : t.substr(0, c1);
  std::string bus_text = t.substr(c1 == std::string::npos ? 0 : c1 + 1, c2 - (c1 == std::string::npos ? 0 : c1 + 1));
  unsigned long domain, bus, device, function;
  if (!parse_hex(domain_text, 8, &domain) || !parse_hex(bus_text, 2, &bus) ||
      !parse_hex(t.substr(c2 + 1, dot - c2 - 1), 2, &device) || !parse_hex(t.substr(dot + 1), 1, &function) ||
      device > 0x1f || function > 7)
    return false;
  char out[32];
  std::snprintf(out, sizeof out, "%04lx:%02lx:%02lx.%lx", domain, bus, device, function);
  *bdf = out;
  return true;
}

std::string information_value(const std::string& text, const std::string& key) {
  for (const std::string& line : split_lines(text)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "";
}

Topology read_topology(const SysfsReader& reader, GpuUuids uuids) {
  Topology topo;
  std::vector<std::string> names;
  // Nodes first: whether UUIDs are worth reading depends on their number.
  if (reader.list_dir(kNodesDir, &names)) {
    for (const std::string& name : names) {
      if (name.size() < 5 || name.size() > 9 || name.compare(0, 4, "node") != 0) continue;
      if (!std::all_of(name.begin() + 4, name.end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        continue;
      NodeInfo node;
      node.id = std::atoi(name.c_str() + 4);
      node.cpus_known =
          read_cpulist(reader, std::string(kNodesDir) + "/" + name + "/cpulist", &node.cpus, &topo.problems);
      topo.nodes.push_back(node);
    }
    std::sort(topo.nodes.begin(), topo.nodes.end(), [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  } else {
    topo.problems.push_back(std::string(kNodesDir) + ": missing (kernel without NUMA)");
  }

  topo.uuids_read = uuids == GpuUuids::Read || (uuids == GpuUuids::ReadIfMultiNode && topo.cpu_node_count() >= 2);
  if (reader.list_dir(kGpusDir, &names)) {
    for (const std::string& name : names) {
      GpuInfo gpu = read_gpu(reader, name, topo.uuids_read, &topo.problems);
      if (gpu.bdf.empty()) {
        topo.problems.push_back(std::string(kGpusDir) + "/" + name + ": no bus id");
        continue;
      }
      if (topo.find_gpu(gpu.bdf) < 0) topo.gpus.push_back(std::move(gpu));
    }
    std::sort(topo.gpus.begin(), topo.gpus.end(),
              [](const GpuInfo& a, const GpuInfo& b) { return bdf_less(a.bdf, b.bdf); });
  } else {
    topo.problems.push_back(std::string(kGpusDir) + ": missing (no NVIDIA driver?)");
  }

  topo.online_known = read_cpulist(reader, kOnlinePath, &topo.online, &topo.problems);
  topo.cgroup_known = read_cgroup_cpus(reader, &topo.cgroup_cpus);
  return topo;
}

}  // namespace pagefast::numa
