// tests/numa/fake_affinity_ops.h: AffinityOps that keep the "process"
// state in memory and can be told to fail, so the all-or-nothing rules of
// apply_plan and check_device are tested without touching the real
// process. Beside what it replaces, as bind_apply.h's fake.
#pragma once

#include <cerrno>
#include <string>
#include <vector>

#include "numa/bind_apply.h"

namespace pagefast::numa::testing {

class FakeAffinityOps final : public AffinityOps {
 public:
  CpuSet cpus;  // the current affinity
  MemoryPolicy memory = MemoryPolicy::None;
  int memory_node = -1;
  int fail_set_cpus = 0;  // errno to fail set_cpus with
  int fail_set_memory = 0;
  std::vector<std::string> calls;  // "cpus 0-31 all", "memory preferred 1"

  int get_cpus(CpuSet* out) override {
    *out = cpus;
    return 0;
  }
  int set_cpus(const CpuSet& to, bool all_threads) override {
    calls.push_back("cpus " + to.to_list() + (all_threads ? " all" : " one"));
    if (fail_set_cpus) {
      int err = fail_set_cpus;
      fail_set_cpus = 0;  // the restore that follows succeeds
      return err;
    }
    cpus = to;
    return 0;
  }
  int set_memory(MemoryPolicy policy, int node) override {
    calls.push_back(std::string("memory ") + memory_name(policy) + " " + std::to_string(node));
    if (fail_set_memory) return fail_set_memory;
    memory = policy;
    memory_node = node;
    return 0;
  }
};

}  // namespace pagefast::numa::testing
