// interpose/real_driver_table.h: the real driver's table (real_driver.h),
// apart so that the process object (interpose/pool/process_state.h) can
// hold it without the inline lookup that reads the process object.
#pragma once

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

}  // namespace pagefast
