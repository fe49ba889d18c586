// interpose/doors.cpp: the three doors through which a program reaches the
// hooks, all derived from the one table in entries.h:
//   1. exported symbols, for programs linked against libcuda;
//   2. dlsym (with dlsym_trampoline.S), for programs that dlopen libcuda;
//   3. cuGetProcAddress, for the CUDA runtime and everything built on it.
#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "interpose/capi_export.h"
#include "interpose/hooks.h"
#include "interpose/real_driver.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"

namespace pagefast {
namespace {

void* const kHookAddress[kEntryCount] = {
#define PF_HOOK_ADDRESS(symbol, ...) reinterpret_cast<void*>(&hook::symbol),
    PAGEFAST_ENTRIES(PF_HOOK_ADDRESS)
#undef PF_HOOK_ADDRESS
};

// Door 1 counts an entry once, at its first call through the symbol: that
// is when the program "took" the exported pointer.
inline void note_symbol(Entry entry) {
  auto& bound = pool::g_process.driver.symbol_bound[int(entry)];
  if (__builtin_expect(!bound.load(std::memory_order_relaxed), 0) && !bound.exchange(true) && !runtime::passthrough())
    stats::count_door(stats::Door::Symbol);
}

int find_symbol(const char* name) {
  for (int i = 0; i < kEntryCount; ++i)
    if (std::strcmp(name, kEntryInfo[i].symbol) == 0) return i;
  return -1;
}

}  // namespace

void* proc_address_replacement(const char* symbol, void* driver_pointer, int cuda_version, cuuint64_t flags) {
  const RealDriver* real = real_driver();
  // The driver's own choice of variant is authoritative: when it handed
  // out exactly a function of the table, replace that one.
  if (real)
    for (int i = 0; i < kEntryCount; ++i)
      if (real->entry_address[i] && driver_pointer == real->entry_address[i]) {
        stats::count_door(stats::Door::ProcAddress);
        return kHookAddress[i];
      }
  // Otherwise (a driver whose table pointers differ from its exports),
  // pick the variant by the same rule the driver uses: name, the version
  // range of each variant, and the per-thread-stream flag.
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (int i = 0; i < kEntryCount; ++i) {
    const EntryInfo& e = kEntryInfo[i];
    if (e.ptds == per_thread && cuda_version >= e.since && cuda_version < e.until && std::strcmp(symbol, e.proc) == 0) {
      stats::count_door(stats::Door::ProcAddress);
      return kHookAddress[i];
    }
  }
  return nullptr;
}

}  // namespace pagefast

using namespace pagefast;

// Door 1: the exported symbols, one per row, with the row's prototype.
#define PF_EXPORTED(symbol, proc, since, until, ptds, pfn, params, args) \
  PF_EXPORT CUresult symbol params {                                     \
    note_symbol(Entry::symbol);                                          \
    return hook::symbol args;                                            \
  }
PAGEFAST_ENTRIES(PF_EXPORTED)
#undef PF_EXPORTED

namespace {
void* const kExportedAddress[kEntryCount] = {
#define PF_EXPORTED_ADDRESS(symbol, ...) reinterpret_cast<void*>(&::symbol),
    PAGEFAST_ENTRIES(PF_EXPORTED_ADDRESS)
#undef PF_EXPORTED_ADDRESS
};
}  // namespace

// Door 2: called by the dlsym trampoline for every dlsym call. Returns the
// replacement for a table name; NULL to let the real dlsym answer with the
// caller's own context (see dlsym_trampoline.S); kAnswerNull to answer NULL.
namespace {
void* const kAnswerNull = reinterpret_cast<void*>(1);

// Whether the program has loaded a driver: pagefast never loads one from
// inside a lookup that, without it, would have found nothing.
bool driver_loaded() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return false;
  dlclose(handle);
  return true;
}
}  // namespace

namespace {
void* decide_driver_name(void* handle, const char* name, DlsymFn real_lookup);
}  // namespace

// The first dlsym calls of a process can come before anything is set up: a
// sanitizer runtime preloaded ahead of pagefast resolves its interceptors
// through dlsym before it has mapped its shadow memory. So this part, which
// every dlsym call runs, is never instrumented and touches nothing but the
// real dlsym's pointer and the name; names outside the table (all of the
// runtime's) go straight to the real dlsym.
extern "C" __attribute__((visibility("hidden"), PF_NO_SANITIZE)) void* pf_dlsym_decide(void* handle, const char* name) {
  DlsymFn real_lookup = real_dlsym();
  if (!real_lookup || !name || name[0] != 'c' || name[1] != 'u') return nullptr;
  return decide_driver_name(handle, name, real_lookup);
}

namespace {
void* decide_driver_name(void* handle, const char* name, DlsymFn real_lookup) {
  // RTLD_NEXT asks for the next definition after the caller: an
  // interposer stacked on pagefast wants exactly that, so never replace.
  if (handle == RTLD_NEXT) return nullptr;
  const int index = find_symbol(name);
  if (index < 0) return nullptr;
  void* found = real_lookup(handle, name);
  if (!found) return nullptr;
  const bool ours = found == kExportedAddress[index];
  if (ours && !driver_loaded()) return kAnswerNull;
  const RealDriver* real = real_driver();
  const bool drivers = real && found == real->entry_address[index];
  if (!ours && !drivers) return nullptr;  // someone else's function of that name
  if (runtime::passthrough()) {
    // Pure pass-through: what the lookup would give without pagefast.
    return ours && real ? real->entry_address[index] : nullptr;
  }
  stats::count_door(stats::Door::Dlsym);
  return kHookAddress[index];
}
}  // namespace

#if !defined(__x86_64__)
extern "C" DlsymFn pf_real_dlsym_ptr;
// Without the trampoline, RTLD_NEXT/RTLD_DEFAULT lookups of other names
// are resolved as if made from libpagefast.so (a documented limit).
PF_EXPORT void* dlsym(void* handle, const char* name) {
  if (void* replacement = pf_dlsym_decide(handle, name)) return replacement == kAnswerNull ? nullptr : replacement;
  return real_dlsym()(handle, name);
}
#endif
