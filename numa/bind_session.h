// numa/bind_session.h: the layer under numa.h with every side effect
// passed in: the environment, the file reader, the GPU oracle and the
// affinity calls. numa.h's functions are these with the real ones; tests
// call these with fakes.
#pragma once

#include <string>

#include "numa/bind_apply.h"
#include "numa/bind_plan.h"
#include "numa/gpu_oracle.h"
#include "numa/numa.h"
#include "numa/sysfs_reader.h"

namespace pagefast::numa {

struct BindContext {
  EnvLookup lookup = nullptr;  // getenv in production
  void* user = nullptr;
  const SysfsReader* reader = nullptr;
  GpuOracle* oracle = nullptr;  // may be null: no second opinion
  AffinityOps* ops = nullptr;
};

// REQUIRES: lookup, reader and ops set.
BindReport bind_at_start_with(const NumaConfig& config, LogSink log, const BindContext& ctx);
void check_device_with(const char* pci_bus_id, const NumaConfig& config, LogSink log, AffinityOps& ops);

// The report of a plan that ended in `action`.
BindReport make_report(const BindPlan& plan, BindAction action);

std::string render_report(const NumaConfig& config, const StartEnv& env, const Topology& topo, const CpuSet& allowed,
                          int ranks, const std::string& sysroot);

}  // namespace pagefast::numa
