// policy/own_vmm/slot.h: a cached handle's key (its slot): the exact
// property bytes of its cuMemCreate, then its size. The cache queues
// released handles by slot (policy/own_vmm/cache.h); growth ahead
// creates its pages with the property bytes of the slot it grows
// (policy/own_vmm/growth_ahead.h).
#pragma once

#include <cstdint>
#include <string>

namespace pagefast::policy::own_vmm {

inline std::string slot_of(uint64_t bytes, const std::string& prop) {
  std::string slot = prop;
  slot.append(reinterpret_cast<const char*>(&bytes), sizeof bytes);
  return slot;
}

inline std::string prop_of(const std::string& slot) { return slot.substr(0, slot.size() - sizeof(uint64_t)); }

}  // namespace pagefast::policy::own_vmm
