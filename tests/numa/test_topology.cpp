// tests/numa/test_topology.cpp: reading the machine through a SysfsReader:
// GPUs in PCI order, nodes, online CPUs, the cgroup cpuset, and what
// happens when files are missing, unreadable or malformed.
#include <catch2/catch.hpp>

#include "numa/topology.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::numa::testing::FakeTree;

TEST_CASE("bus ids normalise to the sysfs form", "[numa][topology]") {
  std::string bdf;
  REQUIRE(normalize_bdf("0000:41:00.0", &bdf));
  CHECK(bdf == "0000:41:00.0");
  REQUIRE(normalize_bdf("00000000:41:00.0", &bdf));  // NVML and cuDeviceGetPCIBusId long form
  CHECK(bdf == "0000:41:00.0");
  REQUIRE(normalize_bdf("0000:AB:1F.7\n", &bdf));
  CHECK(bdf == "0000:ab:1f.7");
  REQUIRE(normalize_bdf("41:00.0", &bdf));
  CHECK(bdf == "0000:41:00.0");
  REQUIRE(normalize_bdf("10000:01:00.0", &bdf));  // VMD domains are wider than 16 bits
  CHECK(bdf == "10000:01:00.0");
  for (const char* bad : {"", "0000:41:00", "0000:41:20.0", "0000:41:00.8", "zz:00.0", "000000000:41:00.0",
                          "0000:141:00.0", "GPU-1234"}) {
    INFO(bad);
    CHECK_FALSE(normalize_bdf(bad, &bdf));
  }
}

TEST_CASE("information file lines", "[numa][topology]") {
  const std::string text = FakeTree::information("0000:00:06.0", "GPU-ba62");
  CHECK(information_value(text, "GPU UUID") == "GPU-ba62");
  CHECK(information_value(text, "Bus Location") == "0000:00:06.0");
  CHECK(information_value(text, "Device Minor") == "0");
  CHECK(information_value(text, "Nope").empty());
}

TEST_CASE("a two-node machine with GPUs on both", "[numa][topology]") {
  FakeTree tree = testing::two_node_machine();
  Topology topo = read_topology(tree);
  REQUIRE(topo.gpus.size() == 2);
  CHECK(topo.gpus[0].bdf == "0000:01:00.0");
  CHECK(topo.gpus[0].node == 0);
  CHECK(topo.gpus[1].bdf == "0000:41:00.0");
  CHECK(topo.gpus[1].node == 1);
  CHECK(topo.gpus[1].uuid == testing::fake_uuid(2));
  CHECK(topo.gpus[1].local_cpus.to_list() == "32-63");
  REQUIRE(topo.nodes.size() == 2);
  CHECK(topo.nodes[1].cpus.to_list() == "32-63");
  CHECK(topo.cpu_node_count() == 2);
  CHECK(topo.online.to_list() == "0-63");
  CHECK_FALSE(topo.cgroup_known);
  CHECK(topo.problems.empty());
}

TEST_CASE("GPUs come in PCI bus order, not directory order", "[numa][topology]") {
  FakeTree tree;
  tree.node(0, "0-3").online("0-3");
  tree.gpu("0000:c1:00.0", "GPU-c", "0", "0-3");
  tree.gpu("0000:1a:00.0", "GPU-a", "0", "0-3");
  tree.gpu("0001:01:00.0", "GPU-d", "0", "0-3");
  tree.gpu("0000:9:00.0", "GPU-b", "0", "0-3");  // odd width in the name: read from the file
  Topology topo = read_topology(tree);
  REQUIRE(topo.gpus.size() == 4);
  CHECK(topo.gpus[0].uuid == "GPU-b");
  CHECK(topo.gpus[1].uuid == "GPU-a");
  CHECK(topo.gpus[2].uuid == "GPU-c");
  CHECK(topo.gpus[3].uuid == "GPU-d");
}

TEST_CASE("the H200 VM: one node, numa_node -1", "[numa][topology]") {
  FakeTree tree = testing::h200_vm();
  Topology topo = read_topology(tree);
  REQUIRE(topo.gpus.size() == 1);
  CHECK(topo.gpus[0].node == -1);
  CHECK(topo.cpu_node_count() == 1);
  CHECK(topo.problems.empty());
}

TEST_CASE("missing and unreadable files become unknowns, named in problems", "[numa][topology]") {
  FakeTree tree = testing::two_node_machine();
  tree.remove("/proc/driver/nvidia/gpus/0000:41:00.0/information");
  tree.file("/proc/driver/nvidia/gpus/0000:41:00.0/other", "x");  // the directory stays
  tree.unreadable("/sys/devices/system/node/node1/cpulist");
  tree.remove("/sys/bus/pci/devices/0000:01:00.0/numa_node");
  tree.remove("/sys/devices/system/cpu/online");
  Topology topo = read_topology(tree);
  REQUIRE(topo.gpus.size() == 2);
  CHECK(topo.gpus[1].bdf == "0000:41:00.0");  // from the directory name
  CHECK(topo.gpus[1].uuid.empty());
  CHECK(topo.gpus[1].node == 1);
  CHECK(topo.gpus[0].node == -1);
  CHECK_FALSE(topo.nodes[1].cpus_known);
  CHECK(topo.cpu_node_count() == 2);  // an unreadable node still counts
  CHECK_FALSE(topo.online_known);
  CpuSet machine;
  CHECK_FALSE(topo.machine_cpus(&machine));  // node1 unknown, online unknown
  CHECK(topo.problems.size() == 4);
}

TEST_CASE("malformed cpulists and numa_node", "[numa][topology]") {
  FakeTree tree = testing::two_node_machine();
  tree.node(0, "0-15,x");
  tree.file("/sys/bus/pci/devices/0000:41:00.0/numa_node", "one\n");
  tree.file("/sys/bus/pci/devices/0000:41:00.0/local_cpulist", "32-");
  Topology topo = read_topology(tree);
  CHECK_FALSE(topo.nodes[0].cpus_known);
  CHECK(topo.gpus[1].node == -1);
  CHECK_FALSE(topo.gpus[1].local_cpus_known);
  CHECK(topo.problems.size() == 3);
}

TEST_CASE("no driver, no node directory", "[numa][topology]") {
  FakeTree tree;
  tree.online("0-1");
  Topology topo = read_topology(tree);
  CHECK(topo.gpus.empty());
  CHECK(topo.nodes.empty());
  CHECK(topo.cpu_node_count() == 0);
  CpuSet machine;
  CHECK(topo.machine_cpus(&machine));
  CHECK(machine.to_list() == "0-1");
}

TEST_CASE("memory-only nodes do not count as CPU nodes", "[numa][topology]") {
  FakeTree tree = testing::h200_vm();
  tree.node(1, "");  // e.g. a Grace Hopper GPU's memory, or CXL
  Topology topo = read_topology(tree);
  CHECK(topo.nodes.size() == 2);
  CHECK(topo.cpu_node_count() == 1);
}

TEST_CASE("cgroup cpuset: v2, v1, and the nearest ancestor with the controller", "[numa][topology]") {
  FakeTree v2 = testing::two_node_machine();
  v2.file("/proc/self/cgroup", "0::/slurm/job_7/step_0\n");
  v2.file("/sys/fs/cgroup/slurm/job_7/cpuset.cpus.effective", "0-15,32-47\n");
  Topology topo = read_topology(v2);
  REQUIRE(topo.cgroup_known);
  CHECK(topo.cgroup_cpus.to_list() == "0-15,32-47");

  FakeTree v1 = testing::two_node_machine();
  v1.file("/proc/self/cgroup", "4:memory:/x\n3:cpuset,cpuacct:/docker/abc\n0::/\n");
  v1.file("/sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "32-63\n");
  topo = read_topology(v1);
  REQUIRE(topo.cgroup_known);
  CHECK(topo.cgroup_cpus.to_list() == "32-63");

  FakeTree root = testing::two_node_machine();
  root.file("/proc/self/cgroup", "0::/\n");
  root.file("/sys/fs/cgroup/cpuset.cpus.effective", "0-63\n");
  topo = read_topology(root);
  CHECK(topo.cgroup_known);

  FakeTree none = testing::two_node_machine();
  none.file("/proc/self/cgroup", "garbage\n");
  CHECK_FALSE(read_topology(none).cgroup_known);
}

TEST_CASE("the costly information files are read only when asked", "[numa][topology]") {
  FakeTree tree = testing::two_node_machine();
  tree.unreadable("/proc/driver/nvidia/gpus/0000:01:00.0/information");
  Topology skipped = read_topology(tree, GpuUuids::Skip);
  CHECK_FALSE(skipped.uuids_read);
  REQUIRE(skipped.gpus.size() == 2);
  CHECK(skipped.gpus[1].bdf == "0000:41:00.0");  // from the directory name
  CHECK(skipped.gpus[1].uuid.empty());
  CHECK(skipped.gpus[1].node == 1);
  CHECK(skipped.problems.empty());  // the unreadable file was never opened

  Topology multi = read_topology(tree, GpuUuids::ReadIfMultiNode);
  CHECK(multi.uuids_read);
  CHECK(multi.gpus[1].uuid == testing::fake_uuid(2));
  CHECK(multi.problems.size() == 1);

  Topology one = read_topology(testing::h200_vm(), GpuUuids::ReadIfMultiNode);
  CHECK_FALSE(one.uuids_read);
  CHECK(one.gpus[0].uuid.empty());
}
