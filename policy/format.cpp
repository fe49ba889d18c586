// policy/format.cpp: see format.h.
#include "policy/format.h"

#include <cstdio>

#include "policy/config.h"

namespace pagefast {

std::string format_bytes(uint64_t bytes, ByteStyle style) {
  if (bytes == kUnlimited) return "max";
  char buf[32];
  switch (style) {
    case ByteStyle::Exact: {
      static const char* const units[] = {"B", "K", "M", "G", "T"};
      int u = 0;
      while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++u;
      std::snprintf(buf, sizeof buf, "%llu%s", (unsigned long long)bytes, units[u]);
      break;
    }
    case ByteStyle::Table: {
      static const char* const units[] = {"B", "K", "M", "G", "T"};
      double v = double(bytes);
      int u = 0;
      while (v >= 1024 && u < 4) v /= 1024, ++u;
      if (u == 0) std::snprintf(buf, sizeof buf, "%lluB", (unsigned long long)bytes);
      else std::snprintf(buf, sizeof buf, v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s", v, units[u]);
      break;
    }
    case ByteStyle::Report:
      if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(kGiB));
      else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(kMiB));
      break;
  }
  return buf;
}

}  // namespace pagefast
