// policy/parsers.h: the value parsers behind every option (policy/options.h):
// one on/off parser, one enum parser, one size parser, one count parser and
// the time parser. Each says yes or no; the message for a no is the
// option table's (bad_value_message), so every reader words it alike.
// Pure C++, no CUDA.
#pragma once

#include <cstdint>
#include <string>

namespace pagefast {

// A size's bounds, for parse_size.
struct SizeRule {
  uint64_t min = 0;  // the least size but zero
  uint64_t max = UINT64_MAX;
  uint64_t multiple = 1;
  bool zero_ok = true;    // 0 passes whatever min says (limit:0 means none)
  bool max_word = false;  // "max" and "unlimited" give UINT64_MAX
};

// One word that parse_choice takes. With digits > 0 the word is a prefix
// ("gpu=") followed by 1..digits decimal digits, returned in *arg.
struct Choice {
  const char* word;
  int value;
  int digits = 0;
};

// Parses "123", "64K", "2M", "1G", "1T" (binary units, optional "B"/"iB").
bool parse_bytes(const std::string& text, uint64_t* bytes);

// parse_bytes, then `rule`.
bool parse_size(const std::string& text, const SizeRule& rule, uint64_t* bytes);

// Parses "5s", "500ms", "250us", "2m", "0"; a number without a unit (but
// 0) is refused. "off" or "never" give ~0.
bool parse_delay(const std::string& text, uint64_t* ns);

// The Choice of `choices` that `text` names (any case with fold_case):
// its value in *value, its number in *arg (-1 for a plain word).
bool parse_choice(const std::string& text, const Choice* choices, int count, bool fold_case, int* value, int* arg);

// on, 1, true / off, 0, false (as written: lower case).
bool parse_on_off(const std::string& text, bool* on);

// Only decimal digits, at most as many as `max` has, and not above it
// (so "032" is refused for a max of 32, as a two-digit field).
bool parse_count(const std::string& text, uint64_t max, uint64_t* n);

// `s` without leading and trailing blanks and tabs.
std::string trim(const std::string& s);

}  // namespace pagefast
