// interpose/hooks.h: pagefast's replacement for each entry of the table,
// one function per row with the row's exact prototype. The doors hand out
// these (doors.cpp); hooks.cpp and hooks_*.cpp define them.
#pragma once

#include <type_traits>

#include "interpose/entries.h"

namespace pagefast::hook {

#define PF_HOOK_DECL(symbol, proc, since, until, ptds, pfn, params, args) CUresult symbol params;
PAGEFAST_ENTRIES(PF_HOOK_DECL)
#undef PF_HOOK_DECL

// Each hook has the prototype its row names: a wrong parameter list in the
// table fails to compile here rather than corrupting a call at run time.
#define PF_HOOK_CHECK(symbol, proc, since, until, ptds, pfn, ...) \
  static_assert(std::is_same<decltype(&symbol), pfn>::value, #symbol " does not match " #pfn);
PAGEFAST_ENTRIES(PF_HOOK_CHECK)
#undef PF_HOOK_CHECK

}  // namespace pagefast::hook

namespace pagefast {

// What the driver's cuGetProcAddress returned for (symbol, version, flags),
// or NULL when it is not an entry of the table.
void* proc_address_replacement(const char* symbol, void* driver_pointer, int cuda_version, cuuint64_t flags);

}  // namespace pagefast
