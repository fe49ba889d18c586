// interpose/pool/region.cpp: see region.h.
#include "interpose/pool/region.h"

#include <pthread.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>

#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"

namespace pagefast::pool::region {

__thread int t_current __attribute__((tls_model("initial-exec"))) = 0;
__thread int t_own_vmm __attribute__((tls_model("initial-exec"))) = 0;

namespace {

// A thread's open regions, innermost last, and the markers of refused
// begins among them (kRefused | the slot that tags meanwhile), so that the
// matching end pops the marker only. Fixed size: no host allocation; the
// refused begins made while the stack is full are counted in t_excess (the
// innermost of all then, so they end first). kPoolOnly marks an entry
// whose region leaves the program's own VMM memory untagged.
constexpr int kStack = 2 * kMaxDepth;
constexpr int kRefused = 0x10000;
constexpr int kPoolOnly = 0x20000;
constexpr int kSlotMask = 0xFFFF;

// The calling thread's slots from its innermost stack entry (none: 0).
void follow(int top) {
  t_current = top & kSlotMask;
  t_own_vmm = (top & kPoolOnly) ? 0 : t_current;
}
__thread int t_stack[kStack] __attribute__((tls_model("initial-exec")));
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;
__thread int t_regions __attribute__((tls_model("initial-exec"))) = 0;  // entries that are regions
__thread unsigned t_excess __attribute__((tls_model("initial-exec"))) = 0;

// The slots' one table (slots_state.h), shared with the sleep.
SlotsState& state() { return g_process.slots; }

// Thread exit closes the thread's open regions (SlotsState::exit_key).
__thread bool t_exit_keyed __attribute__((tls_model("initial-exec"))) = false;

void close_at_exit(void*);
void make_exit_key() { pthread_key_create(&state().exit_key, &close_at_exit); }

// A refused begin: a marker the matching end pops; the allocations
// meanwhile carry the tag of the region open around it (none: untagged).
void push_refused() {
  if (t_depth < kStack) t_stack[t_depth++] = kRefused | t_current | (t_current != t_own_vmm ? kPoolOnly : 0);
  else ++t_excess;
}

// REQUIRES: state().mutex. A region of `slot` opens.
void open_locked(int slot) {
  state().slots[slot].open.fetch_add(1, std::memory_order_acq_rel);
  state().slots[slot].begins.fetch_add(1, std::memory_order_relaxed);
}

int find_locked(const char* name, unsigned policy) {
  const int count = state().count.load(std::memory_order_relaxed);
  for (int s = 1; s < count; ++s)
    if (state().slots[s].policy == policy && std::strcmp(state().slots[s].name, name) == 0) return s;
  return 0;
}

void close_at_exit(void*) {
  t_exit_keyed = false;
  t_excess = 0;
  while (t_depth > 0) end();
}

// Once per thread, at its first region (not on the allocation path).
void key_thread() {
  if (t_exit_keyed) return;
  pthread_once(&state().exit_key_once, &make_exit_key);
  t_exit_keyed = pthread_setspecific(state().exit_key, reinterpret_cast<void*>(1)) == 0;
}

}  // namespace

int begin(const char* name, unsigned policy, bool pool_only, const char** why) {
  const char* unused = nullptr;
  if (!why) why = &unused;
  if (!pagefast::policy::good_tag(name)) {
    *why = "a tag is " PAGEFAST_TAG_RULE;
    push_refused();
    return -1;
  }
  if (t_regions >= kMaxDepth || t_depth >= kStack || t_excess) {
    *why = "too many regions open on this thread (" PAGEFAST_TAG_TEXT(PAGEFAST_MAX_DEPTH) ")";
    push_refused();
    return -1;
  }
  int slot = 0;
  {
    std::lock_guard<std::mutex> guard(state().mutex);
    slot = find_locked(name, policy);
    const int count = state().count.load(std::memory_order_relaxed);
    if (!slot && count < kMaxSlots) {
      std::memcpy(state().slots[count].name, name, std::strlen(name) + 1);
      state().slots[count].policy = policy;
      slot = count;
      state().count.store(count + 1, std::memory_order_release);
    }
    if (slot) open_locked(slot);
  }
  // Every slot made: the slot of an empty tag, if any (tags.cpp; opened
  // there under state().mutex).
  if (!slot) slot = reuse_tag_slot(name, policy);
  if (!slot) {
    *why = "too many tags (" PAGEFAST_TAG_TEXT(PAGEFAST_MAX_TAGS) " pairs of name and policy, none of them empty)";
    push_refused();
    return -1;
  }
  // A region that keeps its contents in host memory kept between sleeps:
  // the trim thread page-locks ahead for it (prelock.cpp), whether its
  // memory comes from a pool or the program's own cuMemCreate.
  if (policy == kKeep) start_trim_thread(g_process.config, true);
  key_thread();
  t_stack[t_depth++] = slot | (pool_only ? kPoolOnly : 0);
  ++t_regions;
  follow(t_stack[t_depth - 1]);
  return slot;
}

int end() {
  if (t_excess) {
    --t_excess;
    return 0;
  }
  if (t_depth == 0) return -1;
  const int entry = t_stack[--t_depth];
  if (!(entry & kRefused)) {
    state().slots[entry & kSlotMask].open.fetch_sub(1, std::memory_order_acq_rel);
    --t_regions;
  }
  follow(t_depth ? t_stack[t_depth - 1] : 0);
  return 0;
}

int slots_of(const char* name, int out[kMaxPolicies]) {
  if (!name) return 0;
  int n = 0;
  const int count = state().count.load(std::memory_order_acquire);
  for (int s = 1; s < count && n < kMaxPolicies; ++s)
    if (std::strcmp(state().slots[s].name, name) == 0) out[n++] = s;
  return n;
}

int slot_count() { return state().count.load(std::memory_order_acquire); }

bool slot_info(int slot, const char** name, bool* keep) {
  if (slot <= 0 || slot >= slot_count()) return false;
  if (name) *name = state().slots[slot].name;
  if (keep) *keep = (state().slots[slot].policy & kKeep) != 0;
  return true;
}

unsigned slot_policy(int slot) { return slot > 0 && slot < slot_count() ? state().slots[slot].policy : 0; }

int open_count(int slot) {
  if (slot <= 0 || slot >= slot_count()) return 0;
  return state().slots[slot].open.load(std::memory_order_acquire);
}

int64_t idle_since(int slot) {
  if (slot <= 0 || slot >= slot_count()) return -1;
  std::lock_guard<std::mutex> guard(state().mutex);
  if (state().slots[slot].open.load(std::memory_order_acquire) != 0) return -1;
  return state().slots[slot].begins.load(std::memory_order_relaxed);
}

int take_over(int slot, int64_t begins, const char* name, unsigned policy) {
  if (slot <= 0 || slot >= slot_count() || !pagefast::policy::good_tag(name)) return 0;
  std::lock_guard<std::mutex> guard(state().mutex);
  // Another thread made the pair meanwhile: its slot.
  if (const int made = find_locked(name, policy)) {
    open_locked(made);
    return made;
  }
  SlotsState::Slot& s = state().slots[slot];
  if (s.open.load(std::memory_order_acquire) != 0 || s.begins.load(std::memory_order_relaxed) != begins) return 0;
  std::memcpy(s.name, name, std::strlen(name) + 1);
  s.policy = policy;
  open_locked(slot);
  return slot;
}

void after_fork_child() { new (&state().mutex) std::mutex(); }

}  // namespace pagefast::pool::region
