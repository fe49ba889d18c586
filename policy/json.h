// policy/json.h: a string as a JSON string literal, the one escaper of the
// stats document, the NUMA report and pagefast-stat.
#pragma once

#include <cstdio>
#include <string>

namespace pagefast {

// Appends "text" to out, quoted, with '"' and '\' escaped and control
// characters as \u00XX.
inline void append_json_string(std::string& out, const std::string& text) {
  out += '"';
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += ch;
    }
  }
  out += '"';
}

}  // namespace pagefast
