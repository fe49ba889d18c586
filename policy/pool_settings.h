// policy/pool_settings.h: what one device's pool is made with (its
// configuration and the device's size), shared by DevicePool and the parts
// it routes to, each of which reads only the fields it needs.
#pragma once

#include <cstdint>

#include "policy/config.h"

namespace pagefast::policy {

struct PoolSettings {
  PoolConfig config;
  uint64_t device_total_bytes = 0;  // for the automatic reserve size
  int device = 0;                   // ordinal, for stats and messages
  int slot = 0;                     // a region's pool: its slot (interpose/pool/region.h); 0 the device's
};

}  // namespace pagefast::policy
