// numa/gpu_oracle.h: a second opinion on what sysfs cannot say: the node
// of a GPU whose numa_node reads -1 (VMs, some single-socket firmware),
// and the parent GPU of a MIG instance named by its own UUID. Production
// asks NVML (nvml_oracle.h); tests pass a fake. Asked only where the answer
// changes the binding, i.e. on machines with two or more CPU nodes, so a
// one-node machine never loads NVML.
#pragma once

#include <string>

#include "numa/device_select.h"
#include "numa/topology.h"

namespace pagefast::numa {

class GpuOracle {
 public:
  virtual ~GpuOracle() = default;
  // The node nearest the GPU at `bdf`, or -1 when it cannot say.
  virtual int node_of(const std::string& bdf) = 0;
  // The bus id of the GPU that holds MIG instance `mig_uuid` ("MIG-...").
  virtual bool mig_parent(const std::string& mig_uuid, std::string* bdf) = 0;
};

// Fills Topology::gpus[].node where sysfs had none, and mig_parents for the
// "MIG-<uuid>" entries of CUDA_VISIBLE_DEVICES. Does nothing (and does not
// touch the oracle) on a machine with fewer than two CPU nodes, or when
// `oracle` is null.
void complete_with_oracle(Topology* topo, const StartEnv& env, GpuOracle* oracle);

}  // namespace pagefast::numa
