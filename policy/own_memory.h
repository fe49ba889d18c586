// policy/own_memory.h: the device memory a program holds through its own
// VMM calls, as the program sees it (docs/POOL.md "Sleep and wake"). Sleep
// covers the pool's chunks and what pagefast keeps idle of the program's
// released handles, not a handle the program still holds or maps: this
// ledger says how many bytes of those stay resident, so that a sleep never
// answers "everything went back" while they do.
//
// A handle's memory is the program's while it holds a reference (its
// cuMemCreate or cuMemImportFromShareableHandle, each
// cuMemRetainAllocationHandle, less each cuMemRelease) or maps it somewhere
// (the driver frees a released handle's memory at its last unmap). Only
// successful calls are noted, and only handles created or imported; a
// mapping of a handle the ledger does not know is ignored.
//
// One allocation can have several handles: importing what the process
// exported gives a new handle to the same allocation (or, on some drivers,
// the same handle with one more reference), and the memory stays while
// any of them is held or mapped. An export notes which shareable handle
// (a file, by its device and inode) names the allocation, so that its
// import is known for the same memory and counted once. An import the
// ledger cannot place (another process's export) is an allocation of its
// own, of the bytes the program maps of it.
//
// Pure: handles and addresses are numbers. Thread-safe (one mutex; every
// call it guards is a driver call of microseconds).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace pagefast::policy {

// What identifies a shareable handle: its file (POSIX descriptors).
struct ShareKey {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator<(const ShareKey& o) const { return device != o.device ? device < o.device : inode < o.inode; }
};

class OwnMemory {
 public:
  void created(uint64_t handle, uint64_t bytes, int device);
  // The program exported `handle` as the shareable handle `key`.
  void exported(uint64_t handle, const ShareKey& key);
  // The program imported `handle` (`key`: the shareable handle's, NULL if
  // unknown; `device`: where the memory lives, from its properties).
  void imported(uint64_t handle, const ShareKey* key, int device);
  void retained(uint64_t handle);
  void released(uint64_t handle);
  void mapped(uint64_t addr, uint64_t bytes, uint64_t handle);
  // Every mapping that starts inside [addr, addr + bytes) ends (the driver
  // unmaps whole mappings only).
  void unmapped(uint64_t addr, uint64_t bytes);
  // The device's context was reset: its handles went with it.
  void forget_device(int device);

  // `device`'s handles the program holds or maps: their bytes, and how many.
  struct Resident {
    uint64_t bytes = 0;
    uint64_t handles = 0;
  };
  Resident resident(int device);

 private:
  struct Handle {
    uint64_t bytes = 0;
    int device = 0;
    int refs = 0;
    int maps = 0;
    uint64_t allocation = 0;  // handles of one allocation share it
    bool bytes_known = true;  // false: an import placed nowhere (its mappings tell)
  };
  struct Export {
    uint64_t allocation = 0;
    uint64_t bytes = 0;
    int device = 0;
  };
  struct Mapping {
    uint64_t bytes = 0;
    uint64_t handle = 0;
  };
  // REQUIRES: mutex_ held. Drops the handle once neither holds it.
  void settle(std::unordered_map<uint64_t, Handle>::iterator it);

  std::mutex mutex_;
  std::unordered_map<uint64_t, Handle> handles_;
  std::map<uint64_t, Mapping> maps_;  // by address
  std::map<ShareKey, Export> exports_;
  uint64_t next_allocation_ = 1;
};

}  // namespace pagefast::policy
