// interpose/pool_api.h: the contract between the driver entry points
// (hooks.cpp) and the pool (pool.cpp, on top of policy/ and the VMM
// provider). Each try_* function returns true when the pool answered the
// call (the answer is in *result); false means "not mine": the entry point
// then forwards the call to the real driver untouched.
//
// All functions are safe to call from any thread, never throw, and never
// call CUDA from a static constructor or destructor.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "interpose/pagefast.h"
#include "policy/config.h"
#include "policy/pool_stats.h"
#include "policy/state.h"

namespace pagefast::policy {
class DevicePool;
}

namespace pagefast::pool {

// CUdevice ordinals the pool serves; a larger one is forwarded. Every
// per-device table of the pool's glue has this many entries.
constexpr int kMaxDevices = 64;

// Called once, before any other function, with the parsed configuration.
// When config.enabled is false, every try_* returns false.
void configure(const PoolConfig& config, LogSink log);
// The process's fork handler, in the child (interpose/runtime.cpp): the
// child has the parent's memory but not its CUDA contexts, so the pool,
// the own-VMM cache and the service threads' exit stop switch off and
// everything is forwarded.
void after_fork_child();
// The same for sleep and regions (sleep.cpp): their locks, which a thread
// of the parent may have held at the fork, are made anew in the child;
// the child's sleep and wake answer -1 at once.
void sleep_after_fork_child();

// The pool of a device ordinal, or NULL when none was made (no allocation
// there yet, pool off, device not poolable or retired, or a forked
// child). Lock-free.
policy::DevicePool* pool_for_device(int device);
// Whether `pool` is still a live pool of its device (its own or a
// region's): false once the device was reset and its pools retired.
bool pool_live(const policy::DevicePool* pool);

// Per tag (interpose/pool/region.h, docs/SLEEP.md): the figures of one
// (tag, policy) slot over every device, the pool's and the program's own
// VMM memory together, for the stats document, the live segment and
// Prometheus. Counters never go back while the slot has its tag (a slot
// an empty tag gave back to a new tag starts again from 0: a new name);
// byte figures are the memory's, so a sleep moves bytes from resident to
// asleep and nothing reads as a restart.
struct TagFigures {
  const char* name = nullptr;  // the slot's name: copy it at once (an empty tag's slot may be renamed)
  bool keep = false;           // the regions' policy: contents kept at sleep
  int slot = 0;
  bool asleep = false;
  PAGEFAST_TAG_FIELDS(PAGEFAST_TAG_MEMBER)  // policy/tags.h
};
// Fills out[0..max) in slot order; returns how many tags there are (which
// may be more than max). Never waits for a lock held long (safe while a
// sleep runs: it reads what the last step left).
int tag_figures(TagFigures* out, int max);
// The pools of memory made outside any region (one per pooled device)
// that are awake now: with every tag asleep, whether the process is
// partly asleep all the same. Lock-free.
int untagged_pools_awake();

// cuMemAlloc_v2. REQUIRES dptr != NULL and bytes > 0: the hook leaves
// those calls to the driver, which answers them byte for byte. The pool's
// answer, or forward's (the driver's) where it is not poolable here (pool
// off, failed to start, no current context, ...). A tail call from the
// hook, so that a pool hit is this one function's frame.
using AllocForward = CUresult (*)(CUdeviceptr* dptr, size_t bytes);
CUresult alloc_or(CUdeviceptr* dptr, size_t bytes, AllocForward forward);
// cuMemAllocPitch_v2 inside a region (interpose/pool/region.h): the pitch
// is the driver's (learnt from an allocation of its own, freed at once),
// and the region's pool holds pitch * height bytes, so that the memory
// carries the region's tag. false outside a region, or when the pool does
// not answer: the driver then allocates, untagged.
bool try_alloc_pitched(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height, unsigned element_bytes,
                       CUresult* result);
// cuMemFree_v2 of a non-NULL address: the pool's answer, or forward's
// when dptr is not inside any pool range (as alloc_or).
using FreeForward = CUresult (*)(CUdeviceptr dptr);
CUresult free_or(CUdeviceptr dptr, FreeForward forward);
// cuMemFreeAsync(_ptsz) of a pool block: freed as cuMemFree frees it (the
// block is reused only after a synchronisation that follows this call, so
// after the stream's earlier work). false when dptr is not pool memory, or
// when `stream` is being captured (the driver answers for a capture).
bool try_free_async(CUdeviceptr dptr, CUstream stream, CUresult* result);
// The forwarded calls' first question, inline: false when no pool ever
// mapped the granule of `dptr` (the page map, policy/page_map.h), so that
// try_free_async, try_address_range and patch_pointer_attribute would all
// decline; true asks them.
inline bool may_own(CUdeviceptr dptr) { return policy::global_page_map().lookup(dptr) != nullptr; }
// The attributes patch_pointer_attribute answers for pool memory.
inline bool patched_attribute(CUpointer_attribute attribute) {
  return attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
         attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID || attribute == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
}
// cuMemGetAddressRange_v2 for an address inside a pool range.
bool try_address_range(CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr, CUresult* result);
// cuPointerGetAttribute(s): the pool answers RANGE_START_ADDR, RANGE_SIZE,
// BUFFER_ID, IS_LEGACY_CUDA_IPC_CAPABLE for its blocks after the real call.
// Called after the real driver answered CUDA_SUCCESS; patches *data.
void patch_pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr dptr);
// Pool memory is cuMemAlloc memory to the program, and the pool's chunk
// handles are none of the program's: cuMemRetainAllocationHandle on a
// pool address and cuMemGetAllocationPropertiesFromHandle of a chunk
// handle answer CUDA_ERROR_INVALID_VALUE, as the driver answers for
// memory cuMemAlloc made and for a handle it never gave the program.
// owns_address: any address of a live pool (in a block or not);
// owns_handle: a walk over every pool's chunks under its device lock.
bool owns_address(CUdeviceptr dptr);
bool owns_handle(CUmemGenericAllocationHandle handle);
// cuIpcGetMemHandle on pool memory: pagefast's own handle (ipc.h), or a
// clear error where the device cannot share VMM memory.
bool try_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr, CUresult* result);
// cuIpcOpenMemHandle(_v2) of a pagefast handle, and cuIpcCloseMemHandle of
// what it opened (interpose/ipc/ipc.h). Work in every mode but PAGEFAST=0,
// also with the pool off: a process may import what another exported.
bool try_ipc_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result);
bool try_ipc_close(CUdeviceptr dptr, CUresult* result);
// Stream captures against the pool's synchronisations (docs/POOL.md
// "Never during a capture"): a count of the captures begun and not ended,
// and of the syncs running. A sync announces itself, then looks for
// captures (VmmProvider::synchronize); a capture announces itself, then
// waits for the syncs running: both with sequentially consistent
// read-modify-writes, so that no sync overlaps a capture.
struct CaptureGate {
  std::atomic<int> captures{0};
  std::atomic<int> syncs_in_flight{0};
};
extern CaptureGate g_capture_gate;  // constant-initialised (pool.cpp)
// Whether a stream capture is active anywhere in the process.
inline bool capture_active() { return g_capture_gate.captures.load(std::memory_order_acquire) > 0; }
// on_capture_begin's rare path: a sync announced itself first.
void wait_for_syncs_in_flight();
// cuMemGetInfo_v2 while pagefast is on: the driver's function `call`
// (the hook's), and when it succeeded, idle bytes added to free and the
// limit applied to total. Either pointer may be NULL. One function with
// the call in it, so that the hook ends in a tail call of it.
using MemGetInfoFn = CUresult (*)(size_t*, size_t*);
CUresult mem_info(MemGetInfoFn call, size_t* free_bytes, size_t* total_bytes);
// The driver answered a call CUDA_ERROR_OUT_OF_MEMORY: every byte pagefast
// holds idle on `device` (its pool's, the own-VMM cache's) goes back to
// the driver (policy/device_budget.h); kCurrentDevice: the calling
// context's device, or every device when there is no context. true when
// pagefast may have held memory there (whether this call or the trim
// thread gave it back): the caller then retries once. May synchronise the
// device.
constexpr int kCurrentDevice = -1;
bool reclaim_for_driver(int device = kCurrentDevice);
// The call was refused again after that: the other pagefast processes on
// the device give their idle memory back (DeviceBudget::from_neighbours,
// docs/IPC.md "Neighbours"). Returns the bytes they released (the caller
// retries once more when any). May wait seconds for a neighbour.
uint64_t reclaim_from_neighbours(int device = kCurrentDevice);
// The sequence every driver call refused for lack of memory follows:
// `first` was the answer; the call is made again after the device's idle
// memory went back, and once more after the neighbours' did.
template <typename Call>
__attribute__((noinline)) CUresult retried_out_of_memory(int device, CUresult first, Call call) {
  CUresult answer = reclaim_for_driver(device) ? call() : first;
  if (answer == CUDA_ERROR_OUT_OF_MEMORY && reclaim_from_neighbours(device)) answer = call();
  return answer;
}
// A managed allocation of `bytes` is about to be made (cuMemAllocManaged):
// its pages take device memory when the device first touches them, where
// an out-of-memory answer comes too late (a fault). Idle memory goes back
// first so that the device keeps `bytes` plus the headroom free, as far
// as pagefast's idle memory allows.
void relieve_for_managed(size_t bytes);
// The pagefast-trim thread's step for every device with a budget: free
// memory under the headroom gives idle memory back (DeviceBudget::relieve).
void relieve_headroom();
// Stream capture began / ended somewhere in the process: while any capture
// is active the pool never synchronises. on_capture_begin comes before the
// driver's call that begins it (and on_capture_end after it, when that
// failed), so that from then on no sync starts, and a sync already running
// has finished when it returns. Each on_capture_end ends one capture that
// on_capture_begin counted. Inline: one read-modify-write each, and a load.
inline void on_capture_begin() {
  g_capture_gate.captures.fetch_add(1, std::memory_order_seq_cst);
  if (__builtin_expect(g_capture_gate.syncs_in_flight.load(std::memory_order_seq_cst) > 0, 0))
    wait_for_syncs_in_flight();
}
inline void on_capture_end() { g_capture_gate.captures.fetch_sub(1, std::memory_order_seq_cst); }

// Peer access, after the real cuCtxEnablePeerAccess / cuCtxDisablePeerAccess
// succeeded: device `accessor` (the caller's current context) may now / may
// no longer access memory of device `owner` (the peer context's). The
// owner's pool re-applies access on every mapping and opens future ones
// to the new set; a pool made later starts with it. A mapping that refuses
// is logged once per call (a warning) and skipped: the driver's success
// stands (docs/POOL.md "Peer access").
void on_peer_access_enabled(int accessor, int owner);
void on_peer_access_disabled(int accessor, int owner);

// The primary context of `device` was reset or destroyed: the driver has
// freed that device's memory. The device's pool is retired (never touched
// again: its chunks may no longer exist) and the device is served by the
// driver from then on; addresses of the retired pool are no longer the
// pool's (calls on them go to the driver, which answers for them).
void on_device_reset(int device);

// cuCtxDestroy(_v2): the driver frees a context's memory with it, so the
// pool's blocks allocated in that context go back to the pool (through
// the quarantine: reused after a later synchronisation), and a later free
// of one answers as for any address that is no block. before_context_destroy
// takes the context's record out before the driver's call (a context the
// driver makes at the same address meanwhile gets a record of its own);
// after_context_destroy frees its blocks when the driver destroyed it, or
// puts the record back when it refused. No CUDA call but the provider's
// bookkeeping; a slow path (a walk over the pool's memory in use).
struct ContextDestroy {
  CUcontext context = nullptr;
  int device = -1;
  uint16_t tag = 0;  // policy::ContextTag; 0: the context allocated nothing here
};
ContextDestroy before_context_destroy(CUcontext context);
void after_context_destroy(const ContextDestroy& destroy, bool destroyed);

// The figures of device `device`'s pool; false when it has none. Counters
// and try-locks only; no CUDA (the live publisher calls it every 0.5 s).
bool stats_of(int device, policy::PoolStats* out);
// Device `device`'s sleep: 0 awake (or no pool), 1 every pool of it
// asleep (pagefast_sleep, or the sleep of every tag and the untagged
// memory), 2 some of its pools asleep (a tag's sleep) and others awake.
// One atomic load per pool.
int device_sleep_state(int device);

// The "pool" object of the stats JSON (an object text: {"devices": [{"device": 0, ...}]}).
// Reads counters only; no CUDA.
std::string stats_json();

// The memory report's per-device blocks (policy/pool_report.h), one per
// pool made so far; empty when there is none. Try-locks only; no CUDA:
// safe at exit.
std::string report_text();

// What the C API's exports (interpose/capi.cpp; interpose/pagefast.h)
// call, one each.
// sleep.cpp: sleep and wake of every pool (pagefast_sleep's answers),
// and of one tag's slots (region.h; NULL: everything; policy::kUnknownTag
// for a tag no region ever had); tags.cpp: whether a tag sleeps.
int sleep_all(unsigned flags);
int wake_all();
int asleep_count();
int sleep_tag(const char* tag, unsigned flags);
int wake_tag(const char* tag);
int tag_asleep(const char* tag);
// sleep.cpp: the kept host copy of an asleep range of pool memory
// (pagefast_kept_read's answers); disk_copy.cpp: the folder and the copy
// step of regions kept in files (pagefast_keep_disk_dir's).
int kept_read(const void* device_ptr, size_t bytes, void* out);
int keep_disk_dir(const char* dir, size_t chunk_bytes);
// pool_capi.cpp: the figures of a device into the C API's struct (-1: no
// pool); its idle memory given back now, the program's released VMM
// memory and the host memory sleep keeps page-locked too (-1: no pool);
// the regions of the calling thread (begin: 0, or -1 refused, logged).
int pool_stats_get(int device, pagefast_pool_stats* out);
int pool_trim(int device);
int region_begin(const char* tag, unsigned flags);
int region_end();
const char* region_current();
// tms_capi.cpp: torch_memory_saver's tms_pause and tms_resume.
int tms_pause(const char* tag);
int tms_resume(const char* tag);

}  // namespace pagefast::pool
