// interpose/report.cpp: the memory report's header and its destinations.
// The per-device text is the policy's (policy/pool_report.cpp); the file
// rules are files.h's, as for the stats document.
#include "interpose/report.h"

#include <unistd.h>

#include "interpose/files.h"
#include "interpose/log.h"
#include "interpose/pool_api.h"

namespace pagefast::report {

std::string text(const Config& config) {
  std::string out = "pagefast memory report (pid " + std::to_string(getpid()) +
                    ", version " PAGEFAST_VERSION "): " + describe(config) + "\n";
  const std::string devices = pool::report_text();
  out += devices.empty() ? "no device pool (no pooled allocation yet, or the pool is off)\n" : devices;
  return out;
}

bool write(const Config& config, const std::string& target, const char* variable) {
  try {
    std::string why;
    if (files::write_text(target, text(config), &why)) return true;
    log::write(LogLevel::Warn, "{}: {}; not written", variable, why);
  } catch (...) {
    // host out of memory: nothing written, nothing thrown
  }
  return false;
}

void write_at_exit_if_requested(const Config& config) {
  if (!config.report_at_exit) return;
  write(config, config.report_path.empty() ? std::string("stderr") : config.report_path, "PAGEFAST_REPORT");
}

}  // namespace pagefast::report
