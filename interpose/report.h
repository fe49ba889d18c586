// interpose/report.h: the human-readable memory report (PAGEFAST_CONF
// report:exit, PAGEFAST_REPORT, pagefast_report(); docs/STATS.md "Memory
// report"): a header line, then one block per device pool.
#pragma once

#include <string>

namespace pagefast::report {

// The whole report. Try-locks and counters only, no CUDA: safe at exit.
std::string text();

// Writes text() to `target` ("stderr" or a path, %p = pid) with the stats
// document's safe file rules (stats::write_text). true: written.
bool write(const std::string& target, const char* variable);

// From the library's destructor: with report:exit, to PAGEFAST_REPORT, or
// stderr when that is unset.
void write_at_exit_if_requested();

}  // namespace pagefast::report
