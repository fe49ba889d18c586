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
//                              PAGEFAST_CONF as set, and whether every
//                              PAGEFAST_* variable is one it reads
//                              (pagefast-run checks before it starts the
//                              program). Exit 0: yes
//                              (a warning the library would print, such as
//                              a bad PAGEFAST_LOG, on stderr); 1: no, with
//                              the library's message on stderr (an unknown
//                              key names the nearest one: policy/suggest.h)
//   pagefast-enabled --check-log  whether PAGEFAST_LOG is a level the
//                              library takes (pagefast-run --log). Exit 0:
//                              yes; 1: no, with the message on stderr
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "policy/config.h"
#include "policy/options.h"
#include "policy/parsers.h"

namespace {

using pagefast::Opt;

const char* only_pagefast(const char* name, void*) {
  return std::strcmp(name, pagefast::option_name(Opt::Pagefast)) == 0 ? std::getenv(name) : nullptr;
}

const char* from_environment(const char* name, void*) { return std::getenv(name); }

int check() {
  const pagefast::Config config = pagefast::parse_config(&from_environment, nullptr, environ);
  // The library's own message: an unknown key names the nearest one. A
  // PAGEFAST_* variable that is no setting is refused here, where the
  // library would only warn (unless PAGEFAST_STRICT=1).
  const std::string& refused = config.error.empty() ? config.unknown : config.error;
  if (refused.empty()) {
    if (!config.warning.empty()) std::fprintf(stderr, "warning: %s\n", config.warning.c_str());
    return 0;
  }
  std::fprintf(stderr, "%s\n", refused.c_str());
  return 1;
}

// --check-log: PAGEFAST_LOG as the library reads it, where the library
// only warns (pagefast-run --log was given: a typo there is refused).
int check_log() {
  const char* given = std::getenv(pagefast::option_name(Opt::Log));
  pagefast::Value v;
  const std::string text = pagefast::trim(given ? given : "");
  if (pagefast::parse_value(Opt::Log, text, &v)) return 0;
  std::fprintf(stderr, "%s\n", pagefast::bad_value_message(Opt::Log, text).c_str());
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
        "1 with its message (and the closest key to an unknown one) if not.\n"
        "--check-log: exit 0 if PAGEFAST_LOG is a level the library takes, 1 with the message if not.\n");
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("pagefast-enabled %s\n", PAGEFAST_VERSION);
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--check")) return check();
  if (argc == 2 && !std::strcmp(argv[1], "--check-log")) return check_log();
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
