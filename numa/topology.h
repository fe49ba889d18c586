// numa/topology.h: what the machine looks like, read without CUDA: the
// NVIDIA GPUs (from /proc/driver/nvidia/gpus/*/information), the node and
// CPUs near each (from /sys/bus/pci/devices/<bdf>/), the nodes
// (/sys/devices/system/node), the online CPUs and the cgroup's cpuset.
// Everything goes through an injected SysfsReader. Reading never fails:
// what is missing or malformed stays "unknown" and is named in `problems`,
// and the decision (bind_plan.h) says what that means.
#pragma once

#include <string>
#include <vector>

#include "numa/cpu_set.h"
#include "numa/sysfs_reader.h"

namespace pagefast::numa {

struct GpuInfo {
  std::string bdf;              // normalised PCI bus id, "0000:41:00.0"
  std::string uuid;             // "GPU-ba62939c-...", "" when the information file said none
  int node = -1;                // nearest NUMA node; -1 unknown (sysfs says -1 in VMs)
  bool node_from_nvml = false;  // node came from NVML, not sysfs
  bool local_cpus_known = false;
  CpuSet local_cpus;  // the device's local_cpulist
};

struct NodeInfo {
  int id = -1;
  bool cpus_known = false;  // false when its cpulist is missing or malformed
  CpuSet cpus;              // empty for a memory-only node
};

// A MIG instance named by its own UUID ("MIG-<uuid>"), which does not say
// its parent; NVML fills these in (gpu_oracle.h).
struct MigParent {
  std::string mig_uuid;
  std::string gpu_bdf;
};

struct Topology {
  std::vector<GpuInfo> gpus;    // in PCI bus order: the order CUDA ordinals follow
  bool uuids_read = false;      // the information files were read (GpuUuids)
  std::vector<NodeInfo> nodes;  // ascending id
  bool online_known = false;
  CpuSet online;  // /sys/devices/system/cpu/online
  bool cgroup_known = false;
  CpuSet cgroup_cpus;  // the process's cgroup cpuset, effective CPUs
  std::vector<MigParent> mig_parents;
  std::vector<std::string> problems;  // "<path>: missing" and the like

  // Nodes that have CPUs, counting one whose cpulist could not be read:
  // "two or more nodes" in the rules means two of these. Memory-only nodes
  // (CXL, HBM, a Grace Hopper GPU's own memory) cannot take a CPU binding.
  int cpu_node_count() const;
  const NodeInfo* find_node(int id) const;
  int find_gpu(const std::string& bdf) const;  // index into gpus, -1 if none
  // Every CPU the machine has online: cpu/online, else the union of the
  // node cpulists when all were read. false when neither is known.
  bool machine_cpus(CpuSet* cpus) const;
};

// The information files are the one costly read: the driver queries the
// GPU for each (about 0.4 ms apiece on the H200, against a few
// microseconds for a sysfs file), and all they add is the UUID, needed only
// to resolve GPU-/MIG-GPU- entries of CUDA_VISIBLE_DEVICES; the bus id is
// the directory's name. So the start reads them only when those entries
// exist and the machine has two or more CPU nodes (on one node nothing is
// bound whichever GPU it is).
enum class GpuUuids { Read, Skip, ReadIfMultiNode };

Topology read_topology(const SysfsReader& reader, GpuUuids uuids = GpuUuids::Read);

// Accepts "0000:41:00.0", "00000000:41:00.0" (NVML, CUDA's long form),
// "41:00.0" (domain 0), either case, surrounding whitespace; writes the
// form sysfs and /proc use: lower case, domain of at least 4 hex digits.
bool normalize_bdf(const std::string& text, std::string* bdf);

// Parses "Key: value" lines of a /proc/driver/nvidia/gpus/*/information file.
std::string information_value(const std::string& text, const std::string& key);

}  // namespace pagefast::numa
