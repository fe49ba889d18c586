// tests/numa/test_bind_process.cpp: bind_at_start and check_device in a
// real process (a forked child each), on fake trees under PAGEFAST_SYSROOT,
// checked through the affinity the kernel reports (sched_getaffinity and
// /proc/self/status Cpus_allowed_list) and the memory policy it reports
// (get_mempolicy). The trees are fitted to the CPUs this test may use:
// node 0 holds the first allowed CPU ("A"), a second node holds the rest,
// so "bound to node 0" is visible as an affinity of {A}. That second node
// gets an id the running kernel lacks: the CPU binding to it succeeds and
// the memory binding fails, which must leave the process as it was.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <ftw.h>
#include <numaif.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "numa/bind_apply.h"
#include "numa/numa.h"
#include "tests/numa/fake_tree.h"

using namespace pagefast::numa;
using pagefast::LogLevel;
using pagefast::NumaConfig;
using pagefast::NumaMode;
using pagefast::numa::testing::fake_uuid;
using pagefast::numa::testing::FakeTree;

namespace {

using Result = std::map<std::string, std::string>;

// --- what the real machine gives this test -------------------------------

CpuSet real_allowed() {
  CpuSet cpus;
  system_affinity_ops().get_cpus(&cpus);
  return cpus;
}

// A node id the running kernel does not have.
int missing_node() {
  int max = 0;
  if (DIR* dir = ::opendir("/sys/devices/system/node")) {
    while (struct dirent* e = ::readdir(dir))
      if (!std::strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9')
        max = std::max(max, std::atoi(e->d_name + 4));
    ::closedir(dir);
  }
  return max + 1;
}

struct Fit {
  CpuSet all, a, rest;
  int far = 1;
  bool usable = false;
  std::string a_list() const { return a.to_list(); }
};

const Fit& fit() {
  static Fit f = [] {
    Fit out;
    out.all = real_allowed();
    std::vector<int> cpus = out.all.members();
    out.usable = cpus.size() >= 2;
    if (!out.usable) return out;
    out.a.add(cpus[0]);
    for (size_t i = 1; i < cpus.size(); ++i) out.rest.add(cpus[i]);
    out.far = missing_node();
    return out;
  }();
  return f;
}

// GPU 0000:01:00.0 on the far node (the rest of the CPUs), GPU
// 0000:41:00.0 on node 0 (CPU A). Rank 0 -> far, rank 1 -> node 0.
FakeTree fitted_tree() {
  const Fit& f = fit();
  FakeTree t;
  t.node(0, f.a.to_list()).node(f.far, f.rest.to_list()).online(f.all.to_list());
  t.gpu("0000:01:00.0", fake_uuid(1), std::to_string(f.far), f.rest.to_list());
  t.gpu("0000:41:00.0", fake_uuid(2), "0", f.a.to_list());
  return t;
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// --- the child ------------------------------------------------------------

std::string g_log;
void sink(LogLevel level, const char* message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  if (level == LogLevel::Debug) return;
  if (!g_log.empty()) g_log += '|';
  g_log += std::string(names[static_cast<int>(level)]) + ": " + message;
}

std::string status_cpus() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.compare(0, 18, "Cpus_allowed_list:") == 0) {
      size_t b = line.find_first_not_of(" \t", 18);
      return b == std::string::npos ? "" : line.substr(b);
    }
  return "?";
}

std::string mempolicy() {
  int mode = -1;
  unsigned long mask[16] = {};
  if (::syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0) != 0) return "error";
  static const char* names[] = {"default", "preferred", "bind", "interleave", "local"};
  std::string out = mode >= 0 && mode <= 4 ? names[mode] : std::to_string(mode);
  if (mode != MPOL_DEFAULT) out += " " + std::to_string(mask[0]);
  return out;
}

bool mapped(const char* name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

struct Case {
  std::map<std::string, std::string> env;
  NumaConfig config;
  std::function<void()> before;  // runs first: e.g. narrow the affinity
  std::function<void()> after;   // runs after bind_at_start: e.g. check_device
};

// Runs the case in a fresh child against `tree`; returns what it saw.
Result run(const FakeTree& tree, const Case& c) {
  const std::string root = tree.write_to_temp_dir();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                             "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
      ::unsetenv(name);
    ::setenv("PAGEFAST_SYSROOT", root.c_str(), 1);
    for (const auto& kv : c.env) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
    if (c.before) c.before();
    BindReport report = bind_at_start(c.config, sink);
    if (c.after) c.after();
    Result r;
    CpuSet now;
    system_affinity_ops().get_cpus(&now);
    r["affinity"] = now.to_list();
    r["status"] = status_cpus();
    r["memory"] = mempolicy();
    r["log"] = g_log;
    r["json"] = last_report().json();
    r["action"] = report.json();
    r["cuda"] = mapped("libcuda") || mapped("libnvidia-ml") ? "loaded" : "no";
    std::string out;
    for (const auto& kv : r) out += kv.first + "=" + kv.second + "\n";
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::nftw(root.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  Result r;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string line = text.substr(start, end - start);
    size_t eq = line.find('=');
    r[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  INFO("child saw: log=" << r["log"] << " affinity=" << r["affinity"] << " memory=" << r["memory"]);
  CHECK(r["cuda"] == "no");  // numa/ never loads CUDA (nor NVML under a sysroot)
  CHECK(r["status"] == r["affinity"]);
  return r;
}

Case with_env(std::map<std::string, std::string> env, NumaMode mode = NumaMode::Auto) {
  Case c;
  c.env = std::move(env);
  c.config.mode = mode;
  return c;
}

void narrow_to(const CpuSet& cpus) { system_affinity_ops().set_cpus(cpus, false); }

#define NEED_TWO_CPUS()                                                         \
  if (!fit().usable) {                                                          \
    WARN("needs two allowed CPUs; this machine gives " << fit().all.to_list()); \
    return;                                                                     \
  }

}  // namespace

TEST_CASE("process: bound to the GPU's node, memory preferred", "[numa][process]") {
  NEED_TWO_CPUS();
  Result r = run(fitted_tree(), with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["memory"] == "preferred 1");
  CHECK(r["log"] == "info: numa: rank 1 -> GPU 0000:41:00.0 -> node 0, cpus " + fit().a_list() + ", memory preferred");
  CHECK(r["json"].find("\"action\":\"bound\"") != std::string::npos);
}

TEST_CASE("process: bind mode binds memory strictly", "[numa][process]") {
  NEED_TWO_CPUS();
  Result r = run(fitted_tree(), with_env({{"LOCAL_RANK", "1"}}, NumaMode::Bind));
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["memory"] == "bind 1");
}

TEST_CASE("process: a node the running kernel lacks: one warning, left as it was", "[numa][process]") {
  NEED_TWO_CPUS();
  Result r = run(fitted_tree(), with_env({{"LOCAL_RANK", "0"}}));
  CHECK(r["affinity"] == fit().all.to_list());  // the CPU binding was rolled back
  CHECK(r["memory"] == "default");
  CHECK(r["log"].rfind("warn: numa: could not bind memory to node " + std::to_string(fit().far), 0) == 0);
  CHECK(r["log"].find('|') == std::string::npos);  // one line
}

TEST_CASE("process: CPUs the running kernel lacks: one warning, untouched", "[numa][process]") {
  NEED_TWO_CPUS();
  FakeTree tree = fitted_tree();
  tree.node(0, "4000-4001");
  tree.file("/sys/bus/pci/devices/0000:41:00.0/local_cpulist", "4000-4001\n");
  Result r = run(tree, with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["log"].rfind("warn: numa: node 0's CPUs 4000-4001 are outside the allowed CPUs", 0) == 0);
}

TEST_CASE("process: CUDA_VISIBLE_DEVICES by UUID, prefix and index", "[numa][process]") {
  NEED_TWO_CPUS();
  for (const std::string& visible : {fake_uuid(2), std::string("GPU-2"), std::string("1,0")}) {
    INFO("CUDA_VISIBLE_DEVICES=" << visible);
    Result r = run(fitted_tree(), with_env({{"CUDA_VISIBLE_DEVICES", visible}}));
    CHECK(r["affinity"] == fit().a_list());
  }
}

TEST_CASE("process: MIG ids", "[numa][process]") {
  NEED_TWO_CPUS();
  Result r = run(fitted_tree(), with_env({{"CUDA_VISIBLE_DEVICES", "MIG-" + fake_uuid(2) + "/1/0"}}));
  CHECK(r["affinity"] == fit().a_list());
  // The new form on a two-GPU machine, no NVML under a sysroot: nothing bound.
  r = run(fitted_tree(), with_env({{"CUDA_VISIBLE_DEVICES", "MIG-8a1b2c3d-0000-1111-2222-333344445555"}}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["log"].rfind("info: numa: the GPU holding MIG-8a1b2c3d", 0) == 0);
}

TEST_CASE("process: one GPU per task", "[numa][process]") {
  NEED_TWO_CPUS();
  Result r = run(fitted_tree(), with_env({{"CUDA_VISIBLE_DEVICES", "1"}, {"SLURM_LOCALID", "3"}}));
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["log"].find("rank 3 -> GPU 0000:41:00.0") != std::string::npos);
}

TEST_CASE("process: pre-narrowed affinity is left alone, except by force", "[numa][process]") {
  NEED_TWO_CPUS();
  const CpuSet b{fit().rest.members()[0]};
  Case c = with_env({{"LOCAL_RANK", "1"}});
  c.before = [b] { narrow_to(b); };
  Result r = run(fitted_tree(), c);
  CHECK(r["affinity"] == b.to_list());
  CHECK(r["log"].rfind("info: numa: affinity already narrowed to " + b.to_list(), 0) == 0);
  c.config.mode = NumaMode::Force;
  r = run(fitted_tree(), c);
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["memory"] == "bind 1");
}

TEST_CASE("process: numa_node -1 binds nothing", "[numa][process]") {
  NEED_TWO_CPUS();
  FakeTree tree = fitted_tree();
  tree.file("/sys/bus/pci/devices/0000:41:00.0/numa_node", "-1\n");
  Result r = run(tree, with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["memory"] == "default");
  CHECK(r["log"] ==
        "info: numa: GPU 0000:41:00.0 has no node (numa_node -1) and NVML did not "
        "say; nothing to bind (GPU 0000:41:00.0)");
}

TEST_CASE("process: missing and unreadable files", "[numa][process]") {
  NEED_TWO_CPUS();
  // A GPU without its information file (read here, for the UUID entry;
  // the bus id comes from the directory name) and an unreadable node
  // cpulist (the GPU's local_cpulist stands in): still bound.
  FakeTree tree = fitted_tree();
  tree.remove("/proc/driver/nvidia/gpus/0000:01:00.0/information");
  tree.file("/proc/driver/nvidia/gpus/0000:01:00.0/registry", "x\n");
  tree.unreadable("/sys/devices/system/node/node0/cpulist");
  Result r = run(tree, with_env({{"CUDA_VISIBLE_DEVICES", "GPU-2"}}));
  CHECK(r["affinity"] == fit().a_list());
  tree.unreadable("/proc/driver/nvidia/gpus/0000:41:00.0/information");
  r = run(tree, with_env({{"CUDA_VISIBLE_DEVICES", "GPU-2"}}));  // now nothing has that UUID
  CHECK(r["affinity"] == fit().all.to_list());
  tree.file("/proc/driver/nvidia/gpus/0000:41:00.0/information", FakeTree::information("0000:41:00.0", fake_uuid(2)));
  r = run(tree, with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().a_list());
  // Neither cpu/online nor every node list: cannot tell narrowed, so warn.
  tree.remove("/sys/devices/system/cpu/online");
  r = run(tree, with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["log"].rfind("warn: numa: cannot tell whether the affinity was narrowed", 0) == 0);
  // No driver directory at all.
  FakeTree bare;
  bare.node(0, fit().a.to_list()).node(fit().far, fit().rest.to_list()).online(fit().all.to_list());
  r = run(bare, with_env({}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["log"] == "info: numa: no NVIDIA GPU under /proc/driver/nvidia/gpus; nothing to bind");
}

TEST_CASE("process: malformed cpulists", "[numa][process]") {
  NEED_TWO_CPUS();
  FakeTree tree = fitted_tree();
  tree.node(0, "0-x");
  tree.file("/sys/bus/pci/devices/0000:41:00.0/local_cpulist", ",,\n");
  Result r = run(tree, with_env({{"LOCAL_RANK", "1"}}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["log"].rfind("warn: numa: node 0's CPUs cannot be read", 0) == 0);
}

TEST_CASE("process: one node, as on the H200: the no-op line", "[numa][process]") {
  FakeTree tree;
  tree.node(0, fit().all.to_list()).online(fit().all.to_list());
  tree.gpu("0000:00:06.0", "GPU-ba62939c-0d3e-4a4c-8bd0-6f1e2f3a4b5c", "-1", fit().all.to_list());
  Result r = run(tree, with_env({}));
  CHECK(r["affinity"] == fit().all.to_list());
  CHECK(r["memory"] == "default");
  CHECK(r["log"] == "info: numa: one node; nothing to bind (GPU 0000:00:06.0)");
}

TEST_CASE("process: check_device rebinds every thread once", "[numa][process]") {
  NEED_TWO_CPUS();
  // Nothing bound at start (a MIG id whose parent is unknown), then the
  // first context reports the device: bind now, the helper thread too.
  Case c = with_env({{"CUDA_VISIBLE_DEVICES", "MIG-8a1b2c3d"}});
  c.after = [] {
    std::atomic<pid_t> tid{0};
    std::atomic<bool> done{false};
    std::thread helper([&] {
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!tid) std::this_thread::yield();
    check_device("00000000:41:00.0", NumaConfig{}, sink);
    cpu_set_t mask;
    CPU_ZERO(&mask);
    ::sched_getaffinity(tid, sizeof mask, &mask);
    CpuSet helper_cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) helper_cpus.add(cpu);
    done = true;
    helper.join();
    sink(LogLevel::Info, ("helper thread on " + helper_cpus.to_list()).c_str());
  };
  Result r = run(fitted_tree(), c);
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["log"].find("info: numa: rebound for the device in use: rank 0 -> GPU 0000:41:00.0 -> "
                      "node 0") != std::string::npos);
  CHECK(r["log"].find("helper thread on " + fit().a_list()) != std::string::npos);
  CHECK(r["json"].find("\"action\":\"rebound\"") != std::string::npos);
}

TEST_CASE("process: check_device onto a node the kernel lacks keeps the start binding", "[numa][process]") {
  NEED_TWO_CPUS();
  Case c = with_env({{"LOCAL_RANK", "1"}});
  c.after = [] { check_device("0000:01:00.0", NumaConfig{}, sink); };
  Result r = run(fitted_tree(), c);
  CHECK(r["affinity"] == fit().a_list());
  CHECK(r["memory"] == "preferred 1");
  CHECK(r["log"].find("warn: numa: could not bind memory to node") != std::string::npos);
}
