// policy/parsers.cpp: the value parsers (parsers.h).
#include "policy/parsers.h"

namespace pagefast {
namespace {

bool all_digits(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

char lower(char c) { return char(c >= 'A' && c <= 'Z' ? c + 32 : c); }

bool same_word(const std::string& text, size_t length, const char* word, bool fold_case) {
  size_t i = 0;
  for (; i < length && word[i]; ++i)
    if ((fold_case ? lower(text[i]) : text[i]) != word[i]) return false;
  return i == length && !word[i];
}

}  // namespace

bool parse_bytes(const std::string& text, uint64_t* bytes) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t i = 0;
  uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return false;
    n = n * 10 + d;
  }
  std::string unit = text.substr(i);
  for (char& ch : unit) ch = char(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
  uint64_t mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1024 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1024 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1024ull * 1024 * 1024 * 1024;
  else return false;
  if (mul != 1 && n > UINT64_MAX / mul) return false;
  *bytes = n * mul;
  return true;
}

bool parse_size(const std::string& text, const SizeRule& rule, uint64_t* bytes) {
  if (rule.max_word && (text == "max" || text == "unlimited")) {
    *bytes = UINT64_MAX;
    return true;
  }
  uint64_t b = 0;
  if (!parse_bytes(text, &b)) return false;
  if (b == 0 && !rule.zero_ok) return false;
  if (b != 0 && (b < rule.min || b > rule.max || b % rule.multiple != 0)) return false;
  *bytes = b;
  return true;
}

bool parse_delay(const std::string& text, uint64_t* ns) {
  if (text == "off" || text == "never") {
    *ns = ~uint64_t(0);
    return true;
  }
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t i = 0;
  uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (n > 1000000000ull) return false;  // over 30 years in any unit
    n = n * 10 + uint64_t(text[i] - '0');
  }
  const std::string unit = text.substr(i);
  uint64_t mul;
  // A number without a unit is refused (0 aside): "slack:5" could mean 5
  // ms as well as 5 s, and the two differ 1000 times.
  if (unit.empty() && n == 0) mul = 0;
  else if (unit == "s") mul = 1000ull * 1000 * 1000;
  else if (unit == "ms") mul = 1000ull * 1000;
  else if (unit == "us") mul = 1000ull;
  else if (unit == "m" || unit == "min") mul = 60ull * 1000 * 1000 * 1000;
  else return false;
  *ns = n * mul;
  return true;
}

bool parse_choice(const std::string& text, const Choice* choices, int count, bool fold_case, int* value, int* arg) {
  for (int i = 0; i < count; ++i) {
    const Choice& c = choices[i];
    if (c.digits == 0) {
      if (!same_word(text, text.size(), c.word, fold_case)) continue;
      *value = c.value;
      *arg = -1;
      return true;
    }
    const size_t prefix = std::char_traits<char>::length(c.word);
    if (text.size() <= prefix || !same_word(text, prefix, c.word, fold_case)) continue;
    const std::string number = text.substr(prefix);
    if (number.size() > size_t(c.digits) || !all_digits(number)) return false;
    *value = c.value;
    *arg = 0;
    for (char d : number) *arg = *arg * 10 + (d - '0');
    return true;
  }
  return false;
}

bool parse_on_off(const std::string& text, bool* on) {
  static constexpr Choice kWords[] = {{"on", 1}, {"1", 1}, {"true", 1}, {"off", 0}, {"0", 0}, {"false", 0}};
  int value = 0, arg = -1;
  if (!parse_choice(text, kWords, int(sizeof kWords / sizeof kWords[0]), false, &value, &arg)) return false;
  *on = value != 0;
  return true;
}

bool parse_count(const std::string& text, uint64_t max, uint64_t* n) {
  size_t digits = 1;
  for (uint64_t m = max; m >= 10; m /= 10) ++digits;
  if (text.size() > digits || !all_digits(text)) return false;
  uint64_t v = 0;
  for (char d : text) v = v * 10 + uint64_t(d - '0');
  if (v > max) return false;
  *n = v;
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace pagefast
