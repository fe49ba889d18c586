// numa/bind_apply.cpp: apply_plan, and the real AffinityOps over
// sched_setaffinity and set_mempolicy.
#include "numa/bind_apply.h"

#include <dirent.h>
#include <dlfcn.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace pagefast::numa {
namespace {

// Typed from <numa.h> and <numaif.h>; resolved from libnuma.so.1 at run time.
struct LibNuma {
  decltype(&::numa_available) available = nullptr;
  decltype(&::numa_max_node) max_node = nullptr;
  decltype(&::set_mempolicy) set_mempolicy = nullptr;
};

// Loaded on the first memory binding, not at library load: a process that
// binds nothing (one node, numa:off) never maps libnuma. numa_available()
// is checked before anything else, as libnuma asks: it returns -1 on a
// kernel without NUMA support, where every other call would fail noisily.
const LibNuma* libnuma() {
  static LibNuma lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = ::dlopen("libnuma.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    LibNuma found;
    found.available = reinterpret_cast<decltype(found.available)>(::dlsym(handle, "numa_available"));
    found.max_node = reinterpret_cast<decltype(found.max_node)>(::dlsym(handle, "numa_max_node"));
    found.set_mempolicy = reinterpret_cast<decltype(found.set_mempolicy)>(::dlsym(handle, "set_mempolicy"));
    if (found.available && found.max_node && found.set_mempolicy) lib = found;
  });
  return lib.set_mempolicy ? &lib : nullptr;
}

int to_errno(long rc) { return rc == 0 ? 0 : (errno ? errno : EINVAL); }

class SystemAffinityOps final : public AffinityOps {
 public:
  int get_cpus(CpuSet* cpus) override {
    // The kernel refuses a mask shorter than its nr_cpu_ids: grow until it fits.
    for (int ncpus = 1024; ncpus <= kMaxCpuId + 1; ncpus *= 2) {
      cpu_set_t* mask = CPU_ALLOC(ncpus);
      const size_t bytes = CPU_ALLOC_SIZE(ncpus);
      CPU_ZERO_S(bytes, mask);
      if (::sched_getaffinity(0, bytes, mask) == 0) {
        CpuSet out;
        for (int cpu = 0; cpu < ncpus; ++cpu)
          if (CPU_ISSET_S(cpu, bytes, mask)) out.add(cpu);
        CPU_FREE(mask);
        *cpus = out;
        return 0;
      }
      int err = errno;
      CPU_FREE(mask);
      if (err != EINVAL) return err;
    }
    return EINVAL;
  }

  int set_cpus(const CpuSet& cpus, bool all_threads) override {
    const int ncpus = cpus.last() + 1;
    if (ncpus <= 0) return EINVAL;
    cpu_set_t* mask = CPU_ALLOC(ncpus);
    const size_t bytes = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(bytes, mask);
    for (int cpu : cpus.members()) CPU_SET_S(cpu, bytes, mask);
    int err = 0;
    if (!all_threads) {
      if (::sched_setaffinity(0, bytes, mask) != 0) err = errno;
    } else {
      err = for_each_thread([&](pid_t tid) {
        if (::sched_setaffinity(tid, bytes, mask) == 0) return 0;
        return errno == ESRCH ? 0 : errno;  // a thread that just exited
      });
    }
    CPU_FREE(mask);
    return err;
  }

  int set_memory(MemoryPolicy policy, int node) override {
    const int mode = policy == MemoryPolicy::Preferred ? MPOL_PREFERRED
                     : policy == MemoryPolicy::Strict  ? MPOL_BIND
                                                       : MPOL_DEFAULT;
    std::vector<unsigned long> mask;
    const unsigned long bits_per_word = 8 * sizeof(unsigned long);
    if (mode != MPOL_DEFAULT) {
      if (node < 0 || node > kMaxCpuId) return EINVAL;
      mask.assign(static_cast<size_t>(node) / bits_per_word + 1, 0);
      mask[static_cast<size_t>(node) / bits_per_word] |= 1ul << (node % bits_per_word);
    }
    // maxnode counts bits, plus one: the kernel reads one bit fewer than it is told.
    const unsigned long maxnode = mask.size() * bits_per_word + 1;
    errno = 0;
    if (const LibNuma* lib = libnuma()) {
      if (lib->available() < 0) return ENOSYS;
      if (mode != MPOL_DEFAULT && node > lib->max_node()) return EINVAL;  // the kernel lacks it
      return to_errno(lib->set_mempolicy(mode, mask.empty() ? nullptr : mask.data(), mask.empty() ? 0 : maxnode));
    }
    return to_errno(
        ::syscall(SYS_set_mempolicy, mode, mask.empty() ? nullptr : mask.data(), mask.empty() ? 0ul : maxnode));
  }

 private:
  template <typename Fn>
  static int for_each_thread(Fn fn) {
    DIR* dir = ::opendir("/proc/self/task");
    if (!dir) return fn(0);
    int err = 0;
    while (struct dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
      int rc = fn(static_cast<pid_t>(std::atoi(entry->d_name)));
      if (rc && !err) err = rc;
    }
    ::closedir(dir);
    return err;
  }
};

std::string failure(const std::string& what, int err) { return what + " (" + std::strerror(err) + ")"; }

}  // namespace

AffinityOps& system_affinity_ops() {
  static SystemAffinityOps* ops = new SystemAffinityOps;  // never destroyed: used from destructors
  return *ops;
}

ApplyResult apply_plan(const BindPlan& plan, const CpuSet& restore_cpus, bool all_threads, AffinityOps& ops) {
  ApplyResult result;
  if (int err = ops.set_cpus(plan.cpus, all_threads)) {
    ops.set_cpus(restore_cpus, all_threads);  // all_threads may have moved some before failing
    result.error = failure("could not restrict CPUs to " + plan.cpus.to_list(), err);
    return result;
  }
  if (plan.memory != MemoryPolicy::None) {
    if (int err = ops.set_memory(plan.memory, plan.node)) {
      ops.set_cpus(restore_cpus, all_threads);
      result.error = failure("could not bind memory to node " + std::to_string(plan.node), err);
      return result;
    }
  }
  result.ok = true;
  return result;
}

}  // namespace pagefast::numa
