// interpose/report.cpp: the memory report's header and its destinations.
// The per-device text is the policy's (policy/pool_report.cpp); the file
// rules are the stats document's (one writer, stats::write_text).
#include "interpose/report.h"

#include <unistd.h>

#include "interpose/pool_api.h"
#include "interpose/runtime.h"
#include "interpose/stats.h"

namespace pagefast::report {

std::string text() {
  const Config& config = runtime::config();
  std::string out = "pagefast memory report (pid " + std::to_string(getpid()) + ", version " PAGEFAST_VERSION "): " +
                    describe(config) + "\n";
  const std::string devices = pool::report_text();
  out += devices.empty() ? "no device pool (no pooled allocation yet, or the pool is off)\n" : devices;
  return out;
}

bool write(const std::string& target, const char* variable) {
  std::string body;
  try {
    body = text();
  } catch (...) {
    return false;  // host out of memory: nothing written, nothing thrown
  }
  return stats::write_text(target, body, variable);
}

void write_at_exit_if_requested() {
  const Config& config = runtime::config();
  if (!config.report_at_exit) return;
  write(config.report_path.empty() ? std::string("stderr") : config.report_path, "PAGEFAST_REPORT");
}

}  // namespace pagefast::report
