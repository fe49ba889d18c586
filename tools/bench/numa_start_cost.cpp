// tools/bench/numa_start_cost.cpp: numa-start-cost, what the NUMA binding
// at start (bind_at_start, run by libpagefast.so's constructor) costs a
// fresh process. A figure to print, not a test: nothing here passes or
// fails on time (docs/NUMA.md "Measured" quotes it with its command).
//
//   numa-start-cost [--runs N]     (default 20 fresh processes a path)
//
// Paths measured, each in N forked children, bind_at_start timed alone:
//   bound     a fake two-node tree under PAGEFAST_SYSROOT fitted to the
//             CPUs this process may use (node 0 = the first CPU, the GPU of
//             local rank 1 on it): binds CPUs and memory, loads libnuma
//             (needs two allowed CPUs; skipped otherwise)
//   one-node  a fake one-node tree with one GPU, numa_node -1, as on the
//             H200: the no-op line
//   real      this machine's own /proc and /sys, no sysroot
// Prints the fastest and the median of each, in microseconds. The first
// call in a process pays the page faults of code never run before: that is
// what a program's start pays, so each child calls once.
#include <dirent.h>
#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "numa/bind_apply.h"
#include "numa/numa.h"
#include "tests/numa/fake_tree.h"

namespace {

using pagefast::numa::CpuSet;
using pagefast::numa::testing::fake_uuid;
using pagefast::numa::testing::FakeTree;

// A node id the running kernel does not have: the far node of the fitted
// tree, whose CPU binding succeeds and whose memory binding is refused.
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

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// One child: the environment set, bind_at_start timed; its microseconds
// come back through a pipe. -1 when the child failed.
long one_start(const std::string& sysroot, const char* local_rank) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(fds[0]);
    for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                             "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PAGEFAST_SYSROOT"})
      ::unsetenv(name);
    if (!sysroot.empty()) ::setenv("PAGEFAST_SYSROOT", sysroot.c_str(), 1);
    if (local_rank) ::setenv("LOCAL_RANK", local_rank, 1);
    const auto t0 = std::chrono::steady_clock::now();
    pagefast::numa::bind_at_start(pagefast::NumaConfig{}, nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    const long us = long(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 1000);
    (void)!::write(fds[1], &us, sizeof us);
    ::_exit(0);
  }
  ::close(fds[1]);
  long us = -1;
  if (::read(fds[0], &us, sizeof us) != ssize_t(sizeof us)) us = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? us : -1;
}

void measure(const char* name, const FakeTree* tree, const char* local_rank, int runs) {
  const std::string root = tree ? tree->write_to_temp_dir() : std::string();
  std::vector<long> us;
  for (int i = 0; i < runs; ++i) {
    const long u = one_start(root, local_rank);
    if (u >= 0) us.push_back(u);
  }
  if (!root.empty()) ::nftw(root.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (us.empty()) {
    std::printf("%-9s no child gave a figure\n", name);
    return;
  }
  std::sort(us.begin(), us.end());
  std::printf("%-9s fastest %6ld us   median %6ld us   (%zu fresh processes)\n", name, us.front(), us[us.size() / 2],
              us.size());
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf(
          "usage: numa-start-cost [--runs N]\n"
          "The cost of pagefast's NUMA binding at start, in fresh processes: bound on a\n"
          "fake two-node tree, the one-node no-op, and this machine's own sysfs.\n");
      return 0;
    } else {
      std::fprintf(stderr, "usage: numa-start-cost [--runs N]\n");
      return 2;
    }
  }
  if (runs < 1) runs = 1;
  CpuSet all;
  pagefast::numa::system_affinity_ops().get_cpus(&all);
  const std::vector<int> cpus = all.members();
  std::printf("numa-start-cost: bind_at_start in fresh processes, CPUs allowed %s\n", all.to_list().c_str());
  if (cpus.size() >= 2) {
    CpuSet a, rest;
    a.add(cpus[0]);
    for (size_t i = 1; i < cpus.size(); ++i) rest.add(cpus[i]);
    const int far = missing_node();
    FakeTree bound;
    bound.node(0, a.to_list()).node(far, rest.to_list()).online(all.to_list());
    bound.gpu("0000:01:00.0", fake_uuid(1), std::to_string(far), rest.to_list());
    bound.gpu("0000:41:00.0", fake_uuid(2), "0", a.to_list());
    measure("bound", &bound, "1", runs);
  } else {
    std::printf("bound     skipped: needs two allowed CPUs\n");
  }
  FakeTree one;
  one.node(0, all.to_list()).online(all.to_list());
  one.gpu("0000:00:06.0", fake_uuid(3), "-1", all.to_list());
  measure("one-node", &one, nullptr, runs);
  measure("real", nullptr, nullptr, runs);
  return 0;
}
