// interpose/pool/sleep.cpp: the glue of sleep and wake (docs/SLEEP.md,
// docs/POOL.md "Sleep and wake"): pagefast_sleep / pagefast_wake and their
// tagged forms of the C API (interpose/pagefast.h), and pagefast-ctl's
// requests that reach them through the control socket (interpose/ipc/):
// a loop over the devices, each sleeping or waking its memory of the slots
// asked (DeviceMemory::sleep, wake: device_sleep.cpp), and the answers
// folded per slot. The regions' C API and the tags' figures are in tags.cpp.
//
// What sleeps is a set of slots (region.h): slot 0 is the memory made
// outside any region (the device's pool, and the program's own VMM handles
// created outside one), each other slot a region's (its pool on each
// device, and its own-VMM handles). pagefast_sleep sleeps every slot; a
// tagged sleep the slots of one tag.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

#include "interpose/ipc/ipc.h"
#include "interpose/ipc/ipc_wire.h"
#include "interpose/pagefast.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool/sleep_state.h"
#include "interpose/pool_api.h"
#include "policy/device_pool.h"
#include "policy/state.h"

namespace pagefast::pool {
namespace {

SlotsState& state() { return g_process.slots; }

// The answers of the parts folded into one: -1 beats 1 beats 0.
int fold(int answer, int part) {
  if (answer < 0 || part < 0) return -1;
  return answer > part ? answer : part;
}

// The slot's keep flags: kSleepKeep as the call says, else as its
// regions said (outside any region: discarded unless the call keeps), and
// with it where its regions keep the contents (region.h: files, or host
// memory given back at wake).
unsigned keep_flags(int slot, unsigned flags) {
  const unsigned policy = region::slot_policy(slot);
  const unsigned place = policy & (policy::kSleepToDisk | policy::kSleepHostRelease);
  if (flags & policy::kSleepKeep) return policy::kSleepKeep | place;
  if (flags & PAGEFAST_SLEEP_DISCARD) return 0;
  return (policy & region::kKeep) ? policy::kSleepKeep | place : 0;
}

// REQUIRES: state().sleep_mutex. A slot's answer over the devices: 0, 1 (some
// memory stayed resident) or -1 (nothing of the slot changed: every pool
// refused, a capture or a failed sync). A pool that refused while memory
// of the slot slept on another device makes the sleep partial (1): memory
// left a device, so never -1; the program's own VMM memory of the slot on
// the device that refused stays resident with it.
int slot_answer(const DeviceMemory::SlotSleep& s) {
  if (s.refused && !s.slept) return -1;
  if (!s.refused) return s.answer;
  const char* name = "(outside any region)";
  if (s.slot) region::slot_info(s.slot, &name, nullptr);
  log_line(LogLevel::Warn,
           "sleep of \"%s\": the pools of %d device(s) could not sleep (a stream capture, or a device that "
           "could not be synchronised) and stay resident, with the program's own VMM memory of the tag there; "
           "the memory of %d other device(s) sleeps: a partial sleep (1)",
           name, s.refused, s.slept);
  return 1;
}

// REQUIRES: state().sleep_mutex. The slot reads asleep (its sleep went ahead, or
// it held nothing to sleep), and its sleep counts.
void mark_asleep(int slot, unsigned flags) {
  state().slots[slot].sleep.asleep.store(true, std::memory_order_release);
  state().slots[slot].sleep.sleeps.fetch_add(1, std::memory_order_relaxed);
  const char* name = "";
  if (const int open = region::open_count(slot); open && region::slot_info(slot, &name, nullptr))
    log_line(LogLevel::Info,
             "the region \"%s\" is open on %d thread(s) while it sleeps: their allocations in it wait for wake%s", name,
             open, (flags & policy::kSleepFail) ? " (fail, with PAGEFAST_SLEEP_FAIL)" : "");
}

// The slots of a tag (REQUIRES: state().sleep_mutex); 0, with a warning, when none.
int tag_slots(const char* tag, int slots[region::kMaxPolicies]) {
  const int n = region::slots_of(tag, slots);
  if (n == 0) log_line(LogLevel::Warn, "sleep or wake of the tag \"%s\": no region ever had that tag", tag);
  return n;
}

// REQUIRES: state().sleep_mutex. Sleeps `slots` (NULL: every slot, count
// unused): each device's sleep (DeviceMemory::sleep), then the answers.
// What pagefast cannot sleep is named, never left resident silently: the
// driver's own stream-ordered pool of each device (cudaMallocAsync,
// PyTorch's backend:cudaMallocAsync).
int sleep_slots_locked(const int* slots, int count, unsigned flags) {
  const int n = slots ? count : region::slot_count();
  DeviceMemory::SlotSleep asked[region::kMaxSlots];
  for (int i = 0; i < n; ++i) {
    asked[i].slot = slots ? slots[i] : i;
    asked[i].keep_modes = keep_flags(asked[i].slot, flags);
    asked[i].fail = flags & policy::kSleepFail;
  }
  bool driver_pools = false;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceMemory* memory = device_memory(d);
    if (!memory) continue;
    memory->sleep(asked, n);
    driver_pools = memory->driver_pool_resident() || driver_pools;
  }
  int answer = 0;
  bool any = false, refused = false, slept = false;
  int parts[region::kMaxSlots];
  for (int i = 0; i < n; ++i) {
    parts[i] = slot_answer(asked[i]);
    any = any || asked[i].had;
    if (parts[i] < 0) refused = true;
    else slept = slept || asked[i].had;
    answer = parts[i] < 0 ? answer : fold(answer, parts[i]);
  }
  // A slot refused: -1 only where nothing else of the sleep left a device;
  // then no slot reads asleep (an empty one beside it neither).
  if (refused) answer = slept ? 1 : -1;
  for (int i = 0; i < n && !(refused && !slept); ++i)
    if (parts[i] >= 0) mark_asleep(asked[i].slot, flags);
  // Everything, and nothing to sleep: no pool at all (-1). A tag whose
  // regions hold nothing yet sleeps as asked: nothing to do (0).
  if (!any && !slots) return -1;
  if (answer == 0 && ipc::imports_across_sleep() > 0) answer = 1;
  // A sleep of everything answers 1 while the driver's pool holds memory;
  // a tagged sleep names it (its regions' cudaMallocAsync memory is there).
  if (driver_pools && !slots && answer == 0) answer = 1;
  return answer;
}

// REQUIRES: state().sleep_mutex. Wakes `slots` (NULL: every slot): each
// device's wake (DeviceMemory::wake); a slot all of whose memory woke
// reads awake, and its wake counts.
int wake_slots_locked(const int* slots, int count) {
  const int n = slots ? count : region::slot_count();
  DeviceMemory::SlotWake asked[region::kMaxSlots];
  for (int i = 0; i < n; ++i) asked[i].slot = slots ? slots[i] : i;
  for (int d = 0; d < kMaxDevices; ++d)
    if (DeviceMemory* memory = device_memory(d)) memory->wake(asked, n);
  int answer = 0;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    SlotState& state = slot_state(asked[i].slot);
    any = any || asked[i].had || state.asleep.load(std::memory_order_acquire);
    if (asked[i].answer == 0 && state.asleep.exchange(false, std::memory_order_acq_rel))
      state.wakes.fetch_add(1, std::memory_order_relaxed);
    answer = fold(answer, asked[i].answer);
  }
  return any || slots ? answer : -1;
}

// Runs act(slots, count) under state().sleep_mutex on the slots of `tag`
// (slots NULL: every slot; the tag's do not go to another tag while the
// lock is held): -1 at once in a forked child, before the lock (a thread
// of the parent may have held it at the fork, and the child has no such
// thread); policy::kUnknownTag for a tag no region has.
template <typename Act>
int with_slots(const char* tag, Act act) {
  if (!active()) return -1;
  std::lock_guard<std::mutex> guard(state().sleep_mutex);
  if (!active()) return -1;
  int tagged[region::kMaxPolicies];
  const int count = tag ? tag_slots(tag, tagged) : 0;
  if (tag && !count) return policy::kUnknownTag;
  return act(tag ? tagged : nullptr, count);
}

// Sleeps the slots of `tag` (all of them when NULL): 0 asleep, 1 asleep with some
// memory resident (the log names it; also where a slot, or a device of a
// slot, refused while another slept), -1 nothing to sleep, or nothing
// changed (every slot with memory refused: a capture, a failed sync); -2
// for a tag no region has.
int sleep_slots(const char* tag, unsigned flags) {
  return with_slots(tag, [flags](const int* slots, int count) { return sleep_slots_locked(slots, count, flags); });
}

int wake_slots(const char* tag) {
  return with_slots(tag, [](const int* slots, int count) { return wake_slots_locked(slots, count); });
}

}  // namespace

void sleep_after_fork_child() {
  new (&state().sleep_mutex) std::mutex();
  region::after_fork_child();
}

std::mutex& sleep_mutex() { return state().sleep_mutex; }
SlotState& slot_state(int slot) { return state().slots[slot].sleep; }

int sleep_all(unsigned flags) { return sleep_slots(nullptr, flags); }
int wake_all() { return wake_slots(nullptr); }

int sleep_tag(const char* tag, unsigned flags) {
  // A tag no region has: -2, also in a forked child.
  int slots[region::kMaxPolicies];
  if (tag && !active() && !region::slots_of(tag, slots)) return policy::kUnknownTag;
  return sleep_slots(tag, flags);
}

int wake_tag(const char* tag) {
  int slots[region::kMaxPolicies];
  if (tag && !active() && !region::slots_of(tag, slots)) return policy::kUnknownTag;
  return wake_slots(tag);
}

int kept_read(const void* device_ptr, size_t bytes, void* out) {
  if (!device_ptr || !out || !active()) return -2;
  const uint64_t addr = reinterpret_cast<uintptr_t>(device_ptr);
  policy::Span* span = policy::global_page_map().lookup(addr);
  if (!span || retired_device(span->pool->device())) return -2;
  if (bytes == 0) return 0;
  // Under the sleep lock: no wake gives the kept pieces back meanwhile.
  std::lock_guard<std::mutex> guard(state().sleep_mutex);
  switch (span->pool->read_kept(addr, bytes, out)) {
    case policy::Arena::KeptRead::Copied: return 0;
    case policy::Arena::KeptRead::Resident: return 1;
    case policy::Arena::KeptRead::OnDisk: return -3;
    default: return -1;
  }
}

int control_op(uint16_t op, uint64_t arg) {
  switch (op) {
    case ipc::wire::kOpSleep: return sleep_all(unsigned(arg) & (policy::kSleepKeep | policy::kSleepFail));
    case ipc::wire::kOpWake: return wake_all();
    case ipc::wire::kOpStatus: return asleep_count();
    default: return -1;
  }
}

int tag_control_op(uint16_t op, uint64_t flags, const char* tag) {
  int answer;
  switch (op) {
    case ipc::wire::kOpSleepTag:
      answer = sleep_tag(tag, unsigned(flags) & (PAGEFAST_SLEEP_KEEP | PAGEFAST_SLEEP_FAIL | PAGEFAST_SLEEP_DISCARD));
      break;
    case ipc::wire::kOpWakeTag: answer = wake_tag(tag); break;
    case ipc::wire::kOpGiveBack: return give_back_for_neighbour(tag);
    default: return -1;
  }
  // -2 is "busy" on the wire: an unknown tag has an answer of its own.
  return answer == policy::kUnknownTag ? ipc::wire::kControlNoTag : answer;
}

int device_sleep_state(int device) {
  const DeviceMemory* memory = device_memory(device);
  if (!memory || !active()) return 0;
  int pools = 0, asleep = 0;
  memory->pools_asleep(&pools, &asleep);
  return asleep == 0 ? 0 : (asleep == pools ? 1 : 2);
}

int asleep_count() {
  if (!active()) return 0;
  int n = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    int pools = 0, asleep = 0;
    if (const DeviceMemory* memory = device_memory(d)) memory->pools_asleep(&pools, &asleep);
    n += asleep;
  }
  return n;
}

int untagged_pools_awake() {
  if (!active()) return 0;
  int n = 0;
  for (int d = 0; d < kMaxDevices; ++d)
    if (const DeviceMemory* memory = device_memory(d))
      if (const policy::DevicePool* p = memory->pool()) n += p->asleep() ? 0 : 1;
  return n;
}

}  // namespace pagefast::pool
