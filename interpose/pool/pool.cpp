// interpose/pool/pool.cpp: interpose/pool_api.h's hot half over the
// policy: allocation, free, and the pointer queries, per thread through
// the last (context -> pool, cache) binding and a ThreadCache per device.
// The devices' memory is made and shared in devices.cpp.
//
// The hot path (try_alloc/try_free of a cached size) is: one relaxed load
// of the on-switch, cuCtxGetCurrent (a thread-local read in the driver, no
// system call), a compare with the thread's last context, and the policy's
// thread-cache pop or quarantine push. The context's device is re-read
// with cuCtxGetDevice when the context changes and every
// kRevalidateEvery allocations (interpose/context_memo.h).
//
// Nothing here runs CUDA from a static constructor or destructor: the
// process state (process.h) is constant-initialised, pools are made on
// first use and never destroyed (process exit leaks them; the OS reclaims
// the memory).
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <mutex>
#include <new>

#include "interpose/context_memo.h"
#include "interpose/driver.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/device_memory.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/process.h"
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

// A free on a thread that could not get a cache of its own (host out of
// memory): through the device's fallback cache, under its lock.
FreeStatus free_on_fallback(DevicePool* pool, policy::Span* span, uint64_t addr) {
  DeviceMemory* memory = device_memory(pool->device());
  std::lock_guard<std::mutex> guard(memory->fallback_mutex());
  return pool->free(*memory->fallback_cache(), span, addr);
}

CUresult free_result(FreeStatus status) { return status == FreeStatus::Ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

inline bool retired(const DevicePool* pool) { return retired_device(pool->device()); }

// The pool's record of an address, or NULL when the address is not pool
// memory any more: never made by the pool, or made by a retired pool,
// whose memory the driver freed with the context.
policy::Span* live_span(CUdeviceptr dptr) {
  policy::Span* span = policy::global_page_map().lookup(dptr);
  return span && !retired(span->pool) ? span : nullptr;
}

}  // namespace

bool try_alloc(CUdeviceptr* dptr, size_t bytes, CUresult* result) {
  if (__builtin_expect(!active(), 0)) return false;
  const RealDriver* real = loaded_driver();
  CUcontext context = nullptr;
  // No current context: the driver answers CUDA_ERROR_INVALID_CONTEXT.
  if (driver::ctx_get_current(real, &context) != CUDA_SUCCESS || !context) return false;
  ThreadState* ts = t_state;
  Binding known;
  if (__builtin_expect(!ts || !ts->last.recall(context, &known), 0) && !bind(real, context, &known)) return false;
  DevicePool* pool = known.pool;
  if (__builtin_expect(retired(pool), 0)) return false;
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

// The driver answers CUDA_ERROR_INVALID_CONTEXT to these calls on a thread
// without a current context; so does the pool, by leaving them to it.
static bool has_context() {
  const RealDriver* real = loaded_driver();
  CUcontext context = nullptr;
  return driver::ctx_get_current(real, &context) == CUDA_SUCCESS && context;
}

bool try_free(CUdeviceptr dptr, CUresult* result) {
  if (__builtin_expect(!active(), 0)) return false;
  policy::Span* span = live_span(dptr);
  // No current context needed: the driver frees a cuMemAlloc block on such
  // a thread too (docs/GPU-CHECK.md, run 3), and so does the pool.
  if (!span) return false;
  // An exported block an importer still maps is kept (ipc.h).
  if (__builtin_expect(ipc::g_exports.load(std::memory_order_relaxed) > 0, 0) && ipc::on_free(dptr, result))
    return true;
  DevicePool* pool = span->pool;
  const int device = pool->device();
  ThreadState* ts = t_state;
  ThreadCache* cache = ts ? ts->caches[device] : nullptr;
  FreeStatus status;
  if (__builtin_expect(!cache, 0)) {
    // First free on this thread for this device (a cross-thread free).
    ts = thread_state();
    cache = ts ? cache_of(ts, pool, device) : nullptr;
  }
  if (__builtin_expect(!cache, 0)) {
    status = free_on_fallback(pool, span, dptr);
  } else {
    status = pool->free(*cache, span, dptr);
  }
  // An address that is no live block (freed, interior, or gone with its
  // context) on a thread without a context: the driver's answer for an
  // address it did not allocate (it needs a context to give one).
  if (__builtin_expect(status != FreeStatus::Ok, 0) && !has_context()) return false;
  *result = free_result(status);
  return true;
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
  return try_free(dptr, result);
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
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool* pool = pool_for_device(d);
    if (pool && !retired(pool) && pool->holds_chunk(policy::ChunkHandle{uint64_t(handle)})) return true;
  }
  return false;
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
    if (!temporary[device]) temporary[device] = pool->attach_thread();
    if (temporary[device]) {
      pool->free(*temporary[device], span, blocks[i]);
      continue;
    }
    free_on_fallback(pool, span, blocks[i]);
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
