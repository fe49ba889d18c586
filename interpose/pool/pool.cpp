// interpose/pool/pool.cpp: interpose/pool_api.h's hot half over the
// policy: allocation, free, and the pointer queries, per thread through
// the last (context -> pool, cache) binding and a ThreadCache per device.
// The devices' memory is made and shared in devices.cpp.
//
// The hot path (alloc_or/free_or of a cached size, each one function with
// the policy's hit inline, policy/device_pool_hit.h) is: one load of the
// on-switch, for an allocation cuCtxGetCurrent (a thread-local read in
// the driver, no system call) and a compare with the thread's last
// context, for a free the page map, and the policy's thread-cache pop or
// quarantine push. The context's device is re-read
// with cuCtxGetDevice when the context changes and every
// kRevalidateEvery allocations (interpose/context_memo.h).
//
// Nothing here runs CUDA from a static constructor or destructor: the
// process state (process.h) is constant-initialised, pools are made on
// first use and never destroyed (process exit leaks them; the OS reclaims
// the memory).
#include <pthread.h>
#include <sched.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

#include "interpose/context_memo.h"
#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
#include "interpose/pool/region.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/device_pool.h"
#include "policy/page_map.h"

namespace pagefast::pool {
namespace {

using policy::AllocStatus;
using policy::DevicePool;
using policy::FreeStatus;
using policy::ThreadCache;

struct Binding {
  DevicePool* pool;
  ThreadCache* cache;
  policy::ContextTag context;  // the context's number (contexts.cpp)
};
struct ThreadState {
  ContextMemo<Binding> last;  // the current context's pool and cache
  ThreadCache* caches[kMaxDevices];
};
// initial-exec: one %fs-relative load; an 8-byte slot fits glibc's static
// TLS reserve even if the library is dlopen'ed rather than preloaded.
__attribute__((tls_model("initial-exec"))) thread_local ThreadState* t_state = nullptr;

void on_thread_exit(void* state) {
  ThreadState* ts = static_cast<ThreadState*>(state);
  t_state = nullptr;
  // No driver call here: a flush only moves blocks between host lists.
  if (active())
    for (ThreadCache* cache : ts->caches)
      if (cache) cache->pool->detach_thread(cache);
  std::free(ts);
}

void make_thread_key() { pthread_key_create(&g_process.thread_key, &on_thread_exit); }

ThreadState* thread_state() {
  if (t_state) return t_state;
  pthread_once(&g_process.thread_key_once, &make_thread_key);
  ThreadState* ts = static_cast<ThreadState*>(std::calloc(1, sizeof(ThreadState)));
  if (!ts) return nullptr;
  pthread_setspecific(g_process.thread_key, ts);
  t_state = ts;
  return ts;
}

ThreadCache* cache_of(ThreadState* ts, DevicePool* pool, int device) {
  if (!ts->caches[device]) ts->caches[device] = pool->attach_thread();
  return ts->caches[device];
}

// The slow half of the context lookup: the context changed, or it is time
// to re-check its device.
bool bind(const RealDriver* real, CUcontext context, Binding* out) {
  CUdevice device = 0;
  if (driver::ctx_get_device(real, &device) != CUDA_SUCCESS) return false;
  if (device < 0 || device >= kMaxDevices) return false;
  DeviceMemory* memory = nullptr;
  DevicePool* p = pool_made(real, device, &memory);
  if (!p) return false;
  ThreadState* ts = thread_state();
  if (!ts) return false;
  ThreadCache* c = cache_of(ts, p, int(device));
  if (!c) return false;
  memory->provider()->note_context(context);
  *out = Binding{p, c, context_tag(context, int(device))};
  ts->last.learn(context, *out);
  return true;
}

// A free through the pool's shared cache, under its lock: a region's pool
// (which has no per-thread caches), or a thread that could not get a cache
// of its own (host out of memory: the device's fallback cache).
FreeStatus free_on_shared(DevicePool* pool, policy::Span* span, uint64_t addr) {
  DeviceMemory* memory = device_memory(pool->device());
  const int slot = pool->settings().slot;
  std::lock_guard<std::mutex> guard(memory->shared_mutex(slot));
  return pool->free(*memory->shared_cache(slot), span, addr);
}

// A free of a region's block (its pool's shared cache), or the first free
// on this thread for this device (a cross-thread free): the thread's cache
// is made, or the device's fallback cache serves.
__attribute__((noinline)) FreeStatus free_without_cache(DevicePool* pool, policy::Span* span, uint64_t addr) {
  if (pool->settings().slot != 0) return free_on_shared(pool, span, addr);
  ThreadState* ts = thread_state();
  ThreadCache* cache = ts ? cache_of(ts, pool, pool->device()) : nullptr;
  return cache ? pool->free(*cache, span, addr) : free_on_shared(pool, span, addr);
}

CUresult alloc_result(AllocStatus status, uint64_t addr, CUdeviceptr* dptr) {
  *dptr = status == AllocStatus::Ok ? addr : 0;  // 0 as the driver leaves it
  return status == AllocStatus::Ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

// An allocation inside a region (region.h): from the pool of its slot, made
// at the first one. false: no such pool (the driver answers, untagged).
__attribute__((noinline)) bool alloc_in_region(int slot, int device, uint64_t bytes, policy::ContextTag context,
                                               CUdeviceptr* dptr, CUresult* result) {
  DeviceMemory* memory = device_memory(device);
  DevicePool* pool = memory && g_process.clock ? memory->tagged_pool_made(slot, *g_process.clock) : nullptr;
  if (!pool) return false;
  uint64_t addr = 0;
  AllocStatus status;
  while (true) {
    {
      // An allocation that would wait for wake fails at the gate instead:
      // it waits below, without the shared cache's lock, so that frees and
      // the other threads of the region (the sleeping thread among them,
      // which fails at once) are not held up behind it.
      policy::SleepGate::NoWait no_wait;
      std::lock_guard<std::mutex> guard(memory->shared_mutex(slot));
      status = pool->alloc(*memory->shared_cache(slot), bytes, &addr, context);
    }
    if (status != AllocStatus::OutOfMemory || !pool->asleep() || !pool->wait_for_wake()) break;
  }
  if (status == AllocStatus::Forward) return false;
  *result = alloc_result(status, addr, dptr);
  return true;
}

CUresult free_result(FreeStatus status) { return status == FreeStatus::Ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

// A pool's device is always in range: the flag alone, no bounds check.
inline bool retired(const DevicePool* pool) {
  return g_process.retired[pool->device()].load(std::memory_order_relaxed);
}

// The pool's record of an address, or NULL when the address is not pool
// memory any more: never made by the pool, or made by a retired pool,
// whose memory the driver freed with the context.
policy::Span* live_span(CUdeviceptr dptr) {
  policy::Span* span = policy::global_page_map().lookup(dptr);
  return span && !retired(span->pool) ? span : nullptr;
}

// alloc_or's answer for an active pool (false: not the pool's), inline.
__attribute__((always_inline)) inline bool alloc_active(CUdeviceptr* dptr, size_t bytes, CUresult* result) {
  const RealDriver* real = loaded_driver();
  CUcontext context = nullptr;
  // No current context: the driver answers CUDA_ERROR_INVALID_CONTEXT.
  if (driver::ctx_get_current(real, &context) != CUDA_SUCCESS || !context) return false;
  ThreadState* ts = t_state;
  if (__builtin_expect(!ts || !ts->last.holds(context), 0)) {
    Binding bound;
    if (!bind(real, context, &bound)) return false;
    ts = t_state;  // bind() made it, and learnt `bound` there
  }
  const Binding& known = ts->last.value;
  DevicePool* pool = known.pool;
  if (__builtin_expect(retired(pool), 0)) return false;
  if (const int slot = region::current(); __builtin_expect(slot != 0, 0))
    return alloc_in_region(slot, pool->device(), bytes, known.context, dptr, result);
  uint64_t addr = 0;
  switch (pool->alloc(*known.cache, bytes, &addr, known.context)) {
    case AllocStatus::Ok:
      *dptr = addr;
      *result = CUDA_SUCCESS;
      return true;
    case AllocStatus::OutOfMemory:
      *dptr = 0;  // as the driver leaves it
      *result = CUDA_ERROR_OUT_OF_MEMORY;
      return true;
    case AllocStatus::Forward: break;
  }
  return false;
}

}  // namespace

CUresult alloc_or(CUdeviceptr* dptr, size_t bytes, AllocForward forward) {
  CUresult result;
  if (__builtin_expect(active(), 1) && alloc_active(dptr, bytes, &result)) return result;
  return forward(dptr, bytes);
}

bool try_alloc_pitched(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes, size_t height, unsigned element_bytes,
                       CUresult* result) {
  if (!active() || region::current() == 0 || !dptr || !pitch) return false;
  const RealDriver* real = loaded_driver();
  CUdeviceptr probe = 0;
  size_t driver_pitch = 0;
  // The driver checks the arguments and chooses the layout; its answer to
  // bad arguments (or to no context) is the program's.
  if (driver::mem_alloc_pitch(real, &probe, &driver_pitch, width_bytes, height, element_bytes) != CUDA_SUCCESS)
    return false;
  driver::mem_free(real, probe);
  if (driver_pitch == 0 || height > SIZE_MAX / driver_pitch) return false;
  CUdeviceptr addr = 0;
  if (!alloc_active(&addr, driver_pitch * height, result)) return false;
  if (*result != CUDA_SUCCESS) return false;  // the driver may have memory the region's pool could not get
  *dptr = addr;
  *pitch = driver_pitch;
  return true;
}

// The driver answers CUDA_ERROR_INVALID_CONTEXT to these calls on a thread
// without a current context; so does the pool, by leaving them to it.
static bool has_context() {
  const RealDriver* real = loaded_driver();
  CUcontext context = nullptr;
  return driver::ctx_get_current(real, &context) == CUDA_SUCCESS && context;
}

namespace {

// free_or's answer for an active pool (false: not the pool's), inline.
__attribute__((always_inline)) inline bool free_active(CUdeviceptr dptr, CUresult* result) {
  policy::Span* span = live_span(dptr);
  // No current context needed: the driver frees a cuMemAlloc block on such
  // a thread too (docs/GPU-CHECK.md, run 3), and so does the pool.
  if (!span) return false;
  // An exported block an importer still maps is kept (ipc.h).
  if (__builtin_expect(ipc::g_exports.load(std::memory_order_relaxed) > 0, 0) && ipc::on_free(dptr, result))
    return true;
  DevicePool* pool = span->pool;
  ThreadState* ts = t_state;
  ThreadCache* cache = ts ? ts->caches[pool->device()] : nullptr;
  FreeStatus status;
  if (__builtin_expect(pool->settings().slot != 0 || !cache, 0))
    status = free_without_cache(pool, span, dptr);  // a region's block, or the thread's first free
  else status = pool->free(*cache, span, dptr);
  // An address that is no live block (freed, interior, or gone with its
  // context) on a thread without a context: the driver's answer for an
  // address it did not allocate (it needs a context to give one).
  if (__builtin_expect(status != FreeStatus::Ok, 0) && !has_context()) return false;
  *result = free_result(status);
  return true;
}

}  // namespace

CUresult free_or(CUdeviceptr dptr, FreeForward forward) {
  CUresult result;
  if (__builtin_expect(active(), 1) && free_active(dptr, &result)) return result;
  return forward(dptr);
}

bool try_free_async(CUdeviceptr dptr, CUstream stream, CUresult* result) {
  if (!active() || !live_span(dptr)) return false;
  if (capture_active()) {
    // In a capture the driver makes a free node, which only a graph
    // allocation may be: it answers for pool memory as for cuMemAlloc's.
    const RealDriver* real = loaded_driver();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver::stream_is_capturing(real, stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE)
      return false;
  }
  // The quarantine reuses a block only after a synchronisation that began
  // after its free, which waits for the stream's earlier work too.
  return free_active(dptr, result);
}

bool try_address_range(CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr, CUresult* result) {
  if (!active()) return false;
  policy::Span* span = live_span(dptr);
  if (!span || !has_context()) return false;
  policy::RangeInfo info{};
  if (!DevicePool::range_of(span, dptr, &info)) {
    // Pool memory that is in no live allocation: freed, as far as the
    // program is concerned.
    *result = CUDA_ERROR_NOT_FOUND;
    return true;
  }
  if (base) *base = info.base_addr;
  if (bytes) *bytes = info.bytes;
  *result = CUDA_SUCCESS;
  return true;
}

void patch_pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr dptr) {
  if (!active()) return;
  policy::Span* span = live_span(dptr);
  if (!span) return;
  policy::RangeInfo info{};
  if (!DevicePool::range_of(span, dptr, &info)) return;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = info.base_addr; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = info.bytes; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = info.buffer_id; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      // Truthful: cuIpcGetMemHandle works on pool memory where the
      // device's chunks can be shared (ipc.h).
      *static_cast<int*>(data) = ipc::device_shareable(span->pool->device()) ? 1 : 0;
      break;
    default: break;
  }
}

bool owns_address(CUdeviceptr dptr) { return active() && live_span(dptr); }

bool owns_handle(CUmemGenericAllocationHandle handle) {
  if (!active()) return false;
  bool held = false;
  for (int d = 0; d < kMaxDevices && !held; ++d) {
    DeviceMemory* memory = device_memory(d);
    if (!memory || retired_device(d)) continue;
    memory->each_pool([&held, handle](int, DevicePool* pool) {
      held = held || pool->holds_chunk(policy::ChunkHandle{uint64_t(handle)});
    });
  }
  return held;
}

bool try_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr, CUresult* result) {
  if (!active()) return false;
  policy::Span* span = live_span(dptr);
  if (!span) return false;
  // The driver needs a current context for this call; so does the pool.
  if (!has_context()) return false;
  *result = ipc::get_handle(span->pool, span, dptr, handle);
  return true;
}

bool try_ipc_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags, CUresult* result) {
  return ipc::try_open(pdptr, handle, flags, result);
}

bool try_ipc_close(CUdeviceptr dptr, CUresult* result) { return ipc::try_close(dptr, result); }

bool capture_active() { return g_process.gate.captures.load(std::memory_order_acquire) > 0; }

void free_on_behalf(const uint64_t* blocks, size_t count) {
  if (!active()) return;
  ThreadCache* temporary[kMaxDevices] = {};
  for (size_t i = 0; i < count; ++i) {
    policy::Span* span = live_span(blocks[i]);
    if (!span) continue;
    DevicePool* pool = span->pool;
    const int device = pool->device();
    // A region's pool has no per-thread caches: its shared one serves.
    const bool own_caches = pool->settings().slot == 0;
    if (own_caches && !temporary[device]) temporary[device] = pool->attach_thread();
    if (own_caches && temporary[device]) {
      pool->free(*temporary[device], span, blocks[i]);
      continue;
    }
    free_on_shared(pool, span, blocks[i]);
  }
  for (int d = 0; d < kMaxDevices; ++d)
    if (temporary[d]) temporary[d]->pool->detach_thread(temporary[d]);
}

void forget_context(int device, CUcontext context) {
  if (ThreadState* ts = t_state) ts->last.forget();
  DeviceMemory* memory = device_memory(device);
  if (memory && memory->pool()) memory->provider()->forget_context(context);
}

void on_capture_begin() {
  g_process.gate.captures.fetch_add(1, std::memory_order_seq_cst);
  // A sync that started before this capture was announced may still run:
  // wait for it, so none overlaps the capture from here on.
  while (g_process.gate.syncs_in_flight.load(std::memory_order_seq_cst) > 0) sched_yield();
}

void on_capture_end() {
  if (g_process.gate.captures.load(std::memory_order_relaxed) > 0)
    g_process.gate.captures.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace pagefast::pool
