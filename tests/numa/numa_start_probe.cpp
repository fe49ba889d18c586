// tests/numa/numa_start_probe.cpp: bind_at_start on the real machine (no
// sysroot unless one is set), timed, for the one-node no-op check on the
// H200 and for measuring start cost. Prints the log lines, the JSON, the
// affinity before and after, the cost, and whether CUDA or NVML got loaded.
// usage: numa_start_probe [--skip] [--repeat N]
//   --skip      do all but bind_at_start (the baseline for process start time)
//   --repeat N  call bind_at_start N times and print the fastest (the first
//               call pays the page faults of code never run before)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "numa/bind_apply.h"
#include "numa/numa.h"

namespace {

void sink(pagefast::LogLevel level, const char* message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "pagefast: %s: %s\n", names[static_cast<int>(level)], message);
}

bool mapped(const char* name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool skip = false;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--skip")) skip = true;
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
  }
  using pagefast::numa::CpuSet;
  CpuSet before, after;
  pagefast::numa::system_affinity_ops().get_cpus(&before);
  long first_us = -1, best_us = -1;
  for (int i = 0; !skip && i < (repeat < 1 ? 1 : repeat); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    pagefast::numa::bind_at_start(pagefast::NumaConfig{}, i == 0 ? sink : nullptr);
    auto t1 = std::chrono::steady_clock::now();
    long us = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / 1000;
    if (i == 0) first_us = us;
    if (best_us < 0 || us < best_us) best_us = us;
  }
  pagefast::numa::system_affinity_ops().get_cpus(&after);
  std::printf("json %s\n", pagefast::numa::last_report().json().c_str());
  std::printf("affinity before %s after %s\n", before.to_list().c_str(), after.to_list().c_str());
  std::printf("cost first %ld us, fastest of %d %ld us\n", first_us, repeat, best_us);
  const bool cuda = mapped("libcuda.so") || mapped("libcudart");
  std::printf("libcuda loaded: %s; libnvidia-ml loaded: %s; libnuma loaded: %s\n", cuda ? "yes" : "no",
              mapped("libnvidia-ml") ? "yes" : "no", mapped("libnuma") ? "yes" : "no");
  return cuda ? 1 : 0;
}
