// tools/stat/prometheus.h: pagefast-stat --prometheus, the live figures in
// Prometheus's text exposition format (version 0.0.4), for node exporter's
// textfile collector or any scraper (docs/OPERATIONS.md "Metrics").
//
// One metric family per figure, each with its HELP and TYPE lines; bytes
// end in _bytes, counters in _total, times in _seconds. Labels: pid,
// pidns (two containers' pid 1 stay two series), rank (the local rank the
// process was started with, "" if none), host, device for the pool's
// figures, and tag and policy ("keep" or "discard") for a tag's
// (pagefast_tag_*: docs/STATS.md "Tags").
#pragma once

#include <string>
#include <vector>

#include "interpose/live/segment.h"

namespace pagefast::stat {

// The exposition of every readable listing that is not stale. default_host
// labels processes whose segment names no host.
std::string prometheus_text(const std::vector<live::Listing>& listings, const std::string& default_host);

// Writes text to dir/pagefast.prom atomically: a temporary file in dir
// (not ending in .prom, so the collector never reads it half-written),
// mode 0644, then rename. false: *error says why; nothing is left behind.
bool write_textfile(const std::string& dir, const std::string& text, std::string* error);

}  // namespace pagefast::stat
