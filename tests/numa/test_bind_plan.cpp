// tests/numa/test_bind_plan.cpp: the decision, as a pure function: which
// node and CPUs for each layout and rank, the memory policy per mode, and
// each reason to leave a process alone.
#include <catch2/catch.hpp>

#include "numa/bind_plan.h"
#include "tests/numa/env_map.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::NumaConfig;
using pagefast::NumaMode;
using pagefast::numa::testing::EnvMap;
using pagefast::numa::testing::FakeTree;

namespace {

CpuSet cpus_of(const std::string& list) {
  CpuSet cpus;
  REQUIRE(parse_cpulist(list, &cpus));
  return cpus;
}

BindPlan plan_for(const FakeTree& tree, EnvMap env, const std::string& allowed, NumaMode mode = NumaMode::Auto,
                  int gpu = -1) {
  PlanInputs in;
  in.config.mode = mode;
  in.config.gpu = gpu;
  in.env = read_start_env(EnvMap::lookup, &env);
  in.allowed = cpus_of(allowed);
  return plan_binding(in, read_topology(tree));
}

EnvMap rank(int r) { return EnvMap{}.set("LOCAL_RANK", std::to_string(r)); }

}  // namespace

TEST_CASE("two nodes, GPUs on both: each rank gets its GPU's node", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  BindPlan p = plan_for(tree, rank(1), "0-63");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.who == "rank 1");
  CHECK(p.gpu == "0000:41:00.0");
  CHECK(p.node == 1);
  CHECK(p.cpus.to_list() == "32-63");
  CHECK(p.memory == MemoryPolicy::Preferred);
  CHECK(p.reason == "GPU 0000:41:00.0 is on node 1 (sysfs numa_node)");
  p = plan_for(tree, rank(0), "0-63");
  CHECK(p.node == 0);
  CHECK(p.cpus.to_list() == "0-31");
}

TEST_CASE("8 GPUs on 2 sockets: ranks 0..7", "[numa][plan]") {
  FakeTree tree = testing::eight_gpu_machine();
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    BindPlan p = plan_for(tree, rank(r), "0-223");
    REQUIRE(p.verdict == Verdict::Bind);
    CHECK(p.node == (r < 4 ? 0 : 1));
    CHECK(p.cpus.to_list() == (r < 4 ? "0-55,112-167" : "56-111,168-223"));
  }
}

TEST_CASE("memory policy by mode", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  CHECK(plan_for(tree, rank(1), "0-63", NumaMode::Auto).memory == MemoryPolicy::Preferred);
  CHECK(plan_for(tree, rank(1), "0-63", NumaMode::Bind).memory == MemoryPolicy::Strict);
  CHECK(plan_for(tree, rank(1), "0-63", NumaMode::Force).memory == MemoryPolicy::Strict);
  BindPlan off = plan_for(tree, rank(1), "0-63", NumaMode::Off);
  CHECK(off.verdict == Verdict::Off);
  CHECK(off.cpus.empty());
}

TEST_CASE("already narrowed: auto and bind leave it, force binds", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  BindPlan p = plan_for(tree, rank(1), "0-15");  // taskset -c 0-15
  CHECK(p.verdict == Verdict::Narrowed);
  CHECK(p.reason == "affinity already narrowed to 0-15 (of 0-63)");
  CHECK(plan_for(tree, rank(1), "0-15", NumaMode::Bind).verdict == Verdict::Narrowed);
  // force overrides taskset, up to what the machine (or cgroup) allows.
  p = plan_for(tree, rank(1), "0-15", NumaMode::Force);
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "32-63");
  // narrowed onto the right node already: still narrowed, still left alone.
  CHECK(plan_for(tree, rank(1), "40-47").verdict == Verdict::Narrowed);
}

TEST_CASE("a cgroup cpuset is not narrowing: the job's CPUs are the reference", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  tree.file("/proc/self/cgroup", "0::/slurm/job_7\n");
  tree.file("/sys/fs/cgroup/slurm/job_7/cpuset.cpus.effective", "0-7,32-39\n");
  BindPlan p = plan_for(tree, rank(1), "0-7,32-39");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "32-39");  // the node intersected with the allowed set
  // srun --cpu-bind inside that job narrows further: left alone.
  CHECK(plan_for(tree, rank(1), "0-7").verdict == Verdict::Narrowed);
  // force stays inside the cgroup.
  p = plan_for(tree, rank(1), "0-7", NumaMode::Force);
  CHECK(p.cpus.to_list() == "32-39");
}

TEST_CASE("a cpuset that excludes the GPU's node: warn, bind nothing", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  tree.file("/proc/self/cgroup", "0::/c\n");
  tree.file("/sys/fs/cgroup/c/cpuset.cpus.effective", "0-31\n");
  BindPlan p = plan_for(tree, rank(1), "0-31");
  CHECK(p.verdict == Verdict::Unusable);
  CHECK(p.reason == "node 1's CPUs 32-63 are outside the allowed CPUs 0-31");
  CHECK(plan_for(tree, rank(1), "0-31", NumaMode::Force).verdict == Verdict::Unusable);
}

TEST_CASE("CPUs the running kernel does not have: empty intersection", "[numa][plan]") {
  FakeTree tree;
  tree.node(0, "0-1").node(1, "4000-4001").online("0-1");
  tree.gpu("0000:41:00.0", "GPU-x", "1", "4000-4001");
  BindPlan p = plan_for(tree, rank(0), "0-1");
  CHECK(p.verdict == Verdict::Unusable);
}

TEST_CASE("numa_node -1: nothing to bind unless the oracle said", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  tree.file("/sys/bus/pci/devices/0000:41:00.0/numa_node", "-1\n");
  BindPlan p = plan_for(tree, rank(1), "0-63");
  CHECK(p.verdict == Verdict::NodeUnknown);
  CHECK(p.gpu == "0000:41:00.0");
  Topology topo = read_topology(tree);
  topo.gpus[1].node = 1;
  topo.gpus[1].node_from_nvml = true;
  PlanInputs in;
  EnvMap env = rank(1);
  in.env = read_start_env(EnvMap::lookup, &env);
  in.allowed = cpus_of("0-63");
  p = plan_binding(in, topo);
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.reason == "GPU 0000:41:00.0 is on node 1 (NVML)");
}

TEST_CASE("the H200: one node, a clean no-op naming the GPU", "[numa][plan]") {
  BindPlan p = plan_for(testing::h200_vm(), EnvMap{}, "0-15");
  CHECK(p.verdict == Verdict::OneNode);
  CHECK(p.reason == "one node");
  CHECK(p.gpu == "0000:00:06.0");
  // Even in force mode, even narrowed.
  CHECK(plan_for(testing::h200_vm(), EnvMap{}, "3", NumaMode::Force).verdict == Verdict::OneNode);
}

TEST_CASE("unreadable node cpulist: the GPU's local_cpulist stands in", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  tree.unreadable("/sys/devices/system/node/node1/cpulist");
  BindPlan p = plan_for(tree, rank(1), "0-63");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "32-63");
  tree.file("/sys/bus/pci/devices/0000:41:00.0/local_cpulist", "32-x\n");
  CHECK(plan_for(tree, rank(1), "0-63").verdict == Verdict::Unusable);
}

TEST_CASE("no cpu/online: auto cannot tell narrowed from not, force can bind", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  tree.remove("/sys/devices/system/cpu/online");
  // The node lists still add up to the machine.
  CHECK(plan_for(tree, rank(1), "0-63").verdict == Verdict::Bind);
  tree.node(0, "garbage");
  BindPlan p = plan_for(tree, rank(1), "0-63");
  CHECK(p.verdict == Verdict::Unusable);
  CHECK(p.reason.find("cannot tell") != std::string::npos);
  p = plan_for(tree, rank(1), "0-63", NumaMode::Force);
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "32-63");
}

TEST_CASE("bad rank and numa:gpu out of range warn; no GPU does not", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  BindPlan p = plan_for(tree, EnvMap{}.set("LOCAL_RANK", "abc"), "0-63");
  CHECK(p.verdict == Verdict::Unusable);
  CHECK(p.reason == "LOCAL_RANK='abc' is not a local rank");
  CHECK(plan_for(tree, EnvMap{}, "0-63", NumaMode::Auto, 5).verdict == Verdict::Unusable);
  p = plan_for(tree, EnvMap{}, "0-63", NumaMode::Auto, 1);
  CHECK(p.who == "numa:gpu=1");
  CHECK(p.node == 1);
  CHECK(plan_for(tree, EnvMap{}.set("CUDA_VISIBLE_DEVICES", ""), "0-63").verdict == Verdict::NoGpu);
}

TEST_CASE("the device in use, when known, decides", "[numa][plan]") {
  FakeTree tree = testing::two_node_machine();
  PlanInputs in;
  EnvMap env = rank(0);
  in.env = read_start_env(EnvMap::lookup, &env);
  in.allowed = cpus_of("0-63");
  in.device_bdf = "0000:41:00.0";
  Topology topo = read_topology(tree);
  BindPlan p = plan_binding(in, topo);
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.who == "rank 0");
  CHECK(p.node == 1);
  in.device_bdf = "0000:99:00.0";
  CHECK(plan_binding(in, topo).verdict == Verdict::NodeUnknown);
}

TEST_CASE("MIG instance with unknown parent on two nodes: nothing to bind", "[numa][plan]") {
  BindPlan p = plan_for(testing::two_node_machine(), EnvMap{}.set("CUDA_VISIBLE_DEVICES", "MIG-0123abcd"), "0-63");
  CHECK(p.verdict == Verdict::NodeUnknown);
  CHECK(p.gpu == "MIG-0123abcd");
}

TEST_CASE("narrowed by pagefast in the parent: a rank binds for its own GPU", "[numa][plan]") {
  // torchrun's own process (no rank: rank 0's GPU) was bound at its start
  // to node 0 and left PAGEFAST_NUMA_BOUND=0-31; its rank 1 inherits 0-31.
  FakeTree tree = testing::two_node_machine();
  BindPlan p = plan_for(tree, rank(1).set("PAGEFAST_NUMA_BOUND", "0-31"), "0-31");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.node == 1);
  CHECK(p.cpus.to_list() == "32-63");
  // Rank 0 stays where it is.
  p = plan_for(tree, rank(0).set("PAGEFAST_NUMA_BOUND", "0-31"), "0-31");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "0-31");
  // Narrowed since by someone else (taskset in the child): left alone.
  CHECK(plan_for(tree, rank(1).set("PAGEFAST_NUMA_BOUND", "0-31"), "0-15").verdict == Verdict::Narrowed);
  // Inside a cgroup, still within it.
  tree.file("/proc/self/cgroup", "0::/slurm/job_7\n");
  tree.file("/sys/fs/cgroup/slurm/job_7/cpuset.cpus.effective", "0-7,32-39\n");
  p = plan_for(tree, rank(1).set("PAGEFAST_NUMA_BOUND", "0-7"), "0-7");
  REQUIRE(p.verdict == Verdict::Bind);
  CHECK(p.cpus.to_list() == "32-39");
}
