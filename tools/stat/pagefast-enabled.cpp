// tools/stat/pagefast-enabled.cpp: pagefast-enabled, the helper behind
// pagefast-run --if-enabled. It answers whether PAGEFAST, as set, turns
// pagefast on, through the library's own parser (policy/config.cpp
// parse_config), so that the launcher and the library accept and refuse
// exactly the same spellings (tests/tools/cases.py checks them against each
// other). Only PAGEFAST is looked at: a bad PAGEFAST_CONF is the library's
// to report.
//
//   pagefast-enabled   exit 0: set and on; 1: unset, empty or off;
//                      2: a value the library refuses (the message on stderr)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "policy/config.h"
#include "policy/options.h"

namespace {

const char* only_pagefast(const char* name, void*) {
  return std::strcmp(name, pagefast::option_name(pagefast::Opt::Pagefast)) == 0 ? std::getenv(name) : nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf(
        "usage: pagefast-enabled\n"
        "Exit 0 if PAGEFAST is set to a value that turns pagefast on, 1 if it is unset,\n"
        "empty or off, 2 if libpagefast.so would refuse its value.\n");
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("pagefast-enabled %s\n", PAGEFAST_VERSION);
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: pagefast-enabled (no arguments; see --help)\n");
    return 2;
  }
  const char* value = std::getenv(pagefast::option_name(pagefast::Opt::Pagefast));
  if (!value || !*value) return 1;  // --if-enabled: opt in, unlike the library's default
  const pagefast::Config config = pagefast::parse_config(&only_pagefast, nullptr);
  if (!config.error.empty()) {
    std::fprintf(stderr, "%s\n", config.error.c_str());
    return 2;
  }
  return config.passthrough ? 1 : 0;
}
