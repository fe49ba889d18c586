// numa/cpu_set.h: CpuSet, a set of small non-negative ids (CPU numbers,
// here and there NUMA node numbers), and the kernel's list format for it
// ("0-3,8,10-11", as in cpulist, local_cpulist, cpu/online and
// Cpus_allowed_list). Pure: no system call; bind_apply.cpp converts to and
// from cpu_set_t.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace pagefast::numa {

// The largest id accepted from a file. Above the largest NR_CPUS a kernel
// configuration allows (8192), and small enough that a malformed
// "0-4000000000" cannot make the parser allocate: it is rejected instead.
constexpr int kMaxCpuId = 65535;

class CpuSet {
 public:
  CpuSet() = default;
  CpuSet(std::initializer_list<int> cpus);

  // REQUIRES: 0 <= cpu <= kMaxCpuId (others are ignored).
  void add(int cpu);
  // REQUIRES: first <= last, both within [0, kMaxCpuId].
  void add_range(int first, int last);

  bool contains(int cpu) const;
  bool empty() const;
  int count() const;
  int last() const;  // the highest member, -1 when empty

  CpuSet intersect(const CpuSet& other) const;
  CpuSet unite(const CpuSet& other) const;
  bool subset_of(const CpuSet& other) const;
  bool operator==(const CpuSet& other) const;
  bool operator!=(const CpuSet& other) const { return !(*this == other); }

  std::vector<int> members() const;
  // The kernel's list format with ranges folded: "0-3,8". "" when empty.
  std::string to_list() const;

 private:
  // One bit per id; trailing zero words carry no meaning (operator== and
  // empty() ignore them), so sets built different ways compare equal.
  std::vector<uint64_t> words_;
};

// Parses the kernel's list format. Surrounding whitespace (the trailing
// newline of a sysfs file) is ignored, and an empty text is the empty set:
// memory-only nodes have an empty cpulist. Returns false, leaving *cpus
// untouched, on anything the kernel never writes: letters, "3-1", "1,,2",
// a trailing comma, the "0-7:2/4" stride form, ids above kMaxCpuId.
bool parse_cpulist(const std::string& text, CpuSet* cpus);

}  // namespace pagefast::numa
