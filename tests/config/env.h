// tests/config/env.h: a map standing in for the environment, for the tests
// of the configuration parser and the options table.
#pragma once

#include <map>
#include <string>

#include "policy/config.h"

namespace pagefast::test {

struct Env {
  std::map<std::string, std::string> vars;
  static const char* lookup(const char* name, void* user) {
    auto& vars = static_cast<Env*>(user)->vars;
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
  Config parse() { return parse_config(&Env::lookup, this); }
};

}  // namespace pagefast::test
