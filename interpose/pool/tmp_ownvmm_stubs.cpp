// TEMPORARY (deleted before the final commit): the C API of tagged sleep
// over own_vmm::sleep_slot / wake_slot only, until sleep.cpp has it.
#include "interpose/pagefast.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/region.h"

#define PF_EXPORT extern "C" __attribute__((visibility("default")))
using namespace pagefast::pool;

PF_EXPORT int pagefast_region_begin(const char* tag, unsigned flags) {
  const char* why = nullptr;
  return region::begin(tag, flags & PAGEFAST_REGION_KEEP, &why) < 0 ? -1 : 0;
}
PF_EXPORT int pagefast_region_end(void) { return region::end(); }
PF_EXPORT int pagefast_sleep_tag(const char* tag, unsigned flags) {
  int slots[2];
  const int n = region::slots_of(tag, slots);
  if (n == 0) return -2;
  int answer = 0;
  for (int i = 0; i < n; ++i) {
    const char* name;
    bool keep = false;
    region::slot_info(slots[i], &name, &keep);
    if (flags & PAGEFAST_SLEEP_KEEP) keep = true;
    if (flags & PAGEFAST_SLEEP_DISCARD) keep = false;
    const own_vmm::SleepAnswer a = own_vmm::sleep_slot(slots[i], keep);
    if (a.status < 0) return -1;
    if (a.status > 0) answer = 1;
  }
  return answer;
}
PF_EXPORT int pagefast_wake_tag(const char* tag) {
  int slots[2];
  const int n = region::slots_of(tag, slots);
  if (n == 0) return -2;
  for (int i = 0; i < n; ++i)
    if (own_vmm::wake_slot(slots[i]) < 0) return -1;
  return 0;
}
