// interpose/pool/own_vmm_state.h: the own-VMM glue's process-wide state
// (interpose/pool/own_vmm*.cpp; docs/OWN-VMM.md), a member of the process
// object (process_state.h, docs/DESIGN.md "Process state"). Constant-
// initialised; what it points at is made by configure() and never
// destroyed (hooks run at exit too).
#pragma once

#include <atomic>

namespace pagefast::policy::own_vmm {
class Cache;
}

namespace pagefast::pool::own_vmm {

class SeamDriver;  // own_vmm.cpp: the cache's driver, through the seam

struct State {
  // The cache answers the program's VMM calls (own_vmm.h on()).
  std::atomic<bool> on{false};
  // Something sleeps or has an alias: the program's calls translate
  // (own_vmm.h translating(); own_vmm_translate.cpp).
  std::atomic<bool> translating{false};
  SeamDriver* driver = nullptr;
  policy::own_vmm::Cache* cache = nullptr;
  // Growth ahead's `pagefast-vmm` thread: 0 not started, 1 running, -1
  // could not start (own_vmm.cpp).
  std::atomic<int> worker{0};
};

}  // namespace pagefast::pool::own_vmm
