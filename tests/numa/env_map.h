// tests/numa/env_map.h: an environment for tests, handed to code that
// takes an EnvLookup, so no test touches the real environment.
#pragma once

#include <map>
#include <string>

#include "policy/config.h"

namespace pagefast::numa::testing {

struct EnvMap {
  std::map<std::string, std::string> vars;

  EnvMap& set(const std::string& name, const std::string& value) {
    vars[name] = value;
    return *this;
  }
  static const char* lookup(const char* name, void* user) {
    auto* self = static_cast<EnvMap*>(user);
    auto it = self->vars.find(name);
    return it == self->vars.end() ? nullptr : it->second.c_str();
  }
};

}  // namespace pagefast::numa::testing
