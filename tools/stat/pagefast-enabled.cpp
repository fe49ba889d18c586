// tools/stat/pagefast-enabled.cpp: pagefast-enabled, the helper behind
// pagefast-run's reading of pagefast's variables, through the library's own
// parser (policy/config.cpp parse_config) and the one options table
// (policy/options.cpp), so that the launcher and the library accept and
// refuse exactly the same settings (tests/tools/cases.py checks them
// against each other).
//
//   pagefast-enabled           whether PAGEFAST turns pagefast on (for
//                              pagefast-run --if-enabled). Exit 0: set and
//                              on; 1: unset, empty or off; 2: a value the
//                              library refuses (the message on stderr)
//   pagefast-enabled --check   whether the library would take PAGEFAST and
//                              PAGEFAST_CONF as set (pagefast-run checks
//                              before it starts the program). Exit 0: yes
//                              (a warning the library would print, such as
//                              a bad PAGEFAST_LOG, on stderr); 1: no, with
//                              the library's message on stderr, an unknown
//                              key naming the closest one
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "policy/config.h"
#include "policy/options.h"
#include "policy/parsers.h"

namespace {

using pagefast::Opt;

const char* only_pagefast(const char* name, void*) {
  return std::strcmp(name, pagefast::option_name(Opt::Pagefast)) == 0 ? std::getenv(name) : nullptr;
}

const char* from_environment(const char* name, void*) { return std::getenv(name); }

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Edits (insert, delete, replace, swap two neighbours) from a to b.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The PAGEFAST_CONF key nearest to `key` (case aside), when it is near
// enough to be what was meant; "" otherwise.
std::string closest_key(const std::string& key) {
  int count = 0;
  const pagefast::OptionRow* rows = pagefast::option_rows(&count);
  std::string best;
  size_t best_distance = ~size_t(0);
  for (int i = 0; i < count; ++i) {
    if (rows[i].scope != pagefast::Scope::ConfKey) continue;
    const size_t d = distance(lower(key), rows[i].name);
    if (d < best_distance) {
      best_distance = d;
      best = rows[i].name;
    }
  }
  const size_t near = std::max<size_t>(2, key.size() / 3);
  return best_distance <= near ? best : std::string();
}

// The first key of PAGEFAST_CONF that the table lacks, split as the
// library splits it (policy/config.cpp parse_conf); "" when every key is
// known.
std::string first_unknown_key(const std::string& text) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = pagefast::trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    const std::string key = pagefast::trim(item.substr(0, item.find(':')));
    if (!pagefast::find_conf_key(key)) return key;
  }
  return "";
}

int check() {
  const pagefast::Config config = pagefast::parse_config(&from_environment, nullptr);
  if (!config.warning.empty()) std::fprintf(stderr, "warning: %s\n", config.warning.c_str());
  if (config.error.empty()) return 0;
  const std::string unknown = first_unknown_key(config.conf_text);
  const std::string near = unknown.empty() ? std::string() : closest_key(unknown);
  if (!near.empty() && config.error.find("unknown key") != std::string::npos)
    std::fprintf(stderr, "%s: unknown key '%s': did you mean %s? (pagefast-run --help lists the keys)\n",
                 pagefast::option_name(Opt::Conf), unknown.c_str(), near.c_str());
  else std::fprintf(stderr, "%s\n", config.error.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf(
        "usage: pagefast-enabled [--check]\n"
        "Exit 0 if PAGEFAST is set to a value that turns pagefast on, 1 if it is unset,\n"
        "empty or off, 2 if libpagefast.so would refuse its value.\n"
        "--check: exit 0 if libpagefast.so would take PAGEFAST and PAGEFAST_CONF as set,\n"
        "1 with its message (and the closest key to an unknown one) if not.\n");
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("pagefast-enabled %s\n", PAGEFAST_VERSION);
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--check")) return check();
  if (argc != 1) {
    std::fprintf(stderr, "usage: pagefast-enabled [--check] (see --help)\n");
    return 2;
  }
  const char* value = std::getenv(pagefast::option_name(Opt::Pagefast));
  if (!value || !*value) return 1;  // --if-enabled: opt in, unlike the library's default
  const pagefast::Config config = pagefast::parse_config(&only_pagefast, nullptr);
  if (!config.error.empty()) {
    std::fprintf(stderr, "%s\n", config.error.c_str());
    return 2;
  }
  return config.passthrough ? 1 : 0;
}
