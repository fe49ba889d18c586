// interpose/trace.h: the allocation trace recorder (PAGEFAST_TRACE,
// docs/TRACE.md). Every cuMemAlloc_v2 and cuMemFree_v2 that reaches the
// hooks, pooled or forwarded, successful or not, becomes one 32-byte
// record (interpose/trace_format.h).
//
// Cost when PAGEFAST_TRACE is unset: the hooks test on() (one relaxed
// load and a branch) and nothing else. When set: a vDSO clock read, for an
// allocation cuCtxGetCurrent (a thread-local read in the driver), and a push
// into the calling thread's own ring; no lock, no system call, no allocation
// except the ring itself on a thread's first traced call. One writer thread,
// started at the first traced call, drains the rings to the file.
//
// REQUIRES: configure() is called once, from runtime::init_slow, before
// any hook can see on() true; flush_at_exit() from the library destructor.
#pragma once

#include <cuda.h>

#include <atomic>
#include <string>

#include "interpose/pool/process.h"

namespace pagefast::trace {

// True while calls are being recorded (trace_state.h State::on).
inline bool on() { return pool::g_process.trace.on.load(std::memory_order_relaxed); }

// Called once at init with PAGEFAST_TRACE (empty: tracing stays off).
// Opens nothing and starts nothing: that waits for the first traced call.
void configure(const std::string& path);

// The hooks' untraced bodies, called through these when on().
using AllocFn = CUresult (*)(CUdeviceptr* dptr, size_t bytes);
using FreeFn = CUresult (*)(CUdeviceptr dptr);
CUresult traced_alloc(AllocFn real_alloc, CUdeviceptr* dptr, size_t bytes);
CUresult traced_free(FreeFn real_free, CUdeviceptr dptr);

// At process exit: stop recording, stop the writer, drain every ring into
// the file and close it. Plain file I/O only: never calls CUDA.
void flush_at_exit();
// The process's fork handler, in the child (interpose/runtime.cpp): a
// traced process's child records nothing.
void after_fork_child();

}  // namespace pagefast::trace
