// interpose/pool/region.h: regions and tags (docs/SLEEP.md). A thread opens
// a region with a tag and a policy (keep the contents at sleep, or discard
// them); every allocation it makes until the region ends carries the tag,
// whatever the route: the pool (cuMemAlloc, cuMemAllocPitch, cudaMalloc)
// and the program's own VMM (cuMemCreate). Sleep and wake then act on one
// tag, or on everything.
//
// A tag is a name; with its policy it is a slot, numbered 1..kMaxSlots-1
// (slot 0: outside any region). The same name opened once with keep and
// once without has two slots, so that each allocation keeps the policy of
// the region it was made in. Slots are made at the first region of a
// (name, policy) pair; once all are made, a new pair takes over the slot
// of an empty tag (tags.cpp reuse_tag_slot: no region open, nothing
// allocated, not asleep), so that per-request tags do not run out.
//
// Regions nest on a thread (up to kMaxDepth): the innermost one tags. A
// thread that exits with regions open ends them (a pthread key's
// destructor, set at the thread's first region).
// current() is one thread-local read, on the allocation path.
#pragma once

#include <cstdint>

#include "policy/tags.h"

namespace pagefast::pool::region {

// The limits (policy/tags.h): slot 0 (no region) and kMaxTags (name,
// policy) pairs; a name's bytes with its NUL; regions open on a thread.
constexpr int kMaxSlots = policy::kTagSlots;
constexpr int kMaxNameBytes = int(policy::kTagNameBytes);
constexpr int kMaxDepth = policy::kMaxRegionDepth;

// A slot's policy: what a sleep of it does with the contents, as the
// region flags of pagefast.h say (the same bits as policy/sleep_gate.h's
// sleep flags). 0: discarded; kKeep: kept in host memory, which stays
// page-locked for the next sleep (and is page-locked ahead, prelock.cpp);
// kKeep | kToDisk: kept in files (disk_copy.h); kKeep | kHostRelease: kept
// in host memory made at sleep and given back at wake, none ahead.
constexpr unsigned kKeep = 1, kToDisk = 8, kHostRelease = 16;
constexpr int kMaxPolicies = 4;  // slots of one name at most
// The policy of a region's flags (PAGEFAST_REGION_KEEP_DISK or
// PAGEFAST_REGION_HOST_RELEASE imply keep; disk wins over release).
inline unsigned policy_of(unsigned flags) {
  if (flags & kToDisk) return kKeep | kToDisk;
  if (flags & kHostRelease) return kKeep | kHostRelease;
  return flags & kKeep;
}

// The calling thread's innermost open region's slot; 0 outside any region.
extern __thread int t_current __attribute__((tls_model("initial-exec")));
inline int current() { return t_current; }
// The slot the program's own VMM memory (cuMemCreate) made now carries:
// current(), or 0 when the innermost region is pool-only (its tag goes to
// memory served by the pool only, not to a library's own cuMemCreate
// buffers made while it is open).
extern __thread int t_own_vmm __attribute__((tls_model("initial-exec")));
inline int current_own_vmm() { return t_own_vmm; }

// Opens a region on the calling thread (pool_only: see current_own_vmm).
// The name: policy::good_tag. Returns the slot, or -1 (a bad name, too
// many tags, or kMaxDepth regions open on this thread already), with *why
// set. A
// refused begin still takes its end: it pushes a marker that the matching
// end() pops, and meanwhile the region open around it (if any) tags.
int begin(const char* name, unsigned policy, bool pool_only, const char** why);
// Ends the calling thread's innermost region, or pops the marker of the
// innermost refused begin; -1 when neither is open.
int end();

// The slots of a name (at most kMaxPolicies: one per policy); returns how
// many, 0 when the name was never opened.
int slots_of(const char* name, int out[kMaxPolicies]);
// How many slots were made (the highest slot number + 1; 1 when none).
int slot_count();
// A slot's name and policy; false for slot 0 or a slot not made.
bool slot_info(int slot, const char** name, bool* keep);
// A slot's policy (0 for slot 0 or a slot not made).
unsigned slot_policy(int slot);
// Threads with a region of `slot` open now (sleep's bad-input answer).
int open_count(int slot);

// The reuse of an empty tag's slot (tags.cpp), in two steps around the
// glue's check that the slot holds nothing: idle_since answers how many
// regions of `slot` began so far, or -1 while one is open; take_over
// renames the slot to (name, policy) and opens a region of it for the
// caller's begin, if no region of it began since `begins`. Returns the
// slot of (name, policy): `slot`, or the one another thread made meanwhile;
// 0 when a region of `slot` began since (the slot is not empty any more).
int64_t idle_since(int slot);
int take_over(int slot, int64_t begins, const char* name, unsigned policy);
// The fork handler's part, in the child: the lock of the slots is made
// anew (a thread of the parent may have held it at the fork).
void after_fork_child();

}  // namespace pagefast::pool::region
