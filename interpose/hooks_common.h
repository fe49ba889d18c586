// interpose/hooks_common.h: what the hook files (hooks*.cpp) share: the
// forward to the real driver, the count of a call, and the retry after an
// out-of-memory answer. Internal to the hooks.
#pragma once

#include <cuda.h>

#include "interpose/driver.h"
#include "interpose/entries.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"

namespace pagefast::hook {
namespace {

// The answer when the real driver lacks a function (an older driver).
using driver::kMissing;

#define PF_FORWARD(symbol, args)                 \
  do {                                           \
    const RealDriver* real = real_driver();      \
    if (!real || !real->symbol) return kMissing; \
    return real->symbol args;                    \
  } while (0)

// The same as an expression, for a hook that looks at the driver's answer:
// the real function of table entry `symbol` with the program's arguments,
// or kMissing when the driver lacks it. Needs `real` (real_driver()).
#define PF_CALL_REAL(symbol, args) (real && real->symbol ? real->symbol args : kMissing)

inline bool active(Entry entry) {
  if (runtime::passthrough()) return false;
  stats::count_call(entry);
  return true;
}

// A driver call that can answer CUDA_ERROR_OUT_OF_MEMORY for lack of the
// memory pagefast holds idle: on that answer (and only when pagefast is
// on), every idle byte of the device goes back to the driver and the call
// is made once more (docs/POOL.md "Headroom"). A failed call changed
// nothing, so making it again is safe; one compare on the way out.
// Refused again: the other pagefast processes on the device give theirs
// back (docs/IPC.md "Neighbours"), and it is made once more.
template <typename Call>
__attribute__((noinline)) CUresult retried_after_oom(Call& call) {
  CUresult result = pool::reclaim_for_driver() ? call() : CUDA_ERROR_OUT_OF_MEMORY;
  if (result == CUDA_ERROR_OUT_OF_MEMORY && pool::reclaim_from_neighbours()) result = call();
  return result;
}

template <typename Call>
inline CUresult retried_on_oom(bool on, Call&& call) {
  const CUresult result = call();
  if (__builtin_expect(result != CUDA_ERROR_OUT_OF_MEMORY, 1) || !on) return result;
  return retried_after_oom(call);
}

// The real function of a table entry with that retry.
#define PF_FORWARD_RETRIED(on, symbol, args)                      \
  do {                                                            \
    const RealDriver* real = real_driver();                       \
    if (!real || !real->symbol) return kMissing;                  \
    return retried_on_oom(on, [&] { return real->symbol args; }); \
  } while (0)

}  // namespace
}  // namespace pagefast::hook
