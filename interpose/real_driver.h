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

#include "interpose/entries.h"

namespace pagefast {

struct RealDriver {
#define PF_REAL_FIELD(symbol, proc, since, until, ptds, pfn, ...) pfn symbol;
  PAGEFAST_ENTRIES(PF_REAL_FIELD)
#undef PF_REAL_FIELD
#define PF_REAL_ONLY_FIELD(symbol, pfn) pfn symbol;
  PAGEFAST_REAL_ONLY(PF_REAL_ONLY_FIELD)
#undef PF_REAL_ONLY_FIELD
  void* handle;
  // The real address of each replaced entry, indexed by Entry, to recognise
  // what the driver's own cuGetProcAddress hands out.
  void* entry_address[kEntryCount];
};

// The loaded driver, or NULL when libcuda.so.1 cannot be opened. Loads on
// first use; thread-safe; never calls a CUDA function. Every forwarded call
// asks it: once loaded, one acquire load inline.
extern std::atomic<const RealDriver*> g_loaded_driver;  // set once loaded (loader.cpp)
const RealDriver* real_driver_slow();
inline const RealDriver* real_driver() {
  const RealDriver* loaded = g_loaded_driver.load(std::memory_order_acquire);
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
