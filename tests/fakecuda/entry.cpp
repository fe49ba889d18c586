// tests/fakecuda/entry.cpp: the exported driver functions, generated from the
// list in api_list.h, and cuGetProcAddress (v1 and v2) over a table generated
// from the same list.
//
// Each exported function counts its call, applies FAKECUDA_FAIL and forwards
// to its implementation (impl::<symbol>, or for a per-thread variant the
// legacy row's, run with stream 0 meaning the per-thread default stream). The fake is linked with -Bsymbolic, so the addresses in the
// table below are the fake's own functions even when a preloaded library
// (libpagefast.so) exports the same names: a wrapper that asks the fake's
// cuGetProcAddress for the "real" cuMemAlloc must never get itself back.
#include <cstring>
#include <type_traits>

#include "api_list.h"
#include "counters.h"
#include "state.h"

// --- the exported functions ----------------------------------------------------

#define FAKECUDA_SHELL_L(proc, since, symbol, params, args)              \
  extern "C" CUresult symbol params {                                    \
    if (fake::enter(fake::FN_##symbol)) return CUDA_ERROR_OUT_OF_MEMORY; \
    return impl::symbol args;                                            \
  }
#define FAKECUDA_SHELL_P(proc, since, symbol, sfx, legacy, params, args) \
  extern "C" CUresult symbol params {                                    \
    if (fake::enter(fake::FN_##symbol)) return CUDA_ERROR_OUT_OF_MEMORY; \
    const fake::PerThreadCall per_thread;                                \
    return impl::legacy args;                                            \
  }
FAKECUDA_API(FAKECUDA_SHELL_L, FAKECUDA_SHELL_P)
#undef FAKECUDA_SHELL_L
#undef FAKECUDA_SHELL_P

// The `since` column must name a typedef NVIDIA ships for that variant, with
// the very prototype we export.
#define FAKECUDA_CHECK_L(proc, since, symbol, ...)                               \
  static_assert(std::is_same<decltype(&::symbol), PFN_##proc##_v##since>::value, \
                #symbol " does not match PFN_" #proc "_v" #since);
#define FAKECUDA_CHECK_P(proc, since, symbol, sfx, ...)                                  \
  static_assert(std::is_same<decltype(&::symbol), PFN_##proc##_v##since##_##sfx>::value, \
                #symbol " does not match PFN_" #proc "_v" #since "_" #sfx);
FAKECUDA_API(FAKECUDA_CHECK_L, FAKECUDA_CHECK_P)
#undef FAKECUDA_CHECK_L
#undef FAKECUDA_CHECK_P

namespace fake {
namespace {

struct ProcEntry {
  const char* proc;
  int since;
  bool per_thread;
  void* address;
};

const ProcEntry kProcs[] = {
#define FAKECUDA_PROC_L(proc, since, symbol, ...) \
  {#proc, since, false, reinterpret_cast<void*>(&::symbol)},
#define FAKECUDA_PROC_P(proc, since, symbol, ...) \
  {#proc, since, true, reinterpret_cast<void*>(&::symbol)},
    FAKECUDA_API(FAKECUDA_PROC_L, FAKECUDA_PROC_P)
#undef FAKECUDA_PROC_L
#undef FAKECUDA_PROC_P
};

// The variant the driver hands out: of the rows for `symbol` of the asked
// kind, the one with the highest `since` that `version` reaches.
const ProcEntry* pick(const char* symbol, int version, bool per_thread) {
  const ProcEntry* best = nullptr;
  for (const ProcEntry& entry : kProcs) {
    if (entry.per_thread != per_thread || entry.since > version) continue;
    if (strcmp(entry.proc, symbol) != 0) continue;
    if (!best || entry.since > best->since) best = &entry;
  }
  return best;
}

bool any_row(const char* symbol) {
  for (const ProcEntry& entry : kProcs)
    if (strcmp(entry.proc, symbol) == 0) return true;
  return false;
}

CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~(legacy | per_thread)) != 0 || (flags & legacy && flags & per_thread))
    return CUDA_ERROR_INVALID_VALUE;
  // DEFAULT means legacy here: cuda.h turns it into PER_THREAD on the caller's
  // side when the caller was built for the per-thread default stream.
  const ProcEntry* entry = nullptr;
  if (flags & per_thread) entry = pick(symbol, version, true);
  // Functions without a per-thread variant (and versions before it existed)
  // answer with the legacy one, as the driver does.
  if (!entry) entry = pick(symbol, version, false);
  if (entry) {
    *pfn = entry->address;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status && any_row(symbol)) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace
}  // namespace fake

// cuGetProcAddress and cuGetExportTable work before cuInit, as the real
// ones do: the CUDA runtime resolves cuInit itself through cuGetProcAddress.
CUresult impl::cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                cuuint64_t flags) {
  return fake::get_proc_address(symbol, pfn, cuda_version, flags, nullptr);
}

CUresult impl::cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                   cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return fake::get_proc_address(symbol, pfn, cuda_version, flags, status);
}

// The runtime's private tables are not emulated; it copes with their absence.
CUresult impl::cuGetExportTable(const void** table, const CUuuid* table_id) {
  (void)table_id;
  if (table) *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
