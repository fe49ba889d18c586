// policy/own_vmm/ledger.h: the ledger of the program's own VMM handles
// (docs/OWN-VMM.md): every handle of device memory the program made
// (cuMemCreate) or imported (cuMemImportFromShareableHandle), with its
// bytes, device, the program's references and mappings, and which
// allocation it names. Two readers: the own-VMM cache (cache.h) decides
// with it when a handle is the program's no more (its last reference and
// mapping gone), and sleep (docs/POOL.md "Sleep and wake") asks it how
// many bytes of the program's memory stay resident.
//
// A handle's memory is the program's while it holds a reference (its
// cuMemCreate or cuMemImportFromShareableHandle, each
// cuMemRetainAllocationHandle, less each cuMemRelease) or maps it somewhere
// (the driver frees a released handle's memory at its last unmap). Only
// successful calls are noted, and only handles created or imported; a
// mapping of a handle the ledger does not know is ignored. Mappings are
// the program's: an unmap the cache answers without the driver ends one
// here all the same.
//
// One allocation can have several handles: importing what the process
// exported gives a new handle to the same allocation (or, on some drivers,
// the same handle with one more reference: counted in `imports`, which the
// driver holds besides the cache's one), and the memory stays while any
// of them is held or mapped. An export notes which shareable handle (a
// file, by its device and inode) names the allocation, so that its import
// is known for the same memory and counted once. An import the ledger
// cannot place (another process's export) is an allocation of its own, of
// the bytes the program maps of it.
//
// A handle pagefast keeps for itself (keep, made: the cache's released and
// made-ahead handles) stays recorded after the program let it go, until
// let_go, and is not the program's memory: resident() leaves it out.
//
// Sleep by region (docs/OWN-VMM.md "Sleep and wake"): each handle carries
// the region slot current at its creation (tag; an import: slot 0), and is
// marked shared once exported or imported (another process may hold its
// memory: never slept). program_handles lists what sleep takes of a slot;
// forget drops what sleep released, restore brings back what wake made.
//
// Asleep (docs/OWN-VMM.md "Sleep and wake"): sleep releases the driver's
// handle and its record stays, keyed from then on by the program's value
// (which outlives the driver's), with what wake needs to make it again
// (its properties, mappings and their access, the host copy of its
// contents); wake keys it by the new driver value again. The program's
// values are translated: a woken handle keeps the program's value (an
// alias of the driver's), and a new driver handle whose value the program
// holds for another (asleep, or an alias: the driver reuses released
// values) gets a value of pagefast's own. A value in no alias and asleep
// nowhere is the driver's own and passes unchanged. Calls while asleep:
// release and unmap are recorded (once the program holds nothing, wake
// does not bring it back), and so is set access (wake sets it); the
// properties come from the record.
//
// One record per handle: what the own-VMM cache keeps of a handle it
// tracks (CachePart: its key, cached or not, its deferred mappings) is
// part of the handle's record here, valid while pagefast keeps it (keep,
// made, until let_go).
//
// Pure: handles and addresses are numbers. Thread-safe: one mutex, taken
// by every public call and never held while calling out. The own-VMM cache
// (cache.h) guards its own state with the same mutex (mutex()) and calls
// the *_held forms under it: one lock over the program's handles.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pagefast::policy::own_vmm {

// What identifies a shareable handle: its file (POSIX descriptors).
struct ShareKey {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator<(const ShareKey& o) const { return device != o.device ? device < o.device : inode < o.inode; }
};

// CUDA_ERROR_ILLEGAL_STATE (the glue checks): map, export and retain of a
// handle asleep.
constexpr int kIllegalState = 401;

// One handle, as the ledger knows it (known false: not recorded).
struct HandleFacts {
  bool known = false;
  uint64_t bytes = 0;
  int device = 0;
  int refs = 0;         // the program's references
  int maps = 0;         // the program's mappings
  int imports = 0;      // of refs, those imports of the process's own export added to this same handle
  int slot = 0;         // the region slot at its creation
  bool shared = false;  // exported or imported
};

// One of the program's mappings of a handle: where, how much, from which
// offset into the handle, and, for a handle asleep, the
// access descriptors wake sets again (bytes; empty: none, or not asked).
struct SlotMapping {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;
  std::string access;
};

// A handle the program holds or maps in a region slot, with its mappings:
// as the ledger lists what sleep takes of a slot (program_handles: the
// driver's value, shared, multicast), and as the ledger lists its records
// asleep (asleep_handles: the program's value, its properties and the host
// copy of its contents).
struct SlotHandle {
  uint64_t handle = 0;   // the driver's value (the last it had, once asleep)
  uint64_t program = 0;  // the program's value (asleep: its record's key)
  int slot = 0;
  int device = 0;
  int refs = 0;  // the program's references
  uint64_t bytes = 0;
  bool shared = false;            // exported or imported
  bool multicast = false;         // bound to a multicast object
  std::string prop;               // asleep: the property bytes
  std::vector<SlotMapping> maps;  // by address
  void* host = nullptr;           // asleep: its contents (keep), or null
};

// What the own-VMM cache keeps of a handle it tracks (cache.h).
struct CachePart {
  std::string key;  // property bytes + size: the cache's key (key.h)
  bool shared = false;
  bool cached = false;
  uint64_t cached_at_ns = 0;  // decay_step's clock when first seen cached; 0: not yet seen
  // The address of its last deferred unmap (UINT64_MAX: none): the cache
  // finds its deferred mapping without scanning every mapping.
  uint64_t deferred_at = UINT64_MAX;
  int deferred_maps = 0;  // its deferred mappings (almost always 0 or 1)
};

class Ledger {
 public:
  // The program's successful calls.
  void created(uint64_t handle, uint64_t bytes, int device, int slot = 0);
  // The region slot of a handle the program just got from cuMemCreate
  // (the cache may have noted the creation without it).
  void tag(uint64_t handle, int slot);
  // Exported in a way the ledger cannot place (no file): shared all the same.
  void shared(uint64_t handle);
  // The program exported `handle` as the shareable handle `key`.
  void exported(uint64_t handle, const ShareKey& key);
  // The program imported `handle` (`key`: the shareable handle's, NULL if
  // unknown; `device`: where the memory lives, from its properties).
  void imported(uint64_t handle, const ShareKey* key, int device);
  void retained(uint64_t handle);
  // Bound to a multicast object (cuMulticastBindMem): its memory cannot
  // leave the device for the handle's life (an unbind names no handle).
  void bound(uint64_t handle);
  // The handles the program maps over [addr, addr + bytes), bound
  // (cuMulticastBindAddr); returns them.
  std::vector<uint64_t> bound_at(uint64_t addr, uint64_t bytes);
  // One reference less (an import's first, while the handle has some).
  void released(uint64_t handle);
  void mapped(uint64_t addr, uint64_t bytes, uint64_t handle, uint64_t offset = 0);
  // Every mapping that starts inside [addr, addr + bytes) ends (the driver
  // unmaps whole mappings only).
  void unmapped(uint64_t addr, uint64_t bytes);
  // The device's context was reset: its handles went with it.
  void forget_device(int device);

  // What pagefast keeps for itself (the own-VMM cache).
  // `handle` stays recorded once the program holds nothing of it.
  void keep(uint64_t handle);
  // A handle pagefast made for itself (growth ahead): kept, none of the
  // program's.
  void made(uint64_t handle, uint64_t bytes, int device);
  // The program's cuMemCreate was answered with a kept handle: its one
  // reference.
  void taken(uint64_t handle);
  // Kept no more (released for real, or forgotten): the record goes once
  // the program holds nothing of it.
  void let_go(uint64_t handle);

  HandleFacts facts(uint64_t handle);

  // Sleep by slot. The handles of `slot` the program holds or maps, on
  // any device, with their mappings (kept handles the program holds
  // nothing of are pagefast's: left out).
  std::vector<SlotHandle> program_handles(int slot);
  // Sleep released the handle: its record and its mappings go (its
  // exports name nothing any more).
  void forget(uint64_t handle);
  // Wake made `handle` for what slept: `refs` of the program's; its
  // mappings follow through mapped().
  void restore(uint64_t handle, uint64_t bytes, int device, int slot, int refs);
  // The handles of the program's mappings that start inside
  // [addr, addr + bytes) (what an unmap there ends).
  std::vector<uint64_t> mapped_in(uint64_t addr, uint64_t bytes);
  // The bytes of `slot` the program holds or maps (every device).
  uint64_t slot_resident(int slot);

  // Asleep and the translation of the program's values (above). Whether
  // any handle ever slept (until then every value is the driver's).
  bool ever();
  // The driver's value for the program's; false when the handle is asleep.
  bool to_driver(uint64_t program, uint64_t* driver);
  // The program's value for a driver handle it already holds (retain).
  uint64_t to_program(uint64_t driver);
  // A handle the driver just handed out (create, import): the program's
  // value for it, a value of pagefast's own when the driver's is held by
  // the program for another handle.
  uint64_t adopt(uint64_t driver);
  // The program holds nothing of `program` any more: its alias goes.
  void drop_alias(uint64_t program);
  bool aliases_empty();
  // Whether any value needs translating (a handle asleep, or an alias).
  bool translates();
  // Sleep released `h.handle`: its record (made from `h` when the ledger
  // has none) sleeps under `h.program`, its mappings with it.
  void slept(SlotHandle h);
  // Every handle asleep of `slot`, by program value.
  std::vector<SlotHandle> asleep_handles(int slot);
  // Wake made the handle again as `driver`: its record is awake under it,
  // with its references and mappings, aliased when the values differ.
  void woke(uint64_t program, uint64_t driver);
  bool asleep(uint64_t program);
  // The property bytes of a handle asleep; false when not asleep.
  bool asleep_properties(uint64_t program, std::string* prop);
  size_t asleep_count();
  // Release while asleep: one reference less (kInvalidValue when none is
  // left); *gone set with the host copy when the program now holds
  // nothing (the record goes; the caller frees the copy).
  int release_asleep(uint64_t program, bool* gone, void** host);
  // Unmap: -1 when no mapping asleep starts in [addr, addr + bytes) (the
  // driver answers); kOk when such mappings tile the range exactly (they
  // go; `gone` gets the host copies of handles the program now holds
  // nothing of); else kInvalidValue.
  int unmap_asleep(uint64_t addr, uint64_t bytes, std::vector<void*>* gone);
  // Set access: as unmap_asleep, and where kOk `update` is applied to each
  // mapping's access record (wake sets them), under the lock.
  int access_asleep(uint64_t addr, uint64_t bytes, const std::function<void(std::string*)>& update);
  // Whether a mapping asleep overlaps [addr, addr + bytes).
  bool overlaps_asleep(uint64_t addr, uint64_t bytes);
  // Bytes asleep of `slot`, and of those, kept in host memory.
  void slot_asleep(int slot, uint64_t* asleep, uint64_t* kept);

  // `device`'s handles the program holds or maps: their bytes, and how many.
  struct Resident {
    uint64_t bytes = 0;
    uint64_t handles = 0;
  };
  Resident resident(int device);

  // The one lock over the program's handles: every call above takes it;
  // the cache holds it across its own calls and uses the forms below.
  std::mutex& mutex() { return mutex_; }
  // REQUIRES: mutex() held. The calls above, for the cache.
  void created_held(uint64_t handle, uint64_t bytes, int device, int slot = 0);
  void retained_held(uint64_t handle);
  void released_held(uint64_t handle);
  void mapped_held(uint64_t addr, uint64_t bytes, uint64_t handle, uint64_t offset = 0);
  void unmapped_held(uint64_t addr, uint64_t bytes);
  void made_held(uint64_t handle, uint64_t bytes, int device);
  void taken_held(uint64_t handle);
  void let_go_held(uint64_t handle);
  HandleFacts facts_held(uint64_t handle) const;
  // REQUIRES: mutex() held. `handle` is kept (a handle the program holds,
  // or already kept): its cache part, fresh with `key` unless already kept.
  CachePart& keep_held(uint64_t handle, const std::string& key);
  // REQUIRES: mutex() held. The cache part of a kept handle, else null.
  CachePart* cache_part(uint64_t handle);
  // REQUIRES: mutex() held. The kept handles (in no order).
  std::vector<uint64_t> kept_handles() const;
  // REQUIRES: mutex() held. Kept no more, with no driver call (the cache
  // forgets it: a device reset, sleep taking it); the record stays while
  // the program holds something of it.
  void unkeep_held(uint64_t handle) { let_go_held(handle); }
  // REQUIRES: mutex() held. unkeep_held of every kept handle of `device`
  // (device < 0: of every device). Allocates nothing.
  void unkeep_all_held(int device);

 private:
  struct Handle {
    uint64_t bytes = 0;
    int device = 0;
    int refs = 0;
    int maps = 0;
    int imports = 0;
    uint64_t allocation = 0;  // handles of one allocation share it
    bool bytes_known = true;  // false: an import placed nowhere (its mappings tell)
    bool kept = false;        // pagefast keeps it (keep / made, until let_go)
    CachePart cache;          // the cache's, while kept
    bool shared = false;      // exported or imported
    bool multicast = false;   // bound to a multicast object
    int slot = 0;             // region slot at creation
    // Asleep (keyed by the program's value): its properties, mappings with
    // their access, and the host copy of its contents (null: none).
    std::string prop;
    std::vector<SlotMapping> slept;
    void* host = nullptr;
    bool programs() const { return refs != 0 || maps != 0; }
  };
  struct Export {
    uint64_t allocation = 0;
    uint64_t bytes = 0;
    int device = 0;
  };
  struct Mapping {
    uint64_t bytes = 0;
    uint64_t handle = 0;
    uint64_t offset = 0;
  };
  // REQUIRES: mutex_ held. Drops the handle once neither the program nor
  // pagefast holds it.
  void settle(std::unordered_map<uint64_t, Handle>::iterator it);

  using Handles = std::unordered_map<uint64_t, Handle>;
  using Places = std::map<uint64_t, Mapping>;  // mappings asleep: Mapping::handle the program's value
  bool held(uint64_t value) const { return aliases_.count(value) || asleep_.count(value); }
  // The mappings asleep that tile [addr, addr + bytes) exactly, from
  // *first: kOk; -1 where none is there, kInvalidValue where they do not.
  int tiled(uint64_t addr, uint64_t bytes, Places::iterator* first);
  void drop_alias_held(uint64_t program);

  std::mutex mutex_;
  Handles handles_;  // awake, by the driver's value
  Handles asleep_;   // asleep, by the program's value
  Places places_;
  std::unordered_map<uint64_t, uint64_t> aliases_;  // program -> driver (values differ)
  std::unordered_map<uint64_t, uint64_t> reverse_;  // driver -> program
  bool ever_ = false;
  uint64_t next_own_ = UINT64_MAX - 1;  // pagefast's own values: down from the top, skipping held ones
  std::map<uint64_t, Mapping> maps_;    // by address
  std::map<ShareKey, Export> exports_;
  uint64_t next_allocation_ = 1;
};

}  // namespace pagefast::policy::own_vmm
