// interpose/pool/own_vmm.h: the program's own VMM calls (docs/OWN-VMM.md):
// the own-VMM cache's glue (own_vmm.cpp, over policy/own_vmm/cache.h) and
// the ledger's (own_vmm_ledger.cpp, over policy/own_vmm/ledger.h).
//
// The cache: the hooks call its functions below only when on()
// (vmm_cache:on with the pool on, not a forked child); off, they forward:
// one relaxed load and a branch, no lock, no lookup. Every call answers
// as the driver would (the driver's own result where it is asked). An
// exception inside (out of host memory) stops the cache for good: it
// hands the driver the program's view back, logs one line, and the call
// answers CUDA_ERROR_OUT_OF_MEMORY; later calls are forwarded. The
// cache's memory of a device is one holder of that device's budget
// (interpose/pool/device_memory.h), beside the pool: the budget has it
// released when the pool grows under a limit or the driver runs out of
// memory, and cuMemCreate out of memory reclaims the device's idle memory
// (the cache's, then the pool's) through the budget.
//
// The ledger: one per process, of every handle of device memory the
// program made or imported. The hooks note each successful call in it
// (created ... unmapped below) while the pool is on and the cache off;
// with the cache on, the cache notes every call it answers under its lock
// (it decides with the same facts), and its glue below notes the calls it
// forwards. Sleep reads what stays resident (resident_bytes).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "interpose/pool/process_state.h"
#include "policy/config.h"
#include "policy/own_vmm/device_share.h"
#include "policy/own_vmm/ledger.h"

namespace pagefast::pool {
class DeviceMemory;
}

namespace pagefast::pool::own_vmm {

inline bool on() { return g_process.vmm.on.load(std::memory_order_relaxed); }

// From pool::configure, after it set the process object's configuration
// and log sink (which the own-VMM glue reads there): on when the pool and
// vmm_cache are both on.
void configure();
// The device's primary context was reset or destroyed: the cache, then the
// ledger, forget that device's handles (no driver call; the driver answers
// for them).
void on_device_reset(int device);
// A forked child: everything is forwarded from now on.
void switch_off();

CUresult create(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop,
                unsigned long long flags);
CUresult release(CUmemGenericAllocationHandle handle);
CUresult map(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
             unsigned long long flags);
CUresult unmap(CUdeviceptr ptr, size_t bytes);
CUresult set_access(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count);
CUresult address_free(CUdeviceptr ptr, size_t bytes);
CUresult retain(CUmemGenericAllocationHandle* handle, void* addr);
CUresult export_handle(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags);
CUresult properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle);
// cuMemAddressReserve succeeded: growth ahead stays inside such ranges.
// The pagefast-trim thread's step: cached handles unused for release_delay
// go back to the driver (policy::own_vmm::Cache::decay_step). Returns the
// wait before the next step.
uint64_t decay_step();
// cuMemAddressReserve, before the driver: true with *base when a range the
// program freed is handed out again (policy::own_vmm::Cache::take_range).
bool take_range(CUdeviceptr* base, size_t bytes, size_t alignment, CUdeviceptr hint, unsigned long long flags);
void note_reserved(CUdeviceptr base, size_t bytes);
// The handle is mapped where the cache cannot follow (a sparse array):
// never cached or deferred again.
void mark_shared(CUmemGenericAllocationHandle handle);
// Before a pointer query (cuPointerGetAttribute(s), cuMemGetAddressRange):
// a deferred mapping at `ptr` is unmapped for real first.
void before_query(CUdeviceptr ptr);

// A device's memory joins the cache when it is made (policy/own_vmm/device_share.h):
// `view` is its budget's, which the cache asks for its room on the device;
// the answer is the cache's holder of the device for that budget (lives
// as long as the process), NULL when there is no cache.
policy::Holder* join(int device, policy::own_vmm::BudgetView* view);
// {"cached_bytes": .., "create_hits": .., ...}, or "null" when off.
std::string stats_json();

// The ledger (own_vmm_ledger.cpp). The hooks' notes of the program's
// successful cuMemCreate / cuMemExportToShareableHandle /
// cuMemImportFromShareableHandle / cuMemRetainAllocationHandle /
// cuMemRelease / cuMemMap / cuMemUnmap; `shareable` / `os_handle` as the
// program passed them. Device memory only. `by_cache`: the cache noted the
// creation (a cached handle, or one it will cache): only the region slot
// of the call is noted.
void created(CUmemGenericAllocationHandle handle, size_t bytes, const CUmemAllocationProp* prop, bool by_cache = false);
void exported(CUmemGenericAllocationHandle handle, const void* shareable, CUmemAllocationHandleType type);
void imported(CUmemGenericAllocationHandle handle, void* os_handle, CUmemAllocationHandleType type);
void retained(CUmemGenericAllocationHandle handle);
void released(CUmemGenericAllocationHandle handle);
void mapped(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle, size_t offset = 0);
void unmapped(CUdeviceptr ptr, size_t bytes);
// The program bound memory to a multicast object (cuMulticastBindMem: the
// handle, the driver's value; cuMulticastBindAddr: what it maps there):
// sleep leaves it resident and names it; the cache never takes it.
void bound(CUmemGenericAllocationHandle handle);
void bound_at(CUdeviceptr ptr, size_t bytes);
// What of `device` the program still holds or maps (0 with the pool off).
uint64_t resident_bytes(int device);

// Sleep and wake of the program's own VMM memory of one device by region
// slot (own_vmm_sleep.cpp over policy/own_vmm/handle_sleep.h, docs/SLEEP.md):
// every handle the program created on `memory`'s device in a region of
// `slot` (interpose/pool/region.h; 0: outside any region). Called by the
// device's sleep (DeviceMemory::sleep, device_sleep.cpp) after the pool
// of that slot slept, under sleep's lock. Sleep synchronises every
// context that used the device (the provider's rule, as the pool's),
// copies what keep asks to host memory on the device's copy threads,
// unmaps each of the handle's mappings and releases the driver's memory;
// the program's handle values and virtual addresses stay. Wake creates
// fresh memory of the same properties, maps it where the mappings were
// with the same access, and restores the contents; from then on the
// program's handle values are translated to the driver's on every call
// that takes one.
struct SleepAnswer {
  int status = 0;               // 0 done, 1 some memory stayed resident (logged)
  uint64_t slept_bytes = 0;     // released to the driver
  uint64_t kept_bytes = 0;      // of those, contents in host memory
  uint64_t resident_bytes = 0;  // of the slot's memory, what stayed (and why: the log)
};
// `keep_modes`: policy::kSleepKeep (the contents kept), with where
// (policy::kSleepToDisk, kSleepHostRelease; sleep_gate.h); 0 discards.
SleepAnswer sleep_device(DeviceMemory& memory, int slot, unsigned keep_modes);
// 0 awake (also when not asleep); -1 the driver refused: every handle of
// the device's slot still asleep, call it again.
int wake_device(DeviceMemory& memory, int slot);
// The sizes of the next keep sleep's copies of the program's own VMM
// memory on `device` (one per mapping of each handle it can sleep, in the
// slots whose regions keep their contents in host memory kept between
// sleeps), appended to *sizes: what prelock.cpp page-locks ahead.
void keep_sizes(int device, std::vector<uint64_t>* sizes);
// The slot's own-VMM memory now, over every device.
struct SlotBytes {
  uint64_t resident = 0;  // mapped or held, on the device
  uint64_t asleep = 0;    // released by sleep
  uint64_t kept = 0;      // of asleep, contents in host memory
};
SlotBytes slot_bytes(int slot);

// Sleep's access to the cache (own_vmm.cpp): the cache lets go of a
// handle sleep takes (policy::own_vmm::Cache::disown: true when the cache
// tracked it), and learns of a mapping wake made (note_foreign).
bool disown(CUmemGenericAllocationHandle handle);
void note_foreign(CUdeviceptr ptr);

// Translation of the program's handle values (own_vmm_translate.cpp,
// policy/own_vmm/ledger.h "Asleep"): while a handle sleeps, or a woken one's
// value is an alias of the driver's, the hooks of the calls that take or
// give a handle go through these, which translate the value, answer for a
// handle asleep, and otherwise make the call through `call` (the hook's
// own way: the cache or the driver, and the ledger's note) with the
// driver's value. Before the first sleep, and again once the program
// holds nothing of what slept (Ledger::translates), translating() is
// false (one relaxed load and a branch) and the hooks make their call
// directly; a forked child never translates.
inline bool translating() { return g_process.vmm.translating.load(std::memory_order_relaxed); }
struct HandleCall {
  CUresult (*fn)(const void* context, CUmemGenericAllocationHandle* handle);
  const void* context;
  CUresult operator()(CUmemGenericAllocationHandle* handle) const { return fn(context, handle); }
};
// `f(CUmemGenericAllocationHandle*)`: in/out, the driver's value.
template <class F>
HandleCall handle_call(const F& f) {
  return HandleCall{[](const void* c, CUmemGenericAllocationHandle* h) { return (*static_cast<const F*>(c))(h); }, &f};
}
CUresult translated_create(CUmemGenericAllocationHandle* handle, HandleCall call);
CUresult translated_import(CUmemGenericAllocationHandle* handle, HandleCall call);
CUresult translated_retain(CUmemGenericAllocationHandle* handle, void* addr, HandleCall call);
CUresult translated_release(CUmemGenericAllocationHandle handle, HandleCall call);
CUresult translated_map(CUdeviceptr ptr, size_t bytes, CUmemGenericAllocationHandle handle, HandleCall call);
CUresult translated_unmap(CUdeviceptr ptr, size_t bytes, HandleCall call);
CUresult translated_address_free(CUdeviceptr ptr, size_t bytes, HandleCall call);
CUresult translated_export(CUmemGenericAllocationHandle handle, HandleCall call);
// cuMulticastBindMem: as export (a handle asleep answers ILLEGAL_STATE).
CUresult translated_bind(CUmemGenericAllocationHandle handle, HandleCall call);
// cuMemSetAccess over mappings asleep: recorded, set at wake (a sleep that
// lands between the program's map and its set access).
CUresult translated_set_access(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count,
                               HandleCall call);
CUresult translated_properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle, HandleCall call);

// The process's ledger (never destroyed), which the cache is made with.
policy::own_vmm::Ledger& ledger();

}  // namespace pagefast::pool::own_vmm
