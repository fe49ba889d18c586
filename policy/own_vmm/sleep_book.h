// policy/own_vmm/sleep_book.h: what sleep by slot keeps of the program's
// own VMM handles (docs/OWN-VMM.md "Sleep and wake"): the handles asleep,
// each with what wake needs to make it again (its properties, size,
// mappings and their access, the program's references, the host copy of
// its contents), and the translation between the handle values the
// program holds and the driver's.
//
// Translation: sleep releases the driver's handle; wake makes a new one,
// whose value the driver picks. The program keeps its value (the
// program's value), which names the new handle from then on (an alias).
// A new driver handle whose value equals a value the program holds for
// another (an alias, or a handle asleep: the driver reuses released
// values) is given a value of pagefast's own, translated the same way.
// A value in no alias and asleep nowhere is the driver's own and passes
// unchanged.
//
// Calls while asleep: release and unmap are recorded (the program let the
// memory go: once it holds nothing, wake does not bring it back), and so
// is set access (wake sets it: a sleep between a map and its set access
// costs the program nothing); map,
// export and retain answer kIllegalState; the properties come from the
// record.
//
// Pure: handles and addresses are numbers, host copies opaque pointers
// the glue owns. Not thread-safe: the glue serializes every call
// (interpose/pool/own_vmm_sleep.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/own_vmm/ledger.h"

namespace pagefast::policy::own_vmm {

// CUDA_ERROR_ILLEGAL_STATE (the glue checks).
constexpr int kIllegalState = 401;

// A handle asleep is a SlotHandle (ledger.h) keyed by its program value,
// with its properties, mappings (and their access) and host copy.

class SleepBook {
 public:
  // Translation. Whether any handle ever slept (until then every value is
  // the driver's).
  bool ever() const { return ever_; }
  // The driver's value for the program's; false when the handle is asleep.
  bool to_driver(uint64_t program, uint64_t* driver) const;
  // The program's value for a driver handle it already holds (retain).
  uint64_t to_program(uint64_t driver) const;
  // A handle the driver just handed out (create, import): the program's
  // value for it, a value of pagefast's own when the driver's is held by
  // the program for another handle.
  uint64_t adopt(uint64_t driver);
  // The program holds nothing of `program` any more: its alias goes.
  void drop_alias(uint64_t program);
  // Whether no alias is left (the glue skips looking for one to drop).
  bool aliases_empty() const { return aliases_.empty(); }
  // Whether any value needs translating (a handle asleep, or an alias):
  // false again once the program holds nothing of what slept, when every
  // value is the driver's as before the first sleep.
  bool translates() const { return !asleep_.empty() || !aliases_.empty(); }

  // Sleep and wake.
  void put(SlotHandle handle);
  // Every handle asleep of `slot`, by program value.
  std::vector<const SlotHandle*> slot_handles(int slot) const;
  // Wake made the handle again as `driver`: it is awake, and aliased when
  // the values differ.
  void woke(uint64_t program, uint64_t driver);
  bool asleep(uint64_t program) const { return asleep_.count(program) != 0; }
  const SlotHandle* find(uint64_t program) const;

  // Calls while asleep. Release: one reference less (kInvalidValue when
  // none is left); *gone set with the record's host copy when the program
  // now holds nothing (the record is dropped; the glue frees the copy).
  int release(uint64_t program, bool* gone, void** host);
  // Unmap: -1 when no mapping asleep starts in [addr, addr + bytes) (the
  // driver answers); kOk when such mappings tile the range exactly (they
  // go; `gone` gets the host copies of handles the program now holds
  // nothing of); else kInvalidValue.
  int unmap(uint64_t addr, uint64_t bytes, std::vector<void*>* gone);
  // Set access: -1 when no mapping asleep starts in [addr, addr + bytes)
  // (the driver answers); kOk when such mappings tile the range exactly
  // (`out` gets their access records, which the glue updates: wake sets
  // them); else kInvalidValue.
  int access_records(uint64_t addr, uint64_t bytes, std::vector<std::string*>* out);
  // Whether a mapping asleep overlaps [addr, addr + bytes).
  bool overlaps(uint64_t addr, uint64_t bytes) const;
  // The number of handles asleep (the glue's fast check).
  size_t asleep_count() const { return asleep_.size(); }

  // Bytes asleep of `slot`, and of those, kept in host memory.
  void slot_bytes(int slot, uint64_t* asleep, uint64_t* kept) const;

 private:
  struct Place {
    uint64_t bytes = 0;
    uint64_t program = 0;
  };
  using Places = std::map<uint64_t, Place>;
  bool held(uint64_t value) const { return aliases_.count(value) || asleep_.count(value); }
  // The mappings asleep that tile [addr, addr + bytes) exactly, from
  // *first: kOk; -1 where none is there, kInvalidValue where they do not
  // tile it.
  int tiled(uint64_t addr, uint64_t bytes, Places::iterator* first);

  bool ever_ = false;
  std::unordered_map<uint64_t, uint64_t> aliases_;  // program -> driver (values differ)
  std::unordered_map<uint64_t, uint64_t> reverse_;  // driver -> program
  std::unordered_map<uint64_t, SlotHandle> asleep_;
  Places places_;  // the mappings asleep, by address
  // pagefast's own values: from the top of the range down, skipping held ones.
  uint64_t next_own_ = UINT64_MAX - 1;
};

}  // namespace pagefast::policy::own_vmm
