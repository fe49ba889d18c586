// interpose/capi.cpp: every function of the C API (interpose/pagefast.h:
// pagefast_*, and torch_memory_saver's tms_pause and tms_resume) that the
// library exports besides the driver's entry points (doors.cpp), in one
// place: each forwards to the part that
// answers it, the pool's through interpose/pool_api.h.
#include <cstring>
#include <string>

#include "interpose/capi_export.h"
#include "interpose/pagefast.h"
#include "interpose/pool_api.h"
#include "interpose/report.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"
#include "policy/sleep_gate.h"

static_assert(PAGEFAST_SLEEP_KEEP == pagefast::policy::kSleepKeep, "sleep flags out of step");
static_assert(PAGEFAST_SLEEP_FAIL == pagefast::policy::kSleepFail, "sleep flags out of step");
static_assert((PAGEFAST_SLEEP_DISCARD & (PAGEFAST_SLEEP_KEEP | PAGEFAST_SLEEP_FAIL)) == 0, "sleep flags overlap");
static_assert(PAGEFAST_REGION_KEEP == pagefast::policy::kSleepKeep, "region flags out of step");

// ---- the library ----

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

// ---- the pool (interpose/pool/pool_capi.cpp) ----

PF_EXPORT int pagefast_pool_stats_get(int device, pagefast_pool_stats* out) {
  return pagefast::pool::pool_stats_get(device, out);
}
PF_EXPORT int pagefast_pool_trim(int device) { return pagefast::pool::pool_trim(device); }

// ---- sleep and wake (interpose/pool/sleep.cpp) ----

PF_EXPORT int pagefast_sleep(unsigned flags) { return pagefast::pool::sleep_all(flags); }
PF_EXPORT int pagefast_wake(void) { return pagefast::pool::wake_all(); }
PF_EXPORT int pagefast_asleep(void) { return pagefast::pool::asleep_count(); }

// ---- regions and tags (interpose/pool/tags.cpp, sleep.cpp) ----

PF_EXPORT int pagefast_region_begin(const char* tag, unsigned flags) {
  return pagefast::pool::region_begin(tag, flags);
}
PF_EXPORT int pagefast_region_end(void) { return pagefast::pool::region_end(); }
PF_EXPORT const char* pagefast_region_current(void) { return pagefast::pool::region_current(); }
PF_EXPORT int pagefast_sleep_tag(const char* tag, unsigned flags) { return pagefast::pool::sleep_tag(tag, flags); }
PF_EXPORT int pagefast_wake_tag(const char* tag) { return pagefast::pool::wake_tag(tag); }
PF_EXPORT int pagefast_tag_asleep(const char* tag) { return pagefast::pool::tag_asleep(tag); }
PF_EXPORT int pagefast_kept_read(const void* device_ptr, size_t bytes, void* out) {
  return pagefast::pool::kept_read(device_ptr, bytes, out);
}
PF_EXPORT int pagefast_keep_disk_dir(const char* dir, size_t chunk_bytes) {
  return pagefast::pool::keep_disk_dir(dir, chunk_bytes);
}

// ---- torch_memory_saver's names (interpose/pool/tms_capi.cpp) ----

PF_EXPORT int tms_pause(const char* tag) { return pagefast::pool::tms_pause(tag); }
PF_EXPORT int tms_resume(const char* tag) { return pagefast::pool::tms_resume(tag); }
