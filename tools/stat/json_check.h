// tools/stat/json_check.h: whether a text is one whole JSON value
// (RFC 8259), so pagefast-stat pastes a segment's NUMA report into its
// --json output only when the result stays a valid document. A segment is
// input from another process: it may hold anything.
#pragma once

#include <string>

namespace pagefast::stat {

// True if text is exactly one JSON value, with optional whitespace around
// it, nested at most max_depth deep. Expects valid UTF-8 (the segment
// reader hands out nothing else).
bool is_json_value(const std::string& text, int max_depth = 64);

}  // namespace pagefast::stat
