// numa/bind_plan.cpp: plan_binding, the rules listed in bind_plan.h.
#include "numa/bind_plan.h"

namespace pagefast::numa {
namespace {

BindPlan skip(BindPlan plan, Verdict verdict, std::string reason) {
  plan.verdict = verdict;
  plan.reason = std::move(reason);
  return plan;
}

// The CPUs "not narrowed" is measured against; false when unknown.
bool reference_cpus(const Topology& topo, CpuSet* cpus) {
  if (!topo.machine_cpus(cpus)) return false;
  if (topo.cgroup_known && !topo.cgroup_cpus.intersect(*cpus).empty()) *cpus = topo.cgroup_cpus.intersect(*cpus);
  return true;
}

}  // namespace

// The words of the options (docs/NUMA.md), in the enums' order.
const char* mode_name(NumaMode mode) {
  static const char* const kNames[] = {"auto", "bind", "force", "off"};
  static_assert(int(NumaMode::Off) + 1 == sizeof kNames / sizeof *kNames, "a word for every NumaMode");
  return unsigned(mode) <= unsigned(NumaMode::Off) ? kNames[int(mode)] : "auto";
}

const char* memory_name(MemoryPolicy memory) {
  static const char* const kNames[] = {"none", "preferred", "bind"};
  static_assert(int(MemoryPolicy::Strict) + 1 == sizeof kNames / sizeof *kNames, "a word for every MemoryPolicy");
  return unsigned(memory) <= unsigned(MemoryPolicy::Strict) ? kNames[int(memory)] : "none";
}

BindPlan plan_binding(const PlanInputs& in, const Topology& topo) {
  BindPlan plan;
  plan.mode = in.config.mode;
  if (in.config.mode == NumaMode::Off) return skip(plan, Verdict::Off, "mode off");

  int gpu_index = -1;
  const DeviceChoice choice = choose_device(in.env, topo, in.config.gpu);
  plan.who = choice.who;
  plan.rank = choice.rank;
  if (!in.device_bdf.empty()) {
    plan.gpu = in.device_bdf;
    if (plan.who.empty()) plan.who = "device in use";
    gpu_index = topo.find_gpu(in.device_bdf);
    if (gpu_index < 0)
      return skip(plan, Verdict::NodeUnknown, "device " + in.device_bdf + " is not under /proc/driver/nvidia/gpus");
  } else {
    plan.gpu = choice.label;
    switch (choice.status) {
      case ChoiceStatus::Chosen: gpu_index = choice.gpu; break;
      case ChoiceStatus::Invalid: return skip(plan, Verdict::Unusable, choice.why);
      case ChoiceStatus::NoGpu:
        if (topo.cpu_node_count() < 2) return skip(plan, Verdict::OneNode, "one node");
        return skip(plan, Verdict::NoGpu, choice.why);
      case ChoiceStatus::ParentUnknown:
        if (topo.cpu_node_count() < 2) return skip(plan, Verdict::OneNode, "one node");
        return skip(plan, Verdict::NodeUnknown, choice.why);
    }
  }

  if (topo.cpu_node_count() < 2) return skip(plan, Verdict::OneNode, "one node");
  const GpuInfo& gpu = topo.gpus[static_cast<size_t>(gpu_index)];
  if (gpu.node < 0)
    return skip(plan, Verdict::NodeUnknown, "GPU " + gpu.bdf + " has no node (numa_node -1) and NVML did not say");
  plan.node = gpu.node;

  CpuSet node_cpus;
  const NodeInfo* node = topo.find_node(gpu.node);
  if (node && node->cpus_known && !node->cpus.empty()) {
    node_cpus = node->cpus;
  } else if (gpu.local_cpus_known && !gpu.local_cpus.empty()) {
    node_cpus = gpu.local_cpus;  // the device's own list stands in for its node's
  } else {
    return skip(plan, Verdict::Unusable, "node " + std::to_string(gpu.node) + "'s CPUs cannot be read");
  }

  CpuSet reference;
  const bool reference_known = reference_cpus(topo, &reference);
  // Narrowed by pagefast itself, in the process that started this one (a
  // launcher such as torchrun, bound at its start and inheriting it to its
  // ranks): exactly the CPUs it left in PAGEFAST_NUMA_BOUND. That is no
  // narrowing of the user's: this process binds for its own GPU, within
  // the reference set.
  const bool ours = reference_known && !in.env.bound_cpus.empty() && in.env.bound_cpus == in.allowed.to_list();
  if (in.config.mode != NumaMode::Force && !ours) {
    if (!reference_known)
      return skip(plan, Verdict::Unusable, "cannot tell whether the affinity was narrowed (no cpu/online)");
    if (!reference.subset_of(in.allowed))
      return skip(plan, Verdict::Narrowed,
                  "affinity already narrowed to " + in.allowed.to_list() + " (of " + reference.to_list() + ")");
  }

  const CpuSet& base = (in.config.mode == NumaMode::Force || ours) && reference_known ? reference : in.allowed;
  plan.cpus = node_cpus.intersect(base);
  if (plan.cpus.empty())
    return skip(plan, Verdict::Unusable,
                "node " + std::to_string(gpu.node) + "'s CPUs " + node_cpus.to_list() +
                    " are outside the allowed CPUs " + base.to_list());

  plan.memory = in.config.mode == NumaMode::Auto ? MemoryPolicy::Preferred : MemoryPolicy::Strict;
  plan.verdict = Verdict::Bind;
  plan.reason = "GPU " + gpu.bdf + " is on node " + std::to_string(gpu.node) +
                (gpu.node_from_nvml ? " (NVML)" : " (sysfs numa_node)");
  if (!choice.why.empty() && in.device_bdf.empty()) plan.reason += "; " + choice.why;
  return plan;
}

}  // namespace pagefast::numa
