// numa/bind_plan.h: the decision, as a pure function of the environment,
// the topology, the CPUs the process may run on now, and the mode. It says
// what to bind (CPUs, a memory policy) or why to leave the process alone;
// bind_apply.h carries it out. The rules, in the order they are applied
// (docs/NUMA.md gives the reasons):
//
//  1. numa:off binds nothing.
//  2. The device: the one in use when known (check_device), else
//     choose_device (device_select.h).
//  3. Fewer than two nodes with CPUs: nothing to bind.
//  4. The GPU's node unknown (numa_node -1, NVML silent): nothing to bind.
//  5. The node's CPUs: its cpulist, else the GPU's local_cpulist.
//  6. "Already narrowed": some CPU of the reference set -- the cgroup's
//     cpuset intersected with the online CPUs, or the online CPUs when the
//     cgroup says nothing -- is not in the allowed set (sched_getaffinity).
//     A container or a Slurm job's cgroup is therefore not "narrowed";
//     taskset, numactl, srun --cpu-bind or mpirun --bind-to are. auto and
//     bind leave a narrowed process alone; force goes on.
//  7. The CPUs: node CPUs intersected with the allowed set (force: with the
//     reference set, since force overrides taskset but no cgroup can be).
//     Empty: warn and leave the process alone.
//  8. Memory: auto prefers the node (MPOL_PREFERRED: falls back to other
//     nodes when it is full); bind and force bind it strictly (MPOL_BIND).
#pragma once

#include <string>

#include "numa/cpu_set.h"
#include "numa/device_select.h"
#include "numa/topology.h"
#include "policy/config.h"

namespace pagefast::numa {

enum class MemoryPolicy { None, Preferred, Strict };

enum class Verdict {
  Bind,         // carry it out
  Off,          // numa:off
  OneNode,      // fewer than two CPU nodes
  NoGpu,        // no visible GPU
  NodeUnknown,  // the GPU's node cannot be told
  Narrowed,     // someone already narrowed the affinity (auto, bind)
  Unusable,     // something is wrong (a bad value, CPUs that cannot be used): warn
};

struct PlanInputs {
  NumaConfig config;
  StartEnv env;
  CpuSet allowed;          // sched_getaffinity of the calling thread
  std::string device_bdf;  // non-empty: the device known to be in use
};

struct BindPlan {
  Verdict verdict = Verdict::NoGpu;
  NumaMode mode = NumaMode::Auto;
  std::string who;  // "rank 1", "numa:gpu=2"
  int rank = -1;
  std::string gpu;  // bus id; the CUDA_VISIBLE_DEVICES entry when unresolved
  int node = -1;
  CpuSet cpus;  // Bind: the CPUs to run on
  MemoryPolicy memory = MemoryPolicy::None;
  std::string reason;  // one clause: why this, or why nothing
};

BindPlan plan_binding(const PlanInputs& in, const Topology& topo);

const char* mode_name(NumaMode mode);
// "preferred", "bind", "none": the stats JSON's words.
const char* memory_name(MemoryPolicy memory);

}  // namespace pagefast::numa
