// tests/fakecuda/state.h: the emulated driver state (devices, contexts,
// allocations, VMM objects, streams and events) and the helpers every entry
// point uses: the init and context checks, address lookup, range validation,
// stream work queues and the stream-capture rules.
//
// One mutex guards everything (a test double: simplicity over speed). Every
// helper here REQUIRES: the caller holds state().mu, unless it says
// otherwise. Objects handed out as handles (contexts, streams, events) are
// validated against their registry before they are dereferenced, so a bad
// handle is an error code, never a crash.
#pragma once

#include "api_list.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "config.h"

namespace fake {

constexpr size_t kMiB = size_t(1) << 20;
// VMM granularity, minimum = recommended, as on the H200 (docs/DRIVER-FACTS.md).
constexpr size_t kGranularityBytes = 2 * kMiB;
// cuMemAlloc: small blocks come back this far apart, blocks from
// kLargeBlockBytes up are 2 MiB-aligned (docs/DRIVER-FACTS.md "alignment").
constexpr size_t kSmallAlignBytes = 512;
constexpr size_t kLargeBlockBytes = 1 * kMiB;
// Small blocks are carved out of slabs of this size, never reusing an
// address within a slab, so a stale pointer stays distinguishable.
constexpr size_t kSlabBytes = 2 * kMiB;
constexpr int kDriverVersion = 13000;

using Lock = std::unique_lock<std::mutex>;
using Clock = std::chrono::steady_clock;

struct Context;
struct Stream;
struct Event;

// cuMemAlloc memory lives in the device's memory file (Device::memory_fd),
// mapped shared, so that another process can map the same pages for legacy
// IPC (ipc.cpp). A file range that was ever exported is never reused: an
// importer may still map it after the exporter's cuMemFree.
struct Slab {
  uintptr_t base = 0;
  uint64_t file_offset = 0;
  size_t used_bytes = 0;  // bump offset
  int live_blocks = 0;
  bool exported = false;  // a block of it went out through cuIpcGetMemHandle
};

// One cuMemAlloc allocation.
struct Block {
  uintptr_t base = 0;
  size_t bytes = 0;          // as requested: the allocation's size
  size_t charged_bytes = 0;  // counted against the device total
  int device = 0;
  Context* ctx = nullptr;
  uint64_t buffer_id = 0;
  Slab* slab = nullptr;         // null: a block of its own (large)
  uint64_t file_offset = 0;     // of `base` in the device's memory file
  bool exported = false;        // large blocks: went out through cuIpcGetMemHandle
  bool stream_ordered = false;  // from cuMemAllocAsync
};

// One cuMemCreate allocation: a range of the device's memory file, or, when
// created shareable (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) or imported,
// a memory file of its own that can cross processes (share.cpp).
struct Physical {
  CUmemGenericAllocationHandle handle = 0;
  int device = 0;
  size_t bytes = 0;
  uint64_t file_offset = 0;
  int own_fd = -1;      // >= 0: its own memory file (offset 0), else the device's
  uint64_t inode = 0;   // of own_fd: finds it again when its fd is imported
  bool charged = true;  // counted against the device total (imports are not)
  CUmemAllocationProp prop{};
  int handle_refs = 0;  // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  int mappings = 0;
  uint64_t block_id = 0;  // CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID
};

// One cuMemMap call.
struct Mapping {
  uintptr_t base = 0;
  size_t bytes = 0;
  Physical* phys = nullptr;
  size_t offset = 0;
  uint64_t buffer_id = 0;
  std::vector<unsigned long long> access;  // CUmemAccess_flags per device
};

// One cuMemAddressReserve range and the mappings inside it, by address.
struct Reservation {
  uintptr_t base = 0;
  size_t bytes = 0;
  std::map<uintptr_t, Mapping> mappings;
};

// One cuIpcOpenMemHandle mapping of another process's cuMemAlloc block.
struct Import {
  uintptr_t base = 0;      // what cuIpcOpenMemHandle returned: the block's start
  size_t bytes = 0;        // the block's size
  uintptr_t map_base = 0;  // the page-aligned mapping around it
  size_t map_bytes = 0;
  Context* ctx = nullptr;
  int device = 0;
  uint64_t buffer_id = 0;  // this process's id of the mapping
  int refs = 0;            // opens - closes of the same handle
  // Identifies the exported block: exporter pid, its start time, its buffer id.
  int exporter_pid = 0;
  uint64_t exporter_start = 0;
  uint64_t exporter_buffer_id = 0;
};

struct Device {
  int ordinal = 0;
  uint64_t total_bytes = 0;
  // Everything that takes device memory: cuMemAlloc blocks, cuMemCreate
  // handles, loaded modules, and what fakecuda_set_external_bytes says
  // other processes hold (external_bytes; used_bytes may then pass total).
  uint64_t used_bytes = 0;
  uint64_t external_bytes = 0;
  // FAKECUDA_SHARED_MEM: the memory every process sharing the file has in
  // use on this device (this one's included), or NULL. Change used_bytes
  // only through charge() and uncharge(), and read the device's use with
  // device_used().
  std::atomic<uint64_t>* shared_used = nullptr;
  // Stream-ordered memory freed with cuMemFreeAsync: the driver's pool
  // keeps it (in used_bytes) until the next synchronization, as a pool with
  // the default release threshold of 0 does (docs/DRIVER-FACTS.md).
  uint64_t retained_bytes = 0;
  PciAddress pci;
  Context* primary = nullptr;
  int primary_refs = 0;
  unsigned primary_flags = 0;
  Slab* slab = nullptr;  // the slab small blocks are carved from now
  // Physical memory: one sparse memfd per device, ranges handed out first
  // fit, holes punched on free (one file, not one per handle, so a test
  // with thousands of handles does not run out of file descriptors).
  int memory_fd = -1;
  uint64_t file_end = 0;
  std::map<uint64_t, uint64_t> file_holes;  // offset -> bytes, below file_end
  // What cuCtxSynchronize answers with a context of this device current
  // (fakecuda_set_sync_error): a device that cannot be synchronised.
  CUresult sync_error = CUDA_SUCCESS;
};

struct Context {
  int device = 0;
  bool primary = false;
  bool alive = false;  // false: destroyed, or a primary context not retained
  unsigned flags = 0;
  Stream* null_stream = nullptr;  // the legacy default stream of this life
  // Per-thread default streams (CU_STREAM_PER_THREAD, or 0 given to a
  // _ptsz/_ptds function), one per host thread, made on first use. They are
  // blocking streams: the legacy stream waits for them.
  std::map<std::thread::id, Stream*> per_thread;
  std::set<Context*> peers;  // contexts whose memory this one may access
};

// Work queued on a stream runs on that stream's worker thread, in order,
// with the state lock held (the delay before it is waited without it).
struct Op {
  unsigned delay_ms = 0;
  int gate_fd = -1;  // >= 0: first waits (unlocked) until a byte can be read from it
  std::function<void(Lock&)> run;
};

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool alive = true;
  bool is_null = false;
  std::deque<Op> queue;
  bool running = false;  // an op has been taken off the queue and not finished
  bool worker = false;   // a worker thread is draining the queue
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  uint64_t capture_id = 0;
};

struct Event {
  unsigned flags = 0;
  bool alive = true;
  int op_refs = 0;          // queued ops that point at it; freed at zero once dead
  uint64_t generation = 0;  // bumped by each record, so a stale op cannot complete it
  bool recorded = false;
  bool done = true;  // an event never recorded counts as complete
  Clock::time_point when{};
};

struct State {
  std::mutex mu;
  std::condition_variable cv;  // any op finished, any event completed
  std::atomic<bool> initialized{false};
  Config config;
  std::vector<Device> devices;
  std::set<Context*> contexts;  // every context ever made (never freed)
  std::set<Stream*> streams;    // live streams, and destroyed ones with work left
  std::set<Event*> events;      // live events
  std::map<uintptr_t, Block*> blocks;
  std::map<uintptr_t, Reservation*> reservations;
  std::map<CUmemGenericAllocationHandle, Physical*> handles;  // handle_refs > 0
  std::map<uint64_t, Physical*> shareable;  // by inode: live Physicals with own_fd
  std::map<uintptr_t, Import*> imports;     // by map_base
  uint64_t next_buffer_id = 1;
  uint64_t next_capture_id = 1;
  CUmemGenericAllocationHandle next_handle = 0x1000;
};

// The process-wide state. Never destroyed, so detached worker threads and
// static destructors elsewhere can never see it half torn down.
State& state();

// --- checks at the top of an entry point ----------------------------------
// May be called without the lock.
inline bool initialized() { return state().initialized.load(std::memory_order_acquire); }

#define FAKE_REQUIRE_INIT()                                        \
  do {                                                             \
    if (!::fake::initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

#define FAKE_TRY(expr)                                             \
  do {                                                             \
    const CUresult fake_try_result_ = (expr);                      \
    if (fake_try_result_ != CUDA_SUCCESS) return fake_try_result_; \
  } while (0)

bool valid_device(int ordinal);

// The calling thread's context stack (no lock needed: thread-local).
std::vector<Context*>& context_stack();
// The calling thread's cuThreadExchangeStreamCaptureMode mode.
CUstreamCaptureMode& thread_capture_mode();

// Set while a per-thread variant (_ptsz/_ptds) runs: stream 0 then means the
// per-thread default stream. The exported shells of P rows hold one.
struct PerThreadCall {
  PerThreadCall();
  ~PerThreadCall();
  PerThreadCall(const PerThreadCall&) = delete;
  PerThreadCall& operator=(const PerThreadCall&) = delete;
  bool outer;
};
bool in_per_thread_call();

// Top of the stack: CUDA_ERROR_INVALID_CONTEXT if none,
// CUDA_ERROR_CONTEXT_IS_DESTROYED if it is dead.
CUresult current_context(Context** out);
// Any context handle the fake made (alive or not).
bool known_context(CUcontext handle);

// 0 and CU_STREAM_LEGACY name the current context's legacy default stream,
// CU_STREAM_PER_THREAD (and 0 in a per-thread variant) this thread's
// per-thread default stream; others must be live streams
// (CUDA_ERROR_INVALID_HANDLE).
CUresult resolve_stream(CUstream handle, Stream** out);
Stream* new_stream(Context* ctx, unsigned flags, int priority, bool is_null);
bool known_event(CUevent handle);

// Marks the context dead and frees what lives in it (its cuMemAlloc blocks,
// its streams). Waits for its queued work first; may drop the lock meanwhile.
void destroy_context_resources(Lock& lock, Context* ctx);

// --- memory ------------------------------------------------------------------
Block* find_block(uintptr_t addr);  // the block containing addr
Reservation* find_reservation(uintptr_t addr);
Mapping* find_mapping(Reservation* reservation, uintptr_t addr);
bool is_device_address(uintptr_t addr);  // inside a block or a reservation
Import* find_import(uintptr_t addr);     // the import whose block contains addr
void free_block(Block* block);
// Device memory in use: this process's, and with FAKECUDA_SHARED_MEM every
// process's that shares the file (REQUIRES: the state's lock).
uint64_t device_used(const Device& device);
void charge(Device& device, uint64_t bytes);
void uncharge(Device& device, uint64_t bytes);
// Maps FAKECUDA_SHARED_MEM's counters into the devices (cuInit).
void attach_shared_memory(State& st);
// The memory of stream-ordered frees goes back to the device (a
// synchronization on a context of `device`; -1: every device).
void release_retained(int device);
// Unmaps an import and forgets it (its last close, or its context's end).
void free_import(Import* import);
// The file a Physical's memory lives in.
int physical_fd(const Physical& phys);
// A range of the device's memory file (created on first use): first fit
// among the holes, else the end of the file, which grows. False on failure.
bool allocate_file_range(Device& device, uint64_t bytes, uint64_t* offset);
// Gives the pages back (the range reads as zeros again) and the range for reuse.
void free_file_range(Device& device, uint64_t offset, uint64_t bytes);
// Frees a Physical once it has neither handle references nor mappings.
void maybe_free_physical(Physical* phys);
// requestedHandleTypes of a CUmemAllocationProp: CUDA_SUCCESS for none or
// POSIX_FILE_DESCRIPTOR (where supported), NOT_SUPPORTED for the types the
// fake lacks, INVALID_VALUE for bits that are no type.
CUresult check_handle_types(unsigned long long requested);
// Gives a new Physical (bytes, device, prop set) a memory file of its own.
bool create_shareable_memory(Physical* phys);
// Closes it (when the Physical goes).
void release_shareable_memory(Physical* phys);

enum class Access { kRead, kWrite };
// Is [addr, addr+bytes) one live block, one import, or contiguous mappings of one
// reservation that `device` (-1: any device) may access as asked? Fills
// `identity` (buffer ids covered) so that a later check can tell the memory
// was freed and reused in between. CUDA_ERROR_INVALID_VALUE if not.
CUresult check_device_range(uintptr_t addr, size_t bytes, Access access, int device,
                            std::vector<uint64_t>* identity);

// --- streams and capture -----------------------------------------------------
bool stream_pending(const Stream* stream);
// Queues `op` behind the stream's work and makes sure a worker drains it.
void enqueue(Lock& lock, Stream* stream, Op op);
// Blocks (dropping the lock) until no stream accepted by `which` has work.
void wait_streams_idle(Lock& lock, const std::function<bool(const Stream*)>& which);
// The wait of the legacy default stream: for the context's blocking streams.
void wait_legacy_idle(Lock& lock, Context* ctx);
// The wait before a synchronous copy or memset: the legacy one, or in a
// per-thread variant that of this thread's per-thread default stream.
void wait_default_stream_idle(Lock& lock, Context* ctx);
// For calls that are not allowed while a capture is going on (they would
// synchronize with it): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the
// captures concerned are invalidated, if this thread is not in relaxed mode
// and a capture in global mode, or one in thread-local mode begun by this
// thread, is active.
CUresult check_capture_unsafe();
// What an asynchronous operation on `stream` does about capture:
// CUDA_SUCCESS and *captured = true when it is captured instead of run,
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED after an invalidation.
CUresult capture_disposition(Stream* stream, bool* captured);

void record_violation(const char* what, uintptr_t addr, size_t bytes);
// Whether host [addr, addr + bytes) starts inside a cuMemHostRegister
// registration and runs past its end (host.cpp).
bool host_range_crosses_registration(uintptr_t addr, size_t bytes);
unsigned long long violation_count();  // no lock needed

}  // namespace fake
