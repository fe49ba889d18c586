// numa/bind_apply.h: carrying out a BindPlan, and undoing it. The system
// calls sit behind AffinityOps so the rollback rules can be tested with
// calls that fail on purpose; SystemAffinityOps is the real thing:
// sched_setaffinity for CPUs, and for memory libnuma's set_mempolicy
// (dlopen'ed: libpagefast.so has no link-time dependency on libnuma) or,
// when libnuma is absent, the raw syscall.
//
// All or nothing: when the memory policy cannot be set (the running kernel
// lacks the node, the cpuset's mems exclude it), the CPU affinity is put
// back as it was, so a failed binding leaves the process untouched.
#pragma once

#include <string>

#include "numa/bind_plan.h"
#include "numa/cpu_set.h"

namespace pagefast::numa {

class AffinityOps {
 public:
  virtual ~AffinityOps() = default;
  // The calling thread's allowed CPUs. 0 or an errno.
  virtual int get_cpus(CpuSet* cpus) = 0;
  // all_threads: every thread of the process (after CUDA started its own);
  // else the calling thread, which at preload time is the only one. 0 or an errno.
  virtual int set_cpus(const CpuSet& cpus, bool all_threads) = 0;
  // The calling thread's memory policy (threads it starts inherit it);
  // None restores the default. 0 or an errno.
  virtual int set_memory(MemoryPolicy policy, int node) = 0;
};

// The process-wide real implementation.
AffinityOps& system_affinity_ops();

struct ApplyResult {
  bool ok = false;
  std::string error;  // one clause for the warning, when !ok
};

// REQUIRES: plan.verdict == Verdict::Bind; restore_cpus is what the
// affinity is now (put back on failure).
ApplyResult apply_plan(const BindPlan& plan, const CpuSet& restore_cpus, bool all_threads, AffinityOps& ops);

}  // namespace pagefast::numa
