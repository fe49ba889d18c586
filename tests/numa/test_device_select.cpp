// tests/numa/test_device_select.cpp: the local rank, CUDA_VISIBLE_DEVICES
// in all its forms (indexes, UUIDs and prefixes, both MIG forms), one GPU
// per task, and numa:gpu.
#include <catch2/catch.hpp>

#include "numa/device_select.h"
#include "numa/gpu_oracle.h"
#include "tests/numa/env_map.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::numa::testing::EnvMap;
using pagefast::numa::testing::fake_uuid;

namespace {

StartEnv env_of(EnvMap env) { return read_start_env(EnvMap::lookup, &env); }

std::string chosen(const EnvMap& env, const Topology& topo, int gpu_override = -1) {
  DeviceChoice c = choose_device(env_of(env), topo, gpu_override);
  return c.status == ChoiceStatus::Chosen ? c.label : "status " + std::to_string(int(c.status));
}

}  // namespace

TEST_CASE("local rank: the first variable set wins; empty counts as unset", "[numa][device]") {
  StartEnv env = env_of(EnvMap{}.set("SLURM_LOCALID", "3").set("MPI_LOCALRANKID", "5"));
  CHECK(env.rank_var == "SLURM_LOCALID");
  CHECK(env.rank_text == "3");
  env = env_of(EnvMap{}.set("LOCAL_RANK", "").set("OMPI_COMM_WORLD_LOCAL_RANK", "2"));
  CHECK(env.rank_var == "OMPI_COMM_WORLD_LOCAL_RANK");
  env = env_of(EnvMap{}.set("LOCAL_RANK", "1").set("SLURM_LOCALID", "3"));
  CHECK(env.rank_text == "1");
  env = env_of(EnvMap{});
  CHECK(env.rank_var.empty());
  CHECK_FALSE(env.visible_set);
  env = env_of(EnvMap{}.set("CUDA_VISIBLE_DEVICES", "").set("CUDA_DEVICE_ORDER", "PCI_BUS_ID"));
  CHECK(env.visible_set);
  CHECK(env.device_order == "PCI_BUS_ID");
}

TEST_CASE("no rank variable means rank 0", "[numa][device]") {
  Topology topo = read_topology(testing::two_node_machine());
  DeviceChoice c = choose_device(env_of(EnvMap{}), topo, -1);
  CHECK(c.status == ChoiceStatus::Chosen);
  CHECK(c.rank == 0);
  CHECK(c.who == "rank 0");
  CHECK(c.label == "0000:01:00.0");
}

TEST_CASE("ranks 0..7 on the 8-GPU machine take GPUs in PCI order", "[numa][device]") {
  Topology topo = read_topology(testing::eight_gpu_machine());
  const char* expect[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                          "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  for (int rank = 0; rank < 8; ++rank) {
    INFO("rank " << rank);
    CHECK(chosen(EnvMap{}.set("LOCAL_RANK", std::to_string(rank)), topo) == expect[rank]);
  }
  // CUDA_DEVICE_ORDER does not change the order we can know.
  CHECK(chosen(EnvMap{}.set("LOCAL_RANK", "5").set("CUDA_DEVICE_ORDER", "FASTEST_FIRST"), topo) == "0000:ab:00.0");
}

TEST_CASE("CUDA_VISIBLE_DEVICES: indexes, UUIDs, prefixes", "[numa][device]") {
  Topology topo = read_topology(testing::eight_gpu_machine());
  EnvMap env;
  env.set("LOCAL_RANK", "1");
  CHECK(chosen(env.set("CUDA_VISIBLE_DEVICES", "7,6"), topo) == "0000:ba:00.0");
  CHECK(chosen(env.set("CUDA_VISIBLE_DEVICES", " 4 , 0 "), topo) == "0000:18:00.0");
  CHECK(chosen(env.set("CUDA_VISIBLE_DEVICES", fake_uuid(1) + "," + fake_uuid(8)), topo) == "0000:db:00.0");
  CHECK(chosen(env.set("CUDA_VISIBLE_DEVICES", "GPU-1,GPU-3"), topo) == "0000:3a:00.0");
  CHECK(chosen(env.set("CUDA_VISIBLE_DEVICES", "gpu-10000000,GPU-20"), topo) == "0000:2a:00.0");
}

TEST_CASE("CUDA_VISIBLE_DEVICES: the list ends at the first entry that names nothing", "[numa][device]") {
  Topology topo = read_topology(testing::two_node_machine());
  StartEnv env;
  env.visible_set = true;
  env.visible_devices = "1,9,0";  // 9 is no GPU: only "1" is visible
  VisibleDevices v = resolve_visible(env, topo);
  REQUIRE(v.devices.size() == 1);
  CHECK(v.stopped_at == "9");
  env.visible_devices = "1,GPU-nope,0";
  CHECK(resolve_visible(env, topo).devices.size() == 1);
  env.visible_devices = "GPU-,0";  // a bare prefix names nothing
  CHECK(resolve_visible(env, topo).devices.empty());
  env.visible_devices = "0,0,1";  // our rule: a repeat ends the list too
  CHECK(resolve_visible(env, topo).devices.size() == 1);
  env.visible_devices = "0,,1";
  CHECK(resolve_visible(env, topo).devices.size() == 1);
  env.visible_devices = "-1";
  CHECK(resolve_visible(env, topo).devices.empty());
  env.visible_devices = "";
  CHECK(resolve_visible(env, topo).devices.empty());
}

TEST_CASE("an ambiguous UUID prefix names nothing", "[numa][device]") {
  testing::FakeTree tree;
  tree.node(0, "0-1").online("0-1");
  tree.gpu("0000:01:00.0", "GPU-abc1", "0", "0-1");
  tree.gpu("0000:02:00.0", "GPU-abc2", "0", "0-1");
  Topology topo = read_topology(tree);
  StartEnv env;
  env.visible_set = true;
  env.visible_devices = "GPU-abc";
  CHECK(resolve_visible(env, topo).devices.empty());
  env.visible_devices = "GPU-abc2";
  CHECK(resolve_visible(env, topo).devices.size() == 1);
}

TEST_CASE("MIG ids resolve to their parent GPU", "[numa][device]") {
  Topology topo = read_topology(testing::two_node_machine());
  EnvMap env;
  // The old form names its parent.
  env.set("CUDA_VISIBLE_DEVICES", "MIG-" + fake_uuid(2) + "/1/0");
  CHECK(chosen(env, topo) == "0000:41:00.0");
  // The new form does not: unknown without NVML on a two-GPU machine...
  env.set("CUDA_VISIBLE_DEVICES", "MIG-8a1b2c3d-0000-1111-2222-333344445555");
  DeviceChoice c = choose_device(env_of(env), topo, -1);
  CHECK(c.status == ChoiceStatus::ParentUnknown);
  CHECK(c.label == "MIG-8a1b2c3d-0000-1111-2222-333344445555");
  // ...known through the oracle's answer...
  topo.mig_parents.push_back({"MIG-8a1b2c3d-0000-1111-2222-333344445555", "0000:41:00.0"});
  CHECK(chosen(env, topo) == "0000:41:00.0");
  // ...and trivial on a one-GPU machine.
  Topology one = read_topology(testing::h200_vm());
  CHECK(chosen(env, one) == "0000:00:06.0");
  // Two instances of one GPU are two devices, not a repeat.
  env.set("LOCAL_RANK", "1").set("CUDA_VISIBLE_DEVICES", "MIG-" + fake_uuid(2) + "/1/0,MIG-" + fake_uuid(2) + "/2/0");
  CHECK(chosen(env, topo) == "0000:41:00.0");
}

namespace {
struct FakeOracle : GpuOracle {
  int calls = 0;
  int node_of(const std::string& bdf) override {
    ++calls;
    return bdf == "0000:41:00.0" ? 1 : -1;
  }
  bool mig_parent(const std::string& uuid, std::string* bdf) override {
    ++calls;
    if (uuid != "MIG-aaaa") return false;
    *bdf = "00000000:41:00.0";  // NVML's long form
    return true;
  }
};
}  // namespace

TEST_CASE("the oracle fills numa_node -1 and MIG parents, only on multi-node machines", "[numa][device]") {
  testing::FakeTree tree = testing::two_node_machine();
  tree.file("/sys/bus/pci/devices/0000:41:00.0/numa_node", "-1\n");
  Topology topo = read_topology(tree);
  StartEnv env;
  env.visible_set = true;
  env.visible_devices = "MIG-aaaa,MIG-GPU-xyz/1/0,MIG-bbbb";
  FakeOracle oracle;
  complete_with_oracle(&topo, env, &oracle);
  CHECK(topo.gpus[1].node == 1);
  CHECK(topo.gpus[1].node_from_nvml);
  REQUIRE(topo.mig_parents.size() == 1);
  CHECK(topo.mig_parents[0].gpu_bdf == "0000:41:00.0");
  CHECK(oracle.calls == 3);  // one node, two new-form MIG ids; the old form needs none

  Topology one = read_topology(testing::h200_vm());
  FakeOracle unused;
  complete_with_oracle(&one, env, &unused);
  CHECK(unused.calls == 0);
  CHECK(one.gpus[0].node == -1);
}

TEST_CASE("one GPU per task: the visible one, whatever the rank", "[numa][device]") {
  Topology topo = read_topology(testing::eight_gpu_machine());
  EnvMap env;
  env.set("SLURM_LOCALID", "5").set("CUDA_VISIBLE_DEVICES", "5");
  DeviceChoice c = choose_device(env_of(env), topo, -1);
  CHECK(c.status == ChoiceStatus::Chosen);
  CHECK(c.label == "0000:ab:00.0");
  CHECK(c.ordinal == 0);
  CHECK(c.who == "rank 5");
  // Several visible, fewer than ranks: round robin.
  env.set("CUDA_VISIBLE_DEVICES", "2,3").set("SLURM_LOCALID", "5");
  c = choose_device(env_of(env), topo, -1);
  CHECK(c.label == "0000:5d:00.0");
  CHECK(c.why.find("wraps") != std::string::npos);
}

TEST_CASE("numa:gpu overrides the rank; bad values are refused", "[numa][device]") {
  Topology topo = read_topology(testing::eight_gpu_machine());
  EnvMap env;
  env.set("LOCAL_RANK", "0").set("CUDA_VISIBLE_DEVICES", "6,7");
  DeviceChoice c = choose_device(env_of(env), topo, 1);
  CHECK(c.label == "0000:db:00.0");
  CHECK(c.who == "numa:gpu=1");
  CHECK(c.rank == -1);
  CHECK(choose_device(env_of(env), topo, 2).status == ChoiceStatus::Invalid);
  for (const char* bad : {"x", "-1", "1.5", "99999999999", " 1"}) {
    INFO(bad);
    CHECK(choose_device(env_of(EnvMap{}.set("LOCAL_RANK", bad)), topo, -1).status == ChoiceStatus::Invalid);
  }
}

TEST_CASE("no GPU at all", "[numa][device]") {
  Topology topo = read_topology(testing::FakeTree{}.node(0, "0-1").online("0-1"));
  DeviceChoice c = choose_device(env_of(EnvMap{}), topo, -1);
  CHECK(c.status == ChoiceStatus::NoGpu);
  Topology two = read_topology(testing::two_node_machine());
  c = choose_device(env_of(EnvMap{}.set("CUDA_VISIBLE_DEVICES", "")), two, -1);
  CHECK(c.status == ChoiceStatus::NoGpu);
  CHECK(c.why.find("names no GPU") != std::string::npos);
}

TEST_CASE("UUID entries when the UUIDs were not read (one node)", "[numa][device]") {
  StartEnv env;
  env.visible_set = true;
  env.visible_devices = "GPU-ba62,GPU-ffff";
  CHECK(visible_needs_uuids(env));
  Topology one = read_topology(testing::h200_vm(), GpuUuids::Skip);
  // One GPU: it is that one, whatever the UUIDs say.
  VisibleDevices v = resolve_visible(env, one);
  REQUIRE(v.devices.size() == 2);
  CHECK(v.devices[0].gpu == 0);
  Topology two = read_topology(testing::two_node_machine(), GpuUuids::Skip);
  v = resolve_visible(env, two);
  REQUIRE(v.devices.size() == 2);
  CHECK(v.devices[0].gpu == -1);
  env.visible_devices = "1,MIG-abcd";
  CHECK_FALSE(visible_needs_uuids(env));
  env.visible_devices = "MIG-GPU-abcd/1/0";
  CHECK(visible_needs_uuids(env));
  env.visible_set = false;
  CHECK_FALSE(visible_needs_uuids(env));
}
