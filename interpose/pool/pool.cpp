// interpose/pool/pool.cpp: interpose/pool_api.h's hot half over the
// policy: allocation and free, per thread through the last (context ->
// pool, cache) binding and a ThreadCache per device. The devices' memory
// is made and shared in devices.cpp, the pointer queries are queries.cpp.
//
// The hot path (alloc_or/free_or of a cached size, each one function with
// the policy's hit inline, policy/device_pool_hit.h) is: one load of the
// on-switch, for an allocation cuCtxGetCurrent (a thread-local read in
// the driver, no system call) and a compare with the thread's last
// context, for a free the page map, and the policy's thread-cache pop or
// quarantine push. The hit calls nothing but cuCtxGetCurrent: a miss, a
// seal, a region, a refused free are each a tail call of a function of
// their own, so that the free keeps no frame and the allocation only the
// one its call of the driver needs. The context's device is re-read
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
  if (!ts->caches[device]) ts->caches[device] = pool->attach_own_thread();
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
  policy::ThreadCache& cache = *memory->shared_cache(slot);
  policy::OwnerLock::Borrow borrow(cache.lock);  // its owner while the mutex is held
  return pool->free(cache, span, addr);
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
      policy::ThreadCache& cache = *memory->shared_cache(slot);
      policy::OwnerLock::Borrow borrow(cache.lock);
      status = pool->alloc(cache, bytes, &addr, context);
    }
    if (status != AllocStatus::OutOfMemory || !pool->asleep() || !pool->wait_for_wake()) break;
  }
  if (status == AllocStatus::Forward) return false;
  *result = alloc_result(status, addr, dptr);
  return true;
}

// An allocation of a thread bound to a context (`known`), past the memo:
// the device's pool, or a region's (false: not the pool's), inline.
__attribute__((always_inline)) inline bool alloc_bound(const Binding& known, CUdeviceptr* dptr, size_t bytes,
                                                       CUresult* result) {
  DevicePool* pool = known.pool;
  if (__builtin_expect(retired(pool), 0)) return false;
  if (const int slot = region::current(); __builtin_expect(slot != 0, 0))
    return alloc_in_region(slot, pool->device(), bytes, known.context, dptr, result);
  uint64_t addr = 0;
  const AllocStatus status = pool->alloc(*known.cache, bytes, &addr, known.context);
  if (status == AllocStatus::Forward) return false;
  *result = alloc_result(status, addr, dptr);
  return true;
}

// The allocation of a thread whose memo does not hold `context` (its first,
// a context changed, the memo's revalidation): bind, then as bound.
__attribute__((noinline)) CUresult alloc_unbound(CUcontext context, CUdeviceptr* dptr, size_t bytes,
                                                 AllocForward forward) {
  Binding bound;
  CUresult result;
  // bind() made the thread's state and learnt `bound` there.
  if (bind(loaded_driver(), context, &bound) && alloc_bound(t_state->last.value, dptr, bytes, &result)) return result;
  return forward(dptr, bytes);
}

// A bound allocation that missed the thread's cache, or a region's.
__attribute__((noinline)) CUresult alloc_missed(DevicePool* pool, ThreadCache* cache, policy::ContextTag tag,
                                                CUdeviceptr* dptr, size_t bytes, AllocForward forward) {
  uint64_t addr = 0;
  const AllocStatus status = pool->alloc_miss(*cache, bytes, &addr, tag);
  if (status == AllocStatus::Forward) return forward(dptr, bytes);
  return alloc_result(status, addr, dptr);
}
__attribute__((noinline)) CUresult alloc_in_region_or(int slot, int device, policy::ContextTag tag, CUdeviceptr* dptr,
                                                      size_t bytes, AllocForward forward) {
  CUresult result;
  if (alloc_in_region(slot, device, bytes, tag, dptr, &result)) return result;
  return forward(dptr, bytes);
}

// The pool hit of a thread with a current context: the memo, the pool's
// flags, the thread cache's pop. Every other way out is a tail call, so
// that the hit keeps no frame.
__attribute__((always_inline)) inline CUresult alloc_in_context(CUcontext context, CUdeviceptr* dptr, size_t bytes,
                                                                AllocForward forward) {
  ThreadState* ts = t_state;
  if (__builtin_expect(!ts || !ts->last.holds(context), 0)) return alloc_unbound(context, dptr, bytes, forward);
  const Binding& known = ts->last.value;
  DevicePool* pool = known.pool;
  if (__builtin_expect(retired(pool), 0)) return forward(dptr, bytes);
  if (const int slot = region::current(); __builtin_expect(slot != 0, 0))
    return alloc_in_region_or(slot, pool->device(), known.context, dptr, bytes, forward);
  uint64_t addr;
  if (__builtin_expect(pool->alloc_hit(*known.cache, bytes, &addr, known.context), 1)) {
    *dptr = addr;
    return CUDA_SUCCESS;
  }
  return alloc_missed(pool, known.cache, known.context, dptr, bytes, forward);
}

// alloc_or's answer for an active pool (false: not the pool's).
bool alloc_active(CUdeviceptr* dptr, size_t bytes, CUresult* result) {
  CUcontext context = nullptr;
  // No current context: the driver answers CUDA_ERROR_INVALID_CONTEXT.
  if (driver::ctx_get_current(loaded_driver(), &context) != CUDA_SUCCESS || !context) return false;
  ThreadState* ts = t_state;
  if (ts && ts->last.holds(context)) return alloc_bound(ts->last.value, dptr, bytes, result);
  Binding bound;
  return bind(loaded_driver(), context, &bound) && alloc_bound(t_state->last.value, dptr, bytes, result);
}

}  // namespace

CUresult alloc_or(CUdeviceptr* dptr, size_t bytes, AllocForward forward) {
  if (__builtin_expect(!active(), 0)) return forward(dptr, bytes);
  CUcontext context;
  {
    // Its own scope, dead before the calls below, which are then tail calls.
    CUcontext current = nullptr;
    // No current context: the driver answers CUDA_ERROR_INVALID_CONTEXT.
    if (driver::ctx_get_current(loaded_driver(), &current) != CUDA_SUCCESS || !current) return forward(dptr, bytes);
    context = current;
  }
  return alloc_in_context(context, dptr, bytes, forward);
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

bool has_context() {
  const RealDriver* real = loaded_driver();
  CUcontext context = nullptr;
  return driver::ctx_get_current(real, &context) == CUDA_SUCCESS && context;
}

namespace {

CUresult free_result(FreeStatus status) { return status == FreeStatus::Ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

// The free of pool memory (`span`, live) past the hit's conditions: an
// exported block, a region's block, the thread's first free of the device
// (false: not the pool's).
bool free_span(policy::Span* span, CUdeviceptr dptr, CUresult* result) {
  // An exported block an importer still maps is kept (ipc.h); only a block
  // with the export mark can have an export.
  if (__builtin_expect(DevicePool::exported(span, dptr), 0) && ipc::on_free(dptr, result)) return true;
  DevicePool* pool = span->pool;
  ThreadState* ts = t_state;
  ThreadCache* cache = ts ? ts->caches[pool->device()] : nullptr;
  FreeStatus status;
  if (pool->settings().slot != 0 || !cache) status = free_without_cache(pool, span, dptr);
  else status = pool->free(*cache, span, dptr);
  // An address that is no live block (freed, interior, or gone with its
  // context) on a thread without a context: the driver's answer for an
  // address it did not allocate (it needs a context to give one).
  if (status != FreeStatus::Ok && !has_context()) return false;
  *result = free_result(status);
  return true;
}

__attribute__((noinline)) CUresult free_other(policy::Span* span, CUdeviceptr dptr, FreeForward forward) {
  CUresult result;
  if (free_span(span, dptr, &result)) return result;
  return forward(dptr);
}

// The hit's checks refused the address (nothing changed): as free_span.
__attribute__((noinline)) CUresult free_refused(CUdeviceptr dptr, FreeForward forward) {
  if (!has_context()) return forward(dptr);
  return CUDA_ERROR_INVALID_VALUE;
}

// The free is the pool's: its batch to seal, or to be pushed on a new one.
__attribute__((noinline)) CUresult free_finished(DevicePool* pool, ThreadCache* cache, DevicePool::FreeStep step,
                                                 policy::Span* span, CUdeviceptr dptr) {
  pool->free_finish(step, *cache, span, dptr);
  return CUDA_SUCCESS;
}

}  // namespace

// No current context needed: the driver frees a cuMemAlloc block on such a
// thread too (docs/GPU-CHECK.md, run 3), and so does the pool. The hit
// (a block of the device's pool, the thread's cache, not exported) keeps
// no frame: every other way out is a tail call. A block CUDA IPC exported
// carries a mark (DevicePool::mark_exported) that sends its free to
// free_other, where IPC decides first; the frees of every other block stay
// hits while exports live.
CUresult free_or(CUdeviceptr dptr, FreeForward forward) {
  if (__builtin_expect(!active(), 0)) return forward(dptr);
  policy::Span* span = live_span(dptr);
  if (!span) return forward(dptr);
  DevicePool* pool = span->pool;
  ThreadState* ts = t_state;
  ThreadCache* cache = ts ? ts->caches[pool->device()] : nullptr;
  if (__builtin_expect(!cache || pool->settings().slot != 0, 0)) return free_other(span, dptr, forward);
  const DevicePool::FreeStep step = pool->free_step(*cache, span, dptr, true);
  if (__builtin_expect(step == DevicePool::FreeStep::Done, 1)) return CUDA_SUCCESS;
  if (step == DevicePool::FreeStep::Invalid) return free_refused(dptr, forward);
  if (step == DevicePool::FreeStep::Exported) return free_other(span, dptr, forward);
  return free_finished(pool, cache, step, span, dptr);
}

bool try_free_async(CUdeviceptr dptr, CUstream stream, CUresult* result) {
  if (!active()) return false;
  policy::Span* span = live_span(dptr);
  if (!span) return false;
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
  return free_span(span, dptr, result);
}

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

CaptureGate g_capture_gate;

void wait_for_syncs_in_flight() {
  // A sync that started before this capture was announced may still run:
  // wait for it, so none overlaps the capture from here on.
  while (g_capture_gate.syncs_in_flight.load(std::memory_order_seq_cst) > 0) sched_yield();
}

}  // namespace pagefast::pool
