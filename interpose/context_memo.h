// interpose/context_memo.h: a thread's memory of what it last learned about
// its current context (which device, which pool), shared by the pool's hot
// path (interpose/pool/pool.cpp) and the trace recorder (trace.cpp).
//
// cuCtxGetCurrent is a thread-local read in the driver; cuCtxGetDevice is a
// call that may take a lock. So the answer is kept per thread, keyed by the
// context, and re-learned when the context changes and every
// kRevalidateEvery uses. The thread that destroys a context forgets it at
// once (the pool's cuCtxDestroy hook); another thread that still had the
// destroyed context current, when the driver re-creates one at the same
// address, notices within that many calls (docs/POOL.md "Known gaps").
//
// Plain data: it lives in constant-initialised thread-local or per-thread
// records (no constructor may run on the hot path).
#pragma once

#include <cstdint>

#include "interpose/real_driver.h"

namespace pagefast {

constexpr uint32_t kRevalidateEvery = 1024;

template <typename Value>
struct ContextMemo {
  CUcontext context;
  Value value;
  uint32_t uses;

  // The remembered value for `current`, if it may still be trusted; counts
  // the use.
  bool recall(CUcontext current, Value* out) {
    if (current != context || ++uses >= kRevalidateEvery) return false;
    *out = value;
    return true;
  }
  // recall() without the copy: whether `value` may still be trusted for
  // `current`; counts the use.
  bool holds(CUcontext current) { return current == context && ++uses < kRevalidateEvery; }
  void learn(CUcontext current, const Value& v) {
    context = current;
    value = v;
    uses = 0;
  }
  void forget() { context = nullptr; }
};

}  // namespace pagefast
