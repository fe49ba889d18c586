// interpose/report.h: the human-readable memory report (PAGEFAST_CONF
// report:exit, PAGEFAST_REPORT, pagefast_report(); docs/STATS.md "Memory
// report"): a header line, then one block per device pool.
#pragma once

#include <string>

#include "policy/config.h"

namespace pagefast::report {

// The whole report. Try-locks and counters only, no CUDA: safe at exit.
std::string text(const Config& config);

// Writes text() to `target` ("stderr" or a path, expanded as files.h says)
// under the file rules of files::write_text; a refusal is one warning
// naming `variable`. true: written.
bool write(const Config& config, const std::string& target, const char* variable);

// At exit, with report:exit: to PAGEFAST_REPORT, or stderr when unset.
void write_at_exit_if_requested(const Config& config);

}  // namespace pagefast::report
