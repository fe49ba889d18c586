// tools/stat/json_check.cpp: a strict recursive-descent JSON checker
// (json_check.h); it builds nothing, it only accepts or refuses.
#include "tools/stat/json_check.h"

#include <cstring>

namespace pagefast::stat {
namespace {

struct Checker {
  const std::string& s;
  size_t i = 0;
  int max_depth;

  bool at(char c) const { return i < s.size() && s[i] == c; }
  bool digit() const { return i < s.size() && s[i] >= '0' && s[i] <= '9'; }
  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (s.compare(i, n, w) != 0) return false;
    i += n;
    return true;
  }
  bool hex() {
    if (i >= s.size()) return false;
    const char c = s[i++];
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  bool string() {
    if (!at('"')) return false;
    ++i;
    while (i < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[i++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (i >= s.size()) return false;
      const char e = s[i++];
      if (e == 'u') {
        if (!(hex() && hex() && hex() && hex())) return false;
      } else if (!std::strchr("\"\\/bfnrt", e) || !e) {
        return false;
      }
    }
    return false;
  }
  bool number() {
    if (at('-')) ++i;
    if (at('0')) ++i;
    else if (digit())
      while (digit()) ++i;
    else return false;
    if (at('.')) {
      ++i;
      if (!digit()) return false;
      while (digit()) ++i;
    }
    if (at('e') || at('E')) {
      ++i;
      if (at('+') || at('-')) ++i;
      if (!digit()) return false;
      while (digit()) ++i;
    }
    return true;
  }
  bool value(int depth) {
    if (depth > max_depth) return false;
    space();
    if (i >= s.size()) return false;
    bool ok = false;
    switch (s[i]) {
      case '{': ok = members(depth, '}', true); break;
      case '[': ok = members(depth, ']', false); break;
      case '"': ok = string(); break;
      case 't': ok = word("true"); break;
      case 'f': ok = word("false"); break;
      case 'n': ok = word("null"); break;
      default: ok = number(); break;
    }
    space();
    return ok;
  }
  // An object's members or an array's elements, from the opening bracket.
  bool members(int depth, char close, bool keyed) {
    ++i;
    space();
    if (at(close)) {
      ++i;
      return true;
    }
    for (;;) {
      if (keyed) {
        space();
        if (!string()) return false;
        space();
        if (!at(':')) return false;
        ++i;
      }
      if (!value(depth + 1)) return false;
      if (at(close)) {
        ++i;
        return true;
      }
      if (!at(',')) return false;
      ++i;
    }
  }
};

}  // namespace

bool is_json_value(const std::string& text, int max_depth) {
  Checker c{text, 0, max_depth};
  return c.value(0) && c.i == text.size();
}

}  // namespace pagefast::stat
