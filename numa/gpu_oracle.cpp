// numa/gpu_oracle.cpp: complete_with_oracle.
#include "numa/gpu_oracle.h"

#include <strings.h>

namespace pagefast::numa {

void complete_with_oracle(Topology* topo, const StartEnv& env, GpuOracle* oracle) {
  if (!oracle || topo->cpu_node_count() < 2) return;
  for (GpuInfo& gpu : topo->gpus) {
    if (gpu.node >= 0) continue;
    int node = oracle->node_of(gpu.bdf);
    if (node >= 0) {
      gpu.node = node;
      gpu.node_from_nvml = true;
    }
  }
  if (!env.visible_set) return;
  for (const std::string& token : split_visible(env.visible_devices)) {
    // The old "MIG-GPU-<uuid>/gi/ci" form names its parent already.
    if (token.size() <= 4 || strncasecmp(token.c_str(), "MIG-", 4) != 0 ||
        strncasecmp(token.c_str(), "MIG-GPU-", 8) == 0)
      continue;
    std::string bdf;
    if (oracle->mig_parent(token, &bdf) && normalize_bdf(bdf, &bdf)) topo->mig_parents.push_back({token, bdf});
  }
}

}  // namespace pagefast::numa
