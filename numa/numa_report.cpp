// numa/numa_report.cpp: the text of pagefast-run --numa-report: the
// machine's nodes, each visible GPU with its node and CPUs, and what each
// local rank would get, decided by the same plan_binding the start uses.
#include <cstdlib>
#include <string>

#include "numa/bind_session.h"
#include "numa/device_select.h"
#include "numa/nvml_oracle.h"
#include "numa/topology.h"
#include "policy/options.h"

namespace pagefast::numa {
namespace {

std::string or_dash(const std::string& text) { return text.empty() ? "-" : text; }

std::string describe_gpu(const Topology& topo, const VisibleDevice& device) {
  if (device.gpu < 0) return device.token + "  (parent GPU unknown without NVML)";
  const GpuInfo& gpu = topo.gpus[static_cast<size_t>(device.gpu)];
  std::string out = gpu.bdf + "  " + or_dash(gpu.uuid) + "  ";
  if (gpu.node < 0) {
    out += "node unknown (numa_node -1)";
  } else {
    out += "node " + std::to_string(gpu.node) + (gpu.node_from_nvml ? " (NVML)" : "");
    const NodeInfo* node = topo.find_node(gpu.node);
    if (node && node->cpus_known) out += ", node cpus " + or_dash(node->cpus.to_list());
  }
  out += ", local cpus " + (gpu.local_cpus_known ? or_dash(gpu.local_cpus.to_list()) : "unknown");
  return out;
}

}  // namespace

std::string render_report(const NumaConfig& config, const StartEnv& env, const Topology& topo, const CpuSet& allowed,
                          int ranks, const std::string& sysroot) {
  std::string out = "pagefast NUMA report (sysroot " + sysroot + ", numa:" + mode_name(config.mode);
  if (config.gpu >= 0) out += ", numa:gpu=" + std::to_string(config.gpu);
  out += ")\n";
  out += "CUDA_VISIBLE_DEVICES " + (env.visible_set ? "'" + env.visible_devices + "'" : std::string("unset")) +
         "; CUDA_DEVICE_ORDER " + (env.device_order.empty() ? "unset" : env.device_order) +
         " (ordinals follow PCI bus order)\n";

  out += "nodes:";
  if (topo.nodes.empty()) out += " none listed";
  for (size_t i = 0; i < topo.nodes.size(); ++i) {
    const NodeInfo& node = topo.nodes[i];
    out += std::string(i ? "; " : " ") + "node " + std::to_string(node.id) + " cpus " +
           (node.cpus_known ? or_dash(node.cpus.to_list()) : "unknown");
  }
  out += "\nonline cpus " + (topo.online_known ? topo.online.to_list() : std::string("unknown")) +
         "; this process may run on " + allowed.to_list() + "\n";

  VisibleDevices visible = resolve_visible(env, topo);
  out += "visible GPUs:\n";
  if (visible.devices.empty()) out += "  none\n";
  for (size_t i = 0; i < visible.devices.size(); ++i)
    out += "  cuda " + std::to_string(i) + ": " + describe_gpu(topo, visible.devices[i]) + "\n";
  if (!visible.stopped_at.empty())
    out += "  (CUDA_VISIBLE_DEVICES stops at '" + visible.stopped_at + "', which names no GPU)\n";

  if (ranks <= 0) ranks = visible.devices.empty() ? 1 : static_cast<int>(visible.devices.size());
  out += "local ranks:\n";
  for (int rank = 0; rank < ranks; ++rank) {
    PlanInputs in{config, env, allowed, ""};
    in.env.rank_var = "LOCAL_RANK";
    in.env.rank_text = std::to_string(rank);
    BindPlan plan = plan_binding(in, topo);
    BindAction action = plan.verdict == Verdict::Bind       ? BindAction::Bound
                        : plan.verdict == Verdict::Narrowed ? BindAction::LeftAlone
                        : plan.verdict == Verdict::Unusable ? BindAction::Failed
                                                            : BindAction::Nothing;
    std::string line = make_report(plan, action).line();
    if (line.compare(0, 6, "numa: ") == 0) line.erase(0, 6);
    if (plan.verdict != Verdict::Bind) line = "rank " + std::to_string(rank) + ": " + line;
    out += "  " + line + "\n";
  }
  if (!topo.problems.empty()) {
    out += "notes:\n";
    for (const std::string& p : topo.problems) out += "  " + p + "\n";
  }
  return out;
}

std::string report(const NumaConfig& config, int ranks) {
  try {
    const char* root = std::getenv(option_name(Opt::Sysroot));
    RootedSysfsReader reader(root ? root : "");
    StartEnv env = read_start_env([](const char* name, void*) -> const char* { return std::getenv(name); }, nullptr);
    Topology topo = read_topology(reader);
    NvmlOracle nvml;
    if (reader.is_real_root()) complete_with_oracle(&topo, env, &nvml);
    CpuSet allowed;
    system_affinity_ops().get_cpus(&allowed);
    return render_report(config, env, topo, allowed, ranks, reader.root());
  } catch (...) {
    return "pagefast NUMA report: out of memory\n";
  }
}

}  // namespace pagefast::numa
