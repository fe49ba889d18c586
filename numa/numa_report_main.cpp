// numa/numa_report_main.cpp: pagefast-numa-report, the program behind
// pagefast-run --numa-report. Prints, for each visible GPU, its node and
// CPUs and what each local rank would get; runs nothing, binds nothing.
// Reads PAGEFAST_CONF (numa:...) as the library would.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "numa/numa.h"
#include "policy/config.h"

namespace {

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

int usage(FILE* out) {
  std::fprintf(out,
               "usage: pagefast-numa-report [--ranks N]\n"
               "  Prints each visible GPU's NUMA node and CPUs, and the binding each local\n"
               "  rank 0..N-1 would get (default: one rank per visible GPU).\n"
               "  Honours CUDA_VISIBLE_DEVICES, PAGEFAST_CONF numa:..., PAGEFAST_SYSROOT.\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(stdout);
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) {
      char* end = nullptr;
      long n = std::strtol(argv[++i], &end, 10);
      if (!end || *end || n <= 0 || n > 4096) return usage(stderr);
      ranks = static_cast<int>(n);
      continue;
    }
    return usage(stderr);
  }
  pagefast::Config config = pagefast::parse_config(env_lookup, nullptr);
  if (!config.error.empty())
    std::fprintf(stderr, "pagefast-numa-report: %s (using numa defaults)\n", config.error.c_str());
  const pagefast::NumaConfig numa = config.error.empty() ? config.numa : pagefast::NumaConfig{};
  std::fputs(pagefast::numa::report(numa, ranks).c_str(), stdout);
  return 0;
}
