// policy/own_vmm/key.h: a cached handle's key: the exact property bytes
// of its cuMemCreate, then its size. The cache queues released handles by
// key (policy/own_vmm/cache.h); growth ahead creates its pages with the
// property bytes of the key it grows (policy/own_vmm/growth_ahead.h).
#pragma once

#include <cstdint>
#include <string>

namespace pagefast::policy::own_vmm {

inline std::string key_of(uint64_t bytes, const std::string& prop) {
  std::string key = prop;
  key.append(reinterpret_cast<const char*>(&bytes), sizeof bytes);
  return key;
}

inline std::string prop_of(const std::string& key) { return key.substr(0, key.size() - sizeof(uint64_t)); }

}  // namespace pagefast::policy::own_vmm
