// policy/pool_report.h: the human-readable memory report of one device's
// pool (in the spirit of torch.cuda.memory_summary; docs/STATS.md "Memory
// report"). The figures come from DevicePool::report(), which takes locks
// only with try_lock and calls no provider, so the text can be made at
// process exit. Pure C++, like the rest of policy/.
#pragma once

#include <cstdint>
#include <string>

#include "policy/device_pool.h"

namespace pagefast::policy {

// "12.0 MiB" below 1 GiB, "1.5 GiB" from there: one decimal, binary units.

// 1 - largest free run / free bytes, in [0, 1]; 0 when nothing is free.
double fragmentation(const PoolReport& report);

// The block of text for device `device`: figures, size classes, arena,
// fragmentation, the largest block allocatable without growing, and the
// last out-of-memory answer. Lines end in '\n'.
std::string report_text(int device, const PoolReport& report);

}  // namespace pagefast::policy
