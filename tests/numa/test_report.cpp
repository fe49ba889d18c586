// tests/numa/test_report.cpp: the --numa-report text, on the layouts the
// launcher will meet.
#include <catch2/catch.hpp>

#include "numa/bind_session.h"
#include "tests/numa/env_map.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::NumaConfig;
using pagefast::numa::testing::EnvMap;

namespace {
std::string render(const testing::FakeTree& tree, EnvMap env, const std::string& allowed, int ranks = 0,
                   NumaConfig config = {}) {
  CpuSet cpus;
  REQUIRE(parse_cpulist(allowed, &cpus));
  return render_report(config, read_start_env(EnvMap::lookup, &env), read_topology(tree), cpus, ranks, "/fake");
}
bool has(const std::string& text, const std::string& part) {
  INFO("looking for: " << part << "\nin:\n" << text);
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("report: 8 GPUs, every GPU and every rank", "[numa][report]") {
  std::string text = render(testing::eight_gpu_machine(), EnvMap{}, "0-223");
  CHECK(has(text, "nodes: node 0 cpus 0-55,112-167; node 1 cpus 56-111,168-223\n"));
  CHECK(has(text, "  cuda 0: 0000:18:00.0  " + testing::fake_uuid(1) +
                      "  node 0, node cpus 0-55,112-167, local cpus 0-55,112-167\n"));
  CHECK(has(text, "  cuda 7: 0000:db:00.0"));
  CHECK(has(text, "  rank 0 -> GPU 0000:18:00.0 -> node 0, cpus 0-55,112-167, memory preferred\n"));
  CHECK(has(text, "  rank 7 -> GPU 0000:db:00.0 -> node 1, cpus 56-111,168-223, memory preferred\n"));
  CHECK_FALSE(has(text, "rank 8"));
}

TEST_CASE("report: visible subset, explicit rank count, stop in the list", "[numa][report]") {
  std::string text =
      render(testing::eight_gpu_machine(), EnvMap{}.set("CUDA_VISIBLE_DEVICES", "6,1,bogus"), "0-223", 3);
  CHECK(has(text, "CUDA_VISIBLE_DEVICES '6,1,bogus'"));
  CHECK(has(text, "  cuda 0: 0000:ba:00.0"));
  CHECK(has(text, "  cuda 1: 0000:2a:00.0"));
  CHECK(has(text, "stops at 'bogus'"));
  CHECK(has(text, "  rank 2 -> GPU 0000:ba:00.0"));  // wraps
}

TEST_CASE("report: the H200 VM", "[numa][report]") {
  std::string text = render(testing::h200_vm(), EnvMap{}, "0-15");
  CHECK(has(text, "node unknown (numa_node -1)"));
  CHECK(has(text, "  rank 0: one node; nothing to bind (GPU 0000:00:06.0)\n"));
}

TEST_CASE("report: a narrowed launcher shows what would be left alone", "[numa][report]") {
  std::string text = render(testing::two_node_machine(), EnvMap{}, "0-3");
  CHECK(has(text, "this process may run on 0-3"));
  CHECK(has(text, "rank 0: affinity already narrowed"));
  text = render(testing::two_node_machine(), EnvMap{}, "0-3", 2, NumaConfig{pagefast::NumaMode::Force, -1});
  CHECK(has(text, "  rank 1 -> GPU 0000:41:00.0 -> node 1, cpus 32-63, memory bound"));
}
