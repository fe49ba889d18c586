// interpose/real_driver.h: the real CUDA driver, found at run time.
//
// libpagefast.so never links libcuda: the first hook that needs the driver
// opens libcuda.so.1 (normally already loaded by the program) and resolves
// every function below with the real dlsym, by its exact exported name.
// A function the driver lacks stays NULL. pagefast's own calls go through
// the seam (interpose/driver.h), which checks; the doors check the entries
// they forward (interpose/hooks.cpp).
#pragma once

#include <atomic>

#include "interpose/pool/process_state.h"
#include "interpose/real_driver_table.h"

namespace pagefast {

// The loaded driver, or NULL when libcuda.so.1 cannot be opened. Loads on
// first use; thread-safe; never calls a CUDA function. Every forwarded call
// asks it: once loaded, one acquire load inline (of the process object's
// driver part, interpose/driver_state.h).
const RealDriver* real_driver_slow();
inline const RealDriver* loaded_table() { return pool::g_process.driver.loaded.load(std::memory_order_acquire); }
inline const RealDriver* real_driver() {
  const RealDriver* loaded = loaded_table();
  return __builtin_expect(loaded != nullptr, 1) ? loaded : real_driver_slow();
}

// The real dlsym (glibc's), found with dlvsym so that pagefast's own dlsym
// override is never re-entered.
using DlsymFn = void* (*)(void*, const char*);
// Never instrumented by a sanitizer: the dlsym door calls it before a
// preloaded sanitizer runtime is set up (doors.cpp, pf_dlsym_decide).
#define PF_NO_SANITIZE no_sanitize("address", "thread", "undefined")
__attribute__((PF_NO_SANITIZE)) DlsymFn real_dlsym();

}  // namespace pagefast
