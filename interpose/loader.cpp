// interpose/loader.cpp: finds the real driver and the real dlsym at run
// time. Never calls a CUDA function: opening libcuda.so.1 is all it does.
#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "compat/glibc_base.h"
#include "interpose/real_driver.h"

namespace pagefast {

const EntryInfo kEntryInfo[kEntryCount] = {
#define PF_INFO(symbol, proc, since, until, ptds, ...) {#symbol, proc, since, until, ptds != 0},
    PAGEFAST_ENTRIES(PF_INFO)
#undef PF_INFO
};

// Read by the dlsym trampoline (interpose/dlsym_trampoline.S) as a plain
// pointer, hence C linkage and a fixed name.
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn pf_real_dlsym_ptr = nullptr;
}

__attribute__((PF_NO_SANITIZE)) DlsymFn real_dlsym() {
  DlsymFn fn = __atomic_load_n(&pf_real_dlsym_ptr, __ATOMIC_ACQUIRE);
  if (fn) return fn;
  // glibc 2.34 moved dlsym from libdl into libc under a new version and
  // kept the old one: the architecture's base version (GLIBC_2.2.5 on
  // x86-64) names the same function in every glibc, in libdl.so.2 before
  // 2.34 and in libc.so.6 after (docs/PACKAGING.md). dlvsym is not
  // overridden, so this cannot recurse. Straight-line calls, no local
  // arrays: preloaded behind AddressSanitizer this runs from its
  // interceptor setup, before its shadow memory exists.
  void* found = nullptr;
#ifdef PF_GLIBC_BASE
  found = dlvsym(RTLD_NEXT, "dlsym", PF_GLIBC_BASE);
#endif
  if (!found) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#ifdef PF_GLIBC_BASE
  if (!found) found = dlvsym(RTLD_DEFAULT, "dlsym", PF_GLIBC_BASE);
#endif
  if (!found) found = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
  fn = reinterpret_cast<DlsymFn>(found);
  __atomic_store_n(&pf_real_dlsym_ptr, fn, __ATOMIC_RELEASE);
  return fn;
}

namespace {

bool load(RealDriver* d) {
  DlsymFn sym = real_dlsym();
  if (!sym) return false;
  // The program has normally loaded the driver already; NOLOAD first keeps
  // pagefast from choosing a different copy than the program did.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (!handle) handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!handle) return false;
  d->handle = handle;
  int i = 0;
#define PF_RESOLVE(symbol, proc, since, until, ptds, pfn, ...) \
  d->symbol = reinterpret_cast<pfn>(sym(handle, #symbol));     \
  d->entry_address[i++] = reinterpret_cast<void*>(d->symbol);
  PAGEFAST_ENTRIES(PF_RESOLVE)
#undef PF_RESOLVE
#define PF_RESOLVE_ONLY(symbol, pfn) d->symbol = reinterpret_cast<pfn>(sym(handle, #symbol));
  PAGEFAST_REAL_ONLY(PF_RESOLVE_ONLY)
#undef PF_RESOLVE_ONLY
  return true;
}

}  // namespace

const RealDriver* real_driver_slow() {
  driver::State& d = pool::g_process.driver;
  const int state = d.load_state.load(std::memory_order_acquire);
  if (state == 1) return &d.table;
  if (state == 2) return nullptr;
  std::lock_guard<std::mutex> lock(d.load_mutex);
  if (d.load_state.load(std::memory_order_relaxed) == 0) {
    const bool loaded = load(&d.table);
    d.load_state.store(loaded ? 1 : 2, std::memory_order_release);
    if (loaded) d.loaded.store(&d.table, std::memory_order_release);
  }
  return d.load_state.load(std::memory_order_relaxed) == 1 ? &d.table : nullptr;
}

}  // namespace pagefast
