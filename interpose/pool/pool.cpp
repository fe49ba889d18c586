// interpose/pool/pool.cpp: interpose/pool_api.h over the policy. Owns the
// process-wide pool state: one DevicePool (with its VmmProvider) per
// device, made at the first allocation on that device; per thread, the
// last (context -> pool, cache) binding and a ThreadCache per device.
//
// The hot path (try_alloc/try_free of a cached size) is: one relaxed load
// of the on-switch, cuCtxGetCurrent (a thread-local read in the driver, no
// system call), a compare with the thread's last context, and the policy's
// thread-cache pop or quarantine push. The context's device is re-read
// with cuCtxGetDevice when the context changes and every
// kRevalidateEvery allocations (interpose/context_memo.h).
//
// Nothing here runs CUDA from a static constructor or destructor: every
// global is constant-initialised, pools are made on first use and never
// destroyed (process exit leaks them; the OS reclaims the memory).
// fork(): the child has the parent's memory but not its CUDA contexts;
// the pool switches itself off there and forwards everything.
#include <pthread.h>
#include <sched.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "interpose/context_memo.h"
#include "interpose/ipc/ipc.h"
#include "interpose/pool/own_vmm.h"
#include "interpose/pool/pool_internal.h"
#include "interpose/pool/vmm_provider.h"
#include "interpose/pool_api.h"
#include "interpose/real_driver.h"
#include "policy/clock.h"
#include "policy/device_budget.h"
#include "policy/device_pool.h"
#include "policy/format.h"
#include "policy/page_map.h"
#include "policy/pool_report.h"

namespace pagefast::pool {
namespace {

using policy::AllocStatus;
using policy::DevicePool;
using policy::FreeStatus;
using policy::ThreadCache;

static_assert(kMaxDevices <= policy::kMaxPeerDevices, "every pooled device must fit in a peer set");
constexpr size_t kLogLineBytes = 512;

// Constant-initialised process state (no dynamic initialiser may run: a
// hook can be reached from another library's constructor before ours).
std::atomic<bool> g_active{false};  // configured on, and not a forked child
PoolConfig g_config;
LogSink g_log = nullptr;
CaptureGate g_gate;
std::atomic<const RealDriver*> g_real{nullptr};
std::mutex g_create_mutex;
std::atomic<DevicePool*> g_pools[kMaxDevices];
std::atomic<bool> g_unpoolable[kMaxDevices];
// Devices whose primary context was reset or destroyed: their pool is
// retired for good (on_device_reset) and never touched again.
std::atomic<bool> g_retired[kMaxDevices];
VmmProvider* g_providers[kMaxDevices];
// For a thread that cannot get a cache of its own (host out of memory).
ThreadCache* g_fallback_caches[kMaxDevices];
std::mutex g_fallback_mutex;
policy::MonotonicClock* g_clock = nullptr;
// Peer access granted: g_peer_grants[owner][accessor] counts the context
// pairs (accessor's context -> owner's context) with peer access enabled.
// Under g_create_mutex, so a pool being made sees every grant.
int g_peer_grants[kMaxDevices][kMaxDevices];
// Per device: what pagefast holds idle there, and the headroom it leaves
// the driver (policy/device_budget.h). Made with the device's pool or at
// the first out-of-memory answer there; never destroyed.
std::atomic<policy::DeviceBudget*> g_budgets[kMaxDevices];
std::atomic<uint64_t> g_oom_retries[kMaxDevices];

// The own-VMM cache's memory of one device, as a holder of the budget.
class ClientIdle final : public policy::IdleMemory {
 public:
  explicit ClientIdle(int device) : device_(device) {}
  uint64_t idle_bytes() override { return own_vmm::cached_bytes(device_); }
  uint64_t give_back(uint64_t bytes) override { return own_vmm::trim(device_, bytes); }

 private:
  const int device_;
};

pthread_key_t g_thread_key;
pthread_once_t g_thread_key_once = PTHREAD_ONCE_INIT;
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

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

void free_held_block(CUdeviceptr dptr);

void log_line(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));
void log_line(LogLevel level, const char* format, ...) {
  if (!g_log) return;
  char line[kLogLineBytes];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  g_log(level, line);
}

std::string human_bytes(uint64_t bytes) { return format_bytes(bytes, ByteStyle::Exact); }

const RealDriver* driver() {
  const RealDriver* real = g_real.load(std::memory_order_acquire);
  if (__builtin_expect(!real, 0)) {
    real = real_driver();
    g_real.store(real, std::memory_order_release);
  }
  return real;
}

void on_thread_exit(void* state) {
  ThreadState* ts = static_cast<ThreadState*>(state);
  t_state = nullptr;
  // No driver call here: a flush only moves blocks between host lists.
  if (g_active.load(std::memory_order_acquire))
    for (ThreadCache* cache : ts->caches)
      if (cache) cache->pool->detach_thread(cache);
  std::free(ts);
}

void make_thread_key() { pthread_key_create(&g_thread_key, &on_thread_exit); }

void child_after_fork() {
  g_active.store(false, std::memory_order_release);
  own_vmm::switch_off();
}
void register_atfork() { pthread_atfork(nullptr, nullptr, &child_after_fork); }

ThreadState* thread_state() {
  if (t_state) return t_state;
  pthread_once(&g_thread_key_once, &make_thread_key);
  ThreadState* ts = static_cast<ThreadState*>(std::calloc(1, sizeof(ThreadState)));
  if (!ts) return nullptr;
  pthread_setspecific(g_thread_key, ts);
  t_state = ts;
  return ts;
}

// REQUIRES: g_create_mutex. The device's budget, made (with the client
// cache as its first holder) if there is none; NULL on host out of memory.
policy::DeviceBudget* budget_locked(int device) {
  if (policy::DeviceBudget* made = g_budgets[device].load(std::memory_order_acquire)) return made;
  auto* budget = new (std::nothrow) policy::DeviceBudget(g_config.headroom_bytes);
  if (!budget) return nullptr;
  // The cache's released pages go first: the pool's idle memory is what
  // its threads' next allocations hit.
  if (auto* client = new (std::nothrow) ClientIdle(device)) budget->add(client);
  g_budgets[device].store(budget, std::memory_order_release);
  return budget;
}

DevicePool* pool_of(const RealDriver* real, CUdevice device) {
  if (DevicePool* p = g_pools[device].load(std::memory_order_acquire)) return p;
  if (g_unpoolable[device].load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> guard(g_create_mutex);
  if (DevicePool* p = g_pools[device].load(std::memory_order_acquire)) return p;
  if (g_unpoolable[device].load(std::memory_order_relaxed)) return nullptr;
  std::string why;
  VmmProvider* provider = VmmProvider::create(real, device, &g_gate, g_log, &why);
  if (!g_clock) g_clock = new (std::nothrow) policy::MonotonicClock();
  if (!provider || !g_clock) {
    g_unpoolable[device].store(true, std::memory_order_release);
    log_line(LogLevel::Info, "device %d is not pooled: %s; its allocations go to the driver", int(device),
             provider ? "out of host memory" : why.c_str());
    return nullptr;
  }
  policy::PoolSettings settings;
  settings.config = g_config;
  settings.device_total_bytes = provider->device_total_bytes();
  settings.device = int(device);
  DevicePool* pool = new (std::nothrow) DevicePool(*provider, *g_clock, policy::global_page_map(), settings, g_log);
  ThreadCache* fallback = pool ? pool->attach_thread() : nullptr;
  if (!fallback) {
    g_unpoolable[device].store(true, std::memory_order_release);
    log_line(LogLevel::Info, "device %d is not pooled: out of host memory", int(device));
    return nullptr;  // leaked: a few bytes, once
  }
  g_providers[device] = provider;
  g_fallback_caches[device] = fallback;
  if (policy::DeviceBudget* budget = budget_locked(int(device))) budget->add(pool);
  for (int accessor = 0; accessor < kMaxDevices; ++accessor)
    if (g_peer_grants[device][accessor] > 0) pool->add_peer(accessor);  // no mapping yet: no driver call
  pool->prewarm();
  g_pools[device].store(pool, std::memory_order_release);
  start_trim_thread(g_config);
  if (g_config.control) ipc::start_control();
  log_line(LogLevel::Info, "device %d pooled: chunk %s, release threshold %s, limit %s, prewarm %s, reserve %s",
           int(device), human_bytes(g_config.chunk_bytes).c_str(),
           human_bytes(g_config.release_threshold_bytes).c_str(),
           g_config.limit_bytes ? human_bytes(g_config.limit_bytes).c_str() : "none",
           human_bytes(g_config.prewarm_bytes).c_str(),
           g_config.reserve_bytes ? human_bytes(g_config.reserve_bytes).c_str() : "auto");
  return pool;
}

ThreadCache* cache_of(ThreadState* ts, DevicePool* pool, int device) {
  if (!ts->caches[device]) ts->caches[device] = pool->attach_thread();
  return ts->caches[device];
}

// The slow half of the context lookup: the context changed, or it is time
// to re-check its device.
bool bind(const RealDriver* real, CUcontext context, Binding* out) {
  CUdevice device = 0;
  if (!real->cuCtxGetDevice || real->cuCtxGetDevice(&device) != CUDA_SUCCESS) return false;
  if (device < 0 || device >= kMaxDevices) return false;
  DevicePool* p = pool_of(real, device);
  if (!p) return false;
  ThreadState* ts = thread_state();
  if (!ts) return false;
  ThreadCache* c = cache_of(ts, p, int(device));
  if (!c) return false;
  g_providers[device]->note_context(context);
  *out = Binding{p, c, context_tag(context, int(device))};
  ts->last.learn(context, *out);
  return true;
}

CUresult free_result(FreeStatus status) { return status == FreeStatus::Ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

inline bool retired_device(int device) {
  return device >= 0 && device < kMaxDevices && g_retired[device].load(std::memory_order_relaxed);
}
inline bool retired(const DevicePool* pool) { return retired_device(pool->device()); }

// The pool's record of an address, or NULL when the address is not pool
// memory any more: never made by the pool, or made by a retired pool,
// whose memory the driver freed with the context.
policy::Span* live_span(CUdeviceptr dptr) {
  policy::Span* span = policy::global_page_map().lookup(dptr);
  return span && !retired(span->pool) ? span : nullptr;
}

}  // namespace

DevicePool* pool_for_device(int device) {
  if (device < 0 || device >= kMaxDevices || !g_active.load(std::memory_order_acquire)) return nullptr;
  return g_pools[device].load(std::memory_order_acquire);
}

bool pool_active() { return g_active.load(std::memory_order_acquire); }

void pool_log(LogLevel level, const char* line) {
  if (g_log) g_log(level, line);
}

void on_device_reset(int device) {
  if (device < 0 || device >= kMaxDevices || !g_active.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> guard(g_create_mutex);
  if (g_retired[device].exchange(true)) return;
  own_vmm::on_device_reset(device);
  g_unpoolable[device].store(true, std::memory_order_release);
  // The old pool object stays (leaked on purpose): another thread may be
  // inside it right now, and its chunks may be gone with the context, so
  // nothing is unmapped or released through it.
  // Info, not a warning: the CUDA runtime's own teardown at exit may release
  // the primary context, and that is no news to the user.
  if (g_pools[device].exchange(nullptr, std::memory_order_acq_rel))
    log_line(LogLevel::Info,
             "the primary context of device %d was reset or destroyed, and with it the device's memory: "
             "pagefast's pool of that device is retired and its allocations go to the driver from now on",
             device);
}

void configure(const PoolConfig& config, LogSink log) {
  g_config = config;
  g_log = log;
  if (!config.enabled) return;
  own_vmm::configure(config, log);
  pthread_once(&g_atfork_once, &register_atfork);
  ipc::set_free_held(&free_held_block);
  ipc::set_control(&control_op);
  g_active.store(true, std::memory_order_release);
}

bool try_alloc(CUdeviceptr* dptr, size_t bytes, CUresult* result) {
  if (__builtin_expect(!g_active.load(std::memory_order_acquire), 0)) return false;
  const RealDriver* real = driver();
  if (!real || !real->cuCtxGetCurrent) return false;
  CUcontext context = nullptr;
  // No current context: the driver answers CUDA_ERROR_INVALID_CONTEXT.
  if (real->cuCtxGetCurrent(&context) != CUDA_SUCCESS || !context) return false;
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
  const RealDriver* real = driver();
  CUcontext context = nullptr;
  return real && real->cuCtxGetCurrent && real->cuCtxGetCurrent(&context) == CUDA_SUCCESS && context;
}

bool try_free(CUdeviceptr dptr, CUresult* result) {
  if (__builtin_expect(!g_active.load(std::memory_order_acquire), 0)) return false;
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
    std::lock_guard<std::mutex> guard(g_fallback_mutex);
    status = pool->free(*g_fallback_caches[device], span, dptr);
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
  if (!g_active.load(std::memory_order_acquire) || !live_span(dptr)) return false;
  if (capture_active()) {
    // In a capture the driver makes a free node, which only a graph
    // allocation may be: it answers for pool memory as for cuMemAlloc's.
    const RealDriver* real = driver();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!real || !real->cuStreamIsCapturing || real->cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_NONE)
      return false;
  }
  // The quarantine reuses a block only after a synchronisation that began
  // after its free, which waits for the stream's earlier work too.
  return try_free(dptr, result);
}

bool try_address_range(CUdeviceptr* base, size_t* bytes, CUdeviceptr dptr, CUresult* result) {
  if (!g_active.load(std::memory_order_acquire)) return false;
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
  if (!g_active.load(std::memory_order_acquire)) return;
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

bool owns_address(CUdeviceptr dptr) { return g_active.load(std::memory_order_acquire) && live_span(dptr); }

bool owns_handle(CUmemGenericAllocationHandle handle) {
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool* pool = pool_for_device(d);
    if (pool && !retired(pool) && pool->holds_chunk(policy::ChunkHandle{uint64_t(handle)})) return true;
  }
  return false;
}

bool try_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr, CUresult* result) {
  if (!g_active.load(std::memory_order_acquire)) return false;
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

bool capture_active() { return g_gate.captures.load(std::memory_order_acquire) > 0; }

namespace {

// A block the program freed while an importer held it, given back by the
// exporter thread once the last importer closed (ipc.h). That thread has no
// cache of its own worth keeping: a temporary one takes the free and hands
// its quarantine on at once.
void free_held_block(CUdeviceptr dptr) {
  const uint64_t block = dptr;
  free_on_behalf(&block, 1);
}

}  // namespace

void free_on_behalf(const uint64_t* blocks, size_t count) {
  if (!g_active.load(std::memory_order_acquire)) return;
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
    std::lock_guard<std::mutex> guard(g_fallback_mutex);
    pool->free(*g_fallback_caches[device], span, blocks[i]);
  }
  for (int d = 0; d < kMaxDevices; ++d)
    if (temporary[d]) temporary[d]->pool->detach_thread(temporary[d]);
}

void forget_context(int device, CUcontext context) {
  if (ThreadState* ts = t_state) ts->last.forget();
  if (device >= 0 && device < kMaxDevices && g_pools[device].load(std::memory_order_acquire))
    g_providers[device]->forget_context(context);
}

namespace {

// The calling thread's context's device; -1 when there is none.
int current_device() {
  const RealDriver* real = driver();
  CUdevice device = 0;
  if (!real || !real->cuCtxGetDevice || real->cuCtxGetDevice(&device) != CUDA_SUCCESS) return -1;
  return device >= 0 && device < kMaxDevices ? int(device) : -1;
}

}  // namespace

bool release_idle_for_driver(int device) {
  if (!g_active.load(std::memory_order_acquire)) return false;
  if (device == kCurrentDevice) device = current_device();
  else if (device < 0 || device >= kMaxDevices) return false;
  uint64_t released = 0;
  bool held = false;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (device >= 0 && d != device) continue;
    policy::DeviceBudget* budget;
    {
      std::lock_guard<std::mutex> guard(g_create_mutex);
      budget = d == device ? budget_locked(d) : g_budgets[d].load(std::memory_order_acquire);
    }
    if (!budget || retired_device(d)) continue;
    held = true;
    const uint64_t given = budget->release_all();
    if (given) g_oom_retries[d].fetch_add(1, std::memory_order_relaxed);
    released += given;
  }
  if (released)
    log_line(LogLevel::Debug, "the driver answered out of memory: %s of idle memory given back, retrying once",
             human_bytes(released).c_str());
  // A retry also when nothing went back here: the pagefast-trim thread may
  // have given the same idle memory back between the refused call and this
  // reclaim (it keeps the headroom), and then the memory is free already.
  return held;
}

void make_room_for_managed(size_t bytes) {
  if (!g_active.load(std::memory_order_acquire)) return;
  const int device = current_device();
  if (device < 0 || retired_device(device)) return;
  policy::DeviceBudget* budget = g_budgets[device].load(std::memory_order_acquire);
  if (!budget || budget->idle_bytes() == 0) return;
  const RealDriver* real = driver();
  size_t free_now = 0, total = 0;
  if (!real->cuMemGetInfo_v2 || real->cuMemGetInfo_v2(&free_now, &total) != CUDA_SUCCESS) return;
  // As if the managed pages were on the device already.
  budget->relieve(free_now > bytes ? free_now - bytes : 0);
}

void relieve_headroom() {
  if (!g_active.load(std::memory_order_acquire)) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool* pool = pool_for_device(d);
    policy::DeviceBudget* budget = pool ? g_budgets[d].load(std::memory_order_acquire) : nullptr;
    if (!budget || !budget->headroom_bytes() || budget->idle_bytes() == 0) continue;
    uint64_t free_now = 0;
    if (!g_providers[d]->device_free_bytes(&free_now)) continue;
    if (const uint64_t given = budget->relieve(free_now))
      log_line(LogLevel::Debug, "device %d: %s free, under the headroom of %s: %s of idle memory given back", d,
               human_bytes(free_now).c_str(), human_bytes(budget->headroom_bytes()).c_str(),
               human_bytes(given).c_str());
  }
}

void adjust_mem_info(size_t* free_bytes, size_t* total_bytes) {
  if (!g_active.load(std::memory_order_acquire)) return;
  const RealDriver* real = driver();
  CUdevice device = 0;
  if (!real || !real->cuCtxGetDevice || real->cuCtxGetDevice(&device) != CUDA_SUCCESS) return;
  DevicePool* pool = pool_for_device(int(device));
  // Before the first allocation there is no pool yet, but the limit holds.
  const uint64_t limit = pool ? pool->limit_bytes() : g_config.limit_bytes;
  // Memory the program released into the own-VMM cache is free too.
  const uint64_t cached = own_vmm::cached_bytes(int(device));
  if (!pool && !limit && !cached) return;
  const uint64_t idle = (pool ? pool->idle_bytes() : 0) + cached;
  if (limit) {
    const uint64_t in_use = pool ? pool->in_use_bytes() : 0;
    uint64_t left = limit > in_use ? limit - in_use : 0;
    // Never more than the device could actually back.
    if (free_bytes && *free_bytes + idle < left) left = *free_bytes + idle;
    if (free_bytes) *free_bytes = left;
    if (total_bytes) *total_bytes = limit;
    return;
  }
  if (free_bytes) {
    uint64_t free_now = *free_bytes + idle;
    if (total_bytes && free_now > *total_bytes) free_now = *total_bytes;
    *free_bytes = free_now;
  }
}

static void change_peer_access(int accessor, int owner, bool enabled) {
  if (!g_active.load(std::memory_order_acquire)) return;
  if (accessor < 0 || accessor >= kMaxDevices || owner < 0 || owner >= kMaxDevices || accessor == owner) return;
  std::lock_guard<std::mutex> guard(g_create_mutex);
  int& grants = g_peer_grants[owner][accessor];
  if (enabled) {
    if (grants++ > 0) return;  // another context pair granted it already
  } else {
    if (grants == 0 || --grants > 0) return;  // still granted through another pair
  }
  DevicePool* pool = g_pools[owner].load(std::memory_order_acquire);
  if (!pool) return;  // made later, with the grants
  const int refused = enabled ? pool->add_peer(accessor) : pool->remove_peer(accessor);
  if (refused)
    log_line(LogLevel::Warn, "peer access: %d mapping(s) of device %d's pool refused to %s device %d; %s", refused,
             owner, enabled ? "open to" : "close to", accessor,
             enabled ? "peer copies and kernels on them may fault (run with PAGEFAST_CONF=pool:off if so)"
                     : "that device keeps access to them");
}

void on_peer_access_enabled(int accessor, int owner) { change_peer_access(accessor, owner, true); }
void on_peer_access_disabled(int accessor, int owner) { change_peer_access(accessor, owner, false); }

void on_capture_begin() {
  g_gate.captures.fetch_add(1, std::memory_order_seq_cst);
  // A sync that started before this capture was announced may still run:
  // wait for it, so none overlaps the capture from here on.
  while (g_gate.syncs_in_flight.load(std::memory_order_seq_cst) > 0) sched_yield();
}

void on_capture_end() {
  if (g_gate.captures.load(std::memory_order_relaxed) > 0) g_gate.captures.fetch_sub(1, std::memory_order_seq_cst);
}

namespace {

policy::PoolStats device_stats(DevicePool* pool, int device) {
  policy::PoolStats s = pool->stats();
  if (const policy::DeviceBudget* budget = g_budgets[device].load(std::memory_order_acquire)) {
    const policy::DeviceBudget::Counters c = budget->counters();
    s.headroom_relieved_bytes = c.relieved_bytes;
    s.oom_released_bytes = c.released_bytes;
  }
  s.oom_retries = g_oom_retries[device].load(std::memory_order_relaxed);
  return s;
}

}  // namespace

bool stats_of(int device, policy::PoolStats* out) {
  DevicePool* pool = pool_for_device(device);
  if (!pool) return false;
  *out = device_stats(pool, device);
  return true;
}

std::string stats_json() {
  // A labelled list (docs/STATS.md): {"device": 0, <the pool fields>}.
  std::string text = "{\"devices\": [";
  bool first = true;
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool* pool = pool_for_device(d);
    if (!pool) continue;
    const std::string fields = policy::stats_json_object(device_stats(pool, d));  // "{...}"
    text += first ? "{\"device\": " : ", {\"device\": ";
    text += std::to_string(d) + (fields.size() > 2 ? ", " : "") + fields.substr(1);
    first = false;
  }
  return text + "]}";
}

std::string report_text() {
  std::string text;
  for (int d = 0; d < kMaxDevices; ++d)
    if (DevicePool* pool = pool_for_device(d)) text += policy::report_text(d, pool->report());
  return text;
}

}  // namespace pagefast::pool
