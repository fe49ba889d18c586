// tests/fakecuda/counters.h: per-function call counters and FAKECUDA_FAIL,
// both indexed by the enum derived from the one list in api_list.h.
//
// Two counts per function: the resettable one that fakecuda_call_count()
// and the FAKECUDA_COUNTS file report, and a never-reset total that
// FAKECUDA_FAIL's "Nth call" refers to, so resetting counts in a test does
// not move a planned failure.
#pragma once

#include "api_list.h"

namespace fake {

enum Fn : int {
#define FAKECUDA_ENUM_ROW(proc, since, symbol, ...) FN_##symbol,
  FAKECUDA_API(FAKECUDA_ENUM_ROW, FAKECUDA_ENUM_ROW)
#undef FAKECUDA_ENUM_ROW
      FN_COUNT
};

// Exported names, indexed by Fn.
extern const char* const kFnNames[FN_COUNT];

// Index of an exported name, or -1.
int fn_index(const char* name);

// Counts one call of `fn`. True if the failure plan says this call fails:
// the caller then returns CUDA_ERROR_OUT_OF_MEMORY without doing anything.
bool enter(Fn fn);

// Installs FAKECUDA_FAIL (Nth call since the process started). Once, at cuInit.
void install_fail_plan_from_env();

}  // namespace fake
