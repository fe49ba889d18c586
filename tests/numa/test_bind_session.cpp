// tests/numa/test_bind_session.cpp: bind_at_start and check_device over
// fake environment, files and system calls: the one log line, the JSON,
// all-or-nothing application, and the rebind after the first context.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "numa/bind_session.h"
#include "tests/numa/env_map.h"
#include "tests/numa/fake_affinity_ops.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::LogLevel;
using pagefast::NumaConfig;
using pagefast::NumaMode;
using pagefast::numa::testing::EnvMap;
using pagefast::numa::testing::FakeAffinityOps;
using pagefast::numa::testing::FakeTree;

namespace {

struct LogLine {
  LogLevel level;
  std::string text;
};
std::vector<LogLine> g_lines;
void record(LogLevel level, const char* message) { g_lines.push_back({level, message}); }

// The lines at info and above: what a user sees at PAGEFAST_LOG=info.
std::vector<LogLine> visible_lines() {
  std::vector<LogLine> out;
  for (const LogLine& l : g_lines)
    if (l.level != LogLevel::Debug) out.push_back(l);
  return out;
}

BindReport start(const FakeTree& tree, EnvMap env, FakeAffinityOps& ops, NumaMode mode = NumaMode::Auto, int gpu = -1) {
  g_lines.clear();
  NumaConfig config;
  config.mode = mode;
  config.gpu = gpu;
  BindContext ctx;
  ctx.lookup = EnvMap::lookup;
  ctx.user = &env;
  ctx.reader = &tree;
  ctx.ops = &ops;
  return bind_at_start_with(config, record, ctx);
}

CpuSet cpus_of(const std::string& list) {
  CpuSet cpus;
  REQUIRE(parse_cpulist(list, &cpus));
  return cpus;
}

}  // namespace

TEST_CASE("bound: one info line in the issue's form, and the JSON", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  CHECK(r.action == BindAction::Bound);
  CHECK(ops.cpus.to_list() == "32-63");
  CHECK(ops.memory == MemoryPolicy::Preferred);
  CHECK(ops.memory_node == 1);
  auto lines = visible_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].level == LogLevel::Info);
  CHECK(lines[0].text == "numa: rank 1 -> GPU 0000:41:00.0 -> node 1, cpus 32-63, memory preferred");
  CHECK(r.json() ==
        "{\"mode\":\"auto\",\"rank\":1,\"gpu\":\"0000:41:00.0\",\"node\":1,\"cpus\":\"32-63\","
        "\"memory\":\"preferred\",\"action\":\"bound\","
        "\"reason\":\"GPU 0000:41:00.0 is on node 1 (sysfs numa_node)\"}");
  CHECK(last_report().json() == r.json());
}

TEST_CASE("bind mode says memory bound", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}, ops, NumaMode::Bind);
  CHECK(r.line() == "numa: rank 0 -> GPU 0000:01:00.0 -> node 0, cpus 0-31, memory bound");
  CHECK(ops.memory == MemoryPolicy::Strict);
  CHECK(r.json().find("\"memory\":\"bind\"") != std::string::npos);
}

TEST_CASE("the H200: the no-op line at info, nothing touched", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-15");
  BindReport r = start(testing::h200_vm(), EnvMap{}, ops);
  CHECK(r.action == BindAction::Nothing);
  CHECK(ops.calls.empty());
  auto lines = visible_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].level == LogLevel::Info);
  CHECK(lines[0].text == "numa: one node; nothing to bind (GPU 0000:00:06.0)");
  CHECK(r.json() ==
        "{\"mode\":\"auto\",\"rank\":0,\"gpu\":\"0000:00:06.0\",\"node\":null,\"cpus\":null,"
        "\"memory\":\"none\",\"action\":\"none\",\"reason\":\"one node\"}");
}

TEST_CASE("one node with UUID entries: the information files stay unread", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-15");
  FakeTree tree = testing::h200_vm();
  tree.unreadable("/proc/driver/nvidia/gpus/0000:00:06.0/information");
  BindReport r = start(tree, EnvMap{}.set("CUDA_VISIBLE_DEVICES", "GPU-ba62"), ops);
  CHECK(r.line() == "numa: one node; nothing to bind (GPU 0000:00:06.0)");
  for (const auto& l : g_lines) CHECK(l.text.find("information") == std::string::npos);
  // Two GPUs on one node: which one is not known, and not needed.
  FakeTree two = testing::h200_vm();
  two.gpu("0000:00:07.0", "GPU-ffff", "-1", "0-15");
  r = start(two, EnvMap{}.set("CUDA_VISIBLE_DEVICES", "GPU-ffff"), ops);
  CHECK(r.line() == "numa: one node; nothing to bind (GPU GPU-ffff)");
}

TEST_CASE("two nodes with UUID entries: the UUIDs are read and resolve", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("CUDA_VISIBLE_DEVICES", testing::fake_uuid(2)), ops);
  CHECK(r.action == BindAction::Bound);
  CHECK(r.gpu == "0000:41:00.0");
}

TEST_CASE("off reads nothing and says so", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}, ops, NumaMode::Off);
  CHECK(ops.calls.empty());
  CHECK(r.line() == "numa: mode off; nothing to bind");
  CHECK(r.json().find("\"mode\":\"off\"") != std::string::npos);
}

TEST_CASE("memory binding fails: CPUs rolled back, one warning", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  ops.fail_set_memory = EINVAL;  // the running kernel lacks node 1
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  CHECK(r.action == BindAction::Failed);
  CHECK(ops.cpus.to_list() == "0-63");
  CHECK(ops.calls == std::vector<std::string>{"cpus 32-63 all", "memory preferred 1", "cpus 0-63 all"});
  auto lines = visible_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].level == LogLevel::Warn);
  CHECK(lines[0].text ==
        "numa: could not bind memory to node 1 (Invalid argument); left the process as it was "
        "(rank 1 -> GPU 0000:41:00.0 -> node 1)");
  CHECK(r.json().find("\"action\":\"failed\"") != std::string::npos);
}

TEST_CASE("CPU binding fails: nothing changed, one warning", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  ops.fail_set_cpus = EINVAL;
  BindReport r = start(testing::two_node_machine(), EnvMap{}, ops);
  CHECK(r.action == BindAction::Failed);
  CHECK(ops.cpus.to_list() == "0-63");
  CHECK(ops.memory == MemoryPolicy::None);
  REQUIRE(visible_lines().size() == 1);
  CHECK(visible_lines()[0].level == LogLevel::Warn);
}

TEST_CASE("narrowed: left alone, said at info", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-3");
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  CHECK(r.action == BindAction::LeftAlone);
  CHECK(ops.calls.empty());
  REQUIRE(visible_lines().size() == 1);
  CHECK(visible_lines()[0].level == LogLevel::Info);
  CHECK(visible_lines()[0].text ==
        "numa: affinity already narrowed to 0-3 (of 0-63); left alone "
        "(rank 1 -> GPU 0000:41:00.0 -> node 1)");
}

TEST_CASE("missing files show up at debug only", "[numa][session]") {
  FakeTree tree = testing::two_node_machine();
  tree.remove("/sys/devices/system/cpu/online");
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(tree, EnvMap{}, ops);
  REQUIRE(g_lines.size() == 2);
  CHECK(g_lines[0].level == LogLevel::Debug);
  CHECK(g_lines[0].text.find("/sys/devices/system/cpu/online: missing") != std::string::npos);
}

TEST_CASE("a null sink is silent", "[numa][session]") {
  FakeTree tree = testing::two_node_machine();
  EnvMap env;
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindContext ctx;
  ctx.lookup = EnvMap::lookup;
  ctx.user = &env;
  ctx.reader = &tree;
  ctx.ops = &ops;
  CHECK(bind_at_start_with(NumaConfig{}, nullptr, ctx).action == BindAction::Bound);
}

TEST_CASE("check_device: the same device, in any spelling, changes nothing", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  ops.calls.clear();
  g_lines.clear();
  check_device_with("00000000:41:00.0", NumaConfig{}, record, ops);
  CHECK(ops.calls.empty());
  CHECK(visible_lines().empty());
}

TEST_CASE("check_device: another device in auto: rebind once", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  g_lines.clear();
  check_device_with("00000000:01:00.0", NumaConfig{}, record, ops);
  CHECK(ops.cpus.to_list() == "0-31");
  CHECK(ops.memory_node == 0);
  auto lines = visible_lines();
  // The device's line is debug: the decision says it.
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].text ==
        "numa: rebound for the device in use: rank 1 -> GPU 0000:01:00.0 -> node 0, cpus 0-31, "
        "memory preferred");
  CHECK(last_report().json().find("\"action\":\"rebound\"") != std::string::npos);
  // Once only.
  ops.calls.clear();
  check_device_with("0000:41:00.0", NumaConfig{}, record, ops);
  CHECK(ops.calls.empty());
}

TEST_CASE("check_device: bind mode and numa:gpu only log", "[numa][session]") {
  NumaConfig bind;
  bind.mode = NumaMode::Bind;
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops, NumaMode::Bind);
  ops.calls.clear();
  g_lines.clear();
  check_device_with("0000:01:00.0", bind, record, ops);
  CHECK(ops.calls.empty());
  CHECK(visible_lines().size() == 1);

  NumaConfig pinned;
  pinned.gpu = 1;
  start(testing::two_node_machine(), EnvMap{}, ops, NumaMode::Auto, 1);
  ops.calls.clear();
  check_device_with("0000:01:00.0", pinned, record, ops);
  CHECK(ops.calls.empty());
}

TEST_CASE("check_device: an affinity changed since start is not ours", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  ops.cpus = cpus_of("33");  // the program pinned itself
  ops.calls.clear();
  g_lines.clear();
  check_device_with("0000:01:00.0", NumaConfig{}, record, ops);
  CHECK(ops.calls.empty());
  REQUIRE(visible_lines().size() == 1);
  CHECK(visible_lines()[0].text ==
        "numa: the program uses GPU 0000:01:00.0 and changed its CPU affinity since start (now CPUs 33); pagefast "
        "leaves it as the program set it");
}

TEST_CASE("check_device: a device with no known node undoes the start binding", "[numa][session]") {
  FakeTree tree = testing::two_node_machine();
  tree.gpu("0000:81:00.0", testing::fake_uuid(3), "-1", "0-63");
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(tree, EnvMap{}.set("LOCAL_RANK", "1"), ops);
  REQUIRE(ops.cpus.to_list() == "32-63");
  g_lines.clear();
  check_device_with("0000:81:00.0", NumaConfig{}, record, ops);
  CHECK(ops.cpus.to_list() == "0-63");
  CHECK(ops.memory == MemoryPolicy::None);
  CHECK(last_report().action == BindAction::Unbound);
}

TEST_CASE("check_device: nothing bound at start, the device in use can be: bind it", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("CUDA_VISIBLE_DEVICES", "MIG-0123abcd"), ops);
  REQUIRE(r.action == BindAction::Nothing);
  CHECK(r.line() ==
        "numa: the GPU holding MIG-0123abcd is unknown without NVML; nothing to bind "
        "(GPU MIG-0123abcd)");
  check_device_with("0000:41:00.0", NumaConfig{}, record, ops);
  CHECK(ops.cpus.to_list() == "32-63");
  CHECK(last_report().action == BindAction::Rebound);
}

TEST_CASE("check_device: garbage in, nothing out", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "1"), ops);
  ops.calls.clear();
  check_device_with(nullptr, NumaConfig{}, record, ops);
  check_device_with("not a bus id", NumaConfig{}, record, ops);
  CHECK(ops.calls.empty());
  // The real one is still to come: the once-guard was not spent on garbage.
  check_device_with("0000:01:00.0", NumaConfig{}, record, ops);
  CHECK(ops.cpus.to_list() == "0-31");
}

TEST_CASE("JSON escapes what the environment put in the reason", "[numa][session]") {
  FakeAffinityOps ops;
  ops.cpus = cpus_of("0-63");
  BindReport r = start(testing::two_node_machine(), EnvMap{}.set("LOCAL_RANK", "a\"b\\c\n"), ops);
  CHECK(r.action == BindAction::Failed);
  CHECK(r.json().find("LOCAL_RANK='a\\\"b\\\\c?' is not a local rank") != std::string::npos);
  CHECK(r.line().find('\n') == std::string::npos);
  CHECK(r.json().find("\"rank\":null") != std::string::npos);
}
