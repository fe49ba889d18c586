// interpose/pool/own_vmm_sleep.cpp: TEMPORARY until the own-VMM sleep lands:
// the program's own VMM memory stays resident, as before, and is named.
#include <cstdint>

#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"

namespace pagefast::pool::own_vmm {

SleepAnswer sleep_slot(int slot, bool) {
  SleepAnswer a;
  if (slot != 0) return a;
  for (int d = 0; d < kMaxDevices; ++d) a.resident_bytes += resident_bytes(d);
  if (a.resident_bytes) {
    a.status = 1;
    log_line(LogLevel::Warn, "%.1f MiB of the program's own VMM memory stay resident",
             double(a.resident_bytes) / double(1 << 20));
  }
  return a;
}
int wake_slot(int) { return 0; }
SlotBytes slot_bytes(int) { return {}; }

}  // namespace pagefast::pool::own_vmm
