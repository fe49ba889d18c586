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

// active()'s slow half: pass-through, or the first counted call of a thread.
__attribute__((noinline, cold)) bool active_slow(Entry entry);

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

// Whether pagefast is on for this call (not pass-through); counts it. The
// steady state is count_call_fast alone: one thread-local load, a test and
// the add (the block's existence implies an initialised runtime and no
// pass-through); the first call of a thread, pass-through and stats:off
// take active_slow (hooks.cpp).
inline bool active(Entry entry) {
  if (__builtin_expect(stats::count_call_fast(entry), 1)) return true;
  return active_slow(entry);
}

// A hook's fast path that calls nothing itself (it ends in a tail call):
// the loaded driver, with the call counted, when pagefast is on and the
// thread counts its calls (count_call_fast); NULL, with the call not
// counted, otherwise: the hook then ends in a tail call of its slow twin,
// which takes active() and real_driver() (PF_COUNTED_HOOK).
inline const RealDriver* counted_driver(Entry entry) {
  const RealDriver* real = loaded_table();
  return __builtin_expect(real != nullptr, 1) && stats::count_call_fast(entry) ? real : nullptr;
}

// A hook whose work while pagefast is on is counted(real->symbol, args...):
// a function that makes the driver's call itself, and whatever pagefast
// does around it; pass-through forwards the call unchanged. The hook's
// fast path does nothing but count the call and end in `counted` (a tail
// call, or inline); its slow twin (symbol_slow) takes the first call of a
// thread, pass-through and a driver not loaded yet. At namespace scope.
#define PF_UNPAREN(...) __VA_ARGS__
#define PF_COUNTED_HOOK(symbol, params, args, counted)         \
  namespace {                                                  \
  __attribute__((noinline)) CUresult symbol##_slow params {    \
    const bool on = active(Entry::symbol);                     \
    const RealDriver* real = real_driver();                    \
    if (!real || !real->symbol) return kMissing;               \
    if (!on) return real->symbol args;                         \
    return counted(real->symbol, PF_UNPAREN args);             \
  }                                                            \
  }                                                            \
  CUresult symbol params {                                     \
    const RealDriver* real = counted_driver(Entry::symbol);    \
    if (__builtin_expect(!real, 0)) return symbol##_slow args; \
    if (!real->symbol) return kMissing;                        \
    return counted(real->symbol, PF_UNPAREN args);             \
  }

// A driver call that can answer CUDA_ERROR_OUT_OF_MEMORY for lack of the
// memory pagefast holds idle: on that answer (and only when pagefast is
// on), every idle byte of the device goes back to the driver and the call
// is made once more (docs/POOL.md "Headroom"). A failed call changed
// nothing, so making it again is safe; one compare on the way out. Only
// the program's arguments live across the first call (the driver is
// looked up again for the second), so the forward keeps a small frame.
// Refused again: the other pagefast processes on the device give theirs
// back (docs/IPC.md "Neighbours"), and it is made once more.
#define PF_FORWARD_RETRIED(on, symbol, args)                                                                     \
  do {                                                                                                           \
    const RealDriver* real = real_driver();                                                                      \
    if (!real || !real->symbol) return kMissing;                                                                 \
    const CUresult first = real->symbol args;                                                                    \
    if (__builtin_expect(first != CUDA_ERROR_OUT_OF_MEMORY, 1) || !(on)) return first;                           \
    return pool::retried_out_of_memory(pool::kCurrentDevice, first, [&] { return real_driver()->symbol args; }); \
  } while (0)

}  // namespace
}  // namespace pagefast::hook
