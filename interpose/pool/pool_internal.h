// interpose/pool/pool_internal.h: what the pool glue's files (pool.cpp,
// devices.cpp, the C API's side pool_capi.cpp, the service threads, sleep,
// contexts.cpp, the own-VMM glue) need from each other, beyond
// interpose/pool_api.h. Nothing outside interpose/pool/ includes it.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "interpose/pool/process.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/device_pool.h"
#include "policy/state.h"

namespace pagefast::pool {

class DeviceMemory;

// A pool's device is always in range: the flag alone, no bounds check.
inline bool retired(const policy::DevicePool* pool) {
  return g_process.retired[pool->device()].load(std::memory_order_relaxed);
}

// The pool's record of an address, or NULL when the address is not pool
// memory any more: never made by the pool, or made by a retired pool,
// whose memory the driver freed with the context.
inline policy::Span* live_span(CUdeviceptr dptr) {
  policy::Span* span = policy::global_page_map().lookup(dptr);
  return span && !retired(span->pool) ? span : nullptr;
}

// pool.cpp: whether the calling thread has a current context. The driver
// answers CUDA_ERROR_INVALID_CONTEXT to the pointer queries and a bad free
// on a thread without one; so does the pool, by leaving them to it.
bool has_context();

// devices.cpp: the pool of `device`, made (with its provider, prewarmed)
// at the first call; *memory: the device's memory. NULL when the device
// cannot be pooled.
policy::DevicePool* pool_made(const RealDriver* real, CUdevice device, DeviceMemory** memory);

// Whether the pool glue is on (configured on, and not a forked child):
// active() in process.h. One line to pagefast's log, formatted as printf
// formats (nothing before configure or with no sink); devices.cpp.
void log_line(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// pool.cpp: frees pool blocks on the program's behalf, from a thread of
// pagefast's or a hook (a block an IPC importer held, the blocks of a
// destroyed context), through a temporary thread cache per device; an
// address that is no live block is skipped.
void free_on_behalf(const uint64_t* blocks, size_t count);
// pool.cpp: `context` (of `device`) was destroyed: the calling thread's
// memory of its context and the device's provider forget it.
void forget_context(int device, CUcontext context);

// contexts.cpp: the number of `context` (of `device`) for the blocks
// allocated in it (policy::ContextTag), made at its first allocation;
// kNoContextTag when too many contexts live at once or every number was
// used. Takes a lock: the slow half of the context lookup only.
policy::ContextTag context_tag(CUcontext context, int device);

// service_threads.cpp: the exit stop of pagefast's threads that call the
// driver (the trim thread, the pagefast-vmm worker). register_exit_stop
// once, when the first of them starts (after the CUDA runtime registered
// its own exit handler, so ours runs first). Each step of such a thread:
// enter_step() (false once the exit stop has come: the thread then calls
// leave_step() and ends), its work, leave_step(). At exit the stop is
// raised and the exit waits up to 2 s for steps under way.
void register_exit_stop();
bool enter_step();
void leave_step();
bool exit_stopping();

// service_threads.cpp: wakes the pagefast-grow thread (started at the
// first call), which makes every asked pool's step of growth ahead
// (DevicePool::set_grow_ahead). No lock of a pool may be held.
void wake_grow_ahead();

// service_threads.cpp: the pagefast-trim thread (once; not with
// release_delay off and no headroom).
// for_prelock: a region that keeps its contents was made, whose host
// memory the thread page-locks ahead (prelock.cpp) also when nothing else
// needs it.
void start_trim_thread(const PoolConfig& config, bool for_prelock = false);
// The trim thread's round: host memory page-locked ahead of the sleep of
// the regions that keep their contents (prelock.cpp). true: a whole
// step was page-locked and more may wait (the next round comes at once).
bool prelock_step();
// The fork handler's part for the service threads (after_fork_child).
void service_threads_after_fork_child();

// tags.cpp: every slot is made and a region of a new (name, keep) begins:
// the slot of an empty tag goes to it (region.h), with a region of it
// opened for the caller. Returns the slot, or 0 when none is empty. Takes
// the sleep's lock (waits for a sleep or wake under way).
int reuse_tag_slot(const char* name, unsigned policy);
// pagefast-ctl's requests (ipc::set_control; ops of ipc_wire.h): kOpSleep
// (arg: the flags), kOpWake, kOpStatus.
int control_op(uint16_t op, uint64_t arg);
// pagefast-ctl's requests of one tag (ipc::set_tag_control; ipc_wire.h):
// kOpSleepTag (flags: PAGEFAST_SLEEP_KEEP, _FAIL, _DISCARD), kOpWakeTag;
// answers as pagefast_sleep_tag / pagefast_wake_tag, with
// ipc::wire::kControlNoTag (-3) for a tag no region opened.
int tag_control_op(uint16_t op, uint64_t flags, const char* tag);
// Another pagefast process ran short on the device with PCI bus id
// `bus_id` (ipc::ask_neighbours): every idle byte this process holds there
// goes back. Returns the MiB released (0: none, or not a device of ours).
int give_back_for_neighbour(const char* bus_id);
// The program released memory into the own-VMM cache: each device's idle
// memory beyond keep_idle goes back (DeviceBudget::give_back_idle), as a
// free into the pool does. No lock of the cache held.
void give_back_idle();

}  // namespace pagefast::pool
