// interpose/capi.cpp: the small pagefast_* C API that the library exports
// besides the driver entry points (declared in interpose/pagefast.h).
#include <cstring>
#include <string>

#include "interpose/capi_export.h"
#include "interpose/report.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"

PF_EXPORT const char* pagefast_version(void) { return PAGEFAST_VERSION; }

// config(), not passthrough(): asking is not a driver call (runtime.h).
PF_EXPORT int pagefast_is_active(void) { return pagefast::runtime::config().passthrough ? 0 : 1; }

PF_EXPORT size_t pagefast_stats_json(char* buffer, size_t buffer_bytes) {
  std::string text;
  try {
    text = pagefast::stats::document(pagefast::runtime::config(), pagefast::runtime::numa_json());
  } catch (...) {
    return 0;
  }
  if (buffer && buffer_bytes) {
    const size_t n = text.size() < buffer_bytes - 1 ? text.size() : buffer_bytes - 1;
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size() + 1;
}

PF_EXPORT int pagefast_report(const char* path_or_null) {
  // The same text as report:exit; the same file rules as PAGEFAST_STATS.
  return pagefast::report::write(pagefast::runtime::config(),
                                 path_or_null ? std::string(path_or_null) : std::string("stderr"), "pagefast_report")
             ? 0
             : -1;
}
