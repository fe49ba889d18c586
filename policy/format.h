// policy/format.h: the one byte formatter of pagefast. Three styles, one
// function, so that a figure reads the same wherever it is shown:
//   Exact  "256M", "40G", "3K", "1000B", "max": configuration values and
//          log lines, exact (the largest binary unit that divides it);
//   Table  "1.50G", "32.0G", "190M": pagefast-stat's fixed-width columns
//          (three significant digits);
//   Report "1.5 GiB", "66.0 MiB": the memory report.
#pragma once

#include <cstdint>
#include <string>

namespace pagefast {

enum class ByteStyle { Exact, Table, Report };

// kUnlimited (max) is "max" in every style.
std::string format_bytes(uint64_t bytes, ByteStyle style);

}  // namespace pagefast
