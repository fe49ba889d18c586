// interpose/ipc/ipc_registry.h: the exporter's registry of exports and
// holds, shared by its parts (internal to interpose/ipc/): ipc.cpp (the
// handle, the registry and its holds), ipc_open.cpp (the answer to an
// open) and ipc_sleep.cpp (what a sleep keeps resident). Everything here
// is guarded by registry().mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "interpose/ipc/ipc_internal.h"
#include "policy/device_pool.h"
#include "policy/node_recycler.h"

namespace pagefast::ipc::detail {

struct Export {
  int device;
  policy::DevicePool* pool;
  uint64_t base_addr;
  uint64_t bytes;
  uint64_t buffer_id;
  uint64_t first_granule_addr;
  policy::PieceList pieces;
  uint64_t holders = 0;  // holds over all holders
  bool freed = false;    // the program freed it while held
  // A sleep may have released the chunks `pieces` names (and the driver
  // may hand a released handle's value to new memory): they are read
  // again from the pool before the next open, never trusted.
  bool stale = false;
};

// What the sleeps of a device's pools keep resident: the chunks importers
// held when each began, by pool. While a pool is asleep (or its sleep call
// is under way: `beginning`), only its exports that lie wholly in them are
// opened; the other pools' exports open as usual.
struct SleepState {
  const policy::DevicePool* beginning = nullptr;
  struct Kept {
    const policy::DevicePool* pool;
    policy::ChunkHandle chunk;
  };
  std::vector<Kept> shared;  // the chunks each pool's last sleep kept
};

// Where the registry's maps take their nodes (ipc_state.h ExportMap ...):
// one recycler per node size (by_addr's and a holder's maps have the same
// nodes). Used under registry().mutex only, never freed, as the maps.
struct RegistryNodes {
  policy::NodeRecycler exports;  // by_id
  policy::NodeRecycler pairs;    // by_addr, and each holder's HoldMap
  policy::NodeRecycler holders;  // holds
  HoldMap::allocator_type hold_allocator() { return HoldMap::allocator_type(&pairs); }
};

// The registry's state (ipc_state.h State::Registry): `mutex` guards the
// rest but `exports`; the containers are made together (ensure_registry).
inline State::Registry& registry() { return ipc_state().registry; }

// REQUIRES registry().mutex. All of it or (out of memory: throws) none.
void ensure_registry();
// REQUIRES registry().mutex. Whether the memory of `pool`'s blocks may be
// asleep: the pool is asleep, or its sleep call is under way (its gate may
// not be closed yet, but what it releases was decided already).
bool pool_asleep(const SleepState& s, const policy::DevicePool* pool);
// REQUIRES registry().mutex. Whether every chunk of `e` is one the sleeps of
// its device keep resident.
bool all_shared(const SleepState& s, const Export& e);

}  // namespace pagefast::ipc::detail
