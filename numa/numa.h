// numa/numa.h: NUMA binding at process start, the public face of numa/.
// The library's constructor calls bind_at_start before any CUDA call; the
// interposer calls check_device once the first context exists; the stats
// writer reads last_report().json(); pagefast-run --numa-report prints
// report(). Nothing here calls CUDA, and nothing throws.
//
// What is decided and why: bind_plan.h and docs/NUMA.md. Where it is
// read: PAGEFAST_SYSROOT=<dir> puts every topology path (/proc/driver/
// nvidia, /sys, /proc/self/cgroup) under <dir>, for tests.
#pragma once

#include <string>

#include "policy/config.h"
#include "policy/log_sink.h"

namespace pagefast::numa {

enum class BindAction {
  Bound,      // CPUs (and memory policy) set at start
  Rebound,    // set again for the device actually in use
  Unbound,    // a start binding undone: the device in use has no known node
  Nothing,    // nothing to bind: off, one node, no GPU, node unknown
  LeftAlone,  // someone had already narrowed the affinity
  Failed,     // could not bind; the process was left as it was (warned once)
};

struct BindReport {
  NumaMode mode = NumaMode::Auto;
  BindAction action = BindAction::Nothing;
  std::string who;  // "rank 1", "numa:gpu=2"
  int rank = -1;    // -1 when numa:gpu chose, or the rank was malformed
  std::string gpu;  // bus id "0000:41:00.0"; "" when none was chosen
  int node = -1;
  std::string cpus;    // the CPUs bound to, list format; "" when none
  std::string memory;  // "preferred", "bind" or "none"
  std::string reason;

  // {"mode":"auto","rank":1,"gpu":"0000:41:00.0","node":1,"cpus":"32-63",
  //  "memory":"preferred","action":"bound","reason":"..."}; null for unknowns.
  std::string json() const;
  // The one log line, e.g.
  // "numa: rank 1 -> GPU 0000:41:00.0 -> node 1, cpus 32-63, memory preferred"
  // "numa: one node; nothing to bind (GPU 0000:00:06.0)"
  std::string line() const;
};

// Reads the environment (getenv) and the topology, decides, binds. Logs
// exactly one line through `log` (info, or warn when a binding failed),
// plus debug detail; log may be nullptr. NVML is loaded only on a machine
// with two or more nodes whose sysfs cannot place the GPU, and only when
// PAGEFAST_SYSROOT is unset. REQUIRES: called before CUDA starts threads,
// ideally from the library constructor (the memory policy is per thread
// and inherited by threads created later).
BindReport bind_at_start(const NumaConfig& config, LogSink log);

// REQUIRES: pci_bus_id as cuDeviceGetPCIBusId gives it for the device of
// the first context (any case, 4- or 8-digit domain). The first call
// compares it with the GPU bound for; on a mismatch it logs what it found
// (info) and, in auto mode without numa:gpu, rebinds every thread's CPUs
// once (memory: the calling thread's policy). Later calls do nothing.
void check_device(const char* pci_bus_id, const NumaConfig& config, LogSink log);

// What bind_at_start and check_device did last; action Nothing before them.
BindReport last_report();

// The text of pagefast-run --numa-report: the nodes, each visible GPU with
// its node and CPUs, and what each local rank 0..ranks-1 would get in this
// environment (ranks <= 0: one per visible GPU). Binds nothing.
std::string report(const NumaConfig& config, int ranks);

}  // namespace pagefast::numa
